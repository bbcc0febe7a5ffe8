"""The derived bounds: sound (the brute-force answer always lies inside) and tight."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from lambdadnn import Instance, NoValidPlanError, deadline_crossings, load_instance, solve
from lambdadnn.models.bounds import box
from lambdadnn.models.performance import figures, parameter_values
from tests.oracle import brute_force
from tests.strategies import instance_mappings

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))


def instance_box(instance: Instance) -> Any:
    return box(
        parameter_values(instance.parameters()), instance.platform.memory.values(),
        max_functions=instance.max_functions, min_memory_mb=instance.min_memory_mb,
        deadline_s=instance.objective.deadline_s,
    )


@given(instance_mappings())
def test_bounds_are_sound(mapping: dict[str, Any]) -> None:
    """Property: the brute-force optimum (or fastest plan) lies inside the derived bounds.

    Random instances cover negative intercepts, saturation, memory floors, restarts, free
    and priced parameter servers and both batch regimes; numpy (tests/oracle.py) is the judge.
    """
    instance = load_instance(mapping)
    expected = brute_force(instance)
    derived = instance_box(instance)
    if expected.status == "none":
        assert derived is None
        return
    bounds = derived.bounds
    assert bounds.deadline_met == (expected.status == "optimal")
    assert bounds.n_min <= expected.functions <= bounds.n_max
    assert bounds.m_min <= expected.memory_mb <= bounds.m_max
    plan = solve(instance)
    assert bounds.box_points <= bounds.grid_points
    assert plan.candidates_evaluated >= 1


@given(instance_mappings())
def test_symbolic_thresholds_agree_with_the_grid(mapping: dict[str, Any]) -> None:
    """Property: the memory bounds sit where the solved thresholds say, to one grid step.

    The symbolic roots (R = 0, B_f^s = 0, α2·m + β2 = B_s) are checked against the model
    evaluated on the grid, so a wrong derivation cannot hide behind the numeric snap.
    """
    instance = load_instance(mapping)
    derived = instance_box(instance)
    if derived is None:
        return
    p = instance.parameters()
    grid = instance.platform.memory
    low = instance.min_memory_mb
    if p["alpha1"] > 0:
        low = max(low, -p["beta1"] / p["alpha1"])
    if p["alpha2"] > 0:
        low = max(low, -p["beta2"] / p["alpha2"])
    first = grid.min_mb + math.ceil(max(0.0, low - grid.min_mb) / grid.step_mb) * grid.step_mb
    assert abs(derived.bounds.m_min - first) <= grid.step_mb
    flat_from = -math.inf
    if p["alpha1"] > 0:
        flat_from = max(flat_from, p["m_sat"])
    if p["alpha2"] > 0:
        flat_from = max(flat_from, (p["B_s"] - p["beta2"]) / p["alpha2"])
    expected_top = grid.min_mb + math.ceil(
        max(0.0, min(flat_from, grid.max_mb) - grid.min_mb) / grid.step_mb
    ) * grid.step_mb
    assert derived.bounds.m_max in {max(derived.bounds.m_min, expected_top),
                                    max(derived.bounds.m_min, expected_top - grid.step_mb),
                                    max(derived.bounds.m_min, expected_top + grid.step_mb)}


@pytest.mark.parametrize("path", SHIPPED)
def test_bounds_are_tight_on_the_shipped_instances(path: str) -> None:
    """The box cuts the grid, and pruning by cost leaves well under 1% of it to evaluate."""
    plan = solve(path)
    assert plan.bounds.share_kept < 1
    assert plan.bounds.share_evaluated < 0.01
    assert len(plan.bounds.derivations) == 5
    assert plan.bounds.derivations[-1].startswith("cost: ")


def test_the_papers_upper_bound_cuts_off_the_optimum() -> None:
    """λDNN's n ≤ ⌊B_p / B_f^max⌋ = 14 is not sound: MobileNet's optimum uses 15 functions."""
    instance = load_instance("instances/mobilenet-cifar10.yaml")
    paper_n_upper = math.floor(
        instance.parameter_server.bandwidth_mbps / instance.parameter_server.function_bandwidth_mbps
    )
    plan = solve(instance)
    assert plan.functions > paper_n_upper
    assert plan.bounds.n_max >= plan.functions


def test_no_valid_plan_has_no_box() -> None:
    mapping = load_instance("instances/espcn-bsds500.yaml")
    capped = load_instance("instances/espcn-bsds500.yaml", platform="aws-lambda-2020")
    assert instance_box(mapping) is not None
    small = capped.platform.memory
    assert small.max_mb == 3008 and instance_box(capped) is not None
    hopeless = Instance(**{**vars(mapping), "workload": type(mapping.workload)(
        **{**vars(mapping.workload), "min_memory_mb": 20_000.0})})
    assert instance_box(hopeless) is None
    with pytest.raises(NoValidPlanError, match=r"`workload\.min_memory_mb`"):
        solve(hopeless)


@given(instance_mappings())
def test_closed_forms_solve_the_deadline_equation(mapping: dict[str, Any]) -> None:
    """Property: every per-regime root n* of T_train(n, m_max) = T_o, put back into the model,
    gives T_train = T_o (numpy evaluation of the compiled model at a real n)."""
    instance = load_instance(mapping)
    derived = instance_box(instance)
    if derived is None:
        return
    values = parameter_values(instance.parameters())
    deadline = instance.objective.deadline_s
    for crossing in deadline_crossings(instance, memory_mb=derived.bounds.m_max):
        t_train = figures(values, crossing.functions, derived.bounds.m_max, ("t_train",))
        assert float(t_train["t_train"]) == pytest.approx(deadline, rel=1e-6)


@pytest.mark.parametrize("path", SHIPPED)
def test_exact_n_bounds_lie_within_the_closed_forms(path: str) -> None:
    """On λDNN's workloads T_train falls, then rises once the PS is shared: two crossings,
    and the exact bounds (restarts included) sit inside them."""
    bounds = solve(path).bounds
    low, high = deadline_crossings(path, memory_mb=bounds.m_max)
    assert math.ceil(low.functions) <= bounds.n_min
    assert bounds.n_max <= math.floor(high.functions)
    assert high.regime == "fixed-global batch, PS-bound"
