"""Sweeps: strategies × seeds × truths × arrival rates, fanned out through Dask distributed.

A *cell* is one (strategy, seed, truth, arrival rate): it generates the trace for (jobs, seed,
rate), runs the strategy over it under the truth (`simulator.compare.compare`) and returns
the strategy's report as a small dict. A truth is a model-family `Truth` (the planners'
equations with other parameters) or a world of the independent engine (`NamedWorld`, from
`--truth-file`). With `hindsight` among the strategies, a cell runs every strategy of its
(seed, truth, rate) together, as `compare` does: hindsight's candidates include the plans
they ran, and its outcomes are the reference of their `met_of_hindsight_feasible` and
`cost_vs_hindsight`. Cells share nothing and every draw in them is seeded, so where and in
which order they run changes nothing: a sweep on a Dask cluster gives exactly the numbers of
the same cells run one after the other (`run_serial`), and its size is bounded by the
cluster's cores, not by one process.

Statistics, per (strategy, truth, rate): the mean over seeds of every figure, with a 95%
Student t interval over seeds. The seeds are the independent replications: each draws its
own trace and its own runs; with a handful of seeds and an unknown variance the t
distribution (not the normal) gives the width. With one seed there is no t interval (`None`,
with why). Shares (`deadline_met`, `met_of_hindsight_feasible`) also get a 95% Wilson
interval over all jobs of all seeds pooled, and every share interval is clipped to [0, 1]. The
two answer different doubts: seeds that agree (every job met, say) give a t interval of
zero width, while the Wilson interval still says how many jobs the share rests on; the
Wilson interval takes the jobs as independent trials, which they are only nearly (a job's
start depends on the jobs before it when the pool is busy), so it can be too narrow under
contention, where the t interval over seeds is the one to read.

Dask is imported only when a sweep runs on it (`pip install 'lambdadnn[sweep]'`); the figures
are `lambdadnn.plot.plot_sweep`'s, drawn from the aggregates.
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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from scipy import stats

from ..inputs.errors import InputError, WorldFileError
from ..inputs.files import MAX_TRACE_JOBS, brief
from ..inputs.numbers import integer, number, probability
from ..models.noise import NoiseModel
from ..solver.trace_file import Job
from .compare import check_engine, compare, wilson
from .defaults import (
    DEFAULT_GUARANTEE,
    DEFAULT_POOL_SIZE,
    HINDSIGHT_NAME,
)
from .strategies import check_names
from .trace import DEFAULT_RATE_PER_S, check_seed, generate_trace
from .truth import Truth
from .world import World
from .worlds import load_world

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

Progress = Callable[[int, int], None]
# Averaged over seeds besides the shares (`aggregate`); `cost_vs_hindsight` when hindsight ran.
METRICS = ("total_cost_usd", "mean_cost_usd", "cost_vs_hindsight")
CONFIDENCE = 0.95
INSTALL = "pip install 'lambdadnn[sweep]'"
CONNECT_TIMEOUT_S = 10.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class NamedWorld:
    """A world of the independent engine (`simulator.world`) as a sweep's truth, under the
    name its reports give it: the world's `name`, else its file."""

    name: str
    world: World = field(hash=False)  # a cell's key is its name (`named_worlds`: distinct)

    def label(self) -> str:
        return self.name


def named_worlds(paths: Sequence[str | Path]) -> list[NamedWorld]:
    """The worlds of `--truth-file` (repeatable), each named, each once."""
    worlds: list[NamedWorld] = []
    for path in paths:
        world = load_world(path)
        named = NamedWorld(world.name or str(path), world)
        if any(known.name == named.name for known in worlds):
            raise WorldFileError(
                f"`--truth-file` names the world {brief(named.name)} twice; give each world "
                "once (or give two worlds different `name`s)"
            )
        worlds.append(named)
    return worlds


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: strategies over the trace of (seed, rate) under a truth (a
    model-family `Truth` or a `NamedWorld`). One strategy, or with `hindsight` all of them
    (module docstring)."""

    strategies: tuple[str, ...]
    seed: int
    truth: Truth | NamedWorld
    rate_per_s: float


def stated(truth: Truth | NamedWorld) -> dict[str, Any]:
    """A truth as a sweep's JSON states it: the changed `Truth` fields, or the world's name."""
    if isinstance(truth, NamedWorld):
        return {"world": truth.name}
    return {"truth": truth.changed()}


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
        integer("jobs", self.jobs, error=InputError, maximum=MAX_TRACE_JOBS, floats=False,
                need=f"an integer in 1..{MAX_TRACE_JOBS:,}")
        integer("pool", self.pool_size, error=InputError, floats=False)
        probability("guarantee", self.guarantee, error=InputError,
                    need="a probability in (0, 1)")
        generate_trace(0, seed=0, arrival=self.arrival, mix=self.mix)  # checks both names


@lru_cache(maxsize=16)  # a worker runs every strategy of a (seed, rate) on the same trace
def _trace(setup: Setup, seed: int, rate_per_s: float) -> tuple[Job, ...]:
    return tuple(generate_trace(setup.jobs, seed=seed, rate_per_s=rate_per_s,
                                arrival=setup.arrival, mix=setup.mix))


def run_cell(cell: Cell, setup: Setup) -> list[dict[str, Any]]:
    """Per strategy of the cell, its `StrategyReport` as a plain dict with the cell's
    coordinates (and, when hindsight ran, `hindsight_feasible`: the jobs it met, the
    denominator of `met_of_hindsight_feasible`); its wall time is `wall_s` (the only figure
    that differs from run to run)."""
    jobs = _trace(setup, cell.seed, cell.rate_per_s)
    world, truth = (
        (cell.truth.world, None) if isinstance(cell.truth, NamedWorld) else (None, cell.truth)
    )
    comparison = compare(
        jobs, cell.strategies, seed=cell.seed, noise=setup.noise, pool_size=setup.pool_size,
        guarantee=setup.guarantee, truth=truth, world=world,
    )
    feasible = comparison.hindsight_feasible
    results = []
    for report in comparison.reports():
        result = report.to_dict()
        name = result.pop("name")
        wall_s = result.pop("seconds")
        results.append({
            "strategy": name, "seed": cell.seed, **stated(cell.truth),
            "rate_per_s": cell.rate_per_s,
            **result, **({} if feasible is None else {"hindsight_feasible": feasible}),
            "wall_s": wall_s,
        })
    return results


def grid(
    strategies: Sequence[str], seeds: Sequence[int], truths: Sequence[Truth | NamedWorld],
    rates: Sequence[float],
) -> list[Cell]:
    """Every combination, validated up front (one-line `InputError` naming the field):
    a cell per strategy, or with `hindsight` a cell per (truth, rate, seed) running them all."""
    check_names(strategies)
    truths = [truth if isinstance(truth, NamedWorld) else Truth.of(truth) for truth in truths]
    for truth in truths:  # each strategy runs in its truth's engine
        if isinstance(truth, NamedWorld):
            check_engine(strategies, truth=None, world=truth.world)
        else:
            check_engine(strategies, truth=truth, world=None)
    checked = [check_seed(seed) for seed in seeds]
    if not checked or len(set(checked)) != len(checked):
        raise InputError(f"`seeds` must be distinct integers ≥ 0, got {brief(list(seeds))}")
    if not truths or len(set(truths)) != len(truths):
        raise InputError("`truths` must name at least one truth, each once")
    for rate in rates:
        number("rates", rate, error=InputError, need="positive numbers (jobs/s)")
    if not rates or len(set(rates)) != len(rates):
        raise InputError(f"`rates` must be distinct, at least one, got {brief(list(rates))}")
    if HINDSIGHT_NAME in strategies:
        return [Cell(tuple(strategies), seed, truth, float(rate))
                for truth in truths for rate in rates for seed in checked]
    return [
        Cell((name,), seed, truth, float(rate))
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
            raise InputError(f"`{field}` sweeps {brief(key.strip())} twice; give all its "
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
    """Every cell in this process, in order: the reference a Dask run must equal (a result
    per strategy of each cell, in the cells' order)."""
    results = []
    for done, cell in enumerate(cells, start=1):
        results += run_cell(cell, setup)
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
        raise InputError(f"a sweep runs on Dask, which is not installed: {INSTALL}") from None
    return distributed


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


_NO_SCHEDULER = ("start a Dask scheduler there (`dask scheduler`) or omit --scheduler for a "
                 "local cluster")


def _unreachable(scheduler: str, error: BaseException) -> InputError:
    reason = " ".join(str(error).split()) or type(error).__name__
    return InputError(f"`--scheduler` {brief(scheduler, 80)}: cannot connect "
                         f"({brief(reason, 100)}); {_NO_SCHEDULER}")


def _check_scheduler(scheduler: str, timeout_s: float) -> None:
    """Refuse, in one line, an address where no Dask scheduler answers within `timeout_s`."""
    try:
        kind = asyncio.run(_identity(scheduler, timeout_s))
    except (OSError, ValueError, TypeError) as error:  # refused, timed out, not an address
        raise _unreachable(scheduler, error) from None
    if kind != "Scheduler":
        raise InputError(
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
        raise InputError(
            f"`--scheduler` {shown} has no workers; start some (`dask worker ADDRESS`)"
        ) from None
    return client, None


def run_dask(
    cells: Sequence[Cell], setup: Setup, *, workers: int | None = None,
    scheduler: str | None = None, progress: Progress | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> tuple[list[dict[str, Any]], int]:
    """Every cell on a Dask cluster, and the number of workers: a result per strategy of
    each cell, in the order of `cells` (as `run_serial`).

    A `LocalCluster` of `workers` processes (default: `usable_cores()`), one thread each, or
    the cluster at `scheduler`. Whatever happens (an error in a cell, Ctrl-C, SIGTERM), the
    client and a local cluster are closed before this returns or raises: no worker process
    is left behind. `progress(done, total)` is called with 0 once the cells are submitted,
    then after each cell.
    """
    if workers is not None and scheduler is not None:
        raise InputError("`--workers` sizes the local cluster; drop it with `--scheduler`")
    if workers is not None:
        integer("--workers", workers, error=InputError, floats=False)
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise InputError(f"`--scheduler` must be an address such as tcp://HOST:8786, got "
                            f"{brief(scheduler)}")
    distributed = _distributed()
    results: list[list[dict[str, Any]] | None] = [None] * len(cells)
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
    return [result for cell in results if cell is not None for result in cell], count


def interval(values: Sequence[float], *, share: bool = False) -> dict[str, Any]:
    """Mean and 95% Student t interval over seeds, clipped to [0, 1] for a `share`; `ci95`
    None (with why) for one seed."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "ci95": None,
                "no_interval": "one seed: an interval needs at least 2 seeds"}
    quantile = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1))
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
    low, high = mean - half, mean + half
    return {"mean": mean, "ci95": [max(0.0, low), min(1.0, high)] if share else [low, high]}


def share_interval(values: Sequence[float], successes: int, trials: int) -> dict[str, Any]:
    """A share over seeds (`interval`), and over all their jobs pooled: `successes` of
    `trials`, its share `pooled` and its 95% Wilson interval `wilson_ci95`."""
    return {
        **interval(values, share=True), "successes": successes, "trials": trials,
        "pooled": successes / trials if trials else None,
        "wilson_ci95": list(wilson(successes, trials)),
    }


def aggregate(cells: Sequence[Cell], results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (strategy, truth, rate), in the order first met: the shares `deadline_met` and
    `met_of_hindsight_feasible` (`share_interval`) and every figure of `METRICS` (`interval`)
    over seeds; a figure no seed has (the hindsight ones without hindsight) is left out."""
    groups: dict[tuple[str, Truth | NamedWorld, float], list[dict[str, Any]]] = {}
    pairs = [(name, cell) for cell in cells for name in cell.strategies]
    for (name, cell), result in zip(pairs, results, strict=True):
        groups.setdefault((name, cell.truth, cell.rate_per_s), []).append(result)
    rows = []
    for (name, truth, rate), runs in groups.items():
        row = {"strategy": name, **stated(truth), "truth_label": truth.label(),
               "rate_per_s": rate, "seeds": [run["seed"] for run in runs]}
        met = [round(run["deadline_met"] * run["jobs"]) for run in runs]
        row["deadline_met"] = share_interval([run["deadline_met"] for run in runs], sum(met),
                                             sum(run["jobs"] for run in runs))
        feasible = [run for run in runs if run.get("met_of_hindsight_feasible") is not None]
        if feasible:
            row["met_of_hindsight_feasible"] = share_interval(
                [run["met_of_hindsight_feasible"] for run in feasible],
                sum(round(run["met_of_hindsight_feasible"] * run["hindsight_feasible"])
                    for run in feasible),
                sum(run["hindsight_feasible"] for run in feasible),
            )
        for metric in METRICS:
            values = [run[metric] for run in runs if run.get(metric) is not None]
            if values:
                row[metric] = interval(values)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: every cell's report, the aggregates, how long it took."""

    cells: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    truths: list[Truth | NamedWorld]
    wall_s: float
    workers: int

    def to_dict(self) -> dict[str, Any]:
        """`truths` the model-family ones (changed fields), `worlds` the worlds (name and
        effects), each present when the sweep had one."""
        models = [truth.changed() for truth in self.truths if isinstance(truth, Truth)]
        worlds = [{**truth.world.to_mapping(), "name": truth.name} for truth in self.truths
                  if isinstance(truth, NamedWorld)]
        return {
            **({"truths": models} if models else {}), **({"worlds": worlds} if worlds else {}),
            "aggregates": self.aggregates, "cells": self.cells, "wall_s": self.wall_s,
            "workers": self.workers,
        }


def sweep(
    strategies: Sequence[str], seeds: Sequence[int], truths: Sequence[Truth | NamedWorld],
    *, setup: Setup, rates: Sequence[float] = (DEFAULT_RATE_PER_S,), workers: int | None = None,
    scheduler: str | None = None, progress: Progress | None = None,
) -> SweepResult:
    """Run the grid of cells on Dask (`run_dask`) and aggregate it; every cell is checked
    before a cluster starts."""
    cells = grid(strategies, seeds, truths, rates)
    started = time.perf_counter()
    results, count = run_dask(cells, setup, workers=workers, scheduler=scheduler,
                              progress=progress)
    return SweepResult(results, aggregate(cells, results),
                       list(dict.fromkeys(cell.truth for cell in cells)),
                       time.perf_counter() - started, count)
