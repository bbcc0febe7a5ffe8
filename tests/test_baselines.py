"""Baselines: every plan is valid under the model, trial runs are paid for, each strategy does
what its name promises (largest memory; λDNN's Algorithm 1; a memory sweep; a sampled search)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from lambdadnn import Instance, InstanceError, evaluate, load_instance
from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator import baselines
from lambdadnn.simulator.baselines import (
    POWER_TUNING_MEMORIES,
    STRATEGIES,
    StrategyPlan,
    max_functions,
    memory_range,
    naive,
    power_tuning,
    sample_search,
)
from lambdadnn.simulator.defaults import BASELINE_NAMES, STRATEGY_NAMES
from lambdadnn.simulator.engine import JobRun, simulate_job
from lambdadnn.simulator.ldnn_alg1 import ldnn_alg1 as published_alg1

ROOT = Path(__file__).resolve().parent.parent
PATHS = sorted((ROOT / "instances").glob("*.yaml"))
NOISE = NoiseModel()


def _with_deadline(instance: Instance, deadline_s: float) -> Instance:
    objective = dataclasses.replace(instance.objective, deadline_s=deadline_s)
    return dataclasses.replace(instance, objective=objective)


INSTANCES = [
    _with_deadline(load_instance(path), deadline) for path in PATHS for deadline in (600, 1200)
]
IDS = [f"{i.name}-{i.objective.deadline_s:g}s" for i in INSTANCES]


@pytest.fixture
def trials(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, JobRun]]:
    """Every trial run the strategies make, recorded around the real engine."""
    seen: list[tuple[int, int, JobRun]] = []

    def recording(
        instance: Instance, functions: int, memory_mb: int, *, noise: NoiseModel,
        rng: np.random.Generator,
    ) -> JobRun:
        run = simulate_job(instance, functions, memory_mb, noise=noise, rng=rng)
        seen.append((functions, memory_mb, run))
        return run

    monkeypatch.setattr(baselines, "simulate_job", recording)
    return seen


def _assert_valid(instance: Instance, plan: StrategyPlan) -> None:
    assert plan.found
    figures = evaluate(instance, functions=plan.functions, memory_mb=plan.memory_mb)
    assert figures.valid, figures.violations
    assert 1 <= plan.functions <= instance.max_functions
    grid = instance.platform.memory
    assert grid.min_mb <= plan.memory_mb <= grid.max_mb
    assert (plan.memory_mb - grid.min_mb) % grid.step_mb == 0
    assert plan.memory_mb >= instance.min_memory_mb
    assert plan.predicted_time_s == pytest.approx(figures.time_s)


def _paid(instance: Instance, runs: list[tuple[int, int, JobRun]]) -> float:
    """What the trials cost: each run stopped at the deadline, paid pro rata."""
    deadline = instance.objective.deadline_s
    return sum(run.cost_usd * min(1.0, deadline / run.time_s) for *_, run in runs)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("instance", INSTANCES, ids=IDS)
def test_every_strategy_plans_validly(name: str, instance: Instance) -> None:
    plan = STRATEGIES[name](instance, np.random.default_rng(0), NOISE)
    if not plan.found:  # only λDNN's Algorithm 1 may give up (ESPCN at short deadlines)
        assert name == "ldnn-alg1" and not published_alg1(instance).found
        assert (plan.functions, plan.memory_mb, plan.exploration_runs) == (0, 0, 0)
        return
    _assert_valid(instance, plan)


def test_registry_names() -> None:
    """The CLI's light list of names (simulator.defaults) is the registry's, in order."""
    assert tuple(STRATEGIES) == BASELINE_NAMES
    assert ("lambdadnn", *STRATEGIES) == STRATEGY_NAMES


@pytest.mark.parametrize("instance", INSTANCES[::2], ids=IDS[::2])
def test_naive_takes_the_largest_memory_and_a_random_n(instance: Instance) -> None:
    rng = np.random.default_rng(1)
    plans = [naive(instance, rng) for _ in range(40)]
    assert {plan.memory_mb for plan in plans} == {instance.platform.memory.max_mb}
    counts = {plan.functions for plan in plans}
    assert len(counts) > 5 and max(counts) <= max_functions(instance)
    assert all(plan.exploration_runs == 0 and plan.exploration_cost_usd == 0 for plan in plans)


@pytest.mark.parametrize("instance", INSTANCES, ids=IDS)
def test_ldnn_alg1_wraps_the_published_port(instance: Instance) -> None:
    plan = baselines.ldnn_alg1(instance, np.random.default_rng(0))
    result = published_alg1(instance)
    assert plan.found
    if result.found:
        assert (plan.functions, plan.memory_mb) == (result.functions, result.memory_mb)
        assert plan.predicted_time_s == pytest.approx(result.time_s)
    else:  # trained anyway, on the fastest plan of its own search space
        assert plan.memory_mb == max(result.memory_sizes_tried)
        assert plan.functions == min(result.n_upper, max_functions(instance))
    assert plan.exploration_runs == 0 and plan.exploration_cost_usd == 0


def test_power_tuning_sweeps_memory_at_a_fixed_n_and_pays_for_it(
    trials: list[tuple[int, int, JobRun]],
) -> None:
    instance = INSTANCES[IDS.index("mobilenet-cifar10-1200s")]
    plan = power_tuning(instance, np.random.default_rng(2), noise=NOISE)
    _assert_valid(instance, plan)
    assert [m for _, m, _ in trials] == list(POWER_TUNING_MEMORIES)
    (n,) = {n for n, _, _ in trials}
    # n: the smallest count with which the largest size meets the deadline in the model
    assert evaluate(instance, functions=n, memory_mb=10240).feasible
    assert n == 1 or not evaluate(instance, functions=n - 1, memory_mb=10240).feasible
    assert plan.exploration_runs == len(trials)
    assert plan.exploration_cost_usd == pytest.approx(_paid(instance, trials))
    met = [(run.cost_usd, m) for _, m, run in trials if run.time_s <= 1200]
    assert met and plan.memory_mb == min(met)[1] and plan.functions == n


def test_power_tuning_clips_to_the_grid_and_skips_sizes_that_cannot_train(
    trials: list[tuple[int, int, JobRun]],
) -> None:
    resnet = load_instance("instances/resnet50-cifar10.yaml", platform="aws-lambda-2020")
    plan = power_tuning(resnet, np.random.default_rng(3), noise=NOISE, functions=8)
    _assert_valid(resnet, plan)
    # below m_min (2,432 MB) clipped up to it; above the 2020 platform's 3,008 MB clipped down
    assert sorted({m for _, m, _ in trials}) == [2432, 3008]
    assert plan.exploration_runs == 2 and plan.functions == 8
    trials.clear()
    espcn = INSTANCES[IDS.index("espcn-bsds500-1200s")]
    plan = power_tuning(espcn, np.random.default_rng(3), noise=NOISE)
    low = memory_range(espcn)  # R = 0.001·m − 2.3 turns positive at ≈ 2,300 MB
    assert low is not None and 2300 <= low[0] <= 2301
    assert evaluate(espcn, functions=1, memory_mb=low[0]).valid
    assert not evaluate(espcn, functions=1, memory_mb=low[0] - 1).valid
    assert [m for _, m, _ in trials] == [3008, 4096, 6144, 8192, 10240]
    _assert_valid(espcn, plan)


def test_power_tuning_rejects_an_invalid_n() -> None:
    with pytest.raises(InstanceError, match="functions"):
        power_tuning(INSTANCES[0], np.random.default_rng(0), noise=NOISE, functions=10_000)


@pytest.mark.parametrize("budget", [1, 5])
def test_sample_search_spends_its_budget_and_keeps_the_best_observed(
    trials: list[tuple[int, int, JobRun]], budget: int,
) -> None:
    instance = INSTANCES[IDS.index("1dcnn-imdb-600s")]
    plan = sample_search(instance, np.random.default_rng(4), noise=NOISE, budget=budget)
    _assert_valid(instance, plan)
    assert plan.exploration_runs == len(trials) == budget
    assert plan.exploration_cost_usd == pytest.approx(_paid(instance, trials))
    met = [(run.cost_usd, n, m) for n, m, run in trials if run.time_s <= 600]
    if met:
        assert (plan.functions, plan.memory_mb) == min(met)[1:]
    else:
        fastest = min(trials, key=lambda trial: trial[2].time_s)
        assert (plan.functions, plan.memory_mb) == fastest[:2]
    low, high = memory_range(instance) or (0, 0)
    assert all(low <= m <= high and 1 <= n <= max_functions(instance) for n, m, _ in trials)


def test_sample_search_is_seeded() -> None:
    instance = INSTANCES[0]
    first = sample_search(instance, np.random.default_rng(9), noise=NOISE, budget=3)
    assert sample_search(instance, np.random.default_rng(9), noise=NOISE, budget=3) == first


def test_sample_search_rejects_a_bad_budget() -> None:
    with pytest.raises(InstanceError, match="budget"):
        sample_search(INSTANCES[0], np.random.default_rng(0), noise=NOISE, budget=0)


def test_no_valid_memory_means_no_plan() -> None:
    raw_rate = dataclasses.replace(INSTANCES[0].profile.rate, slope=0.0, intercept=-1.0)
    hopeless = dataclasses.replace(
        INSTANCES[0], profile=dataclasses.replace(INSTANCES[0].profile, rate=raw_rate)
    )
    assert memory_range(hopeless) is None
    for name, strategy in STRATEGIES.items():
        plan = strategy(hopeless, np.random.default_rng(0), NOISE)
        assert not plan.found, name
        assert plan.exploration_runs == 0
