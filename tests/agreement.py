"""The one check that `solve()` gives the brute force's answer, shared by the properties."""

from __future__ import annotations

from typing import Any

import pytest

from lambdadnn import NoValidPlanError, Plan, solve
from tests.oracle import around_deadline


def assert_solves_as_brute_force(mapping: dict[str, Any]) -> Plan | None:
    """solve(mapping) is the oracle's answer: the same status, n, m, cost and time, or
    NoValidPlanError where the oracle finds no valid plan. A plan within rounding of the
    deadline may be judged either side of it (`around_deadline`); otherwise the answer must
    be the oracle's exactly. Returns the plan (None: no valid plan)."""
    answers = around_deadline(mapping)
    if answers[0].status == "none":
        with pytest.raises(NoValidPlanError):
            solve(mapping)
        return None
    plan = solve(mapping)
    got = (plan.status, plan.functions, plan.memory_mb)
    same = [a for a in answers if (a.status, a.functions, a.memory_mb) == got]
    assert same, (got, answers)
    assert plan.cost_usd == pytest.approx(same[0].cost_usd, rel=1e-9)
    assert plan.time_s == pytest.approx(same[0].time_s, rel=1e-9)
    return plan
