"""`solve_many()`: one plan and one start for each of many jobs sharing a concurrency limit.

The choice of a plan (any of a job's plans) and a start for every job is the time-indexed
MILP of `solver.timetable`, solved by column generation with `solve()`'s branch and bound as
the pricing oracle (`solver.pricing`) over a master built in Pyomo and solved by HiGHS
(`solver.master`). The answer is re-checked as `solve()` re-checks its plan: every
job's plan is evaluated again by the model, every met deadline re-tested at the real start
and finish, and the functions held over time swept exactly (`solver.capacity.peak`); a
schedule that fails any of it is never returned.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs.files import brief
from ..models.noise import NoiseModel
from .capacity import Capacity, peak
from .columns import Task, meets
from .errors import InstanceError, NoValidPlanError, SolverError
from .fit_uncertainty import corner
from .instance import MAX_CONCURRENCY, MAX_SECONDS, Instance
from .instance_validation import (
    non_negative_number,
    positive_integer,
    positive_number,
)
from .instance_yaml import load_instance
from .options import Options, kind_fronts, merged
from .pipeline import (
    RECHECK_RTOL,
    check_guarantee,
    evaluate,
    planning_terms,
    undominated,
)
from .pipeline import fastest as fastest_plan
from .plan import Evaluation
from .pricing import Catalogue
from .schedule import (
    Schedule,
    ScheduledJob,
    ScheduleStatus,
    Submission,
    due_time,
)
from .timetable import PHASES, Answer, gap_of, proven, solve_timetable

DEFAULT_SLOT_S = 60.0
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_GAP = 1e-3
MAX_SCHEDULE_JOBS = 100_000
# The grid solve_many builds at most. A job of deadline d has at most d/slot + 1 starts, and
# the pricing at most d/slot + 1 classes of plans at each (one per priced moment it can
# reach), so Σ (d/slot + 1)² bounds the classes from the submissions alone, before anything
# is allocated (10,000 jobs of the paper's mix at the default 60 s slot: a bound of 2.6
# million; 100,000: 26 million, while the classes priced come to a few per start). The master
# is bounded apart (`timetable.MAX_MASTER_NONZEROS`).
MAX_COLUMN_BOUND = 30_000_000
MAX_CHECK_POINTS = 1_000_000
OBJECTIVE_RTOL = 1e-6  # HiGHS's objective against ours: its sums carry its tolerances


@dataclasses.dataclass(frozen=True)
class _Job:
    name: str
    instance: Instance
    submit_s: float
    deadline_s: float

    @property
    def due_s(self) -> float:
        return due_time(self.submit_s, self.deadline_s)


def _submission(index: int, job: object, loaded: dict[str | Path, Instance]) -> _Job:
    where = f"jobs[{index}]"
    if isinstance(job, Mapping) and "instance" in job:
        unknown = sorted(set(job) - {"instance", "submit_s", "deadline_s", "name"})
        if unknown:
            raise InstanceError(
                f"`{where}` has the unknown key {brief(unknown[0])}; a job has instance, "
                "submit_s, deadline_s and name"
            )
        job = Submission(**job)
    if not isinstance(job, Submission):
        job = Submission(job)  # type: ignore[arg-type]  # an instance alone: checked below
    source = job.instance
    try:
        if isinstance(source, (str, Path)):
            if source not in loaded:
                loaded[source] = load_instance(source)
            instance = loaded[source]
        else:
            instance = load_instance(source)
    except InstanceError as error:
        raise InstanceError(f"`{where}.instance`: {error}") from None
    submit = non_negative_number(f"{where}.submit_s", job.submit_s, MAX_SECONDS)
    deadline = instance.objective.deadline_s if job.deadline_s is None else positive_number(
        f"{where}.deadline_s", job.deadline_s, MAX_SECONDS
    )
    name = instance.name if job.name is None else job.name
    if not isinstance(name, str) or not name.strip():
        raise InstanceError(f"`{where}.name` must be a non-empty string, got {brief(name)}")
    return _Job(name, instance.with_deadline(deadline), submit, deadline)


def _submissions(jobs: object) -> list[_Job]:
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        raise InstanceError(
            f"`jobs` must be a list of jobs (Submission, a mapping with `instance`, or an "
            f"instance), got {brief(jobs)}"
        )
    if len(jobs) > MAX_SCHEDULE_JOBS:
        raise InstanceError(
            f"`jobs` holds {len(jobs):,} jobs, more than {MAX_SCHEDULE_JOBS:,}; schedule them "
            "in windows (as the simulator's `lambdadnn-batch` does)"
        )
    loaded: dict[str | Path, Instance] = {}
    return [_submission(index, job, loaded) for index, job in enumerate(jobs)]


def _fastest(key: Instance, index: int, concurrency: int, guarantee: float | None,
             noise: NoiseModel | None) -> tuple[int, int, float, float]:
    """The fastest plan of the job `index` (its instance `key`) within the limit: (n, m,
    time checked, cost)."""
    limit = min(key.max_functions, concurrency)
    capped = dataclasses.replace(key, limits=dataclasses.replace(key.limits, max_functions=limit))
    try:
        plan = fastest_plan(capped, guarantee=guarantee, noise=noise)
    except NoValidPlanError as error:
        raise NoValidPlanError(f"`jobs[{index}]`: {error}") from None
    return plan.functions, plan.memory_mb, plan.deadline_time_s, plan.cost_usd


def _place_late(
    missed: list[int], jobs: list[_Job], tasks: list[Task], capacity: Capacity,
    plans: dict[int, list[tuple[int, int, float, float, int]]],
) -> dict[int, tuple[int, int, float, float, float, int]]:
    """Each missed job (earliest due first) at the first moment the pool has room: the
    cheapest of its `plans` (each kind's fastest and cheapest) that still meets the deadline,
    else the one that finishes first. Returns (n, m, start, time, cost, kind) per job."""
    placed: dict[int, tuple[int, int, float, float, float, int]] = {}
    for index in sorted(missed, key=lambda i: (tasks[i].due_s, i)):
        tried = []
        for n, m, t, c, kind in plans[index]:
            at = capacity.earliest(jobs[index].submit_s, n, t)
            late = not meets(at, t, tasks[index].due_s)
            tried.append((late, at + t if late else c, n, m, at, t, c, kind))  # met, cheapest
        _, _, n, m, at, t, c, kind = min(tried)
        capacity.take(at, n, t)
        placed[index] = (n, m, at, t, c, kind)
    return placed


def _recheck(entry: ScheduledJob, kind: int, key: Instance, guarantee: float | None,
             noise: NoiseModel | None, evaluated: dict[tuple[int, int, int], Evaluation],
             ) -> None:
    """The model's figures for the entry's plan agree with the schedule's (python-mip).
    `evaluated` keeps each plan of an instance (`kind`, undated: `key`) evaluated once: its
    time, cost and validity do not depend on the deadline, and ten thousand jobs share a few
    dozen plans."""
    plan = (kind, entry.functions, entry.memory_mb)
    if plan not in evaluated:
        evaluated[plan] = evaluate(key, functions=entry.functions, memory_mb=entry.memory_mb,
                                   guarantee=guarantee, noise=noise)
    checked = evaluated[plan]
    same_time = math.isclose(checked.deadline_time_s, entry.time_s, rel_tol=RECHECK_RTOL)
    same_cost = math.isclose(checked.cost_usd, entry.cost_usd, rel_tol=RECHECK_RTOL)
    if not (checked.valid and same_time and same_cost):
        raise SolverError(
            f"re-check failed for job {entry.index} ({entry.functions} × {entry.memory_mb} MB): "
            f"the model gives {checked.deadline_time_s!r} s and ${checked.cost_usd!r}, the "
            f"schedule {entry.time_s!r} s and ${entry.cost_usd!r}"
        )
    # The schedule's time decides a deadline, as the search's decides `solve()`'s: the
    # re-evaluation may round it otherwise in the last place (above), one ulp across a due time.
    if entry.start_s < entry.submit_s or entry.met != bool(
        meets(entry.start_s, entry.time_s, entry.due_s)
    ):
        raise SolverError(
            f"re-check failed for job {entry.index}: it starts at {entry.start_s!r} s "
            f"(submitted {entry.submit_s!r} s) and finishes at {entry.finish_s!r} s against "
            f"its due time {entry.due_s!r} s, yet is marked met={entry.met}"
        )


def solve_many(
    jobs: Sequence[Submission | Mapping[str, Any] | Instance | str | Path], *,
    concurrency: int, slot_s: float = DEFAULT_SLOT_S,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S, gap: float = DEFAULT_GAP,
    guarantee: float | None = None, noise: NoiseModel | None = None,
    reserved: Sequence[tuple[float, float, int]] = (),
    progress: Callable[[str], None] | None = None,
) -> Schedule:
    """The cheapest schedule of `jobs` under `concurrency` functions at once that meets every
    deadline it can, proven within `gap` by HiGHS.

    A job is a `Submission`, a mapping with its keys (`instance`, `submit_s`, `deadline_s`,
    `name`), or an instance alone (submitted at 0 with its own deadline); deadlines count from
    submission. Starts are the submission or a multiple of `slot_s` after the earliest one.
    `time_limit_s` bounds the whole call: the fronts, the grid and the greedy schedule come
    out of it, and HiGHS gets what is left, or is skipped, keeping the greedy schedule and the
    cost floor as its bound, when the model would not even be built in time (see
    `solver.timetable`); it stops early once the gap is proven. `guarantee` and `noise` plan
    each job as `solve()` does. `reserved` are runs outside the schedule that already hold
    functions, as (start_s, finish_s, functions): a scheduler re-planning as jobs arrive passes
    the ones running. `progress(phase)` is called as each phase of `timetable.PHASES`
    starts. Raises `InstanceError` for bad input (naming `jobs[i]` and the field),
    `NoValidPlanError` when a job has no valid plan, `SolverError` when HiGHS fails or the
    schedule fails its re-check.
    """
    started = time.perf_counter()
    limit = positive_integer("concurrency", concurrency, MAX_CONCURRENCY)
    slot = positive_number("slot_s", slot_s, MAX_SECONDS)
    seconds = positive_number("time_limit_s", time_limit_s, MAX_SECONDS)
    number = non_negative_number("gap", gap, 1.0)
    if number >= 1:
        raise InstanceError(f"`gap` must be a number from 0 to below 1, got {brief(gap)}")
    share = check_guarantee(guarantee, noise)
    held = _reserved(reserved, limit)
    submitted = _submissions(jobs)
    _check_grid(submitted, slot)
    report = progress or (lambda phase: None)
    report(PHASES[0])
    # Each job's instance without its deadline, numbered: one front per instance, and an
    # instance hashed once per job (a frozen dataclass's hash walks every field).
    numbered: dict[tuple[object, ...], int] = {}
    owner: list[int] = []
    instances: list[Instance] = []  # the first job's instance of each stands for it
    for job in submitted:
        owner.append(numbered.setdefault(job.instance.undated_key(), len(numbered)))
        if owner[-1] == len(instances):
            instances.append(job.instance)
    # The kinds of plans: an instance's, or one per server it may choose (those another
    # server beats left out, as `solve()` does), each a pinned instance.
    keys: list[Instance] = []
    kinds_of: list[tuple[int, ...]] = []
    for instance in instances:
        variants = [instance.on_server(instance.servers[i])
                    for i in undominated(instance.servers)] if instance.servers else [instance]
        kinds_of.append(tuple(range(len(keys), len(keys) + len(variants))))
        keys.extend(variants)
    kinds = [kinds_of[o] for o in owner]
    slowest = [0.0] * len(keys)
    for mine, job in zip(kinds, submitted, strict=True):
        for kind in mine:
            slowest[kind] = max(slowest[kind], job.deadline_s)
    planning = [planning_terms(key, share, noise) for key in keys]
    # Each instance's kinds' fronts together: a server's plans that one before it beats in
    # time, cost and functions are never in a cheaper schedule (`kind_fronts`).
    fronts = [front for instance, mine in zip(instances, kinds_of, strict=True)
              for front in kind_fronts(instance, guarantee=share, noise=noise,
                                       max_functions=limit, slowest_s=slowest[mine[0]])]
    catalogues = [
        Catalogue.of(corner(key, planning[kind]).instance, fronts[kind], planning[kind],
                     min(limit, key.max_functions), slowest[kind])
        for kind, key in enumerate(keys)
    ]
    # A job's front over all its kinds: the instance's, cut at the job's deadline (a plan of
    # the union within the deadline is dominated only by one within it).
    union = [merged([fronts[kind] for kind in mine]) for mine in kinds_of]
    tasks = [Task(job.submit_s, job.due_s, kinds_of[o], union[o].within(job.deadline_s))
             for o, job in zip(owner, submitted, strict=True)]
    answer = solve_timetable(
        tasks, catalogues, concurrency=limit, slot=slot,
        time_limit_s=seconds - (time.perf_counter() - started), gap=number, reserved=held,
        progress=report,
    )
    report(PHASES[-1])
    return _schedule(submitted, kinds, keys, fronts, tasks, answer, limit, slot, held, share,
                     noise, number, started)


def _column_bound(deadlines: list[float], slot: float) -> float:
    """Σ (d/slot + 1)² over the jobs' deadlines: at least the columns of the grid."""
    return math.fsum((deadline / slot + 1.0) ** 2 for deadline in deadlines)


def fitting_slot(deadlines: Sequence[float], horizon_s: float, slot_s: float) -> float:
    """`slot_s`, or when jobs of these deadlines over `horizon_s` make a grid too fine at it,
    the least slot above it (rounded up to 3 significant digits) whose grid fits: a caller
    with days-long deadlines (Philly's) coarsens its grid rather than be refused."""
    if not deadlines or (_column_bound(list(deadlines), slot_s) <= MAX_COLUMN_BOUND
                         and horizon_s / slot_s <= MAX_CHECK_POINTS):
        return slot_s
    low, high = slot_s, max(deadlines) * 1e3
    for _ in range(100):  # the bound falls as the slot grows
        middle = math.sqrt(low * high)
        if _column_bound(list(deadlines), middle) <= MAX_COLUMN_BOUND:
            high = middle
        else:
            low = middle
    return float(_round_up(max(high, horizon_s / MAX_CHECK_POINTS)))


def _check_grid(submitted: list[_Job], slot: float) -> None:
    """Refuse, from the submissions alone and before anything is built, a grid too fine to fit
    in memory and time, naming the slot size that fits."""
    if not submitted:
        return
    deadlines = [job.deadline_s for job in submitted]
    horizon_s = (max(job.due_s for job in submitted)
                 - min(job.submit_s for job in submitted))
    fits = fitting_slot(deadlines, horizon_s, slot)
    if fits == slot:
        return
    raise InstanceError(
        f"`slot_s` {brief(slot)} makes a grid too fine for {len(submitted):,} jobs: up to "
        f"{_column_bound(deadlines, slot):.3g} columns and {horizon_s / slot:.3g} check "
        f"points, against at most {MAX_COLUMN_BOUND:,} and {MAX_CHECK_POINTS:,}: use "
        f"slot_s ≥ {fits:.6g}"
    )


def _round_up(seconds: float) -> str:
    """`seconds` rounded up to 3 significant digits, so that the slot named is one that fits."""
    scale = 10.0 ** (math.floor(math.log10(seconds)) - 2)
    return f"{math.ceil(seconds / scale) * scale:.6g}"


def _reserved(reserved: object, limit: int) -> list[tuple[float, float, int]]:
    """`reserved` as checked (start, finish, functions) triples that fit the limit together."""
    if isinstance(reserved, (str, bytes, Mapping)) or not isinstance(reserved, Sequence):
        raise InstanceError(
            f"`reserved` must be a list of (start_s, finish_s, functions), got {brief(reserved)}"
        )
    held = []
    for index, run in enumerate(reserved):
        where = f"reserved[{index}]"
        if isinstance(run, (str, bytes)) or not isinstance(run, Sequence) or len(run) != 3:
            raise InstanceError(
                f"`{where}` must be (start_s, finish_s, functions), got {brief(run)}"
            )
        start = non_negative_number(f"{where}.start_s", run[0], MAX_SECONDS)
        finish = non_negative_number(f"{where}.finish_s", run[1], MAX_SECONDS)
        if finish < start:
            raise InstanceError(
                f"`{where}.finish_s` must not be before its start ({brief(start)} s), got "
                f"{brief(run[1])}"
            )
        held.append((start, finish, positive_integer(f"{where}.functions", run[2], limit)))
    top, at = peak(*zip(*held, strict=True)) if held else (0, 0.0)
    if top > limit:
        raise InstanceError(
            f"`reserved` holds {top:,} functions at {at:g} s, more than the `concurrency` of "
            f"{limit:,}; pass the runs that really hold functions"
        )
    return held


def _schedule(
    submitted: list[_Job], kinds: list[tuple[int, ...]], keys: list[Instance],
    fronts: list[Options], tasks: list[Task], answer: Answer, limit: int, slot: float,
    reserved: list[tuple[float, float, int]], guarantee: float | None,
    noise: NoiseModel | None, target_gap: float, started: float,
) -> Schedule:
    """The answer as a `Schedule`, missed jobs placed late, everything re-checked."""
    capacity = Capacity(limit)
    for start, finish, functions in reserved:
        capacity.take(start, functions, finish - start)
    runs: dict[int, tuple[int, int, float, float, float, int]] = {}
    for index in np.flatnonzero(answer.functions >= 0).tolist():
        runs[index] = (int(answer.functions[index]), int(answer.memory_mb[index]),
                       float(answer.start_s[index]), float(answer.time_s[index]),
                       float(answer.cost_usd[index]), int(answer.kind[index]))
        capacity.take(runs[index][2], runs[index][0], runs[index][3])
    missed = [index for index in range(len(tasks)) if index not in runs]
    by_kind: dict[int, tuple[int, int, float, float]] = {}  # one solve per instance
    plans: dict[int, list[tuple[int, int, float, float, int]]] = {}
    for index in missed:
        plans[index] = []
        for kind in kinds[index]:
            if kind not in by_kind:
                by_kind[kind] = _fastest(keys[kind], index, limit, guarantee, noise)
            plans[index].append((*by_kind[kind], kind))
            opts = fronts[kind].within(submitted[index].deadline_s)
            if len(opts):
                plans[index].append((int(opts.functions[-1]), int(opts.memory_mb[-1]),
                                     float(opts.time_s[-1]), float(opts.cost_usd[-1]), kind))
    runs.update(_place_late(missed, submitted, tasks, capacity, plans))
    entries = []
    evaluated: dict[tuple[int, int, int], Evaluation] = {}
    for index, job in enumerate(submitted):
        n, m, start, t, c, kind = runs[index]
        # The MILP's jobs meet their deadline by construction (the re-check tests that claim);
        # a job placed late may still meet it.
        met = index not in missed or bool(meets(start, t, job.due_s))
        finish = start + t
        entry = ScheduledJob(
            index=index, name=job.name, instance=job.instance.name, submit_s=job.submit_s,
            deadline_s=job.deadline_s, functions=n, memory_mb=m, start_s=start, time_s=t,
            finish_s=finish, cost_usd=c, met=met,
            late_s=0.0 if met else finish - job.due_s, ps=keys[kind].parameter_server.choice,
        )
        _recheck(entry, kind, keys[kind], guarantee, noise, evaluated)
        entries.append(entry)
    top, at = peak([e.start_s for e in entries] + [r[0] for r in reserved],
                   [e.finish_s for e in entries] + [r[1] for r in reserved],
                   [e.functions for e in entries] + [r[2] for r in reserved])
    if top > limit:
        raise SolverError(
            f"re-check failed: the schedule holds {top:,} functions at {at:g} s, more than the "
            f"concurrency of {limit:,}"
        )
    objective = sum(e.cost_usd if e.met else float(answer.penalty_usd[e.index]) for e in entries)
    if objective > answer.objective_usd * (1 + OBJECTIVE_RTOL) + 1e-12:
        raise SolverError(
            f"re-check failed: the schedule's objective is ${objective!r}, HiGHS's "
            f"${answer.objective_usd!r}"
        )
    everyone = all(e.met for e in entries)
    status: ScheduleStatus
    if everyone:
        status = "optimal" if proven(objective, answer.bound_usd, target_gap) else "feasible"
    else:
        status = "infeasible" if answer.miss_proven else "feasible"
    return Schedule(
        status=status, concurrency=limit, slot_s=slot,
        total_cost_usd=sum(e.cost_usd for e in entries), objective_usd=objective,
        lower_bound_usd=answer.bound_usd, gap=gap_of(objective, answer.bound_usd),
        solver_status=answer.solver_status,
        solve_seconds=time.perf_counter() - started, columns=answer.columns,
        check_points=answer.check_points, peak_functions=top, jobs=tuple(entries),
    )

