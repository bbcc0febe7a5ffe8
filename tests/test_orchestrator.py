"""The orchestrator over an in-memory backend: rounds, switches, failures and the report.

No process, Redis or AWS call: `FakeBackend` implements `launcher.backend.Backend` with a
channel in a dict and a clock that moves one second per look, so every path of the run loop
is exercised in milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.backend import Backend, Observed
from lambdadnn.launcher.orchestrator import STALL_LIMIT, Clock, Hooks, RunOptions, orchestrate
from lambdadnn.launcher.profile import Capacity
from lambdadnn.launcher.spec import LaunchSpec, RunFailed
from tests.test_adaptive_launch import ITERATIONS, Script

SPEC = LaunchSpec(functions=2, memory_mb=1769, local_batch=16, iterations=ITERATIONS,
                  time_s=20.0, restarts=0, platform="aws-lambda-x86_64",
                  architecture="x86_64", deadline_s=30.0)


@pytest.fixture(autouse=True)
def _no_workload_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workload check builds the network with torch (`test_workloads` covers it)."""
    monkeypatch.setattr("lambdadnn.launcher.orchestrator.check_workload", lambda *_args: None)


class FakeChannel:
    """The job's channel: the live iteration, the halt flag and the restarts, in memory."""

    def __init__(self) -> None:
        self.iteration, self.halt, self.restarts = 0, False, 0
        self.checkpoints: list[int] = []

    def progress(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "done": self.iteration >= ITERATIONS}

    def timings(self) -> list[dict[str, Any]]:
        return []

    def result(self) -> dict[str, Any] | None:
        if self.iteration < ITERATIONS:
            return None
        return {"final_loss": 0.25, "test_accuracy": 0.9, "iterations": self.iteration}

    def record_restart(self) -> int:
        self.restarts += 1
        return self.restarts

    def set_halt(self, on: bool) -> None:
        self.halt = on

    def request_checkpoint(self) -> None:
        self.checkpoints.append(self.iteration)


class FakeBackend:
    """Ranks that train one iteration per look (a second on the fake clock) and stop when
    halted; a round times out after `round_looks` looks (resuming from where it stopped),
    and the run breaks (`fail`) or is interrupted (`interrupt`) at look `at`."""

    name = "fake"
    job = "job-fake"
    redis_url = "redis://fake"
    runs_on = "memory"
    warnings: tuple[str, ...] = ("a fake backend",)

    def __init__(
        self, *, round_looks: int = 1_000, at: int | None = None,
        fail: BaseException | None = None, fatal: str | None = None,
        stuck: bool = False,
    ) -> None:
        self.channel = FakeChannel()
        self.now = 0.0
        self.round_looks, self.at, self.fail, self.fatal, self.stuck = (
            round_looks, at, fail, fatal, stuck)
        self.looks = self.looks_in_round = 0
        self.running = 0  # ranks alive
        self.events: list[Mapping[str, Any]] = []
        self.reconfigured: list[tuple[int, int]] = []
        self.stopped: list[bool] = []

    def clock(self) -> float:
        return self.now

    def setup(self) -> int:
        return 0

    def start(self, event: Mapping[str, Any]) -> None:
        self.events.append(event)
        self.running, self.looks_in_round = int(event["workers"]), 0

    def observe(self, *, halting: bool) -> Observed:
        self.now += 1.0
        self.looks += 1
        self.looks_in_round += 1
        if self.looks == self.at:
            if self.fatal is not None:
                self.running = 0
                return Observed(self.channel.iteration, over=True, crashes=1, fatal=self.fatal,
                                failure=self.fatal)
            assert self.fail is not None
            raise self.fail
        channel = self.channel
        if self.running and not self.stuck:
            channel.iteration += 1
            if channel.halt:
                self.running = 0
        if channel.iteration >= ITERATIONS:
            self.running = 0
            return Observed(channel.iteration, done=True)
        if self.running == 0 or self.looks_in_round >= self.round_looks:
            self.running = 0
            return Observed(channel.iteration, over=True)
        return Observed(channel.iteration)

    def rewind(self, iteration: int) -> int:
        return iteration

    def reconfigure(self, functions: int, memory_mb: int) -> None:
        self.reconfigured.append((functions, memory_mb))

    def throttled_share(self) -> float | None:
        return None

    def verdict(self, result: Mapping[str, Any] | None) -> str | None:
        return None if result is not None else "no result"

    def stop(self, *, finished: bool) -> None:
        self.running = 0
        self.stopped.append(finished)

    def capacity(self) -> Capacity:
        raise NotImplementedError


def run(backend: FakeBackend, spec: LaunchSpec = SPEC, **options: Any) -> Any:
    seen: list[int] = []
    warned: list[str] = []
    protocol: Backend = backend  # the fake is a Backend
    report = orchestrate(
        spec, protocol, options=RunOptions(**options),
        hooks=Hooks(progress=lambda i, _total: seen.append(i), warn=warned.append),
        clock=Clock(monotonic=backend.clock, wall=backend.clock),
    )
    return report, seen, warned


def test_a_static_run_is_one_round_to_the_last_iteration() -> None:
    backend = FakeBackend()
    report, seen, warned = run(backend)
    assert report.status == "done" and report.backend == "fake"
    assert report.iterations == ITERATIONS and report.restarts == 0
    assert report.invocations == 2 and len(report.rounds) == 1
    assert seen == list(range(1, ITERATIONS + 1))  # each iteration once, the last one too
    assert warned == ["a fake backend"]
    assert [event["workers"] for event in backend.events] == [2]
    assert backend.stopped == [True] and backend.running == 0
    assert report.final_loss == 0.25 and report.runs_on == "memory"


def test_the_report_says_whether_the_deadline_was_met() -> None:
    report, _seen, _warned = run(FakeBackend())
    assert report.measured_time_s == ITERATIONS  # one second a look
    assert (report.deadline_s, report.met, report.late_s) == (30.0, True, 0.0)
    report, _seen, _warned = run(FakeBackend(), _with_deadline(20.0))
    assert (report.deadline_s, report.met, report.late_s) == (20.0, False, 4.0)
    as_json = report.to_dict()
    assert (as_json["deadline_s"], as_json["met"], as_json["late_s"]) == (20.0, False, 4.0)
    report, _seen, _warned = run(FakeBackend(), _with_deadline(None))
    assert (report.deadline_s, report.met, report.late_s) == (None, None, None)


def _with_deadline(deadline_s: float | None) -> LaunchSpec:
    return LaunchSpec(functions=2, memory_mb=1769, local_batch=16, iterations=ITERATIONS,
                      time_s=20.0, restarts=0, platform="aws-lambda-x86_64",
                      architecture="x86_64", deadline_s=deadline_s)


def test_a_timed_out_round_is_relaunched_from_where_it_stopped() -> None:
    backend = FakeBackend(round_looks=10)
    report, seen, _warned = run(backend)
    assert report.status == "done" and report.restarts == 2
    assert backend.channel.restarts == 2 and len(backend.events) == 3
    assert report.invocations == 6 and seen[-1] == ITERATIONS


def test_relaunches_are_bounded() -> None:
    backend = FakeBackend(round_looks=5)
    with pytest.raises(LaunchError, match=r"re-invoked 2 times .*on fake"):
        run(backend, max_restarts=2)
    assert backend.stopped == [False] and backend.running == 0


def test_relaunches_without_progress_fail_the_run_with_its_report() -> None:
    backend = FakeBackend(round_looks=3, stuck=True)
    with pytest.raises(RunFailed, match=f"{STALL_LIMIT} relaunches in a row") as failure:
        run(backend)
    assert failure.value.report.status == "failed"
    assert failure.value.report.met is None  # a failed run kept no deadline
    assert backend.stopped == [False]


def test_an_adaptive_run_halts_and_reconfigures_at_the_controllers_check() -> None:
    backend = FakeBackend()
    script = Script((2, 1769), [(6, 3, 1769)])
    report = orchestrate(SPEC, backend, controller=script,
                         clock=Clock(monotonic=backend.clock, wall=backend.clock))
    assert backend.reconfigured == [(3, 1769)]
    assert [event["workers"] for event in backend.events] == [2, 3]
    assert {event["global_batch"] for event in backend.events} == {32}
    assert not backend.channel.halt  # cleared for the new group
    rounds = report.rounds
    assert [(r["functions"], r["memory_mb"]) for r in rounds] == [(2, 1769), (3, 1769)]
    assert rounds[0]["iterations_to"] == rounds[1]["iterations_from"] == 7
    assert report.restarts == 0 and report.invocations == 5  # a switch is no restart
    assert backend.stopped == [True]


@pytest.mark.parametrize("error", [LaunchError("the backend lost its workers"),
                                   KeyboardInterrupt()])
def test_a_run_that_breaks_mid_way_still_stops_its_backend(error: BaseException) -> None:
    backend = FakeBackend(at=5, fail=error)
    with pytest.raises(type(error)):
        run(backend)
    assert backend.stopped == [False] and backend.running == 0


def test_a_fatal_failure_ends_the_run_at_once_with_its_report() -> None:
    backend = FakeBackend(at=5, fatal="worker 1: the loss is NaN")
    with pytest.raises(RunFailed, match="job job-fake failed: worker 1: the loss") as failure:
        run(backend)
    assert len(backend.events) == 1  # no relaunch
    assert failure.value.report.final_loss is None
    assert backend.stopped == [False]


def test_options_are_checked_before_anything_starts() -> None:
    with pytest.raises(LaunchError, match=r"`timeout_margin_s` 10\.0 must be"):
        RunOptions(timeout_s=10, timeout_margin_s=10)
    with pytest.raises(LaunchError, match="`timeout_s` nan is no invocation limit"):
        RunOptions(timeout_s=float("nan"))
    with pytest.raises(LaunchError, match="`checkpoint_every` must be at least 1, got 0"):
        RunOptions(checkpoint_every=0)
