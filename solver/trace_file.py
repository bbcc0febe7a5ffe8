"""The trace file: the CSV of jobs that `solve-many` schedules and the simulator replays.

A UTF-8 CSV file with one header row naming exactly these four columns (in any order), then
one job a row::

    submit_time_s,instance,epochs,deadline_s
    0.412,mobilenet-cifar10,6,917
    1.873,/data/profiles/bert.yaml,3,1200

* ``submit_time_s`` — when the job is submitted, seconds from the start of the trace (a finite
  number ≥ 0; rows need not be sorted, the pool serves jobs in submission order);
* ``instance`` — a shipped instance name (``instances/NAME.yaml``, e.g. ``mobilenet-cifar10``)
  or the path of an instance YAML file (it ends in ``.yaml``/``.yml`` or contains a ``/``),
  relative paths looked up beside the trace first, then in the working directory;
* ``epochs`` — a positive integer; replaces the instance's ``workload.epochs``;
* ``deadline_s`` — a positive number of at most 10⁹ s; replaces the instance's
  ``objective.deadline_s``.

A real cluster trace converts by mapping each job to the closest shipped (or profiled)
workload and keeping its submission time, epochs and deadline: `simulator.philly` does so for
the public Philly trace's job log (``lambdadnn philly``); `simulator.trace` generates
synthetic ones. Every malformed row is reported as one one-line `TraceError` naming the file,
the line and the column, with the cell quoted briefly. The file is read like every user file
(`inputs.files.read_text`: a regular file of at most 4 MB) and holds at most `MAX_TRACE_JOBS`
jobs (100,000: ten times the paper's traces).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..inputs.errors import InstanceError, TraceError
from ..inputs.files import MAX_TRACE_JOBS, brief, read_text
from .instance import MAX_INTEGER, MAX_SECONDS, Instance
from .instance_yaml import load_instance
from .shipped import instances_folder, names

COLUMNS = ("submit_time_s", "instance", "epochs", "deadline_s")


@dataclass(frozen=True)
class Job:
    """One row of a trace, with its instance loaded and the row's epochs and deadline applied."""

    submit_time_s: float
    instance_name: str  # as written in the trace: a shipped name or a path
    epochs: int
    deadline_s: float
    instance: Instance


class Loader:
    """Loads each instance once per trace: thousands of rows share a handful of workloads."""

    def __init__(self, base: Path | None) -> None:
        self._base = base
        self._loaded: dict[str, Instance] = {}

    def resolve(self, name: str) -> Path:
        if name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name:
            path = Path(name)
            if self._base is not None and not path.is_absolute() and _is_file(self._base / path):
                return self._base / path
            return path  # `load_instance` reads it, or says in one line why it cannot
        shipped = instances_folder() / f"{name}.yaml"
        if not _is_file(shipped):
            known = ", ".join(names(instances_folder()))
            raise InstanceError(
                f"{brief(name)} is not a shipped instance; use one of {known} or a path to a "
                "YAML file"
            )
        return shipped

    def instance(self, name: str) -> Instance:
        if name not in self._loaded:
            self._loaded[name] = load_instance(self.resolve(name))
        return self._loaded[name]

    def job(self, submit_time_s: float, name: str, epochs: int, deadline_s: float) -> Job:
        base = self.instance(name)
        instance = dataclasses.replace(
            base, workload=dataclasses.replace(base.workload, epochs=epochs)
        ).with_deadline(deadline_s)
        return Job(submit_time_s, name, epochs, deadline_s, instance)


def _is_file(path: Path) -> bool:
    """`Path.is_file`, false also for names the system refuses (too long, say)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _number(text: str, *, positive: bool, maximum: float = math.inf) -> float:
    value = float(text)  # ValueError for non-numbers, caught by the caller
    if not math.isfinite(value) or (value <= 0 if positive else value < 0) or value > maximum:
        raise ValueError
    return value


def _integer(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_INTEGER:
        raise ValueError
    return value


def _row_error(where: str, line: int, column: str, problem: str) -> TraceError:
    one_line = " ".join(problem.split())
    return TraceError(f"trace {where}, line {line}, column `{column}`: {one_line}")


def _rows(reader: Iterator[list[str]], where: str) -> Iterator[list[str]]:
    """The reader's rows; malformed CSV (a cell over the csv module's limit, say) in one line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            line = getattr(reader, "line_num", 0)
            raise TraceError(
                f"trace {where}, line {line}: not valid CSV ({brief(str(error), 60)}); write "
                "one job a line as submit_time_s,instance,epochs,deadline_s"
            ) from None
        yield row


def read_trace(path: str | Path) -> list[Job]:
    """Every job of a trace file in file order; raises `TraceError` at the first bad row."""
    source = Path(path)
    where = brief(str(source), 80)
    text = read_text(source, what="a trace CSV (submit_time_s,instance,epochs,deadline_s)",
                     error=TraceError)
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""))  # spreadsheet BOM
    rows = _rows(reader, where)
    header = [cell.strip() for cell in next(rows, [])]
    if sorted(header) != sorted(COLUMNS):
        raise TraceError(
            f"trace {where}, line 1: the header must name the columns {','.join(COLUMNS)}, "
            f"got {brief(','.join(header))}"
        )
    index = {column: header.index(column) for column in COLUMNS}
    loader = Loader(source.absolute().parent)
    checks: dict[str, tuple[str, Callable[[str], float]]] = {
        "submit_time_s": ("a finite number ≥ 0", lambda text: _number(text, positive=False)),
        "epochs": (f"an integer in 1..{MAX_INTEGER:,}", _integer),
        "deadline_s": (f"a finite positive number ≤ {MAX_SECONDS:,.0f}",
                       lambda text: _number(text, positive=True, maximum=MAX_SECONDS)),
    }
    jobs: list[Job] = []
    for row in rows:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            raise TraceError(
                f"trace {where}, line {line}: expected {len(COLUMNS)} columns "
                f"({','.join(header)}), got {len(row)}"
            )
        if len(jobs) == MAX_TRACE_JOBS:
            raise TraceError(
                f"trace {where}, line {line}: more than {MAX_TRACE_JOBS:,} jobs; split the trace"
            )
        cells = {column: row[at].strip() for column, at in index.items()}
        values: dict[str, float] = {}
        for column, (need, check) in checks.items():
            try:
                values[column] = check(cells[column])
            except ValueError:
                raise _row_error(
                    where, line, column, f"must be {need}, got {brief(cells[column])}"
                ) from None
        if not cells["instance"]:
            raise _row_error(where, line, "instance", "must name an instance, got ''")
        try:
            job = loader.job(
                values["submit_time_s"], cells["instance"], int(values["epochs"]),
                values["deadline_s"],
            )
        except InstanceError as error:
            raise _row_error(where, line, "instance", str(error)) from None
        jobs.append(job)
    return jobs


def _number_text(value: float) -> str:
    """Whole numbers without a decimal point, the rest as Python's shortest round-trip repr."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def write_trace(jobs: Sequence[Job], path: str | Path) -> None:
    """Write jobs in the trace format; `read_trace` gives them back equal."""
    with Path(path).open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for job in jobs:
            writer.writerow(
                (_number_text(job.submit_time_s), job.instance_name, job.epochs,
                 _number_text(job.deadline_s))
            )
