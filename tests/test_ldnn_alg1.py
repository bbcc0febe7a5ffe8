"""The λDNN Algorithm 1 baseline is the published heuristic, so the benchmark compares fairly.

Bounds are checked against an independent transcription of the prototype's closed forms (from
the raw YAML numbers, not through `Instance`), and the search is checked plan by plan against
the project's model: what it returns is feasible, and it stops at the first feasible `n`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdadnn.models.performance import evaluate
from lambdadnn.simulator.ldnn_alg1 import (
    Alg1Result,
    ldnn_alg1,
    memory_sizes,
    n_lower,
    n_upper,
)
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance

ROOT = Path(__file__).resolve().parent.parent
INSTANCE_PATHS = sorted((ROOT / "instances").glob("*.yaml"))
PUBLISHED_LADDER = tuple(range(128, 3008 + 1, 64))


def _ids(paths: list[Path]) -> list[str]:
    return [path.stem for path in paths]


@pytest.fixture(scope="module", params=INSTANCE_PATHS, ids=_ids(INSTANCE_PATHS))
def shipped(request: pytest.FixtureRequest) -> tuple[dict[str, Any], Instance, Alg1Result]:
    """Each shipped instance: its raw YAML, the loaded instance and Algorithm 1's answer."""
    path: Path = request.param
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    instance = load_instance(path)
    return raw, instance, ldnn_alg1(instance)


def _published_n_lower(raw: dict[str, Any], memory: int) -> int | None:
    """The prototype's two closed forms (Predictor.py), transcribed from its source."""
    w, prof = raw["workload"], raw["profile"]
    ps, deadline = raw["parameter_server"], raw["objective"]["deadline_s"]
    d_t, d_m, n_t, e = w["dataset_size_mb"], w["model_size_mb"], w["samples"], w["epochs"]
    b_l_f, b_g_max, b_f_p = w["local_batch"], w["max_global_batch"], ps["function_bandwidth_mbps"]
    rate = prof["rate"]["slope"] * memory + prof["rate"]["intercept"]
    storage = prof["storage_bandwidth"]
    b_f_s = min(storage["slope"] * memory + storage["intercept"], storage["max_mbps"])
    if rate <= 0 or b_f_s <= 0:
        return None
    nlow_bl = math.ceil(
        (1 / deadline) * (d_t / b_f_s + (n_t * e) / rate + (2 * d_m * n_t * e) / (b_l_f * b_f_p))
    )
    if nlow_bl <= b_g_max // b_l_f:
        return max(1, int(nlow_bl))
    denominator = b_f_s * rate * (deadline * b_g_max * b_f_p - n_t * e * 2 * d_m)
    if denominator <= 0:
        return None
    nlow_to_bg = math.ceil((b_g_max * b_f_p * (d_t * rate + n_t * e * b_f_s)) / denominator)
    return int(max(nlow_to_bg, nlow_bl))


def _feasible(instance: Instance, functions: int, memory: int) -> bool:
    """The project's feasibility of one plan, straight from the model."""
    figures = evaluate(instance.parameters(), functions, memory)
    return (
        bool(figures.valid)
        and float(figures.time) <= instance.objective.deadline_s
        and functions <= instance.max_functions
        and memory >= instance.min_memory_mb
    )


def test_n_upper_is_the_paper_ps_bound(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    _, instance, result = shipped
    ps = instance.parameter_server  # a catalogue's first: its m5.large, the paper's PS
    expected = math.floor(ps.shards * ps.bandwidth_mbps / ps.function_bandwidth_mbps)
    assert n_upper(instance) == result.n_upper == expected
    assert expected == 14  # the paper's PS: 1,200 MB/s shared, 84 MB/s per function
    assert all(bounds.n_upper == 14 for bounds in result.bounds)


def test_memory_ladder_is_the_published_one(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    raw, instance, result = shipped
    floor = raw["workload"].get("min_memory_mb", 0)
    expected = tuple(size for size in PUBLISHED_LADDER if size >= floor)
    assert memory_sizes(instance) == result.memory_sizes_tried == expected
    assert tuple(bounds.memory_mb for bounds in result.bounds) == expected


def test_n_lower_matches_the_published_closed_form(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    raw, instance, result = shipped
    for bounds in result.bounds:
        assert bounds.n_lower == _published_n_lower(raw, bounds.memory_mb), bounds
        assert n_lower(instance, bounds.memory_mb) == bounds.n_lower


def test_n_lower_is_tight_for_the_model(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    """The closed form is T_train ≤ T_o solved exactly, so one function fewer misses T_o."""
    _, instance, result = shipped
    for bounds in result.bounds:
        if bounds.n_lower is not None and 2 <= bounds.n_lower <= bounds.n_upper + 1:
            assert not _feasible(instance, bounds.n_lower - 1, bounds.memory_mb), bounds


def test_returned_plan_is_feasible_under_the_model(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    _, instance, result = shipped
    if not result.found:
        assert result.functions is result.memory_mb is result.cost_usd is result.time_s is None
        assert all(bounds.accepted_functions is None for bounds in result.bounds)
        return
    assert result.functions is not None and result.memory_mb is not None
    assert _feasible(instance, result.functions, result.memory_mb)
    assert result.memory_mb in PUBLISHED_LADDER
    assert result.n_lower is not None and result.n_lower <= result.functions <= result.n_upper
    figures = evaluate(instance.parameters(), result.functions, result.memory_mb)
    assert result.time_s == pytest.approx(float(figures.time), rel=1e-12)
    assert result.cost_usd == pytest.approx(float(figures.cost), rel=1e-12)


def test_breaks_at_the_first_feasible_n(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    _, instance, result = shipped
    if result.found:
        assert result.functions is not None and result.memory_mb is not None
        if result.functions > 1:
            assert not _feasible(instance, result.functions - 1, result.memory_mb)
    last_n = min(result.n_upper, instance.max_functions)
    for bounds in result.bounds:
        if bounds.n_lower is None:
            assert bounds.plans_evaluated == 0
            continue
        stop = bounds.accepted_functions if bounds.accepted_functions is not None else last_n
        for functions in range(bounds.n_lower, stop):
            assert not _feasible(instance, functions, bounds.memory_mb), (bounds, functions)
        if bounds.accepted_functions is not None:
            assert _feasible(instance, bounds.accepted_functions, bounds.memory_mb)
            assert bounds.plans_evaluated == bounds.accepted_functions - bounds.n_lower + 1
        else:
            assert bounds.plans_evaluated == max(0, last_n - bounds.n_lower + 1)
    assert result.plans_evaluated == sum(bounds.plans_evaluated for bounds in result.bounds)


def test_keeps_the_cheapest_accepted_plan(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    _, instance, result = shipped
    params = instance.parameters()
    costs = [
        float(evaluate(params, bounds.accepted_functions, bounds.memory_mb).cost)
        for bounds in result.bounds
        if bounds.accepted_functions is not None
    ]
    assert result.found == bool(costs)
    if costs:
        assert result.cost_usd == min(costs)


def test_prototype_break_rule_is_never_costlier(
    shipped: tuple[dict[str, Any], Instance, Alg1Result],
) -> None:
    """Continuing past feasible-but-dearer plans (the prototype's code) can only help."""
    _, instance, result = shipped
    prototype = ldnn_alg1(instance, break_rule="prototype")
    assert prototype.found == result.found
    if result.found:
        assert prototype.cost_usd is not None and result.cost_usd is not None
        assert prototype.cost_usd <= result.cost_usd
        assert prototype.functions is not None and prototype.memory_mb is not None
        assert _feasible(instance, prototype.functions, prototype.memory_mb)
    assert prototype.plans_evaluated >= result.plans_evaluated


def test_ladder_is_clipped_to_the_platform() -> None:
    raw = yaml.safe_load((ROOT / "instances" / "mobilenet-cifar10.yaml").read_text("utf-8"))
    raw["platform"] = {
        "name": "small",
        "memory_mb": {"min": 256, "max": 1000, "step": 32},
        "price_per_gb_second": 0.0000166667,
        "price_per_request": 0.0000002,
        "timeout_s": 900,
        "timeout_margin_s": 30,
        "restart_overhead_s": 6,
        "max_concurrency": 10,
    }
    instance = load_instance(raw)
    result = ldnn_alg1(instance)
    assert result.memory_sizes_tried == tuple(range(256, 1000 + 1, 64))
    for bounds in result.bounds:
        if bounds.n_lower is not None:  # n never exceeds the platform's concurrency
            assert bounds.plans_evaluated <= max(0, 10 - bounds.n_lower + 1)


def test_paper_platform_gives_the_same_answer() -> None:
    """On the paper's own grid (128..3,008 step 64) the ladder is the whole platform."""
    path = ROOT / "instances" / "mobilenet-cifar10.yaml"
    today, paper = load_instance(path), load_instance(path, platform="aws-lambda-2020")
    assert memory_sizes(paper) == PUBLISHED_LADDER
    assert ldnn_alg1(paper) == ldnn_alg1(today)
