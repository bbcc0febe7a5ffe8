"""HiGHS as the solver calls it: a Pyomo model compiled to matrix form and handed to one
highspy object, solved in highspy's thread so that Ctrl-C stops it, its status a `Status`.

The selection and the timetable both come here, so both stop on Ctrl-C, name HiGHS's
statuses alike and take turns behind one lock. Pyomo and highspy are imported on first use.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..inputs.files import brief
from .errors import SolverError

if TYPE_CHECKING:
    import highspy

WAIT_S = 0.05  # how often the waiting thread looks for Ctrl-C while HiGHS runs
# Pyomo redirects file descriptors while it captures HiGHS's banner, HiGHS 1.16 shares state
# across `Highs` objects, and Pyomo's model building is not thread-safe: every HiGHS solve in
# the process (a selection; a schedule from its build to its last solve) holds this lock,
# re-entrantly (the schedule's HiGHS object is made under it).
lock = threading.RLock()
_banner: list[bool] = []  # HiGHS prints its banner with the process's first `Highs` object


class Status(StrEnum):
    """HiGHS's termination status in the results' words (a `str`, so JSON and text show the
    value); `not_run` when the answer needed no HiGHS."""

    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    INFEASIBLE_OR_UNBOUNDED = "infeasible_or_unbounded"
    UNBOUNDED = "unbounded"
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    SOLUTION_LIMIT = "solution_limit"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    UNKNOWN = "unknown"
    NOT_RUN = "not_run"


# `highspy.HighsModelStatus` names as statuses; any other (an empty model, an objective bound
# or target, a memory limit, HiGHS's own "unknown") is `Status.UNKNOWN`.
_STATUS = {
    "kOptimal": Status.OPTIMAL,
    "kInfeasible": Status.INFEASIBLE,
    "kUnboundedOrInfeasible": Status.INFEASIBLE_OR_UNBOUNDED,
    "kUnbounded": Status.UNBOUNDED,
    "kTimeLimit": Status.TIME_LIMIT,
    "kIterationLimit": Status.ITERATION_LIMIT,
    "kSolutionLimit": Status.SOLUTION_LIMIT,
    "kInterrupt": Status.INTERRUPTED,
    "kHighsInterrupt": Status.INTERRUPTED,
    "kLoadError": Status.ERROR,
    "kModelError": Status.ERROR,
    "kPresolveError": Status.ERROR,
    "kSolveError": Status.ERROR,
    "kPostsolveError": Status.ERROR,
}


def status_of(model_status: Any) -> Status:
    """The `Status` of a `highspy.HighsModelStatus` (or of any value with a `name`)."""
    return _STATUS.get(getattr(model_status, "name", ""), Status.UNKNOWN)


class Model:
    """A Pyomo model, as its continuous relaxation, in one HiGHS object of its own.

    `columns` are the model's variables in the order of HiGHS's columns; a caller that wants
    integers marks them (`integer`), so a MILP can be solved as an LP first. `name` says
    which model an error is about ("the schedule model of 65,000 columns").
    """

    def __init__(self, model: Any, columns: Sequence[Any], *, name: str,
                 options: Mapping[str, bool | int | float | str]) -> None:
        import highspy
        from pyomo.common.tee import capture_output
        from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

        try:
            form = LinearStandardFormCompiler().write(
                model, mixed_form=True, column_order=list(columns)
            )
        except Exception as error:
            raise SolverError(
                f"Pyomo could not compile {name}: {type(error).__name__}: "
                f"{brief(str(error), 120)}"
            ) from None
        if len(form.columns) != len(columns):
            raise SolverError(
                f"{name} compiled to {len(form.columns):,} columns, {len(columns):,} expected"
            )
        matrix = form.A.tocsc()
        rhs = np.asarray(form.rhs, dtype=np.float64)
        sense = np.array([multiplier for _, multiplier in form.rows])  # 1: ≤, 0: =, -1: ≥
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = matrix.shape[1], matrix.shape[0]
        lp.col_cost_ = np.asarray(form.c.toarray(), dtype=np.float64).ravel()
        lp.col_lower_ = np.array([-math.inf if v.lb is None else v.lb for v in form.columns],
                                 dtype=np.float64)
        lp.col_upper_ = np.array([math.inf if v.ub is None else v.ub for v in form.columns],
                                 dtype=np.float64)
        lp.row_lower_ = np.where(sense == 1, -highspy.kHighsInf, rhs)
        lp.row_upper_ = np.where(sense == -1, highspy.kHighsInf, rhs)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = matrix.indptr
        lp.a_matrix_.index_ = matrix.indices
        lp.a_matrix_.value_ = matrix.data
        with lock:
            if _banner:
                solver = highspy.Highs()  # type: ignore[no-untyped-call]
            else:
                with capture_output(capture_fd=True):
                    solver = highspy.Highs()  # type: ignore[no-untyped-call]
                _banner.append(True)
        solver.setOptionValue("output_flag", False)
        for option, value in options.items():
            solver.setOptionValue(option, value)
        # Ctrl-C: the MIP's interrupt callback stops branch and bound when `run` asks (the
        # simplex's, called at every iteration, would slow the LP; an LP here is short).
        solver.cbMipInterrupt += self._interrupt
        solver.passModel(lp)
        self.highs: highspy.Highs = solver
        self.name = name
        self.cancelled = False

    def integer(self, columns: npt.NDArray[np.int32]) -> None:
        """Make `columns` integer: the next `run` solves the MILP."""
        import highspy

        self.highs.changeColsIntegrality(
            len(columns), columns, np.full(len(columns), highspy.HighsVarType.kInteger)
        )

    def run(self, time_limit_s: float) -> Status:
        """Solve within `time_limit_s`; any failure is a `SolverError`.

        HiGHS runs in highspy's thread while this one waits: a blocking run would hold Ctrl-C
        until HiGHS ends; here Ctrl-C cancels branch and bound and reaches the caller at once.
        """
        solver = self.highs
        self.cancelled = False
        solver.setOptionValue("time_limit", max(time_limit_s, 1e-3))
        try:
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
                f"HiGHS failed on {self.name}: {type(error).__name__}: {brief(str(error), 120)}"
            ) from None
        return status_of(solver.getModelStatus())

    def values(self) -> npt.NDArray[np.float64]:
        """The columns' values in the last solution."""
        return np.asarray(self.highs.getSolution().col_value, dtype=np.float64)

    def _interrupt(self, event: Any) -> None:
        if self.cancelled:
            event.interrupt()
