"""Plans from a model: the strategies that decide without trial runs, and what all share.

A strategy maps a job to a plan: `strategy(instance, rng, noise, measure)`. It sees the job's
instance and the noise model it is configured with (the belief) and may run profiling trials
with `measure(functions, memory_mb, iterations, max_s, rng)`, which the simulator runs
under the truth (`simulator.truth`) the strategy never sees. This module has the model-based
baselines; `simulator.tuners` those that measure, `simulator.strategies` the registry.

* `naive`, Cirrus-style manual provisioning as λDNN's paper describes its baseline: the
  largest memory, and n drawn uniformly from 1 to ⌊B_p/B_f^max⌋, the most functions the PS
  serves at full per-function bandwidth (14 on the shipped instances) — the range a user
  provisioning by hand would stay within. (Drawing n up to the platform's 1,000 floods a
  shared pool with jobs nobody would launch.)
* `ldnn-alg1`, λDNN's Algorithm 1 as published (`simulator.ldnn_alg1`): 64 MB steps up to
  3,008 MB, the model's mean time against the deadline.
* `ldnn-alg1-q`, the same algorithm with lambdadnn's information: its memory ladder runs to
  the platform's largest size and it tests each plan's p-quantile of time under the noise
  model, as `solve(..., guarantee=p)` does. Against it, `lambdadnn` shows what its exact
  search is worth and nothing else.

Plans are always drawn from the region the model calls valid (R > 0, B_f^s > 0, b_l ≥ 1,
m ≥ m_min, n ≤ the instance's limit): nobody provisions a function that cannot train at all.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..models import performance
from ..models.noise import NoiseModel, planning_noise
from ..solver.instance import Instance, MemoryGrid, ParameterServer
from ..solver.pipeline import evaluate
from .adaptive import AdaptiveRun
from .engine import TrialRun
from .ldnn_alg1 import PUBLISHED_MAX_MB, n_upper
from .ldnn_alg1 import ldnn_alg1 as published_alg1
from .replan import Replanner

# A job run under a controller that re-plans it (`simulator.adaptive.run_adaptive`): (true
# instance, true noise, seconds to the deadline, rng, most functions) → what the run did.
Adaptive = Callable[[Instance, NoiseModel, float, np.random.Generator, int], AdaptiveRun]


@dataclass(frozen=True)
class StrategyPlan:
    """What a strategy decided for one job, and what deciding cost it.

    When `found` is false the strategy has no plan (the job is not run): `functions` and
    `memory_mb` are 0 and `predicted_time_s` is infinite. `trials` are the profiling stages
    run for this job, in order, as (functions held, seconds); trials run side by side form
    one stage. The pool runs them before the job: they hold functions and count against its
    deadline. A strategy that re-plans as the job runs also gives `adaptive` (run by the
    model-family engine) or `replanner` (a factory of a fresh `simulator.replan.Replanner` for
    the job, run in the independent world): the pool runs the job with it, and the plan above
    is only the first (or, for a re-planner that picks its own, the functions it starts with).
    """

    functions: int
    memory_mb: int
    predicted_time_s: float  # what the strategy expects the run to take
    exploration_cost_usd: float
    exploration_runs: int
    found: bool
    trials: tuple[tuple[int, float], ...] = ()
    adaptive: Adaptive | None = None
    replanner: Callable[[], Replanner] | None = None
    server: ParameterServer | None = None  # the PS chosen, when the instance offered choices


# A profiling trial under the truth: (functions, memory_mb, iterations, max_s, rng) →
# what it measured (`simulator.engine.simulate_trial`).
Measure = Callable[[int, int, int, float, np.random.Generator], TrialRun]
Strategy = Callable[[Instance, np.random.Generator, NoiseModel, Measure], StrategyPlan]

NO_PLAN = StrategyPlan(0, 0, math.inf, 0.0, 0, found=False)


def model_plan(instance: Instance, functions: int, memory_mb: int) -> StrategyPlan:
    """A plan chosen without trials, its prediction the model's mean time."""
    predicted = evaluate(instance, functions=functions, memory_mb=memory_mb).time_s
    return StrategyPlan(functions, memory_mb, predicted, 0.0, 0, found=True)


def max_functions(instance: Instance) -> int:
    """The largest valid n: the instance's limit, and b_g^max (beyond it b_l < 1)."""
    return min(instance.max_functions, instance.workload.max_global_batch)


def memory_range(instance: Instance) -> tuple[int, int] | None:
    """The smallest and largest grid sizes that are ≥ m_min and valid (R > 0, B_f^s > 0).

    R and B_f^s never decrease with m, so the valid sizes are one interval; None if empty.
    """
    values = instance.values()
    return _memory_range(instance.platform.memory, instance.min_memory_mb, values)


@functools.lru_cache(maxsize=1024)  # keyed without the deadline: a trace has few workloads
def _memory_range(
    memory: MemoryGrid, min_memory_mb: float, values: tuple[float, ...]
) -> tuple[int, int] | None:
    grid = memory.values()
    grid = grid[grid >= min_memory_mb]
    if grid.size == 0:
        return None
    found = performance.figures(values, 1.0, grid, ("rate", "storage_bandwidth"))
    valid = np.flatnonzero((found["rate"] > 0) & (found["storage_bandwidth"] > 0))
    if valid.size == 0:
        return None
    return int(grid[valid[0]]), int(grid[-1])


def snap_memory(instance: Instance, memory_mb: float, allowed: tuple[int, int]) -> int:
    """The grid size nearest `memory_mb`, clipped into `allowed` (see `memory_range`)."""
    grid = instance.platform.memory
    low, high = allowed
    on_grid = grid.min_mb + round((memory_mb - grid.min_mb) / grid.step_mb) * grid.step_mb
    return int(min(max(on_grid, low), high))


def naive(instance: Instance, rng: np.random.Generator) -> StrategyPlan:
    """The paper's naive baseline: the largest memory, n uniform over 1..⌊B_p/B_f^max⌋."""
    allowed = memory_range(instance)
    if allowed is None:
        return NO_PLAN
    top = max(1, min(n_upper(instance), max_functions(instance)))
    functions = int(rng.integers(1, top, endpoint=True))
    return model_plan(instance, functions, allowed[1])


def _alg1_answer(instance: Instance, up_to_mb: int, noise: NoiseModel | None,
                 guarantee: float | None) -> StrategyPlan:
    terms = None if noise is None or guarantee is None else planning_noise(
        noise, guarantee, instance.max_functions
    )
    result = published_alg1(instance, up_to_mb=up_to_mb, noise=terms)
    if result.functions is not None and result.memory_mb is not None:
        return model_plan(instance, result.functions, result.memory_mb)
    # The job is trained all the same: on the fastest plan the algorithm's own search space
    # offers (its largest memory with n at its upper bound), as a user of it would.
    for memory_mb in sorted(result.memory_sizes_tried, reverse=True):
        functions = min(result.n_upper, max_functions(instance))
        if evaluate(instance, functions=functions, memory_mb=memory_mb).valid:
            return model_plan(instance, functions, memory_mb)
    return NO_PLAN


@functools.lru_cache(maxsize=4096)
def ldnn_alg1(instance: Instance) -> StrategyPlan:
    """λDNN's Algorithm 1 as published (`simulator.ldnn_alg1`); deterministic, so cached.

    It plans from the model alone: no trial runs. When it finds no plan meeting the deadline
    the job still runs, on the fastest plan of its search space (and most likely misses).
    """
    return _alg1_answer(instance, PUBLISHED_MAX_MB, None, None)


@functools.lru_cache(maxsize=4096)
def ldnn_alg1_q(instance: Instance, noise: NoiseModel, guarantee: float) -> StrategyPlan:
    """Algorithm 1 over the platform's whole memory range with the p-quantile test of `solve`."""
    return _alg1_answer(instance, instance.platform.memory.max_mb, noise, guarantee)
