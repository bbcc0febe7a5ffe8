"""`models.prices` is the SymPy model's price, not a second copy of it: `price_per_second` is
the model's `weight` and `bill` its `cost` (time and requests given), on random values."""

from __future__ import annotations

import math

import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn.models import equations
from lambdadnn.models.prices import bill, price_per_second

TIME = sp.Symbol("T", nonnegative=True)
RESTARTS = sp.Symbol("R", nonnegative=True)
# The model's cost with its time and restarts as given numbers: T·weight + n·(R + 1)·p_req;
# `ps_price_per_hour` is what all the PS's shards cost an hour, so k·p_ps stands as one p_ps.
SHARDS = {equations.k_ps: 1}
COST = equations.cost.subs(equations.time, TIME).subs(equations.restarts, RESTARTS).subs(SHARDS)
WEIGHT = equations.weight.subs(SHARDS)

functions = st.integers(1, 10_000)
memory = st.integers(128, 10_240)
price = st.floats(0, 1e-3, allow_nan=False)
hourly = st.floats(0, 10, allow_nan=False)


def _exact(expression: sp.Expr, values: dict[sp.Symbol, float]) -> float:
    """`expression` at `values` in exact rationals, rounded once."""
    return float(expression.subs({s: sp.Rational(v) for s, v in values.items()}))


def test_the_cost_is_priced_by_time_and_requests_alone() -> None:
    """The substitution leaves nothing of the model but the prices, n and m."""
    assert COST.free_symbols == {TIME, RESTARTS, equations.n, equations.m, equations.p_gbs,
                                 equations.p_ps, equations.p_req}


@given(functions, memory, price, hourly)
def test_price_per_second_is_the_models_weight(
    n: int, m: int, p_gbs: float, p_ps: float
) -> None:
    expected = _exact(WEIGHT, {equations.n: n, equations.m: m,
                                         equations.p_gbs: p_gbs, equations.p_ps: p_ps})
    found = price_per_second(n, m, price_per_gb_second=p_gbs, ps_price_per_hour=p_ps)
    assert math.isclose(found, expected, rel_tol=1e-15, abs_tol=1e-300)
    functions_only = _exact(WEIGHT, {equations.n: n, equations.m: m,
                                               equations.p_gbs: p_gbs, equations.p_ps: 0})
    assert price_per_second(n, m, price_per_gb_second=p_gbs) == functions_only


@given(functions, memory, price, hourly, st.floats(0, 1e-5), st.floats(0, 1e6),
       st.integers(0, 100))
def test_bill_is_the_models_cost(
    n: int, m: int, p_gbs: float, p_ps: float, p_req: float, time_s: float, restarts: int
) -> None:
    expected = _exact(COST, {TIME: time_s, RESTARTS: restarts, equations.n: n, equations.m: m,
                             equations.p_gbs: p_gbs, equations.p_ps: p_ps,
                             equations.p_req: p_req})
    found = bill(time_s, n, m, requests=n * (restarts + 1), price_per_gb_second=p_gbs,
                 price_per_request=p_req, ps_price_per_hour=p_ps)
    assert math.isclose(found, expected, rel_tol=1e-14, abs_tol=1e-300)
