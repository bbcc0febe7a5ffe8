"""The bridge between lambdadnn's instances and the independent world (`simulator.world`).

The world imports nothing from the model or the solver, so something has to hand it a job as
plain numbers: `job_spec` copies the figures an instance states (its workload, profile,
parameter server and platform), never a quantity the model derives from them. `load_world`
reads a world file and turns the world's own `WorldError` into the `WorldFileError` every
caller of lambdadnn catches. `WorldRunner` runs a trace's jobs in one world, each under its
own realised randomness keyed by (seed, job index), so every strategy, and the hindsight
oracle, meets the same luck on the same job (common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs.errors import InstanceError, WorldFileError
from ..solver.instance import Instance
from ..solver.shipped import named, worlds_folder
from .engine import TrialRun, message_cost, shard_count
from .replan import ReplannedRun, Replanner, run_replanned
from .world import JobSpec, World, WorldError, WorldRun, run_plan, trial

__all__ = [
    "Rehearsal", "WorldRunner", "job_spec", "load_world", "memory_choices", "rehearse",
]

_RUN_STREAM, _TRIAL_STREAM = 1, 2
# The memory sizes a re-planner or the hindsight oracle chooses among: at most this many,
# evenly spread over the platform's grid (a coarse grid, as a person would try).
MEMORY_CHOICES = 10


def load_world(source: str | Path | World | None) -> World:
    """The world of a `--truth-file`: a path, else the name of a shipped world
    (`instances/worlds/NAME.yaml`, e.g. `degraded`); a `World` as is; `World()` for None."""
    if source is None:
        return World()
    if isinstance(source, World):
        return source
    path = Path(source)
    if not path.exists():
        path = named(worlds_folder(), str(source)) or path
    try:
        return World.load(path)
    except WorldError as error:
        raise WorldFileError(f"`--truth-file`: {error}") from None


def job_spec(instance: Instance) -> JobSpec:
    """The instance's stated numbers, as the world takes them (a bad shard count or message
    cost is refused, as the planner's engine refuses it, with `InstanceError`)."""
    # Checked before the cache: `shards=True` equals `shards=1` as a key.
    shards, message_s = shard_count(instance), message_cost(instance)
    return _job_spec(instance, shards, message_s)


@lru_cache(maxsize=4096)  # a trace has few distinct instances; every run asks
def _job_spec(instance: Instance, shards: int, message_s: float) -> JobSpec:
    workload, profile = instance.workload, instance.profile
    rate, storage, ps = profile.rate, profile.storage_bandwidth, instance.parameter_server
    platform = instance.platform
    return JobSpec(
        model_mb=workload.model_size_mb,
        dataset_mb=workload.dataset_size_mb,
        samples=float(workload.samples),
        epochs=float(workload.epochs),
        local_batch=float(workload.local_batch),
        max_global_batch=float(workload.max_global_batch),
        rate_slope=rate.slope,
        rate_intercept=rate.intercept,
        rate_saturates_at_mb=math.inf if rate.saturates_at_mb is None else rate.saturates_at_mb,
        storage_slope=storage.slope,
        storage_intercept=storage.intercept,
        storage_max_mbps=storage.max_mbps,
        latency_s=profile.latency_s,
        startup_base_s=profile.startup.base_s,
        startup_per_function_s=profile.startup.per_function_s,
        ps_bandwidth_mbps=ps.bandwidth_mbps,
        function_bandwidth_mbps=ps.function_bandwidth_mbps,
        ps_price_per_hour=ps.price_per_hour,
        price_per_gb_second=platform.price_per_gb_second,
        price_per_request=platform.price_per_request,
        timeout_s=platform.timeout_s,
        timeout_margin_s=platform.timeout_margin_s,
        restart_overhead_s=platform.restart_overhead_s,
        ps_shards=shards,
        ps_message_s=message_s,
    )


@lru_cache(maxsize=1024)
def memory_choices(instance: Instance) -> tuple[int, ...]:
    """At most `MEMORY_CHOICES` sizes of the instance's grid, evenly spread from its smallest
    allowed size to its largest (both included)."""
    grid = instance.platform.memory
    low = grid.min_mb
    floor = instance.workload.min_memory_mb
    if floor is not None and floor > low:
        low = grid.min_mb + math.ceil((floor - grid.min_mb) / grid.step_mb) * grid.step_mb
    steps = max(0, (grid.max_mb - low) // grid.step_mb)
    picks = np.unique(np.round(np.linspace(0, steps, min(MEMORY_CHOICES, steps + 1))))
    return tuple(int(low + grid.step_mb * int(k)) for k in picks)


@dataclass(frozen=True)
class WorldRunner:
    """One world and one seed: the runs of a trace's jobs, each keyed by its index."""

    world: World
    seed: int

    def key(self, index: int) -> tuple[int, ...]:
        """The realised randomness of job `index`'s run: the same for every plan of it."""
        return (self.seed, index, _RUN_STREAM)

    def run(
        self, index: int, instance: Instance, functions: int, memory_mb: int, *,
        stop_after_s: float | None = None, stop_above_usd: float | None = None,
    ) -> WorldRun:
        """A static plan of job `index`, run to its end (or to a stop, for the oracle)."""
        return run_plan(
            self.world, job_spec(instance), functions, memory_mb, self.key(index),
            stop_after_s=stop_after_s, stop_above_usd=stop_above_usd,
        )

    def replanned(
        self, index: int, instance: Instance, replanner: Replanner, budget_s: float,
        max_functions: int,
    ) -> ReplannedRun | None:
        """Job `index` run under `replanner` with `budget_s` to its deadline (None: the
        re-planner had no first plan)."""
        return run_replanned(
            self.world, job_spec(instance), self.key(index), replanner, deadline_s=budget_s,
            memory_choices=memory_choices(instance),
            max_functions=min(max_functions, instance.max_functions),
        )

    def trials(self, index: int, instance: Instance) -> _Trials:
        """The profiling trials of job `index`'s strategy, each under its own randomness."""
        return _Trials(self, index, instance)


@dataclass
class _Trials:
    """`baselines.Measure` in the world: a strategy's n-th trial of a job has its own key."""

    runner: WorldRunner
    index: int
    instance: Instance
    count: int = 0

    def __call__(
        self, functions: int, memory_mb: int, iterations: int, max_s: float,
        rng: np.random.Generator,
    ) -> TrialRun:
        self.count += 1
        measured = trial(
            self.runner.world, job_spec(self.instance), functions, memory_mb,
            iterations=iterations, max_s=max_s,
            key=(self.runner.seed, self.index, _TRIAL_STREAM, self.count),
        )
        return TrialRun(
            functions=measured.functions, memory_mb=measured.memory_mb,
            time_s=measured.time_s, cost_usd=measured.cost_usd, setup_s=measured.setup_s,
            load_s=measured.load_s, load_share=measured.load_share,
            iteration_s=tuple(measured.iteration_s),
        )



@dataclass(frozen=True)
class Rehearsal:
    """One launch of a plan played in a world instead (`lambdadnn launch --truth-file`)."""

    functions: int
    memory_mb: int
    deadline_s: float
    run: WorldRun
    decisions: tuple[tuple[float, int, int], ...]  # (measured s, functions, memory_mb)

    @property
    def met(self) -> bool:
        return self.run.finished and self.run.time_s <= self.deadline_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": self.functions, "memory_mb": self.memory_mb,
            "deadline_s": self.deadline_s, "met": self.met,
            "status": "done" if self.run.finished else (self.run.reason or "abandoned"),
            **{key: value for key, value in asdict(self.run).items() if key != "stages"},
            "stages": [list(stage) for stage in self.run.stages],
            "decisions": [list(decision) for decision in self.decisions],
        }


def rehearse(
    instance: Instance, functions: int, memory_mb: int, world: World, *, seed: int,
    replanner: Replanner | None = None,
) -> Rehearsal:
    """The plan's run in `world` under the randomness of `seed`: static, or under
    `replanner` (which then picks the plans, the first included), with the instance's
    deadline."""
    runner = WorldRunner(world, seed)
    deadline = instance.objective.deadline_s
    if replanner is None:
        return Rehearsal(functions, memory_mb, deadline, runner.run(0, instance, functions,
                                                                    memory_mb), ())
    replanned = runner.replanned(0, instance, replanner, deadline, instance.max_functions)
    if replanned is None:
        raise InstanceError("the controller found no plan for the instance")
    return Rehearsal(replanned.first.functions, replanned.first.memory_mb, deadline,
                     replanned.run, replanned.decisions)
