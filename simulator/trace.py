"""Synthetic job traces: seeded arrivals and job sizes over the shipped workloads.

The traces are lists of `solver.trace_file.Job`, the rows of the trace file (the CSV format
`solve-many` and the simulator read); `write_trace` writes one out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..inputs.errors import InputError
from ..inputs.files import MAX_TRACE_JOBS, brief
from ..inputs.numbers import integer, number
from ..solver.trace_file import Job, Loader
from .defaults import ARRIVALS, MIXES

WORKLOADS = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")

# Jobs per second of the synthetic trace. By Little's law a planner whose jobs hold n functions
# for T seconds keeps rate·E[n·T] of the pool busy. Measured (default noise): lambdadnn's plans
# hold ≈ 6,300 function-seconds a job, ldnn-alg1 ≈ 9,300, power-tuning ≈ 2,500: at 0.2 jobs/s
# 3–4% of the 50,000 functions, so the comparison is between plans, not queues. The strategies
# that draw n at random over its whole range hold far more: sample-search ≈ 110,000 (median
# 11,000, a tail of hundreds of functions for hours), which queues from ≈ 0.5 jobs/s; naive
# ≈ 1.4 million, which saturates the pool above ≈ 0.03 jobs/s — over-provisioning on a shared
# pool costs waiting too, and that shows. 10,000 jobs span ≈ 14 hours.
DEFAULT_RATE_PER_S = 0.2
BURSTY_CV = 2.0  # coefficient of variation of the bursty process's gamma inter-arrival times
DIURNAL_AMPLITUDE = 0.8  # the diurnal rate swings between 0.2× and 1.8× its mean ...
DIURNAL_PERIOD_S = 86_400.0  # ... once a day
HEAVY_ALPHA = 1.2  # the heavy mix's Pareto shape: below 2, so the size variance is huge
HEAVY_MAX = 50.0  # its largest job, in multiples of the workload's own epochs


def check_seed(seed: object) -> int:
    """The seed of a simulation as an int, or `InputError`: numpy wants an integer ≥ 0."""
    return integer("seed", seed, error=InputError, minimum=0, floats=False,
                   need="an integer ≥ 0")


def _arrivals(rng: np.random.Generator, jobs: int, rate: float, arrival: str) -> np.ndarray:
    """Submission times in seconds (unrounded) of `jobs` arrivals at long-run mean `rate`."""
    if arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate, jobs))
    if arrival == "bursty":
        shape = 1.0 / BURSTY_CV**2  # a gamma's CV is 1/√shape; its mean shape·scale is 1/rate
        return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), jobs))
    # diurnal: time-rescaling, t_i = Λ⁻¹(E_1 + … + E_i) with unit exponentials E and the
    # cumulative rate Λ(t) = rate·(t + aP/2π·(1 − cos 2πt/P)), which is increasing (a < 1) and
    # lies in [rate·t, rate·(t + aP/π)]: bisection in that bracket.
    targets = np.cumsum(rng.exponential(1.0, jobs))
    swing = DIURNAL_AMPLITUDE * DIURNAL_PERIOD_S / (2 * math.pi)
    low = np.maximum(targets / rate - 2 * swing, 0.0)
    high = targets / rate
    for _ in range(64):  # the bracket, aP/π ≈ 6 h wide, halves to float precision
        middle = (low + high) / 2
        cumulative = rate * (middle + swing * (1 - np.cos(2 * math.pi * middle / DIURNAL_PERIOD_S)))
        below = cumulative < targets
        low = np.where(below, middle, low)
        high = np.where(below, high, middle)
    return high


def _choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"`{name}` must be one of {', '.join(choices)}, got {brief(value)}")
    return value


def _heavy_multipliers(rng: np.random.Generator, size: int) -> np.ndarray:
    """Job-size multipliers of the heavy mix: bounded Pareto on [1, `HEAVY_MAX`], shape
    `HEAVY_ALPHA`, by inversion of its distribution function."""
    tail = 1.0 - HEAVY_MAX**-HEAVY_ALPHA
    multipliers: np.ndarray = (1.0 - rng.random(size) * tail) ** (-1.0 / HEAVY_ALPHA)
    return multipliers


def generate_trace(
    jobs: int,
    *,
    seed: int,
    rate_per_s: float = DEFAULT_RATE_PER_S,
    workloads: Sequence[str] = WORKLOADS,
    deadlines: tuple[int, int] = (600, 1200),
    arrival: str = "poisson",
    mix: str = "paper",
) -> list[Job]:
    """A synthetic trace: seeded arrivals, uniform workloads, whole-second deadlines.

    Arrival processes (`ARRIVALS`), each with long-run mean rate `rate_per_s` (submission times
    kept to the millisecond):

    * ``poisson`` — exponential inter-arrival times, mean `1/rate_per_s` (CV 1);
    * ``bursty`` — gamma inter-arrival times, mean `1/rate_per_s`, CV `BURSTY_CV` (2): a
      renewal process whose counts have index of dispersion → CV² = 4 (clusters and lulls);
    * ``diurnal`` — Poisson with rate `rate_per_s·(1 + a·sin 2πt/P)`, a = `DIURNAL_AMPLITUDE`
      (0.8), P = `DIURNAL_PERIOD_S` (one day): busiest 6 h in, quietest 18 h in.

    Job-size mixes (`MIXES`); each job's workload is uniform over `workloads` and `U` is a
    uniform integer in `deadlines` (inclusive, the paper's 600–1,200 s by default):

    * ``paper`` — each job trains its workload's own epochs E, deadline `U`; identical
      questions recur, so a planner can cache by (instance, epochs, deadline);
    * ``heavy`` — epochs round(E·X) with X bounded Pareto on [1, `HEAVY_MAX` = 50], shape
      `HEAVY_ALPHA` = 1.2 (median 1.8, mean 3.3, 5% of jobs ≥ 10×, 0.8% ≥ 30×), deadline
      round(U·epochs/E) s: at a fixed plan the training time grows with the epochs, so scaling
      the deadline with the size keeps the plan that meets a paper job meeting its larger
      version, and the share of jobs a good planner can meet comparable.
    """
    integer("jobs", jobs, error=InputError, minimum=0, maximum=MAX_TRACE_JOBS, floats=False,
            need=f"an integer in 0..{MAX_TRACE_JOBS:,}")
    seed = check_seed(seed)
    rate = number("rate_per_s", rate_per_s, error=InputError)
    low, high = deadlines
    if not 0 < low <= high:
        raise InputError(f"`deadlines` must be (low, high) with 0 < low ≤ high, got {deadlines}")
    if not workloads:
        raise InputError("`workloads` must name at least one instance")
    arrival = _choice(arrival, "arrival", ARRIVALS)
    mix = _choice(mix, "mix", MIXES)
    rng = np.random.default_rng(seed)
    arrivals = np.round(_arrivals(rng, jobs, rate, arrival), 3)
    chosen = rng.integers(len(workloads), size=jobs)
    deadline_draws = rng.integers(low, high, size=jobs, endpoint=True)
    loader = Loader(None)
    base = np.array([loader.instance(name).workload.epochs for name in workloads])[chosen]
    epochs, deadline_s = base, deadline_draws.astype(float)
    if mix == "heavy":
        epochs = np.maximum(np.round(base * _heavy_multipliers(rng, jobs)), 1).astype(int)
        deadline_s = np.maximum(np.round(deadline_draws * epochs / base), 1)
    return [
        loader.job(float(arrival), workloads[pick], int(size), float(deadline))
        for arrival, pick, size, deadline in zip(arrivals, chosen, epochs, deadline_s, strict=True)
    ]
