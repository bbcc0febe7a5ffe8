"""Choosing the plan: by the enumeration when one choice is left, else by HiGHS.

The enumeration evaluates every candidate exactly, and MODEL.md's tie rule leaves, in most
solves, one plan that no other can rival (`solver.candidates.cheapest_choices`): then there is
nothing to choose, that plan is the answer (`selected_by="enumeration"`), HiGHS is not run
and Pyomo is not even imported. When several plans are left, the formal statement of the
choice, a one-of-K Pyomo model, is solved by HiGHS (`solver.highs`) and its answer is the
answer (`selected_by="highs"`). Each candidate i has an objective value o_i (the tie rule made
exact: 0 for the rule's plan, ≥ 1e-4 for the rest, far above HiGHS's 1e-7 tolerances) and a
time T_i; binary x_i selects it:

    minimise  Σ o_i·x_i   subject to   Σ x_i = 1,   Σ (T_i / T_o)·x_i ≤ 1

Times are scaled by the deadline (or without one by the largest time), so no coefficient that
reaches HiGHS is outside [0, 1e3]. Each selection builds its model afresh (about 2 ms for a
handful of plans), so a failed solve leaves nothing behind that could change a later answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..inputs.files import brief
from . import highs
from .errors import SolverError
from .highs import Status
from .plan import SelectedBy

OBJECTIVE_LIMIT = 1e4  # the choices' objective is 0..~1e3 by construction (see above)


@dataclass(frozen=True)
class Selection:
    """Which candidate was chosen, by whom, and HiGHS's termination status (kept apart from
    the choice, linopy-style; `not_run` when the enumeration chose)."""

    index: int
    selected_by: SelectedBy
    solver_status: Status


def _highs(objective: npt.NDArray[np.float64], scaled_time: npt.NDArray[np.float64]) -> Selection:
    """HiGHS's choice on the one-of-K model for these coefficients (the lock held)."""
    # pyomo.core, not pyomo.environ: the latter loads every plugin (0.3 s at start-up).
    import pyomo.core as pyo

    size = len(objective)
    slots = range(size)
    model = pyo.ConcreteModel()
    model.x = pyo.Var(slots, domain=pyo.Binary)
    model.one = pyo.Constraint(expr=pyo.quicksum(model.x[i] for i in slots) == 1)
    model.deadline = pyo.Constraint(
        expr=pyo.quicksum(float(scaled_time[i]) * model.x[i] for i in slots) <= 1
    )
    model.objective = pyo.Objective(
        expr=pyo.quicksum(float(objective[i]) * model.x[i] for i in slots)
    )
    solver = highs.Model(model, [model.x[i] for i in slots],
                         name=f"the selection model of {size} plans",
                         options={"mip_rel_gap": 0.0})
    solver.integer(np.arange(size, dtype=np.int32))
    status = solver.run(np.inf)
    chosen = [] if status != Status.OPTIMAL else np.flatnonzero(solver.values() > 0.5).tolist()
    if len(chosen) != 1:
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
        return Selection(0, "enumeration", Status.NOT_RUN)
    with np.errstate(all="ignore"):
        scaled_time = time / bound
    usable = np.isfinite(objective) & (np.abs(objective) <= OBJECTIVE_LIMIT)
    if not (usable.all() and np.isfinite(scaled_time).all() and bound > 0):
        raise SolverError(
            f"the selection model's coefficients are not finite and moderate (objective "
            f"up to {brief(float(np.max(np.abs(objective))))}, time bound {brief(bound)})"
        )
    with highs.lock:
        selection = _highs(objective, scaled_time)
    index = selection.index
    if not within[index] or objective[index] > objective[within].min():
        raise SolverError(
            f"HiGHS selected candidate {index} (objective {brief(float(objective[index]))}, "
            f"time {brief(float(time[index]))} s), not the least objective within {brief(bound)} s"
        )
    return selection
