"""Result objects: what a plan costs and takes, kept apart from how the solver got there."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal

from lambdadnn.models.bounds import Bounds
from lambdadnn.solver.fit_uncertainty import FitCoverage
from lambdadnn.solver.instance import Instance, instance_mapping

Status = Literal["optimal", "infeasible"]
SelectedBy = Literal["enumeration", "highs"]


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
    solver_status: str
    solve_seconds: float
    solved_from: Instance = field(compare=False, repr=False)
    fit_coverage: FitCoverage | None = None  # None: no `fit:` section or no guarantee

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
        out["instance_spec"] = instance_mapping(self.solved_from)
        return out
