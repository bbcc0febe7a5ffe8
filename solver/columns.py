"""The timetable's columns: every (job, option, start) its MILP may choose, on the check
points' grid (`solver.timetable` states the model and how a column counts at check points).

The timetable, its first schedules (`solver.incumbents`) and its Lagrangian bound
(`solver.lagrange`) all read these columns.
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
# A check point counted as held when the finish lies within this of it: float rounding in
# (a + T − t0)/slot must never let a run that is still going miss a check point.
COVER_RTOL = 1e-12


@dataclass(frozen=True)
class Task:
    """One job as the MILP sees it: when it may start, when it is due, what it may run."""

    submit_s: float
    due_s: float  # submit + deadline: the latest finish that meets the deadline
    options: Options


@dataclass(frozen=True)
class Columns:
    """Every (job, option, start) the model may choose, as parallel arrays."""

    task: Index
    option: Index
    start_s: Array
    first: Index  # the first check point the column counts at
    stop: Index  # one past the last
    functions: Index
    cost_usd: Array

    def __len__(self) -> int:
        return len(self.task)


def meets(start_s: float | Array, time_s: float | Array, due_s: float | Array) -> Any:
    """Whether a run started at `start_s` taking `time_s` finishes by `due_s` (exact)."""
    return np.asarray(start_s) + np.asarray(time_s) <= np.asarray(due_s)


def _points(position: Array) -> Index:
    """One past the last check point before `position` (in slots from t0), with a margin
    of `COVER_RTOL` so that float rounding never drops a check point a run is still at."""
    return (np.floor(position + np.abs(position) * COVER_RTOL) + 1).astype(np.int64)


def _within(times: Array, start: float, due_s: float) -> int:
    """How many options (fastest first) started at `start` finish by `due_s`."""
    count = int(np.searchsorted(times, due_s - start, side="right"))
    while count and not meets(start, times[count - 1], due_s):
        count -= 1
    return count


def _last_of_runs(stop: Index) -> Index:
    """The last index of each run of equal values: the cheapest option per last point."""
    return np.flatnonzero(np.append(stop[1:] != stop[:-1], True))


def columns(tasks: Sequence[Task], *, t0: float, slot: float) -> Columns:
    """The model's columns: per task, per start, the cheapest option per last check point.

    A start on check point i counts at i .. i + ⌊T/slot⌋, so the options' classes are the
    same at every such start and are found once per task; a start at submission, between
    check points, is counted from the point before it to the last before its finish.
    """
    parts: list[tuple[int, Index, Array, Index, Index]] = []  # task, option, start, first, stop
    for index, task in enumerate(tasks):
        times = task.options.time_s
        if not len(times):
            continue
        at_submit = math.floor((task.submit_s - t0) / slot)
        count = _within(times, task.submit_s, task.due_s)
        if count:
            stop = _points((task.submit_s + times[:count] - t0) / slot)
            keep = _last_of_runs(stop)
            parts.append((index, keep, np.full(len(keep), task.submit_s),
                          np.full(len(keep), at_submit, dtype=np.int64), stop[keep]))
        parts.append(_on_check_points(index, task, t0, slot, at_submit))
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return Columns(empty, empty, np.empty(0), empty, empty, empty, np.empty(0))
    sizes = [len(part[1]) for part in parts]
    option = np.concatenate([part[1] for part in parts]).astype(np.int64)
    functions = np.concatenate([tasks[part[0]].options.functions[part[1]] for part in parts])
    cost = np.concatenate([tasks[part[0]].options.cost_usd[part[1]] for part in parts])
    return Columns(
        np.repeat([part[0] for part in parts], sizes).astype(np.int64), option,
        np.concatenate([part[2] for part in parts]),
        np.concatenate([part[3] for part in parts]).astype(np.int64),
        np.concatenate([part[4] for part in parts]).astype(np.int64),
        functions.astype(np.int64), cost,
    )


def _on_check_points(index: int, task: Task, t0: float, slot: float,
                     at_submit: int) -> tuple[int, Index, Array, Index, Index]:
    """The task's columns that start on check points: at each, the options that finish by
    the due time (`_within`, for all starts at once), of those the classes wholly among them
    and the slowest one. Ten thousand jobs have some 200,000 such starts."""
    times = task.options.time_s
    span = _points(times / slot)  # a start on check point i counts up to i + span - 1
    last = _last_of_runs(span)
    points = np.arange(at_submit + 1, math.floor((task.due_s - times[0] - t0) / slot) + 1)
    starts = t0 + points * slot
    counts = np.searchsorted(times, task.due_s - starts, side="right")
    while True:  # exactly as `meets` decides, whatever the subtraction rounded
        late = (counts > 0) & ~meets(starts, times[np.maximum(counts - 1, 0)], task.due_s)
        if not late.any():
            break
        counts[late] -= 1
    some = counts > 0
    points, starts, counts = points[some], starts[some], counts[some]
    whole = np.searchsorted(last, counts)  # classes wholly among the first `count`
    extra = (whole == 0) | (last[np.maximum(whole - 1, 0)] != counts - 1)
    sizes = whole + extra
    group = np.repeat(np.arange(len(points)), sizes)
    position = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    option = np.where(position < whole[group], last[np.minimum(position, len(last) - 1)],
                      counts[group] - 1)
    return index, option, starts[group], points[group], points[group] + span[option]


def free_functions(
    reserved: Sequence[tuple[float, float, int]], *, concurrency: int, t0: float, slot: float,
    points: int,
) -> Array:
    """The functions left at each check point once the `reserved` runs (start, finish,
    functions) are counted by the columns' rule (negative where they already exceed it)."""
    free = np.full(points, float(concurrency))
    for start, finish, functions in reserved:
        if finish <= t0 or finish <= start:
            continue
        first = max(0, math.floor((start - t0) / slot))
        stop = int(_points(np.array([(finish - t0) / slot]))[0])
        free[first:min(stop, points)] -= functions
    return free


def fitting(cols: Columns, free: Array) -> Columns:
    """The columns that fit in the free functions at every check point they count at."""
    fits = np.array([
        free[first:stop].min() >= n
        for first, stop, n in zip(cols.first.tolist(), cols.stop.tolist(),
                                  cols.functions.tolist(), strict=True)
    ], dtype=bool)
    return Columns(*(getattr(cols, f.name)[fits] for f in fields(Columns)))
