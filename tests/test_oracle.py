"""Sanity checks of the brute-force oracle itself, against hand computation and plain Python.

The oracle is what every soundness test of the bounds and the solver leans on, so it gets
its own evidence: plans of the MobileNet instance worked out step by step from MODEL.md's
equations with plain floats (covering both batch regimes, PS-bound communication and
restarts), exhaustive pure-Python searches of small random instances (which pin the
tie-breaking and fallback rules), and the statuses for impossible deadlines and hopeless
profiles.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance
from tests.by_hand import hand, problem_of
from tests.hang_guard import HANG_GUARD_S
from tests.oracle import COST_TIE, OracleAnswer, Problem, brute_force, grid, read, search
from tests.strategies import instance_mappings

INSTANCES = Path(__file__).resolve().parent.parent / "instances"

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mobilenet_mapping() -> dict[str, Any]:
    """The shipped MobileNet instance as a mapping, to be varied by the tests."""
    mapping = yaml.safe_load((INSTANCES / "mobilenet-cifar10.yaml").read_text(encoding="utf-8"))
    assert isinstance(mapping, dict)
    return mapping


def mobilenet_by_hand(n: int, m: float) -> dict[str, float]:
    """One plan of instances/mobilenet-cifar10.yaml on aws-lambda-x86_64, step by step.

    The numbers are typed from the YAML files rather than read from an `Instance`, so this
    also catches a loader that mislabels a field.
    """
    d_m, d_t, n_t, e = 18.0, 148.0, 50_000.0, 6.0
    b_lf, b_gmax = 64.0, 512.0
    alpha1, beta1 = 0.03, 5.6
    alpha2, beta2, b_s = 0.002228, 16.12, 115.0
    b_p, b_fmax, p_ps = 1200.0, 84.0, 0.096
    p_gbs, p_req, timeout, margin, overhead = 0.0000166667, 0.0000002, 900.0, 30.0, 6.0

    if n * b_lf <= b_gmax:  # fixed local batch
        b_g, b_l = n * b_lf, b_lf
    else:  # fixed global batch
        b_g, b_l = b_gmax, b_gmax / n
    k = n_t * e / b_g
    rate = alpha1 * m + beta1  # no saturation in this instance
    storage = min(alpha2 * m + beta2, b_s)
    ps = min(b_fmax, b_p / n)
    t_load = d_t / (n * storage)
    t_comp = b_l / rate
    t_comm = 2 * d_m / ps
    t_train = t_load + k * (t_comp + t_comm)
    usable = timeout - margin
    restarts = max(0, math.ceil(t_train / usable) - 1)
    time = t_train + restarts * overhead
    cost = time * (n * (m / 1024) * p_gbs + p_ps / 3600) + n * (restarts + 1) * p_req
    return {"local_batch": b_l, "iterations": k, "rate": rate, "storage_bandwidth": storage,
            "ps_bandwidth": ps, "time_train": t_train, "restarts": restarts, "time": time,
            "cost": cost}


# (n, m, restarts, time, cost): the last three rounded by hand from the step-by-step values,
# as a second anchor in case the helper above and the oracle drift together.
MOBILENET_PLANS = [
    (8, 2048, 0, 811.378, 0.238006),  # fixed local batch (8 x 64 = 512), function-bound
    (16, 1024, 0, 797.997, 0.234083),  # fixed global batch (b_l = 32), PS-bound (1200/16 = 75)
    (1, 128, 38, 34025.6, 0.978244),  # one small function: 33,798 s of training, 38 restarts
    (64, 10240, 1, 1146.05, 12.2551),  # T_train = 1,140 s > L = 870 s: one restart, +6 s
]


@pytest.mark.parametrize(("n", "m", "restarts", "time", "cost"), MOBILENET_PLANS)
def test_mobilenet_plan_matches_hand_computation(
    n: int, m: int, restarts: int, time: float, cost: float
) -> None:
    """The oracle's figures for one plan equal MODEL.md's equations evaluated by hand."""
    by_hand = mobilenet_by_hand(n, m)
    values = grid(INSTANCES / "mobilenet-cifar10.yaml", np.array([n]), np.array([m]))
    for key, expected in by_hand.items():
        assert float(values[key][0]) == pytest.approx(expected, rel=1e-12), key
    assert bool(values["valid"][0])
    assert by_hand["restarts"] == restarts
    assert by_hand["time"] == pytest.approx(time, rel=1e-5)
    assert by_hand["cost"] == pytest.approx(cost, rel=1e-5)


def test_restarts_add_the_overhead_once_per_restart() -> None:
    """When T_train exceeds L, r = ceil(T_train / L) - 1 restarts each add restart_overhead_s."""
    problem = read(INSTANCES / "mobilenet-cifar10.yaml")
    values = grid(problem)
    usable = problem.timeout_s - problem.timeout_margin_s
    t_train, restarts = values["time_train"], values["restarts"]
    assert (restarts > 0).any() and (restarts == 0).any()
    assert np.array_equal(restarts > 0, t_train > usable)
    assert np.array_equal(restarts, np.ceil(t_train / usable) - 1)
    overhead = problem.restart_overhead_s
    np.testing.assert_allclose(values["time"], t_train + restarts * overhead, rtol=1e-15)


def test_default_grid_shape_and_given_points_agree() -> None:
    """The full grid is max_functions x grid size, and evaluating listed plans gives the same."""
    problem = read(INSTANCES / "resnet50-cifar10.yaml")
    values = grid(problem)  # 1,000 functions: evaluated in chunks and stacked
    assert values["time"].shape == (1000, 10_113)  # 128..10,240 MB in 1 MB steps
    rows = np.array([0, 63, 64, 500, 999])
    cols = np.array([0, 2304, 17, 10112, 5000])
    memory = 128.0 + cols
    listed = grid(problem, rows + 1, memory)
    for key in ("time", "cost", "valid", "feasible"):
        np.testing.assert_array_equal(listed[key], values[key][rows, cols])
    floor = memory < 2432  # resnet50 needs 2,432 MB
    assert not listed["feasible"][floor].any()


def test_impossible_deadline_gives_the_fastest_valid_plan() -> None:
    """Nothing finishes in one second: status 'infeasible' with the least time over the grid."""
    mapping = mobilenet_mapping()
    mapping["objective"]["deadline_s"] = 1
    answer = brute_force(mapping)
    assert answer.status == "infeasible"
    values = grid(mapping)
    assert not values["feasible"].any()
    assert answer.time_s == float(np.nanmin(values["time"]))
    assert answer.time_s is not None and answer.time_s > 1
    assert answer.functions is not None and answer.functions <= 64


def test_no_valid_plan_gives_none() -> None:
    """A rate that is negative at every memory leaves no valid plan: status 'none'."""
    mapping = mobilenet_mapping()
    mapping["profile"]["rate"] = {"slope": 0.0, "intercept": -1.0}
    assert brute_force(mapping) == OracleAnswer("none", None, None, None, None)


def test_overflowing_time_is_still_a_valid_plan() -> None:
    """A storage bandwidth of 1e-308 MB/s is valid (> 0) though the load time overflows to inf:
    the answer is the fastest valid plan ('infeasible', time inf), not 'none'."""
    mapping = mobilenet_mapping()
    mapping["profile"]["storage_bandwidth"] = {"slope": 0, "intercept": 1e-308, "max_mbps": 115}
    answer = brute_force(mapping)
    assert answer.status == "infeasible"
    assert answer.time_s == math.inf
    assert answer.functions == 1 and answer.memory_mb == 128  # all tie: smallest n, then m


def test_memory_floor_excludes_smaller_memories_even_when_infeasible() -> None:
    """The fallback plan respects min_memory_mb, even though smaller memories are valid."""
    mapping = mobilenet_mapping()
    mapping["objective"]["deadline_s"] = 1
    mapping["workload"]["min_memory_mb"] = 10_000
    answer = brute_force(mapping)
    assert answer.status == "infeasible"
    assert answer.memory_mb is not None and answer.memory_mb >= 10_000


def test_equal_costs_go_to_the_smaller_memory() -> None:
    """Past saturation, with free storage-independent bandwidth and zero prices, all m tie."""
    mapping = mobilenet_mapping()
    mapping["platform"] = {
        "name": "free", "memory_mb": {"min": 128, "max": 4096, "step": 64},
        "price_per_gb_second": 0, "price_per_request": 0, "timeout_s": 900,
        "timeout_margin_s": 30, "restart_overhead_s": 6, "max_concurrency": 100,
    }
    mapping["parameter_server"]["price_per_hour"] = 0
    mapping["profile"]["rate"]["saturates_at_mb"] = 1000
    mapping["profile"]["storage_bandwidth"] = {"slope": 0, "intercept": 50, "max_mbps": 115}
    answer = brute_force(mapping)
    assert answer.status == "optimal" and answer.cost_usd == 0
    # Every feasible plan costs 0, so all tie on cost and the fastest wins ...
    values = grid(mapping)
    assert answer.time_s == float(values["time"][values["feasible"]].min())
    # ... and time is flat in m from the first grid size >= 1,000 MB (1,024) on: that one wins.
    assert answer.memory_mb == 1024 and answer.functions is not None
    assert (values["time"][answer.functions - 1] == answer.time_s).sum() > 1


@pytest.mark.parametrize("rows", [1, 2, 64])
def test_rounding_level_cost_differences_are_ties(rows: int) -> None:
    """With perfectly linear speed-up (flat PS and storage bandwidth, no fixed prices) every n
    costs the same in real arithmetic; in floats n = 5 is one ulp cheaper than the others.
    The relative 1e-12 tie rule makes them equal, so the fastest (n = 6) must win, even when
    n = 5 and n = 6 are scanned in different chunks."""
    mapping = {
        "name": "linear-speed-up",
        "platform": {"name": "one-size", "memory_mb": {"min": 1024, "max": 1024, "step": 1},
                     "price_per_gb_second": 0.0000166667, "price_per_request": 0,
                     "timeout_s": 900, "timeout_margin_s": 30, "restart_overhead_s": 6,
                     "max_concurrency": 6},
        "workload": {"model_size_mb": 1, "dataset_size_mb": 0.4, "samples": 1000, "epochs": 1,
                     "local_batch": 10, "max_global_batch": 1000},
        "profile": {"rate": {"slope": 0, "intercept": 10},
                    "storage_bandwidth": {"slope": 0, "intercept": 10, "max_mbps": 100}},
        "parameter_server": {"bandwidth_mbps": 1000, "function_bandwidth_mbps": 100,
                             "price_per_hour": 0},
        "objective": {"deadline_s": 100_000},
    }
    costs = grid(mapping)["cost"][:, 0]
    assert int(np.argmin(costs)) + 1 == 5 and costs[5] > costs[4]  # the float setting holds
    assert float(costs.max()) <= float(costs.min()) * (1 + COST_TIE)
    answer = brute_force(mapping, chunk_rows=rows)
    assert (answer.status, answer.functions, answer.memory_mb) == ("optimal", 6, 1024)


def test_shipped_instances_have_feasible_optima_within_limits() -> None:
    """Each shipped instance is solvable and its optimum honours every limit it states."""
    for path in sorted(INSTANCES.glob("*.yaml")):
        problem = read(path)
        answer = brute_force(problem)
        assert answer.status == "optimal", path.name
        assert answer.functions is not None and answer.memory_mb is not None
        assert answer.time_s is not None and answer.time_s <= problem.deadline_s
        assert 1 <= answer.functions <= problem.max_functions
        assert answer.memory_mb >= problem.min_memory_mb


# --- exhaustive pure-Python reference on small random instances ---------------------------


def python_plan(p: Problem, n: int, m: float) -> tuple[bool, bool, float, float]:
    """(valid, within limits, time, cost) of one plan, MODEL.md in scalar Python."""
    figures = hand(p, n, m)
    if not figures.valid:
        return False, False, math.nan, math.nan
    within = n <= p.max_functions and m >= p.min_memory_mb
    return True, within, figures.time, figures.cost


def python_brute_force(p: Problem) -> OracleAnswer:
    """The oracle's selection rules re-stated over a Python list of every plan."""
    plans = []
    for n in range(1, p.max_functions + 1):
        for m in range(p.memory_min, p.memory_max + 1, p.memory_step):
            valid, within, time, cost = python_plan(p, n, float(m))
            if valid and within:
                plans.append((n, m, time, cost))
    feasible = [plan for plan in plans if plan[2] <= p.deadline_s]
    if feasible:
        c_min = min(plan[3] for plan in feasible)
        tied = [plan for plan in feasible if plan[3] <= c_min * (1 + COST_TIE)]
        n, m, time, cost = min(tied, key=lambda plan: (plan[2], plan[0], plan[1]))
        return OracleAnswer("optimal", n, m, time, cost)
    if plans:
        n, m, time, cost = min(plans, key=lambda plan: (plan[2], plan[3], plan[0], plan[1]))
        return OracleAnswer("infeasible", n, m, time, cost)
    return OracleAnswer("none", None, None, None, None)


def _close(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


@PROPERTY
@given(instance_mappings(max_memory_sizes=30, max_concurrency=25))
def test_brute_force_matches_exhaustive_python(mapping: dict[str, Any]) -> None:
    """Property: on small random instances the numpy oracle picks the plan that a plain
    Python loop over every (n, m) picks, with the same status, time and cost."""
    problem = read(mapping)
    expected = python_brute_force(problem)
    answer = brute_force(problem)
    assert (answer.status, answer.functions, answer.memory_mb) == (
        expected.status, expected.functions, expected.memory_mb)
    assert _close(answer.time_s, expected.time_s) and _close(answer.cost_usd, expected.cost_usd)


@PROPERTY
@given(instance_mappings(), st.integers(1, 70))
def test_chunking_does_not_change_the_answer(mapping: dict[str, Any], rows: int) -> None:
    """Property: scanning the grid in chunks of any number of rows gives the same answer as
    scanning it whole, so the two-pass chunked search loses no tied or fastest plan."""
    problem = read(mapping)
    assert brute_force(problem, chunk_rows=rows) == brute_force(problem, chunk_rows=10_000)


@PROPERTY
@given(instance_mappings())
def test_answer_is_the_grid_optimum(mapping: dict[str, Any]) -> None:
    """Property: an 'optimal' answer is feasible and no feasible grid point is cheaper beyond
    the tie tolerance; an 'infeasible' answer is the least time of the valid plans within
    limits; 'none' means no valid plan within limits exists."""
    problem = read(mapping)
    answer = brute_force(problem)
    values = grid(problem)
    if answer.status == "none":
        assert not values["within_limits"].any()
        return
    assert answer.functions is not None and answer.memory_mb is not None
    point = grid(problem, np.array([answer.functions]), np.array([answer.memory_mb]))
    assert float(point["time"][0]) == answer.time_s and float(point["cost"][0]) == answer.cost_usd
    if answer.status == "optimal":
        assert bool(point["feasible"][0])
        assert answer.cost_usd is not None
        assert float(values["cost"][values["feasible"]].min()) * (1 + COST_TIE) >= answer.cost_usd
    else:
        assert not values["feasible"].any()
        assert answer.time_s == float(values["time"][values["within_limits"]].min())


# --- independence: the oracle reads the YAML itself and shares no code with the package --------


@pytest.mark.real
def test_oracle_imports_nothing_from_the_package() -> None:
    """tests/oracle.py names no `lambdadnn` module, and importing it loads none."""
    source = Path(__file__).with_name("oracle.py")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported and not any(name.split(".")[0] in {"lambdadnn", ""} for name in imported)
    check = (
        "import sys, tests.oracle\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lambdadnn'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=source.parent.parent, capture_output=True, text=True,
        timeout=HANG_GUARD_S, check=True,
    )
    assert done.stdout.strip() == "[]"


def assert_reader_agrees(problem: Problem, instance: Instance) -> None:
    """The oracle's reading of an instance equals the package loader's, field by field."""
    assert problem == problem_of(instance)
    assert np.array_equal(problem.memory(), instance.platform.memory.values())


@pytest.mark.parametrize("platform", [None, "aws-lambda-2020", "aws-lambda-arm64"])
@pytest.mark.parametrize("path", sorted(INSTANCES.glob("*.yaml")), ids=lambda p: p.stem)
def test_reader_agrees_with_the_loader_on_the_shipped_instances(
    path: Path, platform: str | None
) -> None:
    """Two independent readings (platform by name, replaced or not) give the same numbers."""
    assert_reader_agrees(read(path, platform=platform), load_instance(path, platform=platform))


@PROPERTY
@given(instance_mappings())
def test_reader_agrees_with_the_loader(mapping: dict[str, Any]) -> None:
    """Property: on random instances the oracle and the loader read the same numbers,
    including the limits each works out on its own."""
    assert_reader_agrees(read(mapping), load_instance(mapping))


def test_limits_max_functions_caps_the_oracles_grid() -> None:
    """`limits.max_functions` below the platform's concurrency caps n; absent, concurrency does."""
    mapping = mobilenet_mapping()
    assert read(mapping).max_functions == 64
    assert grid(mapping)["time"].shape[0] == 64
    del mapping["limits"]
    assert read(mapping).max_functions == 1000  # aws-lambda-x86_64's max_concurrency
    mapping["limits"] = {"max_functions": 5000}
    assert read(mapping).max_functions == 1000


def test_a_platform_beside_the_instance_is_read_first(tmp_path: Path) -> None:
    """A platform named in an instance file is looked up beside it before the shipped ones."""
    shipped = yaml.safe_load(
        (INSTANCES / "platforms" / "aws-lambda-x86_64.yaml").read_text(encoding="utf-8"))
    shipped["memory_mb"] = {"min": 256, "max": 512, "step": 128}
    (tmp_path / "platforms").mkdir()
    (tmp_path / "platforms" / "aws-lambda-x86_64.yaml").write_text(yaml.safe_dump(shipped))
    instance = tmp_path / "job.yaml"
    instance.write_text(yaml.safe_dump(mobilenet_mapping()))
    assert read(instance).memory().tolist() == [256.0, 384.0, 512.0]
    assert_reader_agrees(read(instance), load_instance(instance))


# --- the catalogue, by the oracle -----------------------------------------------------------

CATALOGUE = yaml.safe_load(
    (Path(__file__).with_name("catalogue.yaml")).read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda entry: entry["id"])
def test_catalogue_by_the_oracle(entry: dict[str, Any]) -> None:
    """The oracle gives each catalogue entry's recorded answer, and the ties it claims hold:
    each plan in `ties` is as cheap to within the 1e-12 rule (and, with `same_time`, exactly
    as fast; else slower), each in `not_tied` faster but dearer beyond the rule."""
    source = entry["instance"] if isinstance(entry["instance"], dict) else (
        INSTANCES.parent / entry["instance"])
    found = search(source, platform=entry.get("platform"), deadline_s=entry.get("deadline_s"))
    answer = found.answer
    expected = entry["expected"]
    server = expected.get("ps", {"type": None, "shards": 1})
    problem = found.on(server["type"], server["shards"])[0].problem  # the recorded server
    assert (server["type"], server["shards"]) in found.tied
    assert (answer.status, answer.functions, answer.memory_mb) == (
        expected["status"], expected["functions"], expected["memory_mb"])
    assert _close(answer.cost_usd, expected["cost_usd"])
    assert answer.time_s is not None and answer.cost_usd is not None
    assert answer.time_s == pytest.approx(expected["time_s"], abs=5e-4)  # recorded to 1 ms
    key = "feasible" if answer.status == "optimal" else "within_limits"
    for rival in entry.get("ties", []) + entry.get("not_tied", []):
        values = grid(problem, np.array([rival["functions"]]), np.array([rival["memory_mb"]]))
        assert bool(values[key][0]), rival
        time, cost = float(values["time"][0]), float(values["cost"][0])
        excess = abs(cost - answer.cost_usd) / answer.cost_usd if answer.cost_usd else cost
        if rival in entry.get("ties", []):
            assert excess <= COST_TIE, rival
            assert time == answer.time_s if rival.get("same_time") else time > answer.time_s
        else:
            assert excess > COST_TIE and time < answer.time_s, rival
