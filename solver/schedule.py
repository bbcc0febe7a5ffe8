"""What `solve_many` answers: a schedule of many jobs under one concurrency limit, kept apart
from how HiGHS got there."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from .highs import Status
from .instance import Instance

ScheduleStatus = Literal["optimal", "feasible", "infeasible"]


def due_time(submit_s: float, deadline_s: float) -> float:
    """A job's due time: its deadline counts from its submission (the latest finish that
    meets it)."""
    return submit_s + deadline_s


@dataclass(frozen=True)
class Submission:
    """One job for `solve_many`: an instance (an `Instance`, a mapping in the YAML schema, a
    path or a shipped instance's name), when it is submitted and its deadline counted from
    then (None: the instance's own `objective.deadline_s`). `name` labels it in tables
    (default: the instance's name)."""

    instance: Instance | dict[str, Any] | str | Path
    submit_s: float = 0.0
    deadline_s: float | None = None
    name: str | None = None


@dataclass(frozen=True)
class ScheduledJob:
    """One job's plan and place in the schedule.

    `time_s` is the time the pool holds its functions and the deadline is checked against
    (the guarantee's quantile under one, as `Plan.deadline_time_s`); `finish_s` is `start_s +
    time_s`. A job whose deadline no schedule on the grid meets is still placed, on the
    fastest of its plans at the first moment the pool has room after the others: `met` is
    false and `late_s` says by how much it misses.
    """

    index: int
    name: str
    instance: str
    submit_s: float
    deadline_s: float
    functions: int
    memory_mb: int
    start_s: float
    time_s: float
    finish_s: float
    cost_usd: float
    met: bool
    late_s: float

    @property
    def due_s(self) -> float:
        """The latest finish that meets the deadline."""
        return due_time(self.submit_s, self.deadline_s)


@dataclass(frozen=True)
class Schedule:
    """The answer of `solve_many()`.

    `status`: `optimal` — every deadline met, and HiGHS proved the cost within `gap` of the
    least on the start grid (or the jobs' own optima fit, so nothing is cheaper: `solver_status`
    `not_run`); `feasible` — every deadline met, not proven (the time limit); `infeasible` —
    some deadline missed (`missed`); when `solver_status` is `optimal` no schedule of the jobs'
    front options on the start grid misses fewer (docs/MODEL.md says what that leaves out).
    `objective_usd` is what the MILP minimises: the cost of the jobs that meet their deadline
    plus a penalty per miss; `lower_bound_usd` is the best bound on it (the per-job optima's
    sum, the LP relaxation, HiGHS's branch and bound) and `gap` their relative difference.
    `total_cost_usd` is what running every job costs, late ones included. `columns` and
    `check_points` are the MILP's size; `peak_functions` the most functions held at once,
    `reserved` runs included, found by an exact sweep.
    """

    status: ScheduleStatus
    concurrency: int
    slot_s: float
    total_cost_usd: float
    objective_usd: float
    lower_bound_usd: float
    gap: float
    solver_status: Status
    solve_seconds: float
    columns: int
    check_points: int
    peak_functions: int
    jobs: tuple[ScheduledJob, ...]

    @property
    def missed(self) -> tuple[ScheduledJob, ...]:
        """The jobs that miss their deadline, in input order."""
        return tuple(job for job in self.jobs if not job.met)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping: every field, each job with its `due_s`, and `missed` (their
        indices)."""
        out: dict[str, Any] = {
            item.name: getattr(self, item.name) for item in fields(self) if item.name != "jobs"
        }
        out["missed"] = [job.index for job in self.missed]
        out["jobs"] = [{**asdict(job), "due_s": job.due_s} for job in self.jobs]
        return out
