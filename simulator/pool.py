"""Replaying a trace: jobs share one pool of functions and wait, first come first served.

Each job is planned by a strategy when it is submitted, waits until every earlier job has
started and enough functions are free (strict FIFO: a large job at the head holds back smaller
ones behind it, as a fair queue would), then runs in the simulator for as long as the engine
says and gives its functions back. Random draws come from two streams per job seeded by
(seed, job index) — one for planning (a strategy's trial runs), one for the run itself — so
every strategy meets the same luck on the same job, whatever it consumed while planning.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.baselines import Strategy, StrategyPlan
from lambdadnn.simulator.defaults import DEFAULT_POOL_SIZE
from lambdadnn.simulator.engine import simulate_job
from lambdadnn.simulator.trace import Job, check_seed
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief

_PLAN_STREAM, _RUN_STREAM = 0, 1

Status = Literal["ok", "no-plan", "abandoned"]


@dataclass(frozen=True)
class JobOutcome:
    """What happened to one job of the trace under one strategy.

    A job with status 'no-plan' (the strategy found none, or wanted more functions than the
    whole pool) never starts: its start, end and simulated time are infinite, its run costs
    nothing and it misses its deadline; `functions`, `memory_mb` and `predicted_time_s` are
    the strategy's answer, exploration what it spent deciding. A job with status 'abandoned'
    ran into one of the simulator's limits (`simulator.engine`, "Limits"): it holds its
    functions and pays for the time it ran until then, and misses its deadline.
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


def _outcome(
    index: int, job: Job, plan: StrategyPlan, start: float, *, time_s: float, cost_usd: float,
    gb_seconds: float, restarts: int, failures: int, status: Status,
) -> JobOutcome:
    end = start + time_s
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


def run_trace(
    jobs: Sequence[Job],
    plan_for: Strategy,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    noise: NoiseModel,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[JobOutcome]:
    """Plan, queue and simulate every job; outcomes in the order of `jobs`.

    `plan_for(instance, rng, noise)` is a strategy (see `simulator.baselines.STRATEGIES`),
    called once per job in submission order (ties by index); `progress(done, total)` is called
    after each job. Events are kept in a heap of running jobs' end times: O(jobs · log jobs)
    on top of the planning and simulation themselves.
    """
    if isinstance(pool_size, bool) or not isinstance(pool_size, numbers.Integral) or (
        pool_size < 1
    ):
        raise InstanceError(f"`pool_size` must be a positive integer, got {brief(pool_size)}")
    seed = check_seed(seed)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time_s, i))
    outcomes: dict[int, JobOutcome] = {}
    running: list[tuple[float, int]] = []  # (end time, functions held)
    free = int(pool_size)
    last_start = 0.0  # FIFO: no job starts before one submitted earlier
    for done, index in enumerate(order, start=1):
        job = jobs[index]
        plan = plan_for(job.instance, job_rng(seed, index, _PLAN_STREAM), noise)
        if not plan.found or plan.functions > pool_size:
            outcomes[index] = _outcome(
                index, job, plan, math.inf, time_s=math.inf, cost_usd=0.0, gb_seconds=0.0,
                restarts=0, failures=0, status="no-plan",
            )
        else:
            start = max(job.submit_time_s, last_start)
            while running and (running[0][0] <= start or free < plan.functions):
                end, held = heapq.heappop(running)
                free += held
                start = max(start, end)
            run = simulate_job(
                job.instance, plan.functions, plan.memory_mb, noise=noise,
                rng=job_rng(seed, index, _RUN_STREAM),
            )
            free -= plan.functions
            heapq.heappush(running, (start + run.time_s, plan.functions))
            last_start = start
            outcomes[index] = _outcome(
                index, job, plan, start, time_s=run.time_s, cost_usd=run.cost_usd,
                gb_seconds=run.gb_seconds, restarts=run.restarts, failures=run.failures,
                status="ok" if run.finished else "abandoned",
            )
        if progress is not None:
            progress(done, len(jobs))
    return [outcomes[index] for index in range(len(jobs))]
