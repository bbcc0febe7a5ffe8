"""Job traces: the CSV format the simulator replays, and a generator of synthetic traces.

Format
------
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
* ``deadline_s`` — a positive number; replaces the instance's ``objective.deadline_s``.

A real cluster trace converts by mapping each job to the closest shipped (or profiled)
workload and keeping its submission time, epochs and deadline: `simulator.philly` does so for
the public Philly trace's job log (``lambdadnn philly``). Every malformed row is reported
as one one-line `InstanceError` naming the file, the line and the column, with the cell quoted
briefly. The file is read like every user file (`solver.inputs.read_text`: a regular file of
at most 4 MB) and holds at most `MAX_JOBS` jobs (100,000: ten times the paper's traces).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lambdadnn.simulator.defaults import ARRIVALS, MAX_JOBS, MIXES
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief, read_text
from lambdadnn.solver.instance import MAX_INTEGER, Instance, load_instance
from lambdadnn.solver.shipped import instances_folder, names

COLUMNS = ("submit_time_s", "instance", "epochs", "deadline_s")
WORKLOADS = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")

# Jobs per second of the synthetic trace. By Little's law a planner whose jobs hold n functions
# for T seconds keeps rate·E[n·T] of the pool busy. Measured (default noise): lambdadnn's plans
# hold ≈ 6,300 function-seconds a job, ldnn-alg1 ≈ 9,300, power-tuning ≈ 2,500: at 0.2 jobs/s
# 3–4% of the 50,000 functions, so the comparison is between plans, not queues. The strategies
# that draw n at random over its whole range hold far more: sample-search ≈ 110,000 (median
# 11,000, a tail of hundreds of functions for hours), which queues from ≈ 0.5 jobs/s; naive
# ≈ 1.4 million, which saturates the pool above ≈ 0.03 jobs/s — over-provisioning on a shared
# pool costs waiting too, and that shows. 10,000 jobs span ≈ 14 hours.
DEFAULT_RATE_PER_S = 0.2
BURSTY_CV = 2.0  # coefficient of variation of the bursty process's gamma inter-arrival times
DIURNAL_AMPLITUDE = 0.8  # the diurnal rate swings between 0.2× and 1.8× its mean ...
DIURNAL_PERIOD_S = 86_400.0  # ... once a day
HEAVY_ALPHA = 1.2  # the heavy mix's Pareto shape: below 2, so the size variance is huge
HEAVY_MAX = 50.0  # its largest job, in multiples of the workload's own epochs


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
            base,
            workload=dataclasses.replace(base.workload, epochs=epochs),
            objective=dataclasses.replace(base.objective, deadline_s=deadline_s),
        )
        return Job(submit_time_s, name, epochs, deadline_s, instance)


def _is_file(path: Path) -> bool:
    """`Path.is_file`, false also for names the system refuses (too long, say)."""
    try:
        return path.is_file()
    except OSError:
        return False


def check_seed(seed: object) -> int:
    """The seed of a simulation as an int, or `InstanceError`: numpy wants an integer ≥ 0."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InstanceError(f"`seed` must be an integer ≥ 0, got {brief(seed)}")
    return int(seed)


def _number(text: str, *, positive: bool) -> float:
    value = float(text)  # ValueError for non-numbers, caught by the caller
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        raise ValueError
    return value


def _integer(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_INTEGER:
        raise ValueError
    return value


def _row_error(where: str, line: int, column: str, problem: str) -> InstanceError:
    one_line = " ".join(problem.split())
    return InstanceError(f"trace {where}, line {line}, column `{column}`: {one_line}")


def _rows(reader: Iterator[list[str]], where: str) -> Iterator[list[str]]:
    """The reader's rows; malformed CSV (a cell over the csv module's limit, say) in one line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            line = getattr(reader, "line_num", 0)
            raise InstanceError(
                f"trace {where}, line {line}: not valid CSV ({brief(str(error), 60)}); write "
                "one job a line as submit_time_s,instance,epochs,deadline_s"
            ) from None
        yield row


def read_trace(path: str | Path) -> list[Job]:
    """Every job of a trace file in file order; raises `InstanceError` at the first bad row."""
    source = Path(path)
    where = brief(str(source), 80)
    text = read_text(source, what="a trace CSV (submit_time_s,instance,epochs,deadline_s)")
    reader = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""))  # spreadsheet BOM
    rows = _rows(reader, where)
    header = [cell.strip() for cell in next(rows, [])]
    if sorted(header) != sorted(COLUMNS):
        raise InstanceError(
            f"trace {where}, line 1: the header must name the columns {','.join(COLUMNS)}, "
            f"got {brief(','.join(header))}"
        )
    index = {column: header.index(column) for column in COLUMNS}
    loader = Loader(source.absolute().parent)
    checks: dict[str, tuple[str, Callable[[str], float]]] = {
        "submit_time_s": ("a finite number ≥ 0", lambda text: _number(text, positive=False)),
        "epochs": (f"an integer in 1..{MAX_INTEGER:,}", _integer),
        "deadline_s": ("a finite positive number", lambda text: _number(text, positive=True)),
    }
    jobs: list[Job] = []
    for row in rows:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(COLUMNS):
            raise InstanceError(
                f"trace {where}, line {line}: expected {len(COLUMNS)} columns "
                f"({','.join(header)}), got {len(row)}"
            )
        if len(jobs) == MAX_JOBS:
            raise InstanceError(
                f"trace {where}, line {line}: more than {MAX_JOBS:,} jobs; split the trace"
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


def _arrivals(rng: np.random.Generator, jobs: int, rate: float, arrival: str) -> np.ndarray:
    """Submission times in seconds (unrounded) of `jobs` arrivals at long-run mean `rate`."""
    if arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate, jobs))
    if arrival == "bursty":
        shape = 1.0 / BURSTY_CV**2  # a gamma's CV is 1/√shape; its mean shape·scale is 1/rate
        return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), jobs))
    # diurnal: time-rescaling, t_i = Λ⁻¹(E_1 + … + E_i) with unit exponentials E and the
    # cumulative rate Λ(t) = rate·(t + aP/2π·(1 − cos 2πt/P)), which is increasing (a < 1) and
    # lies in [rate·t, rate·(t + aP/π)]: bisection in that bracket.
    targets = np.cumsum(rng.exponential(1.0, jobs))
    swing = DIURNAL_AMPLITUDE * DIURNAL_PERIOD_S / (2 * math.pi)
    low = np.maximum(targets / rate - 2 * swing, 0.0)
    high = targets / rate
    for _ in range(64):  # the bracket, aP/π ≈ 6 h wide, halves to float precision
        middle = (low + high) / 2
        cumulative = rate * (middle + swing * (1 - np.cos(2 * math.pi * middle / DIURNAL_PERIOD_S)))
        below = cumulative < targets
        low = np.where(below, middle, low)
        high = np.where(below, high, middle)
    return high


def _choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InstanceError(f"`{name}` must be one of {', '.join(choices)}, got {brief(value)}")
    return value


def _heavy_multipliers(rng: np.random.Generator, size: int) -> np.ndarray:
    """Job-size multipliers of the heavy mix: bounded Pareto on [1, `HEAVY_MAX`], shape
    `HEAVY_ALPHA`, by inversion of its distribution function."""
    tail = 1.0 - HEAVY_MAX**-HEAVY_ALPHA
    multipliers: np.ndarray = (1.0 - rng.random(size) * tail) ** (-1.0 / HEAVY_ALPHA)
    return multipliers


def generate_trace(
    jobs: int,
    *,
    seed: int,
    rate_per_s: float = DEFAULT_RATE_PER_S,
    workloads: Sequence[str] = WORKLOADS,
    deadlines: tuple[int, int] = (600, 1200),
    arrival: str = "poisson",
    mix: str = "paper",
) -> list[Job]:
    """A synthetic trace: seeded arrivals, uniform workloads, whole-second deadlines.

    Arrival processes (`ARRIVALS`), each with long-run mean rate `rate_per_s` (submission times
    kept to the millisecond):

    * ``poisson`` — exponential inter-arrival times, mean `1/rate_per_s` (CV 1);
    * ``bursty`` — gamma inter-arrival times, mean `1/rate_per_s`, CV `BURSTY_CV` (2): a
      renewal process whose counts have index of dispersion → CV² = 4 (clusters and lulls);
    * ``diurnal`` — Poisson with rate `rate_per_s·(1 + a·sin 2πt/P)`, a = `DIURNAL_AMPLITUDE`
      (0.8), P = `DIURNAL_PERIOD_S` (one day): busiest 6 h in, quietest 18 h in.

    Job-size mixes (`MIXES`); each job's workload is uniform over `workloads` and `U` is a
    uniform integer in `deadlines` (inclusive, the paper's 600–1,200 s by default):

    * ``paper`` — each job trains its workload's own epochs E, deadline `U`; identical
      questions recur, so a planner can cache by (instance, epochs, deadline);
    * ``heavy`` — epochs round(E·X) with X bounded Pareto on [1, `HEAVY_MAX` = 50], shape
      `HEAVY_ALPHA` = 1.2 (median 1.8, mean 3.3, 5% of jobs ≥ 10×, 0.8% ≥ 30×), deadline
      round(U·epochs/E) s: at a fixed plan the training time grows with the epochs, so scaling
      the deadline with the size keeps the plan that meets a paper job meeting its larger
      version, and the share of jobs a good planner can meet comparable.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral) or not (
        0 <= jobs <= MAX_JOBS
    ):
        raise InstanceError(f"`jobs` must be an integer in 0..{MAX_JOBS:,}, got {brief(jobs)}")
    seed = check_seed(seed)
    if isinstance(rate_per_s, bool) or not isinstance(rate_per_s, numbers.Real) or not (
        math.isfinite(rate_per_s) and rate_per_s > 0
    ):
        raise InstanceError(f"`rate_per_s` must be a positive number, got {brief(rate_per_s)}")
    low, high = deadlines
    if not 0 < low <= high:
        raise InstanceError(f"`deadlines` must be (low, high) with 0 < low ≤ high, got {deadlines}")
    if not workloads:
        raise InstanceError("`workloads` must name at least one instance")
    arrival = _choice(arrival, "arrival", ARRIVALS)
    mix = _choice(mix, "mix", MIXES)
    rng = np.random.default_rng(seed)
    arrivals = np.round(_arrivals(rng, jobs, float(rate_per_s), arrival), 3)
    chosen = rng.integers(len(workloads), size=jobs)
    deadline_draws = rng.integers(low, high, size=jobs, endpoint=True)
    loader = Loader(None)
    base = np.array([loader.instance(name).workload.epochs for name in workloads])[chosen]
    epochs, deadline_s = base, deadline_draws.astype(float)
    if mix == "heavy":
        epochs = np.maximum(np.round(base * _heavy_multipliers(rng, jobs)), 1).astype(int)
        deadline_s = np.maximum(np.round(deadline_draws * epochs / base), 1)
    return [
        loader.job(float(arrival), workloads[pick], int(size), float(deadline))
        for arrival, pick, size, deadline in zip(arrivals, chosen, epochs, deadline_s, strict=True)
    ]
