"""One run loop for every backend: rounds, restarts, adaptive switches and the report.

A launch is a list of rounds. The orchestrator starts a round on the backend, looks at it
every poll (reporting progress, and asking the controller at its checks, which may halt the
group for a change of plan), and when the round ends short of done it starts the next one:
the same plan again from the checkpoint after a timeout or a crash, or the controller's new
n × m after a halt. It gives up on a failure no relaunch can mend, and on relaunches that
stop making progress. Whatever happens, the backend's `stop` runs last, so nothing outlives
a launch; the report is built before it, while the backend can still say what it measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from ..inputs.files import brief
from . import LaunchError
from .adaptive import AdaptiveRun, Planner
from .backend import Backend, Observed
from .channel import channel_failed
from .spec import LaunchReport, LaunchSpec, Prediction, RunFailed, default_margin
from .timings import summarise
from .workloads import DEFAULT_WORKLOAD, check_workload

__all__ = ["DEFAULTS", "REAL_TIME", "SILENT", "STALL_LIMIT", "Clock", "Hooks", "RunOptions",
           "orchestrate"]

STALL_LIMIT = 3  # relaunches in a row that resume from no later checkpoint: give up


@dataclass(frozen=True)
class RunOptions:
    """How the workers run, on any backend.

    `timeout_s` is each invocation's limit; workers stop to checkpoint `timeout_margin_s`
    before it (None: `default_margin`). `workload` is a shipped name or
    `package.module:factory`, its factory called with `seed`. `max_restarts` bounds the
    relaunches of the same plan (None: no bound but the stall limit).
    """

    timeout_s: float = 900.0
    timeout_margin_s: float | None = None
    checkpoint_every: int = 20
    seed: int = 0
    workload: str = DEFAULT_WORKLOAD
    max_restarts: int | None = None

    def __post_init__(self) -> None:
        limit = self.timeout_s
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (
            math.isfinite(limit) and limit > 0
        ):
            raise LaunchError(
                f"`timeout_s` {brief(limit)} is no invocation limit: give seconds in (0, 900] "
                "for Lambda, any finite number of seconds > 0 locally"
            )
        margin = self.margin_s
        if not 0 <= margin < limit:
            raise LaunchError(
                f"`timeout_margin_s` {brief(margin)} must be at least 0 and under the "
                f"invocation limit {limit:g} s: lower it, or leave it out for "
                f"{default_margin(limit):g}"
            )
        if self.checkpoint_every < 1:
            raise LaunchError(f"`checkpoint_every` must be at least 1, got "
                              f"{brief(self.checkpoint_every)}")

    @property
    def margin_s(self) -> float:
        return float(default_margin(self.timeout_s) if self.timeout_margin_s is None
                     else self.timeout_margin_s)

    def settings(self) -> dict[str, Any]:
        """What every worker event carries of these options."""
        return {"checkpoint_every": self.checkpoint_every, "timeout_margin_s": self.margin_s,
                "seed": self.seed, "workload": self.workload}


@dataclass(frozen=True)
class Hooks:
    """Who hears about a run: `progress(iteration, total)` as the channel advances (it steps
    back to the checkpoint after a failed round), `warn(line)` once for each warning."""

    progress: Callable[[int, int], None] | None = None
    warn: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Clock:
    """The run's clocks: `monotonic` for durations and the deadline, `wall` for the launch
    times that the workers' own timestamps are compared with (tests inject both)."""

    monotonic: Callable[[], float] = field(default=time.monotonic)
    wall: Callable[[], float] = field(default=time.time)


DEFAULTS, SILENT, REAL_TIME = RunOptions(), Hooks(), Clock()


def orchestrate(
    spec: LaunchSpec, backend: Backend, *, options: RunOptions = DEFAULTS,
    hooks: Hooks = SILENT, controller: Planner | None = None, clock: Clock = REAL_TIME,
) -> LaunchReport:
    """Run `spec` on `backend` to its last iteration (see the module docstring).

    With a `controller` the run is checked where its decisions say; a change of plan halts
    the group at a checkpoint and resumes it at the new n × m with the same global batch.
    Raises `RunFailed` (carrying the report) when the run fails: a fatal worker failure,
    relaunches that stop progressing, or a result the backend does not accept; `LaunchError`
    when more than `options.max_restarts` relaunches were needed or the backend refuses.
    """
    run = AdaptiveRun(spec, controller, clock=clock.monotonic)
    check_workload(options.workload, options.seed)
    for line in backend.warnings:
        if hooks.warn is not None:
            hooks.warn(line)
    finished = False
    try:
        try:
            report = _rounds(spec, backend, run, options, hooks, clock)
            finished = report.error is None
        finally:
            backend.stop(finished=finished)
    except redis.RedisError as error:
        raise channel_failed(backend.redis_url, error) from None
    if report.error is not None:
        raise RunFailed(report)
    return report


def _rounds(
    spec: LaunchSpec, backend: Backend, run: AdaptiveRun, options: RunOptions, hooks: Hooks,
    clock: Clock,
) -> LaunchReport:
    """The run's rounds on a set-up backend, and the report of them."""
    first = backend.setup()
    event = run.event(spec.worker_event(job=backend.job, redis_url=backend.redis_url,
                                        settings=options.settings()))
    reported = -1

    def progress(iteration: int) -> None:
        nonlocal reported
        if hooks.progress is not None and iteration != reported:
            reported = iteration
            hooks.progress(iteration, spec.iterations)

    run.begin(first)
    launched: list[float] = []  # the wall-clock launch time of each round
    restarts, best, stalls = 0, -1, 0
    failed: str | None = None
    while True:
        launched.append(clock.wall())
        run.launched(launched[-1])
        backend.start(event)
        seen = _follow(backend, run, progress)
        if seen.done:
            break
        if seen.fatal is not None:  # a relaunch would meet it again
            failed = f"job {backend.job} failed: {seen.fatal}"
            break
        decision = run.pending
        if decision is None and options.max_restarts is not None \
                and restarts >= options.max_restarts:
            raise LaunchError(
                f"the job was re-invoked {restarts} times and is still not done (at iteration "
                f"{seen.iteration:,} of {spec.iterations:,}): training on {backend.name} is "
                "much slower than the plan predicts; profile the workload again and re-solve"
            )
        run.failed(seen.crashes)
        round_ = backend.channel.record_restart()
        resumed = backend.rewind(seen.iteration)
        best, stalls = (resumed, 0) if resumed > best else (best, stalls + 1)
        if decision is None:  # a timeout or a crash: the same plan again
            restarts += 1
        else:  # a change of plan: the same job and checkpoint, n ranks at m MB
            new = run.switch(decision, resumed, round_)
            backend.channel.set_halt(False)
            backend.reconfigure(new.functions, new.memory_mb)
            event = run.event(event)
        if stalls >= STALL_LIMIT:
            failed = (f"job {backend.job}: {stalls} relaunches in a row resumed from iteration "
                      f"{resumed} without progress; last failure: {seen.failure or 'none'}")
            break
    measured = clock.monotonic() - run.began
    channel = backend.channel
    result, records = channel.result(), channel.timings()
    iterations = (int(result["iterations"]) if result is not None and "iterations" in result
                  else int(channel.progress().get("iteration", spec.iterations)))
    if failed is None:
        failed = backend.verdict(result)
    if failed is None:
        progress(iterations)
    run.close(iterations)
    return LaunchReport.of(
        spec, backend=backend.name, workload=options.workload, iterations=iterations,
        restarts=restarts, wall_time_s=measured, result=None if failed else result,
        runs_on=backend.runs_on,
        prediction=Prediction.of(spec, backend=backend.name, workload=options.workload,
                                 timeout_s=options.timeout_s,
                                 timeout_margin_s=options.margin_s),
        timings=summarise(records, launched), throttled_share=backend.throttled_share(),
        rounds=run.to_list(), error=failed,
    )


def _follow(
    backend: Backend, run: AdaptiveRun, progress: Callable[[int], None]
) -> Observed:
    """Look at the round every poll until it is done or over; at the controller's checks,
    halt the group (a change of plan) or have the next update checkpointed."""
    while True:
        seen = backend.observe(halting=run.pending is not None)
        progress(seen.iteration)
        if seen.done:
            return seen
        request = run.poll(seen.iteration, backend.channel.timings)
        if request == "halt":
            backend.channel.set_halt(True)
        elif request == "checkpoint":
            backend.channel.request_checkpoint()
        if seen.over:
            return seen

