"""The simulator's `lambdadnn-batch`: the waiting jobs planned together over a rolling horizon
with `solve_many`, run under the truth in the pool they share.

`lambdadnn` plans each job alone when it arrives and queues it first come, first served
(`simulator.pool.run_trace`): on a tight pool a job due soon waits behind one with time to
spare. A scheduler that sees its queue can instead give that job a slower, cheaper plan or a
later start. At each decision epoch t this one plans every job submitted and not yet started
together (`solver.many.solve_many`, with the belief: `noise` and `guarantee`), each from t
with the deadline it has left, around the functions the started jobs hold; it starts the jobs
whose planned start comes before the next epoch and plans the rest again then, with the new
arrivals.

* Epochs. While jobs wait, every `window_s` of simulated time; when none waits, at the next
  arrival but no sooner than `window_s` after the last epoch. A job arriving at an idle
  scheduler is planned at once, so on an unlimited pool every job gets `lambdadnn`'s own plan
  (the cheapest that meets its deadline); under load arrivals are batched and wait at most
  `window_s` for their plan.
* What the scheduler knows at t. The jobs it started and that are still running (it sees
  which have ended), each holding its functions until its planned finish (the guarantee's
  quantile of its time from its real start), or, if it is already past that, until the next
  epoch. A job whose deadline has gone by (or is left with less than `LATE_BUDGET_S`) is
  planned for `LATE_BUDGET_S`: no plan meets that, so `solve_many` places it on its fastest
  plan where the pool has room after the jobs that can still make it.
* Runs. A started job runs under the truth as in `run_trace`: the same per-job run stream
  (`job_rng(seed, index, 1)`), so outcomes compare job by job with `lambdadnn`'s. It takes
  its functions in the true pool at its planned start, later if they are really still held
  (a run that took longer than its plan). A job with no valid plan within the pool never
  starts ('no-plan'), as in `run_trace`.

Defaults. `window_s` = 30 s: a job arriving at a busy scheduler loses at most 5% of the
shortest shipped deadline (600 s) waiting for its plan; 15 s saved 0.6% of the cost on a
saturated pool (benchmarks/batch.py) for twice the solves. `slot_s` = 30 s: a job starts at
its submission or on the 30 s grid, so it waits at most 30 s for room that opens between
(5% of a 600-s deadline). An
epoch whose deadlines are so long that its grid would not fit (Philly's, days long) plans on
the least coarser slot that fits (`solver.many.fitting_slot`).
`time_limit_s` = 2 s and a gap of `BATCH_GAP` (1%) bound each epoch's solve: at 0.1%, half
the epochs of a saturated pool ran to the limit. An epoch whose solve stops at the limit
depends on the machine's speed, so outcomes are deterministic for a seed only when every
solve finishes (`on_epoch` sees each schedule's `solver_status`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..inputs.errors import InputError
from ..inputs.numbers import integer, number
from ..models.noise import NoiseModel
from ..solver.capacity import Capacity
from ..solver.errors import NoValidPlanError
from ..solver.instance import MAX_CONCURRENCY, MAX_INTEGER, MAX_SECONDS
from ..solver.many import fitting_slot, solve_many
from ..solver.pipeline import evaluate
from ..solver.schedule import Schedule, Submission
from ..solver.trace_file import Job
from .baselines import NO_PLAN, StrategyPlan
from .defaults import DEFAULT_GUARANTEE, DEFAULT_POOL_SIZE
from .engine import UntrainablePlan, simulate_job
from .pool import (
    LATE_BUDGET_S,
    RUN_STREAM,
    JobOutcome,
    job_outcome,
    job_rng,
    untrainable,
)
from .trace import check_seed
from .truth import Truth, on_server

DEFAULT_WINDOW_S = 30.0
DEFAULT_BATCH_SLOT_S = 30.0
DEFAULT_BATCH_TIME_LIMIT_S = 2.0
BATCH_GAP = 0.01


@dataclass(frozen=True)
class _Running:
    """A started job: when it took its functions in the pool, how long its plan holds them
    (the guarantee's quantile), and when it really ends (which the scheduler sees only then)."""

    start_s: float
    planned_s: float
    end_s: float
    functions: int


def _held(running: list[_Running], t: float, window: float,
          limit: int) -> list[tuple[float, float, int]]:
    """What the started jobs hold from `t` on as the scheduler believes it, as `solve_many`'s
    `reserved`: a running job until its planned finish (the next epoch if it is past it); a
    job still queued for its functions (a run before it outlasted its plan) from when the
    jobs before it should free them, for its planned time. Placed on the belief's own pool,
    so they never hold more than `limit` together."""
    belief = Capacity(limit)
    held = []
    for run in sorted(running, key=lambda run: run.start_s):
        finish = run.start_s + run.planned_s
        seconds = run.planned_s if run.start_s > t else (finish if finish > t else t + window) - t
        at = belief.take(t, run.functions, seconds)
        held.append((at, at + seconds, run.functions))
    return held


def _plan(
    waiting: list[int], *, jobs: Sequence[Job], t: float, pool_size: int, slot_s: float,
    time_limit_s: float, guarantee: float | None, noise: NoiseModel | None,
    reserved: list[tuple[float, float, int]],
) -> Schedule:
    """One epoch's schedule of the `waiting` jobs from `t` (module docstring)."""
    submissions = []
    for index in waiting:
        job = jobs[index]
        left = job.deadline_s - (t - job.submit_time_s)
        submissions.append(Submission(
            job.instance, submit_s=t, deadline_s=left if left > LATE_BUDGET_S else LATE_BUDGET_S,
            name=str(index),
        ))
    deadlines = [submission.deadline_s or 0.0 for submission in submissions]
    return solve_many(
        submissions, concurrency=pool_size, slot_s=fitting_slot(deadlines, max(deadlines), slot_s),
        time_limit_s=time_limit_s,
        gap=BATCH_GAP, guarantee=guarantee, noise=noise, reserved=reserved,
    )


def _plannable(job: Job, pool_size: int, guarantee: float | None,
               noise: NoiseModel | None) -> bool:
    """Whether the job has a valid plan within the pool: it alone on an empty pool (asked
    only when an epoch's solve finds a job with none, so a normal epoch costs one solve)."""
    try:
        solve_many([Submission(job.instance)], concurrency=pool_size, guarantee=guarantee,
                   noise=noise)
    except NoValidPlanError:
        return False
    return True


def run_batch(
    jobs: Sequence[Job],
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    noise: NoiseModel,
    seed: int,
    guarantee: float | None = DEFAULT_GUARANTEE,
    truth: Truth | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    slot_s: float = DEFAULT_BATCH_SLOT_S,
    time_limit_s: float = DEFAULT_BATCH_TIME_LIMIT_S,
    progress: Callable[[int, int], None] | None = None,
    on_epoch: Callable[[float, Schedule], None] | None = None,
) -> list[JobOutcome]:
    """Plan the jobs in batches over a rolling horizon and simulate them; outcomes in the order
    of `jobs` (module docstring).

    `noise` and `guarantee` are the belief the plans use (None: plan for the mean); the jobs run
    under `truth` (default: the belief). `progress(done, total)` is called as each job starts
    (or is found to have no plan), `on_epoch(t, schedule)` after each epoch's solve.
    """
    size = integer("pool_size", pool_size, error=InputError, maximum=MAX_INTEGER)
    # Planned as `solve_many`'s largest limit beyond it: more functions than any plan can use.
    limit = min(size, MAX_CONCURRENCY)
    window = number("window_s", window_s, error=InputError, maximum=MAX_SECONDS)
    slot = number("slot_s", slot_s, error=InputError, maximum=MAX_SECONDS)
    seconds = number("time_limit_s", time_limit_s, error=InputError, maximum=MAX_SECONDS)
    seed = check_seed(seed)
    truth = Truth() if truth is None else truth
    true_noise = truth.noise(noise)
    belief = noise if guarantee is not None else None
    arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_time_s, i))[::-1]
    outcomes: dict[int, JobOutcome] = {}
    capacity = Capacity(size)
    running: list[_Running] = []
    waiting: list[int] = []
    t = -math.inf

    def done(index: int, outcome: JobOutcome) -> None:
        outcomes[index] = outcome
        if progress is not None:
            progress(len(outcomes), len(jobs))

    while arrivals or waiting:
        t = t + window if waiting else max(t + window, jobs[arrivals[-1]].submit_time_s)
        while arrivals and jobs[arrivals[-1]].submit_time_s <= t:
            waiting.append(arrivals.pop())
        if not waiting:
            continue
        running = [run for run in running if run.end_s > t]
        replan = functools.partial(_plan, jobs=jobs, t=t, pool_size=limit, slot_s=slot,
                                   time_limit_s=seconds, guarantee=guarantee, noise=belief,
                                   reserved=_held(running, t, window, limit))
        try:
            schedule = replan(waiting)
        except NoValidPlanError:
            for index in waiting:
                if not _plannable(jobs[index], limit, guarantee, belief):
                    done(index, job_outcome(
                        index, jobs[index], NO_PLAN, math.inf, time_s=math.inf, cost_usd=0.0,
                        gb_seconds=0.0, restarts=0, failures=0, status="no-plan",
                    ))
            waiting = [index for index in waiting if index not in outcomes]
            if not waiting:
                continue
            schedule = replan(waiting)
        if on_epoch is not None:
            on_epoch(t, schedule)
        now = sorted((entry for entry in schedule.jobs if entry.start_s < t + window),
                     key=lambda entry: (entry.start_s, entry.due_s, entry.index))
        for entry in now:
            index = waiting[entry.index]
            job = jobs[index]
            chosen = (None, 1) if entry.ps is None else (entry.ps["type"], entry.ps["shards"])
            expected = evaluate(on_server(job.instance, *chosen), functions=entry.functions,
                                memory_mb=entry.memory_mb, guarantee=guarantee, noise=belief)
            plan = StrategyPlan(entry.functions, entry.memory_mb, expected.time_s, 0.0, 0,
                                found=True)
            try:
                run = simulate_job(
                    on_server(truth.instance(job.instance), *chosen), entry.functions,
                    entry.memory_mb,
                    noise=true_noise, rng=job_rng(seed, index, RUN_STREAM),
                )
            except UntrainablePlan:
                done(index, untrainable(index, job, plan))
                continue
            start = capacity.take(entry.start_s, entry.functions, run.time_s)
            running.append(_Running(start, entry.time_s, start + run.time_s, entry.functions))
            done(index, job_outcome(
                index, job, plan, start, time_s=run.time_s, cost_usd=run.cost_usd,
                gb_seconds=run.gb_seconds, restarts=run.restarts, failures=run.failures,
                status="ok" if run.finished else "abandoned",
            ))
        started = {waiting[entry.index] for entry in now}
        waiting = [index for index in waiting if index not in started]
        capacity.forget(t)
    return [outcomes[index] for index in range(len(jobs))]
