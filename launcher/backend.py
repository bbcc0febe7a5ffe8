"""What the orchestrator needs of a place that runs workers: the `Backend` protocol.

A backend launches the ranks of one round and tells how that round is going; everything that
is the same wherever the workers run (the rounds, restarts, adaptive switches, the report) is
the orchestrator's (`launcher.orchestrator`). The local backend runs processes
(`launcher.local.LocalBackend`), the AWS one invokes a Lambda function
(`launcher.aws.AwsBackend`); the simulator's rehearsal replays a world's event queue rather
than polling workers, so it is no backend and keeps its own path (`simulator.worlds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .profile import Capacity

__all__ = ["Backend", "Channel", "Observed"]


class Channel(Protocol):
    """The job's parameter channel as the orchestrator uses it (`channel.ParameterChannel`)."""

    def progress(self) -> Mapping[str, Any]: ...

    def timings(self) -> list[dict[str, Any]]: ...

    def result(self) -> Mapping[str, Any] | None: ...

    def record_restart(self) -> int: ...

    def set_halt(self, on: bool) -> None: ...

    def request_checkpoint(self) -> None: ...


@dataclass(frozen=True)
class Observed:
    """One look at the running round.

    `iteration` is the channel's; `done` says the job's last iteration is done; `over` that
    the round has ended without it (every rank returned, or was given up on); `crashes`
    counts its invocations that failed, and `fatal` is the failure no relaunch can mend.
    """

    iteration: int
    done: bool = False
    over: bool = False
    crashes: int = 0
    fatal: str | None = None
    failure: str | None = None  # the round's last failure line, for a stall's report


class Backend(Protocol):
    """Where a launch runs its workers; see the module docstring.

    The orchestrator calls `setup` once, `start` per round, `observe` until the round is
    done or over, `rewind` and (for a change of plan) `reconfigure` between rounds, and
    `stop` always, last.
    """

    name: str  # the report's `backend`
    job: str  # the job's name: its channel's keys, its stop and failure lines
    warnings: tuple[str, ...]  # said once, before anything starts

    @property
    def redis_url(self) -> str:
        """The channel's Redis, as the workers reach it (known once `setup` has run)."""
        ...

    @property
    def channel(self) -> Channel: ...

    @property
    def runs_on(self) -> str: ...

    def setup(self) -> int:
        """Provision the first plan; the iteration the run starts at (a resumed checkpoint)."""
        ...

    def start(self, event: Mapping[str, Any]) -> None:
        """Launch ranks 0..`event["workers"]`-1 of a round with this event."""
        ...

    def observe(self, *, halting: bool) -> Observed:
        """Wait at most one poll, then how the round goes; `halting`: the group was asked to
        halt at a checkpoint for a change of plan."""
        ...

    def rewind(self, iteration: int) -> int:
        """After a round that ended short of done, at live `iteration`: the iteration the
        next round resumes from."""
        ...

    def reconfigure(self, functions: int, memory_mb: int) -> None:
        """Between two rounds: provision `functions` × `memory_mb` MB instead."""
        ...

    def throttled_share(self) -> float | None:
        """The report's `throttled_share` (None where the backend cannot tell)."""
        ...

    def verdict(self, result: Mapping[str, Any] | None) -> str | None:
        """Why the published result does not make a finished run (None: it does)."""
        ...

    def stop(self, *, finished: bool) -> None:
        """Clean up everything `setup` and `start` made; `finished`: the job is done."""
        ...

    def capacity(self) -> Capacity:
        """This backend as a platform that `lambdadnn profile` fits."""
        ...
