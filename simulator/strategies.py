"""Every strategy the simulator compares, by name, built fresh for each run.

Strategies that learn (the tuners) keep state across the jobs of one run, so each run gets
new ones. `clairvoyant` is `lambdadnn` told the truth's model parameters: the instance and
noise the model-family engine really runs (`simulator.truth`). It is a static planner, not an
oracle: it still plans one plan from the model and can miss where a strategy that re-plans
does not. The reference every static planner is judged against is `hindsight`
(`simulator.hindsight`), in the independent world. Every other strategy sees only the belief.
`lambdadnn-adaptive` starts from `lambdadnn`'s plan and lets the controller
(`solver.adaptive`) re-plan the job at every check as it runs (`simulator.adaptive`, or
`simulator.replan` in the independent world), as do `replan-heuristic` and `siren` there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..inputs.errors import InputError
from ..inputs.files import brief
from ..models.noise import NoiseModel
from ..solver.errors import NoValidPlanError
from ..solver.instance import Instance
from ..solver.pipeline import solve
from .adaptive import AdaptiveRun, run_adaptive
from .baselines import (
    Measure,
    Strategy,
    StrategyPlan,
    ldnn_alg1,
    ldnn_alg1_q,
    naive,
)
from .defaults import (
    BATCH_NAME,
    DEFAULT_GUARANTEE,
    HINDSIGHT_NAME,
    STRATEGY_NAMES,
)
from .replan import Replanner
from .replanners import ControllerReplanner, ScaleOutReplanner
from .truth import Truth
from .tuners import PowerTuning, SampleSearch


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
        return StrategyPlan(plan.functions, plan.memory_mb, plan.time_s, 0.0, 0, found=True,
                            server=plan.solved_from.parameter_server if instance.servers
                            else None)

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

        def replanner() -> Replanner:
            return ControllerReplanner(instance, guarantee, noise)

        return dataclasses.replace(plan, adaptive=run, replanner=replanner) if plan.found else plan

    return plan_for


def scale_out_strategy(guarantee: float | None = DEFAULT_GUARANTEE) -> Strategy:
    """`lambdadnn`'s plan, with the job run under the scale-out autoscaler
    (`simulator.replanners.ScaleOutReplanner`): the independent world only."""
    static = lambdadnn_strategy(guarantee)

    def plan_for(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        plan = static(instance, rng, noise, measure)

        def replanner() -> Replanner:
            return ScaleOutReplanner(plan.functions, plan.memory_mb,
                                     float(instance.workload.samples))

        return dataclasses.replace(plan, replanner=replanner) if plan.found else plan

    return plan_for


def siren_strategy() -> Strategy:
    """The Siren-like deep-RL allocator (`simulator.siren`): it picks every epoch's plan,
    the first included, from what the run measured; the independent world only."""
    from .siren import SirenReplanner

    SirenReplanner.check()  # a missing policy is one line before any job runs

    def plan_for(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        return StrategyPlan(1, instance.platform.memory.min_mb, math.inf, 0.0, 0, found=True,
                            replanner=SirenReplanner)

    return plan_for


def check_names(names: Sequence[str], *, field: str = "strategies") -> None:
    """`InputError` unless `names` are one or more distinct strategies of `STRATEGY_NAMES`;
    `field` is what the message calls them (the CLI's `--strategies`)."""
    unknown = [name for name in names if name not in STRATEGY_NAMES]
    if unknown or not names:
        shown = brief(unknown[0]) if unknown else "none"
        raise InputError(
            f"`{field}` names {shown}, not a strategy; choose from {', '.join(STRATEGY_NAMES)}"
        )
    twice = [name for index, name in enumerate(names) if name in names[:index]]
    if twice:
        raise InputError(f"`{field}` names {twice[0]!r} twice; name each strategy once")


def strategy(
    name: str, *, guarantee: float = DEFAULT_GUARANTEE, truth: Truth | None = None
) -> Strategy:
    """A fresh planner registered under `name` (see `STRATEGY_NAMES`).

    `guarantee` is the quantile every strategy that plans for one uses (`lambdadnn`,
    `ldnn-alg1-q`, the tuners, `clairvoyant`); `truth` is told to `clairvoyant` only.
    """
    check_names([name], field="name")
    if name in (BATCH_NAME, HINDSIGHT_NAME):
        raise InputError(
            f"`name` {name!r} is no per-job planner (it plans the waiting jobs together, or "
            "judges the others in hindsight); run it with `simulator.compare.compare`"
        )
    if name in ("lambdadnn", "lambdadnn-mean", "clairvoyant"):
        return lambdadnn_strategy(
            None if name == "lambdadnn-mean" else guarantee,
            truth=(truth or Truth()) if name == "clairvoyant" else None,
        )
    if name == "lambdadnn-adaptive":
        return adaptive_strategy(guarantee)
    if name == "replan-heuristic":
        return scale_out_strategy(guarantee)
    if name == "siren":
        return siren_strategy()
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
