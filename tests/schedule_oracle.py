"""An independent brute force for `solve_many`'s schedule model, on instances small enough
to enumerate.

Every plan is evaluated by tests/oracle.py's numpy model (not the package's), and every
combination of one (plan, start) per job, or none, is searched. The model is restated from
`solver/timetable.py`'s docstring, not imported: check points g_i = t0 + i·slot with t0 the
earliest submission; a job starts at its submission or at a check point after it; a run
over [a, a + T) counts at check points ⌊(a − t0)/slot⌋ to ⌊(a + T − t0)/slot⌋ (the functions
there must fit the concurrency); it meets its deadline when a + T ≤ submit + deadline,
exactly. The optimum is lexicographic: most deadlines met, then least cost, where a missed
job counts at the cost of its fastest plan (the price `solve_many`'s penalties order misses
by). `exact=True` replaces the check points by an exact sweep of the functions held over
time: the model is sound when its optimum is never better than that one.

Like tests/oracle.py it imports nothing from `lambdadnn`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests import oracle

#: A run's finish within this (relative) below a check point counts there too, as the model
#: does (`COVER_RTOL`): rounding must never let a run still going miss a check point.
COVER_RTOL = 1e-12


@dataclass(frozen=True)
class Plan:
    """One (functions, memory) plan with its time and cost from tests/oracle.py."""

    functions: int
    memory_mb: int
    time_s: float
    cost_usd: float


@dataclass(frozen=True)
class Job:
    """A job as the brute force sees it: the plans it may run, when it is submitted and due."""

    plans: tuple[Plan, ...]
    submit_s: float
    due_s: float

    @property
    def fastest(self) -> Plan | None:
        """The fastest plan (the cheapest of equally fast ones) that meets the deadline when
        started at submission, or None."""
        meeting = [p for p in self.plans if self.submit_s + p.time_s <= self.due_s]
        return min(meeting, key=lambda p: (p.time_s, p.cost_usd), default=None)


@dataclass(frozen=True)
class Run:
    """A chosen (plan, start) of one job."""

    job: int
    plan: Plan
    start_s: float


@dataclass(frozen=True)
class Optimum:
    """The lexicographic optimum: deadlines missed, then the cost (met jobs at their cost,
    missed ones at their fastest plan's), and one schedule that reaches it."""

    missed: int
    cost_usd: float
    runs: tuple[Run, ...]


def plans(source: str | Mapping[str, Any], *, concurrency: int) -> tuple[Plan, ...]:
    """Every valid plan of the instance within its limits and `concurrency` functions."""
    values = oracle.grid(source)
    usable = values["within_limits"] & (values["functions"] <= concurrency)
    rows, cols = np.nonzero(usable)
    n = np.broadcast_to(values["functions"], usable.shape)
    m = np.broadcast_to(values["memory_mb"], usable.shape)
    return tuple(
        Plan(int(n[r, c]), int(m[r, c]), float(values["time"][r, c]), float(values["cost"][r, c]))
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True)
    )


def front(candidates: Sequence[Plan]) -> tuple[Plan, ...]:
    """The (time, cost) Pareto front: the plans no other plan beats in both."""
    kept: list[Plan] = []
    for plan in sorted(candidates, key=lambda p: (p.time_s, p.cost_usd)):
        if not kept or plan.cost_usd < kept[-1].cost_usd:
            kept.append(plan)
    return tuple(kept)


def _first_point(start: float, t0: float, slot: float) -> int:
    return math.floor((start - t0) / slot)


def _stop_point(finish: float, t0: float, slot: float) -> int:
    """One past the last check point a run finishing at `finish` counts at."""
    end = (finish - t0) / slot
    return math.floor(end + abs(end) * COVER_RTOL) + 1


def starts(job: Job, *, t0: float, slot: float) -> list[float]:
    """The job's starts: its submission, then every check point after it from which its
    fastest plan still meets the deadline."""
    fastest = job.fastest
    if fastest is None:
        return []
    out = [job.submit_s]
    i = _first_point(job.submit_s, t0, slot) + 1
    while t0 + i * slot + fastest.time_s <= job.due_s:
        out.append(t0 + i * slot)
        i += 1
    return out


def _fits_exactly(runs: Sequence[Run], new: Run, concurrency: int) -> bool:
    """Whether the functions held over [start, start + time) of every run and `new` stay
    within `concurrency` at every moment: the most is reached at some run's start."""
    finish = new.start_s + new.plan.time_s
    moments = [new.start_s] + [r.start_s for r in runs if new.start_s < r.start_s < finish]
    for t in moments:
        held = new.plan.functions + sum(
            r.plan.functions for r in runs if r.start_s <= t < r.start_s + r.plan.time_s
        )
        if held > concurrency:
            return False
    return True


def optimum(jobs: Sequence[Job], *, concurrency: int, slot: float,
            exact: bool = False) -> Optimum:
    """The best schedule over every combination of (plan, start) or none per job."""
    t0 = min(job.submit_s for job in jobs)
    choices: list[list[tuple[float, Run, int, int]]] = []
    for index, job in enumerate(jobs):
        mine = []
        for start in starts(job, t0=t0, slot=slot):
            for plan in job.plans:
                if start + plan.time_s <= job.due_s:
                    run = Run(index, plan, start)
                    first = _first_point(start, t0, slot)
                    mine.append((plan.cost_usd, run, first, _stop_point(start + plan.time_s,
                                                                       t0, slot)))
        choices.append(sorted(mine, key=lambda c: c[0]))
    cheapest = [c[0][0] if c else 0.0 for c in choices]
    missing = [job.fastest.cost_usd if job.fastest else 0.0 for job in jobs]
    points = max((c[3] for mine in choices for c in mine), default=0) + 1
    held = [0] * points
    best: list[Any] = [(math.inf, math.inf), ()]
    chosen: list[Run] = []

    def search(j: int, missed: int, cost: float) -> None:
        if (missed, cost + sum(cheapest[j:])) >= tuple(best[0]):
            return
        if j == len(jobs):
            best[0], best[1] = (missed, cost), tuple(chosen)
            return
        for price, run, first, stop in choices[j]:
            if exact:
                if not _fits_exactly(chosen, run, concurrency):
                    continue
            elif max(held[first:stop]) + run.plan.functions > concurrency:
                continue
            for i in range(first, stop):
                held[i] += run.plan.functions
            chosen.append(run)
            search(j + 1, missed, cost + price)
            chosen.pop()
            for i in range(first, stop):
                held[i] -= run.plan.functions
        search(j + 1, missed + 1, cost + missing[j])

    search(0, 0, 0.0)
    return Optimum(int(best[0][0]), float(best[0][1]), best[1])


def functions_held(starts_s: Sequence[float], finishes_s: Sequence[float],
                   functions: Sequence[int]) -> int:
    """The most functions held at once by runs over [start, finish): a numpy sweep over
    every start (where the most is reached), each run counted while start ≤ t < finish."""
    start = np.asarray(starts_s, dtype=np.float64)
    finish = np.asarray(finishes_s, dtype=np.float64)
    held = np.asarray(functions, dtype=np.int64)
    if not start.size:
        return 0
    running = (start[np.newaxis, :] <= start[:, np.newaxis]) & (
        start[:, np.newaxis] < finish[np.newaxis, :]
    )
    return int((running * held[np.newaxis, :]).sum(axis=1).max())
