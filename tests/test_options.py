"""Each job's options for `solve_many`: the exact (time, cost) Pareto front, checked point by
point against `solve()` at the deadlines it answers."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from lambdadnn import fastest, load_instance, solve
from lambdadnn.solver import options as kept
from lambdadnn.solver.options import options
from lambdadnn.solver.shipped import instances_folder, platforms_folder
from tests import oracle

SHIPPED = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")


@pytest.mark.parametrize("guarantee", [None, 0.999])
@pytest.mark.parametrize("name", SHIPPED)
def test_front_answers_every_deadline_as_solve_does(name: str, guarantee: float | None) -> None:
    """The cheapest option within a deadline is `solve()`'s plan for it; the fastest option is
    the fastest plan; times rise and costs fall strictly along the front."""
    instance = load_instance(instances_folder() / f"{name}.yaml")
    front = options(instance, guarantee=guarantee, noise=None, max_functions=1000,
                    slowest_s=1200.0)
    assert len(front) > 1
    assert (np.diff(front.time_s) > 0).all() and (np.diff(front.cost_usd) < 0).all()
    assert front.time_s[-1] <= 1200.0
    quickest = fastest(instance, guarantee=guarantee)
    assert (front.functions[0], front.memory_mb[0]) == (quickest.functions, quickest.memory_mb)
    for deadline in np.linspace(front.time_s[0], 1200.0, 12):
        plan = solve(instance, deadline_s=float(deadline), guarantee=guarantee)
        k = int(np.searchsorted(front.time_s, deadline, side="right")) - 1
        assert plan.cost_usd == pytest.approx(front.cost_usd[k], rel=1e-12)
        assert plan.deadline_time_s <= deadline
        assert front.time_s[k] == pytest.approx(plan.deadline_time_s, rel=1e-12)


def test_function_limit_and_reuse_across_deadlines() -> None:
    """A cap on functions leaves only plans within it, and a front computed for a long
    deadline answers a shorter one exactly as a fresh computation does."""
    instance = load_instance(instances_folder() / "espcn-bsds500.yaml")
    capped = options(instance, guarantee=None, noise=None, max_functions=20, slowest_s=300.0)
    assert capped.functions.max() <= 20
    kept._fronts.clear()
    short = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=20.0)
    kept._fronts.clear()
    long = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=900.0)
    assert len(long) > len(short)
    within = options(instance, guarantee=None, noise=None, max_functions=1000, slowest_s=20.0)
    assert np.array_equal(short.time_s, within.time_s)
    assert np.array_equal(short.memory_mb, within.memory_mb)


def test_deadline_no_plan_meets_gives_no_option() -> None:
    instance = load_instance(instances_folder() / "resnet50-cifar10.yaml")
    assert len(options(instance, guarantee=None, noise=None, max_functions=1000,
                       slowest_s=10.0)) == 0


def _small_catalogue(types: dict[str, dict[str, float]], shards: int) -> dict[str, object]:
    """The shipped ResNet-50 on a coarse grid and a few functions (a brute force stays small),
    choosing among `types` at 1..`shards` shards."""
    mapping = yaml.safe_load((instances_folder() / "resnet50-cifar10.yaml").read_text())
    mapping["platform"] = {**yaml.safe_load(
        (platforms_folder() / f"{mapping['platform']}.yaml").read_text()),
        "memory_mb": {"min": 2432, "step": 256, "max": 10240}}
    mapping["limits"] = {"max_functions": 120}
    mapping["parameter_server"] = {"catalogue": {"types": types}, "function_bandwidth_mbps": 84,
                                   "max_shards": shards}
    return mapping


CATALOGUES = [
    ({"slow": {"bandwidth_mbps": 600, "price_per_hour": 0.05, "message_s": 0.0},
      "fast": {"bandwidth_mbps": 3125, "price_per_hour": 0.108, "message_s": 0.0}}, 4),
    ({"m5.large": {"bandwidth_mbps": 1200, "price_per_hour": 0.096, "message_s": 0.0005},
      "c5n.9xlarge": {"bandwidth_mbps": 6250, "price_per_hour": 1.944, "message_s": 0.0}}, 3),
]


@pytest.mark.parametrize(("types", "shards"), CATALOGUES)
def test_every_servers_plan_is_covered_by_its_front_or_beaten(
    types: dict[str, dict[str, float]], shards: int,
) -> None:
    """What the pricing's floors rest on, against the oracle's brute force: every plan of each
    server within the slowest time is covered by that server's front (one at least as fast
    and as cheap), or beaten by a plan on another server's front in time, cost and functions
    at once. The union of the fronts is the front over all the plans."""
    mapping = _small_catalogue(types, shards)
    instance = load_instance(mapping)
    slowest = 1200.0
    kept._fronts.clear()
    fronts = kept.kind_fronts(instance, guarantee=None, noise=None, max_functions=1000,
                              slowest_s=slowest)
    chosen = [s for i, s in enumerate(oracle.servers(mapping)) if not oracle.dominated(
        oracle.servers(mapping), i)]
    assert len(chosen) == len(fronts) > 1
    every: list[tuple[np.ndarray, ...]] = []
    for server in chosen:
        found = oracle.grid(server.problem)
        feasible = (found["valid"] > 0) & (found["time"] <= slowest)
        n = np.broadcast_to(np.asarray(found["functions"], dtype=np.float64), feasible.shape)
        every.append((found["time"][feasible], found["cost"][feasible], n[feasible]))
    for s, (time, cost, n) in enumerate(every):
        own = fronts[s]
        at = np.searchsorted(own.time_s, time * (1 + 1e-12), side="right") - 1
        covered = (at >= 0) & (np.where(at >= 0, own.cost_usd[np.maximum(at, 0)], np.inf)
                               <= cost * (1 + 1e-12))
        others = [f for k, f in enumerate(fronts) if k != s and len(f)]
        for other in others:
            left = np.flatnonzero(~covered)
            beats = ((other.time_s[None, :] <= time[left, None] * (1 + 1e-12))
                     & (other.cost_usd[None, :] < cost[left, None])
                     & (other.functions[None, :] <= n[left, None]))
            covered[left] |= beats.any(axis=1)
        assert covered.all(), (s, time[~covered][:3], cost[~covered][:3], n[~covered][:3])
    union = kept.merged(list(fronts))
    time = np.concatenate([t for t, _, _ in every])
    cost = np.concatenate([c for _, c, _ in every])
    order = np.lexsort((cost, time))
    best = np.minimum.accumulate(cost[order])
    at = np.searchsorted(time[order], union.time_s * (1 + 1e-12), side="right") - 1
    assert union.cost_usd == pytest.approx(best[at], rel=1e-12)  # each point the least there
