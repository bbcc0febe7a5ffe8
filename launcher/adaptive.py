"""Adaptive launches: what both backends share to follow a `solver.adaptive.Controller`.

A run is a list of rounds, each at one plan (n, m): a static launch has one, an adaptive one
starts a further round whenever the controller changes the plan. At each check the backend
hands `AdaptiveRun.poll` the live iteration and the channel's timing records; it turns the
records of the current round into an `Observation` (per iteration, each worker's compute and
the least exchange time over the workers), asks the controller, and says whether to halt the
group. The orchestrator halts it at the next iteration (`ParameterChannel.set_halt`), waits
for every rank to checkpoint and return, has the backend re-provision and calls `switch`:
the new ranks resume from the checkpoint with the same global batch, split over the new n.

The controller (and with it the solver's SymPy and HiGHS) is imported only by whoever builds
one: a worker process imports the local backend, which imports this module.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from . import LaunchError
from .spec import LaunchSpec
from .timings import per_iteration, round_starts

if TYPE_CHECKING:
    from ..solver.adaptive import Decision, Observation

__all__ = ["AdaptiveRun", "Planner", "Request", "Round"]

STATIC_REASON = "static launch: the plan as solved, never re-planned"

Request = Literal["halt", "checkpoint"]  # what a check asks of the running group


class Planner(Protocol):
    """What a launch needs of a controller (`solver.adaptive.Controller`, or a test's script)."""

    @property
    def last(self) -> Decision: ...

    def decide(
        self, *, iterations_done: float, elapsed_s: float, observation: Observation | None = None,
    ) -> Decision: ...


@dataclass
class Round:
    """One stretch of a run at one plan: from iteration `first` to `last`, started by a
    decision (`action`, `reason`), with the checks that kept it (`checks`)."""

    functions: int
    memory_mb: int
    global_batch: int
    first: int
    first_round: int  # the channel's round (relaunch count) of its first invocation
    started: float
    action: str
    reason: str
    invocations: int = 0
    last: int | None = None
    seconds: float | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": self.functions, "memory_mb": self.memory_mb,
            "local_batch": self.global_batch / self.functions,
            "iterations_from": self.first, "iterations_to": self.last,
            "seconds": self.seconds, "invocations": self.invocations, "action": self.action,
            "reason": self.reason, "checks": list(self.checks),
        }


class AdaptiveRun:
    """The rounds of one launch and, with a `planner`, its checks (see the module docstring).

    `clock` is the backend's monotonic clock: the deadline counts from `begin`.
    """

    def __init__(
        self, spec: LaunchSpec, planner: Planner | None = None, *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.planner = planner
        self._clock = clock
        self.began = clock()
        first = planner.last if planner is not None else None
        if first is not None and (first.functions, first.memory_mb) != (
            spec.functions, spec.memory_mb
        ):
            raise LaunchError(
                f"the controller starts at {first.functions} × {first.memory_mb} MB, not at the "
                f"plan's {spec.functions} × {spec.memory_mb} MB; build it from the plan "
                "(`Controller.of(spec)`)"
            )
        self.global_batch, self.total = spec.global_batch, spec.iterations
        self.rounds = [Round(
            spec.functions, spec.memory_mb, self.global_batch, 0, 0, self.began,
            "start" if first is None else first.action,
            STATIC_REASON if first is None else first.reason,
        )]
        self.check_at: float | None = None if first is None else first.next_check_iteration
        self.pending: Decision | None = None
        self._observed_to = 0  # timed iterations before this are in the belief already
        self._failures = 0
        self._checked = self.began
        self._launched_at: list[float | None] = []  # per channel round, when it was launched
        self._setup_seen = 0  # rounds before this have their set-up in the belief

    def begin(self, iteration: int = 0) -> None:
        """The run starts now (its first launch) at `iteration` (a resumed job's checkpoint):
        the deadline and the first round count from here."""
        self.began = self._checked = self.rounds[0].started = self._clock()
        self.rounds[0].first = iteration

    @property
    def current(self) -> Round:
        return self.rounds[-1]

    def launched(self, at: float | None = None) -> None:
        """The backend (re)invoked the current round's ranks, at wall-clock time `at` (the
        clock the workers stamp `first_at` with): a round's set-up is measured from it."""
        self.current.invocations += self.current.functions
        self._launched_at.append(at)

    def failed(self, crashes: int) -> None:
        """`crashes` invocations of the current round failed (counted at the next check)."""
        self._failures += crashes

    def observation(self, records: Sequence[Mapping[str, Any]]) -> Observation:
        """The current round's timed iterations not yet observed, as an `Observation`: those
        every one of its ranks has recorded (`ParameterChannel.timings`)."""
        from ..solver.adaptive import Observation

        current = self.current
        mine = [record for record in records if int(record["round"]) >= current.first_round]
        timed = sorted(
            (iteration, ranks) for iteration, ranks in per_iteration(mine).items()
            if iteration >= self._observed_to and len(ranks) == current.functions
        )
        if timed:
            self._observed_to = timed[-1][0] + 1
        now = self._clock()
        observed = Observation(
            current.functions, current.memory_mb,
            np.array([[c for c, _x in ranks] for _i, ranks in timed],
                     dtype=np.float64).reshape(len(timed), current.functions),
            np.array([min(x for _c, x in ranks) for _i, ranks in timed], dtype=np.float64),
            failures=self._failures, exposure_s=current.functions * (now - self._checked),
        )
        self._failures, self._checked = 0, now
        setup_s, rounds = self._setup(mine)
        return dataclasses.replace(observed, setup_s=setup_s, rounds=rounds)

    def _setup(self, records: Sequence[Mapping[str, Any]]) -> tuple[float, int]:
        """The set-up of the current plan's rounds begun since the last observation: from each
        round's launch to its last rank's first iteration (`timings.round_starts`)."""
        starts = round_starts(records)
        seconds, rounds = 0.0, 0
        for round_ in range(max(self._setup_seen, self.current.first_round),
                            len(self._launched_at)):
            launched, started = self._launched_at[round_], starts.get(round_)
            if launched is None or started is None:
                break  # not started yet: counted at a later check
            seconds += max(0.0, started - launched)
            rounds += 1
            self._setup_seen = round_ + 1
        return seconds, rounds

    def poll(
        self, iteration: int, records: Callable[[], Sequence[Mapping[str, Any]]]
    ) -> Request | None:
        """At a check (the live `iteration` has reached the one the last decision named), ask
        the planner: `halt` when it changed the plan (the backend halts the group), else
        `checkpoint` (the backend has the next update checkpointed, as the simulator does at
        every check, so that a crash loses no more than a leg). None: no check was due; a
        run that is done is checked no more."""
        if self.planner is None or self.pending is not None or self.check_at is None or not (
            self.check_at <= iteration < self.total
        ):
            return None
        decision = self.planner.decide(
            iterations_done=iteration, elapsed_s=self._clock() - self.began,
            observation=self.observation(records()),
        )
        self.check_at = (decision.next_check_iteration
                         if decision.next_check_iteration > iteration else None)
        if not decision.changed:
            self.current.checks.append(
                {"iteration": iteration, "action": decision.action, "reason": decision.reason})
            return "checkpoint"
        if decision.functions > self.global_batch:
            raise LaunchError(
                f"the controller chose {decision.functions} functions for a global batch of "
                f"{self.global_batch}: each needs at least one sample; launch without "
                "`--adaptive` or with a larger batch"
            )
        self.pending = decision
        return "halt"

    def switch(self, decision: Decision, iteration: int, round_: int) -> Round:
        """The current round ended at `iteration` for the `pending` decision: start the new
        plan's round, whose first invocation is channel round `round_`."""
        self.close(iteration)
        self.pending = None
        self.rounds.append(Round(
            decision.functions, decision.memory_mb, self.global_batch, iteration, round_,
            self._clock(), decision.action, decision.reason,
        ))
        return self.current

    def close(self, iteration: int) -> None:
        """The current round ended at `iteration`."""
        self.current.last = iteration
        self.current.seconds = self._clock() - self.current.started

    def event(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The worker event of the current round: `base` with its n and the same global
        batch (the local batch shown is B/n rounded; the workers split B itself)."""
        n = self.current.functions
        return {**base, "workers": n, "local_batch": max(1, round(self.global_batch / n)),
                "global_batch": self.global_batch}

    def to_list(self) -> list[dict[str, Any]]:
        return [round_.to_dict() for round_ in self.rounds]
