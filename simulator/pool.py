"""Replaying a trace: jobs share one pool of functions and wait, first come first served.

Each job is planned by a strategy when it is submitted (its profiling trials, if any, run
first and hold functions too), waits until every earlier job has started and enough
functions are free (strict FIFO: a large job at the head holds back smaller
ones behind it, as a fair queue would), then runs in the simulator for as long as the engine
says and gives its functions back. Random draws come from two streams per job seeded by
(seed, job index) — one for planning (a strategy's trial runs), one for the run itself — so
every strategy meets the same luck on the same job, whatever it consumed while planning.

A job run by a controller that re-plans it (`lambdadnn-adaptive`) holds its plans' functions
stage by stage, each once its functions are free, as trials are placed. Its controller is
given the deadline less the job's wait: the wait until the first plan's functions are free
for its predicted time (a later stage delayed by a busy pool delays the job beyond what its
controller knew; a job that waited past its deadline is planned for `LATE_BUDGET_S`, which
asks for the fastest plan).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from ..inputs.errors import InputError
from ..inputs.numbers import integer
from ..models.noise import NoiseModel
from ..solver.capacity import Capacity
from ..solver.instance import Instance
from ..solver.trace_file import Job
from .adaptive import AdaptiveRun
from .baselines import NO_PLAN, Measure, Strategy, StrategyPlan
from .defaults import DEFAULT_POOL_SIZE
from .engine import (
    JobRun,
    TrialRun,
    UntrainablePlan,
    simulate_job,
    simulate_trial,
)
from .trace import check_seed
from .truth import Truth, on_server
from .world import World, WorldRun
from .worlds import WorldRunner

_PLAN_STREAM, RUN_STREAM = 0, 1
LATE_BUDGET_S = 1e-3  # the time budget of an adaptive job that waited past its deadline

Status = Literal["ok", "no-plan", "abandoned", "untrainable"]


@dataclass(frozen=True)
class JobOutcome:
    """What happened to one job of the trace under one strategy.

    A job with status 'no-plan' (the strategy found none, or wanted more functions than the
    whole pool) never starts: its start, end and simulated time are infinite, its run costs
    nothing and it misses its deadline; `functions`, `memory_mb` and `predicted_time_s` are
    the strategy's answer, exploration what it spent deciding. A job with status 'abandoned'
    ran into one of the simulator's limits (`simulator.engine`, "Limits"): it holds its
    functions and pays for the time it ran until then, and misses its deadline. A job with
    status 'untrainable' could not train at all in the truth or world it ran in (its plan, or
    a trial's, has no positive rate or storage bandwidth there): it starts at its submission,
    takes no time, costs nothing and misses its deadline; it never stops the replay.
    """

    index: int
    instance_name: str
    deadline_s: float
    submit_time_s: float
    start_time_s: float
    end_time_s: float
    functions: int
    memory_mb: int
    predicted_time_s: float
    time_s: float
    cost_usd: float
    gb_seconds: float
    restarts: int
    failures: int
    exploration_cost_usd: float
    exploration_runs: int
    met_deadline: bool
    status: Status

    def to_dict(self) -> dict[str, Any]:
        return json_ready(asdict(self))


def json_ready(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with infinite or NaN numbers as None, so that it can be written as JSON."""
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in record.items()
    }


def job_rng(seed: int, index: int, stream: int) -> np.random.Generator:
    """The generator of one job's planning (stream 0) or run (stream 1) for a given seed."""
    return np.random.default_rng((seed, index, stream))


def job_outcome(
    index: int, job: Job, plan: StrategyPlan, start: float, *, time_s: float, cost_usd: float,
    gb_seconds: float, restarts: int, failures: int, status: Status, end: float | None = None,
) -> JobOutcome:
    """The outcome; `end` defaults to `start + time_s` (a job whose stages waited ends later)."""
    end = start + time_s if end is None else end
    return JobOutcome(
        index=index,
        instance_name=job.instance_name,
        deadline_s=job.deadline_s,
        submit_time_s=job.submit_time_s,
        start_time_s=start,
        end_time_s=end,
        functions=plan.functions,
        memory_mb=plan.memory_mb,
        predicted_time_s=plan.predicted_time_s,
        time_s=time_s,
        cost_usd=cost_usd,
        gb_seconds=gb_seconds,
        restarts=restarts,
        failures=failures,
        exploration_cost_usd=plan.exploration_cost_usd,
        exploration_runs=plan.exploration_runs,
        met_deadline=status == "ok" and end - job.submit_time_s <= job.deadline_s,
        status=status,
    )


def _trial(
    instance: Instance, noise: NoiseModel, functions: int, memory_mb: int, iterations: int,
    max_s: float, rng: np.random.Generator,
) -> TrialRun:
    """A strategy's profiling trial, run under the truth (`baselines.Measure`)."""
    return simulate_trial(
        instance, functions, memory_mb, iterations=iterations, max_s=max_s, noise=noise, rng=rng
    )


def run_trace(
    jobs: Sequence[Job],
    plan_for: Strategy,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    noise: NoiseModel,
    seed: int,
    truth: Truth | None = None,
    world: World | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[JobOutcome]:
    """Plan, queue and simulate every job; outcomes in the order of `jobs`.

    `plan_for(instance, rng, noise, measure)` is a strategy (`simulator.strategies`), called
    once per job in submission order (ties by index) with the job's instance and `noise`:
    the belief. The engine runs the job, and `measure` the strategy's profiling trials, under
    `truth` (`simulator.truth`), which the strategy never sees; or, given `world`, the
    independent engine (`simulator.world`) runs them in that world, each job's run keyed by
    (seed, index) whatever its plan (`simulator.worlds.WorldRunner`). The trials run first,
    one after another, each holding its functions in the pool for its seconds; the job starts
    after the last. `progress(done, total)` is called after each job. Events are kept in a
    heap of running jobs' end times: O(jobs · log jobs) on top of the planning and simulation.
    """
    pool = integer("pool_size", pool_size, error=InputError, floats=False)
    seed = check_seed(seed)
    truth = Truth() if truth is None else truth
    true_noise = truth.noise(noise)
    runner = None if world is None else WorldRunner(world, seed)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time_s, i))
    outcomes: dict[int, JobOutcome] = {}
    capacity = Capacity(pool)
    first_start = 0.0  # FIFO: no job begins before one submitted earlier
    for done, index in enumerate(order, start=1):
        job = jobs[index]
        true_instance = truth.instance(job.instance)
        measure: Measure = (
            functools.partial(_trial, true_instance, true_noise) if runner is None
            else runner.trials(index, job.instance)
        )
        try:
            plan = plan_for(job.instance, job_rng(seed, index, _PLAN_STREAM), noise, measure)
        except UntrainablePlan:  # a trial's plan cannot train in the truth
            outcomes[index] = untrainable(index, job, NO_PLAN)
            _report(progress, done, len(jobs))
            continue
        held = [functions for functions, _ in plan.trials] + [plan.functions]
        if not plan.found or max(held) > pool:
            outcomes[index] = _no_plan(index, job, plan)
        else:
            # The trial stages run one after another, each once its functions are free, then
            # the job; the job's first stage sets its place in the queue.
            start = max(job.submit_time_s, first_start)
            for stage, (functions, seconds) in enumerate(plan.trials):
                start = capacity.take(start, functions, seconds)
                first_start = start if stage == 0 else first_start
                start += seconds
            try:
                ran = _run(index, job, plan, true_instance, true_noise, runner, capacity, start,
                           seed=seed, pool_size=pool)
            except UntrainablePlan:
                outcomes[index] = untrainable(index, job, plan)
                _report(progress, done, len(jobs))
                continue
            if ran is None:  # a re-planner with no first plan
                outcomes[index] = _no_plan(index, job, plan)
            else:
                start, outcome = ran
                first_start = first_start if plan.trials else start
                capacity.forget(first_start)
                outcomes[index] = outcome
        _report(progress, done, len(jobs))
    return [outcomes[index] for index in range(len(jobs))]


def _report(progress: Callable[[int, int], None] | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def untrainable(index: int, job: Job, plan: StrategyPlan) -> JobOutcome:
    """A job whose plan cannot train where it runs: a recorded miss (see `JobOutcome`)."""
    return job_outcome(
        index, job, plan, job.submit_time_s, time_s=0.0, cost_usd=0.0, gb_seconds=0.0,
        restarts=0, failures=0, status="untrainable",
    )


def _no_plan(index: int, job: Job, plan: StrategyPlan) -> JobOutcome:
    return job_outcome(
        index, job, plan, math.inf, time_s=math.inf, cost_usd=0.0, gb_seconds=0.0,
        restarts=0, failures=0, status="no-plan",
    )


def _run(
    index: int, job: Job, plan: StrategyPlan, true_instance: Instance, true_noise: NoiseModel,
    runner: WorldRunner | None, capacity: Capacity, start: float, *, seed: int, pool_size: int,
) -> tuple[float, JobOutcome] | None:
    """Run one planned job from `start` on (its functions taken from the pool): its first
    stage's start and its outcome; None when a re-planner had no first plan."""
    run: JobRun | AdaptiveRun | WorldRun
    stages: tuple[tuple[int, float], ...] | None = None
    instance = job.instance
    if plan.server is not None:  # the job runs on the server its plan chose
        chosen = (plan.server.type, plan.server.shards)
        true_instance, instance = on_server(true_instance, *chosen), on_server(instance, *chosen)
    if runner is not None and plan.replanner is None:
        run = runner.run(index, instance, plan.functions, plan.memory_mb)
        restarts = run.restarts
    elif runner is None and plan.adaptive is None:
        run = simulate_job(
            true_instance, plan.functions, plan.memory_mb, noise=true_noise,
            rng=job_rng(seed, index, RUN_STREAM),
        )
        restarts = run.restarts
    else:
        start = capacity.earliest(start, max(1, plan.functions), plan.predicted_time_s)
        budget = job.deadline_s - (start - job.submit_time_s)
        budget = budget if budget > 0 else LATE_BUDGET_S
        if runner is not None:
            assert plan.replanner is not None
            replanned = runner.replanned(index, job.instance, plan.replanner(), budget,
                                         pool_size)
            if replanned is None:
                return None
            run, stages = replanned.run, replanned.run.stages
            plan = dataclasses.replace(plan, functions=replanned.first.functions,
                                       memory_mb=replanned.first.memory_mb)
            restarts = run.restarts + run.switches
        else:
            assert plan.adaptive is not None
            run = plan.adaptive(true_instance, true_noise, budget,
                                job_rng(seed, index, RUN_STREAM), pool_size)
            stages = run.stages
            restarts = run.restarts + run.switches
    if isinstance(run, WorldRun) and run.reason == "untrainable":
        raise UntrainablePlan(f"plan {plan.functions} × {plan.memory_mb} MB cannot train")
    if stages is None:
        start = capacity.take(start, plan.functions, run.time_s)
        end = start + run.time_s
    else:
        end = start
        for stage, (functions, seconds) in enumerate(stages):
            end = capacity.take(end, functions, seconds)
            start = end if stage == 0 else start
            end += seconds
    return start, job_outcome(
        index, job, plan, start, time_s=run.time_s, cost_usd=run.cost_usd,
        gb_seconds=run.gb_seconds, restarts=restarts, failures=run.failures,
        status="ok" if run.finished else "abandoned", end=end,
    )
