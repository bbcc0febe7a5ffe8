"""Strategies that measure: AWS Lambda Power Tuning and a Siren/SMLT-style sampled search.

Both decide from profiling trials, not from the model's rate: a trial runs the job's plan for
`TRIAL_ITERATIONS` iterations in the simulator, under the truth (`measure`), as a tuner would
run a few real invocations. What a trial costs is charged to the strategy, the functions it
holds and the seconds it takes are placed in the shared pool before the job, and its time
counts against the job's deadline. Each strategy keeps what it measured, per workload (the
instance without its epochs and deadline) and plan, for the jobs that follow: a plan measured
once is not measured again, so a stream of jobs of one workload pays for exploring once.

A trial is stopped `TRIAL_MAX_S` seconds after its functions are up, with the iterations it
completed by then; a plan that completed none within it is too slow to consider.
A measured plan is extrapolated to a job of k iterations with the same test `lambdadnn`
applies, at the same guarantee p (z = Φ⁻¹(p)): from the N iteration times seen, mean μ and
standard deviation σ, the run takes load + k·μ + z·σ·√(k + k²/N) (the spread of k iterations
plus the error of estimating μ from N), plus per invocation round the slowest start-up seen
and the platform's restart overhead; the load is the trial's share of the data scaled to the
whole. A plan "meets" the deadline when that quantile fits in what the trials left of it.
"""

from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

import numpy as np

from ..models import performance
from ..models.noise import NoiseModel, normal_quantile, planning_noise
from ..models.prices import bill
from ..solver.instance import Instance
from .baselines import (
    NO_PLAN,
    Measure,
    StrategyPlan,
    max_functions,
    memory_range,
    snap_memory,
)
from .engine import TrialRun

# AWS Lambda Power Tuning's usual sweep: its default powerValues plus today's larger sizes.
POWER_TUNING_MEMORIES = (128, 256, 512, 1024, 1536, 2048, 3008, 4096, 6144, 8192, 10240)
SAMPLE_SEARCH_BUDGET = 8  # trials while a workload's archive fills; then one a job
SAMPLE_SEARCH_LIMIT = 4 * SAMPLE_SEARCH_BUDGET  # plans kept per workload: then it stops trying
# Local refinements perturb the incumbent's n and m by lognormal factors of this σ (≈ ±30%).
REFINE_SIGMA = 0.3
TRIAL_ITERATIONS = 20
TRIAL_MAX_S = 60.0  # a trial is stopped this long after its functions are up


@dataclass
class Measured:
    """Everything seen of one plan of one workload, over all its trials."""

    iteration_s: list[float] = field(default_factory=list)
    setup_s: list[float] = field(default_factory=list)
    full_load_s: list[float] = field(default_factory=list)

    def add(self, run: TrialRun) -> None:
        self.iteration_s.extend(run.iteration_s)
        self.setup_s.append(run.setup_s)
        if run.iteration_s:  # else its load may have been cut short
            self.full_load_s.append(run.load_s / run.load_share)

    def predict(self, instance: Instance, functions: int, memory_mb: int, z: float) -> float:
        """The run's time at quantile z (z = 0: its expected time), as the docstring says;
        infinite for a plan too slow to complete one iteration within a trial."""
        if not self.iteration_s:
            return math.inf
        values = instance.values()
        k = float(performance.figures(values, functions, memory_mb, ("iterations",))["iterations"])
        samples = len(self.iteration_s)
        mean = statistics.fmean(self.iteration_s)
        spread = statistics.stdev(self.iteration_s) if samples > 1 else 0.0
        train = statistics.fmean(self.full_load_s) + k * mean + z * spread * math.sqrt(
            k + k * k / samples
        )
        setup = max(self.setup_s) if z > 0 else statistics.fmean(self.setup_s)
        platform = instance.platform
        rounds = max(1, math.ceil(train / (platform.timeout_s - platform.timeout_margin_s)))
        return train + (rounds - 1) * platform.restart_overhead_s + rounds * setup


def workload_key(instance: Instance) -> tuple[object, ...]:
    """The instance without what varies from job to job (epochs, deadline): what is measured."""
    return replace(instance, workload=replace(instance.workload, epochs=1)).undated_key()


def _cost(instance: Instance, functions: int, memory_mb: int, time_s: float) -> float:
    """What `time_s` on the plan costs: GB-seconds, the PS, one request per function."""
    platform, ps = instance.platform, instance.parameter_server
    return bill(time_s, functions, memory_mb, requests=functions,
                price_per_gb_second=platform.price_per_gb_second,
                price_per_request=platform.price_per_request,
                ps_price_per_hour=ps.shards * ps.price_per_hour)


class _Tuner(ABC):
    """The archive and the choice both tuners share."""

    def __init__(self, guarantee: float, iterations: int = TRIAL_ITERATIONS) -> None:
        self.guarantee = guarantee
        self.z = max(0.0, normal_quantile(guarantee))
        self.iterations = iterations
        self.archive: dict[tuple[object, ...], dict[tuple[int, int], Measured]] = {}

    def __call__(
        self, instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure,
    ) -> StrategyPlan:
        """A `Strategy`: no plan where the function cannot train at any memory size."""
        allowed = memory_range(instance)
        return NO_PLAN if allowed is None else self.tune(instance, allowed, rng, noise, measure)

    @abstractmethod
    def tune(
        self, instance: Instance, allowed: tuple[int, int], rng: np.random.Generator,
        noise: NoiseModel, measure: Measure,
    ) -> StrategyPlan:
        """The plan for one job, `allowed` the valid memory range (`memory_range`)."""

    def points(self, instance: Instance) -> dict[tuple[int, int], Measured]:
        return self.archive.setdefault(workload_key(instance), {})

    def measure(
        self, instance: Instance, plans: list[tuple[int, int]], measure: Measure,
        rng: np.random.Generator, trials: list[list[TrialRun]],
    ) -> None:
        """Run one trial of each of `plans`, side by side (one stage), and keep what they saw."""
        stage = []
        for plan in plans:
            run = measure(plan[0], plan[1], self.iterations, TRIAL_MAX_S, rng)
            self.points(instance).setdefault(plan, Measured()).add(run)
            stage.append(run)
        if stage:
            trials.append(stage)

    def choose(
        self, instance: Instance, candidates: list[tuple[int, int]],
        trials: list[list[TrialRun]],
    ) -> StrategyPlan:
        """The cheapest candidate predicted to meet what is left of the deadline, else the
        fastest; charged with this job's trials."""
        points = self.points(instance)
        stages = [
            (sum(run.functions for run in stage), max(run.time_s for run in stage))
            for stage in trials
        ]
        left = instance.objective.deadline_s - sum(seconds for _, seconds in stages)
        scored = []
        for n, m in candidates:
            measured = points[(n, m)]
            expected = measured.predict(instance, n, m, 0.0)
            quantile = measured.predict(instance, n, m, self.z)
            scored.append((quantile <= left, _cost(instance, n, m, expected), quantile, n, m,
                           expected))
        meeting = [entry for entry in scored if entry[0]]
        if meeting:
            best = min(meeting, key=lambda entry: (entry[1], entry[2]))
        else:
            best = min(scored, key=lambda entry: (entry[2], entry[1]))
        return StrategyPlan(
            best[3], best[4], best[5], sum(run.cost_usd for stage in trials for run in stage),
            sum(len(stage) for stage in trials), found=True, trials=tuple(stages),
        )


def power_tuning_functions(
    instance: Instance, memory_mb: int, noise: NoiseModel, guarantee: float
) -> int:
    """The smallest n whose model p-quantile of time at `memory_mb` meets the deadline, else
    the fastest n: the count a user sizes "for the biggest function" before sweeping memory
    down, with the test every strategy here applies."""
    values = instance.values()
    top = max_functions(instance)
    n = np.arange(1, top + 1, dtype=np.float64)
    terms = planning_noise(noise, guarantee, instance.max_functions)
    time_s = performance.figures(values, n, float(memory_mb), ("deadline_time",), terms)[
        "deadline_time"
    ]
    meets = np.flatnonzero(time_s <= instance.objective.deadline_s)
    return int(n[meets[0]] if meets.size else n[np.argmin(time_s)])


class PowerTuning(_Tuner):
    """AWS Lambda Power Tuning: fix n, measure every memory size of its sweep, keep the best.

    Sizes are snapped to the platform's grid and clipped to m_min (duplicates once); sizes
    where the function cannot train at all are not tried.
    """

    def __init__(
        self, guarantee: float, memories: tuple[int, ...] = POWER_TUNING_MEMORIES,
        iterations: int = TRIAL_ITERATIONS,
    ) -> None:
        super().__init__(guarantee, iterations)
        self.memories = memories

    def tune(
        self, instance: Instance, allowed: tuple[int, int], rng: np.random.Generator,
        noise: NoiseModel, measure: Measure,
    ) -> StrategyPlan:
        grid = instance.platform.memory
        floor = grid.min_mb + math.ceil((instance.min_memory_mb - grid.min_mb) / grid.step_mb) * (
            grid.step_mb
        )
        snapped = {snap_memory(instance, size, (floor, allowed[1])) for size in self.memories}
        sizes = sorted(size for size in snapped if size >= allowed[0])
        if not sizes:
            return NO_PLAN
        functions = power_tuning_functions(instance, sizes[-1], noise, self.guarantee)
        trials: list[list[TrialRun]] = []
        points = self.points(instance)
        new = [(functions, size) for size in sizes if (functions, size) not in points]
        self.measure(instance, new, measure, rng, trials)
        return self.choose(instance, [(functions, size) for size in sizes], trials)


class SampleSearch(_Tuner):
    """Siren/SMLT-style search over (n, m), learning across the jobs of a workload.

    While a workload has fewer than `budget` plans measured, a job samples new ones: the first
    three quarters at random over the valid region, side by side (n and m log-uniform, since
    sizes matter by ratio), the rest one after another around the incumbent, perturbing n
    and m by lognormal factors (σ = `REFINE_SIGMA`). Then each job refines once around its
    incumbent, until the workload has `SAMPLE_SEARCH_LIMIT` plans measured: from there it
    exploits what it knows, without trials. The plan is the best of everything measured for
    the workload.
    """

    def __init__(
        self, guarantee: float, budget: int = SAMPLE_SEARCH_BUDGET,
        iterations: int = TRIAL_ITERATIONS,
    ) -> None:
        super().__init__(guarantee, iterations)
        self.budget = budget

    def tune(
        self, instance: Instance, allowed: tuple[int, int], rng: np.random.Generator,
        noise: NoiseModel, measure: Measure,
    ) -> StrategyPlan:
        top_n = max_functions(instance)
        points = self.points(instance)
        trials: list[list[TrialRun]] = []
        explore = self.budget - self.budget // 4
        log_low, log_high = math.log(allowed[0]), math.log(allowed[1])
        drawn: set[tuple[int, int]] = set()
        while len(points) + len(drawn) < explore:
            memory = snap_memory(instance, math.exp(rng.uniform(log_low, log_high)), allowed)
            functions = round(math.exp(rng.uniform(0.0, math.log(top_n))))
            drawn.add((int(functions), memory))
        self.measure(instance, sorted(drawn), measure, rng, trials)
        refinements = max(1, self.budget - len(points)) if len(points) < self.budget else 1
        for _ in range(refinements if len(points) < SAMPLE_SEARCH_LIMIT else 0):
            incumbent = self.choose(instance, list(points), trials)
            scale_n, scale_m = np.exp(rng.normal(0.0, REFINE_SIGMA, 2))
            plan = (
                int(min(max(round(incumbent.functions * scale_n), 1), top_n)),
                snap_memory(instance, incumbent.memory_mb * scale_m, allowed),
            )
            self.measure(instance, [plan], measure, rng, trials)
        return self.choose(instance, list(points), trials)
