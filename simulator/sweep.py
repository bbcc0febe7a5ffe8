"""Sweeps: strategies × seeds × truths × arrival rates, fanned out through Dask distributed.

A *cell* is one (strategy, seed, truth, arrival rate): it generates the trace for (jobs, seed,
rate), runs the strategy over it under the truth (`simulator.compare.compare`) and returns
the strategy's report as a small dict. Cells share nothing and every draw in them is seeded,
so where and in which order they run changes nothing: a sweep on a Dask cluster gives exactly
the numbers of the same cells run one after the other (`run_serial`), and its size is bounded
by the cluster's cores, not by one process.

Statistics: per (strategy, truth, rate), the mean over seeds of `deadline_met`,
`total_cost_usd` and `mean_cost_usd`, with a 95% Student t interval over seeds. The seeds
are the independent replications: each draws its own trace and its own runs. The jobs within
one run are not independent (they queue for the same pool, and a job's start depends on the
jobs before it), so a per-job interval would be too narrow; a run's figure is one
observation, and with a handful of seeds and an unknown variance the t distribution (not the
normal) gives the interval's width. With one seed there is no interval (`None`, with why).

Dask is imported only when a sweep runs on it (`pip install 'lambdadnn[sweep]'`), matplotlib
only when figures are drawn.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.compare import compare, plot_folder, save_figure
from lambdadnn.simulator.defaults import DEFAULT_GUARANTEE, DEFAULT_POOL_SIZE, MAX_JOBS
from lambdadnn.simulator.strategies import check_names
from lambdadnn.simulator.trace import DEFAULT_RATE_PER_S, Job, check_seed, generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

Progress = Callable[[int, int], None]
METRICS = ("deadline_met", "total_cost_usd", "mean_cost_usd")
CONFIDENCE = 0.95
INSTALL = "pip install 'lambdadnn[sweep]'"
CONNECT_TIMEOUT_S = 10.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a strategy over the trace of (seed, rate) under a truth."""

    strategy: str
    seed: int
    truth: Truth
    rate_per_s: float


@dataclass(frozen=True)
class Setup:
    """What every cell of a sweep shares: the trace's length, arrival process and job mix
    (`simulator.trace.generate_trace`), the belief and the pool."""

    jobs: int
    arrival: str = "poisson"
    mix: str = "paper"
    noise: NoiseModel = field(default_factory=NoiseModel)
    pool_size: int = DEFAULT_POOL_SIZE
    guarantee: float = DEFAULT_GUARANTEE

    def __post_init__(self) -> None:
        """Checked here, before a cluster starts, rather than in every worker."""
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or not (
            1 <= self.jobs <= MAX_JOBS
        ):
            raise InstanceError(f"`jobs` must be an integer in 1..{MAX_JOBS:,}, got "
                                f"{brief(self.jobs)}")
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int) or (
            self.pool_size < 1
        ):
            raise InstanceError(f"`pool` must be a positive integer, got {brief(self.pool_size)}")
        if isinstance(self.guarantee, bool) or not isinstance(self.guarantee, (int, float)) or (
            not 0 < self.guarantee < 1
        ):
            raise InstanceError(f"`guarantee` must be a probability in (0, 1), got "
                                f"{brief(self.guarantee)}")
        generate_trace(0, seed=0, arrival=self.arrival, mix=self.mix)  # checks both names


@lru_cache(maxsize=16)  # a worker runs every strategy of a (seed, rate) on the same trace
def _trace(setup: Setup, seed: int, rate_per_s: float) -> tuple[Job, ...]:
    return tuple(generate_trace(setup.jobs, seed=seed, rate_per_s=rate_per_s,
                                arrival=setup.arrival, mix=setup.mix))


def run_cell(cell: Cell, setup: Setup) -> dict[str, Any]:
    """The cell's `StrategyReport` as a plain dict, with the cell's coordinates; its wall
    time is `wall_s` (the only figure that differs from run to run)."""
    jobs = _trace(setup, cell.seed, cell.rate_per_s)
    (report,) = compare(
        jobs, [cell.strategy], seed=cell.seed, noise=setup.noise, pool_size=setup.pool_size,
        guarantee=setup.guarantee, truth=cell.truth,
    ).reports()
    result = report.to_dict()
    del result["name"]
    wall_s = result.pop("seconds")
    return {
        "strategy": cell.strategy, "seed": cell.seed, "truth": cell.truth.changed(),
        "rate_per_s": cell.rate_per_s, **result, "wall_s": wall_s,
    }


def grid(
    strategies: Sequence[str], seeds: Sequence[int], truths: Sequence[Truth],
    rates: Sequence[float],
) -> list[Cell]:
    """Every combination, validated up front (one-line `InstanceError` naming the field)."""
    check_names(strategies)
    truths = [Truth.of(truth) for truth in truths]
    checked = [check_seed(seed) for seed in seeds]
    if not checked or len(set(checked)) != len(checked):
        raise InstanceError(f"`seeds` must be distinct integers ≥ 0, got {brief(list(seeds))}")
    if not truths or len(set(truths)) != len(truths):
        raise InstanceError("`truths` must name at least one truth, each once")
    for rate in rates:
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (
            math.isfinite(rate) and rate > 0
        ):
            raise InstanceError(f"`rates` must be positive numbers (jobs/s), got {brief(rate)}")
    if not rates or len(set(rates)) != len(rates):
        raise InstanceError(f"`rates` must be distinct, at least one, got {brief(list(rates))}")
    return [
        Cell(name, seed, truth, float(rate))
        for truth in truths for rate in rates for name in strategies for seed in checked
    ]


def one_factor_truths(items: Sequence[str], *, field: str = "--truth") -> list[Truth]:
    """`Truth()` (the reference), then one truth per value of each `KEY=V1,V2,…`, changing
    only that key (one factor at a time); a value equal to the reference is the reference."""
    truths = [Truth()]
    swept: list[str] = []
    for item in items:
        key, sep, values = item.partition("=")
        if key.strip() in swept:
            raise InstanceError(f"`{field}` sweeps {brief(key.strip())} twice; give all its "
                                "values once, comma-separated")
        swept.append(key.strip())
        for value in values.split(","):
            truth = Truth.parse([f"{key}{sep}{value}"], field=field)
            if truth not in truths:
                truths.append(truth)
    return truths


def run_serial(cells: Sequence[Cell], setup: Setup, progress: Progress | None = None) -> list[
    dict[str, Any]
]:
    """Every cell in this process, in order: the reference a Dask run must equal."""
    results = []
    for done, cell in enumerate(cells, start=1):
        results.append(run_cell(cell, setup))
        if progress:
            progress(done, len(cells))
    return results


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT, SIGTERM or SIGHUP, raised once its cluster is closed."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(
            f"sweep stopped by {signal.Signals(signum).name}; its Dask cluster was closed"
        )


class _Signals:
    """SIGINT, SIGTERM and SIGHUP as `SweepInterrupted`: raised at once while the sweep waits
    for cells, but held back while a cluster starts or stops (a start cut in half would leave
    worker processes behind) and raised when that is done."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.holding = True

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if not self.holding:
            self.holding = True  # once: the clean-up that follows is not cut either
            raise SweepInterrupted(signum)

    def release(self) -> None:
        """From now on a signal interrupts; one that came meanwhile interrupts now."""
        if self.received is not None:
            raise SweepInterrupted(self.received)
        self.holding = False

    def hold(self) -> None:
        self.holding = True

    @contextmanager
    def installed(self) -> Iterator[_Signals]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in _STOP_SIGNALS:
                previous[number] = signal.signal(number, self._note)
        try:
            yield self
        except Exception:
            if self.received is not None:  # the signal's doing (a Ctrl-C also stops workers)
                raise SweepInterrupted(self.received) from None
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if self.received is not None:
            raise SweepInterrupted(self.received)


def dask_setup(worker: object) -> None:
    """Run by each local worker process as it starts (`preload`): ignore SIGINT, which the
    sweep handles (see `run_dask`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise InstanceError(f"a sweep runs on Dask, which is not installed: {INSTALL}") from None
    return distributed


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


_NO_SCHEDULER = ("start a Dask scheduler there (`dask scheduler`) or omit --scheduler for a "
                 "local cluster")


def _unreachable(scheduler: str, error: BaseException) -> InstanceError:
    reason = " ".join(str(error).split()) or type(error).__name__
    return InstanceError(f"`--scheduler` {brief(scheduler, 80)}: cannot connect "
                         f"({brief(reason, 100)}); {_NO_SCHEDULER}")


def _check_scheduler(scheduler: str, timeout_s: float) -> None:
    """Refuse, in one line, an address where no Dask scheduler answers within `timeout_s`."""
    try:
        kind = asyncio.run(_identity(scheduler, timeout_s))
    except (OSError, ValueError, TypeError) as error:  # refused, timed out, not an address
        raise _unreachable(scheduler, error) from None
    if kind != "Scheduler":
        raise InstanceError(
            f"`--scheduler` {brief(scheduler, 80)} answers, but not as a Dask scheduler "
            f"({brief(kind, 60)}); {_NO_SCHEDULER}"
        )


async def _identity(address: str, timeout_s: float) -> str:
    """What answers at `address`: the `type` of a Dask peer's identity ("Scheduler", "Worker"),
    else what went wrong. Dask's client waits for the peer's handshake without a timeout (a
    silent listener held `sweep` for 13 minutes) and reads whatever comes back as frame
    lengths (an HTTP server's reply asked for 3 EiB); this asks under one timeout, first."""
    from distributed.comm.addressing import parse_address
    from distributed.comm.core import connect

    parse_address(address)  # ValueError: not an address; any later one is the peer's reply

    async def ask() -> Any:
        comm = await connect(address, timeout=timeout_s)  # type: ignore[no-untyped-call]
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = await asyncio.wait_for(ask(), timeout_s)
    except TimeoutError:
        raise TimeoutError(f"nothing answered as Dask does within {timeout_s:g} s") from None
    except OSError:  # refused, reset, closed
        raise
    except Exception as error:  # a reply that is not Dask's: garbage frames, a bad header
        return f"{type(error).__name__}: {brief(str(error), 40)}"
    if isinstance(reply, dict) and isinstance(reply.get("type"), str):
        return str(reply["type"])
    return f"the reply {brief(reply, 40)}"


def _connect(
    workers: int | None, scheduler: str | None, connect_timeout_s: float,
) -> tuple[Client, LocalCluster | None]:
    distributed = _distributed()
    if scheduler is None:
        count = usable_cores() if workers is None else workers
        cluster = distributed.LocalCluster(
            n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.ERROR, preload=[__name__],  # each worker runs `dask_setup`
        )
        try:
            return distributed.Client(cluster), cluster
        except BaseException:
            cluster.close()
            raise
    try:
        client = distributed.Client(scheduler, timeout=connect_timeout_s)
    except (OSError, ValueError, TypeError) as error:  # refused, timed out, not an address
        raise _unreachable(scheduler, error) from None
    shown = brief(scheduler, 80)
    try:
        client.wait_for_workers(1, timeout=connect_timeout_s)
    except TimeoutError:
        client.close()
        raise InstanceError(
            f"`--scheduler` {shown} has no workers; start some (`dask worker ADDRESS`)"
        ) from None
    return client, None


def run_dask(
    cells: Sequence[Cell], setup: Setup, *, workers: int | None = None,
    scheduler: str | None = None, progress: Progress | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> tuple[list[dict[str, Any]], int]:
    """Every cell on a Dask cluster, in the order of `cells`, and the number of workers.

    A `LocalCluster` of `workers` processes (default: `usable_cores()`), one thread each, or
    the cluster at `scheduler`. Whatever happens (an error in a cell, Ctrl-C, SIGTERM), the
    client and a local cluster are closed before this returns or raises: no worker process
    is left behind. `progress(done, total)` is called with 0 once the cells are submitted,
    then after each cell.
    """
    if workers is not None and scheduler is not None:
        raise InstanceError("`--workers` sizes the local cluster; drop it with `--scheduler`")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise InstanceError(f"`--workers` must be a positive integer, got {brief(workers)}")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise InstanceError(f"`--scheduler` must be an address such as tcp://HOST:8786, got "
                            f"{brief(scheduler)}")
    distributed = _distributed()
    results: list[dict[str, Any] | None] = [None] * len(cells)
    client: Client | None = None
    cluster: LocalCluster | None = None
    main = threading.current_thread() is threading.main_thread()  # signals go there only
    with _Signals().installed() as signals:
        try:
            # A Ctrl-C reaches the terminal's whole process group. The sweep handles it and
            # closes the cluster; the workers ignore it: born ignoring SIGINT (an ignored
            # signal stays ignored through exec), then by `dask_setup` (a restarted worker
            # too). So none dies half-started or prints a traceback; a Ctrl-C in these
            # seconds of start-up is ignored by the sweep too (SIGTERM is not).
            if scheduler is not None:  # a socket only: a signal may stop it at once
                signals.release()
                _check_scheduler(scheduler, connect_timeout_s)
                signals.hold()
            ignoring = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
            try:
                client, cluster = _connect(workers, scheduler, connect_timeout_s)
            finally:
                if main:
                    signal.signal(signal.SIGINT, ignoring)
            count = len(client.scheduler_info()["workers"])
            futures = {
                client.submit(run_cell, cell, setup, pure=False): index
                for index, cell in enumerate(cells)
            }
            signals.release()
            if progress:  # the cells are out: a bar can start
                progress(0, len(cells))
            for done, future in enumerate(distributed.as_completed(futures), start=1):
                results[futures[future]] = future.result()
                if progress:
                    progress(done, len(cells))
        finally:
            signals.hold()
            if client is not None:
                client.close()  # type: ignore[no-untyped-call]  # unannotated in distributed
            if cluster is not None:
                cluster.close()
    return [result for result in results if result is not None], count


def t_quantile(probability: float, df: int) -> float:
    """The Student t quantile: the t with P(T ≤ t) = `probability` for `df` degrees of freedom.

    Bisection on the exact CDF for integer degrees of freedom (Abramowitz & Stegun 26.7.3 and
    26.7.4), so the core needs no SciPy.
    """
    if not 0.5 < probability < 1 or df < 1:
        raise InstanceError(f"`t_quantile` needs 0.5 < p < 1 and df ≥ 1, got {probability}, {df}")
    target = 2 * probability - 1  # P(|T| ≤ t)
    low, high = 0.0, 1.0
    while _t_central(high, df) < target:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _t_central(middle, df) < target:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def _t_central(t: float, df: int) -> float:
    """P(|T| ≤ t) for Student's t with `df` degrees of freedom."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if df % 2 == 0:
        for k in range(1, df // 2):  # 1 + ½cos² + (1·3)/(2·4)cos⁴ + …
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    for k in range(1, (df - 1) // 2):  # 1 + (2/3)cos² + (2·4)/(3·5)cos⁴ + …
        term *= cos2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and 95% Student t interval over seeds; `ci95` None (with why) for one seed."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": None,
                "no_interval": "one seed: an interval needs at least 2 seeds"}
    half = t_quantile((1 + CONFIDENCE) / 2, len(values) - 1) * statistics.stdev(values) / (
        math.sqrt(len(values))
    )
    return {"mean": mean, "ci95": [mean - half, mean + half]}


def aggregate(cells: Sequence[Cell], results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (strategy, truth, rate), in the order first met: the mean and interval over seeds
    of every figure of `METRICS`."""
    groups: dict[tuple[str, Truth, float], list[dict[str, Any]]] = {}
    for cell, result in zip(cells, results, strict=True):
        groups.setdefault((cell.strategy, cell.truth, cell.rate_per_s), []).append(result)
    return [
        {"strategy": name, "truth": truth.changed(), "truth_label": truth.label(),
         "rate_per_s": rate, "seeds": [run["seed"] for run in runs],
         **{metric: interval([run[metric] for run in runs]) for metric in METRICS}}
        for (name, truth, rate), runs in groups.items()
    ]


def _reference_value(key: str, noise: NoiseModel) -> float | None:
    """Where the unperturbed truth sits on `key`'s axis: the field's default (a scale), the
    belief's own figure for a noise key, or None (`saturates_at_mb`: no saturation)."""
    default = next(f.default for f in fields(Truth) if f.name == key)
    if isinstance(default, float):
        return default
    probe = Truth(**{key: 12.5}).noise(noise)  # the one noise field this key replaces
    changed = [f.name for f in fields(noise) if getattr(probe, f.name) != getattr(noise, f.name)]
    return float(getattr(noise, changed[0])) if changed else None


def plot(aggregates: Sequence[dict[str, Any]], folder: Path, noise: NoiseModel) -> list[Path]:
    """One PNG per perturbation key (and rate): met-rate and mean cost against the key's
    value, a line per strategy with 95% intervals as error bars; and, when several rates are
    swept, met-rate against the arrival rate under the reference truth."""
    plot_folder(folder)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row["strategy"] for row in aggregates))
    rates = list(dict.fromkeys(row["rate_per_s"] for row in aggregates))
    keys = list(dict.fromkeys(key for row in aggregates for key in row["truth"]))
    written: list[Path] = []

    def bars(rows: list[dict[str, Any]], metric: str) -> tuple[list[float], list[list[float]]]:
        means = [row[metric]["mean"] for row in rows]
        spread = [[m - row[metric]["ci95"][0], row[metric]["ci95"][1] - m] if row[metric]["ci95"]
                  else [0.0, 0.0] for m, row in zip(means, rows, strict=True)]
        return means, [list(pair) for pair in zip(*spread, strict=True)]

    def save(figure: Any, path: Path) -> None:
        written.append(save_figure(figure, path))

    for rate in rates:
        for key in keys:
            reference = _reference_value(key, noise)
            figure, (met_axes, cost_axes) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
            for name in names:
                rows = [row for row in aggregates if row["strategy"] == name
                        and row["rate_per_s"] == rate and set(row["truth"]) <= {key}]
                points = sorted(
                    ((row["truth"].get(key, reference), row) for row in rows
                     if key in row["truth"] or reference is not None),
                    key=lambda pair: pair[0],
                )
                x = [value for value, _ in points]
                for axes, metric in ((met_axes, "deadline_met"), (cost_axes, "mean_cost_usd")):
                    means, errors = bars([row for _, row in points], metric)
                    axes.errorbar(x, means, yerr=errors, marker="o", capsize=3, label=name)
            where = "" if reference is not None else " (as believed: not shown, no saturation)"
            met_axes.set(xlabel=f"truth {key}{where}", ylabel="deadlines met (share of jobs)",
                         title=f"Deadlines met against {key}")
            cost_axes.set(xlabel=f"truth {key}", ylabel="mean cost per job (USD)",
                          title=f"Cost against {key}")
            met_axes.set_ylim(-0.02, 1.02)  # a t-interval on few seeds can reach past [0, 1]
            for axes in (met_axes, cost_axes):
                axes.grid(alpha=0.3)
            met_axes.legend(fontsize="small")
            suffix = "" if len(rates) == 1 else f"_rate{rate:g}"
            save(figure, folder / f"truth_{key}{suffix}.png")
    if len(rates) > 1:
        figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
        for name in names:
            rows = sorted((row for row in aggregates
                           if row["strategy"] == name and not row["truth"]),
                          key=lambda row: row["rate_per_s"])
            means, errors = bars(rows, "deadline_met")
            axes.errorbar([row["rate_per_s"] for row in rows], means, yerr=errors, marker="o",
                          capsize=3, label=name)
        axes.set_ylim(-0.02, 1.02)
        axes.set(xscale="log", xlabel="arrival rate (jobs/s)", ylabel="deadlines met",
                 title="Deadlines met against the arrival rate (truth as believed)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        save(figure, folder / "met_vs_rate.png")
    return written


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: every cell's report, the aggregates, the figures, how long it took."""

    cells: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    truths: list[Truth]
    plots: list[Path]
    wall_s: float
    workers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "truths": [truth.changed() for truth in self.truths],
            "aggregates": self.aggregates, "cells": self.cells,
            "plots": [str(path) for path in self.plots], "wall_s": self.wall_s,
            "workers": self.workers,
        }


def sweep(
    strategies: Sequence[str], seeds: Sequence[int], truths: Sequence[Truth],
    *, setup: Setup, rates: Sequence[float] = (DEFAULT_RATE_PER_S,), plots: Path | None = None,
    workers: int | None = None, scheduler: str | None = None, progress: Progress | None = None,
) -> SweepResult:
    """Run the grid of cells on Dask (`run_dask`), aggregate it, and draw it into `plots`.

    Everything is checked before a cluster starts, the plot folder included.
    """
    cells = grid(strategies, seeds, truths, rates)
    if plots is not None:
        plot_folder(plots)
    started = time.perf_counter()
    results, count = run_dask(cells, setup, workers=workers, scheduler=scheduler,
                              progress=progress)
    aggregates = aggregate(cells, results)
    written = plot(aggregates, plots, setup.noise) if plots is not None else []
    return SweepResult(results, aggregates, list(dict.fromkeys(truths)), written,
                       time.perf_counter() - started, count)
