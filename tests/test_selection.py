"""The selection: the enumeration's plan when one is left, else the Pyomo/HiGHS model (built
afresh for each call, so a failed solve changes no later answer)."""

from __future__ import annotations

import threading

import highspy
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lambdadnn.solver.candidates import cheapest_choices, fastest_choices
from lambdadnn.solver.errors import SolverError
from lambdadnn.solver.selection import select

finite = st.floats(0.01, 1e4, allow_nan=False)


@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=6), finite)
def test_selects_the_cheapest_within_the_deadline(pairs: list[tuple[float, float]],
                                                  deadline: float) -> None:
    """Property: the choice is the least objective among plans within the deadline; HiGHS
    makes it when there are several plans, the enumeration when there is one.

    Consecutive examples reuse the persistent model, so stale coefficients would show here.
    Times within HiGHS's feasibility tolerance (1e-7) of the deadline are left out: the
    solver only ever receives plans already checked against the deadline in numpy.
    """
    cost = np.array([c for c, _ in pairs])
    time = np.array([t for _, t in pairs])
    assume(bool(np.all(np.abs(time - deadline) > 1e-6)))
    within = time <= deadline
    if not within.any():
        with pytest.raises(SolverError, match="infeasible"):
            select(cost, time, deadline_s=deadline)
        return
    chosen = select(cost, time, deadline_s=deadline)
    if len(pairs) == 1:
        assert (chosen.selected_by, chosen.solver_status) == ("enumeration", "not_run")
    else:
        assert (chosen.selected_by, chosen.solver_status) == ("highs", "optimal")
    assert time[chosen.index] <= deadline
    assert cost[chosen.index] == pytest.approx(cost[within].min(), rel=1e-9)


def test_without_a_deadline_the_time_constraint_is_slack() -> None:
    chosen = select(np.array([3.0, 1.0, 2.0]), np.array([1.0, 50.0, 9.0]), deadline_s=None)
    assert chosen.index == 1


def test_a_changed_time_coefficient_changes_the_answer() -> None:
    cost = np.array([1.0, 2.0])
    assert select(cost, np.array([5.0, 5.0]), deadline_s=10).index == 0
    assert select(cost, np.array([50.0, 5.0]), deadline_s=10).index == 1


def test_threads_can_select_at_the_same_time() -> None:
    answers: list[int] = []

    def work(slow: float) -> None:
        for _ in range(20):
            answers.append(select(np.array([1.0, 2.0]), np.array([slow, 1.0]), deadline_s=10).index)

    threads = [threading.Thread(target=work, args=(s,)) for s in (5.0, 50.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [0] * 20 + [1] * 20


def test_no_candidates_is_an_error() -> None:
    with pytest.raises(SolverError, match="no candidate"):
        select(np.array([]), np.array([]), deadline_s=1.0)


def test_coefficients_highs_cannot_take_are_refused_before_it_sees_them() -> None:
    for objective in (np.array([np.nan, 1.0]), np.array([1e100, 1.0])):
        with pytest.raises(SolverError, match="not finite and moderate"):
            select(objective, np.array([1.0, 2.0]), deadline_s=10)
    assert select(np.array([2.0, 1.0]), np.array([1.0, 2.0]), deadline_s=10).index == 1


def test_a_failed_highs_solve_leaves_no_broken_model_behind(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once, one failed solve left the cached model broken and every later call failed with
    "HiGHS selected 0 plans instead of one". A failure never changes a later answer."""
    cost, time = np.array([3.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    assert select(cost, time, deadline_s=10).index == 1
    real = highspy.Highs.startSolve

    def fail_once(solver: highspy.Highs) -> None:
        monkeypatch.setattr(highspy.Highs, "startSolve", real)
        raise RuntimeError("injected failure")

    monkeypatch.setattr(highspy.Highs, "startSolve", fail_once)
    with pytest.raises(SolverError, match=r"HiGHS failed on the selection model.*injected failure"):
        select(cost, time, deadline_s=10)
    assert highspy.Highs.startSolve is real
    assert select(cost, time, deadline_s=10).index == 1


def test_the_tie_rules_plan_stands_for_its_cost_class() -> None:
    """Costs within 1e-12 are one class, represented by its fastest plan; plans dearer than
    the class by more than that margin remain choices, which HiGHS then makes."""
    time = np.array([10.0, 9.0, 8.0, 12.0])
    cost = np.array([1.0, 1.0 + 5e-13, 1.0 + 1e-10, 1.0 + 2e-10])
    functions, memory = np.array([1, 2, 3, 4]), np.array([0, 0, 0, 0])
    chosen, objective = cheapest_choices(time, cost, functions, memory)
    assert list(chosen) == [1, 2]  # 0 is tied with 1 and slower; 3 is dominated by 2
    assert objective[0] == 0 and objective[1] == pytest.approx(100, rel=1e-3)
    picked = select(objective, time[chosen], deadline_s=12.0)
    assert chosen[picked.index] == 1
    assert (picked.selected_by, picked.solver_status) == ("highs", "optimal")
    alone, zero = cheapest_choices(time[:2], cost[:2], functions[:2], memory[:2])
    assert list(alone) == [1] and list(zero) == [0]
    assert select(zero, time[alone], deadline_s=12.0).selected_by == "enumeration"


def test_the_fastest_plan_is_chosen_over_nearly_as_fast_ones() -> None:
    time = np.array([100.0, np.nextafter(100.0, 200.0), 100.0 * (1 + 5e-10), 150.0])
    cost = np.array([3.0, 2.0, 1.0, 0.5])
    functions, memory = np.arange(4), np.zeros(4, dtype=np.int64)
    chosen, objective = fastest_choices(time, cost, functions, memory)
    assert list(chosen) == [0, 1, 2]  # 150 s is no rival: slower by more than 1e-9
    assert objective[0] == 0 and objective[1] > 1e-4
    picked = select(objective, time[chosen], deadline_s=None)
    assert chosen[picked.index] == 0 and picked.selected_by == "highs"
