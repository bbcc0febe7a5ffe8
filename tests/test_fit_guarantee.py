"""`solve(..., guarantee=p)` on a profiled instance: the share p covers the fit's standard
errors as well as the run's noise (docs/MODEL.md, "Fit uncertainty").

The claim is checked by sampling with this module's own sampler (`sampled_times`): every run
draws the fitted parameters from the fit's normals — independently, all together the slow
way (the worst correlation for a sum), or slope and intercept correlated as a joint least
squares fit makes them — takes the plan's per-iteration figures from MODEL.md by hand
(`tests.by_hand`) and draws the noise from `NoiseModel`'s definition with the slowest-worker
draw of `tests.test_guarantee`; a profile that gives the trials' spread about its fit
(`iteration.run_spread`, σ) stretches each run's iteration time by its own lognormal
exp(N(0, σ²)). Nothing of the planner's corner, noise tables or compiled model is used.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import Instance, InstanceError, evaluate, load_instance, solve
from lambdadnn.cli import main
from lambdadnn.models.noise import NoiseModel
from lambdadnn.solver.fit_uncertainty import RUN_SPREAD
from lambdadnn.solver.instance import instance_mapping
from tests.by_hand import hand, problem_of
from tests.test_guarantee import CHUNK, least_hits, slowest_normal

Array = npt.NDArray[np.float64]
Correlation = Literal["independent", "together", "joint-fit"]

# --- an independent sampler of runs under the fit's belief and the noise ------------------

#: Each fitted parameter's place among MODEL.md's plain numbers (`tests.oracle.Problem`) and
#: the sign of the change that slows a run (read off MODEL.md's equations, not the planner).
PROBLEM_FIELD: dict[str, tuple[str, int]] = {
    "profile.rate.slope": ("alpha1", -1),
    "profile.rate.intercept": ("beta1", -1),
    "parameter_server.bandwidth_mbps": ("b_p", -1),
    "parameter_server.function_bandwidth_mbps": ("b_fmax", -1),
    "profile.latency_s": ("latency_s", 1),
    "profile.startup.base_s": ("startup_base_s", 1),
    "profile.startup.per_function_s": ("startup_per_function_s", 1),
    "platform.restart_overhead_s": ("restart_overhead_s", 1),
}
JOINT_FIT_CORRELATION = -0.95  # slope against intercept: their least squares fit's, typically
MAX_ROUNDS = 100  # invocation rounds drawn per run: far beyond every deadline sampled here


def drawn_parameters(
    instance: Instance, correlation: Correlation, runs: int, rng: np.random.Generator
) -> dict[str, Array]:
    """`runs` draws of every identified parameter with a standard error, by `Problem` field:
    normal around its value with its standard error, correlated as `correlation` says."""
    assert instance.fit is not None
    fitted = [(PROBLEM_FIELD[p.name], p.value, p.stderr) for p in instance.fit.parameters
              if p.identified and p.stderr and p.name in PROBLEM_FIELD]
    shared = rng.standard_normal(runs)
    rho = JOINT_FIT_CORRELATION

    def standard(field: str, slow: int) -> Array:
        if correlation == "together":
            return slow * shared
        if correlation == "joint-fit" and field == "alpha1":
            return shared
        if correlation == "joint-fit" and field == "beta1":
            return rho * shared + math.sqrt(1 - rho * rho) * rng.standard_normal(runs)
        return rng.standard_normal(runs)

    return {field: value + stderr * standard(field, slow)
            for (field, slow), value, stderr in fitted}


def sampled_times(
    instance: Instance, n: int, m: int, noise: NoiseModel, correlation: Correlation,
    runs: int, rng: np.random.Generator,
) -> Array:
    """Times of `runs` runs of plan (n, m): parameters drawn per run (`drawn_parameters`), then
    noise as `NoiseModel` defines it. Per worker and iteration the compute time is t_comp
    times a mean-1 lognormal (`compute_cv`); an iteration waits for the slowest of its n
    workers and then exchanges for t_comm times a mean-1 lognormal (`bandwidth_cv`); the k
    iterations (⌊k⌋ whole and a last one scaled by k − ⌊k⌋) add up after t_load. A run
    restarts r = max(0, ⌈T_train/L⌉ − 1) times (T_train's iterations × the run's stretch, from
    the fit's spread about the model), paying the restart overhead each time; each
    of its r + 1 rounds pays the start-up s0 + s1·n and waits for the slowest of n lognormal
    cold starts. A run whose drawn rate or bandwidth is ≤ 0 never ends (+∞), and one of more
    than `MAX_ROUNDS` rounds is counted so too (its cold starts are not drawn)."""
    problem = problem_of(instance)
    drawn = drawn_parameters(instance, correlation, runs, rng)

    def run(j: int) -> dict[str, Any]:
        return {field: float(values[j]) for field, values in drawn.items()}

    per_run = [hand(dataclasses.replace(problem, **run(j)), n, m) for j in range(runs)]
    stretch = np.exp(spread_of(instance) * rng.standard_normal(runs))  # per run
    iterations = hand(problem, n, m).iterations  # k does not depend on the fitted parameters
    whole = math.floor(iterations)
    scale = np.ones(whole + (iterations > whole))
    scale[whole:] = iterations - whole
    sigma_c = math.sqrt(math.log1p(noise.compute_cv**2))
    sigma_b = math.sqrt(math.log1p(noise.bandwidth_cv**2))
    compute, exchange = np.empty(runs), np.empty(runs)
    per_chunk = max(1, CHUNK // len(scale))
    for start in range(0, runs, per_chunk):
        size = (min(per_chunk, runs - start), len(scale))
        compute[start:start + size[0]] = np.exp(
            sigma_c * slowest_normal(rng, n, size) - sigma_c**2 / 2) @ scale
        exchange[start:start + size[0]] = np.exp(
            sigma_b * rng.standard_normal(size) - sigma_b**2 / 2) @ scale
    column = {name: np.array([getattr(f, name) for f in per_run])
              for name in ("t_load", "t_comp", "t_comm")}
    t_train = column["t_load"] + stretch * (column["t_comp"] * compute
                                            + column["t_comm"] * exchange)
    usable = problem.timeout_s - problem.timeout_margin_s
    restarts = np.maximum(0, np.ceil(t_train / usable) - 1)
    at = {field: drawn.get(field, np.full(runs, getattr(problem, field)))
          for field in ("restart_overhead_s", "startup_base_s", "startup_per_function_s",
                        "b_p", "b_fmax")}
    startup = at["startup_base_s"] + at["startup_per_function_s"] * n
    rounds = int(min(restarts.max(), MAX_ROUNDS - 1)) + 1
    cold = noise.cold_start_median_s * np.exp(
        noise.cold_start_sigma * slowest_normal(rng, n, (runs, rounds)))
    cold_total = np.where(np.arange(rounds) <= restarts[:, None], cold, 0.0).sum(axis=1)
    times: Array = (t_train + restarts * at["restart_overhead_s"] + (restarts + 1) * startup
                    + cold_total)
    valid = np.array([f.valid for f in per_run]) & (np.minimum(at["b_p"], at["b_fmax"]) > 0)
    valid &= restarts < MAX_ROUNDS
    return np.where(valid, times, np.inf)


def spread_of(instance: Instance) -> float:
    """σ of ln(measured / fitted iteration time) the profile found, 0 if it found none."""
    assert instance.fit is not None
    return next((p.value for p in instance.fit.parameters
                 if p.name == RUN_SPREAD and p.identified), 0.0)


# --- profiled instances -------------------------------------------------------------------


def profiled(mapping: dict[str, Any], errors: dict[str, float | None],
             spread: float | None = None) -> Instance:
    """The instance of `mapping` with a `fit:` section as `lambdadnn profile` writes one: each
    named field at its value with the standard error given (None: not identified), and the
    trials' spread about the fit when `spread` is given."""
    base = load_instance(mapping)

    def value(name: str) -> float:
        found: Any = base
        for part in name.split("."):
            found = getattr(found, part)
        return float(found)

    parameters = {
        name: {"value": value(name), "stderr": error, "identified": error is not None}
        for name, error in errors.items()
    }
    parameters["iteration.per_sample_s@442MB"] = {  # a diagnostic: no model field
        "value": 1e-4, "stderr": 1e-5, "identified": True}
    if spread is not None:
        parameters[RUN_SPREAD] = {"value": spread, "stderr": spread / 4, "identified": True}
    return load_instance({**mapping, "fit": {
        "workload": "digits-cnn", "backend": "local", "seconds": 60.0, "cost_usd": 0.0,
        "parameters": parameters,
    }})


@cache
def lambda_mobilenet() -> Instance:
    """MobileNet on Lambda with model v2's terms, profiled to a few percent: compute-bound,
    one restart, and the fit's uncertainty several times the run's noise."""
    mapping = instance_mapping(load_instance("instances/mobilenet-cifar10.yaml"))
    mapping["profile"] |= {"latency_s": 0.002, "startup": {"base_s": 3.0, "per_function_s": 0.2}}
    return profiled(mapping, {
        "profile.rate.slope": 0.0015, "profile.rate.intercept": 0.5,
        "parameter_server.bandwidth_mbps": 60.0, "parameter_server.function_bandwidth_mbps": None,
        "profile.latency_s": 0.0004, "profile.startup.base_s": 0.5,
        "profile.startup.per_function_s": 0.04, "platform.restart_overhead_s": 0.3,
    })


@cache
def local_digits() -> Instance:
    """A local profile of digits-cnn as README's table prints it: R's slope and intercept
    known to 28% and 300% (R at 442 MB to ~40%), start-up to 10–15%, B_p not identified."""
    return profiled({
        "name": "digits-cnn-local",
        "platform": {
            "name": "local", "memory_mb": {"min": 442, "max": 1769, "step": 1},
            "price_per_gb_second": 1.6667e-5, "price_per_request": 2e-7, "timeout_s": 60,
            "timeout_margin_s": 5, "restart_overhead_s": 0.065, "max_concurrency": 8,
            "max_vcpu": 3,
        },
        "workload": {"model_size_mb": 0.04, "dataset_size_mb": 0.5, "samples": 1437,
                     "epochs": 10, "local_batch": 64, "max_global_batch": 1024},
        "profile": {
            "rate": {"slope": 6.14511, "intercept": -209.025, "saturates_at_mb": 1769},
            "storage_bandwidth": {"slope": 0, "intercept": 1e6, "max_mbps": 1e6},
            "latency_s": 0.000631, "startup": {"base_s": 1.63635, "per_function_s": 1.49394},
        },
        "parameter_server": {"bandwidth_mbps": 1e7, "function_bandwidth_mbps": 1e7,
                             "price_per_hour": 0},
        "objective": {"deadline_s": 20},
    }, {
        "profile.rate.slope": 1.7, "profile.rate.intercept": 630.0,
        "parameter_server.bandwidth_mbps": None, "profile.latency_s": 0.00083,
        "profile.startup.base_s": 0.25, "profile.startup.per_function_s": 0.14,
        "platform.restart_overhead_s": 0.011, "profile.rate.saturates_at_mb": None,
    })


@cache
def local_digits_spread() -> Instance:
    """`local_digits` identified a hundred times better, on a machine whose trials land 13% (σ of
    the log) from the fitted model, about the run-to-run spread benchmarks/deadlines_real.py
    measured on this 2-core VM: the spread, not the parameters, is what a plan must cover.
    Its deadline, 9 s, leaves the plan to the deadline rather than to the grid's edge."""
    fit = local_digits().fit
    assert fit is not None
    mapping = instance_mapping(dataclasses.replace(local_digits(), fit=None))
    mapping["objective"] = {"deadline_s": 9.0}
    return profiled(mapping,
                    {p.name: None if p.stderr is None else p.stderr / 100
                     for p in fit.parameters if p.name in PROBLEM_FIELD
                     or p.name.startswith("profile.rate.")}, spread=0.13)


def with_rho(instance: Instance, rho: float) -> Instance:
    """`instance` whose fit records the correlation of R's slope and intercept errors."""
    assert instance.fit is not None
    return dataclasses.replace(instance, fit=dataclasses.replace(instance.fit,
                                                                 rate_correlation=rho))


@cache
def lambda_mobilenet_rho() -> Instance:
    return with_rho(lambda_mobilenet(), JOINT_FIT_CORRELATION)


@cache
def local_digits_rho() -> Instance:
    return with_rho(local_digits(), JOINT_FIT_CORRELATION)


def scaled(instance: Instance, factors: dict[str, float]) -> Instance:
    """`instance` with the named parameters' standard errors multiplied by their factors."""
    assert instance.fit is not None
    parameters = tuple(
        dataclasses.replace(p, stderr=p.stderr * factors.get(p.name, 1.0))
        if p.stderr is not None else p
        for p in instance.fit.parameters
    )
    return dataclasses.replace(instance, fit=dataclasses.replace(instance.fit,
                                                                 parameters=parameters))


def figures(plan: Any) -> tuple[Any, ...]:
    """What a plan or an evaluation says about the run."""
    return (plan.functions, plan.memory_mb, plan.time_s, plan.deadline_time_s, plan.cost_usd,
            plan.restarts, plan.time_breakdown, plan.cost_breakdown)


# --- the guarantee, by sampling -----------------------------------------------------------

# (id, instance, noise, p, correlation, runs): both profiles, at two guarantees, with the
# parameters independent, all slow together (the worst case for a sum: the corner is then
# the fit's exact quantile, and the noise comes on top), and slope against intercept as a
# joint fit correlates them, with that correlation unknown to the plan or recorded in the
# fit (`rate_correlation`: the corner then bounds R(m) by its chord); with no noise, where the
# fit's uncertainty is all there is; and with the trials' spread about the fit.
SAMPLED: list[tuple[str, Callable[[], Instance], NoiseModel, float, Correlation, int]] = [
    ("lambda@0.9-independent", lambda_mobilenet, NoiseModel(), 0.9, "independent", 4000),
    ("lambda@0.9-together", lambda_mobilenet, NoiseModel(), 0.9, "together", 4000),
    ("lambda@0.99-together", lambda_mobilenet, NoiseModel(), 0.99, "together", 10_000),
    ("lambda@0.9-joint-fit", lambda_mobilenet, NoiseModel(), 0.9, "joint-fit", 4000),
    ("local@0.9-independent", local_digits, NoiseModel(), 0.9, "independent", 4000),
    ("local@0.9-together", local_digits, NoiseModel(), 0.9, "together", 4000),
    ("local@0.99-together", local_digits, NoiseModel(), 0.99, "together", 10_000),
    ("local@0.99-joint-fit", local_digits, NoiseModel(), 0.99, "joint-fit", 10_000),
    ("local@0.9-no-noise", local_digits, NoiseModel.none(), 0.9, "independent", 4000),
    ("lambda@0.9-rho-recorded", lambda_mobilenet_rho, NoiseModel(), 0.9, "joint-fit", 4000),
    ("local@0.99-rho-recorded", local_digits_rho, NoiseModel(), 0.99, "joint-fit", 10_000),
    ("spread@0.9-independent", local_digits_spread, NoiseModel(), 0.9, "independent", 4000),
    ("spread@0.95-together", local_digits_spread, NoiseModel(), 0.95, "together", 10_000),
]


def _share(instance: Instance, planned_on: Instance, noise: NoiseModel, p: float,
           correlation: Correlation, runs: int) -> tuple[int, str]:
    """Runs of `planned_on`'s plan under `instance`'s fit within its `deadline_time_s`."""
    plan = solve(planned_on, guarantee=p, noise=noise)
    assert plan.status == "optimal" and plan.deadline_time_s <= plan.deadline_s
    times = sampled_times(instance, plan.functions, plan.memory_mb, noise, correlation, runs,
                          np.random.default_rng(8))
    hits = int(np.count_nonzero(times <= plan.deadline_time_s))
    summary = (f"{plan.functions} × {plan.memory_mb} MB: {hits}/{runs} within "
               f"{plan.deadline_time_s:.3f} s (needed {least_hits(runs, p)}); sampled "
               f"{p}-quantile {np.sort(times)[math.ceil(p * runs) - 1]:.3f} s")
    return hits, summary


@pytest.mark.slow
@pytest.mark.parametrize(("make", "noise", "p", "correlation", "runs"),
                         [case[1:] for case in SAMPLED], ids=[case[0] for case in SAMPLED])
def test_a_profiled_plan_meets_its_deadline_over_the_fit_and_the_noise(
    make: Callable[[], Instance], noise: NoiseModel, p: float, correlation: Correlation,
    runs: int,
) -> None:
    """At least a share p of runs, the parameters drawn from the fit and the noise from the
    noise model, end within the plan's `deadline_time_s`.

    If the plan's true share is q ≥ p, its hits are Binomial(runs, q), stochastically no fewer
    than Binomial(runs, p): requiring `least_hits(runs, p)` fails a correct planner with
    probability ≤ 10⁻⁴ (the exact binomial tail), while a plan short by ~3% at p = 0.9 or
    ~0.6% at 0.99 fails it. The seed is fixed, so the verdict is deterministic.
    """
    instance = make()
    hits, summary = _share(instance, instance, noise, p, correlation, runs)
    assert hits >= least_hits(runs, p), summary


@pytest.mark.slow
@pytest.mark.parametrize(("make", "noise", "p", "correlation", "runs"),
                         [case[1:] for case in SAMPLED], ids=[case[0] for case in SAMPLED])
def test_the_sampler_fails_a_plan_that_ignores_the_fit(
    make: Callable[[], Instance], noise: NoiseModel, p: float, correlation: Correlation,
    runs: int,
) -> None:
    """The same check fails the plan solved as if the fitted values were exact (the instance
    without its `fit:` section): each case above can tell the guarantee from its absence."""
    instance = make()
    exact = dataclasses.replace(instance, fit=None)
    hits, summary = _share(instance, exact, noise, p, correlation, runs)
    assert hits < least_hits(runs, p), summary


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.9, 0.95])
def test_the_sampler_fails_a_plan_that_ignores_the_spread(p: float) -> None:
    """With the parameters' errors covered but not the trials' spread about the fit (the same
    `fit:` section without `iteration.run_spread`), the plan misses the guarantee: the
    spread is what a machine like this one adds, and the corner alone does not cover it."""
    instance = local_digits_spread()
    assert instance.fit is not None
    without = dataclasses.replace(instance, fit=dataclasses.replace(instance.fit, parameters=tuple(
        q for q in instance.fit.parameters if q.name != RUN_SPREAD)))
    hits, summary = _share(instance, without, NoiseModel(), p, "independent", 10_000)
    assert hits < least_hits(10_000, p), summary


def test_the_spread_stretches_the_iteration_time_and_says_so() -> None:
    """The corner's iteration time (compute and exchange, not start-up) is exp(z·σ) × the
    parameters' corner without the spread, at every plan; the note and JSON say by how much."""
    with_spread = solve(local_digits_spread(), guarantee=0.9)
    coverage = with_spread.fit_coverage
    assert coverage is not None
    assert coverage.run_spread == 0.13
    assert coverage.iteration_factor == pytest.approx(math.exp(1.2815516 * 0.13), rel=1e-6)
    assert "the iteration time × 1.18 for the trials' spread about the fit (σ = 13.0%)" in (
        coverage.note)
    assert json.loads(json.dumps(with_spread.to_dict()))["fit_coverage"]["run_spread"] == 0.13
    instance = local_digits_spread()
    assert instance.fit is not None
    without = dataclasses.replace(instance, fit=dataclasses.replace(instance.fit, parameters=tuple(
        q for q in instance.fit.parameters if q.name != RUN_SPREAD)))
    for n, m in ((1, 600), (2, 1000)):
        a = evaluate(instance, functions=n, memory_mb=m, guarantee=0.9).time_breakdown
        b = evaluate(without, functions=n, memory_mb=m, guarantee=0.9).time_breakdown
        for part in ("compute_s", "communication_s"):
            assert getattr(a, part) == pytest.approx(
                getattr(b, part) * coverage.iteration_factor, rel=1e-9), part
        assert a.startup_s == b.startup_s


@settings(max_examples=200, deadline=None)
@given(
    slope=st.floats(0.1, 20), intercept=st.floats(-500, 2000),
    slope_se=st.floats(0.0, 5), intercept_se=st.floats(0.0, 2000), rho=st.floats(-1, 1),
    p=st.sampled_from([0.6, 0.9, 0.99]), low=st.integers(128, 2000), width=st.integers(0, 8000),
)
def test_the_rate_chord_is_below_rs_quantile_everywhere_and_above_the_worst_case(
    slope: float, intercept: float, slope_se: float, intercept_se: float, rho: float,
    p: float, low: int, width: int,
) -> None:
    """Property: with ρ recorded, the corner's R_c(m) = slope_c·m + intercept_c is at or below
    R(m)'s (1 − p)-quantile R̂(m) − z·sd(m) under the joint normal (numpy, on every MB of the
    grid) and at or above the corner without ρ (ρ = 1, the moves one by one, where that is
    an instance), and its slope
    is ≥ 0, also where the moves one by one would take the slope below 0 and be refused.
    ρ = 1 recorded gives that very corner."""
    from scipy.stats import norm

    mapping = instance_mapping(local_digits())
    mapping["platform"] = {**mapping["platform"], "memory_mb": {
        "min": low, "max": low + width, "step": 1}}
    mapping["profile"]["rate"] = {"slope": slope, "intercept": intercept}
    if slope * (low + width) + intercept - norm.ppf(p) * (slope_se * (low + width)
                                                           + intercept_se) <= 0:
        return  # no corner: refused whether or not ρ is known (tested elsewhere)
    z = norm.ppf(p)
    one_by_one = slope - z * slope_se >= 0  # else the moves one by one are refused
    if not one_by_one and not (slope_se and intercept_se):
        return  # and no chord to replace them: refused (tested elsewhere)
    base = profiled(mapping, {"profile.rate.slope": slope_se or None,
                              "profile.rate.intercept": intercept_se or None})
    chord = evaluate(with_rho(base, rho), functions=1, memory_mb=low, guarantee=p)
    if one_by_one:
        worst = evaluate(with_rho(base, 1.0), functions=1, memory_mb=low, guarantee=p)
        unknown = evaluate(base, functions=1, memory_mb=low, guarantee=p)
        assert worst.fit_coverage is not None and unknown.fit_coverage is not None
        at_one = {m.name: m.corner for m in worst.fit_coverage.moved}
        # The chord's intercept is R_c(m) − slope_c·m: the rounding of R_c at the grid's top
        # (a few ulps of it) comes back multiplied by m, so it may differ by that much.
        top = low + width
        rounding = 16 * top * np.finfo(float).eps * (slope * top + abs(intercept))
        assert at_one == pytest.approx({m.name: m.corner for m in unknown.fit_coverage.moved},
                                       rel=1e-9, abs=max(1e-9, rounding))
    assert chord.fit_coverage is not None
    corner = {m.name: m.corner for m in chord.fit_coverage.moved}
    if set(corner) != {"profile.rate.slope", "profile.rate.intercept"}:
        return  # a zero standard error: that parameter is taken at its value
    z = norm.ppf(p)
    m = np.arange(low, low + width + 1, dtype=float)
    sd = np.sqrt(np.maximum((slope_se * m) ** 2 + 2 * rho * slope_se * intercept_se * m
                            + intercept_se**2, 0.0))
    quantile = slope * m + intercept - z * sd
    line = corner["profile.rate.slope"] * m + corner["profile.rate.intercept"]
    independent = (slope - z * slope_se) * m + intercept - z * intercept_se
    scale = np.maximum(np.abs(quantile), 1.0)
    assert corner["profile.rate.slope"] >= 0
    assert np.all(line <= quantile + 1e-9 * scale)
    assert not one_by_one or np.all(line >= independent - 1e-9 * scale)


def test_a_recorded_correlation_makes_a_profiled_plan_cheaper() -> None:
    """The joint fit's ρ = −0.95, recorded, narrows R(m) where the trials were (the errors
    cancel): the plan costs less than with ρ unknown, and still holds its guarantee (the
    sampled cases `*-rho-recorded` above); the note says how R was moved."""
    for make, rho_make in ((lambda_mobilenet, lambda_mobilenet_rho),
                           (local_digits, local_digits_rho)):
        unknown, recorded = solve(make(), guarantee=0.9), solve(rho_make(), guarantee=0.9)
        assert recorded.cost_usd < unknown.cost_usd, (recorded, unknown)
        assert recorded.fit_coverage is not None
        assert "R(m) at its quantile with their errors' correlation ρ = -0.950" in (
            recorded.fit_coverage.note)


def test_the_plan_says_what_it_covers() -> None:
    """`fit_coverage` lists the parameters moved (z_p standard errors the slow way) and those
    taken at their values, with why; diagnostics of the fit that are no model field are left
    out; the plan's JSON carries it."""
    plan = solve(local_digits(), guarantee=0.9)
    coverage = plan.fit_coverage
    assert coverage is not None and coverage.z == pytest.approx(1.2815516, rel=1e-6)
    moved = {m.name: m for m in coverage.moved}
    assert set(moved) == {
        "profile.rate.slope", "profile.rate.intercept", "profile.latency_s",
        "profile.startup.base_s", "profile.startup.per_function_s",
        "platform.restart_overhead_s",
    }
    slope = moved["profile.rate.slope"]
    assert (slope.value, slope.stderr) == (6.14511, 1.7)
    assert slope.corner == pytest.approx(6.14511 - coverage.z * 1.7, rel=1e-15)
    assert moved["profile.startup.base_s"].corner > moved["profile.startup.base_s"].value
    assert {(a.name, a.reason) for a in coverage.at_value} == {
        ("parameter_server.bandwidth_mbps", "not identified"),
        ("profile.rate.saturates_at_mb", "not identified"),
    }
    assert "6 fitted parameters planned 1.28 standard errors slower" in coverage.note
    assert "parameter_server.bandwidth_mbps (not identified)" in coverage.note
    payload = json.loads(json.dumps(plan.to_dict()))
    assert payload["fit_coverage"]["note"] == coverage.note
    assert payload["fit_coverage"]["moved"][0]["name"] == "profile.rate.slope"


# --- nothing changes without a fit or without a guarantee ---------------------------------

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED)
def test_an_instance_without_a_fit_plans_as_before(path: str) -> None:
    """No `fit:` section: no coverage and no new key in the plan's JSON; a `fit:` section
    that identifies nothing gives the very same figures (and says so)."""
    plain = load_instance(path)
    mapping = instance_mapping(plain)
    unidentified = profiled(mapping, {"profile.rate.slope": None,
                                      "parameter_server.bandwidth_mbps": None})
    for p in (0.9, 0.999):
        before = solve(plain, guarantee=p)
        assert before.fit_coverage is None and "fit_coverage" not in before.to_dict()
        after = solve(unidentified, guarantee=p)
        assert figures(after) == figures(before)
        assert after.fit_coverage is not None and not after.fit_coverage.moved
        assert "no fitted parameter has a standard error" in after.fit_coverage.note
    evaluated = evaluate(plain, functions=4, memory_mb=2048, guarantee=0.9)
    assert evaluated.fit_coverage is None and "fit_coverage" not in evaluated.to_dict()


@pytest.mark.parametrize("make", [lambda_mobilenet, local_digits])
def test_without_a_guarantee_the_fit_changes_nothing(make: Callable[[], Instance]) -> None:
    """The mean plan and `evaluate` without a guarantee are the model's at the fitted values,
    exactly as for the instance without its `fit:` section."""
    fitted = make()
    exact = dataclasses.replace(fitted, fit=None)
    plan = solve(fitted)
    assert plan.fit_coverage is None
    assert figures(plan) == figures(solve(exact))
    assert evaluate(fitted, functions=2, memory_mb=1000) == evaluate(
        exact, functions=2, memory_mb=1000)


@pytest.mark.parametrize("make", [lambda_mobilenet, local_digits])
def test_evaluate_checks_the_deadline_as_solve_does(make: Callable[[], Instance]) -> None:
    """`evaluate(..., guarantee=p)` of the plan gives the plan's own figures (the corner's),
    and a plan that meets the deadline only at the fitted values is reported late."""
    fitted = make()
    plan = solve(fitted, guarantee=0.9)
    checked = evaluate(fitted, functions=plan.functions, memory_mb=plan.memory_mb,
                       guarantee=0.9)
    assert figures(checked) == figures(plan)
    assert checked.feasible and checked.fit_coverage == plan.fit_coverage
    assert plan.fit_coverage is not None
    assert checked.to_dict()["fit_coverage"]["note"] == plan.fit_coverage.note
    exact = solve(dataclasses.replace(fitted, fit=None), guarantee=0.9)
    late = evaluate(fitted, functions=exact.functions, memory_mb=exact.memory_mb,
                    guarantee=0.9)
    assert not late.feasible and "past the deadline" in late.violations[-1]


def test_the_plan_keeps_the_fitted_instance() -> None:
    """`solved_from` is the instance as given (the fitted values and the `fit:` section): a
    launch predicts the run at the fitted values, below the corner's expected time, and the
    plan's JSON solves again to the same plan."""
    from lambdadnn.solver.prediction import predict_run

    fitted = lambda_mobilenet()
    plan = solve(fitted, guarantee=0.9)
    assert plan.solved_from == fitted
    predicted = predict_run(plan.solved_from, functions=plan.functions,
                            memory_mb=plan.memory_mb, local_batch=plan.local_batch,
                            iterations=plan.iterations).time_s
    at_fit = evaluate(fitted, functions=plan.functions, memory_mb=plan.memory_mb).time_s
    assert predicted == pytest.approx(at_fit, rel=1e-12) and predicted < plan.time_s
    again = solve(json.loads(json.dumps(plan.to_dict()))["instance_spec"], guarantee=0.9)
    assert figures(again) == figures(plan) and again.fit_coverage == plan.fit_coverage


def test_solve_many_plans_a_profiled_job_as_solve_does() -> None:
    """`solve_many` under a guarantee plans a profiled job at its fit's corner too: alone in
    an ample pool it gets `solve`'s plan, and two that share a pool pass its re-check (the
    model's figures for every chosen plan, by `evaluate` at the same guarantee)."""
    from lambdadnn import Submission, solve_many

    mapping = instance_mapping(lambda_mobilenet())
    plan = solve(lambda_mobilenet(), guarantee=0.9)
    alone = solve_many([Submission(mapping, 0.0, 1200.0)], concurrency=1000, guarantee=0.9)
    (job,) = alone.jobs
    assert (job.functions, job.memory_mb, job.time_s, job.cost_usd) == (
        plan.functions, plan.memory_mb, plan.deadline_time_s, plan.cost_usd)
    shared = solve_many([Submission(mapping, 0.0, 1200.0), Submission(mapping, 0.0, 1300.0)],
                        concurrency=20, guarantee=0.9)
    assert shared.status == "optimal"


# --- a larger standard error never gives a cheaper plan -----------------------------------

MOVED = [name for name in PROBLEM_FIELD if name != "parameter_server.function_bandwidth_mbps"]


@given(
    base=st.lists(st.floats(0.0, 2.0), min_size=len(MOVED), max_size=len(MOVED)),
    growth=st.lists(st.floats(1.0, 2.0), min_size=len(MOVED), max_size=len(MOVED)),
    p=st.sampled_from([0.6, 0.9, 0.99, 0.999]),
)
def test_a_larger_standard_error_never_gives_a_cheaper_plan(
    base: list[float], growth: list[float], p: float
) -> None:
    """Property: when every fitted parameter's standard error grows (or stays), the plan's
    cost does not fall, and a deadline that could not be met still cannot: the corner only
    moves the slow way, so every plan's time and cost grow and fewer plans meet."""
    fitted = lambda_mobilenet()
    small = solve(scaled(fitted, dict(zip(MOVED, base, strict=True))), guarantee=p)
    larger = [b * g for b, g in zip(base, growth, strict=True)]
    large = solve(scaled(fitted, dict(zip(MOVED, larger, strict=True))), guarantee=p)
    if large.status == "optimal":
        assert small.status == "optimal"
        assert small.cost_usd <= large.cost_usd * (1 + 1e-12)
    else:
        assert small.status == "optimal" or (
            small.deadline_time_s <= large.deadline_time_s * (1 + 1e-12))


# --- a corner that is no instance ---------------------------------------------------------

BAD_CORNERS = [
    ("rate", local_digits, {"profile.rate.intercept": 5e4 / 630},
     "`profile.rate.slope` = 6.14511 ± 1.7 and `profile.rate.intercept` = -209.025 ± 5e+04"
     " (the fit's standard errors): planned 1.28 standard errors slower for the guarantee, "
     "R(m) samples/s is ≤ 0 at every memory up to 1769 MB"),
    ("slope", local_digits, {"profile.rate.slope": 3.0},
     "`profile.rate.slope` = 6.14511 ± 5.1 (the fit's standard error): planned 1.28 standard "
     "errors slower for the guarantee, it is -0.390803, below 0, and a slope must be ≥ 0"),
    ("bandwidth", lambda_mobilenet, {"parameter_server.bandwidth_mbps": 20.0},
     "`parameter_server.bandwidth_mbps` = 1200 ± 1.2e+03 (the fit's standard error): planned "
     "1.28 standard errors slower for the guarantee, it is -337.862, not positive"),
    ("seconds", local_digits, {"profile.startup.base_s": 1e10},
     "`profile.startup.base_s` = 1.63635 ± 2.5e+09 (the fit's standard error): planned 1.28 "
     "standard errors slower for the guarantee, it is 3.20388e+09, above 1e+09 s"),
]


@pytest.mark.parametrize(("make", "factors", "message"), [case[1:] for case in BAD_CORNERS],
                         ids=[case[0] for case in BAD_CORNERS])
def test_a_corner_that_is_no_instance_is_one_clear_error(
    make: Callable[[], Instance], factors: dict[str, float], message: str
) -> None:
    """A standard error so large that the parameter, moved for the guarantee, leaves the
    model's range is refused in one line naming it, its value ± standard error and the fix,
    by `solve` and `evaluate` alike; a call that failed changes no later answer, and a lower
    guarantee (a smaller move) may still plan."""
    good = make()
    before = solve(good, guarantee=0.9)
    bad = scaled(good, factors)
    for _ in range(2):
        with pytest.raises(InstanceError) as raised:
            solve(bad, guarantee=0.9)
        text = str(raised.value)
        assert message in text and "\n" not in text, text
        assert text.endswith("profile longer: `lambdadnn profile --budget-s`")
        with pytest.raises(InstanceError, match="profile longer"):
            evaluate(bad, functions=1, memory_mb=1000, guarantee=0.9)
    assert figures(solve(good, guarantee=0.9)) == figures(before)
    assert solve(bad).fit_coverage is None  # the mean plan does not move the parameters


def test_the_command_line_shows_the_coverage_and_refuses_a_bad_corner(tmp_path: Path) -> None:
    """`lambdadnn solve --guarantee` prints the fit's coverage under the plan; a bad corner is
    one `error:` line and exit 1, never a traceback."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(instance_mapping(local_digits())))
    bad.write_text(yaml.safe_dump(instance_mapping(
        scaled(local_digits(), {"profile.rate.slope": 3.0}))))
    shown = CliRunner().invoke(main, ["solve", str(good), "--guarantee", "0.9"])
    assert shown.exit_code == 0, shown.stderr
    assert "fit uncertainty: 6 fitted parameters planned 1.28 standard errors" in shown.stdout
    refused = CliRunner().invoke(main, ["solve", str(bad), "--guarantee", "0.9"])
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1
    assert "`profile.rate.slope` = 6.14511 ± 5.1" in refused.stderr


@pytest.mark.parametrize(("value", "shown"), [(1.5, "1.5"), (-2, "-2"), ("high", "'high'"),
                                              (True, "True"), (math.nan, "nan")])
def test_a_bad_rate_correlation_is_one_line(value: object, shown: str) -> None:
    """`fit.rate_correlation` is a number from −1 to 1; anything else names the field."""
    mapping = instance_mapping(local_digits())
    mapping["fit"]["rate_correlation"] = value
    with pytest.raises(InstanceError, match=r"`fit\.rate_correlation` must be a number from "
                                            r"-1 to 1, got " + shown):
        load_instance(mapping)


def test_a_recorded_correlation_round_trips() -> None:
    """The instance's mapping keeps `rate_correlation`, and loads back to the same fit."""
    mapping = instance_mapping(local_digits_rho())
    assert mapping["fit"]["rate_correlation"] == JOINT_FIT_CORRELATION
    assert load_instance(mapping) == local_digits_rho()


@pytest.mark.parametrize("spread", [1000.0, 1e9])
def test_an_absurd_run_spread_is_one_line(spread: float) -> None:
    """A spread whose stretch would pass the time cap (× 10⁹) is refused in one line naming
    the field, not an overflow."""
    mapping = instance_mapping(dataclasses.replace(local_digits(), fit=None))
    instance = profiled(mapping, {"profile.rate.slope": 1.0}, spread=spread)
    with pytest.raises(InstanceError, match=r"`fit\.parameters\.iteration\.run_spread` = "):
        solve(instance, guarantee=0.9)
