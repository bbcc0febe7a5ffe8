"""The derived bounds: sound (the brute-force answer always lies inside) and tight."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given

from lambdadnn import Instance, NoValidPlanError, deadline_crossings, load_instance, solve
from lambdadnn.models.bounds import box
from lambdadnn.models.performance import figures
from tests.oracle import Problem, around_deadline, brute_force, grid, read
from tests.strategies import instance_mappings

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))


def instance_box(instance: Instance) -> Any:
    return box(
        instance.values(), instance.platform.memory.values(),
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
    answers = around_deadline(mapping)
    derived = instance_box(instance)
    if answers[0].status == "none":
        assert derived is None
        return
    bounds = derived.bounds
    # A plan within rounding of the deadline (one drawn at a plan's time) may count either way.
    assert any(
        (answer.status == "optimal") == bounds.deadline_met
        and bounds.n_min <= (answer.functions or 0) <= bounds.n_max
        and bounds.m_min <= (answer.memory_mb or 0) <= bounds.m_max
        for answer in answers
    ), (bounds, answers)
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
    choice = bool(load_instance(path).servers)  # a line on how the servers were searched
    assert len(plan.bounds.derivations) == 5 + choice
    assert plan.bounds.derivations[-1].startswith("cost: ")
    assert plan.bounds.derivations[-3].startswith("servers: ") == choice


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
    hopeless = dataclasses.replace(
        mapping, workload=dataclasses.replace(mapping.workload, min_memory_mb=20_000.0))
    assert instance_box(hopeless) is None
    with pytest.raises(NoValidPlanError, match=r"`workload\.min_memory_mb`"):
        solve(hopeless)


def regime_roots(p: Problem, memory_mb: float) -> list[tuple[float, float]]:
    """Where T_train(n, memory_mb) = T_o, by hand: in each (batch, communication) regime
    T_train = a/n + b + c·n (k shards: k·B_p shared), so the roots of c·n² + (b − T_o)·n + a
    = 0 that lie in the regime. Each root comes with its relative distance to the nearest
    regime boundary."""
    rate = p.alpha1 * min(memory_mb, p.m_sat) + p.beta1
    storage = min(p.alpha2 * memory_mb + p.beta2, p.b_s)
    work, n_batch, n_comm = p.n_t * p.e, p.b_gmax / p.b_lf, p.shards * p.b_p / p.b_fmax
    shared = p.shards * p.b_p  # the k shards' links together
    found = []
    for fixed_local in (True, False):
        for function_bound in (True, False):
            a, b, c = p.d_t / storage + work / rate, 0.0, 0.0  # load and compute: ∝ 1/n
            batch = p.b_lf if fixed_local else p.b_gmax  # k = work / (n·b_lf) or work / b_gmax
            comm = 2 * work * p.d_m / batch
            if fixed_local and function_bound:
                a += comm / p.b_fmax
            elif fixed_local or function_bound:
                b += comm / (shared if fixed_local else p.b_fmax)
            else:
                c += comm / shared
            # k·2(λ + shards·c_msg): ∝ 1/n with a fixed local batch
            latency = 2 * work * (p.latency_s + p.shards * p.message_s) / batch
            if fixed_local:
                a += latency
            else:
                b += latency
            b -= p.deadline_s
            if c == 0:
                roots = [a / -b] if b < 0 else []
            else:
                disc = b * b - 4 * a * c
                roots = [] if disc < 0 else [(-b - s * math.sqrt(disc)) / (2 * c) for s in (1, -1)]
            for n in roots:
                if n > 0 and (n <= n_batch) == fixed_local and (n <= n_comm) == function_bound:
                    found.append((n, min(abs(n - n_batch) / n, abs(n - n_comm) / n)))
    return found


@given(instance_mappings())
def test_closed_forms_solve_the_deadline_equation(mapping: dict[str, Any]) -> None:
    """Property: the per-regime roots n* of T_train(n, m_max) = T_o are the ones worked out by
    hand from the oracle's reading (`regime_roots`), put back into the model they give
    T_train = T_o, and the sign of T_train − T_o, sampled by the oracle over n from 10^-3 to
    10^7, changes only across a root: with no root, T_train stays on one side of T_o."""
    instance = load_instance(mapping)
    derived = instance_box(instance)
    if derived is None:
        assert brute_force(mapping).status == "none"
        return
    values = instance.values()
    deadline = instance.objective.deadline_s
    m_max = derived.bounds.m_max
    crossings = [c.functions for c in deadline_crossings(instance, memory_mb=m_max)]
    for n in crossings:
        t_train = figures(values, n, m_max, ("t_train",))
        assert float(t_train["t_train"]) == pytest.approx(deadline, rel=1e-6)
    by_hand = regime_roots(read(mapping), m_max)
    # A root within rounding of a regime boundary may be kept by either regime, or by both.
    strict = [n for n, off_boundary in by_hand if off_boundary > 1e-9]
    assert len(strict) <= len(crossings) <= len(by_hand), (crossings, by_hand)
    for n in strict:
        assert any(got == pytest.approx(n, rel=1e-6) for got in crossings), (n, crossings)
    for got in crossings:
        assert any(got == pytest.approx(n, rel=1e-6) for n, _ in by_hand), (got, by_hand)
    n = np.geomspace(1e-3, 1e7, 4001)
    excess = grid(mapping, n[:, None], np.array([[m_max]]))["time_train"][:, 0] - deadline
    clear = np.abs(excess) > 1e-9 * deadline  # a sign within rounding of T_o says nothing
    n, side = n[clear], excess[clear] > 0
    changes = np.flatnonzero(side[1:] != side[:-1])
    assert len(changes) <= len(crossings), (n[changes], crossings)  # none without a root
    for i in changes:
        assert any(n[i] <= got <= n[i + 1] for got in crossings), (n[i], n[i + 1], crossings)


@pytest.mark.parametrize("path", SHIPPED)
def test_exact_n_bounds_lie_within_the_closed_forms(path: str) -> None:
    """On λDNN's workloads T_train falls, then rises once the PS is shared: two crossings,
    and the exact bounds (restarts included) sit inside them."""
    bounds = solve(path).bounds
    low, high = deadline_crossings(path, memory_mb=bounds.m_max)
    assert math.ceil(low.functions) <= bounds.n_min
    assert bounds.n_max <= math.floor(high.functions)
    assert high.regime == "fixed-global batch, PS-bound"
