"""The model's parameters, fitted to what trial runs measured, and what the trials cannot tell.

Three fits, each to the figures of `launcher.timings` that the parameters govern:

- iterations: the mean iteration time of every run at the reference batch, against
  b/R(m) + 2·(d_m·n/B_p + λ) with R(m) = α1·m + β1 (relative residuals, so a run at 256 MB
  weighs as much as one at 1,769 MB); scipy's trust-region least squares with Huber's loss
  (`_huber_scale`: from the trials' own spread), bounded to the values the instance loader
  accepts: a trial that a burst of load slowed moves the fit by a bounded amount instead of
  by its square; and the trials' spread about the fit (`_run_spread`), which a guaranteed
  plan covers;
- start-up: every round's time to first iteration against s0 + s1·n (ordinary least squares);
- restart overhead: the mean gap between a round's last update and the next round's launch.

Standard errors: σ²·(JᵀJ)⁻¹ for least squares, Huber's correction of it for the robust loss
(`_robust_covariance`), each widened by Student's t for the spare trials it rests on
(`_widening`), so that a planner may take a parameter as normal around its value with that
error. A parameter is `identified` only when its standard error is finite and within what the
loader accepts (from at least `_MIN_RUNS_PER_PARAMETER` spare trials) and what it feeds is
known to within `_MAX_RELATIVE_SE` (one standard error, relative) everywhere on the grid the
instance will be solved on (`Grid`):

- the rate's slope and intercept: R(m), from their joint covariance, at every memory of the
  grid, where R(m) must also be positive;
- the start-up's base and per-function seconds: s0 + s1·n at every n of the grid;
- the bandwidth B_p: itself (the same as its part of the exchange, 2·d_m·n/B_p: delta method);
- the latency λ: the exchange time of one function, 2·(d_m/B_p + λ);
- the restart overhead o: what a restart of one function adds, o + s0 + s1.

Intercepts, latencies and overheads may truly be near 0, where their own relative error says
nothing; what they feed is what a plan's time rests on. A parameter that is not identified has
no standard error, and its note names the design points (`Point`) that would identify it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..solver.fit_uncertainty import RUN_SPREAD
from ..solver.instance import MAX_FIT_NUMBER
from . import LaunchError

if TYPE_CHECKING:
    from .spec import LaunchReport

__all__ = ["Estimate", "FittedModel", "Grid", "Point", "Trial", "fit_trials", "fittable"]

Array = npt.NDArray[np.float64]
# Beyond the parameters themselves, residuals to estimate σ from: from one, σ is itself unknown
# to a factor of several (s²/σ² is χ² with 1 degree of freedom: under 1/25 one time in 6), so
# the 5 trials of the smallest design measure R(m) but cannot say how well.
_MIN_RUNS_PER_PARAMETER = 2
_MIN_REFERENCE_TRIALS = 5  # at the reference batch: to fit the 4 iteration parameters at all
# A quantity known to ±25% (one standard error) is 4 standard errors from 0: drawn from the
# normal N(value, stderr) a plan is made to cover, it is not positive once in 30,000 draws,
# and its 95% interval (±50%) is still one a plan can be sized for. Looser, a rate or an
# exchange time can be drawn ≤ 0; the loaded machine's R intercept (±3e9) is far beyond it.
_MAX_RELATIVE_SE = 0.25
# Huber's loss turns from squares to absolute values at 1.345 σ (Huber's tuning: 95% as
# efficient as least squares on normal errors), σ the trials' own relative spread about the
# least-squares fit, estimated robustly (1.4826 × their median absolute deviation), but never
# below this scale: 1.345 × 4%, how far a trial misses the fit on an idle machine (the first
# trials of an earlier digits-cnn profile: 0.4–8.6%, 4.7% root mean square). A fixed 5% left
# all but three of 18 trials beyond it on this VM, whose runs repeat to ±10–15%, and so no
# error to judge R(m) by. Slowed more than the scale, a trial weighs less.
_HUBER_SCALE = 0.05
_HUBER_TUNING = 1.345
_MAD_TO_SD = 1.4826  # σ = 1.4826 × MAD for normal errors
_WIDEST_TRIAL = 4  # the most functions a suggested trial runs: the design's widest


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
class Point:
    """A trial that would help identify a parameter: n functions at about m MB, at the
    reference batch unless `local_batch` says otherwise, with restarts if `restarts`."""

    functions: int
    memory_mb: int
    local_batch: int | None = None
    restarts: bool = False

    def __str__(self) -> str:
        text = f"n = {self.functions} near {self.memory_mb:,} MB"
        if self.local_batch is not None:
            text += f" at batch {self.local_batch}"
        return text + (" with restarts" if self.restarts else "")


@dataclass(frozen=True)
class Grid:
    """Where the fitted instance will be solved: R(m) is used from `memory_mb[0]` (the lowest
    trial memory) to `memory_mb[1]` (where it saturates), plans run 1 to `functions` functions,
    and a trial at the lowest memory can run at most `trial_functions` of them."""

    memory_mb: tuple[int, int]
    functions: int
    trial_functions: int


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter: its value, standard error (None: not estimated, or not identified),
    whether the design identified it, a note on how it was measured or why it could not be,
    and the trials that would identify it (`needs`, not written: the note names them)."""

    value: float
    stderr: float | None
    identified: bool
    note: str
    needs: tuple[Point, ...] = ()

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
    rate_correlation: float | None = None  # of R's slope and intercept errors, when identified

    @property
    def missing(self) -> tuple[Point, ...]:
        """The trials that would identify the model's parameters not yet identified (the
        batch split is a diagnostic: it asks for none), each once, most needed first."""
        points = [p for e in self.estimates.values() if not e.identified for p in e.needs]
        return tuple(dict.fromkeys(points))


def _covariance(jacobian: Array, sigma2: float) -> Array:
    """σ²·(JᵀJ)⁻¹, computed with J's columns scaled to unit length: the parameters differ by
    many orders of magnitude (a slope of 20 samples/s/MB beside a latency of 2 ms), and
    unscaled, the pseudo-inverse drops the small directions and reports far too small errors."""
    norms = np.linalg.norm(jacobian, axis=0)
    scale = np.where(norms > 0, 1 / np.where(norms > 0, norms, 1.0), 0.0)
    scaled = jacobian * scale
    return np.asarray(sigma2 * np.linalg.pinv(scaled.T @ scaled) * np.outer(scale, scale),
                      dtype=np.float64)


def _widening(spare: int) -> float:
    """(t/z)² at 97.5% for `spare` degrees of freedom: a standard error from few spare trials
    so widened, the normal N(value, stderr) a planner draws from covers the truth at 95% as
    often as Student's t does (×2.2 for 2 spare, ×1.04 for 30)."""
    from scipy.stats import norm, t

    return float((t.ppf(0.975, spare) / norm.ppf(0.975)) ** 2)


def _huber_scale(residuals: Array) -> float:
    """Where Huber's loss turns: 1.345 × the residuals' robust σ, at least `_HUBER_SCALE`."""
    deviation = float(np.median(np.abs(residuals - np.median(residuals))))
    return max(_HUBER_SCALE, _HUBER_TUNING * _MAD_TO_SD * deviation)


def _robust_covariance(residuals: Array, jacobian: Array, scale: float) -> Array | None:
    """The covariance of a Huber fit: Huber's (1981, §7.6) K²·[Σψ(r)²/(n−p)]/[mean ψ'(r)]²·
    (JᵀJ)⁻¹ with K = 1 + (p/n)·var ψ'/(mean ψ')² (statsmodels' RLM "H1"), ψ(r) = r clipped to
    ±`scale` and J the unweighted Jacobian (scipy's `jac` is reweighted by the loss).
    With every residual inside the scale it is least squares' σ²·(JᵀJ)⁻¹; widened for the
    spare trials (`_widening`). None with too few spare trials, or no more trials than
    parameters inside the scale (`_no_error` says which): their spread cannot be told."""
    if _no_error(residuals, jacobian.shape[1], scale):
        return None
    n, p = jacobian.shape
    inside = np.abs(residuals) <= scale
    psi = np.clip(residuals, -scale, scale)
    share = float(inside.mean())  # mean ψ'; ψ' is 1 inside the scale, 0 outside
    correction = 1 + p / n * (1 - share) / share
    sigma2 = correction**2 * float(psi @ psi) / (n - p) / share**2
    return _covariance(jacobian, sigma2 * _widening(n - p))


def _no_error(residuals: Array, parameters: int, scale: float) -> str:
    """Why a Huber fit's residuals give no error estimate, or "" when they do."""
    if residuals.size - parameters < _MIN_RUNS_PER_PARAMETER:
        return f"fewer than {_MIN_RUNS_PER_PARAMETER} spare trials to estimate its error from"
    inside = int(np.sum(np.abs(residuals) <= scale))
    if inside <= parameters:
        return (f"only {inside} of {residuals.size} trials are within {scale:.0%} of the fit, "
                f"too few to estimate its error from")
    return ""


def _linear(x: Array, y: Array) -> tuple[Array, Array | None]:
    """Ordinary least squares y ≈ X·β with its covariance (None with fewer spare points than
    `_MIN_RUNS_PER_PARAMETER`)."""
    beta = np.asarray(np.linalg.lstsq(x, y, rcond=None)[0], dtype=np.float64)
    spare = len(y) - x.shape[1]
    if spare < _MIN_RUNS_PER_PARAMETER:
        return beta, None
    return beta, _covariance(x, float(np.sum((y - x @ beta) ** 2)) / spare * _widening(spare))


def _worst(values: Array, gradients: Array, covariance: Array) -> tuple[float, int]:
    """The largest relative standard error among quantities (delta method: each quantity's
    gradient row against `covariance`), infinite where a quantity is not positive; and where."""
    variance = np.einsum("ij,jk,ik->i", gradients, covariance, gradients)
    spread = np.sqrt(np.maximum(variance, 0.0))
    relative = np.full(values.shape, math.inf)
    np.divide(spread, values, out=relative, where=values > 0)
    where = int(np.argmax(relative))
    return float(relative[where]), where


def _listed(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _ask(points: Sequence[Point]) -> str:
    """The trials to add, as the end of a note: points that differ only in memory, or only in
    batch, share one phrase ("n = 1 near 442, 884 and 1,769 MB"), so that a note stays within
    the loader's `MAX_NOTE_CHARS` however large the numbers."""
    if not points:
        return "; no trial within this capacity would identify it"
    first = points[0]
    trials = "a trial" if len(points) == 1 else "trials"
    restarts = " with restarts" if first.restarts else ""
    if len(points) > 1 and all(replace(p, memory_mb=first.memory_mb) == first for p in points):
        batch = "" if first.local_batch is None else f" at batch {first.local_batch}"
        memories = _listed([f"{p.memory_mb:,}" for p in points])
        return f"; add {trials} at n = {first.functions} near {memories} MB{batch}{restarts}"
    if len(points) > 1 and all(replace(p, local_batch=first.local_batch) == first
                               for p in points):
        batches = _listed([str(p.local_batch) for p in points])
        return (f"; add {trials} at n = {first.functions} near {first.memory_mb:,} MB at "
                f"batches {batches}{restarts}")
    return f"; add {trials} at {_listed([str(p) for p in points])}"


def _relative(error: float) -> str:
    """A relative standard error as a note shows it: a percentage, or a factor when huge."""
    return f"{error:.1%}" if error < 10 else f"{error:.3g}×"


def _judged(
    names: Sequence[str], values: Array, stderrs: Sequence[float | None], fed: str,
    worst: tuple[float, str] | None, needs: tuple[Point, ...], note: str,
    held: Sequence[bool] = (), no_error: str = "",
) -> dict[str, Estimate]:
    """Estimates of parameters judged together on what they feed (`fed`): at most `worst[0]`
    relative standard error, at `worst[1]`, or None when no error could be estimated. A
    parameter `held` at its bound is not identified whatever the others are; `no_error` says
    why no error could be estimated, when it is not for too few spare trials."""
    known = ""
    if worst is None:
        reason = no_error or (
            f"fewer than {_MIN_RUNS_PER_PARAMETER} spare trials to estimate its error from")
    elif math.isinf(worst[0]):
        reason = f"{fed} is not positive at {worst[1]}"
    elif worst[0] > _MAX_RELATIVE_SE:
        place = f" at {worst[1]}" if worst[1] else ""
        reason = (f"{fed} has a relative standard error of {_relative(worst[0])}{place} (the "
                  f"limit is {_MAX_RELATIVE_SE:.0%})")
    else:
        reason, known = "", f"{note}; {fed} known to ±{_relative(worst[0])} at worst"
    estimates = {}
    for index, (name, value, stderr) in enumerate(zip(names, values, stderrs, strict=True)):
        why = ("it went to its bound, the trials show no effect of it"
               if index < len(held) and held[index] else reason)
        if not why and stderr is not None and stderr <= MAX_FIT_NUMBER:
            estimates[name] = Estimate(float(value), stderr, True, known)
            continue
        why = why or _unbounded(stderr)
        estimates[name] = Estimate(float(value), None, False,
                                   f"{note}; not identified: {why}{_ask(needs)}", needs)
    return estimates


def _unbounded(stderr: float | None) -> str:
    """Why a parameter is not identified although what it feeds is known: its own error is
    not finite, or beyond what the instance loader accepts (two parameters that trade off,
    their sum known and neither alone: trials on a loaded machine gave 3.4e13). A planner
    moves each parameter by its own error, so such an error could not be used anyway."""
    if stderr is None or not math.isfinite(stderr):
        return "its standard error is not finite"
    return (f"its own standard error, {stderr:.3g}, is beyond {MAX_FIT_NUMBER:.0e}: it trades "
            "off against another parameter and alone it is not known")


def _startup(trials: Sequence[Trial], grid: Grid) -> tuple[dict[str, Estimate], float, float]:
    """Every round's time to first iteration against s0 + s1·n, judged on s0 + s1·n at every n
    of the grid; `fit_trials` has made sure the trials ran two or more n, so the two are told
    apart. Also s0 + s1 and its variance: what the restart overhead is judged against."""
    n = np.array([t.functions for t in trials for _ in t.startup_s], dtype=float)
    seconds = np.array([s for t in trials for s in t.startup_s])
    beta, covariance = _linear(np.column_stack([np.ones_like(n), n]), seconds)
    plans = np.arange(1, grid.functions + 1, dtype=float)
    rows = np.column_stack([np.ones_like(plans), plans])
    worst = None
    stderrs: list[float | None] = [None, None]
    at_one_variance = math.inf
    if covariance is not None:
        relative, where = _worst(rows @ beta, rows, covariance)
        worst = (relative, f"n = {int(plans[where])}")
        stderrs = [float(math.sqrt(max(0.0, covariance[i, i]))) for i in range(2)]
        at_one_variance = float(rows[0] @ covariance @ rows[0])
    widest = min(grid.trial_functions, _WIDEST_TRIAL)
    needs = (Point(1, grid.memory_mb[1]), Point(widest, grid.memory_mb[0]))
    estimates = _judged(
        ("profile.startup.base_s", "profile.startup.per_function_s"),
        np.maximum(beta, 0.0), stderrs, "the start-up s0 + s1·n", worst,
        needs if widest > 1 else (), f"time to first iteration of {len(n)} rounds against n "
        f"(least squares), judged on n = 1 to {grid.functions:,}")
    return estimates, float(beta[0] + beta[1]), at_one_variance


def _restart_overhead(trials: Sequence[Trial], grid: Grid, startup: float,
                      startup_variance: float) -> Estimate:
    """The mean gap between rounds, judged on what a restart of one function adds: the gap
    and a new round's start-up, s0 + s1 (`startup`, with its variance)."""
    gaps = np.array([g for t in trials for g in t.restart_gap_s])
    needs = (Point(min(2, grid.trial_functions), grid.memory_mb[0], restarts=True),)
    if gaps.size == 0:
        return Estimate(0.0, None, False, "no trial restarted: the overhead between rounds "
                                          f"was not measured (0 assumed){_ask(needs)}", needs)
    value = float(gaps.mean())
    note = f"mean of {gaps.size} gaps between a round's last update and the next launch"
    if gaps.size < 2:
        return Estimate(value, None, False, f"{note}; not identified: one gap shows no spread "
                                            f"to estimate its error from{_ask(needs)}", needs)
    stderr = float(gaps.std(ddof=1) / math.sqrt(gaps.size) * math.sqrt(_widening(gaps.size - 1)))
    restart = value + startup
    if not math.isfinite(startup_variance):
        reason = "the start-up it adds to has no error estimate"
    elif restart <= 0:
        reason = f"a restart (the gap and a start-up) takes {restart:.3g} s, not more than 0"
    elif (relative := math.sqrt(stderr**2 + startup_variance) / restart) > _MAX_RELATIVE_SE:
        reason = (f"a restart (the gap and a start-up) has a relative standard error of "
                  f"{_relative(relative)} (the limit is {_MAX_RELATIVE_SE:.0%})")
    else:
        return Estimate(value, stderr, True, f"{note}; a restart (the gap and a start-up) "
                                             f"known to ±{_relative(relative)}")
    return Estimate(value, None, False, f"{note}; not identified: {reason}{_ask(needs)}", needs)


def _batch_split(trials: Sequence[Trial]) -> dict[str, Estimate]:
    """Per memory with single-function trials at two or more batches, τ = b·u + v: the
    per-sample seconds u and the per-iteration seconds v, which R(m) at one batch lumps;
    judged on τ at the batches measured."""
    split = {}
    for memory in sorted({t.memory_mb for t in trials if t.functions == 1}):
        same = [t for t in trials if t.functions == 1 and t.memory_mb == memory]
        batches = sorted({t.local_batch for t in same})
        if len(batches) < 2:
            continue
        x = np.array([[t.local_batch, 1.0] for t in same])
        beta, covariance = _linear(x, np.array([t.iteration_mean_s for t in same]))
        worst = None
        stderrs: list[float | None] = [None, None]
        if covariance is not None:
            rows = np.array([[b, 1.0] for b in batches])
            relative, where = _worst(rows @ beta, rows, covariance)
            worst = (relative, f"batch {batches[where]}")
            stderrs = [float(math.sqrt(max(0.0, covariance[i, i]))) for i in range(2)]
        note = (f"iteration time = b·per_sample + per_iteration at {memory} MB, n = 1, from "
                f"batches {', '.join(map(str, batches))}; a diagnostic, not a model parameter")
        needs = (Point(1, memory, batches[0]), Point(1, memory, batches[-1]))
        judged = _judged(("per_sample_s", "per_iteration_s"), beta, stderrs,
                         "the iteration time", worst, needs, note)
        split.update({f"iteration.{part}@{memory}MB": e for part, e in judged.items()})
    return split


def _iterations(
    trials: Sequence[Trial], model_size_mb: float, bounds: dict[str, tuple[float, float]],
    grid: Grid,
) -> tuple[dict[str, Estimate], Array, float | None]:
    """Fit α1, β1, B_p, λ to the mean iteration times (relative residuals, Huber's loss):
    their estimates, the residuals, and the correlation of α1's and β1's errors when both are
    identified (else None)."""
    from scipy.optimize import least_squares

    n = np.array([t.functions for t in trials], dtype=float)
    m = np.array([t.memory_mb for t in trials], dtype=float)
    b = np.array([t.local_batch for t in trials], dtype=float)
    tau = np.array([t.iteration_mean_s for t in trials])
    names = ("profile.rate.slope", "profile.rate.intercept",
             "parameter_server.bandwidth_mbps", "profile.latency_s")

    def residuals(p: Array) -> Array:
        slope, intercept, bandwidth, latency = (float(x) for x in p)
        predicted = b / (slope * m + intercept) + 2 * (model_size_mb * n / bandwidth + latency)
        return np.asarray((predicted - tau) / tau, dtype=np.float64)

    def jacobian(p: Array) -> Array:
        slope, intercept, bandwidth, _ = (float(x) for x in p)
        compute = -b / (slope * m + intercept) ** 2
        return np.asarray(np.column_stack([
            compute * m, compute, -2 * model_size_mb * n / bandwidth**2, np.full_like(n, 2.0),
        ]) / tau[:, None], dtype=np.float64)

    # Start where every rate is positive: all of an iteration's time spent computing.
    slope0 = float(np.median(b / (tau * m)))
    low = np.array([bounds[name][0] for name in names])
    high = np.array([bounds[name][1] for name in names])
    start = np.clip([slope0, 0.0, model_size_mb / float(tau.min()), float(tau.min()) / 20],
                    low + 1e-12, high - 1e-12)
    # Huber's loss from the least-squares optimum: started far from it, every trial is beyond
    # the scale, the loss is all absolute values, and the search can wander off to R → ∞.
    plain = least_squares(residuals, start, jac=jacobian, bounds=(low, high), x_scale="jac",
                          max_nfev=10_000)
    scale = _huber_scale(plain.fun)
    solution = least_squares(residuals, plain.x, jac=jacobian, bounds=(low, high),
                             x_scale="jac", loss="huber", f_scale=scale, max_nfev=10_000)
    x = np.asarray(solution.x, dtype=np.float64)
    if not solution.success or np.any(x[0] * m + x[1] <= 0):
        raise LaunchError(
            "the iteration times do not fit the model (no positive rate R(m) at every trial "
            f"memory; {solution.message}); profile again on an idle machine"
        )
    # Every parameter's column, also of one at its bound: held there, it would make the others
    # look known exactly as far as they trade off against it (a latency held at 0 while R's
    # intercept absorbs it, from trials at nearly one memory, left R "known to ±2%" and 3× off).
    covariance = _robust_covariance(solution.fun, jacobian(x), scale)
    no_error = _no_error(solution.fun, len(names), scale)
    lowest, highest = grid.memory_mb
    widest = min(grid.trial_functions, _WIDEST_TRIAL)
    # R(m) and a constant part of the iteration (λ) are told apart by R's curvature in m: the
    # two ends of the grid and its geometric middle, not the ends alone.
    rate_needs = (Point(1, lowest), Point(1, round(math.sqrt(lowest * highest))),
                  Point(1, highest))
    exchange_needs = (Point(widest, lowest), Point(1, lowest)) if widest > 1 else ()
    memories = np.arange(lowest, highest + 1, dtype=float)
    held = list(solution.active_mask != 0)  # at a bound: not estimated

    def judge(parameters: slice, values: Array, rows: Array, at: Sequence[str]
              ) -> tuple[float, str] | None:
        """The worst relative error of quantities with gradient `rows` in `parameters`."""
        if covariance is None:
            return None
        relative, where = _worst(values, rows, covariance[parameters, parameters])
        return relative, at[where]

    stderrs = [None if covariance is None else float(math.sqrt(max(0.0, covariance[i, i])))
               for i in range(len(names))]
    rate = judge(slice(0, 2), x[0] * memories + x[1],
                 np.column_stack([memories, np.ones_like(memories)]),
                 [f"{int(mb):,} MB" for mb in memories])
    rate_note = (f"R(m) = slope·m + intercept samples/s at the reference batch, judged on R(m) "
                 f"at {lowest:,}–{highest:,} MB")
    # The exchange of one function, 2·(d_m/B + λ), and its gradient in (B, λ).
    exchange = judge(slice(2, 4), np.array([2 * (model_size_mb / x[2] + x[3])]),
                     np.array([[-2 * model_size_mb / x[2] ** 2, 2.0]]), ["n = 1"])
    bandwidth = judge(slice(2, 3), x[2:3], np.ones((1, 1)), [""])
    estimates = {
        **_judged(names[:2], x[:2], stderrs[:2], "R(m)", rate, rate_needs, rate_note,
                  held[:2], no_error),
        **_judged(names[2:3], x[2:3], stderrs[2:3], "B_p", bandwidth, exchange_needs,
                  "shared exchange bandwidth: 2·d_m·n / B_p seconds per iteration", held[2:3],
                  no_error),
        **_judged(names[3:], x[3:], stderrs[3:], "the exchange of one function", exchange,
                  exchange_needs, "per exchange, push or pull: the part of an iteration that "
                  "grows with neither the batch, the memory nor n", held[3:], no_error),
    }
    correlation = None
    if covariance is not None and all(estimates[name].identified for name in names[:2]) and (
            covariance[0, 0] * covariance[1, 1] > 0):
        # `fit.rate_correlation`: a guaranteed plan bounds R(m) with it (fit_uncertainty)
        correlation = float(np.clip(
            covariance[0, 1] / math.sqrt(covariance[0, 0] * covariance[1, 1]), -1.0, 1.0))
        for name in names[:2]:
            estimates[name] = replace(estimates[name], note=(
                f"{estimates[name].note}; the two errors correlate, ρ = {correlation:.4f}"))
    return estimates, np.asarray(solution.fun, dtype=np.float64), correlation


def fittable(trials: Sequence[Trial], reference_batch: int) -> bool:
    """Whether the trials are enough for `fit_trials`: at least five at `reference_batch`,
    over two or more memory sizes and numbers of functions."""
    reference = [t for t in trials if t.local_batch == reference_batch]
    return (len(reference) >= _MIN_REFERENCE_TRIALS and len({t.memory_mb for t in reference}) >= 2
            and len({t.functions for t in reference}) >= 2)


def _run_spread(residuals: Array, parameters: int) -> Estimate:
    """How far a trial's mean iteration time lands from the fitted model, as the sd of
    ln(measured / fitted): 1.4826 × the median |ln| (about 0, so a bias counts too; a
    trial a burst slowed counts once, not by its square), × √(n/(n − p)) for what the fit
    absorbed. It is the machine's run-to-run spread and the model's misfit together: a plan
    with a guarantee covers it (`solver.fit_uncertainty`, MODEL.md "Fit uncertainty")."""
    misses = np.log1p(residuals)  # the residuals are (fitted − measured) / measured
    spare = misses.size - parameters
    note = (f"ln(measured / fitted iteration time) of {misses.size} trials: this machine's "
            "run-to-run spread and the model's misfit, which a guaranteed plan covers")
    if spare < _MIN_RUNS_PER_PARAMETER:
        return Estimate(0.0, None, False, f"{note}; not identified: fewer than "
                        f"{_MIN_RUNS_PER_PARAMETER} spare trials to estimate it from")
    value = _MAD_TO_SD * float(np.median(np.abs(misses))) * math.sqrt(misses.size / spare)
    # the median's standard error: 1.65× the sd's (a median is 37% as efficient), σ/√(2ν)
    return Estimate(value, 1.65 * value / math.sqrt(2 * spare), True, f"{note}; σ = {value:.1%}")


def fit_trials(
    trials: Sequence[Trial], *, model_size_mb: float, reference_batch: int,
    bounds: dict[str, tuple[float, float]], grid: Grid,
) -> FittedModel:
    """Fit every parameter the trials determine; `bounds` (by name) are the loader's ranges,
    `grid` where the instance will be solved (what identification is judged on).

    Raises `LaunchError` (one line) unless the trials are `fittable`.
    """
    if not fittable(trials, reference_batch):
        raise LaunchError(
            f"the fit needs at least {_MIN_REFERENCE_TRIALS} trial runs at the reference batch "
            f"{reference_batch}, over 2 or more memory sizes and numbers of functions; raise "
            "`--budget-s`"
        )
    reference = [t for t in trials if t.local_batch == reference_batch]
    estimates, residuals, correlation = _iterations(reference, model_size_mb, bounds, grid)
    estimates["parameter_server.function_bandwidth_mbps"] = Estimate(
        estimates["parameter_server.bandwidth_mbps"].value, None, False,
        "not identified: the exchange time is fitted as growing with n from n = 1, so no "
        "per-function limit below the shared bandwidth shows; set equal to it",
    )
    estimates[RUN_SPREAD] = _run_spread(residuals, parameters=4)
    startup, at_one, at_one_variance = _startup(trials, grid)
    estimates.update(startup)
    estimates["platform.restart_overhead_s"] = _restart_overhead(trials, grid, at_one,
                                                                 at_one_variance)
    by_trial = iter(residuals)
    return FittedModel(
        estimates=estimates,
        iteration_residuals=tuple(float(next(by_trial)) if t.local_batch == reference_batch
                                  else None for t in trials),
        batch_split=_batch_split(trials),
        rate_correlation=correlation,
    )
