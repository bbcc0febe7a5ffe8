"""Crashes in the planning noise (MODEL.md, "Failures"): a declared failure rate is planned for.

The simulator is the oracle: it crashes functions as the module docstring of
`simulator.engine` says, independently of the model's algebra.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import solve
from lambdadnn.models import equations, performance
from lambdadnn.models.derivation import facts
from lambdadnn.models.errors import DerivationError
from lambdadnn.models.noise import NoiseModel, planning_noise
from lambdadnn.simulator.engine import simulate_job
from lambdadnn.solver.errors import NoValidPlanError
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import _evaluation

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = ROOT / "instances" / "mobilenet-cifar10.yaml"
RUNS = 400


def _met(path: Path, plan_noise: NoiseModel, truth: NoiseModel) -> float:
    """Share of seeded simulated runs under `truth` of the plan solved with `plan_noise`."""
    instance = load_instance(path)
    plan = solve(instance, guarantee=0.99, noise=plan_noise)
    rng = np.random.default_rng(2024)
    runs = [simulate_job(instance, plan.functions, plan.memory_mb, noise=truth, rng=rng)
            for _ in range(RUNS)]
    deadline = instance.objective.deadline_s
    return float(np.mean([run.finished and run.time_s <= deadline for run in runs]))


def test_a_declared_failure_rate_is_met_in_simulation_and_ignoring_it_is_not() -> None:
    """MobileNet at 0.5 crashes per function-hour: the plan that declares them meets its
    deadline in ≥ 99% of simulated runs; the plan that ignores them (its deadline time sits
    1 s under the deadline, with a crash costing tens of seconds) meets it far less often."""
    truth = NoiseModel(failure_rate_per_hour=0.5)
    aware = _met(MOBILENET, truth, truth)
    blind = _met(MOBILENET, NoiseModel(failure_rate_per_hour=0.0), truth)
    assert aware >= 0.99
    assert blind <= 0.5


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(sorted((ROOT / "instances").glob("*.yaml"))),
       st.floats(0.01, 1.0), st.floats(0.01, 1.0))
def test_the_guaranteed_time_grows_with_the_failure_rate(
    path: Path, low: float, high: float
) -> None:
    """Property: for any plan, the guaranteed and the expected time do not fall as the declared
    failure rate grows, and a failure rate of 0 gives today's figures to the last bit."""
    low, high = sorted((low, high))
    instance = load_instance(path)
    plan = solve(instance)
    figures = []
    for rate in (0.0, low, high):
        terms = planning_noise(NoiseModel(failure_rate_per_hour=rate), 0.99, instance.max_functions)
        figures.append(_evaluation(instance, plan.functions, plan.memory_mb, terms))
    exact, slow, slower = figures
    today = _evaluation(instance, plan.functions, plan.memory_mb,
                        planning_noise(NoiseModel(), 0.99, instance.max_functions))
    assert (exact.deadline_time_s, exact.time_s, exact.cost_usd) == (
        today.deadline_time_s, today.time_s, today.cost_usd)
    assert exact.deadline_time_s < slow.deadline_time_s <= slower.deadline_time_s
    assert exact.time_s < slow.time_s <= slower.time_s


def test_a_failure_free_guaranteed_solve_is_todays() -> None:
    """`NoiseModel(failure_rate_per_hour=0)` is the default noise: the same plan, bit for bit."""
    default = solve(MOBILENET, guarantee=0.99)
    declared = solve(MOBILENET, guarantee=0.99, noise=NoiseModel(failure_rate_per_hour=0.0))
    assert (declared.functions, declared.memory_mb, declared.deadline_time_s,
            declared.cost_usd) == (default.functions, default.memory_mb,
                                   default.deadline_time_s, default.cost_usd)


def test_a_plan_that_crashes_faster_than_it_progresses_is_invalid() -> None:
    """n·f·c ≥ 1: never a negative or finite time, but an invalid plan naming the field."""
    instance = load_instance(MOBILENET)
    terms = planning_noise(NoiseModel(failure_rate_per_hour=500.0), 0.99, instance.max_functions)
    checked = _evaluation(instance, 14, 724, terms)
    assert not checked.valid and not checked.feasible
    assert any("`noise.failure_rate_per_hour`" in v and "never finishes" in v
               for v in checked.violations)
    assert checked.deadline_time_s == np.inf and checked.time_s == np.inf


def test_no_plan_finishes_under_an_absurd_failure_rate() -> None:
    with pytest.raises(NoValidPlanError, match=r"noise\.failure_rate_per_hour"):
        solve(MOBILENET, guarantee=0.99, noise=NoiseModel(failure_rate_per_hour=1e6))


def test_a_crash_rate_excludes_the_plans_that_never_finish_from_the_fastest() -> None:
    """When no plan meets the deadline, the fastest among those that finish is returned."""
    plan = solve(MOBILENET, guarantee=0.99, deadline_s=60,
                 noise=NoiseModel(failure_rate_per_hour=50.0))
    assert plan.status == "infeasible" and np.isfinite(plan.deadline_time_s)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t_crashes", "t_crashes_quantile"])
def test_the_derivation_refuses_a_crash_loss_it_did_not_prove(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A crash loss that differs from the proved form (here: falling with the exposure) is
    refused by `facts()`, so the bounds never rest on an unproved monotonicity."""
    proved = getattr(equations, name).args[1].expr
    monkeypatch.setattr(equations, name, sp.Piecewise((0, equations.no_crashes), (-proved, True)))
    with pytest.raises(DerivationError, match=r"crash loss|adds a term"):
        facts.__wrapped__()


@pytest.mark.parametrize(("functions", "memory_mb", "rate", "guarantee"), [
    (14, 3008, 0.5, 0.99), (6, 6000, 2.0, 0.999), (12, 10240, 0.1, 0.9),
])
def test_the_guaranteed_crash_loss_is_the_documented_bound(
    functions: int, memory_mb: int, rate: float, guarantee: float,
) -> None:
    """numpy as the oracle, typed from MODEL.md: each crash loses at most b = f_q + o + k_c·t_it,
    c = f_q + o + (k_c/2)·t_it on average; U solves U = E_q + λUc + √(2a·λU·b·c) + a·b/3
    and the deadline figure grows by U − E_q (here one round: E_q is T_q itself)."""
    instance = load_instance(MOBILENET)
    noise = NoiseModel(failure_rate_per_hour=rate)
    terms = planning_noise(noise, guarantee, instance.max_functions)
    quiet = planning_noise(NoiseModel(), guarantee, instance.max_functions)
    values = instance.values()
    names = ("deadline_time", "iterations", "t_comp_total", "t_comm_total")
    crashing = performance.figures(values, functions, memory_mb, names, terms)
    calm = performance.figures(values, functions, memory_mb, names, quiet)
    platform = instance.platform
    cold_q = float(quiet.cold_start_quantile[functions - 1])
    exposure = float(calm["deadline_time"]) - cold_q  # T_q: no restart, no start-up here
    assert exposure < platform.timeout_s - platform.timeout_margin_s
    t_it = float((calm["t_comp_total"] + calm["t_comm_total"]) / calm["iterations"])
    overhead = terms.crash_cold_start_quantile + platform.restart_overhead_s
    b = overhead + noise.checkpoint_every * t_it
    c = overhead + noise.checkpoint_every / 2 * t_it
    lam, a = functions * rate / 3600, -np.log1p(-guarantee)
    roots = np.roots([1 - lam * c, -np.sqrt(2 * a * lam * b * c), -(exposure + a * b / 3)])
    u = max(roots.real) ** 2
    lost = float(crashing["deadline_time"] - calm["deadline_time"])
    assert lost == pytest.approx(u - exposure, rel=1e-9)
    assert lost == pytest.approx(lam * u * c + np.sqrt(2 * a * lam * u * b * c) + a * b / 3,
                                 rel=1e-9)
