"""A guaranteed plan that covers what the profile does not know (MODEL.md, "Fit uncertainty").

A profiled instance's `fit:` section gives each fitted parameter a standard error. Under
`solve(..., guarantee=p)` every identified parameter with one is moved z_p standard errors
in the direction that slows a run (the adverse corner), and the corner instance is planned
as any instance is, the run's noise at its p-quantile on top. Only numbers change, so the
search, its bounds and its proof of optimality are untouched; MODEL.md proves the coverage.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from lambdadnn.models import performance as model
from lambdadnn.models.noise import PlanningNoise
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.instance import MAX_SECONDS, Instance

Rule = Literal["slope", "intercept", "positive", "seconds"]

#: The parameters the corner moves: the sign of the move that slows a run (−1: down) and what
#: the moved value must still be (the loader's range; an intercept is checked through R and
#: the storage bandwidth at the largest memory, which must stay positive).
SLOWER: dict[str, tuple[int, Rule]] = {
    "profile.rate.slope": (-1, "slope"),
    "profile.rate.intercept": (-1, "intercept"),
    "profile.rate.saturates_at_mb": (-1, "positive"),
    "profile.storage_bandwidth.slope": (-1, "slope"),
    "profile.storage_bandwidth.intercept": (-1, "intercept"),
    "profile.storage_bandwidth.max_mbps": (-1, "positive"),
    "parameter_server.bandwidth_mbps": (-1, "positive"),
    "parameter_server.function_bandwidth_mbps": (-1, "positive"),
    "profile.latency_s": (1, "seconds"),
    "profile.startup.base_s": (1, "seconds"),
    "profile.startup.per_function_s": (1, "seconds"),
    "platform.restart_overhead_s": (1, "seconds"),
}
#: When a moved value is out of its field's range, and what to say of it.
_REFUSED: dict[Rule, tuple[Callable[[float], bool], str]] = {
    "slope": (lambda corner: corner < 0, "below 0, and a slope must be ≥ 0"),
    "positive": (lambda corner: corner <= 0, "not positive"),
    "seconds": (lambda corner: corner > MAX_SECONDS, f"above {MAX_SECONDS:g} s"),
    "intercept": (lambda corner: False, "never refused alone"),  # see `_check_top`
}
_FIX = "profile longer: `lambdadnn profile --budget-s`"
_CACHED = 64  # corner instances kept: one per (instance, guarantee) a caller re-solves


@dataclass(frozen=True)
class MovedParameter:
    """A parameter planned at its corner: the instance's value, the fit's standard error and
    the value planned for, z standard errors slower."""

    name: str
    value: float
    stderr: float
    corner: float


@dataclass(frozen=True)
class AtValue:
    """A parameter of the fit taken at its value, and why (not identified, no standard
    error, absent from the instance, or not one the corner moves)."""

    name: str
    reason: str


@dataclass(frozen=True)
class FitCoverage:
    """What a guaranteed plan of a profiled instance covers of its fit's uncertainty: the
    guarantee's z, the parameters moved and those taken at their values; `note` in one line."""

    z: float
    moved: tuple[MovedParameter, ...]
    at_value: tuple[AtValue, ...]
    note: str


class Cornered(NamedTuple):
    """The instance the search plans on (the corner, or the instance itself) and what it
    covers (None: no `fit:` section or no guarantee, so nothing changes)."""

    instance: Instance
    coverage: FitCoverage | None


def corner(instance: Instance, noise: PlanningNoise | None) -> Cornered:
    """The instance to plan on: under a guarantee (`noise`), a profiled instance's adverse
    corner at the guarantee's z; otherwise the instance itself. Raises `InstanceError` (one
    line: the parameter, its value ± standard error and the fix) when the corner is not a
    valid instance. Cached per (instance, z); a failed call caches nothing."""
    if noise is None or instance.fit is None:
        return Cornered(instance, None)
    return _corner(instance, noise.z)


def _value(instance: Instance, name: str) -> Any:
    return functools.reduce(getattr, name.split("."), instance)


def _with(section: Any, path: list[str], value: float) -> Any:
    head, *rest = path
    inner = value if not rest else _with(getattr(section, head), rest, value)
    return dataclasses.replace(section, **{head: inner})


def _fields(section: Any, path: str = "") -> set[str]:
    """Every field path of the instance's model sections (`profile.rate.slope`, ...)."""
    found: set[str] = set()
    for item in dataclasses.fields(section):
        value = getattr(section, item.name)
        where = f"{path}{item.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found |= _fields(value, f"{where}.")
        else:
            found.add(where)
    return found


@functools.lru_cache(maxsize=_CACHED)
def _corner(instance: Instance, z: float) -> Cornered:
    fields = _fields(instance) - {"name", "fit"}
    moved: list[MovedParameter] = []
    at_value: list[AtValue] = []
    cornered = dataclasses.replace(instance, fit=None)
    for parameter in instance.fit.parameters if instance.fit else ():
        name = parameter.name
        if name not in fields:
            continue  # a diagnostic of the fit (e.g. the per-sample seconds), no model field
        reason = (
            "not identified" if not parameter.identified
            else "no standard error" if not parameter.stderr
            else "not one the corner moves" if name not in SLOWER
            else "absent from the instance" if _value(instance, name) is None
            else None
        )
        if reason is not None:
            at_value.append(AtValue(name, reason))
            continue
        value, stderr = float(_value(instance, name)), float(parameter.stderr or 0)
        sign, rule = SLOWER[name]
        entry = MovedParameter(name, value, stderr, value + sign * z * stderr)
        _check(instance, entry, rule, z)
        moved.append(entry)
        cornered = _with(cornered, name.split("."), entry.corner)
    _check_top(instance, cornered, moved, z)
    coverage = FitCoverage(z, tuple(moved), tuple(at_value), _note(z, moved, at_value))
    return Cornered(cornered if moved else instance, coverage)


def _stated(entries: list[MovedParameter]) -> str:
    return " and ".join(
        f"`{e.name}` = {e.value:.6g} ± {e.stderr:.3g}" for e in entries
    )


def _check(instance: Instance, entry: MovedParameter, rule: Rule, z: float) -> None:
    """Refuse a moved parameter outside the loader's range for its field."""
    refused, problem = _REFUSED[rule]
    if refused(entry.corner):
        raise InstanceError(
            f"instance {brief(instance.name)}: {_stated([entry])} (the fit's standard "
            f"error): planned {z:.3g} standard errors slower for the guarantee, it is "
            f"{entry.corner:.6g}, {problem}; {_FIX}"
        )


def _check_top(
    instance: Instance, cornered: Instance, moved: list[MovedParameter], z: float
) -> None:
    """Refuse a corner whose rate or storage bandwidth is ≤ 0 even at the largest memory
    (both are non-decreasing in m), when the fit's uncertainty made it so."""
    top = instance.platform.memory.max_mb
    figures = model.evaluate(cornered.parameters(), 1, top)
    for section, figure, what in (
        ("profile.rate.", float(figures.rate), "R(m) samples/s"),
        ("profile.storage_bandwidth.", float(figures.storage_bandwidth), "the storage MB/s"),
    ):
        involved = [e for e in moved if e.name.startswith(section)]
        if involved and figure <= 0:
            raise InstanceError(
                f"instance {brief(instance.name)}: {_stated(involved)} (the fit's standard "
                f"errors): planned {z:.3g} standard errors slower for the guarantee, "
                f"{what} is ≤ 0 at every memory up to {top} MB ({figure:.4g} at {top} MB); "
                f"{_FIX}"
            )


def _note(z: float, moved: list[MovedParameter], at_value: list[AtValue]) -> str:
    covered = (
        f"{len(moved)} fitted parameters planned {z:.3g} standard errors slower "
        f"({', '.join(e.name for e in moved)})" if moved
        else "no fitted parameter has a standard error to plan for"
    )
    taken = "; taken at their values: " + ", ".join(
        f"{a.name} ({a.reason})" for a in at_value
    ) if at_value else ""
    return f"fit uncertainty: {covered}{taken}"
