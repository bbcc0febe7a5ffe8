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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..inputs.files import brief, read_text
from ..solver.errors import InstanceError
from ..solver.instance import (
    ARCHITECTURES,
    MAX_CONCURRENCY,
    MAX_INTEGER,
    Instance,
    instance_mapping,
)
from ..solver.instance_yaml import load_instance
from . import LaunchError
from .timings import RunTimings
from .workloads import DEFAULT_WORKLOAD

if TYPE_CHECKING:
    from ..solver.plan import Plan

__all__ = [
    "KEY_TTL_MARGIN_S", "LAMBDA_MEMORY_MB", "MAX_SHARDS", "WORKER_DEFAULTS", "LaunchReport",
    "LaunchSpec", "Prediction", "RunFailed", "check_shards", "default_margin", "limit_for",
    "read_plan",
]

KEY_TTL_MARGIN_S = 86_400  # a job's Redis keys outlive its deadline by a day (`key_ttl_s`)
# Parameter-server shards a launch runs: a redis-server (and a thread per worker) each, and
# past a handful no workload here gains from one more.
MAX_SHARDS = 16
_KEY_TTL_MAX_S = 366 * 86_400
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


def default_margin(timeout_s: float) -> float:
    """Seconds before an invocation's limit at which workers stop to checkpoint, unless set:
    a quarter of the limit, at most the catalogues' 30 s."""
    return min(float(WORKER_DEFAULTS["timeout_margin_s"]), timeout_s / 4)


def limit_for(usable_s: float) -> float:
    """The invocation limit whose `default_margin` leaves `usable_s` seconds of training."""
    short = usable_s * 4 / 3  # where the margin is a quarter of the limit
    return short if default_margin(short) < float(WORKER_DEFAULTS["timeout_margin_s"]) \
        else usable_s + float(WORKER_DEFAULTS["timeout_margin_s"])


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


def check_shards(value: object, field: str = "shards", source: str = "the launch spec") -> int:
    """`value` as a shard count: a whole number from 1 to `MAX_SHARDS` (`2.0` is 2), else one
    `InstanceError` line naming `field`, the value and the fix."""
    need = f"a whole number of parameter-server shards from 1 to {MAX_SHARDS}"
    whole: int | None = None
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        whole = int(value)
    elif not isinstance(value, bool) and isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number) and number.is_integer():
            whole = int(number)
    if whole is None or not 1 <= whole <= MAX_SHARDS:
        raise InstanceError(
            f"`{field}` in {source} must be {need}, got {brief(value)}; give one in 1.."
            f"{MAX_SHARDS} (`--shards K`, or the instance's `parameter_server.shards` and "
            "re-solve)"
        )
    return whole


def _plan_shards(payload: Mapping[str, Any], instance: Instance | None, source: str) -> int:
    """The shards a plan runs: its own `shards` key (a launch spec's), else its instance's
    `parameter_server.shards`, else 1."""
    if payload.get("shards") is not None:
        return check_shards(payload["shards"], "shards", source)
    if instance is not None:
        return check_shards(instance.parameter_server.shards,
                            "instance_spec.parameter_server.shards", source)
    return 1


def _whole_batch(local_batch: float) -> int:
    """The samples a worker takes per iteration: the model's (real) local batch, rounded, at
    least 1."""
    return max(1, round(local_batch))


def _fields(payload: object, source: str) -> dict[str, Any]:
    """The checked constructor arguments of a `LaunchSpec`, from plan keys; other keys ignored.

    Needs `functions`, `memory_mb`, `local_batch`, `iterations`, `time_s`, `status` and
    `platform`; `restarts` defaults to 0, `guarantee` to None, `shards` to the instance's
    (else 1). Raises `InstanceError` naming the first bad key.
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
        "local_batch": _whole_batch(_number(payload, "local_batch", source)),
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
    instance = _instance(payload.get("instance_spec"), source)
    return {**fields, "platform": platform, "architecture": architecture, "status": status,
            "guarantee": _guarantee(payload.get("guarantee"), source), "instance": instance,
            "shards": _plan_shards(payload, instance, source)}


def _guarantee(value: object, source: str) -> float | None:
    """The plan's guarantee (`solve --guarantee`): None, or a probability strictly in (0, 1)."""
    if value is None:
        return None
    need = "a probability strictly between 0 and 1, or null"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _refuse("guarantee", value, need, source)
    if not 0 < float(value) < 1:
        _refuse("guarantee", value, need, source)
    return float(value)


def _instance(value: object, source: str) -> Instance | None:
    """The instance a plan was solved from (`instance_spec`), checked as any instance is."""
    if value is None or isinstance(value, Instance):
        return value
    try:
        return load_instance(value)  # type: ignore[arg-type]
    except InstanceError as error:
        raise InstanceError(f"`instance_spec` in {source}: {error}") from None


@dataclass(frozen=True)
class LaunchSpec:
    """A plan as the launcher runs it; the constructor refuses anything it could not run.

    `iterations` is the plan's (fractional) iteration count rounded up and `local_batch`
    rounded to the nearest sample; `time_s` and `restarts` are the model's predictions.
    `shards` is the parameter server's shard count k (`channel.ParameterChannel`): the
    plan's instance's `parameter_server.shards` unless set, at most `MAX_SHARDS`.
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
    guarantee: float | None = None  # the plan's, which an adaptive launch keeps
    deadline_s: float | None = None  # the plan's; its instance's when not given
    shards: int = 1  # parameter-server shards, each a Redis of its own
    # The instance the plan was solved from: what `predicted_time_s` is computed from.
    instance: Instance | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:  # direct construction is checked too
        keys = self._plan_keys()
        _fields({**keys, "instance_spec": self.instance}, "the launch spec")
        if self.deadline_s is not None:
            _number(keys, "deadline_s", "the launch spec")
        elif self.instance is not None:
            object.__setattr__(self, "deadline_s", self.instance.objective.deadline_s)

    def _plan_keys(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "instance"}

    def to_dict(self) -> dict[str, Any]:
        """The plan keys `from_mapping` reads back, the instance as `instance_spec`."""
        spec = None if self.instance is None else instance_mapping(self.instance)
        return {**self._plan_keys(), "instance_spec": spec}

    @classmethod
    def from_plan(cls, plan: Plan) -> LaunchSpec:
        """The spec of a solved plan (its status, platform and deadline included), carrying
        the very instance it was solved from; checked once, by the constructor."""
        return cls(
            functions=plan.functions, memory_mb=plan.memory_mb,
            local_batch=_whole_batch(plan.local_batch), iterations=math.ceil(plan.iterations),
            time_s=plan.time_s, restarts=plan.restarts, platform=plan.platform,
            architecture=plan.architecture, status=plan.status, guarantee=plan.guarantee,
            deadline_s=plan.deadline_s, instance=plan.solved_from,
            shards=check_shards(plan.solved_from.parameter_server.shards,
                                "parameter_server.shards", f"instance {brief(plan.instance)}"),
        )

    @classmethod
    def from_mapping(cls, payload: object, *, source: str = "the plan") -> LaunchSpec:
        """A spec from `Plan.to_dict()` / `solve --json` keys (see `_fields`); `deadline_s`
        is optional (a plan without it runs to its instance's deadline, if any)."""
        checked = _fields(payload, source)
        assert isinstance(payload, Mapping)  # `_fields` refused anything else
        deadline = (None if payload.get("deadline_s") is None
                    else _number(payload, "deadline_s", source))
        return cls(**checked, deadline_s=deadline)

    def with_shards(self, shards: object, *, field: str = "--shards") -> LaunchSpec:
        """This spec run with `shards` parameter-server shards (`lambdadnn launch --shards`),
        checked (`check_shards`, naming `field`)."""
        return replace(self, shards=check_shards(shards, field, "the launch"))

    @property
    def solved_from(self) -> Instance:
        """The instance the plan was solved from: what an adaptive launch re-plans from
        (`solver.adaptive.Controller.of`)."""
        if self.instance is None:
            raise LaunchError(
                "`--adaptive` re-plans from the instance the plan was solved from, and this "
                "plan carries none (`instance_spec`); re-solve it with "
                "`lambdadnn solve X.yaml --json`"
            )
        return self.instance

    def worker_event(
        self, *, job: str, redis_url: str, settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The event every rank receives (its `rank` is added per invocation).

        Workers, iterations, local and global batch and the channel's `key_ttl_s` come from
        the spec, and `shards` when there are several (the backend adds their `redis_urls`;
        see `worker.shard_urls`); the rest from `WORKER_DEFAULTS`, which `settings` override
        (both backends pass their own).
        """
        return {
            **WORKER_DEFAULTS, "job": job, "redis_url": redis_url, "workers": self.functions,
            "iterations": self.iterations, "local_batch": self.local_batch,
            "global_batch": self.global_batch, "key_ttl_s": self.key_ttl_s,
            **({"shards": self.shards} if self.shards > 1 else {}), **(settings or {}),
        }

    @property
    def key_ttl_s(self) -> int:
        """How long the job's Redis keys outlive their last checkpoint: the plan's deadline
        (its instance's, else its predicted time) plus `KEY_TTL_MARGIN_S`, at most a year.
        Long enough that a running job's keys never expire between two checkpoints (at most
        one invocation apart), and that a stopped one can be resumed within the day."""
        deadline = self.time_s if self.deadline_s is None else self.deadline_s
        return min(_KEY_TTL_MAX_S, math.ceil(max(deadline, self.time_s)) + KEY_TTL_MARGIN_S)

    @property
    def global_batch(self) -> int:
        """B = n × b: what every iteration trains on, kept when an adaptive launch changes n."""
        return self.functions * self.local_batch


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
    text = read_text(path, what="a plan JSON (`lambdadnn solve X.yaml --json`)",
                     error=InstanceError)
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
class Prediction:
    """The model's time for the run as launched, or None with the one-line reason why not."""

    time_s: float | None
    restarts: int | None
    note: str | None

    @classmethod
    def of(
        cls, spec: LaunchSpec, *, backend: str, workload: str, timeout_s: float,
        timeout_margin_s: float,
    ) -> Prediction:
        """Predict from the plan's instance, for its n, m, batch and iterations at the
        launch's invocation limit; only when the instance was profiled for this very
        workload on this backend, never a figure for another network or machine."""
        from ..solver.prediction import predict_run

        instance = spec.instance
        if instance is None:
            return cls(None, None, "the plan carries no instance (`instance_spec`); re-solve "
                                   "it with `lambdadnn solve X.yaml --json`")
        if instance.fit is None:
            return cls(None, None, f"instance {brief(instance.name, 60)} has no `fit` section, so "
                                   "it describes no workload the launcher runs; measure one "
                                   "with `lambdadnn profile`")
        profiled = (instance.fit.workload, instance.fit.backend)
        if profiled != (workload, backend):
            return cls(None, None, f"instance {brief(instance.name, 60)} was profiled for "
                                   f"{brief(profiled[0], 60)} on {profiled[1]}, not for "
                                   f"{brief(workload, 60)} on {backend}, which ran; launch "
                                   "what it was profiled for, or measure this with "
                                   f"`lambdadnn profile --backend {backend}`")
        server = instance.parameter_server
        if server.shards != spec.shards:  # `--shards`: predict the shards launched
            instance = replace(instance, parameter_server=replace(server, shards=spec.shards))
        try:  # after the run: a plan the model cannot time still gets its measured report
            run = predict_run(
                instance, functions=spec.functions, memory_mb=spec.memory_mb,
                local_batch=spec.local_batch, iterations=spec.iterations, timeout_s=timeout_s,
                timeout_margin_s=timeout_margin_s,
            )
        except InstanceError as error:
            return cls(None, None, f"the model has no time for this run: {error}")
        return cls(run.time_s, run.restarts, None)


@dataclass(frozen=True)
class LaunchReport:
    """What a launch measured beside what the model predicted; the same keys on both backends.

    `status` is "done", or "failed" with `error` saying why (`RunFailed` carries that
    report). `final_loss` and `test_accuracy` are None when the workers published no result
    (a dry run, a failed run); `runs_on` says where the workers ran: their CPU cap locally,
    the function on AWS; `workload` is what they trained (the event's: a shipped name or
    `module:factory`). `measured_time_s` runs from the first launch to the last update
    applied, which is what the model predicts; `wall_time_s` adds the final evaluation and
    the shutdown. `predicted_time_s` is the model's for this run (`Prediction`): None, with
    `prediction_note` saying why, unless the plan's instance was profiled for this workload.
    Timings (see `launcher.timings.RunTimings`) are None when no iteration was timed;
    `throttled_share` is the share of CPU periods in which a worker's cgroup was throttled
    (local backend only; of the last round's cgroups). `rounds` lists the run's stretches at
    one plan (`launcher.adaptive.AdaptiveRun.rounds`): a static launch has one, an adaptive
    one a further round per change of (n, m), each with the decision and its reason;
    `functions` and `memory_mb` are the first round's, `invocations` counts every round's.
    `deadline_s` is the plan's (None: it names none); `met` whether `measured_time_s` kept
    it and `late_s` by how much it missed it (0 when met), both None without a deadline or
    for a failed run. `shards` is the parameter server's shard count; per shard (empty when
    the workers recorded none), `shard_pushed_bytes` and `shard_pulled_bytes` are the array
    bytes all ranks pushed to and pulled from it, and `shard_exchange_s` and
    `shard_exchange_median_s` its exchange time, summed and per iteration (see
    `launcher.timings.RunTimings`).
    """

    status: str
    backend: str
    workload: str
    platform: str
    architecture: str
    functions: int
    memory_mb: int
    local_batch: int
    iterations: int
    restarts: int
    predicted_restarts: int | None
    invocations: int
    measured_time_s: float
    wall_time_s: float
    predicted_time_s: float | None
    prediction_error: float | None
    prediction_note: str | None
    time_to_first_iteration_s: float | None
    startup_s: tuple[float, ...]
    restart_gap_s: tuple[float, ...]
    iteration_median_s: float | None
    iteration_p90_s: float | None
    compute_s: float
    exchange_s: float
    throttled_share: float | None
    final_loss: float | None
    test_accuracy: float | None
    runs_on: str
    rounds: tuple[dict[str, Any], ...]
    error: str | None = None
    deadline_s: float | None = None
    met: bool | None = None
    late_s: float | None = None
    shards: int = 1
    shard_pushed_bytes: tuple[int, ...] = ()
    shard_pulled_bytes: tuple[int, ...] = ()
    shard_exchange_s: tuple[float, ...] = ()
    shard_exchange_median_s: tuple[float | None, ...] = ()

    @classmethod
    def of(
        cls, spec: LaunchSpec, *, backend: str, workload: str, iterations: int, restarts: int,
        wall_time_s: float, result: Mapping[str, Any] | None, runs_on: str,
        prediction: Prediction, timings: RunTimings, throttled_share: float | None = None,
        rounds: Sequence[Mapping[str, Any]] = (), error: str | None = None,
    ) -> LaunchReport:
        """A finished run of `spec`, "done" (or "failed" with the `error`); `result` is what
        the workers published (or None). Without `rounds` (both backends give them), every
        invocation round ran the spec's n."""
        def metric(key: str) -> float | None:
            value = (result or {}).get(key)
            return None if value is None else float(value)

        predicted = prediction.time_s
        measured = wall_time_s if timings.training_s is None else timings.training_s
        deadline = spec.deadline_s
        met = None if deadline is None or error is not None else measured <= deadline
        return cls(
            status="done" if error is None else "failed", backend=backend, workload=workload,
            platform=spec.platform, architecture=spec.architecture, functions=spec.functions,
            memory_mb=spec.memory_mb, local_batch=spec.local_batch, iterations=iterations,
            restarts=restarts, predicted_restarts=prediction.restarts,
            invocations=(sum(int(round_["invocations"]) for round_ in rounds) if rounds
                         else spec.functions * (restarts + 1)),
            measured_time_s=measured,
            wall_time_s=wall_time_s, predicted_time_s=predicted,
            prediction_error=None if predicted is None else (measured - predicted) / predicted,
            prediction_note=prediction.note,
            time_to_first_iteration_s=timings.time_to_first_iteration_s,
            startup_s=timings.startup_s, restart_gap_s=timings.restart_gap_s,
            iteration_median_s=timings.iteration_median_s,
            iteration_p90_s=timings.iteration_p90_s, compute_s=timings.compute_s,
            exchange_s=timings.exchange_s, throttled_share=throttled_share,
            final_loss=metric("final_loss"), test_accuracy=metric("test_accuracy"),
            runs_on=runs_on, rounds=tuple(dict(round_) for round_ in rounds), error=error,
            deadline_s=deadline, met=met,
            late_s=None if met is None or deadline is None else max(0.0, measured - deadline),
            shards=spec.shards, shard_pushed_bytes=timings.shard_pushed_bytes,
            shard_pulled_bytes=timings.shard_pulled_bytes,
            shard_exchange_s=timings.shard_exchange_s,
            shard_exchange_median_s=timings.shard_exchange_median_s,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a loss that diverged to NaN or infinity is null, never `NaN`; the
        rounds a list of objects."""
        out = {key: None if isinstance(value, float) and not math.isfinite(value) else value
               for key, value in asdict(self).items()}
        out["rounds"] = [dict(round_) for round_ in self.rounds]
        for key in ("shard_pushed_bytes", "shard_pulled_bytes", "shard_exchange_s",
                    "shard_exchange_median_s"):
            out[key] = list(getattr(self, key))
        return out

    def shard_lines(self) -> list[str]:
        """The per-shard figures as lines of the text report: one per shard, nothing when
        the workers recorded none."""
        if not self.shard_pushed_bytes:
            return []
        lines = [f"  PS shards      {self.shards}: per shard, bytes pushed / pulled and "
                 "exchange time (median per iteration, total)"]
        for shard, (pushed, pulled) in enumerate(
            zip(self.shard_pushed_bytes, self.shard_pulled_bytes, strict=True)
        ):
            median = (self.shard_exchange_median_s[shard]
                      if shard < len(self.shard_exchange_median_s) else None)
            total = (self.shard_exchange_s[shard]
                     if shard < len(self.shard_exchange_s) else None)
            lines.append(
                f"    shard {shard}  {pushed / 1e6:,.1f} MB / {pulled / 1e6:,.1f} MB, "
                f"{'n/a' if median is None else format(median, '.4f')} s, "
                f"{'n/a' if total is None else format(total, '.2f')} s"
            )
        return lines


class RunFailed(LaunchError):
    """A run that started and failed (diverged, tampered with, no progress): the message is
    the report's `error`, and `report` what the run measured up to then."""

    def __init__(self, report: LaunchReport) -> None:
        super().__init__(report.error)
        self.report = report
