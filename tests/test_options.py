"""Each job's options for `solve_many`: the exact (time, cost) Pareto front, checked point by
point against `solve()` at the deadlines it answers."""

from __future__ import annotations

import numpy as np
import pytest

from lambdadnn import fastest, load_instance, solve
from lambdadnn.solver import options as kept
from lambdadnn.solver.options import options
from lambdadnn.solver.shipped import instances_folder

SHIPPED = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")


@pytest.mark.parametrize("guarantee", [None, 0.999])
@pytest.mark.parametrize("name", SHIPPED)
def test_front_answers_every_deadline_as_solve_does(name: str, guarantee: float | None) -> None:
    """The cheapest option within a deadline is `solve()`'s plan for it; the fastest option is
    the fastest plan; times rise and costs fall strictly along the front."""
    instance = load_instance(instances_folder() / f"{name}.yaml")
    front = options(instance, guarantee=guarantee, noise=None, max_functions=1000,
                    slowest_s=1200.0)
    assert len(front) > 1
    assert (np.diff(front.time_s) > 0).all() and (np.diff(front.cost_usd) < 0).all()
    assert front.time_s[-1] <= 1200.0
    quickest = fastest(instance, guarantee=guarantee)
    assert (front.functions[0], front.memory_mb[0]) == (quickest.functions, quickest.memory_mb)
    for deadline in np.linspace(front.time_s[0], 1200.0, 12):
        plan = solve(instance, deadline_s=float(deadline), guarantee=guarantee)
        k = int(np.searchsorted(front.time_s, deadline, side="right")) - 1
        assert plan.cost_usd == pytest.approx(front.cost_usd[k], rel=1e-12)
        assert plan.deadline_time_s <= deadline
        assert front.time_s[k] == pytest.approx(plan.deadline_time_s, rel=1e-12)


def test_function_limit_and_reuse_across_deadlines() -> None:
    """A cap on functions leaves only plans within it, and a front computed for a long
    deadline answers a shorter one exactly as a fresh computation does."""
    instance = load_instance(instances_folder() / "espcn-bsds500.yaml")
    capped = options(instance, guarantee=None, noise=None, max_functions=20, slowest_s=300.0)
    assert capped.functions.max() <= 20
    kept._fronts.clear()
    short = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=20.0)
    kept._fronts.clear()
    long = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=900.0)
    assert len(long) > len(short)
    within = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=20.0)
    assert np.array_equal(short.time_s, within.time_s)
    assert np.array_equal(short.memory_mb, within.memory_mb)


def test_deadline_no_plan_meets_gives_no_option() -> None:
    instance = load_instance(instances_folder() / "resnet50-cifar10.yaml")
    assert len(options(instance, guarantee=None, noise=None, max_functions=1000,
                       slowest_s=10.0)) == 0
