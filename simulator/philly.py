"""Convert the job log of Microsoft's public Philly trace into a trace CSV (`solver.trace_file`).

The log is ``cluster_job_log`` of github.com/msr-fiddle/philly-traces (ATC'19, "Analysis of
Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads"): one JSON list of jobs, each
``{"status", "vc", "jobid", "submitted_time", "user", "attempts": [{"start_time",
"end_time", "detail": [{"ip", "gpus": [...]}]}]}`` with times as ``"2017-10-07 01:12:09"``.
Only ``status``, ``submitted_time`` and ``attempts`` (their times and GPU lists) are used.

Each kept job becomes one row ``submit_time_s,instance,epochs,deadline_s``:

* **which jobs** — statuses in `statuses` (default ``Pass`` and ``Killed``). ``Failed`` jobs
  are left out by default: the ATC'19 study finds most failures early, from programming and
  configuration errors, so their run time measures a crash, not a training size. ``Killed``
  jobs are kept: users stop training they judge done or hopeless, and the GPU time was spent.
  Jobs whose values the trace leaves unrecorded are skipped and counted: no attempts, a
  missing submission, start or end time (``null``, ``""`` or ``"None"``, as the trace's own
  notebook reads them; a missing last end time means the job was still running), no GPUs,
  zero run time, or times out of order (naive local times can run backwards when daylight
  saving time ends).
* **submit_time_s** — seconds from the earliest submission among the kept jobs; rows are
  written in submission order. Times are naive wall-clock strings and are read as given.
* **instance** — the job's GPU time G (Σ over attempts of duration × GPUs) picks the workload
  of `workload_map` (instance → reference GPU-hours) whose reference is nearest on a log
  scale. The default map puts the four shipped workloads a decade apart (0.1, 1, 10 and 100
  GPU-hours), ordered like their shipped deadlines (300, 600, 1,200, 3,600 s): a choice, not
  a measurement, so Philly's many short jobs become small workloads and its long tail
  `resnet50-cifar10` with many epochs. Pass your own map to use profiled workloads.
* **epochs** — max(1, round(E × G / reference)) with E the workload's own epochs: the job is
  that many times the workload's reference run.
* **deadline_s** — ceil(`slack` × run time), the run time being the first attempt's start to
  the last attempt's end (the notebook's definition): the job must finish as fast as it
  did on Philly, with `slack` (default 1.5) to spare.

Malformed input (not JSON, not a list, a job that is not an object, a field missing or of the
wrong type, an unparsable time, an unknown status) is one `TraceError` naming the file, the
job's index in the list (from 0) and the field. The log is read whole (`MAX_JOBLOG_BYTES`);
at most `MAX_TRACE_JOBS` jobs are converted (`limit` takes the earliest ones).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..inputs.errors import InputError, InstanceError, TraceError
from ..inputs.files import MAX_TRACE_JOBS, brief, read_text
from ..inputs.numbers import finite, whole
from ..solver.instance import MAX_INTEGER
from ..solver.trace_file import Job, Loader

STATUSES = ("Pass", "Killed", "Failed")  # a job's `status`, as published
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
MISSING = (None, "", "None")  # how the trace writes a value it did not record
KEPT_STATUSES = ("Pass", "Killed")
DEFAULT_SLACK = 1.5
DEFAULT_WORKLOAD_MAP: Mapping[str, float] = {
    "1dcnn-imdb": 0.1, "espcn-bsds500": 1.0, "mobilenet-cifar10": 10.0, "resnet50-cifar10": 100.0,
}
MAX_JOBLOG_BYTES = 1 << 30  # the whole published log is read at once by `json.loads`


@dataclass(frozen=True)
class Conversion:
    """The converted jobs in submission order, and how many jobs were skipped for each reason."""

    jobs: list[Job]
    skipped: dict[str, int]


@dataclass(frozen=True)
class _Run:
    """What the conversion needs of one kept Philly job."""

    index: int
    submitted: datetime
    gpu_seconds: float
    run_seconds: float


@dataclass(frozen=True)
class _Span:
    """One scheduling attempt: its times (None when unrecorded) and GPUs."""

    start: datetime | None
    end: datetime | None
    gpus: int


class _Skip(Exception):  # control flow only: never leaves this module
    """A job the trace does not record completely: counted, not converted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Where:
    """Builds one-line errors naming the file, the job and the field."""

    def __init__(self, path: Path) -> None:
        self.file = brief(str(path), 80)

    def error(self, index: int, field: str, problem: str) -> TraceError:
        return TraceError(
            f"Philly job log {self.file}, job {index}, field `{field}`: {problem}; the log must "
            "be cluster_job_log as github.com/msr-fiddle/philly-traces publishes it"
        )


def _field(record: Mapping[str, Any], key: str, kind: type, index: int, where: _Where,
           prefix: str = "") -> Any:
    """`record[key]` if it is a `kind`; `prefix` locates the record within its job."""
    if key not in record:
        raise where.error(index, prefix + key, "is missing")
    value = record[key]
    if not isinstance(value, kind):
        raise where.error(index, prefix + key, f"must be a {kind.__name__}, got {brief(value)}")
    return value


def _time(record: Mapping[str, Any], key: str, index: int, field: str,
          where: _Where) -> datetime | None:
    """The time at `key`, None when the trace did not record it."""
    if key not in record:
        raise where.error(index, field, "is missing")
    value = record[key]
    if value in MISSING:
        return None
    try:
        return datetime.strptime(value, TIME_FORMAT)
    except (TypeError, ValueError):
        raise where.error(index, field, f"must be a time like '2017-10-07 01:12:09', got "
                          f"{brief(value)}") from None


def _attempt(attempt: object, at: int, index: int, where: _Where) -> _Span:
    field = f"attempts[{at}]"
    if not isinstance(attempt, dict):
        raise where.error(index, field, f"must be an object, got {brief(attempt)}")
    detail = _field(attempt, "detail", list, index, where, f"{field}.")
    gpus = 0
    for server_at, server in enumerate(detail):
        if not isinstance(server, dict):
            raise where.error(index, f"{field}.detail[{server_at}]", f"must be an object, got "
                              f"{brief(server)}")
        gpus += len(_field(server, "gpus", list, index, where, f"{field}.detail[{server_at}]."))
    start = _time(attempt, "start_time", index, f"{field}.start_time", where)
    end = _time(attempt, "end_time", index, f"{field}.end_time", where)
    return _Span(start, end, gpus)


def _run(job: object, index: int, statuses: Sequence[str], where: _Where) -> _Run:
    """The kept job at `index`, or `_Skip` with the reason it is left out; every job is checked
    whole first, so a malformed job is an error whether or not it would be kept."""
    if not isinstance(job, dict):
        raise where.error(index, "(job)", f"must be a JSON object, got {brief(job)}")
    status = _field(job, "status", str, index, where)
    if status not in STATUSES:
        raise where.error(index, "status", f"must be one of {', '.join(STATUSES)}, got "
                          f"{brief(status)}")
    submitted = _time(job, "submitted_time", index, "submitted_time", where)
    spans = [_attempt(attempt, at, index, where)
             for at, attempt in enumerate(_field(job, "attempts", list, index, where))]
    if status not in statuses:
        raise _Skip(f"status {status}")
    if not spans:
        raise _Skip("no attempts")
    starts = [span.start for span in spans if span.start is not None]
    ends = [span.end for span in spans if span.end is not None]
    if submitted is None or len(starts) < len(spans) or len(ends) < len(spans):
        raise _Skip("unrecorded time")
    if any(end < start for start, end in zip(starts, ends, strict=True)) or min(starts) < submitted:
        raise _Skip("times out of order")
    gpu_seconds = sum((end - start).total_seconds() * span.gpus
                      for start, end, span in zip(starts, ends, spans, strict=True))
    if gpu_seconds == 0:
        raise _Skip("no GPU time")
    return _Run(index, submitted, gpu_seconds, (max(ends) - min(starts)).total_seconds())


def _positive(value: object, what: str) -> float:
    checked = finite(value)
    if checked is None or checked <= 0:
        raise InputError(f"{what} must be a finite positive number, got {brief(value)}")
    return checked


def parse_workload_map(items: Sequence[str]) -> dict[str, float]:
    """`NAME=GPU_HOURS` strings (the CLI's repeatable option) as a workload map."""
    parsed: dict[str, float] = {}
    for item in items:
        name, equals, hours = item.partition("=")
        try:
            value = float(hours) if equals and name.strip() else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise InputError(
                f"`--workload-map` must be NAME=GPU_HOURS with a positive number, got {brief(item)}"
            )
        parsed[name.strip()] = value
    return parsed


def _check(
    workload_map: Mapping[str, float], slack: float, statuses: Sequence[str], limit: int | None,
) -> None:
    if not isinstance(workload_map, Mapping) or not workload_map:
        raise InputError(f"`workload_map` (--workload-map) must map instances to reference "
                            f"GPU-hours, got {brief(workload_map)}")
    references = [_positive(hours, f"`workload_map` (--workload-map) for {brief(name)}")
                  for name, hours in workload_map.items()]
    for hours in references:
        if references.count(hours) > 1:
            raise InputError(f"`workload_map` (--workload-map) must give each workload its "
                                f"own reference GPU-hours, got {hours:g} twice")
    _positive(slack, "`slack` (--slack)")
    if isinstance(statuses, str) or not isinstance(statuses, Sequence) or not statuses:
        raise InputError(f"`statuses` (--keep) must list some of {', '.join(STATUSES)}, got "
                            f"{brief(statuses)}")
    for status in statuses:
        if status not in STATUSES:
            raise InputError(f"`statuses` (--keep) must list some of {', '.join(STATUSES)}, "
                                f"got {brief(status)}")
    if limit is not None and whole(limit, floats=False) not in range(1, MAX_TRACE_JOBS + 1):
        raise InputError(f"`limit` (--limit) must be an integer in 1..{MAX_TRACE_JOBS:,}, got "
                            f"{brief(limit)}")


def convert_job_log(
    path: str | Path,
    *,
    workload_map: Mapping[str, float] = DEFAULT_WORKLOAD_MAP,
    slack: float = DEFAULT_SLACK,
    statuses: Sequence[str] = KEPT_STATUSES,
    limit: int | None = None,
) -> Conversion:
    """The kept jobs of a Philly ``cluster_job_log`` as trace jobs (see the module docstring)."""
    _check(workload_map, slack, statuses, limit)
    loader = Loader(None)
    workloads = []
    for name, hours in sorted(workload_map.items(), key=lambda item: item[1]):
        try:
            epochs = loader.instance(name).workload.epochs
        except InstanceError as error:
            raise InstanceError(f"`workload_map` (--workload-map): {error}") from None
        workloads.append((name, epochs, float(hours) * 3600))
    source = Path(path)
    where = _Where(source)
    text = read_text(source, what="a Philly cluster_job_log (JSON)", error=TraceError,
                     max_bytes=MAX_JOBLOG_BYTES)
    try:
        log = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceError(f"Philly job log {where.file}: not valid JSON (line {error.lineno}, "
                            f"column {error.colno}: {error.msg})") from None
    except RecursionError:
        raise TraceError(f"Philly job log {where.file}: JSON nested too deeply") from None
    if not isinstance(log, list):
        raise TraceError(f"Philly job log {where.file}: must be a JSON list of jobs, got "
                            f"{type(log).__name__}")
    runs: list[_Run] = []
    skipped: Counter[str] = Counter()
    for index, job in enumerate(log):
        try:
            runs.append(_run(job, index, statuses, where))
        except _Skip as skip:
            skipped[skip.reason] += 1
    runs.sort(key=lambda run: (run.submitted, run.index))
    if limit is None and len(runs) > MAX_TRACE_JOBS:
        raise TraceError(f"Philly job log {where.file}: {len(runs):,} jobs to convert, more "
                            f"than {MAX_TRACE_JOBS:,}; pass `limit` (--limit) to take the earliest")
    if limit is not None and len(runs) > limit:
        skipped["beyond limit"] = len(runs) - limit
        runs = runs[:limit]
    jobs = []
    for run in runs:
        name, epochs, reference = min(
            workloads, key=lambda w: abs(math.log(run.gpu_seconds / w[2]))
        )
        size = max(1, round(epochs * run.gpu_seconds / reference))
        if size > MAX_INTEGER:
            raise where.error(run.index, "attempts", f"{run.gpu_seconds / 3600:,.0f} GPU-hours "
                              f"is over {MAX_INTEGER:,} epochs of {name}; raise its reference")
        submit = (run.submitted - runs[0].submitted).total_seconds()
        jobs.append(loader.job(submit, name, size, math.ceil(slack * run.run_seconds)))
    return Conversion(jobs, dict(sorted(skipped.items())))
