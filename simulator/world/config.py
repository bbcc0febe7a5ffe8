"""A world: the effects that make a run differ from the model, read from YAML and checked.

Every effect is optional (absent = off), so `World()` is the world with none: the model's own
assumptions. Each field states its range in its metadata; `World.from_mapping` checks every
value against it and refuses anything else (an unknown key, a bool, NaN, a number out of
range, a wrong kind) with one `WorldError` naming the dotted field in backticks. What each
effect does is the engine's (`simulator.world.engine`) and docs/WORLD.md's.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import WorldError, clipped, shown
from .errors import shown_path as shown_path_of

MAX_FILE_BYTES = 1 << 20  # a world file is a few hundred bytes
MAX_NAME_CHARS = 100  # names appear in every table
MAX_TEXT_CHARS = 2_000  # a description or a source: a sentence or two
_CONTROL = frozenset({"Cc", "Cf", "Zl", "Zp"})  # control, format and separator characters


@dataclass(frozen=True)
class _Rule:
    """What a field accepts: a number in [low, high] (low excluded when `open_low`), an
    integer, one of `choices`, text, or a nested effect (`nested`)."""

    low: float = 0.0
    high: float = math.inf
    open_low: bool = False
    integer: bool = False
    choices: tuple[str, ...] = ()
    text: bool = False
    nested: type | None = None

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        kind = "an integer" if self.integer else "a number"
        low = f"> {self.low:g}" if self.open_low else f"≥ {self.low:g}"
        return f"{kind} {low} and ≤ {self.high:g}"


def _number(low: float, high: float, *, open_low: bool = False) -> dict[str, _Rule]:
    return {"rule": _Rule(low=low, high=high, open_low=open_low)}


def _integer(low: int, high: int) -> dict[str, _Rule]:
    return {"rule": _Rule(low=low, high=high, integer=True)}


def _choice(*choices: str) -> dict[str, _Rule]:
    return {"rule": _Rule(choices=choices)}


def _nested(kind: type) -> dict[str, _Rule]:
    return {"rule": _Rule(nested=kind)}


_SOURCE: dict[str, _Rule] = {"rule": _Rule(text=True)}


def _source() -> Any:
    """The optional `source:` of an effect: where its figures come from (free text)."""
    return field(default="", metadata=_SOURCE)


@dataclass(frozen=True)
class Cpu:
    """vCPUs in proportion to memory, compute speed by Amdahl's law in them."""

    parallel_fraction: float = field(metadata=_number(0, 1))
    mb_per_vcpu: float = field(default=1769.0, metadata=_number(1, 1e6))
    max_vcpu: float = field(default=6.0, metadata=_number(0.01, 1e4))
    profiled_mb: float = field(default=1769.0, metadata=_number(1, 1e7))
    source: str = _source()


@dataclass(frozen=True)
class Ps:
    """The parameter server's NIC as a queue of pushes and pulls (each shard's NIC, when the
    job's PS has several: `JobSpec.ps_shards`)."""

    nic_mbps: float = field(metadata=_number(0, 1e9, open_low=True))
    per_message_ms: float = field(default=0.0, metadata=_number(0, 1e6))
    service: str = field(default="fifo", metadata=_choice("fifo", "fair"))
    source: str = _source()


@dataclass(frozen=True)
class Tail:
    """A share of worker-iterations also drawing a Pareto slowdown (minimum 1)."""

    shape: float = field(metadata=_number(1, 1e3, open_low=True))
    share: float = field(metadata=_number(0, 1))
    kind: str = field(default="pareto", metadata=_choice("pareto"))
    source: str = _source()


@dataclass(frozen=True)
class Persistent:
    """A share of invocations landing on a slow host for their whole round."""

    share: float = field(metadata=_number(0, 1))
    slowdown: float = field(metadata=_number(1, 1e3))
    source: str = _source()


@dataclass(frozen=True)
class Stragglers:
    """Per worker-iteration variation (normalised to mean 1), a heavy tail, slow hosts."""

    cv: float = field(default=0.0, metadata=_number(0, 10))
    tail: Tail | None = field(default=None, metadata=_nested(Tail))
    persistent: Persistent | None = field(default=None, metadata=_nested(Persistent))
    source: str = _source()


@dataclass(frozen=True)
class Drift:
    """An AR(1) walk of the log bandwidth factor, piecewise constant over `period_s` steps."""

    sd: float = field(metadata=_number(0, 5))
    period_s: float = field(metadata=_number(1, 1e7))
    rho: float = field(default=0.8, metadata=_number(0, 1))
    kind: str = field(default="ar1", metadata=_choice("ar1"))
    source: str = _source()


@dataclass(frozen=True)
class Bandwidth:
    """A factor on the PS's (or the functions') and storage bandwidth: a scale, a drift."""

    scale: float = field(default=1.0, metadata=_number(0, 1e3, open_low=True))
    drift: Drift | None = field(default=None, metadata=_nested(Drift))
    source: str = _source()


@dataclass(frozen=True)
class ColdStart:
    """Seconds from invocation until a function runs: base + per GB of memory + per GB of
    image, times a mean-1 lognormal of `cv` per function and round."""

    base_s: float = field(default=0.0, metadata=_number(0, 1e4))
    per_gb_s: float = field(default=0.0, metadata=_number(0, 1e4))
    per_image_gb_s: float = field(default=0.0, metadata=_number(0, 1e4))
    image_gb: float = field(default=0.0, metadata=_number(0, 1e3))
    cv: float = field(default=0.0, metadata=_number(0, 10))
    source: str = _source()


@dataclass(frozen=True)
class Startup:
    """Seconds per invocation round after the cold starts (replaces the job's profile)."""

    base_s: float = field(default=0.0, metadata=_number(0, 1e5))
    per_function_s: float = field(default=0.0, metadata=_number(0, 1e4))
    source: str = _source()


@dataclass(frozen=True)
class PlatformRamp:
    """At most `burst` functions invoked at once, then `per_10s` more every 10 s."""

    burst: int = field(metadata=_integer(1, 10**7))
    per_10s: int = field(metadata=_integer(1, 10**7))
    source: str = _source()


@dataclass(frozen=True)
class Crashes:
    """Function crashes (exponential per slot on work time) and the periodic checkpoints."""

    rate_per_h: float = field(metadata=_number(0, 1e4))
    checkpoint_every_s: float = field(default=60.0, metadata=_number(0, 1e7, open_low=True))
    source: str = _source()


@dataclass(frozen=True)
class Measurement:
    """What a strategy sees: every timing times an independent mean-1 lognormal of `cv`."""

    cv: float = field(metadata=_number(0, 10))
    source: str = _source()


@dataclass(frozen=True)
class World:
    """The effects of one world; `World()` has none (the model's own assumptions)."""

    name: str = field(default="nominal", metadata={"rule": _Rule(text=True)})
    description: str = field(default="", metadata=_SOURCE)
    source: str = _source()  # where the world as a whole comes from
    cpu: Cpu | None = field(default=None, metadata=_nested(Cpu))
    ps: Ps | None = field(default=None, metadata=_nested(Ps))
    stragglers: Stragglers | None = field(default=None, metadata=_nested(Stragglers))
    bandwidth: Bandwidth | None = field(default=None, metadata=_nested(Bandwidth))
    cold_start: ColdStart | None = field(default=None, metadata=_nested(ColdStart))
    startup: Startup | None = field(default=None, metadata=_nested(Startup))
    platform_ramp: PlatformRamp | None = field(default=None, metadata=_nested(PlatformRamp))
    crashes: Crashes | None = field(default=None, metadata=_nested(Crashes))
    measurement: Measurement | None = field(default=None, metadata=_nested(Measurement))
    checkpoint_s: float = field(default=0.0, metadata=_number(0, 1e4))

    @classmethod
    def load(cls, path: str | Path) -> World:
        """The world in the YAML file at `path` (its name defaults to the file's stem)."""
        shown_path = shown_path_of(path)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            raise WorldError(
                f"world file {shown_path} does not exist: give the path of a world YAML, or "
                "the name of a shipped one (instances/worlds/)"
            ) from None
        except (OSError, ValueError) as error:  # EACCES, ELOOP, a NUL byte in the path
            raise WorldError(
                f"world file {shown_path} cannot be read ({type(error).__name__}): give a "
                "readable YAML file"
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise WorldError(f"world file {shown_path} is not a regular file: give a YAML file")
        if info.st_size > MAX_FILE_BYTES:
            raise WorldError(
                f"world file {shown_path} has {info.st_size:,} bytes; a world has a few hundred "
                f"(at most {MAX_FILE_BYTES:,}): is it the right file?"
            )
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise WorldError(
                f"world file {shown_path} cannot be read ({type(error).__name__}): give a "
                "readable UTF-8 YAML file"
            ) from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise WorldError(f"world file {shown_path} is not valid YAML{where}") from None
        except (ValueError, RecursionError):  # an integer of 5,000 digits, a 10,000-deep list
            raise WorldError(
                f"world file {shown_path} holds a value YAML cannot build (a huge integer, "
                "deep nesting): write plain numbers"
            ) from None
        return cls.from_mapping(raw, source=str(path))

    @classmethod
    def from_mapping(cls, mapping: object, *, source: str = "world") -> World:
        """The world a mapping in the YAML schema describes (`source` names it in messages and
        gives the default name: its stem)."""
        if not isinstance(mapping, Mapping):
            raise WorldError(
                f"{clipped(source)} must be a mapping of effects (e.g. `cpu: {{...}}`), got "
                f"{shown(mapping)}: write one `key: value` per effect"
            )
        values = dict(mapping)
        values.setdefault("name", Path(source).stem or "world")
        return _build(cls, values, "", clipped(source))

    def to_mapping(self) -> dict[str, Any]:
        """The YAML mapping of this world: `World.from_mapping(w.to_mapping()) == w`."""
        return _mapping(self)

    def effects(self) -> tuple[str, ...]:
        """The YAML keys of the effects that are on."""
        skip = {"name", "description", "source"}
        return tuple(
            item.name for item in dataclasses.fields(self)
            if item.name not in skip and getattr(self, item.name) not in (None, 0.0)
        )

    def label(self) -> str:
        """`name (effects on)`, for tables and messages."""
        return f"{self.name} ({', '.join(self.effects()) or 'no effect'})"


_T = TypeVar("_T")


def _build(kind: type[_T], raw: Mapping[Any, Any], where: str, source: str) -> _T:
    """An effect from its mapping, every field checked against its rule."""
    known = {item.name: item for item in dataclasses.fields(kind)}  # type: ignore[arg-type]
    for key in raw:
        if key not in known:
            dotted = clipped(f"{where}{key}" if isinstance(key, str) else f"{where}{shown(key)}",
                             60)
            allowed = ", ".join(f"`{name}`" for name in known)
            raise WorldError(
                f"{source}: `{dotted}` is not a world field; the fields here are "
                f"{allowed} (docs/WORLD.md): fix its spelling or delete it"
            )
    values: dict[str, Any] = {}
    for name, item in known.items():
        dotted = f"{where}{name}"
        if name not in raw:
            if item.default is dataclasses.MISSING:
                rule: _Rule = item.metadata["rule"]
                raise WorldError(
                    f"{source}: `{dotted}` is missing: give it ({rule.describe()}) or delete "
                    f"the effect `{where.rstrip('.') or name}`"
                )
            continue
        values[name] = _value(item.metadata["rule"], raw[name], dotted, source)
    return kind(**values)


def _value(rule: _Rule, value: Any, dotted: str, source: str) -> Any:
    """One field's value, checked against its rule."""
    if rule.nested is not None:
        if not isinstance(value, Mapping):
            raise WorldError(
                f"{source}: `{dotted}` must be a mapping of its fields, got {shown(value)}: "
                "write e.g. `{field: value}` or delete the key"
            )
        return _build(rule.nested, value, f"{dotted}.", source)
    if rule.text:
        # A name appears in tables: one line, not blank. Other text may span lines.
        name = dotted == "name"
        limit = MAX_NAME_CHARS if name else MAX_TEXT_CHARS
        allowed = "" if name else "\n\t"
        if not isinstance(value, str) or len(value) > limit or (name and not value.strip()) or any(
            unicodedata.category(c) in _CONTROL and c not in allowed for c in value
        ):
            kind = "one line of text" if name else "text"
            raise WorldError(
                f"{source}: `{dotted}` must be {kind} of at most {limit:,} characters without "
                f"control characters, got {shown(value)}: quote it and shorten it"
            )
        return value
    if rule.choices:
        if value not in rule.choices:
            raise WorldError(
                f"{source}: `{dotted}` must be {rule.describe()}, got {shown(value)}: pick one"
            )
        return value
    if rule.integer:
        is_number = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    else:
        is_number = isinstance(value, (int, float))
    # Comparisons only (no float(): a 400-digit integer would overflow it); NaN and ±inf fail
    # them, as every bound is finite.
    in_range = is_number and not isinstance(value, bool) and value <= rule.high and (
        value > rule.low if rule.open_low else value >= rule.low
    )
    if not in_range:
        raise WorldError(
            f"{source}: `{dotted}` must be {rule.describe()}, got {shown(value)}: give a "
            "value in that range"
        )
    return int(value) if rule.integer else float(value)


def _mapping(effect: object) -> dict[str, Any]:
    """An effect as its YAML mapping: absent effects and empty sources left out."""
    out: dict[str, Any] = {}
    for item in dataclasses.fields(effect):  # type: ignore[arg-type]
        value = getattr(effect, item.name)
        if value is None or (value == "" and item.metadata["rule"].text):
            continue
        out[item.name] = _mapping(value) if dataclasses.is_dataclass(value) else value
    return out
