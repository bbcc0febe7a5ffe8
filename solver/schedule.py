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
    ps: dict[str, Any] | None = None  # the parameter server chosen (`ParameterServer.choice`)

    @property
    def due_s(self) -> float:
        """The latest finish that meets the deadline."""
        return due_time(self.submit_s, self.deadline_s)


@dataclass(frozen=True)
class Schedule:
    """The answer of `solve_many()`.

    `status`: `optimal` — every deadline met, the cost within `gap` of `lower_bound_usd`;
    `feasible` — every deadline met without that proof, or some missed without a proof that a
    miss is unavoidable; `infeasible` — some deadline missed (`missed`), and no schedule on the
    start grid meets every deadline (proven; docs/MODEL.md, "Statuses").
    `objective_usd` is what the model minimises: the cost of the jobs that meet their deadline
    plus a penalty per miss; `lower_bound_usd` is a bound on it over every plan and start on
    the grid (column generation's Lagrangian bound, never clamped to the answer) and `gap`
    their relative difference (0 when the answer is below it: a job placed late off the grid).
    `total_cost_usd` is what running every job costs, late ones included. `columns` is the
    master's size at the end and `check_points` the moments capacity is checked at;
    `peak_functions` the most functions held at once, `reserved` runs included, found by an
    exact sweep.
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
        out["jobs"] = [_job(job) for job in self.jobs]
        return out


def _job(job: ScheduledJob) -> dict[str, Any]:
    """A job as JSON: every field and its `due_s`; `ps` only when the job chose a server."""
    out = {**asdict(job), "due_s": job.due_s}
    if job.ps is None:
        del out["ps"]
    return out
