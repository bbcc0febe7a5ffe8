"""The reference every static planner is judged against: the best static plan in hindsight.

For each job, `hindsight` runs every candidate plan in the world under the job's own realised
randomness, the same for every plan and the same that every strategy's run of the job met
(common random numbers: `simulator.worlds.WorldRunner` keys a run by the seed and the job,
never by the plan), and keeps the cheapest that met the deadline. No static planner can do
better on that job with a plan among the candidates: the job's outcome under any static
strategy is one of these runs, started no earlier (a strategy may also wait in the pool or
run trials first).

The candidates (documented, not pruned by the model: the world does not obey the model's
bounds, so no bound of the model may rule a plan out):

* function counts `FUNCTION_LADDER` up to the instance's limit (and its largest global batch),
  each with `simulator.worlds.memory_choices(instance)`, ten sizes spread over the grid;
* every plan a strategy ran on the job in the same comparison (`extra`), so that hindsight
  meets every deadline a static strategy met.

Runs are cut short where the outcome is already known, which changes no answer: once a run
passes the deadline (it missed) or costs more than the cheapest plan that met it so far.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence, Set

from ..solver.instance import Instance
from ..solver.trace_file import Job
from .baselines import StrategyPlan
from .pool import JobOutcome, job_outcome
from .world import World, WorldRun
from .worlds import WorldRunner, memory_choices

__all__ = ["FUNCTION_LADDER", "candidates", "hindsight"]

FUNCTION_LADDER = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128)

Plan = tuple[int, int]  # (functions, memory_mb)


def candidates(instance: Instance, extra: Set[Plan] = frozenset()) -> list[Plan]:
    """The plans hindsight tries on a job of `instance`: `extra` first (a good incumbent
    early cuts the other runs short), then the ladder × the memory choices."""
    most = min(instance.max_functions, instance.workload.max_global_batch)
    ladder = [(n, m) for n in FUNCTION_LADDER if n <= most for m in memory_choices(instance)]
    first = sorted(extra)
    return first + [plan for plan in ladder if plan not in extra]


def best_in_hindsight(
    runner: WorldRunner, index: int, job: Job, extra: Set[Plan] = frozenset()
) -> tuple[Plan, WorldRun] | None:
    """The cheapest candidate that met job `index`'s deadline, with its run; None if none."""
    best: tuple[Plan, WorldRun] | None = None
    for functions, memory_mb in candidates(job.instance, extra):
        run = runner.run(index, job.instance, functions, memory_mb,
                         stop_after_s=job.deadline_s,
                         stop_above_usd=None if best is None else best[1].cost_usd)
        if run.finished and run.time_s <= job.deadline_s and (
            best is None or run.cost_usd < best[1].cost_usd
        ):
            best = ((functions, memory_mb), run)
    return best


def hindsight(
    jobs: Sequence[Job], world: World, *, seed: int,
    extra: Mapping[int, Set[Plan]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[JobOutcome]:
    """Each job's best static plan in hindsight, run from its submission (module docstring).
    A job no candidate meets is reported with status 'no-plan' and missed: it is outside the
    denominator of `met_of_hindsight_feasible`."""
    runner = WorldRunner(world, seed)
    outcomes = []
    for index, job in enumerate(jobs):
        found = best_in_hindsight(runner, index, job, (extra or {}).get(index, frozenset()))
        if found is None:
            plan = StrategyPlan(0, 0, math.inf, 0.0, 0, found=False)
            outcomes.append(job_outcome(
                index, job, plan, math.inf, time_s=math.inf, cost_usd=0.0, gb_seconds=0.0,
                restarts=0, failures=0, status="no-plan",
            ))
        else:
            (functions, memory_mb), run = found
            plan = StrategyPlan(functions, memory_mb, run.time_s, 0.0, 0, found=True)
            outcomes.append(job_outcome(
                index, job, plan, job.submit_time_s, time_s=run.time_s, cost_usd=run.cost_usd,
                gb_seconds=run.gb_seconds, restarts=run.restarts, failures=run.failures,
                status="ok",
            ))
        if progress is not None:
            progress(index + 1, len(jobs))
    return outcomes
