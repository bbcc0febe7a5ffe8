"""The model's parameters, fitted by least squares to what trial runs measured.

Three fits, each to the figures of `launcher.timings` that the parameters govern:

- iterations: the mean iteration time of every run at the reference batch, against
  b/R(m) + 2·(d_m·n/B_p + λ) with R(m) = α1·m + β1 (relative residuals, so a run at 256 MB
  weighs as much as one at 1,769 MB); scipy's trust-region least squares, bounded to the
  values the instance loader accepts;
- start-up: every round's time to first iteration against s0 + s1·n (ordinary least squares);
- restart overhead: the mean gap between a round's last update and the next round's launch.

Standard errors come from the Jacobian at the optimum (σ²·(JᵀJ)⁻¹). What the design cannot
tell apart is said, not guessed: each estimate carries `identified` and a note.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from lambdadnn.launcher import LaunchError

if TYPE_CHECKING:
    from lambdadnn.launcher.spec import LaunchReport

__all__ = ["Estimate", "FittedModel", "Trial", "fit_trials"]

Array = npt.NDArray[np.float64]
_MIN_RUNS_PER_PARAMETER = 1  # beyond the parameters themselves: a residual to estimate σ from
# A bandwidth whose standard error exceeds half its value is not identified: its effect,
# 2·d_m·n / B_p, is then within two standard errors of none (delta method: SE(1/B)/(1/B) =
# SE(B)/B). Intercepts and latencies may truly be near 0, so no such test applies to them.
_SCALES = frozenset({"parameter_server.bandwidth_mbps"})


@dataclass(frozen=True)
class Trial:
    """One trial run, reduced to the figures the fits use (see `launcher.timings`)."""

    functions: int
    memory_mb: int
    local_batch: int
    iterations: int
    restarts: int
    startup_s: tuple[float, ...]
    restart_gap_s: tuple[float, ...]
    iteration_mean_s: float
    measured_time_s: float

    @classmethod
    def of(cls, report: LaunchReport) -> Trial:
        """The trial of a launch report; refuses one with no timed iteration."""
        timed = report.compute_s + report.exchange_s
        if timed <= 0 or not report.startup_s:
            raise LaunchError(
                f"the trial run of {report.functions} × {report.memory_mb} MB timed no "
                "iteration: the workers recorded no timings"
            )
        return cls(
            functions=report.functions, memory_mb=report.memory_mb,
            local_batch=report.local_batch, iterations=report.iterations,
            restarts=report.restarts, startup_s=report.startup_s,
            restart_gap_s=report.restart_gap_s, iteration_mean_s=timed / report.iterations,
            measured_time_s=report.measured_time_s,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": self.functions, "memory_mb": self.memory_mb,
            "local_batch": self.local_batch, "iterations": self.iterations,
            "restarts": self.restarts, "startup_s": [round(s, 4) for s in self.startup_s],
            "restart_gap_s": [round(s, 4) for s in self.restart_gap_s],
            "iteration_mean_s": round(self.iteration_mean_s, 7),
            "measured_time_s": round(self.measured_time_s, 4),
        }


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter: its value, standard error (None: not estimated), and whether the
    design identified it; `note` says how it was measured or why it could not be."""

    value: float
    stderr: float | None
    identified: bool
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": float(self.value),
                "stderr": None if self.stderr is None else float(self.stderr),
                "identified": self.identified, "note": self.note}


@dataclass(frozen=True)
class FittedModel:
    """Every parameter the trials determine, by instance field path, and the fit's residuals.

    `iteration_residuals` are the relative misses (fitted − measured) / measured of the mean
    iteration time of the trials at the reference batch (None for the others);
    `batch_split` gives, per memory size with two batch sizes, the per-sample and the
    per-iteration seconds of an iteration: the cost R(m) cannot see when the batch changes.
    """

    estimates: dict[str, Estimate]
    iteration_residuals: tuple[float | None, ...]
    batch_split: dict[str, Estimate]


def _covariance(jacobian: Array, sigma2: float) -> Array:
    """σ²·(JᵀJ)⁻¹, computed with J's columns scaled to unit length: the parameters differ by
    many orders of magnitude (a slope of 20 samples/s/MB beside a latency of 2 ms), and
    unscaled, the pseudo-inverse drops the small directions and reports far too small errors."""
    norms = np.linalg.norm(jacobian, axis=0)
    scale = np.where(norms > 0, 1 / np.where(norms > 0, norms, 1.0), 0.0)
    scaled = jacobian * scale
    return np.asarray(sigma2 * np.linalg.pinv(scaled.T @ scaled) * np.outer(scale, scale),
                      dtype=np.float64)


def _linear(x: Array, y: Array) -> tuple[Array, Array | None]:
    """Ordinary least squares y ≈ X·β with its standard errors (None without a spare point)."""
    beta = np.asarray(np.linalg.lstsq(x, y, rcond=None)[0], dtype=np.float64)
    spare = len(y) - x.shape[1]
    if spare < _MIN_RUNS_PER_PARAMETER:
        return beta, None
    covariance = _covariance(x, float(np.sum((y - x @ beta) ** 2)) / spare)
    return beta, np.sqrt(np.maximum(np.diag(covariance), 0.0)).astype(np.float64)


def _startup(trials: Sequence[Trial]) -> dict[str, Estimate]:
    """Every round's time to first iteration against s0 + s1·n; `fit_trials` has made sure
    the trials ran two or more n, so the two are told apart."""
    n = np.array([t.functions for t in trials for _ in t.startup_s], dtype=float)
    seconds = np.array([s for t in trials for s in t.startup_s])
    beta, se = _linear(np.column_stack([np.ones_like(n), n]), seconds)
    note = f"time to first iteration of {len(n)} rounds against n (least squares)"
    return {
        name: Estimate(max(0.0, float(beta[index])), None if se is None else float(se[index]),
                       True, note)
        for index, name in enumerate(("profile.startup.base_s",
                                      "profile.startup.per_function_s"))
    }


def _restart_overhead(trials: Sequence[Trial]) -> Estimate:
    gaps = np.array([g for t in trials for g in t.restart_gap_s])
    if gaps.size == 0:
        return Estimate(0.0, None, False, "no trial restarted: the overhead between rounds "
                                          "was not measured (0 assumed)")
    stderr = float(gaps.std(ddof=1) / math.sqrt(gaps.size)) if gaps.size > 1 else None
    return Estimate(float(gaps.mean()), stderr, True,
                    f"mean of {gaps.size} gaps between a round's last update and the next launch")


def _batch_split(trials: Sequence[Trial]) -> dict[str, Estimate]:
    """Per memory with single-function trials at two or more batches, τ = b·u + v: the
    per-sample seconds u and the per-iteration seconds v, which R(m) at one batch lumps."""
    split = {}
    for memory in sorted({t.memory_mb for t in trials if t.functions == 1}):
        same = [t for t in trials if t.functions == 1 and t.memory_mb == memory]
        batches = sorted({t.local_batch for t in same})
        if len(batches) < 2:
            continue
        x = np.array([[t.local_batch, 1.0] for t in same])
        beta, se = _linear(x, np.array([t.iteration_mean_s for t in same]))
        note = (f"iteration time = b·per_sample + per_iteration at {memory} MB, n = 1, from "
                f"batches {', '.join(map(str, batches))}; a diagnostic, not a model parameter")
        for index, part in enumerate(("per_sample_s", "per_iteration_s")):
            split[f"iteration.{part}@{memory}MB"] = Estimate(
                float(beta[index]), None if se is None else float(se[index]), True, note)
    return split


def _iterations(
    trials: Sequence[Trial], model_size_mb: float, bounds: dict[str, tuple[float, float]],
) -> tuple[dict[str, Estimate], Array]:
    """Fit α1, β1, B_p, λ to the mean iteration times (relative residuals)."""
    from scipy.optimize import least_squares

    n = np.array([t.functions for t in trials], dtype=float)
    m = np.array([t.memory_mb for t in trials], dtype=float)
    b = np.array([t.local_batch for t in trials], dtype=float)
    tau = np.array([t.iteration_mean_s for t in trials])
    names = ("profile.rate.slope", "profile.rate.intercept",
             "parameter_server.bandwidth_mbps", "profile.latency_s")

    def predicted(p: Array) -> Array:
        slope, intercept, bandwidth, latency = (float(x) for x in p)
        return np.asarray(b / (slope * m + intercept)
                          + 2 * (model_size_mb * n / bandwidth + latency), dtype=np.float64)

    def residuals(p: Array) -> Array:
        return np.asarray((predicted(p) - tau) / tau, dtype=np.float64)

    # Start where every rate is positive: all of an iteration's time spent computing.
    slope0 = float(np.median(b / (tau * m)))
    low = np.array([bounds[name][0] for name in names])
    high = np.array([bounds[name][1] for name in names])
    start = np.clip([slope0, 0.0, model_size_mb / float(tau.min()), float(tau.min()) / 20],
                    low + 1e-12, high - 1e-12)
    solution = least_squares(residuals, start, bounds=(low, high), x_scale="jac",
                             max_nfev=10_000)
    rates = solution.x[0] * m + solution.x[1]
    if not solution.success or np.any(rates <= 0):
        raise LaunchError(
            "the iteration times do not fit the model (no positive rate R(m) at every trial "
            f"memory; {solution.message}); profile again on an idle machine"
        )
    spare = len(tau) - len(names)
    covariance = None
    if spare >= _MIN_RUNS_PER_PARAMETER:
        sigma2 = float(np.sum(solution.fun**2)) / spare
        # dense: no sparse Jacobian was asked for
        covariance = _covariance(np.asarray(solution.jac, dtype=np.float64), sigma2)
    notes = (
        "R(m) = slope·m + intercept samples/s at the reference batch",
        "R(m) = slope·m + intercept samples/s at the reference batch",
        "shared exchange bandwidth: 2·d_m·n / B_p seconds per iteration",
        "per exchange, push or pull: the part of an iteration that grows with neither "
        "the batch, the memory nor n",
    )
    estimates = {}
    for index, (name, note) in enumerate(zip(names, notes, strict=True)):
        at_bound = solution.active_mask[index] != 0
        if at_bound or covariance is None:
            estimates[name] = Estimate(float(solution.x[index]), None, not at_bound, note + (
                "; not identified: it went to its bound, the trials show no effect of it"
                if at_bound else "; no spare trial to estimate its error"))
            continue
        stderr = float(math.sqrt(max(0.0, covariance[index, index])))
        value = float(solution.x[index])
        if name in _SCALES and 2 * stderr > value:
            estimates[name] = Estimate(value, None, False, note + (
                f"; not identified: its effect is within two standard errors of none (the "
                f"value {value:.3g} ± {stderr:.3g}), the trials cannot tell it from unbounded"))
            continue
        estimates[name] = Estimate(value, stderr, True, note)
    return estimates, solution.fun


def fit_trials(
    trials: Sequence[Trial], *, model_size_mb: float, reference_batch: int,
    bounds: dict[str, tuple[float, float]],
) -> FittedModel:
    """Fit every parameter the trials determine; `bounds` (by name) are the loader's ranges.

    Needs at least five trials at `reference_batch` over two or more memory sizes and
    numbers of functions; raises `LaunchError` (one line) otherwise.
    """
    reference = [t for t in trials if t.local_batch == reference_batch]
    if (len(reference) < 5 or len({t.memory_mb for t in reference}) < 2
            or len({t.functions for t in reference}) < 2):
        raise LaunchError(
            f"the fit needs at least 5 trial runs at the reference batch {reference_batch}, "
            "over 2 or more memory sizes and numbers of functions; raise `--budget-s`"
        )
    estimates, residuals = _iterations(reference, model_size_mb, bounds)
    estimates["parameter_server.function_bandwidth_mbps"] = Estimate(
        estimates["parameter_server.bandwidth_mbps"].value, None, False,
        "not identified: the exchange time is fitted as growing with n from n = 1, so no "
        "per-function limit below the shared bandwidth shows; set equal to it",
    )
    estimates.update(_startup(trials))
    estimates["platform.restart_overhead_s"] = _restart_overhead(trials)
    by_trial = iter(residuals)
    return FittedModel(
        estimates=estimates,
        iteration_residuals=tuple(float(next(by_trial)) if t.local_batch == reference_batch
                                  else None for t in trials),
        batch_split=_batch_split(trials),
    )
