"""The formal statement of the choice: a one-of-K Pyomo model over candidate plans, solved by HiGHS.

Each candidate i is a plan with time T_i and cost C_i; binary x_i selects it:

    minimise  Σ objective_i·x_i   subject to   Σ x_i = 1,   Σ T_i·x_i ≤ T_o

The model is built small (only Pareto-efficient candidates reach it): HiGHS's MIP presolve is
quadratic in K on this structure. Schedulers call `solve()` thousands of times, so the process
keeps one persistent model per K, with the coefficients as mutable parameters, and re-solves
it after updating them: 0.9 ms a call here, against 2.2 ms for building and loading a new
model. Pyomo captures HiGHS's output by redirecting file descriptors, which is process-wide,
so selections from several threads take turns behind one lock (they last about a
millisecond). Pyomo is imported on first use, not at import time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from lambdadnn.solver.errors import SolverError

# Pyomo's (APPSI) TerminationCondition names, mapped to ours; anything else is "unknown".
_STATUS = {
    "optimal": "optimal",
    "infeasible": "infeasible",
    "infeasibleOrUnbounded": "infeasible_or_unbounded",
    "unbounded": "unbounded",
    "maxTimeLimit": "time_limit",
    "maxIterations": "iteration_limit",
    "interrupted": "interrupted",
    "error": "error",
}
MODELS_KEPT = 8


@dataclass(frozen=True)
class Selection:
    """HiGHS's answer: its termination status, kept apart from the chosen index."""

    status: str
    index: int


class _SelectionModel:
    """One-of-K selection model with mutable coefficients and its persistent HiGHS solver."""

    def __init__(self, size: int) -> None:
        # pyomo.core, not pyomo.environ: the latter loads every plugin (0.3 s at start-up).
        import pyomo.core as pyo
        from pyomo.contrib.appsi.solvers.highs import Highs

        slots = range(size)
        model = pyo.ConcreteModel()
        model.objective_coef = pyo.Param(slots, mutable=True, initialize=0.0)
        model.time_coef = pyo.Param(slots, mutable=True, initialize=0.0)
        model.deadline_s = pyo.Param(mutable=True, initialize=0.0)
        model.x = pyo.Var(slots, domain=pyo.Binary)
        model.one = pyo.Constraint(expr=pyo.quicksum(model.x[i] for i in slots) == 1)
        model.deadline = pyo.Constraint(
            expr=pyo.quicksum(model.time_coef[i] * model.x[i] for i in slots) <= model.deadline_s
        )
        model.objective = pyo.Objective(
            expr=pyo.quicksum(model.objective_coef[i] * model.x[i] for i in slots)
        )
        solver = Highs()
        solver.config.stream_solver = False
        solver.config.load_solution = False
        solver.highs_options = {"mip_rel_gap": 0.0}
        # Only parameter values change between solves: skip the structural checks.
        for check in (
            "check_for_new_or_removed_constraints", "check_for_new_or_removed_vars",
            "check_for_new_or_removed_params", "check_for_new_objective", "update_constraints",
            "update_vars", "update_named_expressions", "update_objective",
        ):
            setattr(solver.update_config, check, False)
        self.size, self.model, self.solver = size, model, solver

    def solve(self, objective: npt.NDArray[np.float64], time: npt.NDArray[np.float64],
              deadline_s: float) -> Selection:
        model = self.model
        for i in range(self.size):
            model.objective_coef[i] = float(objective[i])
            model.time_coef[i] = float(time[i])
        model.deadline_s = deadline_s
        results: Any = self.solver.solve(model)
        status = _STATUS.get(results.termination_condition.name, "unknown")
        if status != "optimal":
            raise SolverError(f"HiGHS ended with status `{status}` on the selection model")
        primals = results.solution_loader.get_primals()
        chosen = [i for i in range(self.size) if primals[model.x[i]] > 0.5]
        if len(chosen) != 1:
            raise SolverError(f"HiGHS selected {len(chosen)} plans instead of one")
        return Selection(status, chosen[0])


_models: OrderedDict[int, _SelectionModel] = OrderedDict()
_lock = threading.Lock()


def _model(size: int) -> _SelectionModel:
    """The model for K = size, built on first use; the least recently used goes (lock held)."""
    models = _models
    if size in models:
        models.move_to_end(size)
    else:
        models[size] = _SelectionModel(size)
        if len(models) > MODELS_KEPT:
            models.popitem(last=False)
    return models[size]


def select(
    objective: npt.NDArray[np.float64], time: npt.NDArray[np.float64], *, deadline_s: float | None
) -> Selection:
    """Solve the selection model; raise `SolverError` unless HiGHS proves an optimum.

    Without a deadline the time constraint is made slack (its bound is the largest time).
    """
    if len(objective) == 0:
        raise SolverError("the selection model received no candidate plans")
    bound = float(np.max(time)) if deadline_s is None else deadline_s
    with _lock:
        return _model(len(objective)).solve(objective, time, bound)
