"""Adaptive execution: learn the whole model as the run trains, and re-plan the rest of it.

A static plan is optimal for the model and meets its deadline only while the model is right.
A run, though, measures itself: every iteration says how long each worker computed and how
long the exchange took, every round how long it took to start. The `Controller` keeps a
posterior over the model's parameters and, at each check, decides under it.

* **Belief** (`Belief`), each part a conjugate update, so a test can check it against numpy:
  - the rate as a function of memory (`RatePosterior`): the log of measured / believed
    compute time at memory m is c + g_s(m), where g_s is what a rate that stops growing at
    memory s loses against the profile's R(m) (s = ∞: the profile's shape holds). A mixture
    over `SATURATION_POINTS` values of s and s = ∞ (prior weight `PRIOR_UNSATURATED`), each
    with a normal posterior on c: from the profile's fit (its relative error of R(m₀) with
    `DRIFT_SD` on top) or `PRIOR_SD` without one. A leg at one memory pins c + g_s there for
    every s; other memories stay as uncertain as the saturation hypotheses disagree on them,
    and a leg at a second memory tells saturation from a uniform slowdown;
  - the exchange as bandwidth apart from latency: measured = k_bw·(believed transfer) +
    k_lat·(believed latency) per iteration, a normal prior on (k_bw, k_lat) around (1, 1);
  - start-up per round: a normal posterior on log(measured / believed set-up) of the rounds
    a leg began (cold starts, start-up, data and checkpoint loads), which scales the
    start-up, data load and restart of every new plan;
  - stragglers: the compute CV is the larger of the workers' spread within an iteration and
    the CV whose slowest-of-n mean matches the measured slowest-of-n (the tail); a leg with
    `STRAGGLER_SAMPLES` workers' times replaces the belief's CV, a smaller one only raises it;
  - crashes: a Gamma posterior on the rate, the belief's rate held with `PRIOR_EXPOSURE_H`
    function-hours of evidence.
  Every observation carries its own scatter (measurement noise and the run's jitter): a short
  noisy leg moves the posterior little.
* **P(meet)** of a plan for the rest is Φ((time left − μ)/σ): μ its expected time at the
  posterior mean, σ² the noise model's variance (from `solve`'s quantile at the guarantee) plus
  the parameters' (each term's time × its posterior standard deviation, the delta method).
  A new plan "meets" at the guarantee p when μ + z_p·σ ≤ the time left; the plan under way is
  judged with the parameters at their mean (a run the evidence says is on track is not
  re-provisioned for what the evidence does not yet know; a switch carries that margin).
* **Decisions** (all priced: a new plan pays the restart, a fresh start-up and the data load):
  - on track (the plan under way meets): carry on, or switch to a plan that meets and saves at
    least `MIN_SAVING` of the remaining cost and `MIN_RUN_SAVING` of the whole run's (`ahead`);
  - behind, but at the posterior mean still in time and a plan that meets would remain after
    one more leg: carry on and look again (a noisy check is not a reason to pay a switch);
  - behind: switch to the cheapest plan that meets; if none does, to the cheapest of those
    within `MIN_GAIN` of the likeliest to meet, when it raises P(meet) by at least
    `MIN_GAIN`; when no plan has even `HOPELESS`, carry on (the cheapest way to finish) and
    say so, with the best achievable finish.
  A switch brings the next check forward (`FIRST_CHECK`): a plan at a memory the run has not
  measured is a priced probe, and its speed is evidence soon. The search for a new plan
  scans `SCAN_MEMORIES` memory sizes (and every size the run measured), each over every n at
  once with the rate at its slow end there (posterior mean + z_p standard deviations) and the
  noise's quantile on top, then assesses the candidates by P(meet) and trims the chosen
  plan's n while it still meets. It is a search under the posterior, not `solve()`'s proof.

Every decision is kept with its reason, P(meet), and a summary of the posterior (`Decision`).
The controller imports no launcher or simulator code: the simulator, the independent world
and both launcher backends feed it `Observation`s and follow its decisions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..inputs.files import brief
from ..inputs.numbers import integer, number
from ..models import performance as model
from ..models.noise import NoiseModel, max_moments, normal_quantile, planning_noise
from ..models.prices import price_per_second
from .errors import InstanceError
from .fit_uncertainty import run_spread
from .instance import MAX_INTEGER, Instance, StartupProfile
from .instance_yaml import load_instance
from .pipeline import InstanceLike, evaluate, solve
from .plan import Evaluation

__all__ = ["Belief", "Controller", "Decision", "Observation", "Planned", "remaining_instance"]

PRIOR_SD = 1.0  # without a fit, the rate may be off by a factor e^±1 before any evidence
DRIFT_SD = 0.2  # with a fit: how far a run's speed may drift from the profile's (chosen)
SATURATION_POINTS = 24  # memories at which the rate may stop growing, from the grid's least up
KEEP_PRIOR = 1e-3  # the prior's share kept in the saturation weights after each update
PRIOR_UNSATURATED = 0.8  # the prior's weight on the profile's shape holding everywhere (chosen)
PRIOR_EXCHANGE_SD = 1.0  # k_bw and k_lat: linear factors on the believed exchange parts
PRIOR_EXPOSURE_H = 10.0  # function-hours of evidence the belief's crash rate counts for
MIN_RATIO = 1e-3  # measured / believed set-up is clipped to [MIN_RATIO, 1/MIN_RATIO]
MODEL_SD = 0.01  # the least uncertainty left in a measured factor: the run's speed drifts
MIN_SAVING = 0.05  # a cheaper plan must save this share of the remaining cost to be taken,
MIN_RUN_SAVING = 0.03  # and this share of the whole run's: a re-provisioning risks a cold start
MIN_GAIN = 0.05  # a switch that still misses must raise P(meet) by this much to be paid for
HOPELESS = 0.01  # below this P(meet) for every plan, the job is told it cannot make it
CV_STEP = 0.01  # a measured compute CV is rounded up to this step (planning tables are cached)
STRAGGLER_SAMPLES = 50  # workers' times a leg needs before its scatter replaces the belief's
MAX_CV = 2.0  # the largest compute CV the tail search considers
FIRST_CHECK = 0.03  # the first check, and the first after a switch: after this share ...
CHECK_EVERY = 0.10  # ... then after each further share of the iterations
MIN_LEG_ITERATIONS = 3  # never check after fewer iterations than this
FASTEST_SLACK = 0.02  # when no n meets, the fewest functions within this of the fastest time
SCAN_MEMORIES = 16  # memory sizes a search scans (with the plan's own and those the run ran)

Action = Literal["start", "continue", "scale-up", "scale-down", "switch"]
Array = npt.NDArray[np.float64]
_NORMAL = NormalDist()


@dataclass(frozen=True, eq=False)
class Observation:
    """What one leg of a run (since the last check) measured at its plan `functions` × `memory_mb`.

    `compute_s`: iterations × workers seconds each worker spent on its gradient;
    `communication_s`: per iteration, the exchange itself (the push and the pull, without
    waiting for a straggler: on a worker's clock, the least exchange time of that iteration);
    `failures`: crashes in the leg; `exposure_s`: function-seconds run in it (what a crash
    rate per function-hour is counted against); `setup_s`: seconds spent starting the
    `rounds` invocation rounds the leg began (cold starts, start-up, data and checkpoint
    loads; 0 and 0 when the executor does not measure them).
    """

    functions: int
    memory_mb: int
    compute_s: Array
    communication_s: Array
    failures: int = 0
    exposure_s: float = 0.0
    setup_s: float = 0.0
    rounds: int = 0

    def __post_init__(self) -> None:
        compute = np.asarray(self.compute_s, dtype=np.float64)
        communication = np.asarray(self.communication_s, dtype=np.float64).ravel()
        if compute.ndim != 2 or compute.shape[0] != communication.size:
            raise InstanceError(
                f"`compute_s` must be iterations × workers and `communication_s` one value per "
                f"iteration; got shapes {compute.shape} and {communication.shape}"
            )
        for name, values in (("compute_s", compute), ("communication_s", communication)):
            if not np.all(np.isfinite(values) & (values >= 0)):
                raise InstanceError(f"`{name}` must hold finite seconds ≥ 0")
        for name in ("failures", "rounds"):
            integer(name, getattr(self, name), error=InstanceError, minimum=0, floats=False)
        for name in ("exposure_s", "setup_s"):
            number(name, getattr(self, name), error=InstanceError, sign="non-negative",
                   need="seconds ≥ 0")
        object.__setattr__(self, "compute_s", compute)
        object.__setattr__(self, "communication_s", communication)

    @property
    def iterations(self) -> int:
        return int(self.compute_s.shape[0])


def mean_observation(ratios: Array, floor_sd: float = MODEL_SD) -> tuple[float, float] | None:
    """One leg's per-iteration ratios of measured to believed time as one observation: their
    arithmetic mean (a run's time is a sum of iterations, so its factor is the mean ratio, not
    the geometric one, which heavy tails pull below it) and the delta method's variance of
    its log, var(r)/(N·mean²), at least `floor_sd`²; one ratio alone shows no scatter and
    counts as weakly as the prior. None when no ratio is usable."""
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.size == 0:
        return None
    mean_ratio = float(ratios.mean())
    scatter = (float(np.var(ratios, ddof=1)) / (ratios.size * mean_ratio**2)
               if ratios.size > 1 else PRIOR_SD**2)
    return mean_ratio, max(scatter, floor_sd**2)


@dataclass(frozen=True, eq=False)
class Gaussian:
    """A normal posterior on the weights w of a linear-Gaussian model y = x·w + ε."""

    mean: Array
    covariance: Array
    evidence: int = 0  # iterations it has seen

    @classmethod
    def prior(cls, mean: tuple[float, ...], sd: tuple[float, ...]) -> Gaussian:
        return cls(np.array(mean, dtype=np.float64), np.diag(np.square(sd)).astype(np.float64))

    def update(self, x: Array, y: float, variance: float, iterations: int) -> Gaussian:
        """Condition on one observation y = x·w + ε, ε ~ N(0, variance) (a rank-one update)."""
        gain = self.covariance @ x / (float(x @ self.covariance @ x) + variance)
        mean = self.mean + gain * (y - float(x @ self.mean))
        covariance = self.covariance - np.outer(gain, x @ self.covariance)
        return Gaussian(mean, (covariance + covariance.T) / 2, self.evidence + iterations)

    def predict(self, x: Array) -> tuple[float, float]:
        """The mean and standard deviation of x·w."""
        return float(x @ self.mean), math.sqrt(max(float(x @ self.covariance @ x), 0.0))


@dataclass(frozen=True, eq=False)
class RatePosterior:
    """The compute time's log-factor over memory, measured / believed: c + g_s(m), where
    g_s(m) = ln(R(m) / R(min(m, s))) ≥ 0 is what a rate that stops growing at memory s loses
    against the profile's R(m) (s = ∞: the profile's shape holds). A mixture over the
    saturation points `saturation_mb` (weights `weights`, the prior's `PRIOR_UNSATURATED` on
    s = ∞) of normal posteriors on c (`means`, `sds`): conjugate for each s, each weighted by
    the evidence's marginal likelihood under it."""

    slope: float  # the profile's R(m) = slope·m + intercept
    intercept: float
    saturation_mb: Array
    weights: Array
    means: Array
    sds: Array
    evidence: int = 0
    prior_weights: Array = field(default_factory=lambda: np.ones(1))

    @classmethod
    def prior(cls, slope: float, intercept: float, low_mb: float, high_mb: float,
              sd: float) -> RatePosterior:
        points = np.append(np.geomspace(low_mb, high_mb, SATURATION_POINTS), math.inf)
        # a saturation point where the profile's own R is not positive is no hypothesis
        possible = (slope * np.minimum(points, high_mb) + intercept) > 0
        weights = np.where(possible, (1 - PRIOR_UNSATURATED) / max(1, int(possible[:-1].sum())),
                           0.0)
        weights[-1] = PRIOR_UNSATURATED
        weights /= weights.sum()
        return cls(slope, intercept, points, weights, np.zeros(points.size),
                   np.full(points.size, sd), prior_weights=weights)

    def shape(self, memory_mb: float) -> Array:
        """g_s(memory_mb) for every s."""
        capped = np.minimum(memory_mb, self.saturation_mb)
        full = self.slope * memory_mb + self.intercept
        at_cap = self.slope * capped + self.intercept
        if full <= 0:
            return np.zeros(self.saturation_mb.size)
        return np.asarray(np.log(full / np.maximum(at_cap, full * 1e-6)), dtype=np.float64)

    def update(self, memory_mb: float, y: float, variance: float, iterations: int) -> RatePosterior:
        """Condition on one leg's log-factor y at `memory_mb` with its variance."""
        if not (math.isfinite(y) and math.isfinite(variance)):
            return self
        shape = self.shape(memory_mb)
        predicted_var = self.sds**2 + variance
        residual = y - (self.means + shape)
        log_likelihood = -0.5 * (residual**2 / predicted_var + np.log(predicted_var))
        with np.errstate(divide="ignore"):
            log_weights = np.log(self.weights) + log_likelihood
        weights = np.exp(log_weights - log_weights.max())
        # A little of the prior kept on every hypothesis: a world off the model's family (a
        # drifting speed) must not lock the posterior on one saturation point for good.
        weights = (1 - KEEP_PRIOR) * weights / weights.sum() + KEEP_PRIOR * self.prior_weights
        gain = self.sds**2 / predicted_var
        return RatePosterior(
            self.slope, self.intercept, self.saturation_mb, weights,
            self.means + gain * residual, np.sqrt(self.sds**2 * (1 - gain)),
            self.evidence + iterations, self.prior_weights,
        )

    def predict(self, memory_mb: float) -> tuple[float, float]:
        """The log-factor's mean and standard deviation at `memory_mb` (of the mixture)."""
        centres = self.means + self.shape(memory_mb)
        mean = float(self.weights @ centres)
        variance = float(self.weights @ (self.sds**2 + (centres - mean) ** 2))
        return mean, math.sqrt(max(variance, 0.0))


@dataclass(frozen=True)
class Factor:
    """A normal posterior on the log of a time factor (measured / believed time)."""

    mean: float = 0.0
    sd: float = PRIOR_SD
    evidence: int = 0

    @property
    def value(self) -> float:
        """The factor at the posterior mean: × the believed time is the expected time."""
        return math.exp(self.mean)

    def observe(self, ratios: Array) -> Factor:
        """Update with one leg's ratios (see `mean_observation`)."""
        found = mean_observation(ratios)
        if found is None:
            return self
        mean_ratio, variance = found
        precision = 1 / self.sd**2 + 1 / variance
        mean = (self.mean / self.sd**2 + math.log(mean_ratio) / variance) / precision
        return Factor(mean, math.sqrt(1 / precision), self.evidence + int(ratios.size))


@dataclass(frozen=True)
class Belief:
    """What the controller believes of the truth (module docstring): the rate's log-factor
    over memory (`rate`), the exchange's factors (`exchange`, on (k_bw, k_lat)), the set-up's
    log-factor, the straggler scatter and the crash evidence."""

    rate: RatePosterior
    exchange: Gaussian = field(
        default_factory=lambda: Gaussian.prior((1.0, 1.0), (PRIOR_EXCHANGE_SD,) * 2))
    setup: Factor = Factor()
    compute_cv: float = 0.0
    measured_cv: float | None = None  # the largest a leg with enough workers' times showed
    failures: int = 0
    exposure_s: float = 0.0

    def rate_factor(self, memory_mb: float) -> tuple[float, float]:
        """The compute time's log-factor at `memory_mb`: its mean and standard deviation."""
        return self.rate.predict(memory_mb)

    def exchange_factor(self, transfer_s: float, latency_s: float) -> tuple[float, float]:
        """The exchange time as now believed, for believed `transfer_s` and `latency_s`: its
        mean and standard deviation (never below a hundredth of the believed)."""
        mean, sd = self.exchange.predict(np.array([transfer_s, latency_s]))
        return max(mean, (transfer_s + latency_s) / 100), sd

    def failure_rate_per_hour(self, prior_per_hour: float) -> float:
        """The crash rate's posterior mean (Gamma prior: the belief's rate over
        `PRIOR_EXPOSURE_H` function-hours)."""
        return (prior_per_hour * PRIOR_EXPOSURE_H + self.failures) / (
            PRIOR_EXPOSURE_H + self.exposure_s / 3600
        )


@dataclass(frozen=True)
class Decision:
    """One check of a run and what the controller decided, with its reason.

    `functions` × `memory_mb` is the plan to run from `at_iteration` on (the same as
    `previous` when the action is `continue`); `predicted_s` and `cost_usd` are its
    remaining time (at the guarantee, restart included) and cost as now believed; `slack_s`
    the time left before the deadline less `predicted_s`; `p_meet` its probability of meeting
    the deadline under the posterior. `rate_ratio` and `communication_ratio` are measured
    speed / believed speed at the plan's memory and n (1: the model was right; 0.8: the truth
    is 20% slower); `posterior` summarises the belief. The run should call `decide` again at
    `next_check_iteration`.
    """

    action: Action
    reason: str
    at_iteration: float
    at_s: float
    functions: int
    memory_mb: int
    previous: tuple[int, int] | None
    local_batch: float
    predicted_s: float
    cost_usd: float
    slack_s: float
    p_meet: float
    rate_ratio: float
    communication_ratio: float
    compute_cv: float
    failure_rate_per_hour: float
    next_check_iteration: int
    posterior: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action in ("scale-up", "scale-down", "switch")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["previous"] = None if self.previous is None else list(self.previous)
        out["posterior"] = {key: round(value, 6) for key, value in self.posterior.items()}
        return {key: None if isinstance(value, float) and not math.isfinite(value) else value
                for key, value in out.items()}


def remaining_instance(instance: Instance, global_batch: float, iterations: float) -> Instance:
    """`iterations` more of `instance`'s training at the global batch B: b_l^f = b_g^max = B,
    so any n splits the same batch (b_l = B/n), and n_t·e = ⌈iterations·B⌉ whole samples."""
    batch = round(global_batch)
    workload = dataclasses.replace(
        instance.workload, samples=max(1, math.ceil(iterations * batch)), epochs=1,
        local_batch=batch, max_global_batch=batch,
    )
    return dataclasses.replace(instance, workload=workload)


@dataclass(frozen=True)
class _Speeds:
    """Time factors applied to the instance's parameters: compute, transfer, latency, set-up."""

    compute: float = 1.0
    transfer: float = 1.0
    latency: float = 1.0
    setup: float = 1.0


@dataclass(frozen=True)
class _Option:
    functions: int
    memory_mb: int
    mean_s: float  # expected remaining time, restart included
    time_s: float  # μ + z_p·σ: what is checked against the time left
    cost_usd: float
    p_meet: float
    meets: bool


class Planned(Protocol):
    """A plan as a controller starts from it: a `Plan`, or a launch's spec of one (whose
    batch and iterations are rounded as launched)."""

    @property
    def solved_from(self) -> Instance: ...

    @property
    def functions(self) -> int: ...

    @property
    def memory_mb(self) -> int: ...

    @property
    def global_batch(self) -> float: ...

    @property
    def iterations(self) -> float: ...

    @property
    def guarantee(self) -> float | None: ...


@dataclass
class Controller:
    """Re-plans one run at its checks; see the module docstring.

    Build it with `Controller.start(instance, ...)` (solves the first plan, as `solve` would)
    or directly from a plan already chosen: `functions`, `memory_mb`, its `global_batch` and
    total `iterations`. `deadline_s` is counted from the run's start (the instance's unless
    given). `guarantee` and `noise` are `solve`'s: the same quantile is kept throughout.
    """

    instance: Instance
    functions: int
    memory_mb: int
    global_batch: float
    iterations: float
    deadline_s: float
    guarantee: float | None = None
    noise: NoiseModel = field(default_factory=NoiseModel)
    belief: Belief = field(init=False)
    decisions: list[Decision] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        for name in ("functions", "memory_mb"):
            integer(name, getattr(self, name), error=InstanceError, maximum=MAX_INTEGER,
                    floats=False, need="a positive integer")
        for name in ("global_batch", "iterations", "deadline_s"):
            number(name, getattr(self, name), error=InstanceError)
        if self.global_batch < self.functions:
            raise InstanceError(
                f"`global_batch` {self.global_batch:g} is smaller than `functions` "
                f"{self.functions}: each function needs at least one sample"
            )
        if not isinstance(self.noise, NoiseModel):
            raise InstanceError(
                f"`noise` must be a lambdadnn.models.noise.NoiseModel, got {brief(self.noise)}"
            )
        if self.instance.servers:
            raise InstanceError(
                f"instance {brief(self.instance.name)} offers {len(self.instance.servers)} "
                "parameter servers: a run re-plans on the one it runs on, so give the plan's "
                "`solved_from` (pinned to its `ps`), or use `Controller.start`"
            )
        rate, grid = self.instance.profile.rate, self.instance.platform.memory
        self.belief = Belief(
            rate=RatePosterior.prior(rate.slope, rate.intercept, float(grid.min_mb),
                                     float(grid.max_mb), self._prior_rate_sd()),
            compute_cv=self.noise.compute_cv,
        )
        # A leg's speed is known no better than the profile's trials land from the fitted
        # model (its run spread): this machine's drift from leg to leg, and the model's misfit
        # at a memory it was not measured at. Within-leg scatter alone made a leg look exact
        # and the controller step down to a memory that then ran slower than it believed.
        self._leg_sd = max(MODEL_SD, run_spread(self.instance.fit))
        # From here the posterior covers what the profile's fit does not know: the re-plans'
        # instances drop the `fit:` section (`solve` would plan its corner on top).
        self.instance = dataclasses.replace(self.instance, fit=None)
        self._z = 0.0 if self.guarantee is None else max(0.0, normal_quantile(self.guarantee))
        # The belief and room of the last look for a cheaper plan that found none (`_may_save`).
        self._looked: tuple[tuple[float, ...], float] | None = None
        self._ran: set[int] = {self.memory_mb}  # memory sizes the run has measured
        self._switched = False  # the leg under way began with a switch (a checkpoint restart)
        self._believed_times: dict[tuple[int, int], tuple[float, float, float]] = {}
        self._quick = True  # the next check comes after `FIRST_CHECK` (new evidence is due)
        first = self._assess(self.functions, self.memory_mb, self.iterations, self.deadline_s,
                             fresh=True, restart=False)
        self.decisions.append(self._decision(
            "start", "the plan as solved from the belief", 0.0, 0.0, first, None,
            self.deadline_s,
        ))

    def _prior_rate_sd(self) -> float:
        """The prior's standard deviation of the rate's log-factor at the first memory: the
        profile's own relative error of R(m₀) with `DRIFT_SD` on top when its fit identified
        both rate parameters, else `PRIOR_SD`."""
        fit = self.instance.fit
        fitted = {} if fit is None else {p.name: p for p in fit.parameters}
        slope, intercept = fitted.get("profile.rate.slope"), fitted.get("profile.rate.intercept")
        if slope is None or intercept is None or not (slope.identified and intercept.identified):
            return PRIOR_SD
        if slope.stderr is None or intercept.stderr is None:
            return PRIOR_SD
        rate = self.instance.profile.rate
        at = rate.slope * self.memory_mb + rate.intercept
        if at <= 0:
            return PRIOR_SD
        relative = math.hypot(slope.stderr * self.memory_mb, intercept.stderr) / at
        return min(PRIOR_SD, math.hypot(relative, DRIFT_SD))

    @classmethod
    def start(
        cls, instance: InstanceLike, *, guarantee: float | None = None,
        noise: NoiseModel | None = None, deadline_s: float | None = None,
    ) -> Controller:
        """Solve the run's first plan from the belief and control it from there."""
        loaded = load_instance(instance)
        plan = solve(loaded, deadline_s=deadline_s, guarantee=guarantee,
                     noise=noise if guarantee is not None else None)
        return cls.of(plan, noise=noise)

    @classmethod
    def of(cls, plan: Planned, *, noise: NoiseModel | None = None) -> Controller:
        """Control the run of a solved plan, at the plan's guarantee and deadline (its
        instance's: a `Plan`'s `deadline_s` is that of the instance it was solved from)."""
        return cls(
            plan.solved_from, plan.functions, plan.memory_mb, float(plan.global_batch),
            float(plan.iterations), plan.solved_from.objective.deadline_s, plan.guarantee,
            noise or NoiseModel(),
        )

    @property
    def last(self) -> Decision:
        return self.decisions[-1]

    # --- the belief -------------------------------------------------------------------

    def _believed(self, functions: int, memory_mb: int) -> tuple[float, float, float]:
        """The instance's own t_comp (one worker, no straggler), transfer and latency per
        iteration at the run's global batch (they never change: kept per plan)."""
        known = self._believed_times.get((functions, memory_mb))
        if known is None:
            known = self._believed_times[(functions, memory_mb)] = self._believe(
                functions, memory_mb)
        return known

    def _believe(self, functions: int, memory_mb: int) -> tuple[float, float, float]:
        parameters = self._remaining(1.0, fresh=True, speeds=_Speeds()).parameters()
        f = model.evaluate(parameters, functions, memory_mb)
        k = float(f.iterations)
        latency = 2 * float(parameters["lam"]) if "lam" in parameters else 0.0
        return float(f.t_comp_total) / k, float(f.t_comm_total) / k - latency, latency

    def _believed_setup(self, functions: int, memory_mb: int, *, first: bool) -> float:
        """One round's set-up as the instance states it: cold starts, start-up, and the data
        load (`first`: the plan's first round) or the restart from a checkpoint."""
        found = self._evaluate(self._remaining(1.0, fresh=True, speeds=_Speeds()),
                               functions, memory_mb, quantile=False)
        parts = found.time_breakdown
        restart = self.instance.platform.restart_overhead_s
        if first:
            return parts.load_s + parts.cold_start_s + parts.startup_s + (
                restart if self._switched else 0.0)
        return parts.cold_start_s + parts.startup_s + restart

    def observe(self, observation: Observation) -> Belief:
        """Fold one leg's measurements into the belief (also done by `decide`)."""
        if not isinstance(observation, Observation):
            raise InstanceError(
                f"`observation` must be a lambdadnn.solver.adaptive.Observation, got "
                f"{brief(observation)}"
            )
        belief = self.belief
        n, m = observation.functions, observation.memory_mb
        self._ran.add(m)
        if observation.iterations:
            t_comp, transfer, latency = self._believed(n, m)
            compute = observation.compute_s
            worker_means = compute.mean(axis=1)
            found = mean_observation(worker_means / t_comp, self._leg_sd)
            if found is not None:
                belief = dataclasses.replace(belief, rate=belief.rate.update(
                    m, math.log(found[0]), found[1], observation.iterations))
            exchange = observation.communication_s
            if transfer + latency > 0 and exchange.size:
                mean = float(exchange.mean())
                variance = max(
                    float(np.var(exchange, ddof=1)) / exchange.size if exchange.size > 1
                    else (PRIOR_EXCHANGE_SD * (transfer + latency)) ** 2,
                    (self._leg_sd * mean) ** 2,
                )
                belief = dataclasses.replace(belief, exchange=belief.exchange.update(
                    np.array([transfer, latency]), mean, variance, exchange.size))
            measured = _straggler_cv(compute, worker_means)
            if compute.shape[1] > 1 and compute.size >= STRAGGLER_SAMPLES:
                # enough evidence to replace the belief's scatter (up or down)
                measured = max(measured, belief.measured_cv or 0.0)
                belief = dataclasses.replace(belief, compute_cv=measured, measured_cv=measured)
            else:
                belief = dataclasses.replace(belief, compute_cv=max(belief.compute_cv, measured))
        if observation.rounds and not observation.failures and observation.setup_s > 0:
            believed = self._believed_setup(n, m, first=True) + (observation.rounds - 1) * (
                self._believed_setup(n, m, first=False))
            if believed > 0:  # a ratio past e^±7 is a unit error, not a speed: clipped
                ratio = min(max(observation.setup_s / believed, MIN_RATIO), 1 / MIN_RATIO)
                belief = dataclasses.replace(belief, setup=belief.setup.observe(
                    np.array([ratio])))
        belief = dataclasses.replace(
            belief, failures=belief.failures + observation.failures,
            exposure_s=belief.exposure_s + observation.exposure_s,
        )
        self.belief = belief
        return belief

    def _noise(self) -> NoiseModel:
        """The noise model as now believed. A check that keeps the plan checkpoints it (both
        executors do), so a crash loses at most the iterations between two checks. Cold
        starts stay the belief's: the set-up factor scales the start-up, data load and
        restart in their stead (a cold-start table per factor would cost a solve's time)."""
        between = max(MIN_LEG_ITERATIONS, math.ceil(CHECK_EVERY * self.iterations))
        return dataclasses.replace(
            self.noise, compute_cv=self.belief.compute_cv,
            failure_rate_per_hour=self.belief.failure_rate_per_hour(
                self.noise.failure_rate_per_hour),
            checkpoint_every=min(self.noise.checkpoint_every, between),
        )

    def _speeds(self, memory_mb: float, z: float) -> _Speeds:
        """The time factors at `memory_mb`, z posterior standard deviations slow (0: the
        posterior mean; the exchange's at the run's current n mix)."""
        belief = self.belief
        mean, sd = belief.rate_factor(memory_mb)
        k_mean, k_cov = belief.exchange.mean, belief.exchange.covariance
        transfer = max(float(k_mean[0]) + z * math.sqrt(max(k_cov[0, 0], 0.0)), 0.01)
        latency = max(float(k_mean[1]) + z * math.sqrt(max(k_cov[1, 1], 0.0)), 0.01)
        setup = math.exp(belief.setup.mean + z * belief.setup.sd) if belief.setup.evidence else 1.0
        return _Speeds(math.exp(mean + z * sd), transfer, latency, setup)

    def _remaining(self, iterations: float, *, fresh: bool, speeds: _Speeds) -> Instance:
        """The rest of the run as an instance: `iterations` at the run's global batch (b_l^f =
        b_g^max = B, so any n splits the same batch), its times scaled by `speeds`. `fresh` is
        a new plan's start: its data load and start-up; carrying on pays neither."""
        base = remaining_instance(self.instance, self.global_batch, iterations)
        workload, profile, server = base.workload, base.profile, base.parameter_server
        platform = base.platform
        rate = dataclasses.replace(profile.rate, slope=profile.rate.slope / speeds.compute,
                                   intercept=profile.rate.intercept / speeds.compute)
        storage = profile.storage_bandwidth
        storage = dataclasses.replace(
            storage, slope=storage.slope / speeds.setup, intercept=storage.intercept / speeds.setup,
            max_mbps=storage.max_mbps / speeds.setup,
        )
        startup = StartupProfile(profile.startup.base_s * speeds.setup,
                                 profile.startup.per_function_s * speeds.setup)
        profile = dataclasses.replace(profile, rate=rate, storage_bandwidth=storage,
                                      latency_s=profile.latency_s * speeds.latency,
                                      startup=startup)
        server = dataclasses.replace(
            server, bandwidth_mbps=server.bandwidth_mbps / speeds.transfer,
            function_bandwidth_mbps=server.function_bandwidth_mbps / speeds.transfer,
        )
        platform = dataclasses.replace(
            platform, restart_overhead_s=platform.restart_overhead_s * speeds.setup)
        if not fresh:
            profile = dataclasses.replace(profile, startup=StartupProfile(0.0, 0.0))
        planned = dataclasses.replace(base, workload=workload, profile=profile,
                                      parameter_server=server, platform=platform)
        return planned if fresh else planned.without_data_load()

    # --- options ----------------------------------------------------------------------

    def _evaluate(
        self, instance: Instance, functions: int, memory_mb: int, *, quantile: bool,
    ) -> Evaluation:
        with_noise = quantile and self.guarantee is not None
        return evaluate(instance, functions=functions, memory_mb=memory_mb,
                        guarantee=self.guarantee if with_noise else None,
                        noise=self._noise() if with_noise else None)

    def _assess(
        self, functions: int, memory_mb: int, iterations: float, time_left_s: float, *,
        fresh: bool, restart: bool,
    ) -> _Option:
        """One plan for the rest of the run under the posterior (module docstring, P(meet));
        `restart`: a new plan, which starts from a checkpoint (`restart_overhead_s` to load)
        and is checked at the quantile of the noise and the parameters together; the plan
        under way is checked at the noise's quantile, the parameters at their mean."""
        speeds = self._speeds(memory_mb, 0.0)
        found = self._evaluate(self._remaining(iterations, fresh=fresh, speeds=speeds),
                               functions, memory_mb, quantile=True)
        if not found.valid:
            return _Option(functions, memory_mb, math.inf, math.inf, math.inf, 0.0, False)
        restart_s = self.instance.platform.restart_overhead_s * speeds.setup if restart else 0.0
        mean = found.time_s + restart_s
        noise_sd = (found.deadline_time_s - found.time_s) / self._z if self._z > 0 else 0.0
        parts = found.time_breakdown
        belief = self.belief
        _, rate_sd = belief.rate_factor(memory_mb)
        transfer, latency = self._believed(functions, memory_mb)[1:]
        iterations_run = float(found.iterations)
        exchange_mean, exchange_sd = belief.exchange_factor(transfer, latency)
        exchange_s = parts.communication_s * exchange_sd / exchange_mean
        setup_s = (parts.load_s + parts.cold_start_s + parts.startup_s + restart_s
                   + parts.restart_overhead_s)
        parameter_sd = math.sqrt(
            (parts.compute_s * rate_sd) ** 2 + exchange_s**2
            + (setup_s * belief.setup.sd if belief.setup.evidence else 0.0) ** 2
        ) if iterations_run > 0 else 0.0
        sd = math.hypot(noise_sd, parameter_sd)
        if sd > 0:
            p_meet = _NORMAL.cdf((time_left_s - mean) / sd)
        else:
            p_meet = 1.0 if mean <= time_left_s else 0.0
        # The plan under way (no restart) is judged at the posterior mean: a run the evidence
        # says is on track is not re-provisioned for the parameters' uncertainty; a new plan
        # carries it, so a switch has margin for what the evidence does not yet know.
        time_s = mean + self._z * (sd if restart else noise_sd)
        cost = found.cost_usd + restart_s * self._price_per_s(functions, memory_mb)
        return _Option(functions, memory_mb, mean, time_s, cost, p_meet, time_s <= time_left_s)

    def _price_per_s(self, functions: int, memory_mb: int) -> float:
        platform, server = self.instance.platform, self.instance.parameter_server
        return price_per_second(functions, memory_mb,
                                price_per_gb_second=platform.price_per_gb_second,
                                ps_price_per_hour=server.shards * server.price_per_hour)

    def _memories(self) -> list[int]:
        """The memory sizes a search scans: `SCAN_MEMORIES` spread evenly in log-memory over
        the platform's grid (snapped onto it), the plan's own, and every size the run ran."""
        grid = self.instance.platform.memory
        low = max(grid.min_mb, math.ceil(self.instance.min_memory_mb))
        if low > grid.max_mb:
            return []
        wanted = np.geomspace(low, grid.max_mb, SCAN_MEMORIES)
        snapped = {int(grid.min_mb + math.ceil((m - grid.min_mb) / grid.step_mb - 1e-9)
                       * grid.step_mb) for m in wanted}
        snapped.update((self.memory_mb, *self._ran))
        return sorted(m for m in snapped if low <= m <= grid.max_mb)

    def _search(self, iterations: float, time_left_s: float) -> list[_Option]:
        """Candidate new plans for the rest (restart included), assessed by P(meet): at each
        memory of `_memories`, every n at once with the speeds at their slow end there
        (posterior mean + z_p standard deviations) and the noise's quantile on top; the fewest
        functions that meet the time left, or if none does the fastest n."""
        restart = self.instance.platform.restart_overhead_s
        noise = (planning_noise(self._noise(), self.guarantee, self.instance.max_functions)
                 if self.guarantee is not None else None)
        figure = model.deadline_figure(noise)
        names = (figure, "rate", "storage_bandwidth", "local_batch")
        n_max = min(self.instance.max_functions, int(self.global_batch))
        found: dict[tuple[int, int], _Option] = {}
        for memory in self._memories():
            speeds = self._speeds(memory, self._z)
            planned = self._remaining(iterations, fresh=True, speeds=speeds)
            top = n_max
            budget = planned.platform.vcpu_memory_mb
            if budget is not None:
                top = min(top, budget // memory)
            if top < 1:
                continue
            n = np.arange(1, top + 1, dtype=np.float64)
            values = planned.values()
            f = model.figures(values, n, float(memory), names, noise)
            valid = ((f["rate"] > 0) & (f["storage_bandwidth"] > 0)
                     & (f["local_batch"] >= 1 - model.BATCH_SLACK)
                     & np.isfinite(f[figure]))
            if not valid.any():
                continue
            times = np.where(valid, f[figure] + restart * speeds.setup, np.inf)
            meeting = np.flatnonzero(times <= time_left_s)
            if not meeting.size:  # the fewest functions nearly as fast as the fastest
                meeting = np.flatnonzero(times <= times.min() * (1 + FASTEST_SLACK))
            functions = int(meeting[0]) + 1
            option = self._assess(functions, memory, iterations, time_left_s, fresh=True,
                                  restart=True)
            found[(option.functions, option.memory_mb)] = option
        return list(found.values())

    def _trimmed(self, option: _Option, iterations: float, time_left_s: float) -> _Option:
        """`option` with the fewest functions at its memory that still meet (bisection: more
        functions finish sooner), when that is cheaper; `solve` planned it with the rate's
        slow end and the noise's quantile on top, which the posterior's P(meet) need not."""
        if not option.meets or option.functions == 1:
            return option
        low, high = 0, option.functions  # fewer than low+1 miss, high meets
        best = option
        while high - low > 1:
            middle = (low + high) // 2
            trial = self._assess(middle, option.memory_mb, iterations, time_left_s, fresh=True,
                                 restart=True)
            if trial.meets:
                high = middle
                best = trial if trial.cost_usd < best.cost_usd else best
            else:
                low = middle
        return best

    def _best(self, iterations: float, time_left_s: float) -> _Option | None:
        """The cheapest candidate that meets the time left, or if none does the cheapest of
        those within `MIN_GAIN` of the likeliest to; None when no plan is valid."""
        options = self._search(iterations, time_left_s)
        meeting = [o for o in options if o.meets]
        if meeting:
            return self._trimmed(min(meeting, key=lambda o: (o.cost_usd, o.time_s)),
                                 iterations, time_left_s)
        if not options:
            return None
        likeliest = max(o.p_meet for o in options)
        return min((o for o in options if o.p_meet >= likeliest - MIN_GAIN),
                   key=lambda o: (o.cost_usd, o.mean_s))

    # --- decisions --------------------------------------------------------------------

    def next_check(self, done: float, *, quick: bool = False) -> int:
        """The iteration at which the run should be checked next (`quick`: new evidence is
        due, after a start or a switch)."""
        share = FIRST_CHECK if quick or done <= 0 else CHECK_EVERY
        step = max(MIN_LEG_ITERATIONS, math.ceil(share * self.iterations))
        return min(math.ceil(self.iterations), math.floor(done) + step)

    def _summary(self) -> dict[str, float]:
        belief = self.belief
        rate_mean, rate_sd = belief.rate_factor(self.memory_mb)
        k = belief.exchange
        return {
            "rate_log_factor": rate_mean, "rate_log_sd": rate_sd,
            "rate_unsaturated": float(belief.rate.weights[-1]),
            "transfer_factor": float(k.mean[0]),
            "transfer_sd": math.sqrt(max(float(k.covariance[0, 0]), 0.0)),
            "latency_factor": float(k.mean[1]),
            "latency_sd": math.sqrt(max(float(k.covariance[1, 1]), 0.0)),
            "setup_factor": belief.setup.value, "setup_log_sd": belief.setup.sd,
            "compute_cv": belief.compute_cv,
        }

    def _decision(
        self, action: Action, reason: str, done: float, elapsed_s: float, chosen: _Option,
        previous: tuple[int, int] | None, time_left_s: float,
    ) -> Decision:
        belief = self.belief
        transfer, latency = self._believed(chosen.functions, chosen.memory_mb)[1:]
        exchange_mean = belief.exchange_factor(transfer, latency)[0]
        believed_exchange = transfer + latency
        return Decision(
            action=action, reason=reason, at_iteration=done, at_s=elapsed_s,
            functions=chosen.functions, memory_mb=chosen.memory_mb, previous=previous,
            local_batch=self.global_batch / chosen.functions, predicted_s=chosen.time_s,
            cost_usd=chosen.cost_usd, slack_s=time_left_s - chosen.time_s,
            p_meet=chosen.p_meet,
            rate_ratio=math.exp(-belief.rate_factor(chosen.memory_mb)[0]),
            communication_ratio=(believed_exchange / exchange_mean
                                 if believed_exchange > 0 else 1.0),
            compute_cv=belief.compute_cv,
            failure_rate_per_hour=belief.failure_rate_per_hour(self.noise.failure_rate_per_hour),
            next_check_iteration=self.next_check(done, quick=self._quick),
            posterior=self._summary(),
        )

    def decide(
        self, *, iterations_done: float, elapsed_s: float, observation: Observation | None = None,
    ) -> Decision:
        """At a check: fold in the leg's `observation`, then carry on or switch (see the module
        docstring). `iterations_done` counts iterations at the run's global batch since its
        start, `elapsed_s` everything since its start (start-ups, restarts, crashes)."""
        for name, value in (("iterations_done", iterations_done), ("elapsed_s", elapsed_s)):
            number(name, value, error=InstanceError, sign="non-negative")
        if observation is not None:
            self.observe(observation)
        self._switched = self._quick = False
        done, left = float(iterations_done), self.iterations - float(iterations_done)
        time_left = self.deadline_s - float(elapsed_s)
        current = (self.functions, self.memory_mb)
        if left <= 0:
            carry = _Option(*current, 0.0, 0.0, 0.0, 1.0, True)
            return self._record("continue", "the run is done", done, elapsed_s, carry, current,
                                time_left)
        carry = self._assess(*current, left, time_left, fresh=False, restart=False)
        if carry.meets:
            if carry.time_s < time_left * (1 - MIN_SAVING) and self._may_save(
                time_left / carry.time_s
            ):
                best = self._best(left, time_left)  # slack enough that a cheaper plan may fit
                saving = -math.inf if best is None else carry.cost_usd - best.cost_usd
                if best is not None and best.meets and saving > max(
                    MIN_SAVING * carry.cost_usd, MIN_RUN_SAVING * self.decisions[0].cost_usd
                ):
                    return self._switch(best, carry, done, elapsed_s, time_left, behind=False)
            return self._record(
                "continue", f"on track: {carry.time_s:.0f} s needed of {time_left:.0f} s left "
                f"(P(meet) {carry.p_meet:.3f})", done, elapsed_s, carry, current, time_left,
            )
        best = self._best(left, time_left)
        if best is None:
            return self._record(
                "continue", f"behind: {carry.time_s:.0f} s needed of {time_left:.0f} s left, and "
                "no other plan is valid", done, elapsed_s, carry, current, time_left,
            )
        if carry.mean_s <= time_left and best.meets and self._can_wait(best, done, left,
                                                                       time_left):
            return self._record(
                "continue", f"watching: {carry.time_s:.0f} s needed of {time_left:.0f} s left at "
                f"the guarantee but {carry.mean_s:.0f} s expected (P(meet) {carry.p_meet:.3f}); "
                "a plan that meets it remains after one more leg", done, elapsed_s, carry,
                current, time_left,
            )
        if best.meets and best.p_meet > carry.p_meet:
            return self._switch(best, carry, done, elapsed_s, time_left, behind=True)
        if max(best.p_meet, carry.p_meet) < HOPELESS:
            fastest = min(best.mean_s, carry.mean_s)
            return self._record(
                "continue", f"hopeless: no plan meets the deadline (P(meet) ≤ "
                f"{max(best.p_meet, carry.p_meet):.3f}); the best achievable finish is about "
                f"{elapsed_s + fastest:.0f} s of {self.deadline_s:.0f} s, so the plan under way "
                "carries on", done, elapsed_s, carry, current, time_left,
            )
        if best.p_meet >= carry.p_meet + MIN_GAIN:
            return self._switch(best, carry, done, elapsed_s, time_left, behind=True)
        return self._record(
            "continue", f"behind: {carry.time_s:.0f} s needed of {time_left:.0f} s left; no plan "
            f"raises P(meet) {carry.p_meet:.3f} by {MIN_GAIN}", done, elapsed_s, carry, current,
            time_left,
        )

    def _can_wait(self, best: _Option, done: float, left: float, time_left: float) -> bool:
        """Whether `best` would still meet the deadline after one more leg of the plan under
        way at its slow end (the guarantee's quantile): then this check need not switch."""
        leg = self.next_check(done) - done
        if leg >= left:
            return False
        carry_leg = self._assess(self.functions, self.memory_mb, leg, math.inf, fresh=False,
                                 restart=False)
        later = self._assess(best.functions, best.memory_mb, left - leg,
                             time_left - carry_leg.time_s, fresh=True, restart=True)
        return later.meets

    def _may_save(self, room: float) -> bool:
        """Whether looking for a cheaper plan may find one: not if the last look found none,
        the belief has not moved since and the room (time left / time needed) has not grown
        by half of `MIN_SAVING`. Then the same comparison would give the same answer, and
        the run is spared a search at every check."""
        belief = self.belief
        state = (*self._summary().values(),
                 belief.failure_rate_per_hour(self.noise.failure_rate_per_hour))
        last = self._looked
        if last is not None and room <= last[1] * (1 + MIN_SAVING / 2) and all(
            abs(a - b) <= MODEL_SD for a, b in zip(state, last[0], strict=True)
        ):
            return False
        self._looked = (state, room)
        return True

    def _switch(
        self, best: _Option, carry: _Option, done: float, elapsed_s: float, time_left: float, *,
        behind: bool,
    ) -> Decision:
        current = (self.functions, self.memory_mb)
        old = f"{current[0]} × {current[1]} MB"
        new = f"{best.functions} × {best.memory_mb} MB"
        if behind:
            verdict = ("meets it" if best.meets else
                       "is the most likely to meet it, and still may miss it")
            reason = (f"behind: {old} needs {carry.time_s:.0f} s of {time_left:.0f} s left "
                      f"(P(meet) {carry.p_meet:.3f}); {new} needs {best.time_s:.0f} s "
                      f"(P(meet) {best.p_meet:.3f}) and {verdict}")
        else:
            reason = (f"ahead: {old} needs {carry.time_s:.0f} s of {time_left:.0f} s left; "
                      f"{new} meets it for ${best.cost_usd:.4g} instead of ${carry.cost_usd:.4g}")
        before = current[0] * current[1]
        after = best.functions * best.memory_mb
        action: Action = "scale-up" if after > before else (
            "scale-down" if after < before else "switch")
        self.functions, self.memory_mb = best.functions, best.memory_mb
        self._looked = None
        self._switched = self._quick = True
        return self._record(action, reason, done, elapsed_s, best, current, time_left)

    def _record(
        self, action: Action, reason: str, done: float, elapsed_s: float, chosen: _Option,
        previous: tuple[int, int], time_left: float,
    ) -> Decision:
        decision = self._decision(action, reason, done, elapsed_s, chosen, previous, time_left)
        self.decisions.append(decision)
        return decision


def _straggler_cv(compute: Array, worker_means: Array) -> float:
    """The compute CV a leg shows, on the `CV_STEP` grid: the workers' spread within an
    iteration, or, when larger, the CV whose mean slowest-of-n factor (a lognormal's) matches
    the measured slowest-of-n over the iteration's mean (a heavy tail shows only there)."""
    n = compute.shape[1]
    if n < 2 or compute.size < 10:
        return 0.0
    spread = compute / np.maximum(worker_means[:, None], 1e-300)
    cv = math.ceil(float(np.std(spread, ddof=1)) / CV_STEP - 1e-6) * CV_STEP  # 1e-17 is 0
    slowest = float(spread.max(axis=1).mean())

    def reaches(candidate: float) -> bool:
        return float(max_moments(np.array([float(n)]), candidate)[0][0]) >= slowest - 1e-9

    if reaches(cv):
        return cv
    low, high = round(cv / CV_STEP), round(MAX_CV / CV_STEP)  # reaches(high·step) or MAX_CV
    while high - low > 1:  # the slowest-of-n mean grows with the CV: bisect the grid
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle * CV_STEP) else (middle, high)
    return high * CV_STEP
