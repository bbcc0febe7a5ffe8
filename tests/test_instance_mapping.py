"""`instance_mapping()` is the exact inverse of `load_instance`, `fit:` is loaded and kept out
of the model, and a plan's JSON carries the instance it was solved from (`instance_spec`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance import Instance, instance_mapping
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import solve
from tests.strategies import instance_mappings

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "instances").glob("*.yaml"))
CATALOGUE = yaml.safe_load((ROOT / "tests" / "catalogue.yaml").read_text(encoding="utf-8"))
PLATFORMS = [None, *sorted(p.stem for p in (ROOT / "instances" / "platforms").glob("*.yaml"))]

FIT: dict[str, Any] = {
    "workload": "digits-cnn",
    "backend": "local",
    "seconds": 241.5,
    "cost_usd": 0,
    "parameters": {
        "profile.rate.slope": {"value": 0.0123, "stderr": 0.0004, "identified": True},
        "profile.storage_bandwidth.max_mbps": {
            "value": 115, "stderr": None, "identified": False,
            "note": "no S3 on the local backend: the platform's value is kept",
        },
    },
    "runs": [
        {"functions": 1, "memory_mb": 1769, "seconds": 12.5, "residual_s": -0.25,
         "iteration_s": [0.1, 0.125, None], "kind": "rate"},
    ],
    "machine": {"cpus": 2, "cpu": "Intel Xeon", "python": "3.11.9"},
}


def plain(value: Any) -> bool:
    """Only YAML's and JSON's own types, all the way down."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(item) for item in value)
    return value is None or type(value) in (str, int, float, bool)


def assert_round_trip(instance: Instance) -> None:
    mapping = instance_mapping(instance)
    assert plain(mapping)
    assert isinstance(mapping["platform"], dict)  # inline, never a name
    assert load_instance(mapping) == instance
    through_yaml = yaml.safe_load(yaml.safe_dump(mapping, sort_keys=False))
    assert load_instance(through_yaml) == instance
    assert load_instance(json.loads(json.dumps(mapping, allow_nan=False))) == instance


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_instances_round_trip(path: Path, platform: str | None) -> None:
    assert_round_trip(load_instance(path, platform=platform))


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda entry: entry["id"])
def test_catalogue_instances_round_trip(entry: dict[str, Any]) -> None:
    assert_round_trip(load_instance(entry["instance"], platform=entry.get("platform")))


@settings(max_examples=200, deadline=None)
@given(instance_mappings(max_memory_sizes=20, max_concurrency=20), st.data())
def test_random_instances_round_trip(mapping: dict[str, Any], data: Any) -> None:
    """Property: any instance the loader accepts, with or without a vCPU limit, an
    architecture and a `fit` section, comes back equal from its mapping."""
    if data.draw(st.booleans()):
        mapping["platform"]["max_vcpu"] = data.draw(st.floats(1e-3, 1e4))
    if data.draw(st.booleans()):
        mapping["platform"]["architecture"] = data.draw(st.sampled_from(["x86_64", "arm64"]))
    if data.draw(st.booleans()):
        mapping["fit"] = copy.deepcopy(FIT)
        mapping["fit"]["backend"] = data.draw(st.sampled_from(["local", "aws"]))
        if data.draw(st.booleans()):
            del mapping["fit"]["runs"], mapping["fit"]["machine"]
    assert_round_trip(load_instance(mapping))


def test_optional_fields_are_left_out_when_absent() -> None:
    mapping = instance_mapping(load_instance(ROOT / "instances" / "1dcnn-imdb.yaml"))
    assert "limits" not in mapping and "fit" not in mapping
    assert "max_vcpu" not in mapping["platform"]
    assert "min_memory_mb" not in mapping["workload"]
    assert set(mapping["profile"]) == {"rate", "storage_bandwidth"}  # v2 terms are 0


def test_fit_is_loaded_hashable_and_kept_out_of_the_model() -> None:
    mapping = yaml.safe_load((ROOT / "instances" / "1dcnn-imdb.yaml").read_text())
    fitted = load_instance({**mapping, "fit": FIT})
    fit = fitted.fit
    assert fit is not None
    assert (fit.workload, fit.backend, fit.seconds, fit.cost_usd) == ("digits-cnn", "local",
                                                                      241.5, 0.0)
    storage = fit.parameters[1]
    assert (storage.name, storage.stderr, storage.identified) == (
        "profile.storage_bandwidth.max_mbps", None, False)
    assert dict(fit.runs[0])["iteration_s"] == (0.1, 0.125, None)
    assert isinstance(dict(fit.runs[0])["functions"], int)
    assert {fitted: 1}[fitted] == 1  # simulators memoise on instances
    plain_plan = solve(mapping).to_dict()
    fitted_plan = solve(fitted).to_dict()
    for plan in (plain_plan, fitted_plan):
        plan.pop("solve_seconds")
        plan.pop("instance_spec")
    assert plain_plan == fitted_plan


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("workload", None, "`fit.workload` is missing"),
        ("workload", "a\nb", "`fit.workload` must be one line"),
        ("backend", "gpu", "`fit.backend` must be one of local, aws, got 'gpu'"),
        ("seconds", -1, "`fit.seconds` must be a number from 0"),
        ("cost_usd", "free", "`fit.cost_usd` must be a number from 0"),
        ("parameters", [1], "`fit.parameters` must be a mapping of parameter names"),
        ("parameters.x", {"value": 1}, "`fit.parameters.x.identified` is missing"),
        ("parameters.x", {"value": 1, "identified": "yes"},
         "`fit.parameters.x.identified` must be true or false, got 'yes'"),
        ("parameters.x", {"value": True, "identified": True},
         "`fit.parameters.x.value` must be a number"),
        ("parameters.x", {"value": 1, "stderr": -1, "identified": True},
         "`fit.parameters.x.stderr` must be a number from 0"),
        ("parameters.x", {"value": 1, "identified": True, "sigma": 1},
         "`fit.parameters.x.sigma` is not a known field"),
        ("runs", {"a": 1}, "`fit.runs` must be a list of runs"),
        ("runs", [{"n": {"deep": 1}}], "`fit.runs[0].n` must be a number"),
        ("runs", [{"n": float("nan")}], "`fit.runs[0].n` must be a number"),
        ("runs", [{"t": [1, [2]]}], "`fit.runs[0].t[1]` must be a number"),
        ("machine", {"cpus": [2]}, "`fit.machine.cpus` must be a number"),
        ("machine", {7: 2}, "`fit.machine.7` is not a valid key"),
        ("unknown", 1, "`fit.unknown` is not a known field"),
    ],
)
def test_a_bad_fit_is_one_line_naming_the_field(path: str, value: Any, message: str) -> None:
    mapping = yaml.safe_load((ROOT / "instances" / "1dcnn-imdb.yaml").read_text())
    fit = copy.deepcopy(FIT)
    *parents, key = path.split(".")
    node = fit
    for part in parents:
        node = node[part]
    node[key] = value
    with pytest.raises(InstanceError) as raised:
        load_instance({**mapping, "fit": fit})
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_a_plan_carries_the_instance_it_was_solved_from() -> None:
    """`instance_spec` is the instance as solved (platform and deadline as given), inline:
    solving it again gives the same plan."""
    plan = solve(ROOT / "instances" / "mobilenet-cifar10.yaml", platform="aws-lambda-arm64",
                 deadline_s=900)
    payload = json.loads(json.dumps(plan.to_dict()))
    spec = payload["instance_spec"]
    assert spec["platform"]["name"] == "aws-lambda-arm64"
    assert spec["objective"] == {"deadline_s": 900.0}
    assert load_instance(spec) == plan.solved_from
    again = solve(spec)
    assert (again.functions, again.memory_mb, again.cost_usd) == (
        plan.functions, plan.memory_mb, plan.cost_usd)
    assert "solved_from" not in payload and "solved_from" not in repr(plan)
