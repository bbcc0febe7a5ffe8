"""Adaptive execution: learn the run's true speed as it trains, and re-plan the rest of it.

A static plan is optimal for the model and meets its deadline only while the model is right.
A run, though, measures itself: every iteration says how long each worker computed and how
long the exchange took. The `Controller` turns those measurements into a belief about the
truth and, at each check, re-solves the remaining work against the remaining time with
`solve()`, at the same guarantee.

* **Belief.** The instance's t_comp and t_comm are scaled by two unknown factors, each with a
  normal prior on its logarithm (`PRIOR_SD`); each leg's mean ratio of measured to believed
  time is a normal observation of it, with the variance its per-iteration scatter shows
  (iterations, not workers, are the independent draws: a slow machine slows all its workers).
  The straggler scatter (compute CV) is what the workers' spread within an iteration shows,
  never less than the belief's; crashes update a Gamma posterior on the crash rate, whose
  prior is the belief's rate held with `PRIOR_EXPOSURE_H` function-hours of evidence.
* **The remaining work** is an instance of its own: the global batch B of the run so far
  (so a new n splits the same batch: b_l = B/n), the iterations left, the time left, the
  rate and communication scaled by the factors at their posterior mean plus z_p posterior
  standard deviations (the parameter's uncertainty is planned for like the noise, and
  shrinks as evidence comes in).
* **When it changes the plan.** A new plan pays a restart (`restart_overhead_s`: loading the
  checkpoint), a fresh start-up and data load, all counted in its time and cost; carrying on
  pays none of them. It switches when carrying on would miss the deadline at the guarantee
  (`behind`: to the cheapest plan that meets it, or if none can, to the fastest), or when a
  plan that meets it saves at least `MIN_SAVING` of the remaining cost and `MIN_RUN_SAVING`
  of the whole run's (`ahead`). Otherwise it carries on. Carrying on is judged at the
  speeds' posterior mean, a new plan at z_p posterior standard deviations slow: a run the
  evidence says is on track is not re-provisioned for the parameters' uncertainty, and a
  switch is made with margin for it.

Every decision is kept with its reason, the observed and believed speeds, the slack and the
old and new plans (`Decision`). The controller imports no launcher or simulator code: the
simulator and both launcher backends feed it `Observation`s and follow its decisions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lambdadnn.models import performance as model
from lambdadnn.models.noise import NoiseModel, normal_quantile
from lambdadnn.solver.errors import InstanceError, NoValidPlanError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.instance import MAX_INTEGER, Instance, StartupProfile, load_instance
from lambdadnn.solver.pipeline import InstanceLike, evaluate, solve
from lambdadnn.solver.plan import Plan

__all__ = ["Belief", "Controller", "Decision", "Observation", "remaining_instance"]

PRIOR_SD = 1.0  # the belief's speeds may be off by a factor e^±1 before any evidence
PRIOR_EXPOSURE_H = 10.0  # function-hours of evidence the belief's crash rate counts for
MODEL_SD = 0.01  # the least uncertainty left in a measured factor: the run's speed drifts
MIN_SAVING = 0.05  # a cheaper plan must save this share of the remaining cost to be taken,
MIN_RUN_SAVING = 0.03  # and this share of the whole run's: a re-provisioning risks a cold start
CV_STEP = 0.01  # a measured compute CV is rounded up to this step (planning tables are cached)
FIRST_CHECK = 0.03  # the first check: after this share of the iterations ...
CHECK_EVERY = 0.10  # ... then after each further share
MIN_LEG_ITERATIONS = 3  # never check after fewer iterations than this

Action = Literal["start", "continue", "scale-up", "scale-down", "switch"]
Array = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Observation:
    """What one leg of a run (since the last check) measured at its plan `functions` × `memory_mb`.

    `compute_s`: iterations × workers seconds each worker spent on its gradient;
    `communication_s`: per iteration, the exchange itself (the push and the pull, without
    waiting for a straggler: on a worker's clock, the least exchange time of that iteration);
    `failures`: crashes in the leg; `exposure_s`: function-seconds run in it (what a crash
    rate per function-hour is counted against).
    """

    functions: int
    memory_mb: int
    compute_s: Array
    communication_s: Array
    failures: int = 0
    exposure_s: float = 0.0

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
        if isinstance(self.failures, bool) or not isinstance(self.failures, int) or (
            self.failures < 0
        ):
            raise InstanceError(f"`failures` must be an integer ≥ 0, got {brief(self.failures)}")
        if not (math.isfinite(self.exposure_s) and self.exposure_s >= 0):
            raise InstanceError(f"`exposure_s` must be seconds ≥ 0, got {brief(self.exposure_s)}")
        object.__setattr__(self, "compute_s", compute)
        object.__setattr__(self, "communication_s", communication)

    @property
    def iterations(self) -> int:
        return int(self.compute_s.shape[0])


@dataclass(frozen=True)
class Factor:
    """A normal posterior on the log of a speed's factor (measured / believed time)."""

    mean: float = 0.0
    sd: float = PRIOR_SD
    evidence: int = 0  # iterations it has seen

    @property
    def value(self) -> float:
        """The factor at the posterior mean: × the believed time is the expected time."""
        return math.exp(self.mean)

    def planned(self, z: float) -> float:
        """The factor planned for: z posterior standard deviations slower than the mean."""
        return math.exp(self.mean + z * self.sd)

    def observe(self, ratios: Array) -> Factor:
        """Update with one leg's per-iteration ratios of measured to believed time.

        The observation is the log of their arithmetic mean — a run's time is a sum of
        iterations, so its factor is the mean ratio, not the geometric one, which heavy
        tails (a CPU quota's throttling) pull far below it — with the delta method's
        variance var(r)/(N·mean²), at least `MODEL_SD`²; one ratio alone shows no scatter
        and counts as weakly as the prior.
        """
        ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
        if ratios.size == 0:
            return self
        mean_ratio = float(ratios.mean())
        scatter = (float(np.var(ratios, ddof=1)) / (ratios.size * mean_ratio**2)
                   if ratios.size > 1 else PRIOR_SD**2)
        variance = max(scatter, MODEL_SD**2)
        precision = 1 / self.sd**2 + 1 / variance
        mean = (self.mean / self.sd**2 + math.log(mean_ratio) / variance) / precision
        return Factor(mean, math.sqrt(1 / precision), self.evidence + int(ratios.size))


@dataclass(frozen=True)
class Belief:
    """What the controller believes of the truth: factors on the instance's compute and
    communication times, the straggler scatter, and the crash rate."""

    compute: Factor = Factor()
    communication: Factor = Factor()
    compute_cv: float = 0.0
    failures: int = 0
    exposure_s: float = 0.0

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
    the time left before the deadline less `predicted_s`. `rate_ratio` and
    `communication_ratio` are measured speed / believed speed (1: the model was right; 0.8:
    the truth is 20% slower). The run should call `decide` again at `next_check_iteration`.
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
    rate_ratio: float
    communication_ratio: float
    compute_cv: float
    failure_rate_per_hour: float
    next_check_iteration: int

    @property
    def changed(self) -> bool:
        return self.action in ("scale-up", "scale-down", "switch")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["previous"] = None if self.previous is None else list(self.previous)
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
class _Option:
    functions: int
    memory_mb: int
    time_s: float  # at the guarantee, as `solve` checks it
    cost_usd: float
    meets: bool


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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not (
                1 <= value <= MAX_INTEGER
            ):
                raise InstanceError(f"`{name}` must be a positive integer, got {brief(value)}")
        for name in ("global_batch", "iterations", "deadline_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0
            ):
                raise InstanceError(f"`{name}` must be a positive number, got {brief(value)}")
        if self.global_batch < self.functions:
            raise InstanceError(
                f"`global_batch` {self.global_batch:g} is smaller than `functions` "
                f"{self.functions}: each function needs at least one sample"
            )
        if not isinstance(self.noise, NoiseModel):
            raise InstanceError(
                f"`noise` must be a lambdadnn.models.noise.NoiseModel, got {brief(self.noise)}"
            )
        self.belief = Belief(compute_cv=self.noise.compute_cv)
        self._z = 0.0 if self.guarantee is None else max(0.0, normal_quantile(self.guarantee))
        # The belief and room of the last look for a cheaper plan that found none (`_may_save`).
        self._looked: tuple[tuple[float, ...], float] | None = None
        first = self._option(self.functions, self.memory_mb, self.iterations, self.deadline_s,
                             fresh=True, z=0.0, restart=False)
        self.decisions.append(self._decision(
            "start", "the plan as solved from the belief", 0.0, 0.0, first, None,
            self.deadline_s,
        ))

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
    def of(cls, plan: Plan, *, noise: NoiseModel | None = None) -> Controller:
        """Control the run of a solved plan, at the plan's guarantee and deadline."""
        return cls(
            plan.solved_from, plan.functions, plan.memory_mb, plan.global_batch,
            plan.iterations, plan.deadline_s, plan.guarantee, noise or NoiseModel(),
        )

    @property
    def last(self) -> Decision:
        return self.decisions[-1]

    # --- the belief -------------------------------------------------------------------

    def _believed_times(self, functions: int, memory_mb: int) -> tuple[float, float]:
        """The instance's own t_comp (one worker, no straggler) and t_comm per iteration at the
        run's global batch."""
        f = model.evaluate(self._remaining(1.0, fresh=True, z=None).parameters(),
                           functions, memory_mb)
        k = float(f.iterations)
        return float(f.t_comp_total) / k, float(f.t_comm_total) / k

    def observe(self, observation: Observation) -> Belief:
        """Fold one leg's measurements into the belief (also done by `decide`)."""
        if not isinstance(observation, Observation):
            raise InstanceError(
                f"`observation` must be a lambdadnn.solver.adaptive.Observation, got "
                f"{brief(observation)}"
            )
        belief = self.belief
        if observation.iterations:
            t_comp, t_comm = self._believed_times(observation.functions, observation.memory_mb)
            compute = observation.compute_s
            worker_means = compute.mean(axis=1)
            belief = dataclasses.replace(belief, compute=belief.compute.observe(
                worker_means / t_comp))
            if t_comm > 0:
                belief = dataclasses.replace(belief, communication=belief.communication.observe(
                    observation.communication_s / t_comm))
            if compute.shape[1] > 1 and compute.size >= 10:
                spread = compute / np.maximum(worker_means[:, None], 1e-300)
                cv = math.ceil(float(np.std(spread, ddof=1)) / CV_STEP) * CV_STEP
                belief = dataclasses.replace(belief, compute_cv=max(belief.compute_cv, cv))
        belief = dataclasses.replace(
            belief, failures=belief.failures + observation.failures,
            exposure_s=belief.exposure_s + observation.exposure_s,
        )
        self.belief = belief
        return belief

    def _noise(self) -> NoiseModel:
        """The noise model as now believed. A check that keeps the plan checkpoints it (both
        executors do), so a crash loses at most the iterations between two checks."""
        between = max(MIN_LEG_ITERATIONS, math.ceil(CHECK_EVERY * self.iterations))
        return dataclasses.replace(
            self.noise, compute_cv=self.belief.compute_cv,
            failure_rate_per_hour=self.belief.failure_rate_per_hour(
                self.noise.failure_rate_per_hour),
            checkpoint_every=min(self.noise.checkpoint_every, between),
        )

    def _remaining(self, iterations: float, *, fresh: bool, z: float | None) -> Instance:
        """The rest of the run as an instance: `iterations` at the run's global batch (b_l^f =
        b_g^max = B, so any n splits the same batch), the speeds as now believed, z posterior
        standard deviations slow (None: the instance's own speeds). `fresh` is a new plan's
        start: its data load and start-up; carrying on pays neither."""
        base = remaining_instance(self.instance, self.global_batch, iterations)
        workload, profile, server = base.workload, base.profile, base.parameter_server
        if z is not None:
            compute = self.belief.compute.planned(z)
            communication = self.belief.communication.planned(z)
            rate = dataclasses.replace(
                profile.rate, slope=profile.rate.slope / compute,
                intercept=profile.rate.intercept / compute,
            )
            profile = dataclasses.replace(profile, rate=rate,
                                          latency_s=profile.latency_s * communication)
            server = dataclasses.replace(
                server, bandwidth_mbps=server.bandwidth_mbps / communication,
                function_bandwidth_mbps=server.function_bandwidth_mbps / communication,
            )
        if not fresh:
            workload = dataclasses.replace(workload, dataset_size_mb=1e-9)
            profile = dataclasses.replace(profile, startup=StartupProfile(0.0, 0.0))
        return dataclasses.replace(base, workload=workload, profile=profile,
                                   parameter_server=server)

    # --- options ----------------------------------------------------------------------

    def _option(
        self, functions: int, memory_mb: int, iterations: float, time_left_s: float, *,
        fresh: bool, z: float, restart: bool,
    ) -> _Option:
        """One plan for the rest of the run as now believed (z: see `_remaining`); `restart`:
        it starts from a checkpoint, which costs `restart_overhead_s` to load."""
        restart_s = self.instance.platform.restart_overhead_s if restart else 0.0
        found = evaluate(
            self._remaining(iterations, fresh=fresh, z=z), functions=functions,
            memory_mb=memory_mb,
            guarantee=self.guarantee, noise=self._noise() if self.guarantee else None,
        )
        time_s = found.deadline_time_s + restart_s if found.valid else math.inf
        cost = found.cost_usd + restart_s * self._price_per_s(functions, memory_mb)
        return _Option(functions, memory_mb, time_s, cost, time_s <= time_left_s)

    def _price_per_s(self, functions: int, memory_mb: int) -> float:
        platform, server = self.instance.platform, self.instance.parameter_server
        return (functions * memory_mb / 1024 * platform.price_per_gb_second
                + server.price_per_hour / 3600)

    def _best(self, iterations: float, time_left_s: float) -> _Option | None:
        """The cheapest new plan for the rest that meets the time left (restart included),
        or if none does the fastest; None when no plan is valid. It is planned with the
        speeds' uncertainty (z_p posterior standard deviations slow), so that a switch is
        not undone by the next leg's evidence."""
        budget = time_left_s - self.instance.platform.restart_overhead_s
        try:
            plan = solve(
                self._remaining(iterations, fresh=True, z=self._z),
                deadline_s=max(budget, 1e-6), guarantee=self.guarantee,
                noise=self._noise() if self.guarantee else None,
            )
        except NoValidPlanError:
            return None
        return self._option(plan.functions, plan.memory_mb, iterations, time_left_s,
                            fresh=True, z=self._z, restart=True)

    # --- decisions --------------------------------------------------------------------

    def next_check(self, done: float) -> int:
        """The iteration at which the run should be checked next."""
        share = FIRST_CHECK if done <= 0 else CHECK_EVERY
        step = max(MIN_LEG_ITERATIONS, math.ceil(share * self.iterations))
        return min(math.ceil(self.iterations), math.floor(done) + step)

    def _decision(
        self, action: Action, reason: str, done: float, elapsed_s: float, chosen: _Option,
        previous: tuple[int, int] | None, time_left_s: float,
    ) -> Decision:
        belief = self.belief
        return Decision(
            action=action, reason=reason, at_iteration=done, at_s=elapsed_s,
            functions=chosen.functions, memory_mb=chosen.memory_mb, previous=previous,
            local_batch=self.global_batch / chosen.functions, predicted_s=chosen.time_s,
            cost_usd=chosen.cost_usd, slack_s=time_left_s - chosen.time_s,
            rate_ratio=1 / belief.compute.value,
            communication_ratio=1 / belief.communication.value,
            compute_cv=belief.compute_cv,
            failure_rate_per_hour=belief.failure_rate_per_hour(self.noise.failure_rate_per_hour),
            next_check_iteration=self.next_check(done),
        )

    def decide(
        self, *, iterations_done: float, elapsed_s: float, observation: Observation | None = None,
    ) -> Decision:
        """At a check: fold in the leg's `observation`, then carry on or switch (see the module
        docstring). `iterations_done` counts iterations at the run's global batch since its
        start, `elapsed_s` everything since its start (start-ups, restarts, crashes)."""
        for name, value in (("iterations_done", iterations_done), ("elapsed_s", elapsed_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0
            ):
                raise InstanceError(f"`{name}` must be a number ≥ 0, got {brief(value)}")
        if observation is not None:
            self.observe(observation)
        done, left = float(iterations_done), self.iterations - float(iterations_done)
        time_left = self.deadline_s - float(elapsed_s)
        current = (self.functions, self.memory_mb)
        if left <= 0:
            carry = _Option(*current, 0.0, 0.0, True)
            return self._record("continue", "the run is done", done, elapsed_s, carry, current,
                                time_left)
        carry = self._option(*current, left, time_left, fresh=False, z=0.0, restart=False)
        if carry.meets and carry.time_s < time_left * (1 - MIN_SAVING) and self._may_save(
            time_left / carry.time_s
        ):
            best = self._best(left, time_left)  # slack enough that a cheaper plan may fit
            saving = -math.inf if best is None else carry.cost_usd - best.cost_usd
            if best is not None and best.meets and saving > max(
                MIN_SAVING * carry.cost_usd, MIN_RUN_SAVING * self.decisions[0].cost_usd
            ):
                return self._switch(best, carry, done, elapsed_s, time_left, behind=False)
        if carry.meets:
            return self._record(
                "continue", f"on track: {carry.time_s:.0f} s needed of {time_left:.0f} s left",
                done, elapsed_s, carry, current, time_left,
            )
        best = self._best(left, time_left)
        if best is not None and best.time_s < carry.time_s:
            return self._switch(best, carry, done, elapsed_s, time_left, behind=True)
        return self._record(
            "continue", f"behind: {carry.time_s:.0f} s needed of {time_left:.0f} s left, and no "
            "plan is faster", done, elapsed_s, carry, current, time_left,
        )

    def _may_save(self, room: float) -> bool:
        """Whether looking for a cheaper plan may find one: not if the last look found none,
        the belief has not moved since and the room (time left / time needed) has not grown
        by half of `MIN_SAVING`. Then the same comparison would give the same answer, and
        the run is spared a `solve()` at every check."""
        belief = self.belief
        state = (belief.compute.mean, belief.communication.mean, belief.compute_cv,
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
            verdict = "meets it" if best.meets else "is the fastest, and still misses it"
            reason = (f"behind: {old} needs {carry.time_s:.0f} s of {time_left:.0f} s left; "
                      f"{new} needs {best.time_s:.0f} s and {verdict}")
        else:
            reason = (f"ahead: {old} needs {carry.time_s:.0f} s of {time_left:.0f} s left; "
                      f"{new} meets it for ${best.cost_usd:.4g} instead of ${carry.cost_usd:.4g}")
        before = current[0] * current[1]
        after = best.functions * best.memory_mb
        action: Action = "scale-up" if after > before else (
            "scale-down" if after < before else "switch")
        self.functions, self.memory_mb = best.functions, best.memory_mb
        self._looked = None
        return self._record(action, reason, done, elapsed_s, best, current, time_left)

    def _record(
        self, action: Action, reason: str, done: float, elapsed_s: float, chosen: _Option,
        previous: tuple[int, int], time_left: float,
    ) -> Decision:
        decision = self._decision(action, reason, done, elapsed_s, chosen, previous, time_left)
        self.decisions.append(decision)
        return decision
