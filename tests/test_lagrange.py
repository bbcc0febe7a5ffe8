"""The Lagrangian bound that measures the greedy schedule when the timetable MILP is too large
to build in the time left (`solver.lagrange`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import Submission, solve_many
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.solver import columns, timetable
from lambdadnn.solver.lagrange import lagrangian_bound
from lambdadnn.solver.many import _submissions
from lambdadnn.solver.options import options


def _model(jobs: int, seed: int, rate: float, concurrency: int, slot: float) -> tuple[
    columns.Columns, list[columns.Task], np.ndarray, np.ndarray
]:
    trace = generate_trace(jobs, seed=seed, rate_per_s=rate)
    submitted = _submissions([Submission(job.instance, submit_s=job.submit_time_s,
                                         deadline_s=job.deadline_s) for job in trace])
    tasks = [columns.Task(job.submit_s, job.submit_s + job.deadline_s, options(
        job.instance, guarantee=None, noise=None, max_functions=concurrency,
        slowest_s=job.deadline_s)) for job in submitted]
    t0 = min(task.submit_s for task in tasks)
    cols = columns.columns(tasks, t0=t0, slot=slot)
    free = np.full(int(cols.stop.max()), float(concurrency))
    return cols, tasks, timetable.penalties(tasks), free


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), jobs=st.integers(5, 40),
       rate=st.sampled_from([0.005, 0.02, 0.15]), concurrency=st.sampled_from([30, 100, 400]),
       slot=st.sampled_from([30.0, 60.0, 150.0]))
def test_the_bound_lies_between_its_start_and_the_lp_relaxation(
    seed: int, jobs: int, rate: float, concurrency: int, slot: float,
) -> None:
    """Property: L(λ) found is at least L(0) — each job's cheapest column or its penalty,
    computed here in numpy — and at most the LP relaxation's optimum (HiGHS), hence at most
    every schedule's objective."""
    cols, tasks, penalty, free = _model(jobs, seed, rate, concurrency, slot)
    incumbent = timetable.initial(cols, tasks, free)
    target = float(cols.cost_usd[incumbent[incumbent >= 0]].sum()
                   + penalty[incumbent < 0].sum())
    bound, preference = lagrangian_bound(cols, penalty, free, target=target, budget_s=60)
    at_zero = sum(
        min(float(penalty[j]), float(cols.cost_usd[cols.task == j].min(initial=np.inf)))
        for j in range(len(tasks))
    )
    assert bound >= at_zero * (1 - 1e-12)
    status, relaxed, _ = timetable._Highs(cols, tasks, penalty, free).relaxation(60)
    assert status == "optimal"
    assert bound <= relaxed + 1e-7 * max(1.0, abs(relaxed))
    assert bound <= target * (1 + 1e-12)
    assert preference.shape == (len(cols),)


@pytest.mark.slow
def test_an_overloaded_pool_gets_a_bound_near_the_lp() -> None:
    """On 300 jobs crowding a pool of 100 the floor is 86% below the greedy schedule; the
    prices close all but a sliver of the way to the LP relaxation's bound."""
    cols, tasks, penalty, free = _model(300, 1, 0.02, 100, 60.0)
    incumbent = timetable.initial(cols, tasks, free)
    target = float(cols.cost_usd[incumbent[incumbent >= 0]].sum()
                   + penalty[incumbent < 0].sum())
    bound, _ = lagrangian_bound(cols, penalty, free, target=target, budget_s=60)
    _, relaxed, _ = timetable._Highs(cols, tasks, penalty, free).relaxation(60)
    floor = sum(float(task.options.cost_usd[-1]) for task in tasks if len(task.options))
    assert floor < bound <= relaxed + 1e-7 * relaxed
    assert (relaxed - bound) < 0.01 * (relaxed - floor)


@pytest.mark.slow
def test_a_skipped_model_is_measured_against_the_prices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """solve_many without its model: the bound is the Lagrangian's, above the floor, and the
    schedule the prices guide is no worse than the plain greedy one."""
    monkeypatch.setattr(timetable, "MAX_MODEL_NONZEROS", 10)
    jobs = [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s)
            for job in generate_trace(300, seed=1, rate_per_s=0.02)]
    schedule = solve_many(jobs, concurrency=100, time_limit_s=120, gap=1e-9)
    cols, tasks, penalty, free = _model(300, 1, 0.02, 100, 60.0)
    plain = timetable.initial(cols, tasks, free)
    plain_objective = float(cols.cost_usd[plain[plain >= 0]].sum() + penalty[plain < 0].sum())
    floor = sum(float(task.options.cost_usd[-1]) for task in tasks if len(task.options))
    assert schedule.solver_status == "time_limit"
    assert floor < schedule.lower_bound_usd <= schedule.objective_usd <= plain_objective
