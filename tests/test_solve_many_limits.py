"""solve_many within bounds: a start grid too fine to build is refused up front, naming the
slot that fits (`--slot-s 1e-6` took 13.9 GB, `0.01` ended in numpy's `_ArrayMemoryError`),
and the time limit covers the whole call (10,000 jobs took 223 s against a 10 s limit: the
Pyomo model alone takes longer than that to build)."""

from __future__ import annotations

import re
import tracemalloc

import pytest

from lambdadnn import InstanceError, Submission, solve, solve_many
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.solver import timetable
from lambdadnn.solver.many import (
    MAX_COLUMN_BOUND,
    _check_grid,
    _column_bound,
    _submissions,
    fitting_slot,
)


def _trace(count: int, seed: int = 0) -> list[Submission]:
    return [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s)
            for job in generate_trace(count, seed=seed, rate_per_s=0.15)]


@pytest.mark.parametrize("slot", [1e-6, 0.01, 1.0])
def test_a_grid_too_fine_is_refused_before_anything_is_built(slot: float) -> None:
    jobs = _trace(1000)
    tracemalloc.start()
    try:
        with pytest.raises(InstanceError, match=r"`slot_s` .* makes a grid too fine for 1,000 "
                                                r"jobs.*use slot_s ≥ [0-9.]+$"):
            solve_many(jobs, concurrency=1000, slot_s=slot)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # no grid was allocated (the old code reached gigabytes)


def test_the_slot_named_is_one_that_is_taken() -> None:
    jobs = _trace(40)
    with pytest.raises(InstanceError) as refused:
        solve_many(jobs, concurrency=200, slot_s=0.01)
    named = float(re.findall(r"slot_s ≥ ([0-9.]+)", str(refused.value))[0])
    deadlines = [job.deadline_s or 0.0 for job in jobs]
    bound = _column_bound
    assert bound(deadlines, named) <= MAX_COLUMN_BOUND < bound(deadlines, named * 0.99)
    _check_grid(_submissions(jobs), named)  # the named slot passes the check that refused


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("slot", [30.0, 120.0])
def test_the_bound_is_at_least_the_columns_built(seed: int, slot: float) -> None:
    """Property: the grid's columns never exceed Σ (d/slot + 1)², the bound the refusal uses."""
    jobs = _trace(25, seed)
    schedule = solve_many(jobs, concurrency=60, slot_s=slot, time_limit_s=5)
    assert schedule.columns <= _column_bound([job.deadline_s or 0.0 for job in jobs], slot)


def test_ten_thousand_jobs_fit_the_default_grid() -> None:
    """The issue's 10,000 jobs of the paper's mix are scheduled at the default 60 s slot, not
    refused (the grid's arrays are small; only the Pyomo model is not, and it is bounded
    apart)."""
    _check_grid(_submissions(_trace(10_000)), 60.0)


class _NotBuilt:
    def __init__(self, *args: object) -> None:
        raise AssertionError("the Pyomo model was built")


def _tight() -> list[Submission]:
    """100 jobs on a pool of 100: the greedy schedule is not provably optimal at once."""
    return [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s)
            for job in generate_trace(100, seed=0, rate_per_s=0.02)]


def test_a_time_limit_used_up_keeps_the_greedy_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no time left after the fronts and the greedy schedule, no model is built (the old
    code built it and ran HiGHS whatever the time): the greedy schedule is the answer, its
    bound the cost floor, and the status says the time limit came first."""
    monkeypatch.setattr(timetable, "Master", _NotBuilt)
    schedule = solve_many(_tight(), concurrency=100, time_limit_s=1e-9, gap=1e-6)
    assert schedule.solver_status == "time_limit"
    assert schedule.status in ("feasible", "infeasible")
    # The floor from `solve()` alone: each job's cheapest plan meeting its own deadline.
    floor = sum(solve(job.instance, deadline_s=job.deadline_s).cost_usd for job in _tight())
    assert schedule.lower_bound_usd == pytest.approx(floor, rel=1e-9)
    assert schedule.lower_bound_usd <= schedule.objective_usd
    assert schedule.peak_functions <= 100


def test_a_model_too_large_is_not_built_whatever_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timetable, "Master", _NotBuilt)
    monkeypatch.setattr(timetable, "MAX_MASTER_NONZEROS", 10)
    schedule = solve_many(_tight(), concurrency=100, time_limit_s=600, gap=1e-6)
    assert schedule.solver_status == "time_limit" and schedule.peak_functions <= 100


def test_the_phases_are_reported_in_order() -> None:
    seen: list[str] = []
    solve_many(_tight(), concurrency=100, time_limit_s=30, gap=0.5, progress=seen.append)
    assert seen[0] == "fronts" and seen[-1] == "re-check"
    assert "master" in seen and "column generation" in seen
    assert seen == sorted(seen, key=timetable.PHASES.index)
    assert len(set(seen)) == len(seen)


@pytest.mark.parametrize("slot", [0.5, 30.0, 60.0])
def test_the_fitting_slot_is_the_least_that_fits(slot: float) -> None:
    """`fitting_slot` keeps a slot that fits and otherwise names one that passes the check
    that refused, just above the bound's limit."""
    jobs = _submissions(_trace(40)) + _submissions([Submission("1dcnn-imdb",
                                                               deadline_s=600_000.0)])
    deadlines = [job.deadline_s for job in jobs]
    horizon = max(j.submit_s + j.deadline_s for j in jobs) - min(j.submit_s for j in jobs)
    fits = fitting_slot(deadlines, horizon, slot)
    assert fits > slot
    _check_grid(jobs, fits)
    with pytest.raises(InstanceError):
        _check_grid(jobs, fits * 0.99)
    assert fitting_slot(deadlines, horizon, fits) == fits
