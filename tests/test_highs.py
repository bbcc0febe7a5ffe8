"""The one HiGHS adapter: every HiGHS model status named, and Ctrl-C stopping HiGHS itself."""

from __future__ import annotations

import json
from typing import Any

import highspy
import numpy as np
import pyomo.core as pyo
import pytest

from lambdadnn.solver import highs
from lambdadnn.solver.errors import SolverError
from lambdadnn.solver.highs import Status

# Every status of highspy 1.16, and what the results call it.
EXPECTED = {
    "kNotset": Status.UNKNOWN,
    "kLoadError": Status.ERROR,
    "kModelError": Status.ERROR,
    "kPresolveError": Status.ERROR,
    "kSolveError": Status.ERROR,
    "kPostsolveError": Status.ERROR,
    "kModelEmpty": Status.UNKNOWN,
    "kOptimal": Status.OPTIMAL,
    "kInfeasible": Status.INFEASIBLE,
    "kUnboundedOrInfeasible": Status.INFEASIBLE_OR_UNBOUNDED,
    "kUnbounded": Status.UNBOUNDED,
    "kObjectiveBound": Status.UNKNOWN,
    "kObjectiveTarget": Status.UNKNOWN,
    "kTimeLimit": Status.TIME_LIMIT,
    "kIterationLimit": Status.ITERATION_LIMIT,
    "kUnknown": Status.UNKNOWN,
    "kSolutionLimit": Status.SOLUTION_LIMIT,
    "kInterrupt": Status.INTERRUPTED,
    "kMemoryLimit": Status.UNKNOWN,
    "kHighsInterrupt": Status.INTERRUPTED,
}


@pytest.mark.parametrize("name", sorted(highspy.HighsModelStatus.__members__))
def test_every_highs_model_status_maps_to_its_status(name: str) -> None:
    assert highs.status_of(highspy.HighsModelStatus.__members__[name]) is EXPECTED[name]


def test_a_status_highs_does_not_have_is_unknown() -> None:
    class Unheard:
        name = "kSomethingNew"

    assert highs.status_of(Unheard()) is Status.UNKNOWN
    assert highs.status_of(99) is Status.UNKNOWN


def test_a_status_reads_and_serialises_as_its_value() -> None:
    assert f"{Status.TIME_LIMIT}" == "time_limit"
    assert Status("time_limit") is Status.TIME_LIMIT
    assert json.dumps({"solver_status": Status.NOT_RUN}) == '{"solver_status": "not_run"}'


def _market_split(rows: int = 4, columns: int = 30) -> highs.Model:
    """A market-split feasibility MILP (Cornuéjols–Dawande): tiny, yet branch and bound runs
    for minutes on it."""
    a = np.random.default_rng(0).integers(0, 100, (rows, columns))
    model = pyo.ConcreteModel()
    model.x = pyo.Var(range(columns), domain=pyo.Binary)
    model.rows = pyo.ConstraintList()
    for i in range(rows):
        model.rows.add(sum(int(a[i, j]) * model.x[j] for j in range(columns))
                       == int(a[i].sum() // 2))
    model.objective = pyo.Objective(expr=model.x[0])
    solver = highs.Model(model, [model.x[j] for j in range(columns)], name="the market split",
                         options={})
    solver.integer(np.arange(columns, dtype=np.int32))
    return solver


def test_ctrl_c_while_highs_runs_stops_it_and_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C arriving while the caller waits (here: the third wait) cancels branch and
    bound, which ends without reaching its time limit, and is raised to the caller."""
    solver = _market_split()
    real = highspy.Highs.wait
    waits: list[int] = []

    def wait(self: highspy.Highs, timeout: float = -1.0) -> Any:
        waits.append(1)
        if len(waits) == 3:
            raise KeyboardInterrupt
        return real(self, timeout)

    monkeypatch.setattr(highspy.Highs, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        solver.run(600.0)
    assert solver.cancelled
    assert solver.highs.getModelStatus().name not in ("kOptimal", "kTimeLimit")


def test_a_run_after_a_cancelled_one_is_not_cancelled() -> None:
    solver = _market_split(rows=1, columns=6)
    solver.cancelled = True
    assert solver.run(60.0) in (Status.OPTIMAL, Status.INFEASIBLE)
    assert not solver.cancelled


def test_a_failure_inside_highs_is_a_solver_error(monkeypatch: pytest.MonkeyPatch) -> None:
    solver = _market_split(rows=1, columns=6)

    def broken(self: highspy.Highs) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(highspy.Highs, "startSolve", broken)
    with pytest.raises(SolverError, match="HiGHS failed on the market split: RuntimeError"):
        solver.run(60.0)


def test_a_model_pyomo_cannot_compile_is_a_solver_error() -> None:
    model = pyo.ConcreteModel()
    model.x = pyo.Var(range(2), domain=pyo.Binary)
    model.square = pyo.Constraint(expr=model.x[0] * model.x[1] <= 1)
    model.objective = pyo.Objective(expr=model.x[0])
    with pytest.raises(SolverError, match="Pyomo could not compile the square"):
        highs.Model(model, [model.x[0], model.x[1]], name="the square", options={})
