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

The columns are cut to those that can matter: at a start, of the options that count at the
same check points the cheapest (the slowest) dominates the rest, so one option per last check
point remains. A missed deadline is priced at the job's dearest option plus more than every
job's cost can vary together (Σ_j (dearest_j − cheapest_j) + mean cheapest), so the
optimum meets as many deadlines as any schedule of these columns can, then costs least.

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
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from lambdadnn.solver.errors import SolverError
from lambdadnn.solver.incumbents import incumbent as initial
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.lagrange import lagrangian_bound
from lambdadnn.solver.options import Options
from lambdadnn.solver.selection import highs_lock

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
# A check point counted as held when the finish lies within this of it: float rounding in
# (a + T − t0)/slot must never let a run that is still going miss a check point.
COVER_RTOL = 1e-12
WAIT_S = 0.05  # how often the waiting thread looks for Ctrl-C while HiGHS runs
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
    solver_status: str
    columns: int
    check_points: int
    seconds: float


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


def _fitting(cols: Columns, free: Array) -> Columns:
    """The columns that fit in the free functions at every check point they count at."""
    fits = np.array([
        free[first:stop].min() >= n
        for first, stop, n in zip(cols.first.tolist(), cols.stop.tolist(),
                                  cols.functions.tolist(), strict=True)
    ], dtype=bool)
    return Columns(*(getattr(cols, f.name)[fits] for f in fields(Columns)))


def _objective(chosen: Index, cols: Columns, penalty: Array) -> float:
    taken = chosen >= 0
    return float(cols.cost_usd[chosen[taken]].sum() + penalty[~taken].sum())


def _gap(objective: float, bound: float) -> float:
    return (objective - bound) / objective if objective > 0 else 0.0


def _answer(chosen: Index, cols: Columns, penalty: Array, objective: float, bound: float,
            status: str, points: int, started: float) -> Answer:
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
        cols = _fitting(cols, free)
    penalty = penalties(tasks)
    # The placements may spend a quarter of the time limit each; HiGHS the rest.
    progress(PHASES[2])
    incumbent = initial(cols, tasks, free, budget_s=max(0.0, min(time_limit_s / 4, left())))
    objective = _objective(incumbent, cols, penalty)
    # Every task on its cheapest option and none missed: nothing is cheaper.
    floor = float(sum(t.options.cost_usd[-1] for t in tasks if len(t.options)))
    if not len(cols) or (objective <= floor * (1 + 1e-12) and (incumbent >= 0).all()):
        return _answer(incumbent, cols, penalty, objective, min(floor, objective), "not_run",
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
        status = "optimal" if _gap(objective, bound) <= gap else "time_limit"
        return _answer(incumbent, cols, penalty, objective, min(bound, objective), status,
                       points, started)
    # HiGHS 1.16 shares state across `Highs` objects and Pyomo's compiler is not thread-safe:
    # the build, the LP and branch and bound hold the lock every HiGHS solve holds.
    with highs_lock:
        progress(PHASES[3])
        highs = _Highs(cols, tasks, penalty, np.maximum(free, 0.0))
        progress(PHASES[4])
        status, bound, relaxed = highs.relaxation(left())
        bound = max(bound, floor)
        if relaxed is not None:
            guided = initial(cols, tasks, free, preference=relaxed,
                             budget_s=max(0.0, min(time_limit_s / 4, left())))
            if _objective(guided, cols, penalty) < objective:
                incumbent, objective = guided, _objective(guided, cols, penalty)
        if status != "optimal" or _gap(objective, bound) <= gap or left() <= 0:
            proven = status != "optimal" or _gap(objective, bound) <= gap
            return _answer(incumbent, cols, penalty, objective, min(bound, objective),
                           status if proven else "time_limit", points, started)
        progress(PHASES[5])
        status, found, mip_bound, chosen = highs.branch_and_bound(incumbent, left(), gap)
        bound = max(bound, mip_bound)
        if chosen is not None and found < objective:
            incumbent, objective = chosen, found
        if _gap(objective, bound) <= gap:  # proven, whether or not HiGHS said its limit came
            status = "optimal"
        return _answer(incumbent, cols, penalty, objective, min(bound, objective), status, points,
                       started)


# HiGHS's model statuses, mapped to `solver_status` names (anything else is `unknown`).
_MODEL_STATUS = {
    "kOptimal": "optimal",
    "kInfeasible": "infeasible",
    "kUnboundedOrInfeasible": "infeasible_or_unbounded",
    "kUnbounded": "unbounded",
    "kTimeLimit": "time_limit",
    "kIterationLimit": "iteration_limit",
    "kInterrupt": "interrupted",
    "kSolutionLimit": "solution_limit",
}


class _Highs:
    """The MILP built in Pyomo, compiled to matrix form by Pyomo's standard-form compiler
    (Pyomo's own persistent HiGHS interface spent ~10 s turning a thousand jobs' 65,000
    columns into rows; the compiler takes ~2 s) and handed to one HiGHS object, which solves
    the relaxation and then, if need be, the MILP. Nothing outlives the call."""

    def __init__(self, cols: Columns, tasks: Sequence[Task], penalty: Array,
                 free: Array) -> None:
        import highspy
        import pyomo.core as pyo
        from pyomo.common.tee import capture_output
        from pyomo.core.expr.numeric_expr import LinearExpression
        from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

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
        try:
            form = LinearStandardFormCompiler().write(
                model, mixed_form=True, column_order=[*x, *u]
            )
        except Exception as error:
            raise SolverError(
                f"Pyomo could not compile the schedule model of {size:,} columns: "
                f"{type(error).__name__}: {brief(str(error), 120)}"
            ) from None
        if len(form.columns) != size + len(tasks):
            raise SolverError(
                f"the compiled schedule model has {len(form.columns):,} columns, "
                f"{size + len(tasks):,} expected"
            )
        matrix = form.A.tocsc()
        rhs = np.asarray(form.rhs, dtype=np.float64)
        sense = np.array([multiplier for _, multiplier in form.rows])
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = matrix.shape[1], matrix.shape[0]
        lp.col_cost_ = np.asarray(form.c.toarray(), dtype=np.float64).ravel()
        lp.col_lower_ = np.zeros(lp.num_col_)
        lp.col_upper_ = np.ones(lp.num_col_)
        lp.row_lower_ = np.where(sense == 1, -highspy.kHighsInf, rhs)  # 1: ≤, 0: =
        lp.row_upper_ = rhs
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = matrix.indptr
        lp.a_matrix_.index_ = matrix.indices
        lp.a_matrix_.value_ = matrix.data
        with highs_lock, capture_output(capture_fd=True):  # its banner, on the first one
            solver = highspy.Highs()  # type: ignore[no-untyped-call]
        solver.setOptionValue("output_flag", False)
        # Ctrl-C: the MIP's interrupt callback stops branch and bound when `_run` asks (the
        # simplex's, called at every iteration, would slow the LP; the LP is short).
        solver.cbMipInterrupt += self._interrupt
        self.cancelled = False
        # HiGHS 1.16's MIP presolve, given a start, reported objectives below the proven floor
        # with a solution that did not match them (the re-check caught it): presolve stays off.
        solver.setOptionValue("presolve", "off")
        solver.passModel(lp)
        self.highs, self.size, self.tasks, self.cols = solver, lp.num_col_, len(tasks), cols

    def _run(self, time_limit_s: float) -> str:
        solver = self.highs
        solver.setOptionValue("time_limit", max(time_limit_s, 1e-3))
        try:
            # HiGHS runs in highspy's thread while this one waits: a blocking run() would hold
            # Ctrl-C until HiGHS ends; here it cancels HiGHS and reaches the caller at once.
            solver.startSolve()
            try:
                while not solver.wait(WAIT_S)[0]:
                    pass
            except KeyboardInterrupt:
                self.cancelled = True
                while not solver.wait(WAIT_S)[0]:
                    pass
                raise
        except Exception as error:
            raise SolverError(
                f"HiGHS failed on the schedule model of {len(self.cols):,} columns: "
                f"{type(error).__name__}: {brief(str(error), 120)}"
            ) from None
        return _MODEL_STATUS.get(solver.getModelStatus().name, "unknown")

    def _interrupt(self, event: Any) -> None:
        if self.cancelled:
            event.interrupt()

    def relaxation(self, time_limit_s: float) -> tuple[str, float, Array | None]:
        """The LP relaxation: its status, bound (−∞ unless solved) and column values."""
        status = self._run(time_limit_s)
        if status != "optimal":
            return status, -math.inf, None
        values = np.asarray(self.highs.getSolution().col_value, dtype=np.float64)
        return status, float(self.highs.getInfo().objective_function_value), values[:len(self.cols)]

    def branch_and_bound(self, incumbent: Index, time_limit_s: float,
                         gap: float) -> tuple[str, float, float, Index | None]:
        """The MILP from `incumbent`: status, HiGHS's objective and bound, and its choice."""
        import highspy

        solver = self.highs
        solver.changeColsIntegrality(
            self.size, np.arange(self.size, dtype=np.int32),
            np.full(self.size, highspy.HighsVarType.kInteger),
        )
        start = np.zeros(self.size)
        taken = incumbent >= 0
        start[incumbent[taken]] = 1.0
        start[len(self.cols) + np.flatnonzero(~taken)] = 1.0
        given = highspy.HighsSolution()
        given.col_value = start
        given.value_valid = True
        solver.setSolution(given)
        solver.setOptionValue("mip_rel_gap", gap)
        status = self._run(time_limit_s)
        info = solver.getInfo()
        bound = float(info.mip_dual_bound)
        if info.primal_solution_status != 2:  # no feasible point
            return status, math.inf, bound, None
        values = np.asarray(solver.getSolution().col_value, dtype=np.float64)
        chosen = np.full(self.tasks, -1, dtype=np.int64)
        picked = np.flatnonzero(values[:len(self.cols)] > 0.5)
        chosen[self.cols.task[picked]] = picked
        return status, float(info.objective_function_value), bound, chosen
