"""Fit a world's straggler and start-up paragraphs to real launches recorded on this machine.

Run as ``.venv/bin/python -m benchmarks.fit_world [--record] [--records PATH] [--out PATH]
[--resamples N]``.

``--record`` first launches the plans of `PLANS` (`digits-cnn`, `REPEATS` times each, round
robin so that the machine's drift spreads over all of them) with `run_local`, exactly as
``lambdadnn launch`` runs a plan, and writes to ``--records`` what the fit needs: per
invocation its compute seconds per iteration (the channel's timing records, which the
launcher summarises into its report), its run's time to the first iteration, and the
machine's load averages (as `uptime` prints them) before and after the run. Without it, the
fit reads the saved records (`RECORDS`).

The fit, of the world's mechanisms (docs/WORLD.md):

- **stragglers** (`cv`, `tail`): each worker-iteration's compute over its invocation's median
  is a lognormal body times, for a share `s` of them, a Pareto factor ≥ 1 of shape `a`, as
  the world draws them (`simulator/world/engine.py`). In logs that is a normal, or a normal
  plus an exponential of rate `a` (an exponentially modified normal, `scipy.stats.exponnorm`):
  the four parameters by maximum likelihood, with a > 1 (the world needs a finite mean). An
  invocation's first iteration (lazy set-up, cold caches) is left out: it is start-up, not
  straggling. Fitted only on the plans whose workers hold a whole vCPU (`FULL_VCPU_MB`), since
  below it the cgroup's 100 ms CPU quota stalls millisecond iterations for tens of
  milliseconds: that is the world's `cpu` time slicing, not stragglers (the other plans' fit
  is printed beside it).
- **persistent**: a rank is slow when its median compute is at least `PERSISTENT_SLOWDOWN`
  times the median of the other ranks of its run (runs with n ≥ 2); off when none is. A
  whole run being slower than its plan's other runs is the machine's, shared by every rank,
  which the world's per-function draw cannot express: it is printed, not fitted.
- **startup**: the time to the first iteration (launch → the last rank's first iteration:
  process start, imports, workload, first pull) against the functions n, by least squares.

Intervals are 95% percentile bootstraps (`scipy.stats.bootstrap`): blocks of `BLOCK`
consecutive iterations of a run (all its ranks together, so that correlation in time and
between ranks stays in) for the stragglers, runs for the start-up. The world YAML gets the
point estimates, rounded to three significant figures, and `source:` lines naming the records.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import yaml
from scipy import optimize, stats

from lambdadnn.models.errors import LambdaDnnError

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "benchmarks" / "data" / "local_runs.json"
WORLD = ROOT / "instances" / "worlds" / "local-2core.yaml"

WORKLOAD = "digits-cnn"  # compute-bound: its iteration is mostly the gradient
LOCAL_BATCH = 128  # the same work per rank at every n: ~10 ms of compute at one vCPU
# (functions, memory MB, iterations): ~15 s of training each, within this machine's 2 CPUs
PLANS: tuple[tuple[int, int, int], ...] = (
    (1, 1769, 1200), (2, 1769, 1000), (1, 884, 700), (2, 884, 700), (4, 884, 550),
)
REPEATS = 3
FULL_VCPU_MB = 1769  # m / 1769 vCPU: from here on the cgroup quota never stalls a worker
WARMUP = 1  # an invocation's first iterations that are start-up, not straggling
MIN_SHAPE = 1.01  # the world's Pareto shape must exceed 1
HILL_SHARE = 0.01  # Hill's estimator on the largest 1% of the worker-iterations
PERSISTENT_SLOWDOWN = 1.25  # a rank this much slower than its run's others is on a slow host
BLOCK = 100  # bootstrap block: longer than the compute's autocorrelation (gone by ~20 iterations)
RESAMPLES = 200
SEED = 20  # the workload's seed and the bootstrap's


@dataclass(frozen=True)
class Run:
    """One recorded launch: its plan, its time to the first iteration, the load around it and
    its compute seconds (iterations × ranks; one round, so every rank timed every iteration)."""

    functions: int
    memory_mb: int
    repeat: int
    startup_s: float
    load: tuple[float, float]  # 1-minute load average before and after
    compute_s: np.ndarray


@dataclass(frozen=True)
class Stragglers:
    """The straggler paragraph: body cv, tail shape and share (and the body's log-scale
    location `mu` and spread `sigma` relative to the invocation's median compute)."""

    cv: float
    shape: float
    share: float
    mu: float
    sigma: float


@dataclass(frozen=True)
class Persistent:
    """Ranks slower than the other ranks of their run by `PERSISTENT_SLOWDOWN` or more: their
    share of the `ranks` compared, their median slowdown (0 when none), the largest ratio."""

    share: float
    slowdown: float
    largest: float
    ranks: int


@dataclass(frozen=True)
class Startup:
    """Time to the first iteration = base_s + per_function_s × n."""

    base_s: float
    per_function_s: float


# -- recording -------------------------------------------------------------------------------

def _machine() -> str:
    """The CPU model and count, as a `source:` line can name them."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    return f"{os.cpu_count()}-CPU {platform.machine()} VM ({model}), Linux {platform.release()}"


def _launch(functions: int, memory_mb: int, iterations: int) -> dict[str, Any]:
    """Launch one plan as `lambdadnn launch` does and keep what the fit needs of it.

    The channel's per-rank timing records are what `run_local` hands `summarise` for its
    report (which keeps only their medians): the spy takes them from there, unchanged.
    """
    from lambdadnn.launcher import LaunchError, local
    from lambdadnn.launcher.spec import LaunchSpec
    from lambdadnn.launcher.timings import summarise

    # No model prediction here: `time_s` only sets how long the job's Redis keys live.
    spec = LaunchSpec(functions=functions, memory_mb=memory_mb, local_batch=LOCAL_BATCH,
                      iterations=iterations, time_s=60.0, restarts=0, platform="local",
                      architecture=platform.machine())
    load_before = os.getloadavg()[0]
    with mock.patch.object(local, "summarise", wraps=summarise) as spy:
        report = local.run_local(spec, workload=WORKLOAD, seed=SEED)
    records, launched = spy.call_args.args
    first = report.time_to_first_iteration_s
    if report.restarts or len(launched) != 1 or first is None:
        raise LaunchError(f"the launch of {functions} × {memory_mb} MB restarted or timed no "
                          "iteration; the fit needs one round of each: record again")
    ranks = sorted(records, key=lambda record: int(record["rank"]))
    return {
        "functions": functions, "memory_mb": memory_mb, "iterations": iterations,
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
        "time_to_first_iteration_s": round(first, 4),
        "measured_time_s": round(report.measured_time_s, 3),
        "throttled_share": report.throttled_share,
        "compute_us": [[round(1e6 * value) for value in record["compute_s"]]
                       for record in ranks],
    }


def record(path: Path) -> None:
    """Launch every plan `REPEATS` times, round robin, and write the records to `path`."""
    runs = []
    for repeat in range(REPEATS):
        for functions, memory_mb, iterations in PLANS:
            run = {"repeat": repeat, **_launch(functions, memory_mb, iterations)}
            print(f"  {functions} × {memory_mb} MB (repeat {repeat + 1}): first iteration "
                  f"after {run['time_to_first_iteration_s']:.2f} s, trained "
                  f"{run['measured_time_s']:.1f} s, load {run['load_before']:.2f} → "
                  f"{run['load_after']:.2f}", flush=True)
            runs.append(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "recorded": {
            "date": datetime.date.today().isoformat(), "machine": _machine(),
            "workload": WORKLOAD, "local_batch": LOCAL_BATCH, "seed": SEED,
            "command": "python -m benchmarks.fit_world --record",
            "load": "1-minute load average before and after each run; other helpers' test "
                    "runs shared the machine",
        },
        "runs": runs,
    }, separators=(",", ":")) + "\n")


# -- fitting ---------------------------------------------------------------------------------

def load_runs(path: Path) -> tuple[dict[str, Any], list[Run]]:
    """The records' header and their runs."""
    payload = json.loads(path.read_text())
    runs = [Run(
        functions=int(run["functions"]), memory_mb=int(run["memory_mb"]),
        repeat=int(run["repeat"]), startup_s=float(run["time_to_first_iteration_s"]),
        load=(float(run["load_before"]), float(run["load_after"])),
        compute_s=np.array(run["compute_us"], dtype=np.float64).T / 1e6,
    ) for run in payload["runs"]]
    return dict(payload["recorded"]), runs


def relative_log_compute(compute_s: np.ndarray) -> np.ndarray:
    """log(compute / its invocation's median) after the warm-up: iterations × ranks, each rank
    its own scale."""
    logs: np.ndarray = np.log(compute_s[WARMUP:])
    relative: np.ndarray = logs - np.median(logs, axis=0)
    return relative


def _negative_log_likelihood(theta: np.ndarray, z: np.ndarray) -> float:
    """Of log-multipliers `z` under the body (normal, weight 1 − s) and the body plus a
    Pareto factor's log, an exponential of rate a (exponnorm, weight s);
    theta = (mu, log sigma, logit s, log a)."""
    mu, sigma, share, shape = theta[0], math.exp(theta[1]), _expit(theta[2]), math.exp(theta[3])
    body = math.log1p(-share) + stats.norm.logpdf(z, mu, sigma)
    tail = math.log(share) + stats.exponnorm.logpdf(z, 1.0 / (shape * sigma), mu, sigma)
    return -float(np.logaddexp(body, tail).sum())


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def fit_stragglers(z: np.ndarray) -> Stragglers:
    """Maximum likelihood of the straggler model on log-multipliers `z` (see the module doc).

    Started from robust figures (median, MAD; the share beyond three MADs and its mean
    excess); the share is kept within [1e-5, 0.5], so that the tail stays the minority.
    """
    mu = float(np.median(z))
    sigma = max(float(stats.median_abs_deviation(z, scale="normal")), 1e-6)
    beyond = z[z > mu + 3 * sigma]
    share = min(max(beyond.size / z.size, 1e-3), 0.4)
    shape = max(1.0 / float(np.mean(beyond - mu)) if beyond.size else 2.0, 1.5)
    start = np.array([mu, math.log(sigma), math.log(share / (1 - share)), math.log(shape)])
    bounds = [(None, None), (math.log(1e-6), None),
              (math.log(1e-5 / (1 - 1e-5)), 0.0), (math.log(MIN_SHAPE), math.log(200.0))]
    result = optimize.minimize(_negative_log_likelihood, start, args=(z,), method="L-BFGS-B",
                               bounds=bounds)
    mu, log_sigma, logit_share, log_shape = (float(value) for value in result.x)
    sigma = math.exp(log_sigma)
    return Stragglers(cv=math.sqrt(math.expm1(sigma**2)), shape=math.exp(log_shape),
                      share=_expit(logit_share), mu=mu, sigma=sigma)


def hill_shape(z: np.ndarray, share: float = HILL_SHARE) -> float:
    """Hill's estimate of the tail index from the largest `share` of log-multipliers `z`: a
    check on the fitted shape that assumes nothing about the body."""
    top = np.sort(z)[::-1][: max(2, round(share * z.size)) + 1]
    return float(1.0 / np.mean(top[:-1] - top[-1]))


def model_quantile(fit: Stragglers, q: float) -> float:
    """The q-quantile of the fitted multiplier (over the invocation's median compute)."""
    def cdf(z: float) -> float:
        body = stats.norm.cdf(z, fit.mu, fit.sigma)
        tail = stats.exponnorm.cdf(z, 1.0 / (fit.shape * fit.sigma), fit.mu, fit.sigma)
        return float((1 - fit.share) * body + fit.share * tail) - q

    low, high = fit.mu - 10 * fit.sigma, fit.mu + 10 * fit.sigma + 50.0 / fit.shape
    return math.exp(optimize.brentq(cdf, low, high))


def fit_persistent(runs: Sequence[Run]) -> Persistent:
    """Each rank's median compute over the median of its run's other ranks (see `Persistent`)."""
    ratios: list[float] = []
    for run in runs:
        medians = np.median(run.compute_s[WARMUP:], axis=0)
        ratios.extend(float(medians[rank] / np.median(np.delete(medians, rank)))
                      for rank in range(run.functions) if run.functions > 1)
    values = np.array(ratios)
    slow = values[values >= PERSISTENT_SLOWDOWN]
    return Persistent(share=slow.size / values.size,
                      slowdown=float(np.median(slow)) if slow.size else 0.0,
                      largest=float(values.max()), ranks=int(values.size))


def fit_startup(functions: np.ndarray, startup_s: np.ndarray) -> Startup:
    """Least squares of the time to the first iteration on the functions n."""
    line = stats.linregress(functions, startup_s)
    return Startup(base_s=float(line.intercept), per_function_s=float(line.slope))


@dataclass(frozen=True)
class Fit:
    """Everything the world takes from the records, with 95% bootstrap intervals."""

    stragglers: Stragglers
    stragglers_ci: dict[str, tuple[float, float]]
    worker_iterations: int
    straggler_runs: int
    persistent: Persistent
    persistent_share_ci: tuple[float, float]
    startup: Startup
    startup_ci: dict[str, tuple[float, float]]


def _blocks(runs: Sequence[Run]) -> list[np.ndarray]:
    """The runs' log-multipliers cut into blocks of `BLOCK` iterations, all ranks together."""
    blocks: list[np.ndarray] = []
    for run in runs:
        z = relative_log_compute(run.compute_s)
        blocks.extend(z[start:start + BLOCK].ravel() for start in range(0, len(z), BLOCK))
    return blocks


def _interval(
    statistic: Callable[..., np.ndarray], data: tuple[np.ndarray, ...], names: Sequence[str],
    resamples: int, *, paired: bool = False,
) -> dict[str, tuple[float, float]]:
    """95% percentile bootstrap interval of each named component of `statistic`."""
    result = stats.bootstrap(data, statistic, n_resamples=resamples, vectorized=False,
                             paired=paired, method="percentile", rng=np.random.default_rng(SEED))
    low, high = np.atleast_1d(result.confidence_interval.low), np.atleast_1d(
        result.confidence_interval.high)
    return {name: (float(low[i]), float(high[i])) for i, name in enumerate(names)}


def straggler_runs(runs: Sequence[Run], *, full_vcpu: bool = True) -> list[Run]:
    """The runs the straggler paragraph is fitted on (whole vCPU), or the others."""
    return [run for run in runs if (run.memory_mb >= FULL_VCPU_MB) == full_vcpu]


def fit_records(runs: Sequence[Run], *, resamples: int = RESAMPLES) -> Fit:
    """The point fits of the shipped paragraphs and, with `resamples` > 0, their intervals."""
    chosen = straggler_runs(runs)
    blocks = _blocks(chosen)
    z = np.concatenate(blocks)
    stragglers = fit_stragglers(z)
    persistent = fit_persistent(runs)
    functions = np.array([run.functions for run in runs], dtype=np.float64)
    startup_s = np.array([run.startup_s for run in runs])
    startup = fit_startup(functions, startup_s)
    slow = round(persistent.share * persistent.ranks)
    share_ci = stats.binomtest(slow, persistent.ranks).proportion_ci(method="exact")
    stragglers_ci: dict[str, tuple[float, float]] = {}
    startup_ci: dict[str, tuple[float, float]] = {}
    if resamples > 0:
        def straggler_statistic(index: np.ndarray) -> np.ndarray:
            fit = fit_stragglers(np.concatenate([blocks[i] for i in index]))
            return np.array([fit.cv, fit.shape, fit.share])

        def startup_statistic(n: np.ndarray, seconds: np.ndarray) -> np.ndarray:
            fit = fit_startup(n, seconds)
            return np.array([fit.base_s, fit.per_function_s])

        stragglers_ci = _interval(straggler_statistic, (np.arange(len(blocks)),),
                                  ("cv", "shape", "share"), resamples)
        startup_ci = _interval(startup_statistic, (functions, startup_s),
                               ("base_s", "per_function_s"), resamples, paired=True)
    return Fit(stragglers, stragglers_ci, int(z.size), len(chosen), persistent,
               (float(share_ci.low), float(share_ci.high)), startup, startup_ci)


# -- the world -------------------------------------------------------------------------------

def _figure(value: float) -> float:
    """Three significant figures: what the records support, and stable across platforms."""
    return float(f"{value:.3g}")


def world_mapping(header: dict[str, Any], runs: Sequence[Run], fit: Fit) -> dict[str, Any]:
    """The world YAML's mapping: the fitted paragraphs with `source:` lines naming the
    records (file, date, machine, plans, load)."""
    loads = [load for run in runs for load in run.load]
    where = (f"benchmarks/data/local_runs.json: {len(runs)} local launches of {header['workload']}"
             f" (local batch {header['local_batch']}) recorded {header['date']} on "
             f"{header['machine']}, 1-minute load {min(loads):.2f}-{max(loads):.2f} with other "
             "test runs sharing the machine; fitted by benchmarks/fit_world.py (95% intervals "
             "in docs/WORLD.md)")
    chosen = straggler_runs(runs)
    plans = ", ".join(f"{n} x {m} MB" for n, m in sorted({(r.functions, r.memory_mb)
                                                          for r in chosen}))
    stragglers: dict[str, Any] = {
        "cv": _figure(fit.stragglers.cv),
        "tail": {"kind": "pareto", "shape": _figure(fit.stragglers.shape),
                 "share": _figure(fit.stragglers.share)},
    }
    if fit.persistent.share > 0:
        stragglers["persistent"] = {"share": _figure(fit.persistent.share),
                                    "slowdown": _figure(fit.persistent.slowdown)}
    stragglers["source"] = (
        f"{fit.worker_iterations:,} worker-iterations' compute over their invocation's median, "
        f"plans {plans} (a whole vCPU each), first iteration left out, maximum likelihood; "
        f"persistent from the {fit.persistent.ranks} ranks of runs with n >= 2, each against "
        "the median of its run's other ranks"
        + ("" if fit.persistent.share > 0 else
           f": none {PERSISTENT_SLOWDOWN:g}x slower (largest {fit.persistent.largest:.2f}x), "
           "so off")
        + f". {where}")
    return {
        "name": "local-2core",
        "description": (
            "The launcher's local backend on a 2-CPU VM: worker processes capped at m/1769 "
            "vCPU by cgroups, a local redis-server as parameter server. Stragglers and start-up "
            "measured; every other effect off. Processes on one machine, not Lambda functions."),
        "stragglers": stragglers,
        "startup": {
            "base_s": _figure(fit.startup.base_s),
            "per_function_s": _figure(fit.startup.per_function_s),
            "source": ("time from launch to the last rank's first iteration (process start, "
                       "torch import, workload, first pull) against n = "
                       + ", ".join(str(n) for n in sorted({r.functions for r in runs}))
                       + f", least squares over all {len(runs)} launches. {where}"),
        },
    }


def _ci(group: dict[str, tuple[float, float]], name: str) -> str:
    if name not in group:
        return ""
    low, high = group[name]
    return f" [{low:.3g}, {high:.3g}]"


def report(runs: Sequence[Run], fit: Fit) -> str:
    """The fit as text: estimates with 95% intervals, and how the fitted quantiles of the
    multiplier compare with the recorded ones."""
    s, p, u = fit.stragglers, fit.persistent, fit.startup
    lines = [
        f"stragglers ({fit.worker_iterations:,} worker-iterations of {fit.straggler_runs} runs "
        f"at {FULL_VCPU_MB} MB):",
        f"  cv {s.cv:.3g}{_ci(fit.stragglers_ci, 'cv')}, tail shape {s.shape:.3g}"
        f"{_ci(fit.stragglers_ci, 'shape')}, share {s.share:.3g}"
        f"{_ci(fit.stragglers_ci, 'share')}",
        f"persistent: {round(p.share * p.ranks)} of {p.ranks} ranks >= "
        f"{PERSISTENT_SLOWDOWN:g}x the median of their run's other ranks (share 95% "
        f"[{fit.persistent_share_ci[0]:.3g}, {fit.persistent_share_ci[1]:.3g}]); largest "
        f"{p.largest:.3f}x",
        f"startup: base {u.base_s:.3g} s{_ci(fit.startup_ci, 'base_s')} + "
        f"{u.per_function_s:.3g} s{_ci(fit.startup_ci, 'per_function_s')} per function",
        "",
        "multiplier quantiles (compute / invocation median), recorded vs fitted:",
        f"  {'runs':<26} {'q':>6} {'recorded':>9} {'fitted':>9}",
    ]
    for label, chosen in (("whole vCPU (fitted)", straggler_runs(runs)),
                          ("under a vCPU (not fitted)", straggler_runs(runs, full_vcpu=False))):
        if not chosen:
            continue
        z = np.concatenate([relative_log_compute(run.compute_s).ravel() for run in chosen])
        own = fit_stragglers(z)
        for q in (0.5, 0.9, 0.99, 0.999):
            lines.append(f"  {label:<26} {q:>6g} {math.exp(np.quantile(z, q)):>9.3f} "
                         f"{model_quantile(s, q):>9.3f}")
        lines.append(f"  {label:<26} own fit: cv {own.cv:.3g}, shape {own.shape:.3g}, share "
                     f"{own.share:.3g}; Hill's shape (top {HILL_SHARE:.0%}) {hill_shape(z):.3g}")
    lines += ["", "runs (vs plan: median compute over the plan's median run; start-up residual "
              "against the line):",
              f"  {'plan':<14} {'repeat':>6} {'median ms':>9} {'vs plan':>7} {'first it. s':>11} "
              f"{'residual':>8} {'load':>11}"]
    medians = {id(run): float(np.median(run.compute_s[WARMUP:])) for run in runs}
    for run in runs:
        plan = np.median([medians[id(other)] for other in runs
                          if (other.functions, other.memory_mb) == (run.functions, run.memory_mb)])
        residual = run.startup_s - u.base_s - u.per_function_s * run.functions
        lines.append(f"  {f'{run.functions} x {run.memory_mb} MB':<14} {run.repeat + 1:>6} "
                     f"{1e3 * medians[id(run)]:>9.2f} {medians[id(run)] / plan:>7.2f} "
                     f"{run.startup_s:>11.2f} {residual:>+8.2f} "
                     f"{run.load[0]:>5.2f}-{run.load[1]:<5.2f}")
    return "\n".join(lines)


def write_world(path: Path, mapping: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by `python -m benchmarks.fit_world` from benchmarks/data/local_runs.json; do\n"
        "# not edit by hand: tests/test_fit_world.py checks it against what its records give.\n"
        + yaml.safe_dump(mapping, sort_keys=False, allow_unicode=True, width=100))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true",
                        help="launch the plans first (about 5 minutes on 2 CPUs)")
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--out", type=Path, default=WORLD)
    parser.add_argument("--resamples", type=int, default=RESAMPLES,
                        help="bootstrap resamples for the intervals (0: none)")
    args = parser.parse_args(argv)
    refusal = (
        f"`--resamples` {args.resamples} is negative; give 0 (no intervals) or more"
        if args.resamples < 0 else
        f"`--records` {args.records} is not a file; give the saved records or pass `--record`"
        if not args.record and not args.records.is_file() else None)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    if args.record:
        try:
            record(args.records)
        except LambdaDnnError as error:  # no redis-server, a plan that restarted, ...
            print(f"error: {error}", file=sys.stderr)
            return 1
    header, runs = load_runs(args.records)
    fit = fit_records(runs, resamples=args.resamples)
    print(report(runs, fit))
    write_world(args.out, world_mapping(header, runs, fit))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
