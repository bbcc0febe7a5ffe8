"""The schedule model's grid and columns: when jobs may start, the moments capacity is checked
at, and every (job, plan, start) the master problem holds (`solver.timetable` states the
model).

A job starts at its submission or at a point t0 + i·slot after it (t0 the first
submission). The functions held change only when a run starts or ends, and rise only when one
starts, so they are most at some run's start: checking capacity at every possible start (and
at the start of every reserved run) checks it at every moment, exactly. A column counts at the
moments τ with start ≤ τ < start + T — a contiguous range of the sorted moments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from .options import Options

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Task:
    """One job as the schedule sees it: when it may start, when it is due, its kinds (jobs of
    one instance share plans; an instance choosing its parameter server is one kind per
    server) and its (time, cost) front within its deadline, over all its kinds."""

    submit_s: float
    due_s: float  # submit + deadline: the latest finish that meets the deadline
    kinds: tuple[int, ...]
    options: Options


@dataclass(frozen=True)
class Columns:
    """(job, plan, start) columns as parallel arrays; a column is its (task, kind, functions,
    memory_mb, start_s), and it counts at the moments first..stop-1."""

    task: Index
    functions: Index
    memory_mb: Index
    start_s: Array
    time_s: Array
    cost_usd: Array
    first: Index
    stop: Index
    kind: Index  # the task's kind the plan is of (its parameter server)

    def __len__(self) -> int:
        return len(self.task)

    def take(self, which: Any) -> Columns:
        """The columns at `which` (an index array or a mask)."""
        return Columns(*(getattr(self, f.name)[which] for f in fields(Columns)))

    def keys(self) -> list[tuple[int, int, int, int, float]]:
        """Each column's identity: (task, kind, functions, memory_mb, start_s)."""
        return list(zip(self.task.tolist(), self.kind.tolist(), self.functions.tolist(),
                        self.memory_mb.tolist(), self.start_s.tolist(), strict=True))


def distinct(cols: Columns) -> Columns:
    """The columns, each (task, plan, start) once: the first of equal ones."""
    seen: dict[tuple[int, int, int, int, float], int] = {}
    for i, key in enumerate(cols.keys()):
        seen.setdefault(key, i)
    return cols.take(np.array(sorted(seen.values()), dtype=np.int64))


def join(parts: Sequence[Columns]) -> Columns:
    """The columns of `parts`, in order."""
    return Columns(*(np.concatenate([getattr(part, f.name) for part in parts])
                     for f in fields(Columns)))


@dataclass(frozen=True)
class Grid:
    """The moments capacity is checked at (sorted) with the functions free at each, and every
    (job, start) pair: the job, the start and the moment it is."""

    times: Array
    free: Array
    task: Index
    start_s: Array
    row: Index

    def columns(self, task: Index, kind: Index, functions: Index, memory_mb: Index,
                start_s: Array, time_s: Array, cost_usd: Array) -> Columns:
        """Columns of these plans at these starts (each start one of the grid's moments)."""
        first = np.searchsorted(self.times, start_s, side="left")
        stop = np.searchsorted(self.times, start_s + time_s, side="left")
        return Columns(task.astype(np.int64), functions.astype(np.int64),
                       memory_mb.astype(np.int64), start_s, time_s, cost_usd,
                       first.astype(np.int64), stop.astype(np.int64), kind.astype(np.int64))


def meets(start_s: float | Array, time_s: float | Array, due_s: float | Array) -> Any:
    """Whether a run started at `start_s` taking `time_s` finishes by `due_s` (exact)."""
    return np.asarray(start_s) + np.asarray(time_s) <= np.asarray(due_s)


def grid(tasks: Sequence[Task], *, slot: float, concurrency: int,
         reserved: Sequence[tuple[float, float, int]] = ()) -> Grid:
    """Every job's starts (its submission, then each t0 + i·slot after it from which its
    fastest plan still meets its due time) and the moments they make, with the functions the
    `reserved` runs (start, finish, functions) leave free at each."""
    t0 = min((task.submit_s for task in tasks), default=0.0)
    owner: list[Index] = []
    at: list[Array] = []
    for index, task in enumerate(tasks):
        if not len(task.options) or not meets(task.submit_s, task.options.time_s[0], task.due_s):
            continue
        fastest = float(task.options.time_s[0])
        first = math.floor((task.submit_s - t0) / slot)
        last = math.floor((task.due_s - fastest - t0) / slot) + 1
        points = t0 + np.arange(first, max(first, last + 1), dtype=np.float64) * slot
        points = points[(points > task.submit_s) & meets(points, fastest, task.due_s)]
        starts = np.concatenate(([task.submit_s], points))
        owner.append(np.full(len(starts), index, dtype=np.int64))
        at.append(starts)
    task_of = np.concatenate(owner) if owner else np.empty(0, dtype=np.int64)
    start_s = np.concatenate(at) if at else np.empty(0)
    horizon = max((task.due_s for task in tasks), default=t0)
    moments = [start_s, np.array([s for s, _, _ in reserved if t0 <= s <= horizon])]
    times = np.unique(np.concatenate(moments))
    free = np.full(len(times), float(concurrency))
    for start, finish, functions in reserved:
        free[(start <= times) & (times < finish)] -= functions
    return Grid(times, free, task_of, start_s,
                np.searchsorted(times, start_s, side="left").astype(np.int64))
