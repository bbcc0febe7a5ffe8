"""The views an instance owns: `with_deadline` checks what it is given, and `fastest()` is the
independent brute force's fastest plan (tests/oracle.py shares no code with the package)."""

from __future__ import annotations

import math

import pytest

from lambdadnn import InstanceError, fastest, load_instance
from lambdadnn.models.performance import parameter_values
from lambdadnn.solver.shipped import instances_folder, names
from tests import oracle


@pytest.mark.parametrize("name", names(instances_folder()))
def test_fastest_is_the_brute_forces_fastest_plan(name: str) -> None:
    expected = oracle.fastest(instances_folder() / f"{name}.yaml")
    plan = fastest(name)
    assert (plan.functions, plan.memory_mb) == (expected.functions, expected.memory_mb)
    assert plan.time_s == pytest.approx(expected.time_s, rel=1e-9)
    assert plan.cost_usd == pytest.approx(expected.cost_usd, rel=1e-9)


@pytest.mark.parametrize(
    "value", [0, -1.0, math.nan, math.inf, True, "600", None, 1e10],
    ids=["zero", "negative", "nan", "inf", "bool", "text", "none", "beyond-cap"],
)
def test_a_bad_deadline_is_one_instance_error_naming_it(value: object) -> None:
    instance = load_instance("mobilenet-cifar10")
    with pytest.raises(InstanceError, match="`deadline_s`"):
        instance.with_deadline(value)


def test_with_deadline_changes_the_deadline_and_nothing_else() -> None:
    instance = load_instance("mobilenet-cifar10")
    later = instance.with_deadline(1234.5)
    assert later.objective.deadline_s == 1234.5
    assert instance.objective.deadline_s != 1234.5  # the original is untouched
    assert later.undated_key() == instance.undated_key()
    assert later.values() == instance.values() == parameter_values(instance.parameters())


def test_on_server_has_the_parameters_of_an_instance_built_on_that_server() -> None:
    """`on_server` swaps the server's entries into the parameter vector instead of computing
    it again: for every catalogue server it must equal the vector computed from scratch."""
    instance = load_instance("resnet50-cifar10")
    assert len(instance.servers) > 1
    for server in instance.servers:
        swapped = instance.on_server(server)
        assert swapped.parameter_server == server and swapped.servers == ()
        assert swapped.values() == parameter_values(swapped.parameters())
