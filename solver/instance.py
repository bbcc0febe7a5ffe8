"""Provisioning instances: loading YAML (or a mapping), validating every field up front.

Every problem is reported as one `InstanceError` whose message names the field path in
backticks, the bad value and the fix, so that neither a person nor a scheduler ever sees a
traceback for bad input.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import yaml

from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief, read_text
from lambdadnn.solver.shipped import instances_folder, named, names, platforms_folder

try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml: the same loader in pure Python, slower
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

MAX_GRID_POINTS = 1_000_000
MAX_CONCURRENCY = 1_000_000
MAX_INTEGER = 10**12  # far beyond any real job; models.performance.BATCH_SLACK relies on it
# Caps on physical magnitudes. Each is orders of magnitude beyond any real job or cloud, yet
# keeps the model's products (e.g. epochs x samples x model size / bandwidth) far inside the
# float range, so absurd input is refused here, naming its field, instead of overflowing in
# the solver.
MAX_MEGABYTES = 10**7  # 10 TB: model and dataset sizes, memory sizes (Lambda offers 10 GB)
MAX_RATE = 1e7  # samples/s and MB/s, and their per-MB slopes: beyond any machine or link
MAX_PRICE_USD = 1e6  # per GB-second, request or hour: a million times any cloud price
MAX_SECONDS = 1e9  # about 32 years: deadlines, timeouts, margins and restart overheads
# Bounds on a YAML document before it is turned into Python objects: an instance is about 50
# values, 4 levels deep, with integers of at most 13 digits. Counting through aliases bounds
# an alias bomb (1 KB expanding to gigabytes); the digit limit keeps clear of Python's own
# limit on converting long integers (4,300 digits), which would raise a bare ValueError.
MAX_YAML_VALUES = 10_000
MAX_YAML_DEPTH = 32
MAX_INTEGER_CHARS = 100
MAX_TEXT_CHARS = 100  # names appear in every table and message
MAX_NOTE_CHARS = 300  # a fitted parameter's note: one sentence on why it is not identified
MB_PER_VCPU = 1769  # AWS Lambda: 1,769 MB of memory buy one vCPU (the local backend copies it)
MAX_VCPU = 1e7  # a platform's total vCPU: beyond any machine or account (Lambda's is 6e6)


@dataclass(frozen=True)
class MemoryGrid:
    """The memory sizes a platform offers: min, min + step, ..., up to max."""

    min_mb: int
    max_mb: int
    step_mb: int

    def values(self) -> npt.NDArray[np.float64]:
        return np.arange(self.min_mb, self.max_mb + 1, self.step_mb, dtype=np.float64)

    @property
    def size(self) -> int:
        return (self.max_mb - self.min_mb) // self.step_mb + 1


@dataclass(frozen=True)
class Platform:
    name: str
    memory: MemoryGrid
    price_per_gb_second: float
    price_per_request: float
    timeout_s: float
    timeout_margin_s: float
    restart_overhead_s: float
    max_concurrency: int
    architecture: str = "x86_64"  # the CPU the functions run on, and a plan deploys to
    max_vcpu: float | None = None  # n·m/MB_PER_VCPU may not exceed it (a machine's CPUs)

    @property
    def vcpu_memory_mb(self) -> int | None:
        """The most memory all functions together may have, ⌊max_vcpu·1769⌋ MB, or None.

        n·m/1769 ≤ max_vcpu ⇔ n·m ≤ max_vcpu·1769 ⇔ n·m ≤ this (n·m is an integer), computed
        exactly (no float rounding), so a plan exactly at the limit is allowed.
        """
        if self.max_vcpu is None:
            return None
        return math.floor(Fraction(self.max_vcpu) * MB_PER_VCPU)


@dataclass(frozen=True)
class Workload:
    model_size_mb: float
    dataset_size_mb: float
    samples: int
    epochs: int
    local_batch: int
    max_global_batch: int
    min_memory_mb: float | None = None


@dataclass(frozen=True)
class RateProfile:
    slope: float
    intercept: float
    saturates_at_mb: float | None = None


@dataclass(frozen=True)
class StorageProfile:
    slope: float
    intercept: float
    max_mbps: float


@dataclass(frozen=True)
class StartupProfile:
    """Seconds from invocation to the first iteration, per round: base_s + per_function_s·n."""

    base_s: float = 0.0
    per_function_s: float = 0.0


@dataclass(frozen=True)
class Profile:
    """The measured profile; `latency_s` and `startup` (model v2) are 0 when absent."""

    rate: RateProfile
    storage_bandwidth: StorageProfile
    latency_s: float = 0.0  # per exchange: each iteration pays it on the push and the pull
    startup: StartupProfile = StartupProfile()


@dataclass(frozen=True)
class ParameterServer:
    bandwidth_mbps: float
    function_bandwidth_mbps: float
    price_per_hour: float


@dataclass(frozen=True)
class Objective:
    deadline_s: float


@dataclass(frozen=True)
class Limits:
    max_functions: int | None = None


Scalar = int | float | str | None
# A free-form record (a profiling run, the machine) as (key, value) pairs in the file's order:
# tuples rather than dicts so that an `Instance` stays hashable (simulators memoise on it).
Record = tuple[tuple[str, Scalar | tuple[Scalar, ...]], ...]


def _plain(value: Scalar | tuple[Scalar, ...]) -> Scalar | list[Scalar]:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class FitParameter:
    """One fitted parameter: its value, standard error (None: not estimated) and whether the
    profiling design could identify it (`note` says why not, or how it was fixed)."""

    name: str
    value: float
    stderr: float | None
    identified: bool
    note: str | None = None


@dataclass(frozen=True)
class Fit:
    """How the profile was measured (`lambdadnn profile`): for which launcher workload, on
    which backend, at what profiling time and cost. Never read by the solver's model; the
    launcher predicts a run only for the workload and backend the profile was fitted on."""

    workload: str
    backend: str
    seconds: float
    cost_usd: float
    parameters: tuple[FitParameter, ...] = ()
    runs: tuple[Record, ...] = ()
    machine: Record = ()
    # the correlation of the errors of `profile.rate.slope` and `.intercept` (their joint
    # least-squares fit makes it strongly negative); None: not recorded, taken as the worst
    rate_correlation: float | None = None

    def to_mapping(self) -> dict[str, Any]:
        """The `fit:` section as plain YAML types, in the loader's schema."""
        out: dict[str, Any] = {
            "workload": self.workload, "backend": self.backend, "seconds": self.seconds,
            "cost_usd": self.cost_usd,
            "parameters": {
                p.name: {
                    "value": p.value, "stderr": p.stderr, "identified": p.identified,
                    **({} if p.note is None else {"note": p.note}),
                }
                for p in self.parameters
            },
        }
        if self.runs:
            out["runs"] = [{key: _plain(value) for key, value in run} for run in self.runs]
        if self.machine:
            out["machine"] = {key: _plain(value) for key, value in self.machine}
        if self.rate_correlation is not None:
            out["rate_correlation"] = self.rate_correlation
        return out


@dataclass(frozen=True)
class Instance:
    """One provisioning question: a training job, its measured profile, a platform, a deadline."""

    name: str
    platform: Platform
    workload: Workload
    profile: Profile
    parameter_server: ParameterServer
    objective: Objective
    limits: Limits
    fit: Fit | None = None  # how the profile was measured; no part of the model

    @property
    def max_functions(self) -> int:
        """The largest `n` allowed: the platform's concurrency, capped by `limits.max_functions`."""
        cap = self.limits.max_functions
        concurrency = self.platform.max_concurrency
        return concurrency if cap is None else min(cap, concurrency)

    @property
    def min_memory_mb(self) -> float:
        """The smallest memory allowed: the grid's minimum, raised by `workload.min_memory_mb`."""
        floor = self.workload.min_memory_mb
        grid_min = float(self.platform.memory.min_mb)
        return grid_min if floor is None else max(grid_min, floor)

    def parameters(self) -> dict[str, float]:
        """The model's parameters by symbol name (see `models.equations.PARAMETER_SYMBOLS`)."""
        w, rate, storage = self.workload, self.profile.rate, self.profile.storage_bandwidth
        ps, pf = self.parameter_server, self.platform
        return {
            "d_m": w.model_size_mb,
            "d_t": w.dataset_size_mb,
            "n_t": float(w.samples),
            "e": float(w.epochs),
            "b_lf": float(w.local_batch),
            "b_gmax": float(w.max_global_batch),
            "alpha1": rate.slope,
            "beta1": rate.intercept,
            "m_sat": math.inf if rate.saturates_at_mb is None else rate.saturates_at_mb,
            "alpha2": storage.slope,
            "beta2": storage.intercept,
            "B_s": storage.max_mbps,
            "B_p": ps.bandwidth_mbps,
            "B_fmax": ps.function_bandwidth_mbps,
            "p_ps": ps.price_per_hour,
            "p_gbs": pf.price_per_gb_second,
            "p_req": pf.price_per_request,
            "L": pf.timeout_s - pf.timeout_margin_s,
            "o": pf.restart_overhead_s,
            "lam": self.profile.latency_s,
            "s_0": self.profile.startup.base_s,
            "s_1": self.profile.startup.per_function_s,
        }


# --- validation -------------------------------------------------------------------------

Check = Callable[[str, Any], Any]


def _fail(path: str, value: Any, need: str, fix: str = "") -> InstanceError:
    tail = f"; {fix}" if fix else ""
    return InstanceError(f"`{path}` must be {need}, got {brief(value)}{tail}")


def _finite(value: Any) -> float | None:
    """`value` as a finite float, or None: a bool, a non-real, NaN, ±inf or beyond float range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # 10**400, a Fraction beyond float range
        return None
    return number if math.isfinite(number) else None


def _number(
    maximum: float, *, sign: Literal["positive", "non-negative", "any"] = "positive", fix: str = ""
) -> Check:
    top = f"{maximum:,.0f}"
    need = {
        "positive": f"a positive number ≤ {top}",
        "non-negative": f"a number from 0 to {top}",
        "any": f"a number from -{top} to {top}",
    }[sign]
    low = -maximum if sign == "any" else 0.0

    def check(path: str, value: Any) -> float:
        number = _finite(value)
        if number is None or not low <= number <= maximum or (sign == "positive" and number == 0):
            raise _fail(path, value, need, fix)
        return number

    return check


def _integer(*, maximum: int = MAX_INTEGER, fix: str = "") -> Check:
    need = f"a positive integer ≤ {maximum:,}"

    def check(path: str, value: Any) -> int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            whole = int(value)
        else:
            number = _finite(value)
            if number is None or not number.is_integer():
                raise _fail(path, value, need, fix)
            whole = int(number)
        if not 1 <= whole <= maximum:
            raise _fail(path, value, need, fix)
        return whole

    return check


def _line(limit: int) -> Check:
    """Text shown in tables and messages: one non-empty printable line of at most `limit`."""

    def check(path: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _fail(path, value, "a non-empty string")
        if len(value) > limit or not value.isprintable():
            raise _fail(path, value, f"one line of at most {limit} printable characters")
        return value

    return check


_text = _line(MAX_TEXT_CHARS)  # a name: shown in every table and message


def positive_number(name: str, value: object, maximum: float) -> float:
    """An argument given in-process or on the command line (`deadline_s`, `--from`), checked
    like the file's fields: any real number type (numpy's too), finite, in (0, maximum]."""
    result: float = _number(maximum)(name, value)
    return result


def non_negative_number(name: str, value: object, maximum: float) -> float:
    """As `positive_number`, 0 allowed (`timeout_margin_s`)."""
    result: float = _number(maximum, sign="non-negative")(name, value)
    return result


def positive_integer(name: str, value: object, maximum: int) -> int:
    """An integer argument (`concurrency`) of any integral type, or a whole float, in
    1..maximum."""
    result: int = _integer(maximum=maximum)(name, value)
    return result


def plan_size(functions: object, memory_mb: object) -> tuple[int, int]:
    """A plan given in-process (`evaluate`): positive integers of any integral type (numpy's
    too, or a float such as 512.0), within the loader's caps on concurrency and memory."""
    return (
        _integer(maximum=MAX_CONCURRENCY)("functions", functions),
        _integer(maximum=MAX_MEGABYTES)("memory_mb", memory_mb),
    )


def probability(name: str, value: object) -> float:
    """A probability strictly between 0 and 1 (`guarantee`), of any real number type."""
    number = _finite(value)
    if number is None or not 0 < number < 1:
        raise _fail(name, value, "a probability strictly between 0 and 1")
    return number


def _key(key: Any) -> str:
    """A key as shown in a message: as is when it is a short printable string, else quoted
    briefly and escaped (a key may be anything from any file, a secret or a 4 MB string)."""
    if isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40:
        return key
    return brief(key)


def _where(path: str, key: Any) -> str:
    return f"{path}.{_key(key)}" if path else _key(key)


def _section(
    path: str, value: Any, fields: Mapping[str, Check], optional: frozenset[str] = frozenset(),
    *, document: str | None = None,
) -> dict[str, Any]:
    """Check a mapping field by field: unknown keys, missing keys and each value's check.

    `document` describes a whole file ("file 'x.yaml' is not an instance"): one that is not a
    mapping or has none of the known keys may be any file at all (a key file, /etc/shadow), so
    it is refused without quoting a byte of it.
    """
    wanted = f"a mapping with the keys {', '.join(fields)}"
    if document is not None and not (
        isinstance(value, Mapping) and any(isinstance(key, str) and key in fields for key in value)
    ):
        got = (
            "a mapping with none of them" if isinstance(value, Mapping)
            else "nothing" if value is None else f"a {type(value).__name__}"
        )
        raise InstanceError(f"{document}: it must be {wanted}, got {got}")
    if not isinstance(value, Mapping):
        raise _fail(path, value, wanted)
    for key in value:
        if key not in fields:
            short = isinstance(key, str) and len(key) <= 100
            close = difflib.get_close_matches(key, list(fields), n=1) if short else []
            hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(fields)}"
            raise InstanceError(f"`{_where(path, key)}` is not a known field; {hint}")
    checked: dict[str, Any] = {}
    for key, check in fields.items():
        where = f"{path}.{key}" if path else key
        if key not in value or value[key] is None:
            if key in optional:
                continue
            raise InstanceError(f"`{where}` is missing; add it (see README.md, 'YAML schema')")
        checked[key] = check(where, value[key])
    return checked


def _memory_grid(path: str, value: Any) -> MemoryGrid:
    size = _integer(maximum=MAX_MEGABYTES)
    fields = {"min": size, "max": size, "step": size}
    raw = _section(path, value, fields)
    if raw["min"] > raw["max"]:
        raise InstanceError(
            f"`{path}.min` ({raw['min']}) must not exceed `{path}.max` ({raw['max']}); swap them"
        )
    grid = MemoryGrid(raw["min"], raw["max"], raw["step"])
    if grid.size > MAX_GRID_POINTS:
        raise InstanceError(
            f"`{path}` has {grid.size:,} sizes, more than {MAX_GRID_POINTS:,}; raise `{path}.step`"
        )
    return grid


ARCHITECTURES = ("x86_64", "arm64")  # AWS Lambda's instruction set architectures


def _architecture(path: str, value: Any) -> str:
    if value not in ARCHITECTURES:
        raise _fail(path, value, f"one of {', '.join(ARCHITECTURES)}")
    return str(value)


def _platform(path: str, value: Any, document: str | None = None) -> Platform:
    price = _number(MAX_PRICE_USD, sign="non-negative")
    fields: dict[str, Check] = {
        "name": _text,
        "memory_mb": _memory_grid,
        "price_per_gb_second": price,
        "price_per_request": price,
        "timeout_s": _number(MAX_SECONDS),
        "timeout_margin_s": _number(MAX_SECONDS, sign="non-negative"),
        "restart_overhead_s": _number(MAX_SECONDS, sign="non-negative"),
        "max_concurrency": _integer(maximum=MAX_CONCURRENCY),
        "architecture": _architecture,
        "max_vcpu": _number(MAX_VCPU, fix="it is the CPUs all functions may use together"),
    }
    optional = frozenset({"architecture", "max_vcpu"})
    raw = _section(path, value, fields, optional, document=document)
    if raw["timeout_margin_s"] >= raw["timeout_s"]:
        raise InstanceError(
            f"`{path}.timeout_margin_s` ({raw['timeout_margin_s']:g}) must be less than "
            f"`{path}.timeout_s` ({raw['timeout_s']:g}); it is the part of each invocation "
            "kept for checkpointing"
        )
    return Platform(
        name=raw["name"],
        memory=raw["memory_mb"],
        price_per_gb_second=raw["price_per_gb_second"],
        price_per_request=raw["price_per_request"],
        timeout_s=raw["timeout_s"],
        timeout_margin_s=raw["timeout_margin_s"],
        restart_overhead_s=raw["restart_overhead_s"],
        max_concurrency=raw["max_concurrency"],
        architecture=raw.get("architecture", "x86_64"),
        max_vcpu=raw.get("max_vcpu"),
    )


def _workload(path: str, value: Any) -> Workload:
    fields: dict[str, Check] = {
        "model_size_mb": _number(MAX_MEGABYTES),
        "dataset_size_mb": _number(MAX_MEGABYTES),
        "samples": _integer(),
        "epochs": _integer(),
        "local_batch": _integer(),
        "max_global_batch": _integer(),
        "min_memory_mb": _number(MAX_MEGABYTES),
    }
    return Workload(**_section(path, value, fields, frozenset({"min_memory_mb"})))


def _profile(path: str, value: Any) -> Profile:
    slope_fix = "more memory never gives a function less CPU or bandwidth on Lambda"

    def rate(where: str, raw: Any) -> RateProfile:
        fields: dict[str, Check] = {
            "slope": _number(MAX_RATE, sign="non-negative", fix=slope_fix),
            "intercept": _number(MAX_RATE, sign="any"),
            "saturates_at_mb": _number(MAX_MEGABYTES),
        }
        return RateProfile(**_section(where, raw, fields, frozenset({"saturates_at_mb"})))

    def storage(where: str, raw: Any) -> StorageProfile:
        fields: dict[str, Check] = {
            "slope": _number(MAX_RATE, sign="non-negative", fix=slope_fix),
            "intercept": _number(MAX_RATE, sign="any"),
            "max_mbps": _number(MAX_RATE),
        }
        return StorageProfile(**_section(where, raw, fields))

    def startup(where: str, raw: Any) -> StartupProfile:
        seconds = _number(MAX_SECONDS, sign="non-negative")
        fields: dict[str, Check] = {"base_s": seconds, "per_function_s": seconds}
        return StartupProfile(**_section(where, raw, fields))

    fields: dict[str, Check] = {
        "rate": rate,
        "storage_bandwidth": storage,
        "latency_s": _number(MAX_SECONDS, sign="non-negative"),
        "startup": startup,
    }
    return Profile(**_section(path, value, fields, frozenset({"latency_s", "startup"})))


def _parameter_server(path: str, value: Any) -> ParameterServer:
    fields: dict[str, Check] = {
        "bandwidth_mbps": _number(MAX_RATE),
        "function_bandwidth_mbps": _number(MAX_RATE),
        "price_per_hour": _number(MAX_PRICE_USD, sign="non-negative"),
    }
    return ParameterServer(**_section(path, value, fields))


def _objective(path: str, value: Any) -> Objective:
    return Objective(**_section(path, value, {"deadline_s": _number(MAX_SECONDS)}))


def _limits(path: str, value: Any) -> Limits:
    fields = {"max_functions": _integer(maximum=MAX_CONCURRENCY)}
    return Limits(**_section(path, value, fields, frozenset({"max_functions"})))


BACKENDS = ("local", "aws")  # where `lambdadnn profile` measures (the launcher's backends)
MAX_FIT_NUMBER = float(MAX_INTEGER)  # a number in `fit`: a parameter, a run's measurement


def _backend(path: str, value: Any) -> str:
    if value not in BACKENDS:
        raise _fail(path, value, f"one of {', '.join(BACKENDS)}")
    return str(value)


def _flag(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, value, "true or false")
    return value


def _scalar(path: str, value: Any, *, lists: bool = False) -> Scalar:
    """A value in a free-form record: a number (an integer stays one), a short text or null."""
    if value is None:
        return None
    if isinstance(value, str):
        text: str = _text(path, value)
        return text
    number = _finite(value)  # None for a bool, a mapping, a list, NaN
    if number is None or abs(number) > MAX_FIT_NUMBER:
        top = f"{MAX_FIT_NUMBER:,.0f}"
        others = ", null or a list of them" if lists else " or null"
        raise _fail(path, value, f"a number from -{top} to {top}, a text{others}")
    return int(value) if isinstance(value, numbers.Integral) else number


def _name(path: str, key: Any) -> str:
    """A key of a free-form mapping (a parameter, a run's measurement): a short name."""
    if not (isinstance(key, str) and key.strip() and len(key) <= MAX_TEXT_CHARS
            and key.isprintable()):
        raise InstanceError(
            f"`{_where(path, key)}` is not a valid key; use a name of at most {MAX_TEXT_CHARS} "
            "printable characters"
        )
    return key


def _record(path: str, value: Any, *, lists: bool) -> Record:
    """A free-form mapping of short names to scalars (and, with `lists`, lists of scalars)."""
    if not isinstance(value, Mapping):
        raise _fail(path, value, "a mapping of names to values")
    pairs: list[tuple[str, Scalar | tuple[Scalar, ...]]] = []
    for key, item in value.items():
        where = f"{path}.{_name(path, key)}"
        if lists and isinstance(item, (list, tuple)):
            pairs.append((key, tuple(_scalar(f"{where}[{i}]", x) for i, x in enumerate(item))))
        else:
            pairs.append((key, _scalar(where, item, lists=lists)))
    return tuple(pairs)


def _fit(path: str, value: Any) -> Fit:
    """The `fit:` section `lambdadnn profile` writes: checked, and kept as plain frozen data."""

    def parameter(where: str, name: str, raw: Any) -> FitParameter:
        fields: dict[str, Check] = {
            "value": _number(MAX_FIT_NUMBER, sign="any"),
            "stderr": _number(MAX_FIT_NUMBER, sign="non-negative"),
            "identified": _flag,
            "note": _line(MAX_NOTE_CHARS),
        }
        checked = _section(where, raw, fields, frozenset({"stderr", "note"}))
        return FitParameter(name, **{"stderr": None, **checked})

    def parameters(where: str, raw: Any) -> tuple[FitParameter, ...]:
        if not isinstance(raw, Mapping):
            raise _fail(where, raw, "a mapping of parameter names to {value, stderr, identified}")
        return tuple(
            parameter(f"{where}.{_name(where, name)}", name, raw[name]) for name in raw
        )

    def runs(where: str, raw: Any) -> tuple[Record, ...]:
        if not isinstance(raw, (list, tuple)):
            raise _fail(where, raw, "a list of runs, each a mapping")
        return tuple(_record(f"{where}[{i}]", run, lists=True) for i, run in enumerate(raw))

    fields: dict[str, Check] = {
        "workload": _text,
        "backend": _backend,
        "seconds": _number(MAX_SECONDS, sign="non-negative"),
        "cost_usd": _number(MAX_PRICE_USD, sign="non-negative"),
        "parameters": parameters,
        "runs": runs,
        "machine": lambda where, raw: _record(where, raw, lists=False),
        "rate_correlation": _number(1, sign="any"),
    }
    return Fit(**_section(path, value, fields,
                          frozenset({"runs", "machine", "rate_correlation"})))


class _Loader(_SafeLoader):
    """YAML's safe loader, stopping as soon as a document has more than `MAX_YAML_VALUES` nodes
    (the parser resolves the tag of each new one), so a 4 MB list is refused in milliseconds."""

    def __init__(self, text: str, shown: str) -> None:
        super().__init__(text)
        self.shown, self.nodes = shown, 0

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        self.nodes += 1
        if self.nodes > MAX_YAML_VALUES:
            raise _too_many(self.shown)
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _too_many(shown: str) -> InstanceError:
    return InstanceError(
        f"file {shown} has more than {MAX_YAML_VALUES:,} values, counting each alias as the "
        "values it repeats (an instance has about 50); is it the right file?"
    )


def _check_scalar(loader: _Loader, node: yaml.ScalarNode, where: str, shown: str) -> None:
    """Construct one scalar, where its path is known: an overlong integer, or a value its tag
    does not fit (`!!int abc`, `2001-02-30`), is named instead of raising from PyYAML."""
    line = f"line {node.start_mark.line + 1} of file {shown}"
    if node.tag == _INT_TAG and len(node.value) > MAX_INTEGER_CHARS:
        raise InstanceError(
            f"`{where}` ({line}) is an integer of {len(node.value):,} characters; no field "
            f"takes more than {len(str(MAX_INTEGER))} digits"
        )
    try:
        loader.construct_object(node)
    except yaml.YAMLError:
        raise
    except Exception:  # PyYAML's constructors raise ValueError, KeyError, AttributeError...
        kind = node.tag.rsplit(":", 1)[-1]
        raise InstanceError(
            f"`{where}` ({line}) is not a valid YAML {brief(kind, 20)}; write it plainly"
        ) from None


def _check_tree(loader: _Loader, root: yaml.Node, shown: str) -> None:
    """Walk the document as it will be built, aliases expanded: refuse more than
    `MAX_YAML_VALUES` values or `MAX_YAML_DEPTH` levels (an alias bomb, a cycle) and duplicate
    keys (YAML would keep the last one silently), and construct every scalar on the way."""
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    visited = 0
    while stack:
        node, parts = stack.pop()
        visited += 1
        if visited > MAX_YAML_VALUES:
            raise _too_many(shown)
        if len(parts) > MAX_YAML_DEPTH:
            under = "".join(parts[:2]).removeprefix(".")
            raise InstanceError(
                f"file {shown} nests more than {MAX_YAML_DEPTH} levels deep (under `{under}`); "
                "an instance has 4"
            )
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(loader, node, "".join(parts).removeprefix(".") or "(top)", shown)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, (*parts, f"[{i}]")) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):  # YAML refuses it: unhashable
                    stack.extend([(key, (*parts, ".(key)")), (value, (*parts, ".(key)"))])
                    continue
                if key.tag == _MERGE_TAG:  # `<<: *base`, whose keys explicit ones override
                    stack.append((value, parts))
                    continue
                child = (*parts, f".{_key(key.value)}")
                line, first = key.start_mark.line + 1, lines.get((key.tag, key.value))
                if first is not None:
                    on = f"on line {line}" if first == line else f"on lines {first} and {line}"
                    raise InstanceError(
                        f"`{''.join(child).removeprefix('.')}` appears twice in file {shown} "
                        f"({on}); keep one"
                    )
                lines[key.tag, key.value] = line
                stack.extend([(key, child), (value, child)])


def _problem(error: yaml.YAMLError) -> str:
    """PyYAML's description of a syntax error, without the text it quotes (an anchor, a tag:
    content of a file that may be anything)."""
    problem = getattr(error, "problem", None) or getattr(error, "reason", None) or ""
    words = " ".join(problem.split("'")[0].split('"')[0].split())
    return words[:80] or "syntax error"


def read_yaml(path: Path, *, what: str = "an instance YAML") -> Any:
    """A YAML file parsed with the safe loader, bounded at every step, every failure one
    `InstanceError`: a regular file of at most 4 MB (`read_text`), at most `MAX_YAML_VALUES`
    values with aliases expanded, `MAX_YAML_DEPTH` levels, no duplicate keys."""
    text = read_text(path, what=what)
    shown = brief(str(path), 80)
    loader = _Loader(text, shown)
    try:
        root = loader.get_single_node()
        if root is None:  # an empty file
            return None
        _check_tree(loader, root, shown)
        return loader.construct_document(root)
    except RecursionError:  # the pure-Python parser nests a call per level
        raise InstanceError(f"file {shown} nests too deeply to be an instance") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InstanceError(f"file {shown} is not valid YAML{where}: {_problem(error)}") from None
    finally:
        loader.dispose()


def _given_path(text: str) -> Path | None:
    """`text` as a path when it is one: something exists there, or it has a folder or a YAML
    suffix. A path that exists wins over a shipped name; anything else is a name. What is at
    the path (a FIFO, a folder, nothing) is `read_yaml`'s to report, in one line."""
    path = Path(text)
    if "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        return path
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):  # EACCES, ELOOP, a NUL byte: not a name either
        pass
    return path


def instance_path(source: str | Path) -> Path:
    """Where an instance given by the caller lives: the path itself, or the shipped instance of
    that name (`mobilenet-cifar10`) when no file is there, so an installed package's examples
    work from any folder."""
    text = str(source)
    path = _given_path(text)
    if path is not None:
        return path
    shipped = named(instances_folder(), text)
    if shipped is None:
        raise InstanceError(
            f"`instance` {brief(text)} is neither a file nor a shipped instance; give the path "
            f"of an instance YAML or one of {', '.join(names(instances_folder()))}"
        )
    return shipped


def platform_path(name: str, search: Path | None = None, *, alternative: str | None = None
                  ) -> Path:
    """Where a platform named in an instance lives: beside the instance first, then shipped.
    `alternative` is what else the message offers (default: an inline mapping)."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise InstanceError(
            f"`platform` must be a platform name such as `aws-lambda-x86_64`, got {brief(name)}"
        )
    folders = ([search / "platforms", search] if search else []) + [platforms_folder()]
    for folder in folders:
        candidate = folder / f"{name}.yaml"
        try:
            if candidate.is_file():
                return candidate
        except (OSError, ValueError):  # a name too long, or with a NUL byte, is no platform
            continue
    known = names(platforms_folder())
    raise InstanceError(
        f"`platform` {brief(name)} is not a known platform; use one of {', '.join(known)} "
        f"or {alternative or 'give the platform inline as a mapping'}"
    )


def _resolve_platform(value: Any, search: Path | None, *, caller: bool = False) -> Platform:
    """The platform an instance names (a name only: a file never points at another file), or
    the one its caller chose (`caller`: `--platform`, `platform=`), which may be a path too."""
    if not isinstance(value, str):
        return _platform("platform", value)
    source = (_given_path(value) if caller else None) or platform_path(
        value, search, alternative="the path of a platform YAML" if caller else None)
    try:
        raw = read_yaml(source, what="a platform YAML")
    except InstanceError as error:
        raise InstanceError(f"`platform` {brief(value)}: {error}") from None
    try:
        return _platform("platform", raw, document=f"`platform` {brief(value)} is no platform")
    except InstanceError as error:
        raise InstanceError(f"{error} (in {brief(str(source), 80)})") from None




def load_instance(
    source: Instance | Mapping[str, Any] | str | Path, *, platform: str | None = None
) -> Instance:
    """An `Instance` from an instance, a mapping, a YAML path or a shipped instance's name
    (`mobilenet-cifar10`; a file at that path wins); `platform` (a name or a platform YAML's
    path) overrides its platform."""
    if isinstance(source, Instance):
        if platform is None:
            return source
        return dataclasses.replace(
            source, platform=_resolve_platform(platform, None, caller=True))
    search: Path | None = None
    default_name = "instance"
    document = "not an instance"
    if isinstance(source, (str, Path)):
        path = instance_path(source)
        raw = read_yaml(path)  # first: it refuses a symlink loop, a FIFO, a device in one line
        document = f"file {brief(str(path), 80)} is not an instance"
        try:
            search, default_name = path.resolve().parent, path.stem
        except (OSError, RuntimeError):  # the file was replaced by a symlink loop since it was read
            raise InstanceError(f"{document}: its path cannot be resolved") from None
    else:
        raw = source
    fields: dict[str, Check] = {
        "name": _text,
        "platform": lambda _path, value: value,
        "workload": _workload,
        "profile": _profile,
        "parameter_server": _parameter_server,
        "objective": _objective,
        "limits": _limits,
        "fit": _fit,
    }
    optional = frozenset({"name", "limits", "fit"})
    checked = _section("", raw, fields, optional, document=document)
    chosen = platform if platform is not None else checked["platform"]
    if not isinstance(chosen, (str, Mapping)):
        raise _fail("platform", chosen, "a platform name or a mapping")
    return Instance(
        name=checked.get("name", default_name),
        platform=_resolve_platform(chosen, search, caller=platform is not None),
        workload=checked["workload"],
        profile=checked["profile"],
        parameter_server=checked["parameter_server"],
        objective=checked["objective"],
        limits=checked.get("limits", Limits()),
        fit=checked.get("fit"),
    )


def _present(section: Any) -> dict[str, Any]:
    """A section's fields by YAML key, the absent optional ones (None) left out."""
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    return {key: value for key, value in values.items() if value is not None}


def instance_mapping(instance: Instance) -> dict[str, Any]:
    """The inverse of `load_instance`: `instance` in the YAML schema, the platform inline, the
    optional fields absent where the instance does not have them (model v2's terms where they
    are 0), in plain Python types (YAML- and JSON-ready). `load_instance` of it equals it."""
    rest = _present(instance.platform)
    grid = rest.pop("memory")
    memory_mb = {"min": grid.min_mb, "max": grid.max_mb, "step": grid.step_mb}
    profile: dict[str, Any] = {
        "rate": _present(instance.profile.rate),
        "storage_bandwidth": _present(instance.profile.storage_bandwidth),
    }
    if instance.profile.latency_s:
        profile["latency_s"] = instance.profile.latency_s
    if instance.profile.startup != StartupProfile():
        profile["startup"] = _present(instance.profile.startup)
    out: dict[str, Any] = {
        "name": instance.name,
        "platform": {"name": rest.pop("name"), "memory_mb": memory_mb, **rest},
        "workload": _present(instance.workload),
        "profile": profile,
        "parameter_server": _present(instance.parameter_server),
        "objective": _present(instance.objective),
    }
    if instance.limits != Limits():
        out["limits"] = _present(instance.limits)
    if instance.fit is not None:
        out["fit"] = instance.fit.to_mapping()
    return out
