"""Strategies that change a job's plan while it runs, and the loop that runs them in a world.

A re-planner (`Replanner`) picks a job's first plan, then at each check it asked for (a number
of samples later) looks at what the leg measured and picks the next: the same plan (the run
checkpoints and carries on) or another (a switch: the world bills the restart, the new
functions' cold starts, start-up and data load). It sees only a `Situation`: the job as its
instance states it, the deadline, and what the run measured, through the world's measurement
noise; never the world itself. `run_replanned` is that loop over a `world.Session`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from .world import JobSpec, Segment, Session, World, WorldRun

__all__ = ["ReplannedRun", "Replanner", "Situation", "Step", "run_replanned"]

# A re-planner that keeps asking for checks is stopped asking after this many: the job then
# runs its last plan to the end (no shipped re-planner comes near it: one check an epoch).
MAX_DECISIONS = 10_000


@dataclass(frozen=True)
class Step:
    """What runs next: a plan, and after how many more samples to decide again."""

    functions: int
    memory_mb: int
    check_samples: float | None  # None: run to the end
    global_batch: float | None = None  # None: the workload's own rule


@dataclass(frozen=True)
class Situation:
    """What a re-planner may know at a decision."""

    job: JobSpec  # the job as its instance states it (the belief, not the world)
    deadline_s: float  # seconds the job has from its first invocation
    elapsed_s: float  # measured seconds since then
    samples_done: float
    total_samples: float
    memory_choices: tuple[int, ...]
    max_functions: int
    last: Segment | None  # the leg just run; None before the first


class Replanner(Protocol):
    """Picks a job's plans as it runs (module docstring)."""

    def first(self, situation: Situation) -> Step | None:
        """The first plan, or None when the re-planner has none (the job is not run)."""

    def next(self, situation: Situation) -> Step:
        """The plan after a check."""


@dataclass(frozen=True)
class ReplannedRun:
    """The world's record of the run, and the plans the re-planner chose, in order."""

    run: WorldRun
    first: Step
    decisions: tuple[tuple[float, int, int], ...]  # (measured elapsed s, functions, memory_mb)


def run_replanned(
    world: World, job: JobSpec, key: tuple[int, ...], replanner: Replanner, *,
    deadline_s: float, memory_choices: tuple[int, ...], max_functions: int,
) -> ReplannedRun | None:
    """Run `job` in `world` (randomness `key`) under `replanner` to its end; None when the
    re-planner has no first plan. A plan outside the range it was given (functions in
    1..max_functions, memory from the least to the most of `memory_choices`) is clamped into
    it, as a platform would refuse it: the run never stops on a re-planner's mistake."""
    session = Session(world, job, key)
    situation = Situation(job, deadline_s, 0.0, 0.0, session.total_samples, memory_choices,
                          max_functions, None)
    step = replanner.first(situation)
    if step is None:
        return None
    first = step = _within(step, memory_choices, max_functions)
    decisions = [(0.0, step.functions, step.memory_mb)]
    measured = 0.0
    while True:
        asked = step.check_samples
        until = None if asked is None or len(decisions) >= MAX_DECISIONS or not (
            math.isfinite(asked)) else session.samples_done + max(asked, 0.0)
        segment = session.advance(step.functions, step.memory_mb,
                                  global_batch=step.global_batch, until_samples=until)
        measured += segment.seconds
        if session.done:
            return ReplannedRun(session.result(), first, tuple(decisions))
        step = _within(replanner.next(Situation(
            job, deadline_s, measured, session.samples_done, session.total_samples,
            memory_choices, max_functions, segment,
        )), memory_choices, max_functions)
        decisions.append((measured, step.functions, step.memory_mb))


def _within(step: Step, memory_choices: tuple[int, ...], max_functions: int) -> Step:
    """`step` with its plan clamped to what the re-planner may choose."""
    functions = min(max(1, int(step.functions)), max_functions)
    memory = min(max(int(step.memory_mb), memory_choices[0]), memory_choices[-1])
    if (functions, memory) == (step.functions, step.memory_mb):
        return step
    return Step(functions, memory, step.check_samples, step.global_batch)
