"""The hindsight oracle: the best static plan of each job under the job's own luck.

Its claim is that no static strategy beats it on a job: whatever a static strategy ran, and
met, hindsight ran too (the plan is among its candidates) under the very same randomness, so
it met as well and paid no more. Checked on random worlds, where a hindsight that drew fresh
luck per plan (no common random numbers) would be caught paying more than a strategy for the
same plan, or missing where the strategy met.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.compare import compare
from lambdadnn.simulator.hindsight import FUNCTION_LADDER, best_in_hindsight, candidates
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.world import World
from lambdadnn.simulator.worlds import WorldRunner, memory_choices

STATIC = ("lambdadnn", "naive", "ldnn-alg1", "sample-search")


def _jobs(seed: int, count: int = 6) -> list[Any]:
    """A short trace over the shipped workloads, at one epoch a job so a test stays quick."""
    import dataclasses

    return [dataclasses.replace(job, instance=dataclasses.replace(
        job.instance, workload=dataclasses.replace(job.instance.workload, epochs=1)))
        for job in generate_trace(count, seed=seed)]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """A world with a random selection of the effects that make luck matter."""
    mapping: dict[str, Any] = {"name": "random"}
    if draw(st.booleans()):
        mapping["stragglers"] = {
            "cv": draw(st.floats(0.05, 0.5)),
            "tail": {"kind": "pareto", "shape": draw(st.floats(1.2, 3.0)),
                     "share": draw(st.floats(0.0, 0.1))},
        }
    if draw(st.booleans()):
        mapping["bandwidth"] = {"scale": draw(st.floats(0.5, 1.2)), "drift": {
            "kind": "ar1", "sd": draw(st.floats(0.05, 0.6)),
            "period_s": draw(st.floats(10.0, 120.0))}}
    if draw(st.booleans()):
        mapping["crashes"] = {"rate_per_h": draw(st.floats(0.0, 20.0))}
    if draw(st.booleans()):
        mapping["cold_start"] = {"base_s": draw(st.floats(0.0, 3.0)),
                                 "per_gb_s": draw(st.floats(0.0, 0.5)), "cv": 0.3}
    if draw(st.booleans()):
        mapping["cpu"] = {"mb_per_vcpu": 1769, "max_vcpu": 6,
                          "parallel_fraction": draw(st.floats(0.2, 1.0))}
    if draw(st.booleans()):
        mapping["ps"] = {"nic_mbps": draw(st.floats(300.0, 2000.0)),
                         "per_message_ms": draw(st.floats(0.0, 5.0)),
                         "service": draw(st.sampled_from(["fifo", "fair"]))}
    return World.from_mapping(mapping)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), seed=st.integers(0, 10_000))
def test_hindsight_dominates_every_static_strategy(world: World, seed: int) -> None:
    """Property: on every job, if a static strategy met the deadline then hindsight met it
    too, at a cost no higher than the strategy's run (exploration aside); so hindsight meets
    at least as many deadlines as each of them."""
    jobs = _jobs(seed)
    comparison = compare(jobs, [*STATIC, "hindsight"], seed=seed, noise=NoiseModel(),
                         pool_size=50_000, world=world)
    best = comparison.outcomes["hindsight"]
    for name in STATIC:
        for ours, theirs in zip(best, comparison.outcomes[name], strict=True):
            if theirs.met_deadline:
                assert ours.met_deadline, (name, theirs)
                assert ours.cost_usd <= theirs.cost_usd * (1 + 1e-12), (name, ours, theirs)
        met = sum(o.met_deadline for o in comparison.outcomes[name])
        assert comparison.hindsight_feasible is not None
        assert comparison.hindsight_feasible >= met


def test_hindsight_is_the_cheapest_candidate_that_meets() -> None:
    """The oracle's answer equals an exhaustive run of every candidate, none cut short."""
    job = _jobs(3, count=1)[0]
    world = World.from_mapping({"stragglers": {"cv": 0.3}})
    runner = WorldRunner(world, seed=5)
    found = best_in_hindsight(runner, 0, job)
    runs = {plan: runner.run(0, job.instance, *plan) for plan in candidates(job.instance)}
    met = {plan: run for plan, run in runs.items()
           if run.finished and run.time_s <= job.deadline_s}
    if not met:
        assert found is None
        return
    assert found is not None
    cheapest = min(met.values(), key=lambda run: run.cost_usd)
    assert found[1].cost_usd == cheapest.cost_usd


def test_candidates_put_the_strategies_plans_first_and_respect_the_limits() -> None:
    job = _jobs(1, count=1)[0]
    extra = {(7, 1000), (3, 2000)}
    plans = candidates(job.instance, extra)
    assert plans[:2] == sorted(extra)
    assert len(plans) == len(set(plans))
    most = min(job.instance.max_functions, job.instance.workload.max_global_batch)
    ladder = [n for n in FUNCTION_LADDER if n <= most]
    assert {(n, m) for n in ladder for m in memory_choices(job.instance)} <= set(plans)
    assert all(n <= most for n, _ in plans[2:])


def test_hindsight_meets_the_same_luck_as_the_strategies() -> None:
    """With one possible plan (one function, one memory size), hindsight's run of a job is
    the strategy's run of it, draw for draw: the same time and cost to the last bit, in a
    world where every run differs (stragglers, drift, crashes)."""
    import dataclasses

    from lambdadnn.solver.trace_file import Job

    base = _jobs(0, count=1)[0].instance
    grid = dataclasses.replace(base.platform.memory, min_mb=3008, max_mb=3008)
    instance = dataclasses.replace(
        base, platform=dataclasses.replace(base.platform, memory=grid),
        limits=dataclasses.replace(base.limits, max_functions=1),
        workload=dataclasses.replace(base.workload, samples=2_000),
    )
    jobs = [Job(float(i), instance.name, 1, 10_000.0, instance) for i in range(5)]
    world = World.from_mapping({
        "stragglers": {"cv": 0.4}, "crashes": {"rate_per_h": 30.0},
        "bandwidth": {"drift": {"kind": "ar1", "sd": 0.5, "period_s": 5.0}},
    })
    comparison = compare(jobs, ["lambdadnn", "hindsight"], seed=9, noise=NoiseModel(),
                         pool_size=50_000, world=world)
    ours, best = comparison.outcomes["lambdadnn"], comparison.outcomes["hindsight"]
    assert len({o.cost_usd for o in ours}) == len(ours), "the world gives each job its own luck"
    for strategy_run, hindsight_run in zip(ours, best, strict=True):
        assert (hindsight_run.functions, hindsight_run.memory_mb) == (1, 3008)
        assert hindsight_run.time_s == strategy_run.time_s
        assert hindsight_run.cost_usd == strategy_run.cost_usd
