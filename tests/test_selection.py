"""The Pyomo/HiGHS selection model, including its reuse across calls."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from lambdadnn.solver.errors import SolverError
from lambdadnn.solver.selection import select

finite = st.floats(0.01, 1e4, allow_nan=False)


@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=6), finite)
def test_selects_the_cheapest_within_the_deadline(pairs: list[tuple[float, float]],
                                                  deadline: float) -> None:
    """Property: the choice is numpy's argmin of cost among plans within the deadline.

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
    assert chosen.status == "optimal"
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
