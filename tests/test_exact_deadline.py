"""A deadline equal to a plan's own time, to the last bit, is met by that plan.

The search, the bounds, `evaluate` and the re-check all take a plan's time from one compiled
program. When each compiled its own copy, the copies differed by 1-2 ulp, and such deadlines
gave `SolverError: re-check failed` or a false "infeasible … move the deadline out by 0.0 s".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn import Instance, evaluate, load_instance, solve
from lambdadnn.solver.instance import MAX_SECONDS
from tests.oracle import COST_TIE
from tests.strategies import instance_mappings

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))
# Plans across both batch regimes, both communication regimes and the memory range.
PLANS = [(1, 10240), (2, 3008), (4, 10240), (8, 2048), (14, 1259), (15, 531), (20, 3008),
         (30, 1769), (64, 10240), (120, 4000), (250, 7000)]
# Found by hypothesis: the bounds' copy of the time was 1 ulp above evaluate's.
ONE_ULP_APART = {
    "platform": {"name": "p", "memory_mb": {"min": 64, "max": 64, "step": 1},
                 "price_per_gb_second": 1.66667e-05, "price_per_request": 0.0,
                 "timeout_s": 20.0, "timeout_margin_s": 0.0, "restart_overhead_s": 0.0,
                 "max_concurrency": 1},
    "workload": {"model_size_mb": 0.5, "dataset_size_mb": 1.0, "samples": 100, "epochs": 1,
                 "local_batch": 6, "max_global_batch": 6},
    "profile": {"rate": {"slope": 0.0, "intercept": 0.5},
                "storage_bandwidth": {"slope": 0.0, "intercept": 1.0, "max_mbps": 5.0}},
    "parameter_server": {"bandwidth_mbps": 50.0, "function_bandwidth_mbps": 5.0,
                         "price_per_hour": 0.0},
    "objective": {"deadline_s": 1.0},
}


def assert_met_exactly(instance: Instance | dict[str, Any], functions: int, memory_mb: int,
                       **options: Any) -> None:
    """With the deadline set to the plan's own time: evaluate calls it feasible, and solve
    finds an optimum within that deadline exactly (never infeasible, never a SolverError)."""
    deadline = evaluate(instance, functions=functions, memory_mb=memory_mb).time_s
    loaded = load_instance(instance)
    at_deadline = loaded.with_deadline(deadline)
    plan_there = evaluate(at_deadline, functions=functions, memory_mb=memory_mb)
    assert plan_there.feasible, plan_there.violations
    plan = solve(instance, deadline_s=deadline, **options)
    assert plan.status == "optimal", f"{functions} × {memory_mb} MB: {plan.status}"
    assert plan.deadline_time_s <= deadline
    assert plan.cost_usd <= plan_there.cost_usd * (1 + COST_TIE)  # MODEL.md's tie rule


@pytest.mark.parametrize("path", SHIPPED)
def test_the_optimums_own_time_as_the_deadline(path: str) -> None:
    instance = load_instance(path)
    optimum = solve(instance)
    assert_met_exactly(instance, optimum.functions, optimum.memory_mb)
    again = solve(instance, deadline_s=optimum.time_s)
    assert (again.functions, again.memory_mb) == (optimum.functions, optimum.memory_mb)


@pytest.mark.parametrize("path", SHIPPED)
@pytest.mark.parametrize(("functions", "memory_mb"), PLANS)
def test_other_plans_own_times_as_the_deadline(path: str, functions: int, memory_mb: int) -> None:
    instance = load_instance(path)
    figures = evaluate(instance, functions=functions, memory_mb=memory_mb)
    if not figures.valid or functions > instance.max_functions or (
        memory_mb < instance.min_memory_mb
    ):
        pytest.skip("not a valid plan within this instance's limits")
    assert_met_exactly(instance, functions, memory_mb)


@pytest.mark.parametrize("path", SHIPPED)
def test_a_guaranteed_plans_quantile_as_the_deadline(path: str) -> None:
    """Under a guarantee the deadline is checked against the quantile: the same holds."""
    planned = solve(path, guarantee=0.99)
    again = solve(path, guarantee=0.99, deadline_s=planned.deadline_time_s)
    assert again.status == "optimal"
    assert (again.functions, again.memory_mb) == (planned.functions, planned.memory_mb)


def test_a_plan_one_ulp_from_its_bound_is_not_called_infeasible() -> None:
    assert_met_exactly(ONE_ULP_APART, 1, 64)


@given(instance_mappings(), st.data())
def test_any_valid_plans_time_as_the_deadline_is_met(
    mapping: dict[str, Any], data: st.DataObject
) -> None:
    """Property: for any valid plan within the limits, its time as the deadline is met."""
    instance = load_instance(mapping)
    memory = [int(m) for m in instance.platform.memory.values() if m >= instance.min_memory_mb]
    if not memory:
        return
    n = data.draw(st.integers(1, instance.max_functions), label="functions")
    m = data.draw(st.sampled_from(memory), label="memory_mb")
    figures = evaluate(instance, functions=n, memory_mb=m)
    if figures.valid and figures.time_s <= MAX_SECONDS:  # the longest deadline accepted
        assert_met_exactly(instance, n, m)
