"""Numbers handed in by a caller or a file, checked one way everywhere.

A number is a finite real of any numeric type (numpy's too) that is not a bool: `True` is an
`int` to Python, never a count or a size to a user. Each check raises the caller's domain
error (`error=`, an `InputError` subclass) as one line, "`name` must be NEED, got VALUE; FIX",
with the value quoted briefly; `need` overrides the default wording where a caller has its own.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, TypeVar

from .errors import InputError
from .files import brief

__all__ = ["Sign", "finite", "integer", "number", "probability", "refusal", "whole"]

Sign = Literal["positive", "non-negative", "any"]
Error = TypeVar("Error", bound=InputError)


def finite(value: object) -> float | None:
    """`value` as a finite float, or None: a bool, a non-real, NaN, ±inf or beyond float range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # 10**400, a Fraction beyond float range
        return None
    return number if math.isfinite(number) else None


def whole(value: object, *, floats: bool = True) -> int | None:
    """`value` as an int, or None: an integral type (not a bool) or, with `floats`, a finite
    whole float such as 512.0."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    number = finite(value) if floats else None
    return int(number) if number is not None and number.is_integer() else None


def refusal(
    name: str, value: object, need: str, *, error: type[Error], fix: str = "",
    source: str | None = None,
) -> Error:
    """The one-line error for `value` of the field `name` (of `source`, when given)."""
    where = f" in {source}" if source else ""
    tail = f"; {fix}" if fix else ""
    return error(f"`{name}`{where} must be {need}, got {brief(value)}{tail}")


def number(
    name: str, value: object, *, error: type[InputError], maximum: float = math.inf,
    sign: Sign = "positive", need: str | None = None, fix: str = "", source: str | None = None,
) -> float:
    """A finite real as a float: in (0, maximum], [0, maximum] or [-maximum, maximum]."""
    checked = finite(value)
    low = -maximum if sign == "any" else 0.0
    if checked is None or not low <= checked <= maximum or (sign == "positive" and checked == 0):
        wanted = need or _number_need(sign, maximum)
        raise refusal(name, value, wanted, error=error, fix=fix, source=source)
    return checked


def _number_need(sign: Sign, maximum: float) -> str:
    if math.isinf(maximum):
        return {"positive": "a positive number", "non-negative": "a number ≥ 0",
                "any": "a number"}[sign]
    top = f"{maximum:,.0f}"
    return {"positive": f"a positive number ≤ {top}", "non-negative": f"a number from 0 to {top}",
            "any": f"a number from -{top} to {top}"}[sign]


def integer(
    name: str, value: object, *, error: type[InputError], minimum: int = 1,
    maximum: int | None = None, floats: bool = True, need: str | None = None, fix: str = "",
    source: str | None = None,
) -> int:
    """A whole number in [minimum, maximum] as an int; `floats` admits a whole float (512.0).
    `1.5` functions is a typo, never one function."""
    checked = whole(value, floats=floats)
    if checked is None or checked < minimum or (maximum is not None and checked > maximum):
        wanted = need or _integer_need(minimum, maximum)
        raise refusal(name, value, wanted, error=error, fix=fix, source=source)
    return checked


def _integer_need(minimum: int, maximum: int | None) -> str:
    if maximum is None:
        return "a positive integer" if minimum == 1 else f"an integer ≥ {minimum:,}"
    if minimum == 1:
        return f"a positive integer ≤ {maximum:,}"
    return f"an integer from {minimum:,} to {maximum:,}"


def probability(
    name: str, value: object, *, error: type[InputError],
    need: str = "a probability strictly between 0 and 1", fix: str = "",
    source: str | None = None,
) -> float:
    """A probability strictly between 0 and 1 (a guarantee), of any real number type."""
    checked = finite(value)
    if checked is None or not 0 < checked < 1:
        raise refusal(name, value, need, error=error, fix=fix, source=source)
    return checked
