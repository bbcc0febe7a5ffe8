"""The time-indexed MILP behind `solve_many`: one plan and one start for each job, under one
concurrency limit, built in Pyomo and solved by HiGHS.

Time is cut at check points g_i = t0 + i·slot. A job may start at its submission or at any
check point after it; at start a on option k (time T_k, functions n_k) it holds its
functions over [a, a + T_k), which the model counts at check points ⌊(a − t0)/slot⌋ up to
⌊(a + T_k − t0)/slot⌋ — from the check point at or before its start (a start at submission
falls between check points) to the last one before its finish. Every run that is in progress
at a moment t is then counted at the check point at or before t, so the capacity rows

    Σ n_k · x_{j,k,a}  over the columns that count at g_i   ≤   concurrency,   every i,

bound the functions held at every moment, not only at the check points: a schedule the model
accepts never exceeds the limit (a start at submission is counted from up to one slot early,
the price of the soundness). Deadlines are exact: a column exists only if a + T_k ≤ submit +
deadline. Each job takes one column or none:

    Σ_{k,a} x_{j,k,a} + u_j = 1,    minimise  Σ c_k·x_{j,k,a} + Σ penalty_j·u_j.

The columns (`solver.columns`) are cut to those that can matter: at a start, of the options
that count at the same check points the cheapest (the slowest) dominates the rest, so one
option per last check point remains. A missed deadline is priced at the job's dearest option
plus more than every job's cost can vary together (Σ_j (dearest_j − cheapest_j) + mean
cheapest), so the optimum meets as many deadlines as any schedule of these columns can, then
costs least.

A greedy schedule (earliest due first, each job's cheapest column that fits), then one
guided by the LP relaxation (`solver.incumbents`), is the incumbent HiGHS's branch and bound
starts from: every answer, even at the time limit, is a schedule (`solve_timetable`).

The time limit covers everything. Pyomo compiles the model at a few microseconds a nonzero
(5.5 million for ten thousand jobs of the paper's mix at the 60 s slot: 20–45 s), so a model
that would not be built within half the time left, or that would take more than a few GB, is
not built: the greedy schedule stands, measured against the cost floor (every job on its
cheapest option) or, better, the Lagrangian bound of `solver.lagrange` in the time left.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import highs
from .columns import Columns, Task, columns, fitting, free_functions
from .highs import Status
from .incumbents import incumbent as initial
from .lagrange import lagrangian_bound

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
# Pyomo's build and compile per nonzero of the model, at the fast end of what was measured
# (4–12 µs on 2 cores, idle to loaded): a model is skipped only when even that is too slow.
BUILD_S_PER_NONZERO = 4e-6
# The Pyomo model's memory is about half a kilobyte a nonzero (ten thousand jobs, 5.5 million
# nonzeros: 2.96 GB); a larger model is not built, whatever the time limit.
MAX_MODEL_NONZEROS = 6_000_000
# What `solve_many` reports to `progress`, in order (a phase may be skipped).
PHASES = ("fronts", "grid", "greedy schedule", "model", "relaxation", "branch and bound",
          "re-check")


@dataclass(frozen=True)
class Answer:
    """The MILP's choice per task (an index into its options and a start; -1 and NaN for
    none), kept apart from HiGHS's status, objective and bound; `solver_status` is `not_run`
    when the greedy schedule was already provably optimal (or there was nothing to choose)."""

    option: Index
    start_s: Array
    penalty_usd: Array
    objective_usd: float
    bound_usd: float
    solver_status: Status
    columns: int
    check_points: int
    seconds: float


def penalties(tasks: Sequence[Task]) -> Array:
    """Each task's price for a missed deadline (see the module's docstring); 0 for a task
    with no option, which misses whatever is chosen."""
    dearest = np.array([t.options.cost_usd[0] if len(t.options) else 0.0 for t in tasks])
    cheapest = np.array([t.options.cost_usd[-1] if len(t.options) else 0.0 for t in tasks])
    has = np.array([len(t.options) > 0 for t in tasks], dtype=bool)
    if not has.any():
        return np.zeros(len(tasks))
    spread = float((dearest - cheapest)[has].sum()) + float(cheapest[has].mean())
    return np.where(has, dearest + spread, 0.0)


def _objective(chosen: Index, cols: Columns, penalty: Array) -> float:
    taken = chosen >= 0
    return float(cols.cost_usd[chosen[taken]].sum() + penalty[~taken].sum())


def _gap(objective: float, bound: float) -> float:
    return (objective - bound) / objective if objective > 0 else 0.0


def _answer(chosen: Index, cols: Columns, penalty: Array, objective: float, bound: float,
            status: Status, points: int, started: float) -> Answer:
    taken = chosen >= 0
    option = np.full(len(chosen), -1, dtype=np.int64)
    start = np.full(len(chosen), np.nan)
    option[taken], start[taken] = cols.option[chosen[taken]], cols.start_s[chosen[taken]]
    return Answer(option, start, penalty, objective, bound, status, len(cols), points,
                  time.perf_counter() - started)


def solve_timetable(
    tasks: Sequence[Task], *, concurrency: int, slot: float, time_limit_s: float, gap: float,
    reserved: Sequence[tuple[float, float, int]] = (),
    progress: Callable[[str], None] = lambda phase: None,
) -> Answer:
    """The least-penalised schedule of `tasks` on the check points' grid (see the module),
    around the functions `reserved` runs already hold (start, finish, functions).

    The greedy schedule is the first incumbent. HiGHS solves the LP relaxation; its bound,
    and the greedy guided by its values (which on traces of a thousand jobs lands within
    0.1–0.5% of it), often prove the gap at once; otherwise HiGHS's branch and bound runs
    from the better incumbent for the time left. `time_limit_s` may be used up already (then
    the greedy schedule is the answer).
    """
    started = time.perf_counter()

    def left() -> float:
        return time_limit_s - (time.perf_counter() - started)

    progress(PHASES[1])
    t0 = min((task.submit_s for task in tasks), default=0.0)
    cols = columns(tasks, t0=t0, slot=slot)
    points = int(cols.stop.max(initial=0))
    free = free_functions(reserved, concurrency=concurrency, t0=t0, slot=slot, points=points)
    if reserved:
        cols = fitting(cols, free)
    penalty = penalties(tasks)
    # The placements may spend a quarter of the time limit each; HiGHS the rest.
    progress(PHASES[2])
    incumbent = initial(cols, tasks, free, budget_s=max(0.0, min(time_limit_s / 4, left())))
    objective = _objective(incumbent, cols, penalty)
    # Every task on its cheapest option and none missed: nothing is cheaper.
    floor = float(sum(t.options.cost_usd[-1] for t in tasks if len(t.options)))
    if not len(cols) or (objective <= floor * (1 + 1e-12) and (incumbent >= 0).all()):
        return _answer(incumbent, cols, penalty, objective, min(floor, objective), Status.NOT_RUN,
                       points, started)
    nonzeros = int((cols.stop - cols.first).sum()) + len(cols) + len(tasks)
    if nonzeros > MAX_MODEL_NONZEROS or nonzeros * BUILD_S_PER_NONZERO > left() / 2:
        # Half the time left prices the rows, the rest places the jobs as the prices choose.
        priced, preference = lagrangian_bound(cols, penalty, free, target=objective,
                                              budget_s=max(0.0, left() / 2))
        bound = max(floor, priced)
        if _gap(objective, bound) > gap and left() > 0:
            guided = initial(cols, tasks, free, preference=preference,
                             budget_s=max(0.0, left()))
            if _objective(guided, cols, penalty) < objective:
                incumbent, objective = guided, _objective(guided, cols, penalty)
        status = Status.OPTIMAL if _gap(objective, bound) <= gap else Status.TIME_LIMIT
        return _answer(incumbent, cols, penalty, objective, min(bound, objective), status,
                       points, started)
    # HiGHS 1.16 shares state across `Highs` objects and Pyomo's compiler is not thread-safe:
    # the build, the LP and branch and bound hold the lock every HiGHS solve holds.
    with highs.lock:
        progress(PHASES[3])
        milp = _Highs(cols, tasks, penalty, np.maximum(free, 0.0))
        progress(PHASES[4])
        status, bound, relaxed = milp.relaxation(left())
        bound = max(bound, floor)
        if relaxed is not None:
            guided = initial(cols, tasks, free, preference=relaxed,
                             budget_s=max(0.0, min(time_limit_s / 4, left())))
            if _objective(guided, cols, penalty) < objective:
                incumbent, objective = guided, _objective(guided, cols, penalty)
        if status != Status.OPTIMAL or _gap(objective, bound) <= gap or left() <= 0:
            proven = status != Status.OPTIMAL or _gap(objective, bound) <= gap
            return _answer(incumbent, cols, penalty, objective, min(bound, objective),
                           status if proven else Status.TIME_LIMIT, points, started)
        progress(PHASES[5])
        status, found, mip_bound, chosen = milp.branch_and_bound(incumbent, left(), gap)
        bound = max(bound, mip_bound)
        if chosen is not None and found < objective:
            incumbent, objective = chosen, found
        if _gap(objective, bound) <= gap:  # proven, whether or not HiGHS said its limit came
            status = Status.OPTIMAL
        return _answer(incumbent, cols, penalty, objective, min(bound, objective), status, points,
                       started)


class _Highs:
    """The MILP built in Pyomo and handed to HiGHS (`solver.highs`: Pyomo's standard-form
    compiler takes ~2 s for a thousand jobs' 65,000 columns, where Pyomo's own persistent HiGHS
    interface spent ~10 s), which solves the relaxation and then, if need be, the MILP.
    Nothing outlives the call."""

    def __init__(self, cols: Columns, tasks: Sequence[Task], penalty: Array,
                 free: Array) -> None:
        import pyomo.core as pyo
        from pyomo.core.expr.numeric_expr import LinearExpression

        size = len(cols)
        model = pyo.ConcreteModel()
        model.x = pyo.Var(range(size), domain=pyo.Binary)
        model.u = pyo.Var(range(len(tasks)), domain=pyo.Binary)
        x = [model.x[i] for i in range(size)]
        u = [model.u[t] for t in range(len(tasks))]
        by_task = np.argsort(cols.task, kind="stable")
        bounds = np.searchsorted(cols.task[by_task], np.arange(len(tasks) + 1))
        model.one = pyo.ConstraintList()
        for t in range(len(tasks)):
            mine = by_task[bounds[t]:bounds[t + 1]].tolist()
            model.one.add(LinearExpression(
                constant=0, linear_coefs=[1.0] * (len(mine) + 1),
                linear_vars=[x[i] for i in mine] + [u[t]],
            ) == 1)
        # Which columns count at each check point: column c at points first[c]..stop[c]-1.
        lengths = cols.stop - cols.first
        owner = np.repeat(np.arange(size), lengths)
        point = np.repeat(cols.first - np.cumsum(np.concatenate(([0], lengths[:-1]))), lengths)
        point = point + np.arange(len(owner))
        order = np.argsort(point, kind="stable")
        owner, point = owner[order], point[order]
        edges = np.searchsorted(point, np.arange(len(free) + 1))
        model.capacity = pyo.ConstraintList()
        functions = cols.functions.astype(np.float64)
        for i in range(len(free)):
            held = owner[edges[i]:edges[i + 1]]
            if functions[held].sum() > free[i]:  # a row that can bind
                model.capacity.add(LinearExpression(
                    constant=0, linear_coefs=functions[held].tolist(),
                    linear_vars=[x[c] for c in held.tolist()],
                ) <= float(free[i]))
        model.objective = pyo.Objective(expr=LinearExpression(
            constant=0, linear_coefs=[*cols.cost_usd.tolist(), *penalty.tolist()],
            linear_vars=[*x, *u],
        ))
        # HiGHS 1.16's MIP presolve, given a start, reported objectives below the proven floor
        # with a solution that did not match them (the re-check caught it): presolve stays off.
        self.solver = highs.Model(model, [*x, *u], name=f"the schedule model of {size:,} columns",
                                  options={"presolve": "off"})
        self.tasks, self.cols = len(tasks), cols

    def relaxation(self, time_limit_s: float) -> tuple[Status, float, Array | None]:
        """The LP relaxation: its status, bound (−∞ unless solved) and column values."""
        status = self.solver.run(time_limit_s)
        if status != Status.OPTIMAL:
            return status, -math.inf, None
        bound = float(self.solver.highs.getInfo().objective_function_value)
        return status, bound, self.solver.values()[:len(self.cols)]

    def branch_and_bound(self, incumbent: Index, time_limit_s: float,
                         gap: float) -> tuple[Status, float, float, Index | None]:
        """The MILP from `incumbent`: status, HiGHS's objective and bound, and its choice."""
        import highspy

        size = len(self.cols) + self.tasks
        self.solver.integer(np.arange(size, dtype=np.int32))
        start = np.zeros(size)
        taken = incumbent >= 0
        start[incumbent[taken]] = 1.0
        start[len(self.cols) + np.flatnonzero(~taken)] = 1.0
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
        picked = np.flatnonzero(self.solver.values()[:len(self.cols)] > 0.5)
        chosen[self.cols.task[picked]] = picked
        return status, float(info.objective_function_value), bound, chosen
