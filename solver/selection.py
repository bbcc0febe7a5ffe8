"""Choosing the plan: by the enumeration when one choice is left, else by HiGHS.

The enumeration evaluates every candidate exactly, and MODEL.md's tie rule leaves, in most
solves, one plan that no other can rival (`solver.candidates.cheapest_choices`): then there is
nothing to choose, that plan is the answer (`selected_by="enumeration"`), HiGHS is not run
and Pyomo is not even imported. When several plans are left, the formal statement of the
choice, a one-of-K Pyomo model, is solved by HiGHS and its answer is the answer
(`selected_by="highs"`). Each candidate i has an objective value o_i (the tie rule made
exact: 0 for the rule's plan, ≥ 1e-4 for the rest, far above HiGHS's 1e-7 tolerances) and a
time T_i; binary x_i selects it:

    minimise  Σ o_i·x_i   subject to   Σ x_i = 1,   Σ (T_i / T_o)·x_i ≤ 1

Times are scaled by the deadline (or without one by the largest time), so no coefficient that
reaches HiGHS is outside [0, 1e3]. The process keeps one persistent model per K with the
coefficients as mutable parameters and re-solves it after updating them; a model whose solve
fails is discarded, so a failure never changes what a later call answers. Pyomo captures
HiGHS's output by redirecting file descriptors, which is process-wide, so selections from
several threads take turns behind one lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from lambdadnn.solver.errors import SolverError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.plan import SelectedBy

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
NOT_RUN = "not_run"  # `solver_status` when the enumeration chose and HiGHS was not needed
MODELS_KEPT = 8
OBJECTIVE_LIMIT = 1e4  # the choices' objective is 0..~1e3 by construction (see above)


@dataclass(frozen=True)
class Selection:
    """Which candidate was chosen, by whom, and HiGHS's termination status (kept apart from
    the choice, linopy-style; `not_run` when the enumeration chose)."""

    index: int
    selected_by: SelectedBy
    solver_status: str


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
        model.x = pyo.Var(slots, domain=pyo.Binary)
        model.one = pyo.Constraint(expr=pyo.quicksum(model.x[i] for i in slots) == 1)
        model.deadline = pyo.Constraint(
            expr=pyo.quicksum(model.time_coef[i] * model.x[i] for i in slots) <= 1
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

    def solve(self, objective: npt.NDArray[np.float64],
              scaled_time: npt.NDArray[np.float64]) -> tuple[str, list[int]]:
        """HiGHS's status and the candidates it selected (any failure raises)."""
        model = self.model
        for i in range(self.size):
            model.objective_coef[i] = float(objective[i])
            model.time_coef[i] = float(scaled_time[i])
        results: Any = self.solver.solve(model)
        status = _STATUS.get(results.termination_condition.name, "unknown")
        if status != "optimal":
            return status, []
        primals = results.solution_loader.get_primals()
        return status, [i for i in range(self.size) if primals[model.x[i]] > 0.5]


_models: OrderedDict[int, _SelectionModel] = OrderedDict()
# Pyomo redirects file descriptors while HiGHS runs, HiGHS 1.16 shares state across `Highs`
# objects, and Pyomo's model building is not thread-safe: every HiGHS solve in the process
# (this selection, `solve_many`'s schedule from its build to its last solve) holds this lock,
# re-entrantly (the schedule's HiGHS object is made under it).
highs_lock = threading.RLock()


def _highs(objective: npt.NDArray[np.float64], scaled_time: npt.NDArray[np.float64]) -> Selection:
    """Solve the model for K = len(objective); a model that fails is dropped (lock held)."""
    size = len(objective)
    try:
        if size in _models:
            _models.move_to_end(size)
        else:
            _models[size] = _SelectionModel(size)
            if len(_models) > MODELS_KEPT:
                _models.popitem(last=False)
        status, chosen = _models[size].solve(objective, scaled_time)
    except Exception as error:
        _models.pop(size, None)
        raise SolverError(
            f"HiGHS failed on the selection model of {size} plans: {type(error).__name__}: "
            f"{brief(str(error), 120)}"
        ) from None
    if status != "optimal" or len(chosen) != 1:
        _models.pop(size, None)
        raise SolverError(
            f"HiGHS ended with status `{status}` and {len(chosen)} plans selected (one "
            f"expected) on the selection model of {size} plans"
        )
    return Selection(chosen[0], "highs", status)


def select(
    objective: npt.NDArray[np.float64], time: npt.NDArray[np.float64], *, deadline_s: float | None
) -> Selection:
    """The candidate of least `objective` within the deadline: the only one, or HiGHS's choice.

    Without a deadline the time constraint is made slack. Raises `SolverError` for no
    candidate, coefficients HiGHS cannot be given, or an answer HiGHS does not prove optimal.
    """
    if len(objective) == 0:
        raise SolverError("the selection model received no candidate plans")
    bound = float(np.max(time)) if deadline_s is None else float(deadline_s)
    within = time <= bound
    if not within.any():
        raise SolverError(
            f"the selection model is infeasible: no candidate within {brief(bound)} s"
        )
    if len(objective) == 1:
        return Selection(0, "enumeration", NOT_RUN)
    with np.errstate(all="ignore"):
        scaled_time = time / bound
    usable = np.isfinite(objective) & (np.abs(objective) <= OBJECTIVE_LIMIT)
    if not (usable.all() and np.isfinite(scaled_time).all() and bound > 0):
        raise SolverError(
            f"the selection model's coefficients are not finite and moderate (objective "
            f"up to {brief(float(np.max(np.abs(objective))))}, time bound {brief(bound)})"
        )
    with highs_lock:
        selection = _highs(objective, scaled_time)
    index = selection.index
    if not within[index] or objective[index] > objective[within].min():
        raise SolverError(
            f"HiGHS selected candidate {index} (objective {brief(float(objective[index]))}, "
            f"time {brief(float(time[index]))} s), not the least objective within {brief(bound)} s"
        )
    return selection
