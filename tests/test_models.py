"""The SymPy model against MODEL.md computed by hand, and the facts the bounds rest on."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn import load_instance
from lambdadnn.models import equations
from lambdadnn.models import performance as model
from lambdadnn.models.compiled import program
from lambdadnn.models.derivation import facts
from tests.strategies import instance_mappings

MOBILENET = "instances/mobilenet-cifar10.yaml"


def hand_figures(p: dict[str, float], n: int, m: float) -> dict[str, float]:
    """MODEL.md's equations line by line in plain Python floats."""
    if n * p["b_lf"] <= p["b_gmax"]:
        b_g, b_l = n * p["b_lf"], p["b_lf"]
    else:
        b_g, b_l = p["b_gmax"], p["b_gmax"] / n
    k = p["n_t"] * p["e"] / b_g
    rate = p["alpha1"] * min(m, p["m_sat"]) + p["beta1"]
    storage = min(p["alpha2"] * m + p["beta2"], p["B_s"])
    ps = min(p["B_fmax"], p["B_p"] / n)
    t_train = p["d_t"] / (n * storage) + k * (b_l / rate + 2 * p["d_m"] / ps)
    restarts = max(0, math.ceil(t_train / p["L"]) - 1)
    t = t_train + restarts * p["o"]
    cost = t * (n * m / 1024 * p["p_gbs"] + p["p_ps"] / 3600) + n * (restarts + 1) * p["p_req"]
    return {"time": t, "cost": cost, "restarts": restarts, "iterations": k, "local_batch": b_l}


@pytest.mark.parametrize(
    ("n", "m"), [(1, 128), (8, 2048), (15, 531), (9, 3008), (64, 10240), (500, 700)]
)
def test_sympy_model_matches_design_by_hand(n: int, m: float) -> None:
    params = load_instance(MOBILENET).parameters()
    expected = hand_figures(params, n, m)
    got = model.evaluate(params, n, m)
    for name, value in expected.items():
        assert float(getattr(got, name)) == pytest.approx(value, rel=1e-12), name


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
    assert program().function(names) is program().function(names)


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
    values = model.parameter_values(instance.parameters())
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
    assert proved.regimes_proved == program().regimes_proved == 16
    assert sp.simplify(proved.rate_root + equations.beta1 / equations.alpha1) == 0
    assert sp.simplify(
        proved.storage_cap - (equations.B_s - equations.beta2) / equations.alpha2
    ) == 0
    assert proved.batch_limit == equations.b_gmax


def test_a_false_monotonicity_claim_is_not_proved() -> None:
    """The proof step can fail: a time that grows with m is not judged non-increasing."""
    rho = sp.Symbol("rho", positive=True)
    growing = sp.diff(equations.d_t * equations.m / rho, equations.m)
    assert not growing.is_nonpositive
