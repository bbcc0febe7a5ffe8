"""A guaranteed plan that covers what the profile does not know (MODEL.md, "Fit uncertainty").

A profiled instance's `fit:` section gives each fitted parameter a standard error, and the
spread of the trials about the fitted model (`RUN_SPREAD`: how far a run lands from it on
that machine). Under `solve(..., guarantee=p)` every identified parameter with a standard
error is moved z_p standard errors in the direction that slows a run (the adverse corner),
the iteration time is then stretched by exp(z_p·σ) for the spread, and the corner instance is
planned as any instance is, the run's noise at its p-quantile on top. Only numbers change,
so the search, its bounds and its proof of optimality are untouched; MODEL.md proves the
coverage.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..inputs.files import brief
from ..models import performance as model
from ..models.noise import PlanningNoise
from .errors import InstanceError
from .instance import MAX_SECONDS, Fit, Instance

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
#: The fit parameter that gives the trials' spread about the fitted model: the sd of
#: ln(measured / fitted iteration time), written by `launcher.fit`.
RUN_SPREAD = "iteration.run_spread"
#: The fields that make up the iteration time, and how a factor f on it moves each: compute
#: b/R(m) and exchange 2·(d_m·n/B + λ) are × f when R and B are ÷ f and λ is × f.
_ITERATION: dict[str, int] = {
    "profile.rate.slope": -1,
    "profile.rate.intercept": -1,
    "parameter_server.bandwidth_mbps": -1,
    "parameter_server.function_bandwidth_mbps": -1,
    "profile.latency_s": 1,
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
    guarantee's z, the parameters moved and those taken at their values, the trials' spread
    about the fit (`run_spread`, σ; 0 when the fit gives none) and the factor exp(z·σ) the
    iteration time is planned at for it; `note` in one line."""

    z: float
    moved: tuple[MovedParameter, ...]
    at_value: tuple[AtValue, ...]
    note: str
    run_spread: float = 0.0
    iteration_factor: float = 1.0


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


def run_spread(fit: Fit | None) -> float:
    """The trials' σ about the fitted model (`RUN_SPREAD`), 0 when the fit gives none
    identified: what a guaranteed plan stretches its iteration time for, and how well a
    re-planning controller may know one leg's speed."""
    found = [] if fit is None else [p for p in fit.parameters if p.name == RUN_SPREAD]
    return max(0.0, float(found[0].value)) if found and found[0].identified else 0.0


@functools.lru_cache(maxsize=_CACHED)
def _corner(instance: Instance, z: float) -> Cornered:
    fields = _fields(instance) - {"name", "fit"}
    moved: list[MovedParameter] = []
    at_value: list[AtValue] = []
    cornered = dataclasses.replace(instance, fit=None)
    spread = run_spread(instance.fit)
    for parameter in instance.fit.parameters if instance.fit else ():
        name = parameter.name
        if name == RUN_SPREAD:
            if spread == 0.0:
                at_value.append(AtValue(name, "not identified"))
            continue
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
        sign = SLOWER[name][0]
        moved.append(MovedParameter(name, value, stderr, value + sign * z * stderr))
    rho = instance.fit.rate_correlation if instance.fit else None
    if rho is not None:
        moved, rho = _rate_chord(instance, moved, rho, z)
    for entry in moved:
        _check(instance, entry, SLOWER[entry.name][1], z)
        cornered = _with(cornered, entry.name.split("."), entry.corner)
    _check_top(instance, cornered, moved, z)
    if z * spread > math.log(MAX_SECONDS):
        raise InstanceError(
            f"instance {brief(instance.name)}: `fit.parameters.{RUN_SPREAD}` = {spread:.6g} "
            f"(the trials' spread about the fit): planned {z:.3g} standard deviations slower "
            f"for the guarantee, the iteration time would be × more than {MAX_SECONDS:g}; "
            f"profile on a quieter machine: `lambdadnn profile`"
        )
    factor = math.exp(z * spread)
    if factor != 1.0:
        cornered = _stretched(cornered, factor)
    coverage = FitCoverage(z, tuple(moved), tuple(at_value),
                           _note(z, moved, at_value, spread, factor, rho), run_spread=spread,
                           iteration_factor=factor)
    return Cornered(cornered if moved or factor != 1.0 else instance, coverage)


def _rate_chord(instance: Instance, moved: list[MovedParameter], rho: float, z: float
                ) -> tuple[list[MovedParameter], float | None]:
    """R's slope and intercept moved together, with the correlation ρ of their errors: R(m)
    is then normal with sd(m) = √(σ_α²m² + 2ρσ_ασ_β·m + σ_β²), whose (1 − p)-quantile
    L(m) = R̂(m) − z·sd(m) is concave in m (sd is a norm of an affine map of m). The chord of L
    over the memories R grows on, [m_min, min(m_max, m_sat)], lies below it there, so the line
    through its ends is at or below R's quantile at every memory at once, as the independent
    moves (the chord for ρ = 1) are; a falling chord is replaced by the flat line at its lower
    end. Moves of other parameters, or with only one of the two, are left as they are (and ρ
    returned as None: not used)."""
    found = {e.name: e for e in moved}
    slope, intercept = found.get("profile.rate.slope"), found.get("profile.rate.intercept")
    if slope is None or intercept is None:
        return moved, None
    rate, grid = instance.profile.rate, instance.platform.memory
    low = float(grid.min_mb)
    high = max(low, min(float(grid.max_mb), rate.saturates_at_mb or math.inf))

    def lower(m: float) -> float:
        variance = ((slope.stderr * m) ** 2 + 2 * rho * slope.stderr * intercept.stderr * m
                    + intercept.stderr**2)
        return slope.value * m + intercept.value - z * math.sqrt(max(variance, 0.0))

    # one memory only: any rising line through L there will do; the one-by-one slope keeps
    # ρ = 1 the independent moves exactly
    rise = (lower(high) - lower(low)) / (high - low) if high > low else slope.corner
    gradient = max(rise, 0.0)
    offset = min(lower(low), lower(high)) if rise < 0 else lower(low) - gradient * low
    chord = {slope.name: gradient, intercept.name: offset}
    return [dataclasses.replace(e, corner=chord[e.name]) if e.name in chord else e
            for e in moved], rho


def _stretched(instance: Instance, factor: float) -> Instance:
    """The instance whose iteration time (compute and exchange) is `factor` × the given."""
    for name, direction in _ITERATION.items():
        value = _value(instance, name)
        if value is not None:
            instance = _with(instance, name.split("."), float(value) * factor**direction)
    return instance


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


def _note(z: float, moved: list[MovedParameter], at_value: list[AtValue], spread: float,
          factor: float, rho: float | None) -> str:
    covered = (
        f"{len(moved)} fitted parameters planned {z:.3g} standard errors slower "
        f"({', '.join(e.name for e in moved)})" if moved
        else "no fitted parameter has a standard error to plan for"
    )
    together = (f"; R's slope and intercept together, R(m) at its quantile with their "
                f"errors' correlation ρ = {rho:.3f}" if rho is not None else "")
    stretched = (f"; the iteration time × {factor:.3g} for the trials' spread about the fit "
                 f"(σ = {spread:.1%})" if spread > 0 else "")
    taken = "; taken at their values: " + ", ".join(
        f"{a.name} ({a.reason})" for a in at_value
    ) if at_value else ""
    return f"fit uncertainty: {covered}{together}{stretched}{taken}"
