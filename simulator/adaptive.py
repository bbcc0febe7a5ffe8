"""A job run under the adaptive controller (`solver.adaptive`): its plans run under the truth.

The controller plans from the belief and decides at each check; this module runs its plans
in the engine under the truth it never sees and reports to it what each leg measured.

Semantics (`run_adaptive`):

* **The first plan** is the controller's, solved from the belief for the time budget (the
  deadline less the job's wait in the queue), and runs on the true instance exactly as
  `simulate_job` runs it, drawing from `rng`: under the same seed it meets the same luck as a
  static plan until the first change.
* **Checks.** When the run completes the iteration the last decision names
  (`next_check_iteration`, counted from the run's start), it is paused and the controller gets
  the leg since the last check: each worker's compute of each iteration (redone ones
  included), per iteration the exchange without the straggler wait (barrier to barrier less
  the slowest worker's compute), the crashes, and n × the leg's seconds of exposure. A pause
  is no event of the run: on `continue` it resumes with the same draws, the round's clock
  running and no cold start, so the legs of one plan are one uninterrupted `simulate_job`
  run (but for the checkpoint below, which only a crash can tell). A check at or past the
  plan's last iteration is not made: the run ends there.
* **Checkpoints.** Every check that keeps the plan also checkpoints it (at no cost, as the
  engine's periodic checkpoints; the launchers ask the channel for one), so a crash loses at
  most the work since the last check or periodic checkpoint, whichever is later.
* **Crashes.** A crash loses the work since the last checkpoint, which no iteration count
  shows: the controller is checked at once, at the checkpoint's iteration and the crash's
  time, with the leg so far. (Otherwise a run that crashes often would reach its next check
  only after redoing its lost work, maybe too late to catch up.)
* **A change** halts the plan at the check's iteration: its round ends with a checkpoint
  (nothing is lost) and it is billed until then. The new plan trains the iterations left at
  the same global batch B (local batch B/n') as a fresh run of the true instance of the
  remaining work (built as the controller builds its belief of it): the cold starts of its n'
  functions, their start-up s0 + s1·n', the data load d_t/(n'·B_f^s) (new workers hold no
  shard), then `restart_overhead_s` to load the checkpoint. It draws from a fresh child of
  `rng` (`Generator.spawn`). Its iterations are ⌈left·B⌉/B: whole samples, so at most 1/B of
  an iteration more than left.
* **Cost** is each plan's bill (functions from invocation to the end of their last round,
  the PS for the plan's time, one request per invocation) added up; the time is the plans'
  times added up: the pool may delay a stage while its functions are busy (`simulator.pool`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..inputs.errors import InputError, InstanceError
from ..inputs.files import brief
from ..inputs.numbers import integer, number
from ..models.noise import NoiseModel
from ..models.performance import Array
from ..solver.adaptive import Controller, Decision, Observation, remaining_instance
from ..solver.instance import Instance
from .engine import Crashed, JobRun, PlanRun, Ran

__all__ = ["AdaptiveRun", "Leg", "capped", "run_adaptive"]


@dataclass(frozen=True)
class Leg:
    """One stretch of a plan: from a check (or the plan's start) to the next (or its end)."""

    functions: int
    memory_mb: int
    start_s: float  # seconds since the run's start
    seconds: float
    iterations: float  # iterations simulated in it, redone ones included (partial: a fraction)
    failures: int


@dataclass(frozen=True)
class AdaptiveRun:
    """What a run under the controller took and cost, plan by plan."""

    time_s: float
    cost_usd: float
    gb_seconds: float
    iterations: float  # iterations completed, at the run's global batch
    lost_iterations: float  # redone after crashes
    invocations: int
    restarts: int  # timeout restarts within the plans
    switches: int  # changes of plan (each a restart from a checkpoint)
    failures: int
    finished: bool  # false: a plan was abandoned at the engine's limits
    stages: tuple[tuple[int, float], ...]  # (functions, seconds) each plan held, in order
    legs: tuple[Leg, ...]
    decisions: tuple[Decision, ...]


@dataclass
class _Leg:
    """A leg being measured."""

    start_s: float
    compute: list[Array] = field(default_factory=list)
    communication: list[Array] = field(default_factory=list)
    iterations: float = 0.0
    failures: int = 0

    def add(self, ran: Ran, rows: slice) -> None:
        compute, durations = ran.compute_s[rows], ran.durations_s[rows]
        self.compute.append(compute)
        self.communication.append(durations - compute.max(axis=1))
        self.iterations += float(ran.scales[rows].sum())

    def close(self, plan: PlanRun, base_s: float, end_s: float) -> Leg:
        return Leg(plan.n, plan.memory_mb, base_s + self.start_s, end_s - self.start_s,
                   self.iterations, self.failures)

    def observation(self, plan: PlanRun, end_s: float) -> Observation:
        n = plan.n
        return Observation(
            functions=n, memory_mb=plan.memory_mb,
            compute_s=np.concatenate(self.compute) if self.compute else np.empty((0, n)),
            communication_s=np.concatenate(self.communication) if self.communication
            else np.empty(0),
            failures=self.failures, exposure_s=n * (end_s - self.start_s),
        )


def _check(
    belief: object, truth: object, true_noise: object, noise: object, budget_s: object,
    rng: object, max_functions: object,
) -> None:
    """One-line `InputError`s for inputs the run cannot use (`InstanceError` for the
    instances)."""
    for name, value in (("belief", belief), ("truth", truth)):
        if not isinstance(value, Instance):
            raise InstanceError(
                f"`{name}` must be a lambdadnn Instance (load_instance), got {brief(value)}"
            )
    assert isinstance(belief, Instance) and isinstance(truth, Instance)
    if truth.workload != belief.workload:
        raise InstanceError(
            f"`truth` trains another workload than `belief` ({brief(truth.name)} vs "
            f"{brief(belief.name)}); perturb the belief with simulator.truth.Truth.instance"
        )
    for name, value in (("true_noise", true_noise), ("noise", noise)):
        if not isinstance(value, NoiseModel):
            raise InputError(
                f"`{name}` must be a lambdadnn.models.noise.NoiseModel, got {brief(value)}"
            )
    number("budget_s", budget_s, error=InputError,
           need="a positive number of seconds (the deadline less the wait)")
    if not isinstance(rng, np.random.Generator):
        raise InputError(
            f"`rng` must be a numpy Generator (numpy.random.default_rng(seed)), got {brief(rng)}"
        )
    if max_functions is not None:
        integer("max_functions", max_functions, error=InputError, floats=False,
                need="a positive integer or None")


def capped(instance: Instance, max_functions: int) -> Instance:
    """The instance with at most `max_functions` functions (a pool's size)."""
    if instance.max_functions <= max_functions:
        return instance
    return dataclasses.replace(
        instance, limits=dataclasses.replace(instance.limits, max_functions=max_functions)
    )


def run_adaptive(
    belief: Instance, truth: Instance, true_noise: NoiseModel, *, guarantee: float | None,
    noise: NoiseModel, budget_s: float, rng: np.random.Generator,
    max_functions: int | None = None,
) -> AdaptiveRun:
    """Run one job under a `Controller` to its end (module docstring).

    `belief` and `noise` are what the controller plans from, at `guarantee`; `truth` and
    `true_noise` what the engine runs (`simulator.truth`); `budget_s` the seconds from the
    run's start to its deadline; `max_functions` caps every plan (the pool's size).
    Raises `InputError` for unusable inputs and `NoValidPlanError` when no plan is valid.
    """
    _check(belief, truth, true_noise, noise, budget_s, rng, max_functions)
    if max_functions is not None:
        belief = capped(belief, int(max_functions))
    controller = Controller.start(belief, guarantee=guarantee, noise=noise,
                                  deadline_s=float(budget_s))
    batch, total = controller.global_batch, controller.iterations
    plan = PlanRun(truth, controller.functions, controller.memory_mb, true_noise, rng)
    steps = plan.steps()
    records: list[tuple[int, JobRun]] = []
    legs: list[Leg] = []
    base_iteration, base_s = 0, 0.0  # where the plan under way started
    leg = _Leg(0.0)

    def check(done: int, at_s: float) -> bool:
        """A check `at_s` into the plan under way, `done` iterations into the run: True when
        the controller changed the plan, which then runs from here."""
        nonlocal plan, steps, leg, base_iteration, base_s
        decision = controller.decide(iterations_done=done, elapsed_s=base_s + at_s,
                                     observation=leg.observation(plan, at_s))
        legs.append(leg.close(plan, base_s, at_s))
        leg = _Leg(at_s)
        if not decision.changed:
            plan.save(done - base_iteration)
            return False
        record = plan.halt(at_s, done - base_iteration)
        records.append((plan.n, record))
        base_iteration, base_s = done, base_s + record.time_s
        plan = PlanRun(
            remaining_instance(truth, batch, total - done), decision.functions,
            decision.memory_mb, true_noise, rng.spawn(1)[0],
        )
        steps = plan.steps(resumed=True)
        leg = _Leg(0.0)
        return True

    while True:
        try:
            step = next(steps)
        except StopIteration as end:
            record: JobRun = end.value
            legs.append(leg.close(plan, base_s, record.time_s))
            records.append((plan.n, record))
            break
        if isinstance(step, Crashed):  # work since the checkpoint is lost: check at once
            leg.failures += 1
            check(base_iteration + step.resume_from, step.at_s)
            continue
        position = 0  # rows of `step` already in a leg
        while position < len(step.ends_s):
            stop = controller.last.next_check_iteration - base_iteration - step.first
            if not position < stop <= len(step.ends_s) or step.first + stop >= plan.total:
                leg.add(step, slice(position, None))
                break
            leg.add(step, slice(position, stop))
            if check(base_iteration + step.first + stop,
                     step.offset_s + float(step.ends_s[stop - 1])):
                break
            position = stop
    runs = [record for _, record in records]
    return AdaptiveRun(
        time_s=sum(r.time_s for r in runs),
        cost_usd=sum(r.cost_usd for r in runs),
        gb_seconds=sum(r.gb_seconds for r in runs),
        iterations=sum(r.iterations for r in runs),
        lost_iterations=sum(r.lost_iterations for r in runs),
        invocations=sum(r.invocations for r in runs),
        restarts=sum(r.restarts for r in runs),
        switches=len(runs) - 1,
        failures=sum(r.failures for r in runs),
        finished=runs[-1].finished,
        stages=tuple((functions, r.time_s) for functions, r in records),
        legs=tuple(legs),
        decisions=tuple(controller.decisions),
    )
