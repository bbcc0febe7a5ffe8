"""What a launch runs and what it reports, shared by the local and the AWS backend.

A `LaunchSpec` is a plan reduced to what running it needs (functions, memory, batch,
iterations, the platform it was priced for) and checked up front, whether it comes from a
`Plan`, from `lambdadnn solve --json` output or from a hand-written file: a launch never
starts from a value it would misread (`functions: 1.5`, NaN, a memory Lambda does not offer).
A `LaunchReport` is what either backend measured, with the same keys for both.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lambdadnn.launcher.workloads import DEFAULT_WORKLOAD
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief, read_text
from lambdadnn.solver.instance import ARCHITECTURES, MAX_CONCURRENCY, MAX_INTEGER

if TYPE_CHECKING:
    from lambdadnn.solver.plan import Plan

__all__ = [
    "LAMBDA_MEMORY_MB", "WORKER_DEFAULTS", "LaunchReport", "LaunchSpec", "read_plan",
]

LAMBDA_MEMORY_MB = (128, 10_240)  # every shipped platform's grid lies within Lambda's range
_STATUSES = ("optimal", "infeasible")
_FIX = "write the plan with `lambdadnn solve X.yaml --json`"

# Settings every worker event carries unless the caller overrides them; `timeout_margin_s`
# matches the platform catalogues (`timeout_margin_s: 30`) so the checkpoint lands before
# Lambda's 900 s timeout kills the invocation. The workload sets the learning rate.
WORKER_DEFAULTS: dict[str, Any] = {
    "checkpoint_every": 10,
    "timeout_margin_s": 30.0,
    "seed": 0,
    "workload": DEFAULT_WORKLOAD,
}


def _refuse(key: str, value: object, need: str, source: str) -> NoReturn:
    raise InstanceError(f"`{key}` in {source} must be {need}, got {brief(value)}; {_FIX}")


def _number(payload: Mapping[str, Any], key: str, source: str) -> float:
    """A positive finite number (numpy's included) of at most MAX_INTEGER."""
    value = payload[key]
    need = f"a positive number ≤ {MAX_INTEGER:,}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _refuse(key, value, need, source)
    try:
        number = float(value)
    except OverflowError:
        _refuse(key, value, need, source)
    if not (math.isfinite(number) and 0 < number <= MAX_INTEGER):
        _refuse(key, value, need, source)
    return number


def _integer(
    payload: Mapping[str, Any], key: str, source: str, low: int, high: int
) -> int:
    """A whole number in [low, high]: `1.5` functions is a typo, not one function."""
    value = payload[key]
    need = f"an integer from {low:,} to {high:,}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _refuse(key, value, need, source)
    if isinstance(value, numbers.Integral):
        whole = int(value)
    else:
        number = float(value)
        if not (math.isfinite(number) and number.is_integer()):
            _refuse(key, value, need, source)
        whole = int(number)
    if not low <= whole <= high:
        _refuse(key, value, need, source)
    return whole


def _fields(payload: object, source: str) -> dict[str, Any]:
    """The checked constructor arguments of a `LaunchSpec`, from plan keys; other keys ignored.

    Needs `functions`, `memory_mb`, `local_batch`, `iterations`, `time_s`, `status` and
    `platform`; `restarts` defaults to 0. Raises `InstanceError` naming the first bad key.
    """
    if not isinstance(payload, Mapping):
        raise InstanceError(
            f"{source} must be a JSON object (the output of `lambdadnn solve --json`), "
            f"got {brief(payload)}"
        )
    for key in ("functions", "memory_mb", "local_batch", "iterations", "time_s", "status",
                "platform", "architecture"):
        if key not in payload or payload[key] is None:
            raise InstanceError(f"`{key}` is missing from {source}; {_FIX}")
    low, high = LAMBDA_MEMORY_MB
    status, platform = payload["status"], payload["platform"]
    architecture = payload["architecture"]
    fields = {
        "functions": _integer(payload, "functions", source, 1, MAX_CONCURRENCY),
        "memory_mb": _integer(payload, "memory_mb", source, low, high),
        "local_batch": max(1, round(_number(payload, "local_batch", source))),
        "iterations": math.ceil(_number(payload, "iterations", source)),
        "time_s": _number(payload, "time_s", source),
        "restarts": (0 if payload.get("restarts") is None
                     else _integer(payload, "restarts", source, 0, MAX_INTEGER)),
    }
    if status not in _STATUSES:
        _refuse("status", status, "'optimal' or 'infeasible'", source)
    if not isinstance(platform, str) or not platform.strip() or len(platform) > 200:
        _refuse("platform", platform, "a platform name such as 'aws-lambda-arm64'", source)
    if architecture not in ARCHITECTURES:
        _refuse("architecture", architecture, f"one of {', '.join(ARCHITECTURES)}", source)
    return {**fields, "platform": platform, "architecture": architecture, "status": status}


@dataclass(frozen=True)
class LaunchSpec:
    """A plan as the launcher runs it; the constructor refuses anything it could not run.

    `iterations` is the plan's (fractional) iteration count rounded up and `local_batch`
    rounded to the nearest sample; `time_s` and `restarts` are the model's predictions.
    """

    functions: int
    memory_mb: int
    local_batch: int
    iterations: int
    time_s: float
    restarts: int
    platform: str
    architecture: str  # the platform's, so a plan priced for arm64 deploys on arm64
    status: str = "optimal"

    def __post_init__(self) -> None:
        _fields(asdict(self), "the launch spec")  # direct construction is checked too

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_plan(cls, plan: Plan) -> LaunchSpec:
        """The spec of a solved plan (its status and platform included)."""
        return cls.from_mapping(plan.to_dict(), source="the solved plan")

    @classmethod
    def from_mapping(cls, payload: object, *, source: str = "the plan") -> LaunchSpec:
        """A spec from `Plan.to_dict()` / `solve --json` keys (see `_fields`)."""
        return cls(**_fields(payload, source))

    def worker_event(
        self, *, job: str, redis_url: str, settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The event every rank receives (its `rank` is added per invocation).

        Workers, iterations and local batch come from the spec; the rest from
        `WORKER_DEFAULTS`, which `settings` override (both backends pass their own).
        """
        return {
            **WORKER_DEFAULTS, "job": job, "redis_url": redis_url, "workers": self.functions,
            "iterations": self.iterations, "local_batch": self.local_batch, **(settings or {}),
        }


def _no_constant(name: str) -> NoReturn:
    """json.loads accepts NaN and Infinity, which no JSON writer emits and no plan holds."""
    raise InstanceError(f"the plan holds {name}, which is not a JSON number; {_FIX}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise InstanceError(f"`{brief(key)[1:-1]}` appears twice in the plan; keep one")
        seen[key] = value
    return seen


def read_plan(path: Path) -> LaunchSpec:
    """The spec of a plan JSON file (regular, at most a few MB), or one `InstanceError` line."""
    shown = brief(str(path), 80)
    text = read_text(path, what="a plan JSON (`lambdadnn solve X.yaml --json`)")
    try:
        payload = json.loads(text, parse_constant=_no_constant,
                             object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise InstanceError(f"file {shown} nests too deeply to be a plan; {_FIX}") from None
    except InstanceError:  # NaN, Infinity or a duplicate key, said by the hooks
        raise
    except ValueError as error:  # JSONDecodeError, or an integer of over 4,300 digits
        where = (f" at line {error.lineno}, column {error.colno}"
                 if isinstance(error, json.JSONDecodeError) else "")
        raise InstanceError(f"file {shown} is not valid JSON{where}; {_FIX}") from None
    return LaunchSpec.from_mapping(payload, source=f"file {shown}")


@dataclass(frozen=True)
class LaunchReport:
    """What a launch measured beside what the model predicted; the same keys on both backends.

    `final_loss` and `test_accuracy` are None when the workers published no result (a dry
    run); `runs_on` says where the workers ran: their CPU cap locally, the function on AWS;
    `workload` is what they trained (the event's: a shipped name or `module:factory`).
    """

    status: str
    backend: str
    workload: str
    platform: str
    architecture: str
    functions: int
    memory_mb: int
    iterations: int
    restarts: int
    predicted_restarts: int
    invocations: int
    measured_time_s: float
    predicted_time_s: float
    final_loss: float | None
    test_accuracy: float | None
    runs_on: str

    @classmethod
    def of(
        cls, spec: LaunchSpec, *, backend: str, workload: str, iterations: int, restarts: int,
        measured_time_s: float, result: Mapping[str, Any] | None, runs_on: str,
    ) -> LaunchReport:
        """A finished run of `spec`; `result` is what the workers published (or None)."""
        def metric(key: str) -> float | None:
            value = (result or {}).get(key)
            return None if value is None else float(value)

        return cls(
            status="done", backend=backend, workload=workload, platform=spec.platform,
            architecture=spec.architecture, functions=spec.functions,
            memory_mb=spec.memory_mb, iterations=iterations, restarts=restarts,
            predicted_restarts=spec.restarts,
            invocations=spec.functions * (restarts + 1), measured_time_s=measured_time_s,
            predicted_time_s=spec.time_s, final_loss=metric("final_loss"),
            test_accuracy=metric("test_accuracy"), runs_on=runs_on,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a loss that diverged to NaN or infinity is null, never `NaN`."""
        return {key: None if isinstance(value, float) and not math.isfinite(value) else value
                for key, value in asdict(self).items()}
