"""`Plan.from_dict`: the inverse of `Plan.to_dict`, checking what it reads as any plan JSON."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import InputError, NoValidPlanError, Plan, PlanError, solve
from tests.strategies import deadlines, instance_mappings
from tests.test_fit_guarantee import local_digits_spread

MOBILENET = "instances/mobilenet-cifar10.yaml"


@settings(max_examples=40, deadline=None)
@given(instance_mappings(), st.data())
def test_a_plan_survives_its_dict(mapping: dict[str, Any], data: st.DataObject) -> None:
    """Property: `Plan.from_dict(p.to_dict()) == p` for plans solved from random instances,
    optimal or infeasible, the deadline and the instance solved included; through JSON too."""
    deadline = data.draw(deadlines(mapping))
    try:
        plan = solve(mapping, deadline_s=deadline)
    except NoValidPlanError:
        return
    again = Plan.from_dict(plan.to_dict())
    assert again == plan
    assert again.deadline_s == plan.deadline_s == deadline
    assert again.solved_from == plan.solved_from
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_a_guaranteed_plan_keeps_its_fit_coverage() -> None:
    plan = solve(local_digits_spread(), guarantee=0.9)
    assert plan.fit_coverage is not None
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan and again.fit_coverage == plan.fit_coverage


def _mutated(path: tuple[str, ...], value: object) -> dict[str, Any]:
    payload = copy.deepcopy(solve(MOBILENET).to_dict())
    parent = payload
    for key in path[:-1]:
        parent = parent[key]
    if value is KeyError:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return payload


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (("functions",), 1.5, "`functions` in the plan must be an integer from 1 to"),
        (("functions",), True, "`functions` in the plan must be an integer"),
        (("functions",), "14", "`functions` in the plan must be an integer"),
        (("memory_mb",), KeyError, "`memory_mb` is missing from the plan"),
        (("time_s",), math.nan, "`time_s` in the plan must be a positive number"),
        (("time_s",), False, "`time_s` in the plan must be"),
        (("cost_usd",), math.inf, "`cost_usd` in the plan must be"),
        (("deadline_s",), 0, "`deadline_s` in the plan must be a positive number"),
        (("deadline_s",), KeyError, "`deadline_s` is missing from the plan"),
        (("status",), "cheap", "`status` in the plan must be one of 'optimal', 'infeasible'"),
        (("architecture",), "mips", "`architecture` in the plan must be one of"),
        (("guarantee",), 1.0, "`guarantee` in the plan must be a probability"),
        (("guarantee",), True, "`guarantee` in the plan must be a probability"),
        (("time_breakdown", "load_s"), KeyError, "`time_breakdown` in the plan must be an object"),
        (("time_breakdown", "load_s"), -1.0, "`time_breakdown.load_s` in the plan must be"),
        (("bounds",), [], "`bounds` in the plan must be a JSON object"),
        (("bounds", "deadline_met"), 1, "`bounds.deadline_met` in the plan must be true or false"),
        (("bounds", "n_min"), math.nan, "`bounds.n_min` in the plan must be an integer"),
        (("solver_status",), 7, "`solver_status` in the plan must be one of"),
        (("instance_spec",), KeyError, "`instance_spec` is missing from the plan"),
        (("instance_spec", "workload", "epochs"), -1, "`instance_spec` in the plan: `workload"),
        (("instance_spec",), "mobilenet-cifar10", "`instance_spec` in the plan must be a JSON"),
    ],
)
def test_hostile_plans_are_one_plan_error(path: tuple[str, ...], value: object, says: str
                                          ) -> None:
    with pytest.raises(PlanError) as caught:
        Plan.from_dict(_mutated(path, value))
    message = str(caught.value)
    assert message.startswith(says), message
    assert "\n" not in message and len(message) < 600
    assert isinstance(caught.value, InputError)


@pytest.mark.parametrize("payload", [None, [], "plan", 3, {"instance": "x"}])
def test_what_is_no_plan_is_one_plan_error(payload: object) -> None:
    with pytest.raises(PlanError, match=r"the plan"):
        Plan.from_dict(payload)


def test_the_source_is_named() -> None:
    with pytest.raises(PlanError, match=r"^`functions` in file 'p\.json' must be"):
        Plan.from_dict(_mutated(("functions",), 0), source="file 'p.json'")
