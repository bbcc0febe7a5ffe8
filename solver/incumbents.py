"""Integer schedules from the master's columns: a greedy placement, guided by the LP
relaxation when there is one, then repaired and improved by moving one job at a time
(capacity checked at every moment of `solver.columns`' grid).

HiGHS's own heuristics took 10–25 s to find a schedule within 1% on a thousand jobs, and its
branch and bound is only as quick as its first incumbent. The LP relaxation leaves most jobs
on one column; placing each job (earliest due first) on its column of largest LP value that
fits lands within 0.1–0.5% of the bound on such traces. A job that fits nowhere is placed by
evicting the jobs that block it (one, else all) and placing them elsewhere; if some still fit
nowhere, the placement starts again with them first (a few rounds, the best kept). Then each
job in turn moves to its cheapest column that fits, while any does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .columns import Columns, Task

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
IMPROVE_PASSES = 3
ROUNDS = 4  # placements, each starting with the tasks the last could not place


class Placement:
    """Which column each task holds (-1: none) and the functions left at each moment."""

    def __init__(self, cols: Columns, tasks: Sequence[Task], free: Array,
                 preference: Array | None) -> None:
        self.cols, self.tasks = cols, tasks
        self.room = free.copy()
        self.chosen = np.full(len(tasks), -1, dtype=np.int64)
        by_task = np.argsort(cols.task, kind="stable")
        bounds = np.searchsorted(cols.task[by_task], np.arange(len(tasks) + 1))
        keys: tuple[Array, ...] = (cols.start_s, cols.cost_usd)
        if preference is not None:
            keys = (*keys, -preference)
        rank = np.empty(len(cols), dtype=np.int64)
        rank[np.lexsort(keys)] = np.arange(len(cols))
        # Each task's columns in the order it tries them.
        self.options = [
            mine[np.argsort(rank[mine], kind="stable")]
            for mine in (by_task[bounds[t]:bounds[t + 1]] for t in range(len(tasks)))
        ]

    def fits(self, column: int) -> bool:
        cols = self.cols
        return bool(self.room[cols.first[column]:cols.stop[column]].min()
                    >= cols.functions[column])

    def take(self, task: int, column: int) -> None:
        cols = self.cols
        self.room[cols.first[column]:cols.stop[column]] -= cols.functions[column]
        self.chosen[task] = column

    def drop(self, task: int) -> int:
        column = int(self.chosen[task])
        cols = self.cols
        self.room[cols.first[column]:cols.stop[column]] += cols.functions[column]
        self.chosen[task] = -1
        return column

    def place(self, task: int, *, cheapest: bool = False) -> bool:
        """Put `task` on its first column (or its cheapest) that fits; whether one did."""
        order = self.options[task]
        if cheapest:
            order = order[np.argsort(self.cols.cost_usd[order], kind="stable")]
        for column in order.tolist():
            if self.fits(column):
                self.take(task, column)
                return True
        return False

    def evict(self, task: int) -> bool:
        """Place `task` by moving the tasks that block one of its columns elsewhere: one of
        them, else all of them."""
        cols = self.cols
        held = np.flatnonzero(self.chosen >= 0)
        for column in self.options[task].tolist():
            first, stop = cols.first[column], cols.stop[column]
            theirs = self.chosen[held]
            overlapping = held[(cols.first[theirs] < stop) & (cols.stop[theirs] > first)]
            groups = [[blocker] for blocker in overlapping.tolist()]
            if len(overlapping) > 1:
                groups.append(overlapping.tolist())
            for group in groups:
                if self._swap(task, column, group):
                    return True
        return False

    def _swap(self, task: int, column: int, group: list[int]) -> bool:
        """Drop `group`, put `task` on `column`, place the group again; undone if any fails."""
        old = [self.drop(blocker) for blocker in group]
        if self.fits(column):
            self.take(task, column)
            placed = [blocker for blocker in group if self.place(blocker)]
            if len(placed) == len(group):
                return True
            for blocker in placed:
                self.drop(blocker)
            self.drop(task)
        for blocker, was in zip(group, old, strict=True):
            self.take(blocker, was)
        return False

    def improve(self) -> None:
        """Move each task to its cheapest column that fits, until no move saves anything."""
        for _ in range(IMPROVE_PASSES):
            moved = False
            for task in np.flatnonzero(self.chosen >= 0).tolist():
                old = self.drop(task)
                self.place(task, cheapest=True)
                moved |= bool(self.cols.cost_usd[self.chosen[task]] < self.cols.cost_usd[old])
            if not moved:
                return


def incumbent(cols: Columns, tasks: Sequence[Task], free: Array,
              preference: Array | None = None, *, budget_s: float = math.inf) -> Index:
    """Earliest due first, each task on its first column that fits (by `preference`, the LP
    relaxation's values, highest first, when given; then cheapest; then earliest); tasks
    left out are placed by eviction, else put first in the next round; then every task
    moves to a cheaper column if one fits. Evictions and further rounds stop once
    `budget_s` has passed (an overloaded pool leaves many tasks out, each costly to try)."""
    until = time.perf_counter() + budget_s
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].due_s, i))
    best: Placement | None = None
    for _ in range(ROUNDS):
        placement = Placement(cols, tasks, free, preference)
        left = [task for task in order if not placement.place(task)]
        left = [task for task in left
                if time.perf_counter() > until or not placement.evict(task)]
        if best is None or len(left) < int((best.chosen < 0).sum()):
            best = placement
        if not left or time.perf_counter() > until:
            break
        first = set(left)
        order = left + [task for task in order if task not in first]
    assert best is not None
    best.improve()
    return best.chosen
