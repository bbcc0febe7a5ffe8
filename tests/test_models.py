"""The SymPy model against MODEL.md computed by hand, and the facts the bounds rest on."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn import load_instance
from lambdadnn.models import equations
from lambdadnn.models import performance as model
from lambdadnn.models.derivation import facts
from lambdadnn.models.errors import DerivationError
from tests.by_hand import by_hand
from tests.strategies import instance_mappings

MOBILENET = "instances/mobilenet-cifar10.yaml"


@pytest.mark.parametrize(
    ("n", "m"), [(1, 128), (8, 2048), (15, 531), (9, 3008), (64, 10240), (500, 700)]
)
def test_sympy_model_matches_design_by_hand(n: int, m: float) -> None:
    instance = load_instance(MOBILENET)
    expected = by_hand(instance, n, m)
    got = model.evaluate(instance.parameters(), n, m)
    for name in ("time", "cost", "restarts", "iterations", "local_batch", "t_load", "t_train"):
        assert float(getattr(got, name)) == pytest.approx(getattr(expected, name), rel=1e-12), name


def test_breakdowns_add_up_to_totals() -> None:
    params = load_instance(MOBILENET).parameters()
    n = np.arange(1, 65, dtype=float)[:, None]
    m = np.arange(128, 10241, 97, dtype=float)[None, :]
    f = model.evaluate(params, n, m)
    np.testing.assert_allclose(
        f.t_load + f.t_comp_total + f.t_comm_total + f.t_restart, f.time, rtol=1e-12
    )
    np.testing.assert_allclose(
        f.cost_functions + f.cost_ps + f.cost_requests, f.cost, rtol=1e-12
    )


def test_each_figure_set_is_compiled_once() -> None:
    names = ("time", "cost")
    assert model.program().function(names) is model.program().function(names)


def bits(value: Any) -> bytes:
    return np.float64(value).tobytes()


@given(instance_mappings(), st.data())
def test_a_figure_is_the_same_to_the_last_bit_however_it_is_computed(
    mapping: dict[str, object], data: st.DataObject
) -> None:
    """Property: one compiled program, so a figure does not depend on what it is computed
    with (alone, with others, with all), nor on the batch's shape (one plan, 1-D, 2-D); and
    without noise the deadline's figure is the time itself. Once, each figure set was
    compiled apart and the copies differed by 1-2 ulp: a deadline equal to a plan's time
    made it infeasible in one place and feasible in another."""
    instance = load_instance(mapping)
    values = instance.values()
    memory = instance.platform.memory.values()
    n = data.draw(st.integers(1, instance.max_functions), label="n")
    j = data.draw(st.integers(0, len(memory) - 1), label="memory index")
    full = model.evaluate(instance.parameters(), n, memory[j])
    assert bits(full.deadline_time) == bits(full.time)
    grid_n = np.array([[float(n)], [1.0]])
    grid_m = memory[np.array([[j, 0, j], [0, j, j]])]
    for names in (("time",), ("time", "restarts", "cost"), ("weight", "cost", "time"),
                  ("restarts",), ("cost",), ("t_train", "deadline_time")):
        alone = model.figures(values, n, memory[j], names)
        batch = model.figures(values, grid_n, grid_m, names)
        for name in names:
            expected = bits(alone[name])
            assert bits(batch[name][0, 0]) == bits(batch[name][0, 2]) == expected, name
            if name != "weight":
                assert expected == bits(getattr(full, name)), name


def test_facts_prove_every_regime_and_solve_the_thresholds() -> None:
    proved = facts()
    assert proved.regimes_proved == model.program().regimes_proved == 16
    assert sp.simplify(proved.rate_root + equations.beta1 / equations.alpha1) == 0
    assert sp.simplify(
        proved.storage_cap - (equations.B_s - equations.beta2) / equations.alpha2
    ) == 0
    assert proved.batch_limit == equations.b_gmax


E = equations
# Terms that make one claim of `facts()` false: in one regime only (memory past the rate's
# saturation costs time), for the spread, and for the cost weight.
FALSE_CLAIMS = [
    ("t_train", E.d_t * (E.m - sp.Min(E.m, E.m_sat)), "rate saturated"),
    ("spread_variance", E.v_b * E.d_m**2 * E.m, "the spread's variance"),
    ("weight", -2 * E.n * E.m / 1024 * E.p_gbs, "cost weight"),
]


@pytest.mark.parametrize(("name", "term", "named"), FALSE_CLAIMS, ids=[c[0] for c in FALSE_CLAIMS])
def test_the_derivation_refuses_a_false_monotonicity_claim(
    monkeypatch: pytest.MonkeyPatch, name: str, term: sp.Expr, named: str
) -> None:
    """`facts()` itself (uncached), run on a model with one false claim, refuses to prove it
    and names what failed: a skipped or lenient proof, or a regime left out, fails here."""
    monkeypatch.setattr(equations, name, getattr(equations, name) + term)
    with pytest.raises(DerivationError, match=named):
        facts.__wrapped__()


@given(instance_mappings(), st.data())
def test_the_facts_hold_by_hand(mapping: dict[str, object], data: st.DataObject) -> None:
    """Property: what `facts()` proves, checked numerically on MODEL.md by hand: for any n,
    T_train does not increase with memory over the valid grid, nor T with it."""
    instance = load_instance(mapping)
    n = data.draw(st.integers(1, instance.max_functions), label="n")
    plans = [by_hand(instance, n, float(m)) for m in instance.platform.memory.values()]
    valid = [plan for plan in plans if plan.valid]
    for smaller, larger in pairwise(valid):
        assert larger.t_train <= smaller.t_train * (1 + 1e-12)
        assert larger.time <= smaller.time * (1 + 1e-12)
