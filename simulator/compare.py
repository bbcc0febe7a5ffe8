"""Strategies side by side on the same simulated jobs: who meets deadlines, at what price.

Every strategy sees the same trace, the same pool and, job by job, the same random draws
(`simulator.pool.run_trace` seeds each job from the run's seed and the job's index, and so
does `simulator.batch.run_batch` for `lambdadnn-batch`), so the differences in the report
come from the plans alone.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..inputs.errors import InputError
from ..models.noise import NoiseModel
from ..solver.trace_file import Job
from .batch import run_batch
from .defaults import (
    BATCH_NAME,
    DEFAULT_GUARANTEE,
    HINDSIGHT_NAME,
    WORLD_ONLY_NAMES,
)
from .hindsight import hindsight
from .pool import JobOutcome, json_ready, run_trace
from .strategies import check_names, strategy
from .truth import Truth
from .world import World

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class StrategyReport:
    """One strategy's results over a trace: the figures `lambdadnn compare` prints."""

    name: str
    jobs: int
    deadline_met: float
    total_cost_usd: float
    mean_cost_usd: float
    exploration_cost_usd: float
    mean_memory_gb: float
    gb_seconds: float
    mean_abs_prediction_error_s: float
    no_plan: int
    abandoned: int  # jobs stopped at the simulator's limits (`simulator.engine`, "Limits")
    seconds: float  # wall time to plan and simulate every job
    untrainable: int = 0  # jobs whose plan could not train where they ran: missed, cost 0
    # The 95% Wilson interval of `deadline_met` over the jobs (a binomial share, in [0, 1]).
    deadline_met_ci95: tuple[float, float] = (0.0, 1.0)
    # Against `hindsight` (`simulator.hindsight`), when it ran in the same comparison: the
    # share of the jobs it met that this strategy met too, and this strategy's cost ÷
    # hindsight's on the jobs both met (None without hindsight, or no such job).
    met_of_hindsight_feasible: float | None = None
    met_of_hindsight_feasible_ci95: tuple[float, float] | None = None
    cost_vs_hindsight: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_ready(asdict(self))


def summarise(
    name: str, outcomes: Sequence[JobOutcome], seconds: float = 0.0,
    reference: Sequence[JobOutcome] | None = None,
) -> StrategyReport:
    """Aggregate per-job outcomes; jobs a strategy could not plan count as missed, cost 0;
    abandoned jobs count as missed, with what they ran, and without a prediction error, as do
    jobs run on a plan the strategy predicted would never end. `reference`: hindsight's
    outcomes of the same jobs, for the figures measured against it."""
    ran = [o for o in outcomes if o.status in ("ok", "abandoned")]
    met = sum(o.met_deadline for o in outcomes)
    against: dict[str, Any] = {}
    if reference is not None:
        feasible = [i for i, o in enumerate(reference) if o.met_deadline]
        both = [i for i in feasible if outcomes[i].met_deadline]
        ours = sum(outcomes[i].cost_usd + outcomes[i].exploration_cost_usd for i in both)
        theirs = sum(reference[i].cost_usd for i in both)
        against = {
            "met_of_hindsight_feasible": len(both) / len(feasible) if feasible else None,
            "met_of_hindsight_feasible_ci95": wilson(len(both), len(feasible))
            if feasible else None,
            "cost_vs_hindsight": ours / theirs if theirs > 0 else None,
        }
    total = sum(o.cost_usd + o.exploration_cost_usd for o in outcomes)
    errors = [abs(o.predicted_time_s - o.time_s) for o in ran
              if o.status == "ok" and math.isfinite(o.predicted_time_s)]
    return StrategyReport(
        name=name,
        jobs=len(outcomes),
        deadline_met=met / max(1, len(outcomes)),
        total_cost_usd=total,
        mean_cost_usd=total / max(1, len(outcomes)),
        exploration_cost_usd=sum(o.exploration_cost_usd for o in outcomes),
        mean_memory_gb=statistics.fmean(o.functions * o.memory_mb / 1024 for o in ran)
        if ran else 0.0,
        gb_seconds=sum(o.gb_seconds for o in ran),
        mean_abs_prediction_error_s=statistics.fmean(errors) if errors else 0.0,
        no_plan=sum(o.status == "no-plan" for o in outcomes),
        abandoned=sum(o.status == "abandoned" for o in outcomes),
        seconds=seconds,
        untrainable=sum(o.status == "untrainable" for o in outcomes),
        deadline_met_ci95=wilson(met, len(outcomes)),
        **against,
    )


@dataclass(frozen=True)
class Comparison:
    """Per strategy, in the order asked: every job's outcome and the wall seconds it took."""

    outcomes: dict[str, list[JobOutcome]]
    seconds: dict[str, float]

    @property
    def hindsight_feasible(self) -> int | None:
        """The jobs hindsight met: the denominator of `met_of_hindsight_feasible`."""
        reference = self.outcomes.get(HINDSIGHT_NAME)
        return None if reference is None else sum(o.met_deadline for o in reference)

    def reports(self) -> list[StrategyReport]:
        reference = self.outcomes.get(HINDSIGHT_NAME)
        return [summarise(name, runs, self.seconds[name], reference)
                for name, runs in self.outcomes.items()]


def compare(
    jobs: Sequence[Job], names: Sequence[str], *, seed: int, noise: NoiseModel,
    pool_size: int, guarantee: float = DEFAULT_GUARANTEE, truth: Truth | None = None,
    world: World | None = None, progress: Callable[[str], Progress] | None = None,
) -> Comparison:
    """Run every named strategy over the same jobs (each with a fresh planner cache).

    Planners see each job's instance and `noise` (the belief). The model-family engine runs
    the jobs under `truth` (default: exactly the belief); given `world`, the independent
    engine runs them in it instead (`simulator.world`), and `hindsight` may be named: it runs
    last, so that every plan another strategy ran on a job is among its candidates.
    """
    check_engine(names, truth=truth, world=world)
    outcomes: dict[str, list[JobOutcome]] = {}
    seconds: dict[str, float] = {}
    for name in [n for n in names if n != HINDSIGHT_NAME] + [
        n for n in names if n == HINDSIGHT_NAME
    ]:
        started = time.perf_counter()
        if name == BATCH_NAME:  # the waiting jobs planned together, not one at a time
            outcomes[name] = run_batch(
                jobs, pool_size=pool_size, noise=noise, seed=seed, guarantee=guarantee,
                truth=truth, progress=progress(name) if progress else None,
            )
        elif name == HINDSIGHT_NAME:
            assert world is not None
            extra: dict[int, set[tuple[int, int]]] = {}
            for runs in outcomes.values():
                for index, outcome in enumerate(runs):
                    if outcome.status != "no-plan":
                        extra.setdefault(index, set()).add(
                            (outcome.functions, outcome.memory_mb))
            outcomes[name] = hindsight(jobs, world, seed=seed, extra=extra,
                                       progress=progress(name) if progress else None)
        else:
            outcomes[name] = run_trace(
                jobs, strategy(name, guarantee=guarantee, truth=truth), pool_size=pool_size,
                noise=noise, seed=seed, truth=truth, world=world,
                progress=progress(name) if progress else None,
            )
        seconds[name] = time.perf_counter() - started
    return Comparison({name: outcomes[name] for name in names},
                      {name: seconds[name] for name in names})


def check_engine(names: Sequence[str], *, truth: Truth | None, world: World | None) -> None:
    """`InputError` (one line, with the fix) unless every strategy named runs in the
    engine chosen: the model-family engine (`truth`) or the independent world (`world`)."""
    check_names(names)
    if world is None:
        alone = [name for name in names if name in WORLD_ONLY_NAMES]
        if alone:
            raise InputError(
                f"`--strategies` names {alone[0]!r}, which runs in the independent world only; "
                "add `--truth-file` with a world (e.g. instances/worlds/nominal.yaml)"
            )
        return
    if truth is not None and truth.changed():
        raise InputError(
            "`--truth` and `--truth-file` both set the truth; give the world's effects in the "
            "file alone"
        )
    for name, why in ((BATCH_NAME, "plans through the model-family engine"),
                      ("clairvoyant", "is told the truth's model parameters, which a world has "
                       "not; `hindsight` is the world's reference")):
        if name in names:
            raise InputError(
                f"`--strategies` names {name!r}, which {why}; drop it with `--truth-file`"
            )


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial share: always within [0, 1], and never of
    zero width when 0 < trials (unlike the normal approximation at 0% or 100%)."""
    if trials == 0:
        return (0.0, 1.0)
    from scipy.stats import binomtest

    found = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return (max(0.0, float(found.low)), min(1.0, float(found.high)))
