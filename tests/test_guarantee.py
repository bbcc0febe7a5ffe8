"""`solve(..., guarantee=p)`: planning against the p-quantile of the noisy training time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lambdadnn import InstanceError, solve
from lambdadnn.models.noise import NoiseModel, draw_factors, max_moments, planning_noise

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))


def test_straggler_moments_match_sampling() -> None:
    """The quadrature for the slowest of n workers agrees with numpy sampling."""
    rng = np.random.default_rng(7)
    for n in (1, 4, 32):
        mean, variance = max_moments(n, 0.1)
        sample = draw_factors(rng, 0.1, (200_000, n)).max(axis=1)
        assert float(mean) == pytest.approx(sample.mean(), rel=2e-3)
        assert float(variance) == pytest.approx(sample.var(), rel=5e-2)


def test_more_workers_straggle_more() -> None:
    mean, _ = max_moments(np.arange(1, 200), 0.1)
    assert np.all(np.diff(mean) > 0) and mean[0] == pytest.approx(1.0)


@pytest.mark.parametrize("path", SHIPPED)
def test_guaranteed_plans_cost_more_and_keep_a_margin(path: str) -> None:
    exact = solve(path)
    guaranteed = solve(path, guarantee=0.999)
    assert guaranteed.status == "optimal"
    assert guaranteed.deadline_time_s <= guaranteed.deadline_s
    assert guaranteed.deadline_time_s > guaranteed.time_s
    assert guaranteed.cost_usd >= exact.cost_usd
    assert guaranteed.time_breakdown.cold_start_s > 0
    looser = solve(path, guarantee=0.9)
    assert looser.cost_usd <= guaranteed.cost_usd


@pytest.mark.parametrize("path", SHIPPED)
def test_no_noise_gives_the_exact_plan(path: str) -> None:
    exact = solve(path)
    quiet = solve(path, guarantee=0.999, noise=NoiseModel.none())
    assert (quiet.functions, quiet.memory_mb) == (exact.functions, exact.memory_mb)
    assert quiet.cost_usd == pytest.approx(exact.cost_usd, rel=1e-12)


def test_planning_terms_are_tabulated_once() -> None:
    noise = NoiseModel()
    assert planning_noise(noise, 0.99, 64) is planning_noise(NoiseModel(), 0.99, 64)


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True])
def test_guarantee_must_be_a_probability(bad: float) -> None:
    with pytest.raises(InstanceError, match="`guarantee`"):
        solve(SHIPPED[0], guarantee=bad)


def test_noise_without_guarantee_is_refused() -> None:
    with pytest.raises(InstanceError, match="`noise`"):
        solve(SHIPPED[0], noise=NoiseModel())
