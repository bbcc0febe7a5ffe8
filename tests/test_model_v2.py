"""Model version 2: a per-exchange latency and a start-up per invocation round.

    t_comm = 2·(d_m / B_f^p + λ)                                 profile.latency_s = λ
    T      = T_train + r·o + (r + 1)·(s0 + s1·n)                 profile.startup

Both are optional and 0 when absent. The solver's optimality against the oracle and the
bounds' soundness on v2 instances are the existing hypothesis properties (tests/strategies.py
draws the new fields absent, 0 or positive); this file checks a worked example, that v1
instances keep their exact figures, the loader's refusals and the derivation's new proofs.
"""

from __future__ import annotations

import copy
import json
import math
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sympy as sp
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn.cli import main
from lambdadnn.models import equations
from lambdadnn.models import performance as model
from lambdadnn.models.derivation import facts, generate
from lambdadnn.models.errors import DerivationError
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import evaluate, solve
from tests.by_hand import by_hand
from tests.strategies import instance_mappings
from tests.test_solve import assert_matches_oracle

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "instances").glob("*.yaml"))
MOBILENET = ROOT / "instances" / "mobilenet-cifar10.yaml"


def mobilenet() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(MOBILENET.read_text(encoding="utf-8"))
    return loaded


def small() -> dict[str, Any]:
    """An instance whose figures are round numbers, for the worked example below."""
    return {
        "name": "worked-example",
        "platform": {
            "name": "round", "memory_mb": {"min": 512, "max": 2048, "step": 512},
            "price_per_gb_second": 1e-5, "price_per_request": 1e-6, "timeout_s": 30,
            "timeout_margin_s": 0, "restart_overhead_s": 2, "max_concurrency": 8,
        },
        "workload": {"model_size_mb": 1, "dataset_size_mb": 20, "samples": 2000, "epochs": 1,
                     "local_batch": 10, "max_global_batch": 1000},
        "profile": {
            "rate": {"slope": 0, "intercept": 100},
            "storage_bandwidth": {"slope": 0, "intercept": 10, "max_mbps": 100},
            "latency_s": 0.05,
            "startup": {"base_s": 5, "per_function_s": 0.5},
        },
        "parameter_server": {"bandwidth_mbps": 1000, "function_bandwidth_mbps": 10,
                             "price_per_hour": 0.36},
        "objective": {"deadline_s": 100},
    }


def test_worked_example_with_latency_and_startup() -> None:
    """By arithmetic, 2 functions of 1,024 MB: b_g = 20, k = 2000/20 = 100 iterations of
    t_comp = 10/100 = 0.1 s and t_comm = 2·(1/10 + 0.05) = 0.3 s, so 40 s, plus
    t_load = 20/(2·10) = 1 s: T_train = 41 s. L = 30 s, so r = ⌈41/30⌉ − 1 = 1 restart (2 s)
    and 2 rounds of start-up 5 + 0.5·2 = 6 s: T = 41 + 2 + 12 = 55 s. Cost: 55 s × 2 GB ×
    1e-5 $ + 55 s × 0.36 $/h + 2·2 requests × 1e-6 $ = 0.0011 + 0.0055 + 0.000004 $."""
    result = evaluate(small(), functions=2, memory_mb=1024)
    assert result.restarts == 1 and result.invocations == 4
    assert result.time_s == pytest.approx(55.0, rel=1e-12)
    tb = result.time_breakdown
    assert tb.communication_s == pytest.approx(30.0, rel=1e-12)
    assert tb.restart_overhead_s == pytest.approx(2.0, rel=1e-12)
    assert tb.startup_s == pytest.approx(12.0, rel=1e-12)
    assert result.cost_usd == pytest.approx(0.0011 + 0.0055 + 0.000004, rel=1e-12)


@pytest.mark.parametrize(("n", "m"), [(1, 128), (8, 2048), (15, 531), (64, 10240), (500, 700)])
@pytest.mark.parametrize("timeout_s", [900, 60])  # 60 s: many restarts, many rounds
def test_evaluate_matches_the_equations_by_hand(n: int, m: int, timeout_s: float) -> None:
    mapping = mobilenet()
    mapping["platform"] = {**yaml.safe_load(
        (ROOT / "instances" / "platforms" / "aws-lambda-x86_64.yaml").read_text()),
        "timeout_s": timeout_s, "timeout_margin_s": 5}
    mapping["profile"]["latency_s"] = 0.012
    mapping["profile"]["startup"] = {"base_s": 9.0, "per_function_s": 0.07}
    instance = load_instance(mapping)
    hand = by_hand(instance, n, m)
    got = evaluate(instance, functions=n, memory_mb=m)
    assert got.restarts == hand.restarts
    assert got.time_s == pytest.approx(hand.time, rel=1e-12)
    assert got.cost_usd == pytest.approx(hand.cost, rel=1e-12)
    assert got.time_breakdown.startup_s == pytest.approx(hand.t_startup, rel=1e-12)
    assert got.time_breakdown.communication_s == pytest.approx(
        hand.iterations * hand.t_comm, rel=1e-12)
    tb = got.time_breakdown
    parts = (tb.load_s + tb.compute_s + tb.communication_s + tb.restart_overhead_s
             + tb.startup_s + tb.cold_start_s)
    assert parts == pytest.approx(got.time_s, rel=1e-12)


def test_v2_terms_only_add_time_and_cost() -> None:
    """A latency and a start-up make every plan slower and no cheaper, and the start-up's
    share grows with n (per function, per round)."""
    v1 = load_instance(MOBILENET)
    mapping = mobilenet()
    mapping["profile"]["latency_s"] = 0.01
    mapping["profile"]["startup"] = {"base_s": 5.0, "per_function_s": 0.2}
    v2 = load_instance(mapping)
    n = np.arange(1, 200, dtype=float)[:, None]
    m = np.arange(128, 10241, 301, dtype=float)[None, :]
    old, new = model.evaluate(v1.parameters(), n, m), model.evaluate(v2.parameters(), n, m)
    valid = old.valid
    assert (new.time[valid] > old.time[valid]).all()
    assert (new.cost[valid] >= old.cost[valid]).all()
    per_round = new.t_startup / (new.restarts + 1)
    np.testing.assert_allclose(per_round[valid[:, 0], 0], 5.0 + 0.2 * n[valid[:, 0], 0])


V2_SYMBOLS = {equations.lam: 0, equations.s_0: 0, equations.s_1: 0}


def test_v1_instances_keep_their_figures_to_the_last_bit() -> None:
    """The model with λ = s0 = s1 = 0 substituted symbolically is version 1's model; compiled
    on its own it gives, bit for bit, the figures the v2 program gives a v1 instance (the zero
    terms change no rounding), for the shipped instances, with and without restarts."""
    figures = {**equations.FIGURES, **equations.AUXILIARY}
    v1 = generate(
        (equations.n, equations.m, *equations.PARAMETER_SYMBOLS, *equations.NOISE_SYMBOLS),
        {name: expression.xreplace(V2_SYMBOLS) for name, expression in figures.items()},
    )
    names = tuple(figures)
    function = v1.function(names)
    compiled = model.program()
    # the noise terms too (no failures: their terms as in the exact model)
    noise = (1.1, 0.02, 0.03, 1.6, 0.8, 2.5, *compiled.exact[6:])
    for path in SHIPPED:
        values = load_instance(path).values()
        n = np.arange(1, 400, dtype=float)[:, None]
        m = np.arange(128, 10241, 37, dtype=float)[None, :]
        for terms in (compiled.exact, noise):
            with np.errstate(all="ignore"):
                expected = function(n, m, *values, *terms)
                got = compiled.function(names)(n, m, *values, *terms)
            for name, want, have in zip(names, expected, got, strict=True):
                want, have = np.broadcast_arrays(np.asarray(want, float), np.asarray(have, float))
                assert want.tobytes() == have.tobytes(), (path.name, name)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_explicit_zero_terms_solve_exactly_as_absent_ones(path: Path) -> None:
    mapping = yaml.safe_load(path.read_text(encoding="utf-8"))
    mapping["name"] = path.stem
    zero = copy.deepcopy(mapping)
    zero["profile"]["latency_s"] = 0
    zero["profile"]["startup"] = {"base_s": 0, "per_function_s": 0.0}
    plans = [solve(source).to_dict() for source in (mapping, zero)]
    for plan in plans:
        plan.pop("solve_seconds")
    assert json.dumps(plans[0], sort_keys=True) == json.dumps(plans[1], sort_keys=True)
    assert plans[0]["time_breakdown"]["startup_s"] == 0.0


def test_a_v2_instance_over_the_full_grid_is_solved_to_the_oracle_optimum() -> None:
    """MobileNet over Lambda's full grid with a latency and a start-up per function, at its
    deadline and at a tighter one that the start-up makes infeasible; random v2 instances are
    tests/test_solve.py's property."""
    mapping = mobilenet()
    mapping["platform"] = "aws-lambda-x86_64"  # the oracle finds it among the shipped ones
    mapping["profile"]["latency_s"] = 0.02
    mapping["profile"]["startup"] = {"base_s": 8.0, "per_function_s": 1.5}
    for deadline in (1200.0, 300.0):
        mapping["objective"]["deadline_s"] = deadline
        plan = solve(mapping)
        assert_matches_oracle(plan, mapping)
        assert plan.time_breakdown.startup_s == pytest.approx(
            (8.0 + 1.5 * plan.functions) * (plan.restarts + 1), rel=1e-12)
    assert plan.status == "infeasible"


# --- the loader ---------------------------------------------------------------------------

BAD = [float("nan"), float("inf"), -1, -0.001, 1e10, True, "1 s", [1]]


def error_of(mapping: dict[str, Any]) -> str:
    with pytest.raises(InstanceError) as caught:
        load_instance(mapping)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("value", BAD, ids=repr)
@pytest.mark.parametrize(
    "field", ["latency_s", "startup.base_s", "startup.per_function_s"]
)
def test_bad_v2_values_are_refused_naming_the_field(field: str, value: Any) -> None:
    mapping = mobilenet()
    mapping["profile"]["startup"] = {"base_s": 1.0, "per_function_s": 0.1}
    node = mapping["profile"]
    *sections, key = field.split(".")
    for section in sections:
        node = node[section]
    node[key] = value
    message = error_of(mapping)
    assert f"`profile.{field}`" in message and "a number from 0 to 1,000,000,000" in message


def test_startup_must_be_a_mapping_of_both_fields() -> None:
    mapping = mobilenet()
    mapping["profile"]["startup"] = 5
    assert "`profile.startup` must be a mapping with the keys base_s, per_function_s" in (
        error_of(mapping))
    mapping["profile"]["startup"] = {"base_s": 5}
    assert "`profile.startup.per_function_s` is missing" in error_of(mapping)
    mapping["profile"]["startup"] = {"base_s": 5, "per_function": 1}
    assert "did you mean `per_function_s`?" in error_of(mapping)


def test_the_v2_fields_reach_the_model() -> None:
    mapping = mobilenet()
    mapping["profile"]["latency_s"] = 0.25
    mapping["profile"]["startup"] = {"base_s": 7, "per_function_s": 0.125}
    instance = load_instance(mapping)
    params = instance.parameters()
    assert (params["lam"], params["s_0"], params["s_1"]) == (0.25, 7.0, 0.125)
    absent = load_instance(MOBILENET).parameters()
    assert (absent["lam"], absent["s_0"], absent["s_1"]) == (0.0, 0.0, 0.0)


# --- the derivation -------------------------------------------------------------------------

E = equations
# Terms that break one of the new claims: a start-up that shrinks per round, a time that
# depends on m other than through R and B_f^s, a request cost that falls with restarts.
FALSE_CLAIMS = [
    ("time", -2 * E.restarts * E.s_1 * E.n, "T adds a term"),
    ("time", E.lam * E.m, "T adds a term"),
    ("deadline_time", -2 * E.restarts_quantile * E.s_0, "T's quantile adds a term"),
    ("cost_requests", -E.restarts * E.p_req, "request cost adds a term"),
    ("cost", E.s_0 * E.p_req, "the cost is not T·weight"),
    # The rate as the proof sees it differs from the one in T: m enters T another way.
    ("rate", E.alpha1 * (E.m - sp.Min(E.m, E.m_sat)), "depends on m other than through R"),
]


@pytest.mark.parametrize(("name", "term", "named"), FALSE_CLAIMS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FALSE_CLAIMS)])
def test_the_derivation_refuses_false_v2_claims(
    monkeypatch: pytest.MonkeyPatch, name: str, term: sp.Expr, named: str
) -> None:
    monkeypatch.setattr(equations, name, getattr(equations, name) + term)
    with pytest.raises(DerivationError, match=named):
        facts.__wrapped__()


def test_the_restart_count_is_checked_to_be_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds use that r is non-decreasing in T_train; a different count is refused."""
    falling = sp.Max(0, 5 - sp.ceiling(equations.t_train / equations.L))
    monkeypatch.setattr(equations, "restarts", falling)
    with pytest.raises(DerivationError, match="restart count"):
        facts.__wrapped__()


@given(instance_mappings(), st.data())
def test_time_is_non_increasing_in_memory_with_v2_terms(
    mapping: dict[str, Any], data: st.DataObject
) -> None:
    """Property, by hand: for any n, T (start-up and latency always included) and the restarts
    do not increase with memory over the valid grid: what the box and the cost bound use."""
    mapping = copy.deepcopy(mapping)
    mapping["profile"]["latency_s"] = data.draw(st.floats(0, 1), label="latency")
    mapping["profile"]["startup"] = {
        "base_s": data.draw(st.floats(0, 30), label="base"),
        "per_function_s": data.draw(st.floats(0, 2), label="per function"),
    }
    instance = load_instance(mapping)
    n = data.draw(st.integers(1, instance.max_functions), label="n")
    plans = [by_hand(instance, n, float(m)) for m in instance.platform.memory.values()]
    valid = [plan for plan in plans if plan.valid and math.isfinite(plan.time)]
    for before, after in pairwise(valid):
        assert after.time <= before.time * (1 + 1e-12)
        assert after.restarts <= before.restarts


def test_the_cli_shows_the_startup_line(tmp_path: Path) -> None:
    mapping = mobilenet()
    mapping["profile"]["startup"] = {"base_s": 8.0, "per_function_s": 1.5}
    path = tmp_path / "v2.yaml"
    path.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    result = CliRunner().invoke(main, ["evaluate", str(path), "-n", "10", "-m", "1024"])
    assert result.exit_code == 0, result.output
    rounds = evaluate(path, functions=10, memory_mb=1024).restarts + 1
    line = next(line for line in result.output.splitlines() if "start-up" in line)
    assert rounds == 2 and f" {(8.0 + 1.5 * 10) * rounds:,.1f} " in line
    plain = CliRunner().invoke(main, ["evaluate", str(MOBILENET), "-n", "10", "-m", "1024"])
    assert "start-up" not in plain.output
