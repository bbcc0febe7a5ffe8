"""The provisioning strategies users have today, each a function from a job to a plan.

They are what `lambdadnn` is compared with on the same simulated jobs (issue 3): the naive
Cirrus-style choice, λDNN's own Algorithm 1, the memory sweep of AWS Lambda Power Tuning, and a
Siren/SMLT-style sampled search. Strategies that learn by trial runs run them in the simulator
(`simulate_job`, with the job's noise and planning rng) and pay for them: every trial is a run
of the whole job at the tried plan, stopped once it overruns the deadline (nobody watches a
trial run for hours past it), and what it cost up to then lands in `exploration_cost_usd`.
Trials happen before the job is submitted, so they neither hold functions of the shared pool
nor count against the job's deadline — the comparison charges exploring in money only.

Plans are always drawn from the region the model calls valid (R > 0, B_f^s > 0, b_l ≥ 1,
m ≥ m_min, n ≤ the instance's limit): nobody provisions a function that cannot train at all.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lambdadnn.models import performance
from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.engine import simulate_job
from lambdadnn.simulator.ldnn_alg1 import ldnn_alg1 as published_alg1
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.instance import Instance, MemoryGrid
from lambdadnn.solver.pipeline import evaluate

# AWS Lambda Power Tuning's usual sweep: its default powerValues plus today's larger sizes.
POWER_TUNING_MEMORIES = (128, 256, 512, 1024, 1536, 2048, 3008, 4096, 6144, 8192, 10240)
SAMPLE_SEARCH_BUDGET = 8
# Local refinements perturb the incumbent's n and m by lognormal factors of this σ (≈ ±30%).
REFINE_SIGMA = 0.3


@dataclass(frozen=True)
class StrategyPlan:
    """What a strategy decided for one job, and what deciding cost it.

    When `found` is false the strategy has no plan (the job is not run): `functions` and
    `memory_mb` are 0 and `predicted_time_s` is infinite.
    """

    functions: int
    memory_mb: int
    predicted_time_s: float  # the model's time for this plan (`solver.evaluate`)
    exploration_cost_usd: float
    exploration_runs: int
    found: bool


Strategy = Callable[[Instance, np.random.Generator, NoiseModel], StrategyPlan]
Trial = tuple[int, int, float, float]  # functions, memory_mb, simulated time_s, cost_usd paid


NO_PLAN = StrategyPlan(0, 0, math.inf, 0.0, 0, found=False)


def _plan(
    instance: Instance, functions: int, memory_mb: int,
    exploration_cost_usd: float = 0.0, exploration_runs: int = 0,
) -> StrategyPlan:
    predicted = evaluate(instance, functions=functions, memory_mb=memory_mb).time_s
    return StrategyPlan(
        functions, memory_mb, predicted, exploration_cost_usd, exploration_runs, found=True
    )


def max_functions(instance: Instance) -> int:
    """The largest valid n: the instance's limit, and b_g^max (beyond it b_l < 1)."""
    return min(instance.max_functions, instance.workload.max_global_batch)


def memory_range(instance: Instance) -> tuple[int, int] | None:
    """The smallest and largest grid sizes that are ≥ m_min and valid (R > 0, B_f^s > 0).

    R and B_f^s never decrease with m, so the valid sizes are one interval; None if empty.
    """
    values = performance.parameter_values(instance.parameters())
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


def _trial(
    instance: Instance, functions: int, memory_mb: int, noise: NoiseModel,
    rng: np.random.Generator,
) -> Trial:
    """One trial run of the job, paid pro rata up to the deadline if it overruns it.

    Cost grows linearly with time (GB-seconds and the PS by the second), so a run stopped at
    the deadline costs its full cost × deadline / time; its full time is what the user
    extrapolates from the progress made — infinite for a run the simulator abandoned (it
    would not finish), which is paid for what it ran, up to the deadline.
    """
    run = simulate_job(instance, functions, memory_mb, noise=noise, rng=rng)
    deadline = instance.objective.deadline_s
    paid = run.cost_usd if run.time_s <= deadline else run.cost_usd * deadline / run.time_s
    return functions, memory_mb, run.time_s if run.finished else math.inf, paid


def _incumbent(trials: Sequence[Trial], deadline_s: float) -> Trial:
    """The cheapest trial that met the deadline, else the fastest."""
    met = [trial for trial in trials if trial[2] <= deadline_s]
    if met:
        return min(met, key=lambda trial: (trial[3], trial[2]))
    return min(trials, key=lambda trial: (trial[2], trial[3]))


def _keep_best(instance: Instance, trials: Sequence[Trial]) -> StrategyPlan:
    """The incumbent as the plan, charged with every trial's cost."""
    n, m, _, _ = _incumbent(trials, instance.objective.deadline_s)
    return _plan(instance, n, m, sum(trial[3] for trial in trials), len(trials))


def naive(instance: Instance, rng: np.random.Generator) -> StrategyPlan:
    """Cirrus-style, the paper's naive baseline: the largest memory, n uniform over 1..n_max."""
    allowed = memory_range(instance)
    if allowed is None:
        return NO_PLAN
    functions = int(rng.integers(1, max_functions(instance), endpoint=True))
    return _plan(instance, functions, allowed[1])


@functools.lru_cache(maxsize=4096)
def _alg1_plan(instance: Instance) -> StrategyPlan:
    result = published_alg1(instance)
    if result.functions is not None and result.memory_mb is not None:
        return _plan(instance, result.functions, result.memory_mb)
    # The job is trained all the same: on the fastest plan the algorithm's own search space
    # offers (its largest memory with n at its upper bound), as a user of it would.
    for memory_mb in sorted(result.memory_sizes_tried, reverse=True):
        functions = min(result.n_upper, max_functions(instance))
        if evaluate(instance, functions=functions, memory_mb=memory_mb).valid:
            return _plan(instance, functions, memory_mb)
    return NO_PLAN


def ldnn_alg1(instance: Instance, rng: np.random.Generator) -> StrategyPlan:
    """λDNN's Algorithm 1 as published (`simulator.ldnn_alg1`); deterministic, so cached.

    It plans from the model alone: no trial runs. When it finds no plan meeting the deadline
    the job still runs, on the fastest plan of its search space (and most likely misses).
    """
    return _alg1_plan(instance)


def _power_tuning_functions(instance: Instance, memory_mb: int) -> int:
    """The smallest n whose model time at `memory_mb` meets the deadline, else the fastest n."""
    values = performance.parameter_values(instance.parameters())
    n = np.arange(1, max_functions(instance) + 1, dtype=np.float64)
    time_s = performance.figures(values, n, float(memory_mb), ("time",))["time"]
    meets = np.flatnonzero(time_s <= instance.objective.deadline_s)
    return int(n[meets[0]] if meets.size else n[np.argmin(time_s)])


def power_tuning(
    instance: Instance,
    rng: np.random.Generator,
    *,
    noise: NoiseModel,
    memories: Sequence[int] = POWER_TUNING_MEMORIES,
    functions: int | None = None,
) -> StrategyPlan:
    """AWS Lambda Power Tuning by hand: fix n, run the job once per memory size, keep the best.

    `memories` are snapped to the platform's grid and clipped to m_min (duplicates run once);
    sizes where the function cannot train at all (R ≤ 0 or B_f^s ≤ 0) are not tried.
    `functions` defaults to the smallest n with which the model says the largest of them meets
    the deadline (else the fastest n there) — the count a user would size "for the biggest
    function" before sweeping memory down. Kept: the cheapest trial that met the deadline,
    else the fastest.
    """
    allowed = memory_range(instance)
    if allowed is None:
        return NO_PLAN
    first, step = instance.platform.memory.min_mb, instance.platform.memory.step_mb
    floor = first + math.ceil((instance.min_memory_mb - first) / step) * step  # ≥ m_min
    snapped = {snap_memory(instance, size, (floor, allowed[1])) for size in memories}
    sizes = sorted(size for size in snapped if size >= allowed[0])
    if not sizes:
        return NO_PLAN
    if functions is None:
        functions = _power_tuning_functions(instance, sizes[-1])
    elif not 1 <= functions <= max_functions(instance):
        raise InstanceError(
            f"`functions` must be in 1..{max_functions(instance)} for {brief(instance.name)}, "
            f"got {brief(functions)}"
        )
    trials = [_trial(instance, functions, size, noise, rng) for size in sizes]
    return _keep_best(instance, trials)


def sample_search(
    instance: Instance,
    rng: np.random.Generator,
    *,
    noise: NoiseModel,
    budget: int = SAMPLE_SEARCH_BUDGET,
) -> StrategyPlan:
    """Siren/SMLT-style search: `budget` trial runs, keep the best observed.

    Three quarters of the budget (rounded up) samples (n, m) at random over the valid region —
    m log-uniform (sizes matter by ratio), n uniform — and the rest refines around the
    incumbent by perturbing both by lognormal factors (σ = `REFINE_SIGMA`). Kept: the cheapest
    trial that met the deadline, else the fastest.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise InstanceError(f"`budget` must be a positive integer, got {brief(budget)}")
    allowed = memory_range(instance)
    if allowed is None:
        return NO_PLAN
    top_n = max_functions(instance)
    trials: list[Trial] = []
    explore = budget - budget // 4
    log_low, log_high = math.log(allowed[0]), math.log(allowed[1])
    for _ in range(explore):
        memory = snap_memory(instance, math.exp(rng.uniform(log_low, log_high)), allowed)
        functions = int(rng.integers(1, top_n, endpoint=True))
        trials.append(_trial(instance, functions, memory, noise, rng))
    for _ in range(budget - explore):
        n, m, _, _ = _incumbent(trials, instance.objective.deadline_s)
        scale_n, scale_m = np.exp(rng.normal(0.0, REFINE_SIGMA, 2))
        functions = int(min(max(round(n * scale_n), 1), top_n))
        memory = snap_memory(instance, m * scale_m, allowed)
        trials.append(_trial(instance, functions, memory, noise, rng))
    return _keep_best(instance, trials)


STRATEGIES: dict[str, Strategy] = {
    "naive": lambda instance, rng, noise: naive(instance, rng),
    "ldnn-alg1": lambda instance, rng, noise: ldnn_alg1(instance, rng),
    "power-tuning": lambda instance, rng, noise: power_tuning(instance, rng, noise=noise),
    "sample-search": lambda instance, rng, noise: sample_search(instance, rng, noise=noise),
}
