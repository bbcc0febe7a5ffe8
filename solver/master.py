"""The master problem of `solve_many`'s column generation, built once and grown in place.

Its skeleton — one row per job (Σ_columns of j x + u_j = 1) and the miss variables u_j with
their penalties — is built in Pyomo and compiled into one HiGHS object (`solver.highs`). The
columns the pricing finds are appended to that object (`highspy.Highs.addCols`), and so are
the capacity rows, each at the first moment the columns held there could exceed the
functions free: a row that cannot bind changes nothing, and most never can. HiGHS keeps its
basis across the additions, so each round's LP starts where the last ended.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from . import highs
from .columns import Columns, join
from .errors import SolverError
from .highs import Status

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]


class Master:
    """The restricted master problem over the columns added so far."""

    def __init__(self, penalty: Array, free: Array) -> None:
        import pyomo.core as pyo

        tasks = len(penalty)
        model = pyo.ConcreteModel()
        model.u = pyo.Var(range(tasks), bounds=(0, 1))
        model.one = pyo.Constraint(range(tasks), rule=lambda m, j: m.u[j] == 1)
        model.objective = pyo.Objective(
            expr=sum(float(p) * model.u[j] for j, p in enumerate(penalty.tolist())) if tasks
            else 0.0)
        self.solver = highs.Model(model, [model.u[j] for j in range(tasks)],
                                  name=f"the schedule's master problem of {tasks:,} jobs",
                                  options={"presolve": "off"})
        rows = self.solver.highs.getNumRow()
        if rows != tasks:
            raise SolverError(f"the master problem compiled to {rows} rows, {tasks} expected")
        self.tasks = tasks
        self.penalty = penalty
        self.free = free
        self.row_of = np.full(len(free), -1, dtype=np.int64)  # HiGHS's row of each moment
        self.held = np.zeros(len(free) + 1)  # the functions the columns could hold, as steps
        self.cols: Columns | None = None
        self.keys: dict[tuple[int, int, int, int, float], int] = {}

    @property
    def columns(self) -> Columns:
        assert self.cols is not None
        return self.cols

    def add(self, cols: Columns) -> int:
        """Append the columns not already held (a column is its task, plan and start); the
        rows they can make bind come first. Returns how many were added."""
        fresh = []
        for i, key in enumerate(cols.keys()):
            if key not in self.keys:
                self.keys[key] = len(self.keys)
                fresh.append(i)
        if not fresh:
            return 0
        new = cols.take(np.array(fresh, dtype=np.int64))
        old = self.cols
        self.cols = new if old is None else join((old, new))
        np.add.at(self.held, new.first, new.functions)
        np.add.at(self.held, new.stop, -new.functions)
        can_bind = np.cumsum(self.held)[:-1] > self.free
        rows = np.flatnonzero(can_bind & (self.row_of < 0))
        if len(rows):
            self._add_rows(rows, old)
        self._add_cols(new)
        return len(fresh)

    def _add_rows(self, rows: Index, old: Columns | None) -> None:
        """Capacity rows at moments `rows`, over the columns already in HiGHS."""
        solver = self.solver.highs
        self.row_of[rows] = solver.getNumRow() + np.arange(len(rows))
        upper = self.free[rows]
        if old is None or not len(old):
            solver.addRows(len(rows), np.full(len(rows), -math.inf), upper, 0,
                           np.zeros(len(rows), dtype=np.int32), np.empty(0, dtype=np.int32),
                           np.empty(0))
            return
        lo = np.searchsorted(rows, old.first, side="left")
        hi = np.searchsorted(rows, old.stop, side="left")
        count = hi - lo
        column = np.repeat(np.arange(len(old)), count)
        row = rows[np.repeat(lo, count) + np.arange(int(count.sum()))
                   - np.repeat(np.cumsum(count) - count, count)]
        order = np.lexsort((column, row))
        column, row = column[order], row[order]
        starts = np.searchsorted(row, rows, side="left").astype(np.int32)
        solver.addRows(len(rows), np.full(len(rows), -math.inf), upper, len(column),
                       starts, (self.tasks + column).astype(np.int32),
                       old.functions[column].astype(np.float64))

    def _add_cols(self, new: Columns) -> None:
        """The columns `new`: 1 in their job's row, n in each capacity row they count at."""
        active = self.row_of >= 0
        prefix = np.concatenate(([0], np.cumsum(active)))
        count = prefix[new.stop] - prefix[new.first]  # capacity rows each column counts at
        where = np.flatnonzero(active)
        size = count + 1
        index = np.empty(int(size.sum()), dtype=np.int32)
        value = np.empty(len(index))
        starts = np.concatenate(([0], np.cumsum(size)[:-1]))
        index[starts] = new.task
        value[starts] = 1.0
        inner = np.repeat(starts + 1, count) + np.arange(int(count.sum())) \
            - np.repeat(np.cumsum(count) - count, count)
        moment = where[np.repeat(prefix[new.first], count) + np.arange(int(count.sum()))
                       - np.repeat(np.cumsum(count) - count, count)]
        index[inner] = self.row_of[moment]
        value[inner] = np.repeat(new.functions, count)
        self.solver.highs.addCols(len(new), new.cost_usd, np.zeros(len(new)), np.ones(len(new)),
                                  len(index), starts.astype(np.int32), index, value)

    def relaxation(self, time_limit_s: float) -> tuple[Status, float, Array, Array, Array]:
        """The LP: its status, objective, each column's value, the price of each moment
        (π ≥ 0, zero where no row is) and each job's row dual."""
        status = self.solver.run(time_limit_s)
        solver = self.solver.highs
        if status != Status.OPTIMAL:
            empty = np.empty(0)
            return status, math.inf, empty, empty, empty
        solution = solver.getSolution()
        duals = np.asarray(solution.row_dual, dtype=np.float64)
        prices = np.zeros(len(self.free))
        active = np.flatnonzero(self.row_of >= 0)
        prices[active] = np.maximum(-duals[self.row_of[active]], 0.0)
        values = np.asarray(solution.col_value, dtype=np.float64)[self.tasks:]
        objective = float(solver.getInfo().objective_function_value)
        return status, objective, values, prices, duals[:self.tasks]

    def branch_and_bound(self, incumbent: Index, time_limit_s: float,
                         gap: float) -> tuple[Status, float, float, Index | None]:
        """The MILP over the columns held, from `incumbent` (a column per task, -1: none):
        its status, objective, dual bound and choice."""
        import highspy

        cols = self.columns
        size = self.tasks + len(cols)
        self.solver.integer(np.arange(size, dtype=np.int32))
        start = np.zeros(size)
        taken = incumbent >= 0
        start[self.tasks + incumbent[taken]] = 1.0
        start[np.flatnonzero(~taken)] = 1.0
        given = highspy.HighsSolution()
        given.col_value = start
        given.value_valid = True
        solver = self.solver.highs
        solver.setSolution(given)
        solver.setOptionValue("mip_rel_gap", gap)
        status = self.solver.run(time_limit_s)
        info = solver.getInfo()
        bound = float(info.mip_dual_bound)
        if info.primal_solution_status != 2:  # no feasible point
            return status, math.inf, bound, None
        chosen = np.full(self.tasks, -1, dtype=np.int64)
        picked = np.flatnonzero(self.solver.values()[self.tasks:] > 0.5)
        chosen[cols.task[picked]] = picked
        reported = float(info.objective_function_value)
        # HiGHS 1.16's MIP presolve (off here) once reported an objective its solution did not
        # have (docs/MODEL.md, "Presolve"): an answer that is not what it says is no answer,
        # and its bound no bound.
        if not math.isclose(objective(chosen, cols, self.penalty), reported, rel_tol=1e-9,
                            abs_tol=1e-12):
            return Status.ERROR, math.inf, -math.inf, None
        return status, reported, bound, chosen


def objective(chosen: Index, cols: Columns, penalty: Array) -> float:
    """The master's objective of a choice (a column per task, -1: missed)."""
    taken = chosen >= 0
    return float(cols.cost_usd[chosen[taken]].sum() + penalty[~taken].sum())
