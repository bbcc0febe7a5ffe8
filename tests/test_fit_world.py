"""The world fitter (benchmarks/fit_world.py): it recovers known straggler parameters from
synthetic draws (numpy as the oracle); the shipped world is what it gives on the shipped
records, and the engine running that world draws what the fit describes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.benchmarks.fit_world import (
    PERSISTENT_SLOWDOWN,
    RECORDS,
    WORLD,
    Run,
    fit_persistent,
    fit_records,
    fit_startup,
    fit_stragglers,
    hill_shape,
    load_runs,
    model_quantile,
    relative_log_compute,
    world_mapping,
)
from lambdadnn.simulator.world import JobSpec, Session, World


def multipliers(rng: np.random.Generator, size: int, cv: float, shape: float,
                share: float) -> np.ndarray:
    """The straggler model drawn directly: a lognormal of mean 1 and this cv, times a
    Pareto (type I, minimum 1) factor for a `share` of the draws."""
    sigma = math.sqrt(math.log1p(cv**2))
    body = rng.lognormal(-sigma**2 / 2, sigma, size)
    tail = np.where(rng.random(size) < share, 1.0 + rng.pareto(shape, size), 1.0)
    return body * tail


@st.composite
def identifiable(draw: st.DrawFn) -> tuple[float, float, float]:
    """(cv, shape, share) whose tail stands out of the body: the tail factor's mean log, 1/shape,
    at least 2.5 body cvs, and at least 3% of the draws."""
    shape = draw(st.floats(1.2, 5.0))
    return draw(st.floats(0.02, min(0.2, 0.4 / shape))), shape, draw(st.floats(0.03, 0.1))


@pytest.mark.slow
@settings(max_examples=20)
@given(parameters=identifiable(), seed=st.integers(0, 2**32 - 1))
def test_fit_recovers_the_straggler_parameters(parameters: tuple[float, float, float],
                                               seed: int) -> None:
    """Property: from 20,000 worker-iterations drawn by numpy from the model, maximum
    likelihood recovers the body's cv within 5%, the tail's shape within 35% and its share
    within 50% (each over four standard errors where the tail is least distinct)."""
    cv, shape, share = parameters
    z = np.log(multipliers(np.random.default_rng(seed), 20_000, cv, shape, share))
    fit = fit_stragglers(z)
    assert fit.cv == pytest.approx(cv, rel=0.05)
    assert fit.shape == pytest.approx(shape, rel=0.35)
    assert fit.share == pytest.approx(share, rel=0.50)


def test_hill_estimates_a_pure_pareto_tail() -> None:
    """Hill's estimator, the fit's check that assumes no body, finds a Pareto's shape."""
    draws = 1.0 + np.random.default_rng(5).pareto(2.5, 100_000)
    assert hill_shape(np.log(draws)) == pytest.approx(2.5, rel=0.1)


def test_fitted_quantiles_are_the_draws_quantiles() -> None:
    """`model_quantile` inverts the mixture's CDF: it matches numpy's quantiles of draws."""
    rng = np.random.default_rng(7)
    fit = fit_stragglers(np.log(multipliers(rng, 50_000, 0.1, 1.5, 0.05)))
    draws = multipliers(rng, 400_000, fit.cv, fit.shape, fit.share) * math.exp(
        fit.mu + fit.sigma**2 / 2)
    for q in (0.5, 0.9, 0.99):
        assert model_quantile(fit, q) == pytest.approx(np.quantile(draws, q), rel=0.02)


def _run(functions: int, compute_s: np.ndarray, startup_s: float = 3.0) -> Run:
    return Run(functions=functions, memory_mb=1769, repeat=0, startup_s=startup_s,
               load=(1.0, 1.0), compute_s=compute_s)


def test_persistent_finds_the_slow_ranks_only() -> None:
    """A rank 2x slower than the other ranks of its run is persistent; 10% is not; nor is a
    whole run that is slower (the machine's, not a rank's)."""
    rng = np.random.default_rng(3)
    base = rng.lognormal(math.log(0.01), 0.1, (500, 4))
    slow = fit_persistent([_run(4, base * np.array([1.0, 2.0, 1.0, 1.1]))])
    assert (slow.share, slow.ranks) == (0.25, 4)
    assert slow.slowdown == pytest.approx(2.0, rel=0.05)
    calm = fit_persistent([_run(4, base * np.array([1.0, 1.0, 1.0, 1.1])), _run(4, 3 * base)])
    assert (calm.share, calm.slowdown, calm.ranks) == (0.0, 0.0, 8)
    assert calm.largest < PERSISTENT_SLOWDOWN


def test_startup_is_the_least_squares_line() -> None:
    fit = fit_startup(np.array([1.0, 2.0, 4.0, 4.0]), np.array([2.5, 3.0, 4.0, 4.2]))
    slope, intercept = np.polyfit([1.0, 2.0, 4.0, 4.0], [2.5, 3.0, 4.0, 4.2], 1)
    assert fit.base_s == pytest.approx(intercept)
    assert fit.per_function_s == pytest.approx(slope)


def test_shipped_world_is_what_its_records_give() -> None:
    """instances/worlds/local-2core.yaml cannot drift from benchmarks/data/local_runs.json:
    re-fitting the records gives the shipped mapping, source lines included."""
    header, runs = load_runs(RECORDS)
    shipped = yaml.safe_load(Path(WORLD).read_text())
    assert shipped == world_mapping(header, runs, fit_records(runs, resamples=0))


def test_engine_draws_what_the_fit_describes() -> None:
    """The shipped world, run by the engine (`simulator.world`), draws compute that the fitter
    reads back as the shipped figures, and pays the fitted start-up: the YAML means to the
    engine what it meant to the fit."""
    world = World.load(WORLD)
    assert world.stragglers is not None and world.stragglers.tail is not None
    assert world.startup is not None
    job = JobSpec(
        model_mb=0.04, dataset_mb=0.0, samples=2_000_000, epochs=1, local_batch=128,
        max_global_batch=512, rate_slope=0.0, rate_intercept=13_000.0,
        rate_saturates_at_mb=math.inf, storage_slope=0.0, storage_intercept=100.0,
        storage_max_mbps=100.0, latency_s=0.0, startup_base_s=0.0, startup_per_function_s=0.0,
        ps_bandwidth_mbps=1200.0, function_bandwidth_mbps=84.0, ps_price_per_hour=0.0,
        price_per_gb_second=0.0, price_per_request=0.0, timeout_s=900.0, timeout_margin_s=30.0,
        restart_overhead_s=0.0,
    )
    segment = Session(world, job, (1,)).advance(4, 1769)
    fit = fit_stragglers(relative_log_compute(segment.compute_s[:-1]).ravel())
    assert fit.cv == pytest.approx(world.stragglers.cv, rel=0.05)
    assert fit.shape == pytest.approx(world.stragglers.tail.shape, rel=0.3)
    assert fit.share == pytest.approx(world.stragglers.tail.share, rel=0.4)
    startup = world.startup.base_s + 4 * world.startup.per_function_s
    assert segment.setup_s == pytest.approx(startup, abs=0.01)
