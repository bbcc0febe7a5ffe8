"""The noise model: how real runs scatter around the analytical model.

Shared by the simulator (which draws from it) and by `solve(..., guarantee=p)` (which plans
against its quantiles), so both speak of the same distributions. Every random factor is a
lognormal with mean 1 (so the analytical model is the noise-free mean of each step) and the
given coefficient of variation; cold starts are lognormal in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import cache
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from ..inputs.numbers import integer, number
from .errors import NoiseError

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class NoiseModel:
    """Scatter of a real run; the defaults are the evaluation's (see docs/EVALUATION.md).

    compute_cv: per worker and iteration, the compute time's coefficient of variation.
    bandwidth_cv: per iteration, the communication time's (PS and network jitter).
    cold_start_median_s, cold_start_sigma: a cold start per invocation, lognormal seconds.
    failure_rate_per_hour: crashes per function-hour of running (0: none).
    checkpoint_every: iterations between checkpoints (one is also taken before each timeout).
    """

    compute_cv: float = 0.1
    bandwidth_cv: float = 0.05
    cold_start_median_s: float = 1.0
    cold_start_sigma: float = 0.5
    failure_rate_per_hour: float = 0.0
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        for field in fields(self):
            number(f"noise.{field.name}", getattr(self, field.name), error=NoiseError,
                   sign="non-negative")
        integer("noise.checkpoint_every", self.checkpoint_every, error=NoiseError)

    @classmethod
    def none(cls) -> NoiseModel:
        """No scatter at all: a run takes exactly what the model says (restarts aside)."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0)


def lognormal_sigma(cv: float) -> float:
    """σ of the lognormal with mean 1 and coefficient of variation `cv`."""
    return math.sqrt(math.log1p(cv * cv))


def draw_factors(rng: np.random.Generator, cv: float, size: tuple[int, ...] | int) -> Array:
    """Mean-1 lognormal factors with coefficient of variation `cv` (exactly 1 when cv = 0)."""
    if cv == 0:
        return np.ones(size)
    sigma = lognormal_sigma(cv)
    factors: Array = rng.lognormal(-sigma * sigma / 2, sigma, size)
    return factors


@cache
def _order_statistic_grid(sigma: float, points: int = 4001) -> tuple[Array, Array, Array]:
    """x, F(x), f(x)·dx of the lognormal(−σ²/2, σ) on a grid spanning its bulk and far tail."""
    normal = NormalDist()
    z = np.linspace(-8.0, 8.0, points)
    x = np.exp(-sigma * sigma / 2 + sigma * z)
    cdf = np.array([normal.cdf(v) for v in z])
    density_dz = np.exp(-z * z / 2) / math.sqrt(2 * math.pi) * (z[1] - z[0])
    return x, cdf, density_dz


def max_moments(functions: npt.ArrayLike, cv: float) -> tuple[Array, Array]:
    """Mean and variance of the largest of `functions` mean-1 lognormal factors (cv given).

    E[M_n] = ∫ x·n·F(x)^(n−1) dF(x), by quadrature in the normal variable: the straggler
    factor by which a synchronous iteration of n noisy workers outlasts one average worker.
    """
    n = np.asarray(functions, dtype=np.float64)
    if cv == 0:
        return np.ones_like(n), np.zeros_like(n)
    x, cdf, density_dz = _order_statistic_grid(lognormal_sigma(cv))
    flat = n.reshape(-1, 1)
    weights = flat * np.power(cdf, flat - 1) * density_dz
    weights /= weights.sum(axis=1, keepdims=True)
    mean = weights @ x
    variance = np.maximum(weights @ (x * x) - mean * mean, 0.0)
    return mean.reshape(n.shape), variance.reshape(n.shape)


def normal_quantile(probability: float) -> float:
    """z such that P(Z ≤ z) = probability for a standard normal Z."""
    return NormalDist().inv_cdf(probability)


@dataclass(frozen=True)
class PlanningNoise:
    """The noise terms `solve(..., guarantee=p)` plans against, tabulated for n = 1..N.

    A synchronous iteration lasts as long as its slowest worker, so the compute time's mean
    grows by E[M_n] (the straggler factor) and its variance is Var[M_n]; over k iterations
    the spread adds up, and the deadline is checked at z_p standard deviations above the
    mean. Each invocation round starts when the slowest of n cold starts is done: planned for
    at its exact p-quantile (skewed, so not at z_p standard deviations). Crashes (MODEL.md,
    "Failures") need the rate per function-second, the checkpoint interval, one re-invoked
    function's cold start (its mean, and under the guarantee its p-quantile but at least the
    mean) and the Poisson tail constant −ln(1 − p).
    """

    z: float
    straggler_mean: Array
    straggler_variance: Array
    bandwidth_variance: float
    cold_start_mean: Array
    cold_start_quantile: Array
    failure_rate_per_s: float
    checkpoint_every: float
    crash_cold_start_mean: float
    crash_cold_start_quantile: float
    crash_tail: float

    def terms(self, functions: Array) -> tuple[Array | float, ...]:
        """The terms in `models.equations.NOISE_SYMBOLS` order for these function counts."""
        index = np.asarray(functions, dtype=np.int64) - 1
        return (
            self.straggler_mean[index], self.straggler_variance[index],
            self.bandwidth_variance, self.z, self.cold_start_mean[index],
            self.cold_start_quantile[index], self.failure_rate_per_s, self.checkpoint_every,
            self.crash_cold_start_mean, self.crash_cold_start_quantile, self.crash_tail,
        )


@cache
def _straggler_table(cv: float, max_functions: int) -> tuple[Array, Array]:
    """`max_moments` for n = 1..N: the costly part of the planning terms, shared by every
    noise model with this compute scatter (a re-planning run varies only its crash rate)."""
    return max_moments(np.arange(1, max_functions + 1, dtype=np.float64), cv)


@cache
def _cold_start_table(
    median_s: float, sigma: float, guarantee: float, max_functions: int
) -> tuple[Array, Array]:
    """The mean and the p-quantile of the slowest of n cold starts, n = 1..N."""
    functions = np.arange(1, max_functions + 1, dtype=np.float64)
    cold_mean_one = median_s * math.exp(sigma * sigma / 2)
    cold_cv = math.sqrt(math.expm1(sigma * sigma))
    cold_mean = cold_mean_one * max_moments(functions, cold_cv)[0]
    # The slowest of n cold starts is within median·e^(σx) with probability Φ(x)^n: its
    # p-quantile in closed form (a normal approximation misses its long right tail).
    tail = -np.expm1(math.log(guarantee) / functions)  # 1 − p^(1/n), exact near p = 1
    cold_quantile = median_s * np.exp(-sigma * np.array([normal_quantile(t) for t in tail]))
    return cold_mean, cold_quantile


@cache
def planning_noise(noise: NoiseModel, guarantee: float, max_functions: int) -> PlanningNoise:
    """Tabulate the planning terms once per (noise, guarantee, n limit): reused across solves."""
    z = max(0.0, normal_quantile(guarantee))
    straggler_mean, straggler_variance = _straggler_table(noise.compute_cv, max_functions)
    sigma = noise.cold_start_sigma
    cold_mean, cold_quantile = _cold_start_table(
        noise.cold_start_median_s, sigma, guarantee, max_functions
    )
    cold_mean_one = noise.cold_start_median_s * math.exp(sigma * sigma / 2)
    crash_cold_quantile = max(cold_mean_one, noise.cold_start_median_s * math.exp(sigma * z))
    return PlanningNoise(
        z, straggler_mean, straggler_variance, noise.bandwidth_cv**2, cold_mean, cold_quantile,
        noise.failure_rate_per_hour / 3600, float(noise.checkpoint_every), cold_mean_one,
        crash_cold_quantile, -math.log1p(-guarantee),
    )
