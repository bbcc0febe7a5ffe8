"""A start grid too fine to build is refused up front, naming the slot that fits
(`--slot-s 1e-6` took 13.9 GB, `0.01` ended in numpy's `_ArrayMemoryError`)."""

from __future__ import annotations

import re
import tracemalloc

import pytest

from lambdadnn import InstanceError, Submission, solve_many
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.solver.many import _check_grid, _column_bound, _submissions


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
    assert _column_bound(deadlines, named) <= 1_300_000 < _column_bound(deadlines, named * 0.99)
    _check_grid(_submissions(jobs), named)  # the named slot passes the check that refused


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("slot", [30.0, 120.0])
def test_the_bound_is_at_least_the_columns_built(seed: int, slot: float) -> None:
    """Property: the grid's columns never exceed Σ (d/slot + 1)², the bound the refusal uses."""
    jobs = _trace(25, seed)
    schedule = solve_many(jobs, concurrency=60, slot_s=slot, time_limit_s=5)
    assert schedule.columns <= _column_bound([job.deadline_s or 0.0 for job in jobs], slot)
