"""Checking an instance's fields: each section of the YAML schema, field by field.

Every problem is one `InstanceError` whose message names the field path in backticks, the bad
value and the fix, so that neither a person nor a scheduler ever sees a traceback for bad
input. Numbers are checked by `inputs.numbers`, the same checks every other input gets.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..inputs.errors import InstanceError
from ..inputs.files import brief
from ..inputs.numbers import Sign, finite, integer, number, refusal
from ..inputs.numbers import probability as _probability
from .instance import (
    ARCHITECTURES,
    BACKENDS,
    MAX_CONCURRENCY,
    MAX_FIT_NUMBER,
    MAX_GRID_POINTS,
    MAX_INTEGER,
    MAX_MEGABYTES,
    MAX_NOTE_CHARS,
    MAX_PRICE_USD,
    MAX_RATE,
    MAX_SECONDS,
    MAX_TEXT_CHARS,
    MAX_VCPU,
    Fit,
    FitParameter,
    Limits,
    MemoryGrid,
    Objective,
    ParameterServer,
    Platform,
    Profile,
    RateProfile,
    Record,
    Scalar,
    StartupProfile,
    StorageProfile,
    Workload,
)

Check = Callable[[str, Any], Any]
MAX_SHARDS = 64  # parameter-server shards: far past where one more helps any workload
DEFAULT_MAX_SHARDS = 8  # the shard counts a catalogue's types are tried at, unless given


def fail(path: str, value: Any, need: str, fix: str = "") -> InstanceError:
    """The error for field `path`: "`path` must be NEED, got VALUE; FIX"."""
    return refusal(path, value, need, error=InstanceError, fix=fix)


def _number(maximum: float, *, sign: Sign = "positive", fix: str = "") -> Check:
    def check(path: str, value: Any) -> float:
        return number(path, value, error=InstanceError, maximum=maximum, sign=sign, fix=fix)

    return check


def _integer(*, maximum: int = MAX_INTEGER, fix: str = "") -> Check:
    def check(path: str, value: Any) -> int:
        return integer(path, value, error=InstanceError, maximum=maximum, fix=fix)

    return check


def _line(limit: int) -> Check:
    """Text shown in tables and messages: one non-empty printable line of at most `limit`."""

    def check(path: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise fail(path, value, "a non-empty string")
        if len(value) > limit or not value.isprintable():
            raise fail(path, value, f"one line of at most {limit} printable characters")
        return value

    return check


_text = _line(MAX_TEXT_CHARS)  # a name: shown in every table and message


def positive_number(name: str, value: object, maximum: float) -> float:
    """An argument given in-process or on the command line (`deadline_s`, `--from`), checked
    like the file's fields: any real number type (numpy's too), finite, in (0, maximum]."""
    return number(name, value, error=InstanceError, maximum=maximum)


def non_negative_number(name: str, value: object, maximum: float) -> float:
    """As `positive_number`, 0 allowed (`timeout_margin_s`)."""
    return number(name, value, error=InstanceError, maximum=maximum, sign="non-negative")


def positive_integer(name: str, value: object, maximum: int) -> int:
    """An integer argument (`concurrency`) of any integral type, or a whole float, in
    1..maximum."""
    return integer(name, value, error=InstanceError, maximum=maximum)


def plan_size(functions: object, memory_mb: object) -> tuple[int, int]:
    """A plan given in-process (`evaluate`): positive integers of any integral type (numpy's
    too, or a float such as 512.0), within the loader's caps on concurrency and memory."""
    return (
        integer("functions", functions, error=InstanceError, maximum=MAX_CONCURRENCY),
        integer("memory_mb", memory_mb, error=InstanceError, maximum=MAX_MEGABYTES),
    )


def probability(name: str, value: object) -> float:
    """A probability strictly between 0 and 1 (`guarantee`), of any real number type."""
    return _probability(name, value, error=InstanceError)


def key_shown(key: Any) -> str:
    """A key as shown in a message: as is when it is a short printable string, else quoted
    briefly and escaped (a key may be anything from any file, a secret or a 4 MB string)."""
    if isinstance(key, str) and key.isprintable() and 0 < len(key) <= 40:
        return key
    return brief(key)


def _where(path: str, key: Any) -> str:
    return f"{path}.{key_shown(key)}" if path else key_shown(key)


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
        raise fail(path, value, wanted)
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



def _architecture(path: str, value: Any) -> str:
    if value not in ARCHITECTURES:
        raise fail(path, value, f"one of {', '.join(ARCHITECTURES)}")
    return str(value)


def check_platform(path: str, value: Any, document: str | None = None) -> Platform:
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


def _parameter_server(path: str, value: Any) -> ParameterServer | ServerChoice:
    """One machine given by its figures (the old form: 1 shard unless `shards` says more), or
    machines from a catalogue (`catalogue:`): then `solve()` chooses the type and the number
    of shards, unless `type` and `shards` pin both."""
    if isinstance(value, Mapping) and "catalogue" in value:
        fields: dict[str, Check] = {
            "catalogue": _catalogue_given,
            "function_bandwidth_mbps": _number(MAX_RATE),
            "type": _text,
            "types": _type_names,
            "shards": _integer(maximum=MAX_SHARDS),
            "max_shards": _integer(maximum=MAX_SHARDS),
        }
        checked = _section(path, value, fields,
                           frozenset({"type", "types", "shards", "max_shards"}))
        if "type" in checked and "types" in checked:
            raise InstanceError(f"`{path}` gives both `type` and `types`; give one")
        if "shards" in checked and "max_shards" in checked:
            raise InstanceError(f"`{path}` gives both `shards` and `max_shards`; give one")
        fixed = checked.get("shards")
        top = checked.get("max_shards", DEFAULT_MAX_SHARDS)
        types = (checked["type"],) if "type" in checked else checked.get("types")
        return ServerChoice(checked["catalogue"], checked["function_bandwidth_mbps"], types,
                            (fixed,) if fixed is not None else tuple(range(1, top + 1)))
    fields = {
        "bandwidth_mbps": _number(MAX_RATE),
        "function_bandwidth_mbps": _number(MAX_RATE),
        "price_per_hour": _number(MAX_PRICE_USD, sign="non-negative"),
        "shards": _integer(maximum=MAX_SHARDS),
        "type": _text,
        "message_s": _number(MAX_SECONDS, sign="non-negative"),
    }
    return ParameterServer(**_section(path, value, fields,
                                      frozenset({"shards", "type", "message_s"})))


@dataclass(frozen=True)
class ServerChoice:
    """`parameter_server:` naming a catalogue (a shipped name, which the reader resolves, or
    the catalogue inline), the types to choose from (None: all) and the shard counts."""

    catalogue: str | Mapping[str, Any]
    function_bandwidth_mbps: float
    types: tuple[str, ...] | None
    shards: tuple[int, ...]


def _catalogue_given(path: str, value: Any) -> str | Mapping[str, Any]:
    if isinstance(value, str):
        return str(_text(path, value))
    if isinstance(value, Mapping):
        return dict(value)
    raise fail(path, value, "a shipped catalogue's name (such as `ec2`) or a catalogue mapping")


def _type_names(path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise fail(path, value, "a non-empty list of type names")
    return tuple(_text(f"{path}[{i}]", name) for i, name in enumerate(value))


def server_choices(path: str, catalogue: Any, choice: ServerChoice) -> tuple[ParameterServer, ...]:
    """The machines `choice` allows from `catalogue` (checked here: a mapping with `types`,
    each a name → {bandwidth_mbps, price_per_hour, message_s, …}), types in the catalogue's
    order, each at every allowed shard count."""
    entry: dict[str, Check] = {
        "bandwidth_mbps": _number(MAX_RATE),
        "price_per_hour": _number(MAX_PRICE_USD, sign="non-negative"),
        "message_s": _number(MAX_SECONDS, sign="non-negative"),
        "baseline_mbps": _number(MAX_RATE),
        "family": _text,
        "source": _line(MAX_NOTE_CHARS),
    }

    def types(where: str, raw: Any) -> dict[str, dict[str, Any]]:
        if not isinstance(raw, Mapping) or not raw:
            raise fail(where, raw, "a mapping of type names to {bandwidth_mbps, price_per_hour}")
        return {
            _name(where, name): _section(f"{where}.{_name(where, name)}", raw[name], entry,
                                         frozenset({"message_s", "baseline_mbps", "family",
                                                    "source"}))
            for name in raw
        }

    checked = _section(path, catalogue, {"name": _text, "types": types}, frozenset({"name"}))
    known = checked["types"]
    wanted = choice.types if choice.types is not None else tuple(known)
    for name in wanted:
        if name not in known:
            raise InstanceError(
                f"`parameter_server.type` {brief(name)} is not in the catalogue; use one of "
                f"{', '.join(known)}")
    return tuple(
        ParameterServer(known[name]["bandwidth_mbps"], choice.function_bandwidth_mbps,
                        known[name]["price_per_hour"], shards, name,
                        known[name].get("message_s", 0.0))
        for name in dict.fromkeys(wanted) for shards in choice.shards
    )


def _objective(path: str, value: Any) -> Objective:
    return Objective(**_section(path, value, {"deadline_s": _number(MAX_SECONDS)}))


def _limits(path: str, value: Any) -> Limits:
    fields = {"max_functions": _integer(maximum=MAX_CONCURRENCY)}
    return Limits(**_section(path, value, fields, frozenset({"max_functions"})))



def _backend(path: str, value: Any) -> str:
    if value not in BACKENDS:
        raise fail(path, value, f"one of {', '.join(BACKENDS)}")
    return str(value)


def _flag(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(path, value, "true or false")
    return value


def _scalar(path: str, value: Any, *, lists: bool = False) -> Scalar:
    """A value in a free-form record: a number (an integer stays one), a short text or null."""
    if value is None:
        return None
    if isinstance(value, str):
        text: str = _text(path, value)
        return text
    real = finite(value)  # None for a bool, a mapping, a list, NaN
    if real is None or abs(real) > MAX_FIT_NUMBER:
        top = f"{MAX_FIT_NUMBER:,.0f}"
        others = ", null or a list of them" if lists else " or null"
        raise fail(path, value, f"a number from -{top} to {top}, a text{others}")
    return int(value) if isinstance(value, numbers.Integral) else real


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
        raise fail(path, value, "a mapping of names to values")
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
            raise fail(where, raw, "a mapping of parameter names to {value, stderr, identified}")
        return tuple(
            parameter(f"{where}.{_name(where, name)}", name, raw[name]) for name in raw
        )

    def runs(where: str, raw: Any) -> tuple[Record, ...]:
        if not isinstance(raw, (list, tuple)):
            raise fail(where, raw, "a list of runs, each a mapping")
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



def instance_sections(raw: Any, *, document: str) -> dict[str, Any]:
    """The checked sections of an instance mapping, by YAML key (`platform` as given: a name
    or a mapping, which the reader resolves); `document` is said of a file that is no
    instance at all."""
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
    return _section("", raw, fields, optional, document=document)
