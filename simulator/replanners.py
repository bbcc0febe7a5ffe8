"""The re-planners run in the independent world: lambdadnn's controller and an autoscaler.

* `ControllerReplanner` is `lambdadnn-adaptive`: `solve()`'s plan from the belief, then the
  controller of `solver.adaptive` at every check it schedules, fed the leg's measured compute
  and exchange (through the world's measurement noise) as the launchers feed it.
* `ScaleOutReplanner` is `replan-heuristic`, what many autoscalers do: start from the same
  plan, check once an epoch, and when the job is behind the linear schedule (a smaller share of
  the samples done than of the deadline gone) add a fixed step of functions, a quarter of the
  first plan's (at least one), at the same memory. It never scales back in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..models.noise import NoiseModel
from ..solver.adaptive import Controller, Decision, Observation
from ..solver.errors import NoValidPlanError
from ..solver.instance import Instance
from .adaptive import capped
from .replan import Situation, Step

__all__ = ["ControllerReplanner", "ScaleOutReplanner"]

SCALE_OUT_SHARE = 0.25  # of the first plan's functions, added each time the job is behind


@dataclass
class ControllerReplanner:
    """`solver.adaptive.Controller` as a `Replanner` (module docstring)."""

    instance: Instance
    guarantee: float | None
    noise: NoiseModel
    controller: Controller | None = field(default=None, init=False)

    def first(self, situation: Situation) -> Step | None:
        try:
            self.controller = Controller.start(
                capped(self.instance, situation.max_functions), guarantee=self.guarantee,
                noise=self.noise, deadline_s=situation.deadline_s,
            )
        except NoValidPlanError:
            return None
        return self._step(self.controller.last, 0.0)

    def next(self, situation: Situation) -> Step:
        controller, leg = self.controller, situation.last
        assert controller is not None, "first() runs before next()"
        observation = None if leg is None or leg.compute_s.shape[0] == 0 else Observation(
            functions=leg.functions, memory_mb=leg.memory_mb, compute_s=leg.compute_s,
            communication_s=leg.exchange_s, failures=leg.failures, exposure_s=leg.exposure_s,
            setup_s=leg.setup_s, rounds=leg.rounds,
        )
        done = situation.samples_done / controller.global_batch
        decision = controller.decide(iterations_done=done, elapsed_s=situation.elapsed_s,
                                     observation=observation)
        return self._step(decision, done)

    def _step(self, decision: Decision, done: float) -> Step:
        assert self.controller is not None
        batch = self.controller.global_batch
        return Step(decision.functions, decision.memory_mb,
                    max(1.0, decision.next_check_iteration - done) * batch, batch)


@dataclass
class ScaleOutReplanner:
    """`replan-heuristic` (module docstring): its first plan is given, `functions` ×
    `memory_mb`; it re-checks once an epoch."""

    functions: int
    memory_mb: int
    samples_per_epoch: float
    current: int = field(default=0, init=False)

    def first(self, situation: Situation) -> Step | None:
        self.current = self.functions
        return Step(self.functions, self.memory_mb, self.samples_per_epoch)

    def next(self, situation: Situation) -> Step:
        done = situation.samples_done / situation.total_samples
        gone = situation.elapsed_s / situation.deadline_s
        if done < gone:
            step = max(1, math.ceil(SCALE_OUT_SHARE * self.functions))
            self.current = min(self.current + step, situation.max_functions)
        return Step(self.current, self.memory_mb, self.samples_per_epoch)

