"""`platform.max_vcpu`: functions get m/1769 vCPU each, and a plan may use at most max_vcpu.

The oracle (tests/oracle.py) applies the limit on its own, exactly; the catalogue has entries
where it changes the answer (tests/catalogue.yaml, `*-vcpu-*`). Here: the loader, the exact
comparison at the limit, `evaluate`'s violation, the bounds (each row's memory cap), the
refusal when nothing fits, and solve against brute force on random instances and limits.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.models import bounds as model_bounds
from lambdadnn.solver.errors import InstanceError, NoValidPlanError
from lambdadnn.solver.instance import MB_PER_VCPU
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import evaluate, solve
from tests.agreement import assert_solves_as_brute_force
from tests.oracle import read
from tests.strategies import deadlines, instance_mappings

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = {
    entry["id"]: entry
    for entry in yaml.safe_load((ROOT / "tests" / "catalogue.yaml").read_text(encoding="utf-8"))
}


def local(max_vcpu: float | None) -> dict[str, Any]:
    """The catalogue's 4-CPU local machine with another limit (None: no limit)."""
    mapping = copy.deepcopy(CATALOGUE["local-vcpu-4-at-the-limit"]["instance"])
    mapping["platform"].pop("max_vcpu")
    if max_vcpu is not None:
        mapping["platform"]["max_vcpu"] = max_vcpu
    return mapping


@pytest.mark.parametrize("value", [0, -2, "two", True, None, float("nan"), 1e8, [2]])
def test_a_bad_max_vcpu_is_refused_naming_it(value: Any) -> None:
    mapping = local(None)
    mapping["platform"]["max_vcpu"] = value
    if value is None:  # null: no limit, as when absent
        assert load_instance(mapping).platform.max_vcpu is None
        return
    with pytest.raises(InstanceError, match=r"^`platform\.max_vcpu` must be a positive number"):
        load_instance(mapping)


@pytest.mark.parametrize(
    ("max_vcpu", "budget"),
    [(2, 3538), (1.5, 2653), (0.1, 176), (4, 7076), (3538 / 1769, 3538), (1e7, 17_690_000_000)],
)
def test_the_limit_in_mb_is_exact(max_vcpu: float, budget: int) -> None:
    """⌊max_vcpu·1769⌋ in exact arithmetic: 1.5 vCPU is 2,653.5 MB, so 2,653 MB."""
    platform = load_instance(local(max_vcpu)).platform
    assert platform.vcpu_memory_mb == budget
    assert MB_PER_VCPU == 1769


def test_evaluate_allows_a_plan_at_the_limit_and_names_one_beyond_it() -> None:
    at = evaluate(local(2), functions=2, memory_mb=1769)  # exactly 2 vCPU
    assert not any("max_vcpu" in v for v in at.violations)
    beyond = evaluate(local(2), functions=2, memory_mb=1770)
    assert not beyond.feasible and beyond.valid
    assert [v for v in beyond.violations if "max_vcpu" in v] == [
        "2 × 1770 MB needs 2.0011 vCPU (m/1769 each), more than the platform's `max_vcpu` 2 "
        "(n·m ≤ 3,538 MB)"
    ]
    assert evaluate(local(None), functions=2, memory_mb=1770).feasible


def test_no_plan_fits_the_limit_is_one_line_naming_max_vcpu() -> None:
    with pytest.raises(NoValidPlanError, match=r"`max_vcpu` 0\.05 allows 88 MB .* 128 MB; raise"):
        solve(local(0.05))


def test_the_fastest_plan_respects_the_limit() -> None:
    """No plan meets the deadline: the fastest plan within the limit, not beyond it."""
    unlimited = solve(local(None), deadline_s=1)
    limited = solve(local(3), deadline_s=1)
    assert unlimited.functions * unlimited.memory_mb > 3 * 1769
    assert limited.status == "infeasible"
    assert limited.functions * limited.memory_mb <= 3 * 1769
    assert limited.time_s > unlimited.time_s


@st.composite
def limited_instances(draw: st.DrawFn) -> dict[str, Any]:
    """A random instance with a random `max_vcpu`: an integer number of CPUs, exactly one grid
    plan's n·m/1769 (the limit then sits on a plan), or log-uniform over the plans' range;
    the deadline then drawn against the limited instance (so it matters, or is infeasible)."""
    mapping = draw(instance_mappings(max_memory_sizes=200, max_concurrency=100))
    problem = read(mapping, deadline_s=math.inf)
    memory = problem.memory()
    kind = draw(st.sampled_from(["cpus", "plan", "range"]))
    if kind == "cpus":
        vcpu: float = draw(st.integers(1, 16))
    elif kind == "plan":
        n = draw(st.integers(1, problem.max_functions))
        vcpu = n * float(draw(st.sampled_from(memory.tolist()))) / MB_PER_VCPU
    else:
        low, high = memory[0] / MB_PER_VCPU, problem.max_functions * memory[-1] / MB_PER_VCPU
        vcpu = float(np.exp(draw(st.floats(math.log(low * 0.9), math.log(high)))))
    mapping["platform"]["max_vcpu"] = vcpu
    mapping["objective"]["deadline_s"] = draw(deadlines(mapping))
    return mapping


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(limited_instances())
def test_solve_with_a_vcpu_limit_is_the_brute_force_answer(mapping: dict[str, Any]) -> None:
    """Property: with a random max_vcpu, solve() gives the oracle's plan: the cheapest within
    the limit, or (no plan meets the deadline) the fastest within it; NoValidPlanError when
    no valid plan fits. A plan within rounding of the deadline may fall either side of it."""
    plan = assert_solves_as_brute_force(mapping)
    if plan is not None:
        assert plan.functions * plan.memory_mb <= load_instance(mapping).platform.vcpu_memory_mb


@settings(max_examples=100, deadline=None)
@given(limited_instances())
def test_each_row_of_the_box_ends_at_its_largest_memory_within_the_limit(
    mapping: dict[str, Any],
) -> None:
    """Property: row n of the bounds' box stops at the last grid size with n·m within the
    limit (or the largest useful size, if lower), and n stops where no valid size fits."""
    instance = load_instance(mapping)
    budget = instance.platform.vcpu_memory_mb
    assert budget is not None
    values = instance.values()
    memory = instance.platform.memory.values()
    found = model_bounds.box(
        values, memory, max_functions=instance.max_functions,
        min_memory_mb=instance.min_memory_mb, deadline_s=instance.objective.deadline_s,
        vcpu_memory_mb=budget,
    )
    if found is None:
        return
    unlimited = model_bounds.box(
        values, memory, max_functions=instance.max_functions,
        min_memory_mb=instance.min_memory_mb, deadline_s=instance.objective.deadline_s,
    )
    assert unlimited is not None
    n = found.functions
    top = memory[found.row_hi]
    assert (n * top <= budget).all()
    lifted = np.minimum(found.row_hi + 1, len(memory) - 1)
    assert ((found.row_hi == unlimited.m_hi) | (n * memory[lifted] > budget)).all()
    assert (found.row_hi >= found.m_lo).all()
    assert (int(n[-1]) + 1) * memory[found.m_lo] > budget or n[-1] == unlimited.functions[-1]
