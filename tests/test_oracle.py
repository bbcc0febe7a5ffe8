"""Sanity checks of the brute-force oracle itself, against hand computation and plain Python.

The oracle is what every soundness test of the bounds and the solver leans on, so it gets
its own evidence: plans of the MobileNet instance worked out step by step from MODEL.md's
equations with plain floats (covering both batch regimes, PS-bound communication and
restarts), exhaustive pure-Python searches of small random instances (which pin the
tie-breaking and fallback rules), and the statuses for impossible deadlines and hopeless
profiles.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdadnn.solver.instance import Instance, load_instance
from tests.oracle import COST_TIE, OracleAnswer, brute_force, grid
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
    instance = load_instance(INSTANCES / "mobilenet-cifar10.yaml")
    by_hand = mobilenet_by_hand(n, m)
    values = grid(instance, np.array([n]), np.array([m]))
    for key, expected in by_hand.items():
        assert float(values[key][0]) == pytest.approx(expected, rel=1e-12), key
    assert bool(values["valid"][0])
    assert by_hand["restarts"] == restarts
    assert by_hand["time"] == pytest.approx(time, rel=1e-5)
    assert by_hand["cost"] == pytest.approx(cost, rel=1e-5)


def test_restarts_add_the_overhead_once_per_restart() -> None:
    """When T_train exceeds L, r = ceil(T_train / L) - 1 restarts each add restart_overhead_s."""
    instance = load_instance(INSTANCES / "mobilenet-cifar10.yaml")
    values = grid(instance)
    usable = instance.platform.timeout_s - instance.platform.timeout_margin_s
    t_train, restarts = values["time_train"], values["restarts"]
    assert (restarts > 0).any() and (restarts == 0).any()
    assert np.array_equal(restarts > 0, t_train > usable)
    assert np.array_equal(restarts, np.ceil(t_train / usable) - 1)
    overhead = instance.platform.restart_overhead_s
    np.testing.assert_allclose(values["time"], t_train + restarts * overhead, rtol=1e-15)


def test_default_grid_shape_and_given_points_agree() -> None:
    """The full grid is max_functions x grid size, and evaluating listed plans gives the same."""
    instance = load_instance(INSTANCES / "resnet50-cifar10.yaml")
    values = grid(instance)  # 1,000 functions: evaluated in chunks and stacked
    assert values["time"].shape == (1000, instance.platform.memory.size)
    rows = np.array([0, 63, 64, 500, 999])
    cols = np.array([0, 2304, 17, 10112, 5000])
    memory = instance.platform.memory.values()[cols]
    listed = grid(instance, rows + 1, memory)
    for key in ("time", "cost", "valid", "feasible"):
        np.testing.assert_array_equal(listed[key], values[key][rows, cols])
    floor = memory < 2432  # resnet50 needs 2,432 MB
    assert not listed["feasible"][floor].any()


def test_impossible_deadline_gives_the_fastest_valid_plan() -> None:
    """Nothing finishes in one second: status 'infeasible' with the least time over the grid."""
    mapping = mobilenet_mapping()
    mapping["objective"]["deadline_s"] = 1
    instance = load_instance(mapping)
    answer = brute_force(instance)
    assert answer.status == "infeasible"
    values = grid(instance)
    assert not values["feasible"].any()
    assert answer.time_s == float(np.nanmin(values["time"]))
    assert answer.time_s is not None and answer.time_s > 1
    assert answer.functions is not None and answer.functions <= 64


def test_no_valid_plan_gives_none() -> None:
    """A rate that is negative at every memory leaves no valid plan: status 'none'."""
    mapping = mobilenet_mapping()
    mapping["profile"]["rate"] = {"slope": 0.0, "intercept": -1.0}
    assert brute_force(load_instance(mapping)) == OracleAnswer("none", None, None, None, None)


def test_overflowing_time_is_still_a_valid_plan() -> None:
    """A storage bandwidth of 1e-308 MB/s is valid (> 0) though the load time overflows to inf:
    the answer is the fastest valid plan ('infeasible', time inf), not 'none'."""
    mapping = mobilenet_mapping()
    mapping["profile"]["storage_bandwidth"] = {"slope": 0, "intercept": 1e-308, "max_mbps": 115}
    answer = brute_force(load_instance(mapping))
    assert answer.status == "infeasible"
    assert answer.time_s == math.inf
    assert answer.functions == 1 and answer.memory_mb == 128  # all tie: smallest n, then m


def test_memory_floor_excludes_smaller_memories_even_when_infeasible() -> None:
    """The fallback plan respects min_memory_mb, even though smaller memories are valid."""
    mapping = mobilenet_mapping()
    mapping["objective"]["deadline_s"] = 1
    mapping["workload"]["min_memory_mb"] = 10_000
    answer = brute_force(load_instance(mapping))
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
    instance = load_instance(mapping)
    answer = brute_force(instance)
    assert answer.status == "optimal" and answer.cost_usd == 0
    # Every feasible plan costs 0, so all tie on cost and the fastest wins ...
    values = grid(instance)
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
    instance = load_instance(mapping)
    costs = grid(instance)["cost"][:, 0]
    assert int(np.argmin(costs)) + 1 == 5 and costs[5] > costs[4]  # the float setting holds
    assert float(costs.max()) <= float(costs.min()) * (1 + COST_TIE)
    answer = brute_force(instance, chunk_rows=rows)
    assert (answer.status, answer.functions, answer.memory_mb) == ("optimal", 6, 1024)


def test_shipped_instances_have_feasible_optima_within_limits() -> None:
    """Each shipped instance is solvable and its optimum honours every limit it states."""
    for path in sorted(INSTANCES.glob("*.yaml")):
        instance = load_instance(path)
        answer = brute_force(instance)
        assert answer.status == "optimal", path.name
        assert answer.functions is not None and answer.memory_mb is not None
        assert answer.time_s is not None and answer.time_s <= instance.objective.deadline_s
        assert 1 <= answer.functions <= instance.max_functions
        assert answer.memory_mb >= instance.min_memory_mb


# --- exhaustive pure-Python reference on small random instances ---------------------------


def python_plan(instance: Instance, n: int, m: float) -> tuple[bool, bool, float, float]:
    """(valid, within limits, time, cost) of one plan, MODEL.md in scalar Python."""
    w, pf = instance.workload, instance.platform
    rate_p, storage_p, ps_p = (
        instance.profile.rate, instance.profile.storage_bandwidth, instance.parameter_server)
    if n * float(w.local_batch) <= float(w.max_global_batch):
        b_g, b_l = n * float(w.local_batch), float(w.local_batch)
    else:
        b_g, b_l = float(w.max_global_batch), float(w.max_global_batch) / n
    m_sat = math.inf if rate_p.saturates_at_mb is None else rate_p.saturates_at_mb
    rate = rate_p.slope * min(m, m_sat) + rate_p.intercept
    storage = min(storage_p.slope * m + storage_p.intercept, storage_p.max_mbps)
    if not (rate > 0 and storage > 0 and b_l >= 1):
        return False, False, math.nan, math.nan
    k = float(w.samples) * float(w.epochs) / b_g
    ps = min(ps_p.function_bandwidth_mbps, ps_p.bandwidth_mbps / n)
    t_train = w.dataset_size_mb / (n * storage) + k * (b_l / rate + 2.0 * w.model_size_mb / ps)
    restarts = max(0, math.ceil(t_train / (pf.timeout_s - pf.timeout_margin_s)) - 1)
    time = t_train + restarts * pf.restart_overhead_s
    cost = (time * (n * (m / 1024.0) * pf.price_per_gb_second + ps_p.price_per_hour / 3600.0)
            + n * (restarts + 1) * pf.price_per_request)
    within = n <= instance.max_functions and m >= instance.min_memory_mb
    return True, within, time, cost


def python_brute_force(instance: Instance) -> OracleAnswer:
    """The oracle's selection rules re-stated over a Python list of every plan."""
    plans = []
    for n in range(1, instance.max_functions + 1):
        for m in instance.platform.memory.values().tolist():
            valid, within, time, cost = python_plan(instance, n, m)
            if valid and within:
                plans.append((n, int(m), time, cost))
    feasible = [p for p in plans if p[2] <= instance.objective.deadline_s]
    if feasible:
        c_min = min(p[3] for p in feasible)
        tied = [p for p in feasible if p[3] <= c_min * (1 + COST_TIE)]
        n, m, time, cost = min(tied, key=lambda p: (p[2], p[0], p[1]))
        return OracleAnswer("optimal", n, m, time, cost)
    if plans:
        n, m, time, cost = min(plans, key=lambda p: (p[2], p[3], p[0], p[1]))
        return OracleAnswer("infeasible", n, m, time, cost)
    return OracleAnswer("none", None, None, None, None)


def _close(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


@PROPERTY
@given(instance_mappings(max_memory_sizes=30, max_concurrency=25))
def test_brute_force_matches_exhaustive_python(mapping: dict[str, Any]) -> None:
    """Property: on small random instances the numpy oracle picks the plan that a plain
    Python loop over every (n, m) picks, with the same status, time and cost."""
    instance = load_instance(mapping)
    expected = python_brute_force(instance)
    answer = brute_force(instance)
    assert (answer.status, answer.functions, answer.memory_mb) == (
        expected.status, expected.functions, expected.memory_mb)
    assert _close(answer.time_s, expected.time_s) and _close(answer.cost_usd, expected.cost_usd)


@PROPERTY
@given(instance_mappings(), st.integers(1, 70))
def test_chunking_does_not_change_the_answer(mapping: dict[str, Any], rows: int) -> None:
    """Property: scanning the grid in chunks of any number of rows gives the same answer as
    scanning it whole, so the two-pass chunked search loses no tied or fastest plan."""
    instance = load_instance(mapping)
    assert brute_force(instance, chunk_rows=rows) == brute_force(instance, chunk_rows=10_000)


@PROPERTY
@given(instance_mappings())
def test_answer_is_the_grid_optimum(mapping: dict[str, Any]) -> None:
    """Property: an 'optimal' answer is feasible and no feasible grid point is cheaper beyond
    the tie tolerance; an 'infeasible' answer is the least time of the valid plans within
    limits; 'none' means no valid plan within limits exists."""
    instance = load_instance(mapping)
    answer = brute_force(instance)
    values = grid(instance)
    if answer.status == "none":
        assert not values["within_limits"].any()
        return
    assert answer.functions is not None and answer.memory_mb is not None
    point = grid(instance, np.array([answer.functions]), np.array([answer.memory_mb]))
    assert float(point["time"][0]) == answer.time_s and float(point["cost"][0]) == answer.cost_usd
    if answer.status == "optimal":
        assert bool(point["feasible"][0])
        assert answer.cost_usd is not None
        assert float(values["cost"][values["feasible"]].min()) * (1 + COST_TIE) >= answer.cost_usd
    else:
        assert not values["feasible"].any()
        assert answer.time_s == float(values["time"][values["within_limits"]].min())
