"""Provisioning instances: loading YAML (or a mapping), validating every field up front.

Every problem is reported as one `InstanceError` whose message names the field path in
backticks, the bad value and the fix, so that neither a person nor a scheduler ever sees a
traceback for bad input.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.shipped import names, platforms_folder

MAX_GRID_POINTS = 1_000_000
MAX_CONCURRENCY = 1_000_000
MAX_INTEGER = 10**12  # far beyond any real job; models.performance.BATCH_SLACK relies on it


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
class Profile:
    rate: RateProfile
    storage_bandwidth: StorageProfile


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
        """The model's parameters by symbol name (see `models.performance.PARAMETERS`)."""
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
        }


# --- validation -------------------------------------------------------------------------

Check = Callable[[str, Any], Any]


def _fail(path: str, value: Any, need: str, fix: str = "") -> InstanceError:
    shown = repr(value) if not isinstance(value, Mapping) else "a mapping"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    tail = f"; {fix}" if fix else ""
    return InstanceError(f"`{path}` must be {need}, got {shown}{tail}")


def _number(*, minimum: float | None = None, strict: bool = True, fix: str = "") -> Check:
    if minimum is None:
        need = "a finite number"
    elif strict:
        need = "a positive number" if minimum == 0 else f"a number greater than {minimum:g}"
    else:
        need = "a number ≥ 0" if minimum == 0 else f"a number ≥ {minimum:g}"

    def check(path: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _fail(path, value, need, fix)
        try:
            number = float(value)
        except OverflowError:
            raise _fail(path, value, need, fix) from None
        if not math.isfinite(number):
            raise _fail(path, value, need, fix)
        if minimum is not None and (number <= minimum if strict else number < minimum):
            raise _fail(path, value, need, fix)
        return number

    return check


def _integer(*, maximum: int = MAX_INTEGER, fix: str = "") -> Check:
    need = f"a positive integer ≤ {maximum:,}"

    def check(path: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _fail(path, value, need, fix)
        if isinstance(value, numbers.Integral):
            whole = int(value)
        elif math.isfinite(float(value)) and float(value).is_integer():
            whole = int(float(value))
        else:
            raise _fail(path, value, need, fix)
        if not 1 <= whole <= maximum:
            raise _fail(path, value, need, fix)
        return whole

    return check


def _text(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, value, "a non-empty string")
    return value


def _section(
    path: str, value: Any, fields: Mapping[str, Check], optional: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Check a mapping field by field: unknown keys, missing keys and each value's check."""
    if not isinstance(value, Mapping):
        raise _fail(path, value, f"a mapping with the keys {', '.join(fields)}")
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(fields)}"
            one_line = isinstance(key, str) and key.splitlines() == [key]
            shown = key if one_line else repr(key)
            where = f"{path}.{shown}" if path else str(shown)
            raise InstanceError(f"`{where}` is not a known field; {hint}")
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
    fields = {"min": _integer(), "max": _integer(), "step": _integer()}
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


def _platform(path: str, value: Any) -> Platform:
    fields: dict[str, Check] = {
        "name": _text,
        "memory_mb": _memory_grid,
        "price_per_gb_second": _number(minimum=0, strict=False),
        "price_per_request": _number(minimum=0, strict=False),
        "timeout_s": _number(minimum=0),
        "timeout_margin_s": _number(minimum=0, strict=False),
        "restart_overhead_s": _number(minimum=0, strict=False),
        "max_concurrency": _integer(maximum=MAX_CONCURRENCY),
    }
    raw = _section(path, value, fields)
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
    )


def _workload(path: str, value: Any) -> Workload:
    fields: dict[str, Check] = {
        "model_size_mb": _number(minimum=0),
        "dataset_size_mb": _number(minimum=0),
        "samples": _integer(),
        "epochs": _integer(),
        "local_batch": _integer(),
        "max_global_batch": _integer(),
        "min_memory_mb": _number(minimum=0),
    }
    return Workload(**_section(path, value, fields, frozenset({"min_memory_mb"})))


def _profile(path: str, value: Any) -> Profile:
    slope_fix = "more memory never gives a function less CPU or bandwidth on Lambda"

    def rate(where: str, raw: Any) -> RateProfile:
        fields: dict[str, Check] = {
            "slope": _number(minimum=0, strict=False, fix=slope_fix),
            "intercept": _number(),
            "saturates_at_mb": _number(minimum=0),
        }
        return RateProfile(**_section(where, raw, fields, frozenset({"saturates_at_mb"})))

    def storage(where: str, raw: Any) -> StorageProfile:
        fields: dict[str, Check] = {
            "slope": _number(minimum=0, strict=False, fix=slope_fix),
            "intercept": _number(),
            "max_mbps": _number(minimum=0),
        }
        return StorageProfile(**_section(where, raw, fields))

    raw = _section(path, value, {"rate": rate, "storage_bandwidth": storage})
    return Profile(**raw)


def _parameter_server(path: str, value: Any) -> ParameterServer:
    fields: dict[str, Check] = {
        "bandwidth_mbps": _number(minimum=0),
        "function_bandwidth_mbps": _number(minimum=0),
        "price_per_hour": _number(minimum=0, strict=False),
    }
    return ParameterServer(**_section(path, value, fields))


def _objective(path: str, value: Any) -> Objective:
    return Objective(**_section(path, value, {"deadline_s": _number(minimum=0)}))


def _limits(path: str, value: Any) -> Limits:
    fields = {"max_functions": _integer(maximum=MAX_CONCURRENCY)}
    return Limits(**_section(path, value, fields, frozenset({"max_functions"})))


def read_yaml(path: Path) -> Any:
    """Parse a YAML file with the safe loader, turning every failure into an `InstanceError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InstanceError(f"file `{path}` does not exist; check the path") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InstanceError(f"file `{path}` cannot be read: {error}") from None
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise InstanceError(f"file `{path}` nests too deeply to be an instance") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "syntax error"
        raise InstanceError(f"file `{path}` is not valid YAML{where}: {problem}") from None


def platform_path(name: str, search: Path | None = None) -> Path:
    """Where a platform named in an instance lives: beside the instance first, then shipped."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise InstanceError(
            f"`platform` must be a platform name such as `aws-lambda-x86_64`, got {name!r}"
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
        f"`platform` {name!r} is not a known platform; use one of {', '.join(known)} "
        "or give the platform inline as a mapping"
    )


def _resolve_platform(value: Any, search: Path | None) -> Platform:
    if not isinstance(value, str):
        return _platform("platform", value)
    source = platform_path(value, search)
    try:
        return _platform("platform", read_yaml(source))
    except InstanceError as error:
        raise InstanceError(f"{error} (in `{source}`)") from None


def load_instance(
    source: Instance | Mapping[str, Any] | str | Path, *, platform: str | None = None
) -> Instance:
    """An `Instance` from an instance, a mapping or a YAML path; `platform` overrides it."""
    if isinstance(source, Instance):
        if platform is None:
            return source
        source_platform = _resolve_platform(platform, None)
        return Instance(
            source.name, source_platform, source.workload, source.profile,
            source.parameter_server, source.objective, source.limits,
        )
    search: Path | None = None
    default_name = "instance"
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            search, default_name = path.resolve().parent, path.stem
        except (OSError, ValueError) as error:
            raise InstanceError(f"`{source!s:.60}` is not a usable path: {error}") from None
        raw = read_yaml(path)
    else:
        raw = source
    if not isinstance(raw, Mapping):
        raise InstanceError(
            "an instance must be a mapping with the keys platform, workload, profile, "
            f"parameter_server, objective (and optionally name, limits), got {type(raw).__name__}"
        )
    fields: dict[str, Check] = {
        "name": _text,
        "platform": lambda _path, value: value,
        "workload": _workload,
        "profile": _profile,
        "parameter_server": _parameter_server,
        "objective": _objective,
        "limits": _limits,
    }
    checked = _section("", raw, fields, frozenset({"name", "limits"}))
    chosen = platform if platform is not None else checked["platform"]
    if not isinstance(chosen, (str, Mapping)):
        raise _fail("platform", chosen, "a platform name or a mapping")
    return Instance(
        name=checked.get("name", default_name),
        platform=_resolve_platform(chosen, search),
        workload=checked["workload"],
        profile=checked["profile"],
        parameter_server=checked["parameter_server"],
        objective=checked["objective"],
        limits=checked.get("limits", Limits()),
    )
