"""Every strategy the simulator compares, by name, built fresh for each run.

Strategies that learn (the tuners) keep state across the jobs of one run, so each run gets
new ones. `clairvoyant` is `lambdadnn` told the truth: the instance and noise the engine
really runs (`simulator.truth`). It is the floor no planner can beat at the same guarantee;
every other strategy sees only the belief. `lambdadnn-adaptive` starts from `lambdadnn`'s plan
and lets the controller (`solver.adaptive`) re-plan the job at every check as it runs
(`simulator.adaptive`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.adaptive import AdaptiveRun, run_adaptive
from lambdadnn.simulator.baselines import (
    Measure,
    Strategy,
    StrategyPlan,
    ldnn_alg1,
    ldnn_alg1_q,
    naive,
)
from lambdadnn.simulator.defaults import BATCH_NAME, DEFAULT_GUARANTEE, STRATEGY_NAMES
from lambdadnn.simulator.truth import Truth
from lambdadnn.simulator.tuners import PowerTuning, SampleSearch
from lambdadnn.solver.errors import InstanceError, NoValidPlanError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.pipeline import solve


def lambdadnn_strategy(
    guarantee: float | None = DEFAULT_GUARANTEE, *, truth: Truth | None = None
) -> Strategy:
    """Our planner: `solve()` with the guarantee (None: the model's mean), memoised per
    (instance, noise) as a scheduler would. No trial runs: the plan comes from the model.
    With `truth` it plans with the truth instead of the belief (`clairvoyant`). When no plan
    can meet the deadline the job still runs, on the fastest plan (and most likely misses)."""

    @lru_cache(maxsize=4096)
    def planned(instance: Instance, noise: NoiseModel) -> StrategyPlan:
        if truth is not None:
            instance, noise = truth.instance(instance), truth.noise(noise)
        try:
            plan = solve(instance, guarantee=guarantee, noise=noise if guarantee else None)
        except NoValidPlanError:
            return StrategyPlan(0, 0, 0.0, 0.0, 0, found=False)
        return StrategyPlan(plan.functions, plan.memory_mb, plan.time_s, 0.0, 0, found=True)

    def plan_for(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        return planned(instance, noise)

    return plan_for


def adaptive_strategy(guarantee: float | None = DEFAULT_GUARANTEE) -> Strategy:
    """`lambdadnn`'s first plan, with the job run under the controller, which re-plans it at
    every check from what the run measured (the pool calls `StrategyPlan.adaptive`)."""
    static = lambdadnn_strategy(guarantee)

    def plan_for(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        plan = static(instance, rng, noise, measure)

        def run(
            truth: Instance, true_noise: NoiseModel, budget_s: float,
            run_rng: np.random.Generator, max_functions: int,
        ) -> AdaptiveRun:
            return run_adaptive(
                instance, truth, true_noise, guarantee=guarantee, noise=noise,
                budget_s=budget_s, rng=run_rng, max_functions=max_functions,
            )

        return dataclasses.replace(plan, adaptive=run) if plan.found else plan

    return plan_for


def check_names(names: Sequence[str], *, field: str = "strategies") -> None:
    """`InstanceError` unless `names` are one or more distinct strategies of `STRATEGY_NAMES`;
    `field` is what the message calls them (the CLI's `--strategies`)."""
    unknown = [name for name in names if name not in STRATEGY_NAMES]
    if unknown or not names:
        shown = brief(unknown[0]) if unknown else "none"
        raise InstanceError(
            f"`{field}` names {shown}, not a strategy; choose from {', '.join(STRATEGY_NAMES)}"
        )
    twice = [name for index, name in enumerate(names) if name in names[:index]]
    if twice:
        raise InstanceError(f"`{field}` names {twice[0]!r} twice; name each strategy once")


def strategy(
    name: str, *, guarantee: float = DEFAULT_GUARANTEE, truth: Truth | None = None
) -> Strategy:
    """A fresh planner registered under `name` (see `STRATEGY_NAMES`).

    `guarantee` is the quantile every strategy that plans for one uses (`lambdadnn`,
    `ldnn-alg1-q`, the tuners, `clairvoyant`); `truth` is told to `clairvoyant` only.
    """
    check_names([name], field="name")
    if name == BATCH_NAME:
        raise InstanceError(
            f"`name` {name!r} plans the waiting jobs together, not one at a time; run it with "
            "`simulator.compare.compare` or `simulator.batch.run_batch`"
        )
    if name in ("lambdadnn", "lambdadnn-mean", "clairvoyant"):
        return lambdadnn_strategy(
            None if name == "lambdadnn-mean" else guarantee,
            truth=(truth or Truth()) if name == "clairvoyant" else None,
        )
    if name == "lambdadnn-adaptive":
        return adaptive_strategy(guarantee)
    if name == "power-tuning":
        return PowerTuning(guarantee)
    if name == "sample-search":
        return SampleSearch(guarantee)

    def plan_for(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        if name == "naive":
            return naive(instance, rng)
        if name == "ldnn-alg1":
            return ldnn_alg1(instance)
        return ldnn_alg1_q(instance, noise, guarantee)

    return plan_for
