"""Strategies: every plan is valid under the model, and each model-based baseline does what
its name promises (largest memory at a PS-bound n; λDNN's Algorithm 1; Algorithm 1 with the
quantile test; `clairvoyant` sees the truth). The tuners are in tests/test_tuners.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lambdadnn import InputError, Instance, evaluate, load_instance
from lambdadnn.models import performance
from lambdadnn.models.noise import NoiseModel, planning_noise
from lambdadnn.simulator import baselines
from lambdadnn.simulator.baselines import (
    StrategyPlan,
    ldnn_alg1_q,
    max_functions,
    memory_range,
    naive,
)
from lambdadnn.simulator.defaults import (
    BASELINE_NAMES,
    BATCH_NAME,
    DEFAULT_GUARANTEE,
    HINDSIGHT_NAME,
    STRATEGY_NAMES,
    WORLD_ONLY_NAMES,
)
from lambdadnn.simulator.engine import TrialRun, simulate_trial
from lambdadnn.simulator.ldnn_alg1 import PUBLISHED_STEP_MB, n_upper
from lambdadnn.simulator.ldnn_alg1 import ldnn_alg1 as published_alg1
from lambdadnn.simulator.strategies import strategy
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.pipeline import solve

ROOT = Path(__file__).resolve().parent.parent
PATHS = sorted((ROOT / "instances").glob("*.yaml"))
NOISE = NoiseModel()


INSTANCES = [
    load_instance(path).with_deadline(deadline) for path in PATHS for deadline in (600, 1200)
]
IDS = [f"{i.name}-{i.objective.deadline_s:g}s" for i in INSTANCES]


def _assert_valid(
    instance: Instance, plan: StrategyPlan, *, model_prediction: bool = True
) -> None:
    assert plan.found
    figures = evaluate(instance, functions=plan.functions, memory_mb=plan.memory_mb)
    assert figures.valid, figures.violations
    assert 1 <= plan.functions <= instance.max_functions
    grid = instance.platform.memory
    assert grid.min_mb <= plan.memory_mb <= grid.max_mb
    assert (plan.memory_mb - grid.min_mb) % grid.step_mb == 0
    assert plan.memory_mb >= instance.min_memory_mb
    if model_prediction:
        assert plan.predicted_time_s == pytest.approx(figures.time_s)


def _measure(instance: Instance) -> Callable[[int, int, int, float, np.random.Generator], TrialRun]:
    """Trials as the pool runs them, here under the belief itself."""

    def measure(
        functions: int, memory_mb: int, iterations: int, max_s: float,
        rng: np.random.Generator,
    ) -> TrialRun:
        return simulate_trial(instance, functions, memory_mb, iterations=iterations,
                              max_s=max_s, noise=NOISE, rng=rng)

    return measure


def _plan(name: str, instance: Instance, seed: int = 0) -> StrategyPlan:
    return strategy(name)(instance, np.random.default_rng(seed), NOISE, _measure(instance))


# `siren` picks its first plan in the run, from the Situation (tests/test_siren.py);
# `lambdadnn-batch` and `hindsight` are no per-job planners.
@pytest.mark.parametrize("name", [name for name in STRATEGY_NAMES
                                  if name not in (BATCH_NAME, HINDSIGHT_NAME, "siren")])
@pytest.mark.parametrize("instance", INSTANCES, ids=IDS)
def test_every_strategy_plans_validly(name: str, instance: Instance) -> None:
    plan = _plan(name, instance)
    if not plan.found:  # only λDNN's Algorithm 1 may give up (ESPCN at short deadlines)
        assert name == "ldnn-alg1" and not published_alg1(instance).found
        assert (plan.functions, plan.memory_mb, plan.exploration_runs) == (0, 0, 0)
        return
    if name in ("power-tuning", "sample-search"):
        assert plan.exploration_runs > 0 and plan.trials
    # The tuners predict from their trials, lambdadnn its expected time under noise.
    _assert_valid(instance, plan, model_prediction=name in BASELINE_NAMES[:3])


def test_batch_is_no_per_job_strategy() -> None:
    """`lambdadnn-batch` plans the waiting jobs together: asking for it job by job is an
    error naming where it runs, never another planner in its place."""
    for name in (BATCH_NAME, HINDSIGHT_NAME):
        with pytest.raises(InputError, match="no per-job planner"):
            strategy(name)


def test_registry_names() -> None:
    """The CLI's light list of names (simulator.defaults): ours, the baselines, the planner
    told the truth, and those that run in the independent world only."""
    ours = ("lambdadnn", "lambdadnn-mean", "lambdadnn-adaptive", "lambdadnn-batch")
    assert (*ours, *BASELINE_NAMES, "clairvoyant", *WORLD_ONLY_NAMES) == STRATEGY_NAMES
    assert len(set(STRATEGY_NAMES)) == len(STRATEGY_NAMES)


@pytest.mark.parametrize("instance", INSTANCES[::2], ids=IDS[::2])
def test_naive_takes_the_largest_memory_and_n_up_to_the_ps_bound(instance: Instance) -> None:
    rng = np.random.default_rng(1)
    plans = [naive(instance, rng) for _ in range(200)]
    assert {plan.memory_mb for plan in plans} == {instance.platform.memory.max_mb}
    counts = {plan.functions for plan in plans}
    top = min(n_upper(instance), max_functions(instance))  # ⌊B_p/B_f^max⌋ = 14 here
    assert counts == set(range(1, top + 1))
    assert all(plan.exploration_runs == 0 and plan.exploration_cost_usd == 0 for plan in plans)


@pytest.mark.parametrize("instance", INSTANCES, ids=IDS)
def test_ldnn_alg1_wraps_the_published_port(instance: Instance) -> None:
    plan = baselines.ldnn_alg1(instance)
    result = published_alg1(instance)
    assert plan.found
    if result.found:
        assert (plan.functions, plan.memory_mb) == (result.functions, result.memory_mb)
        assert plan.predicted_time_s == pytest.approx(result.time_s)
    else:  # trained anyway, on the fastest plan of its own search space
        assert plan.memory_mb == max(result.memory_sizes_tried)
        assert plan.functions == min(result.n_upper, max_functions(instance))
    assert plan.exploration_runs == 0 and plan.exploration_cost_usd == 0


def test_no_valid_memory_means_no_plan() -> None:
    raw_rate = dataclasses.replace(INSTANCES[0].profile.rate, slope=0.0, intercept=-1.0)
    hopeless = dataclasses.replace(
        INSTANCES[0], profile=dataclasses.replace(INSTANCES[0].profile, rate=raw_rate)
    )
    assert memory_range(hopeless) is None
    for name in BASELINE_NAMES:
        plan = _plan(name, hopeless)
        assert not plan.found, name
        assert plan.exploration_runs == 0


@pytest.mark.parametrize("instance", INSTANCES, ids=IDS)
def test_alg1_q_tests_the_quantile_over_the_whole_memory_range(instance: Instance) -> None:
    """Its plan meets the deadline at lambdadnn's quantile, and lambdadnn's exact search is
    never more expensive; its ladder is Algorithm 1's (64 MB steps) up to 10,240 MB."""
    plan = ldnn_alg1_q(instance, NOISE, DEFAULT_GUARANTEE)
    _assert_valid(instance, plan)
    assert (plan.memory_mb - instance.platform.memory.min_mb) % PUBLISHED_STEP_MB == 0
    terms = planning_noise(NOISE, DEFAULT_GUARANTEE, instance.max_functions)
    result = published_alg1(instance, up_to_mb=10240, noise=terms)
    assert max(result.memory_sizes_tried) > 3008
    ours = solve(instance, guarantee=DEFAULT_GUARANTEE, noise=NOISE)
    if result.found:
        assert (plan.functions, plan.memory_mb) == (result.functions, result.memory_mb)
        quantile = performance.evaluate(
            instance.parameters(), plan.functions, plan.memory_mb, terms
        ).deadline_time
        assert result.time_s == pytest.approx(float(quantile))
        assert result.time_s <= instance.objective.deadline_s
        assert ours.status == "optimal" and ours.cost_usd <= result.cost_usd * (1 + 1e-12)


def test_alg1_q_differs_from_the_published_test() -> None:
    """The quantile test is stricter than the mean: on a binding deadline the plans differ."""
    instance = INSTANCES[IDS.index("mobilenet-cifar10-600s")]
    published = baselines.ldnn_alg1(instance)
    quantile = ldnn_alg1_q(instance, NOISE, DEFAULT_GUARANTEE)
    assert (published.functions, published.memory_mb) != (quantile.functions, quantile.memory_mb)


def test_clairvoyant_plans_with_the_truth_and_lambdadnn_does_not() -> None:
    instance = INSTANCES[IDS.index("mobilenet-cifar10-1200s")]
    truth = Truth(rate_scale=0.8, compute_cv=0.2)
    rng, measure = np.random.default_rng(0), _measure(instance)
    seer = strategy("clairvoyant", truth=truth)(instance, rng, NOISE, measure)
    belief = strategy("lambdadnn", truth=truth)(instance, rng, NOISE, measure)
    told = solve(truth.instance(instance), guarantee=DEFAULT_GUARANTEE, noise=truth.noise(NOISE))
    assert (seer.functions, seer.memory_mb) == (told.functions, told.memory_mb)
    mine = solve(instance, guarantee=DEFAULT_GUARANTEE, noise=NOISE)
    assert (belief.functions, belief.memory_mb) == (mine.functions, mine.memory_mb)
    assert (seer.functions, seer.memory_mb) != (belief.functions, belief.memory_mb)


def test_lambdadnn_mean_plans_the_models_optimum() -> None:
    instance = INSTANCES[IDS.index("1dcnn-imdb-600s")]
    plan = _plan("lambdadnn-mean", instance)
    exact = solve(instance)
    assert (plan.functions, plan.memory_mb) == (exact.functions, exact.memory_mb)
