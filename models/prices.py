"""The model's prices for a time that was measured or simulated rather than predicted.

`models.equations` prices a plan as cost = time·weight + requests·p_req, with weight =
n·(m/1024)·p_gbs + p_ps/3600 dollars per second. The compiled program evaluates that for the
model's own time; a simulator, a re-planner or a profiler bills a time it has only as a
number, without the model's parameter vector, and does it here, so that every bill is the
same arithmetic (tests/test_prices.py checks both against the SymPy expressions).
"""

from __future__ import annotations


def price_per_second(
    functions: float, memory_mb: float, *, price_per_gb_second: float,
    ps_price_per_hour: float = 0.0,
) -> float:
    """Dollars per second of `functions` functions of `memory_mb` MB each, and of the
    parameter server when its price is given: the model's `weight`."""
    return functions * memory_mb / 1024 * price_per_gb_second + ps_price_per_hour / 3600


def bill(
    time_s: float, functions: float, memory_mb: float, *, requests: float,
    price_per_gb_second: float, price_per_request: float, ps_price_per_hour: float = 0.0,
) -> float:
    """Dollars for `time_s` seconds on the plan and `requests` invocations: the model's
    `cost`, with the requests counted rather than predicted."""
    per_second = price_per_second(functions, memory_mb, price_per_gb_second=price_per_gb_second,
                                  ps_price_per_hour=ps_price_per_hour)
    return time_s * per_second + requests * price_per_request
