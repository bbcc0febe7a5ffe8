"""Result objects: what a plan costs and takes, kept apart from how the solver got there."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal, NoReturn, get_args

from ..inputs.errors import InstanceError, PlanError
from ..inputs.files import brief
from ..inputs.numbers import integer, number, probability
from ..models.bounds import Bounds
from . import highs
from .fit_uncertainty import AtValue, FitCoverage, MovedParameter
from .instance import (
    ARCHITECTURES,
    MAX_CONCURRENCY,
    MAX_INTEGER,
    MAX_MEGABYTES,
    MAX_SECONDS,
    Instance,
    instance_mapping,
)
from .instance_yaml import load_instance

Status = Literal["optimal", "infeasible"]
SelectedBy = Literal["enumeration", "highs"]
PLAN_FIX = "write the plan with `lambdadnn solve X.yaml --json`"
MAX_PLAN_TEXT = 200  # a name or a platform: one short line
MAX_NOTE_CHARS = 10_000  # what a plan covers of its fit: a paragraph per fitted parameter


@dataclass(frozen=True)
class TimeBreakdown:
    """Seconds of the training time by cause; they add up to the plan's `time_s`."""

    load_s: float
    compute_s: float
    communication_s: float
    restart_overhead_s: float
    cold_start_s: float
    startup_s: float  # `profile.startup` paid per invocation round (model v2; 0 without it)


@dataclass(frozen=True)
class CostBreakdown:
    """Dollars of the plan's cost by payee; they add up to the plan's `cost_usd`."""

    functions_usd: float
    parameter_server_usd: float
    requests_usd: float


@dataclass(frozen=True)
class PlanFigures:
    """The model's figures for one plan `(functions, memory_mb)`: shared by both results.

    `time_s` and `cost_usd` are expected values; `deadline_time_s` is the time checked
    against the deadline: `time_s` itself, or under a guarantee p its p-quantile.
    """

    instance: str
    functions: int
    memory_mb: int
    time_s: float
    cost_usd: float
    deadline_s: float
    deadline_time_s: float
    local_batch: float
    global_batch: float
    iterations: float
    restarts: int
    invocations: int
    time_breakdown: TimeBreakdown
    cost_breakdown: CostBreakdown

    @property
    def margin_s(self) -> float:
        """Seconds to spare before the deadline (negative: by how much it is missed)."""
        return self.deadline_s - self.deadline_time_s


@dataclass(frozen=True)
class Evaluation(PlanFigures):
    """The answer of `evaluate()`: the figures of any plan, and why it is not feasible.
    `fit_coverage` is as in `Plan`."""

    valid: bool
    feasible: bool
    violations: tuple[str, ...]
    fit_coverage: FitCoverage | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.fit_coverage is None:
            del out["fit_coverage"]
        return out


@dataclass(frozen=True)
class Plan(PlanFigures):
    """The answer of `solve()`: the cheapest feasible plan, or the fastest one if none is.

    `status` is the answer to the user's question. `pareto_candidates` is how many plans were
    left to choose among after MODEL.md's tie rule; `selected_by` says who chose: the exact
    enumeration when one was left, else HiGHS, whose termination status for the selection
    model is `solver_status` (`not_run` when it was not needed; linopy-style, the two
    statuses are never conflated). `solved_from` is the instance solved (its platform and
    deadline as given to `solve`), kept by reference and written out only by `to_dict()`.
    Under a guarantee, a profiled instance is planned at its fit's adverse corner (MODEL.md,
    "Fit uncertainty"): the figures are the corner's, `fit_coverage` says what was covered,
    and `solved_from` stays the instance as fitted, so a launch predicts at the fitted values.
    """

    status: Status
    platform: str
    architecture: str  # the platform's CPU, which the launcher deploys the plan on
    guarantee: float | None
    bounds: Bounds
    candidates_evaluated: int
    pareto_candidates: int
    selected_by: SelectedBy
    solver_status: highs.Status
    solve_seconds: float
    solved_from: Instance = field(compare=False, repr=False)
    fit_coverage: FitCoverage | None = None  # None: no `fit:` section or no guarantee

    @property
    def ps(self) -> dict[str, Any] | None:
        """The parameter server's type and shard count (`ParameterServer.choice`)."""
        return self.solved_from.parameter_server.choice

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping: `status` first, every field (`fit_coverage` only when there
        is one), the bounds, `margin_s` and the instance solved as `instance_spec`
        (`instance_mapping`: the platform inline), so that a plan's JSON is all a launcher
        needs to predict the run."""
        out: dict[str, Any] = {"status": self.status}
        for item in fields(self):
            value = getattr(self, item.name)
            absent = item.name == "fit_coverage" and value is None
            if item.name != "solved_from" and not absent:
                nested = is_dataclass(value) and not isinstance(value, type)
                out[item.name] = asdict(value) if nested else value
        out["bounds"] = self.bounds.to_dict()
        out["margin_s"] = self.margin_s
        if self.ps is not None:
            out["ps"] = self.ps
        out["instance_spec"] = instance_mapping(self.solved_from)
        return out

    @classmethod
    def from_dict(cls, payload: object, *, source: str = "the plan") -> Plan:
        """The inverse of `to_dict()`: every field checked (a plan JSON may be hand-written),
        the instance re-read from `instance_spec`, the deadline kept; the derived keys
        (`margin_s`, the bounds' shares) are ignored. Raises `PlanError` naming the first bad
        key; `source` names the plan in messages ("file 'plan.json'")."""
        read = _Reader(payload, source)
        return cls(
            instance=read.text("instance"),
            functions=read.integer("functions", 1, MAX_CONCURRENCY),
            memory_mb=read.integer("memory_mb", 1, MAX_MEGABYTES),
            time_s=read.number("time_s"),
            cost_usd=read.number("cost_usd", sign="non-negative"),
            deadline_s=read.number("deadline_s", maximum=MAX_SECONDS),
            deadline_time_s=read.number("deadline_time_s"),
            local_batch=read.number("local_batch"),
            global_batch=read.number("global_batch"),
            iterations=read.number("iterations"),
            restarts=read.integer("restarts", 0, MAX_INTEGER),
            invocations=read.integer("invocations", 1, MAX_INTEGER),
            time_breakdown=TimeBreakdown(**read.section("time_breakdown", TimeBreakdown)),
            cost_breakdown=CostBreakdown(**read.section("cost_breakdown", CostBreakdown)),
            status=read.choice("status", get_args(Status)),
            platform=read.text("platform"),
            architecture=read.choice("architecture", ARCHITECTURES),
            guarantee=read.guarantee(),
            bounds=read.bounds(),
            candidates_evaluated=read.integer("candidates_evaluated", 0, MAX_INTEGER),
            pareto_candidates=read.integer("pareto_candidates", 0, MAX_INTEGER),
            selected_by=read.choice("selected_by", get_args(SelectedBy)),
            solver_status=highs.Status(
                read.choice("solver_status", tuple(status.value for status in highs.Status))),
            solve_seconds=read.number("solve_seconds", sign="non-negative"),
            solved_from=read.instance(),
            fit_coverage=read.coverage(),
        )


class _Reader:
    """Reads the keys of one plan mapping, each checked, every failure one `PlanError` that
    names the key, the source and the fix."""

    def __init__(self, payload: object, source: str) -> None:
        if not isinstance(payload, Mapping):
            raise PlanError(f"{source} must be a JSON object (the output of `lambdadnn solve "
                            f"--json`), got {brief(payload)}")
        self.payload, self.source = payload, source

    def value(self, key: str) -> Any:
        if self.payload.get(key) is None:
            raise PlanError(f"`{key}` is missing from {self.source}; {PLAN_FIX}")
        return self.payload[key]

    def refuse(self, key: str, value: object, need: str) -> NoReturn:
        raise PlanError(f"`{key}` in {self.source} must be {need}, got {brief(value)}; "
                        f"{PLAN_FIX}")

    def number(self, key: str, *, sign: Literal["positive", "non-negative"] = "positive",
               maximum: float = MAX_INTEGER, value: object = None) -> float:
        raw = self.value(key) if value is None else value
        return number(key, raw, error=PlanError, maximum=maximum, sign=sign,
                      source=self.source, fix=PLAN_FIX)

    def integer(self, key: str, low: int, high: int, *, value: object = None) -> int:
        raw = self.value(key) if value is None else value
        return integer(key, raw, error=PlanError, minimum=low, maximum=high,
                       need=f"an integer from {low:,} to {high:,}", source=self.source,
                       fix=PLAN_FIX)

    def text(self, key: str, value: object = None, *, limit: int = MAX_PLAN_TEXT) -> str:
        raw = self.value(key) if value is None else value
        if not isinstance(raw, str) or not raw.strip() or len(raw) > limit:
            self.refuse(key, raw, f"a non-empty text of at most {limit:,} characters")
        return raw

    def choice(self, key: str, choices: tuple[str, ...]) -> Any:
        raw = self.value(key)
        if not isinstance(raw, str) or raw not in choices:
            self.refuse(key, raw, f"one of {', '.join(map(repr, choices))}")
        return raw

    def mapping(self, key: str, raw: object) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            self.refuse(key, raw, "a JSON object")
        return raw

    def section(self, key: str, kind: type) -> dict[str, float]:
        """A breakdown: exactly its fields, each a number ≥ 0."""
        raw = self.mapping(key, self.value(key))
        names = [item.name for item in fields(kind)]
        if sorted(map(str, raw)) != sorted(names):
            self.refuse(key, raw, f"an object with the keys {', '.join(names)}")
        return {name: self.number(f"{key}.{name}", sign="non-negative", maximum=math.inf,
                                  value=raw[name]) for name in names}

    def guarantee(self) -> float | None:
        raw = self.payload.get("guarantee")
        if raw is None:
            return None
        return probability("guarantee", raw, error=PlanError, source=self.source,
                           need="a probability strictly between 0 and 1, or null", fix=PLAN_FIX)

    def bounds(self) -> Bounds:
        raw = self.mapping("bounds", self.value("bounds"))
        derivations = raw.get("derivations")
        if not isinstance(derivations, (list, tuple)) or not all(
            isinstance(line, str) for line in derivations
        ):
            self.refuse("bounds.derivations", derivations, "a list of texts")
        met = raw.get("deadline_met")
        if not isinstance(met, bool):
            self.refuse("bounds.deadline_met", met, "true or false")

        def count(name: str, low: int = 0) -> int:
            return self.integer(f"bounds.{name}", low, MAX_INTEGER, value=raw.get(name))

        return Bounds(count("n_min", 1), count("n_max", 1), count("m_min", 1), count("m_max", 1),
                      met, count("grid_points", 1), count("box_points"),
                      count("evaluated_points"), tuple(derivations))

    def instance(self) -> Instance:
        raw = self.value("instance_spec")
        if isinstance(raw, Instance):
            return raw
        try:
            return load_instance(self.mapping("instance_spec", raw))
        except InstanceError as error:
            raise PlanError(f"`instance_spec` in {self.source}: {error}") from None

    def coverage(self) -> FitCoverage | None:
        raw = self.payload.get("fit_coverage")
        if raw is None:
            return None
        where = "fit_coverage"
        raw = self.mapping(where, raw)
        try:
            return FitCoverage(
                z=self.number(f"{where}.z", sign="non-negative", maximum=math.inf,
                              value=raw["z"]),
                moved=tuple(MovedParameter(**self.mapping(f"{where}.moved", item))
                            for item in raw["moved"]),
                at_value=tuple(AtValue(**self.mapping(f"{where}.at_value", item))
                               for item in raw["at_value"]),
                note=self.text(f"{where}.note", raw["note"], limit=MAX_NOTE_CHARS),
                run_spread=self.number(f"{where}.run_spread", sign="non-negative",
                                       maximum=math.inf, value=raw["run_spread"]),
                iteration_factor=self.number(f"{where}.iteration_factor", maximum=math.inf,
                                             value=raw["iteration_factor"]),
            )
        except (KeyError, TypeError):
            self.refuse(where, raw, "the `fit_coverage` object `lambdadnn solve --json` writes")
