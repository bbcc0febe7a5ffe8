"""`lambdadnn launch --adaptive`: re-provisioning a running job without losing or repeating work.

The local runs are real (PyTorch workers around a redis-server) but tiny; a scripted planner
stands in for the controller, so the changes of plan happen where the test says. The AWS path
runs against the moto server of tests/test_aws.py, which records invocations but runs none:
the channel is faked there, and the test checks the calls between the rounds.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.adaptive import STATIC_REASON, AdaptiveRun
from lambdadnn.launcher.aws import AwsTarget, run_aws
from lambdadnn.launcher.channel import ParameterChannel
from lambdadnn.launcher.local import run_local
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec, Prediction
from lambdadnn.launcher.timings import summarise
from lambdadnn.solver.adaptive import Controller, Decision, Observation
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.pipeline import solve
from tests.hang_guard import HANG_GUARD_S
from tests.test_aws import (  # noqa: F401  (the moto server's fixtures)
    REDIS_URL,
    FakeClock,
    Recording,
    aws_env,
    client,
    following,
    moto_endpoint,
    role_arn,
    target,
)

pytestmark = pytest.mark.real  # real workers, a redis-server and a moto server

ITERATIONS = 24
SPEC = LaunchSpec(functions=2, memory_mb=1769, local_batch=16, iterations=ITERATIONS,
                  time_s=60.0, restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")
RUN = {"checkpoint_every": 4, "workload": "digits-mlp", "seed": 5}


def _decision(action: str, functions: int, memory_mb: int, next_check: int) -> Decision:
    return Decision(
        action=action, reason=f"scripted: {functions} × {memory_mb} MB",
        at_iteration=0.0, at_s=0.0, functions=functions, memory_mb=memory_mb, previous=None,
        local_batch=32 / functions, predicted_s=1.0, cost_usd=0.0, slack_s=0.0, p_meet=1.0,
        rate_ratio=1.0, communication_ratio=1.0, compute_cv=0.0, failure_rate_per_hour=0.0,
        next_check_iteration=next_check,
    )


class Script:
    """A planner that switches to the given plans at the given checks, whatever it observes."""

    def __init__(self, start: tuple[int, int], changes: list[tuple[int, int, int]]) -> None:
        self.changes = changes  # (check at iteration, functions, memory_mb)
        self.decisions = [_decision("start", *start, changes[0][0])]
        self.calls: list[tuple[float, Observation | None]] = []

    @property
    def last(self) -> Decision:
        return self.decisions[-1]

    def decide(
        self, *, iterations_done: float, elapsed_s: float, observation: Observation | None = None,
    ) -> Decision:
        self.calls.append((iterations_done, observation))
        _at, functions, memory_mb = self.changes.pop(0)
        following = self.changes[0][0] if self.changes else ITERATIONS
        self.decisions.append(_decision("switch", functions, memory_mb, following))
        return self.decisions[-1]


@pytest.fixture(scope="module")
def reference(redis_url: str) -> LaunchReport:
    return run_local(SPEC, redis_url=redis_url, **RUN)


def _assert_contiguous(report: LaunchReport, plans: list[tuple[int, int]]) -> None:
    """The rounds ran the plans in order and cover 0..ITERATIONS without a gap or overlap."""
    rounds = report.rounds
    assert [(r["functions"], r["memory_mb"]) for r in rounds] == plans
    assert rounds[0]["iterations_from"] == 0 and rounds[-1]["iterations_to"] == ITERATIONS
    for before, after in itertools.pairwise(rounds):
        assert before["iterations_to"] == after["iterations_from"]
        assert after["action"] == "switch" and after["reason"].startswith("scripted")
    assert report.iterations == ITERATIONS
    assert report.invocations == sum(functions for functions, _m in plans)
    assert report.restarts == 0  # a change of plan is no restart


def test_a_static_launch_reports_its_one_round(reference: LaunchReport) -> None:
    (only,) = reference.rounds
    assert only["reason"] == STATIC_REASON and only["checks"] == []
    assert (only["iterations_from"], only["iterations_to"]) == (0, ITERATIONS)
    assert only["invocations"] == reference.invocations == 2
    json.dumps(reference.to_dict())


def test_a_new_memory_at_the_same_n_trains_bit_identically(
    reference: LaunchReport, redis_url: str
) -> None:
    """Halting at a checkpoint and resuming at the same n replays the very same arithmetic."""
    script = Script((2, 1769), [(6, 2, 1000)])
    seen: list[int] = []
    report = run_local(SPEC, redis_url=redis_url, controller=script,
                       progress=lambda iteration, _total: seen.append(iteration),
                       **RUN)
    _assert_contiguous(report, [(2, 1769), (2, 1000)])
    assert seen == sorted(seen)  # a halt resumes where it stopped: progress never steps back
    assert report.final_loss == reference.final_loss
    assert report.test_accuracy == reference.test_accuracy
    (done, observed), = script.calls
    assert done >= 6 and observed is not None and observed.functions == 2
    assert 0 < observed.iterations <= done and observed.compute_s.shape[1] == 2


def test_a_new_n_trains_on_the_same_global_batches(
    reference: LaunchReport, redis_url: str
) -> None:
    """2 → 3 ranks: the same 32-sample batches, split 11/11/10 and weighted 33/32, 33/32,
    30/32. The update is the same mean gradient, but not bit for bit: each rank's float32
    mean over its own slice, scaled and averaged, rounds differently from the two-rank
    grouping (about one float32 ulp per gradient entry, 1e-8 here). Over a few dozen
    iterations that stays far below 1e-5 of the loss, which is what the tolerance allows."""
    script = Script((2, 1769), [(6, 3, 1000)])
    report = run_local(SPEC, redis_url=redis_url, controller=script,
                       **RUN)
    _assert_contiguous(report, [(2, 1769), (3, 1000)])
    assert report.rounds[1]["local_batch"] == pytest.approx(32 / 3)
    assert report.final_loss == pytest.approx(reference.final_loss, rel=1e-5)
    with redis.Redis.from_url(redis_url) as connected:
        assert not list(connected.scan_iter(match="lambdadnn:local-*"))


def test_the_global_batch_does_not_depend_on_the_number_of_ranks() -> None:
    from lambdadnn.launcher.worker import _batch

    for iteration in range(3):
        whole, weight = _batch(1000, 32, 7, iteration, 0, 1)
        assert weight == 1.0
        for workers in (2, 3, 5):
            slices = [_batch(1000, 32, 7, iteration, rank, workers) for rank in range(workers)]
            np.testing.assert_array_equal(np.concatenate([s for s, _w in slices]), whole)
            sizes = [s.size for s, _w in slices]
            assert max(sizes) - min(sizes) <= 1
            # Σ_r (b_r·n/B) g_r / n = Σ_r b_r g_r / B: the mean gradient over the batch.
            assert math.fsum(w for _s, w in slices) / workers == 1.0
            assert all(w == 1.0 for _s, w in slices) == (32 % workers == 0)


@pytest.fixture
def channels(redis_url: str) -> Iterator[list[ParameterChannel]]:
    with redis.Redis.from_url(redis_url) as connected:
        job = f"test-{uuid.uuid4().hex[:8]}"
        group = [ParameterChannel(connected, job, workers=2) for _ in range(2)]
        group[0].initialise(np.zeros(4), lr=0.1, momentum=0.0)
        yield group
        group[0].cleanup()


def _exchange(group: list[ParameterChannel], iteration: int) -> list[bool]:
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(c.exchange, rank, iteration, np.ones(4), 0.0)
                   for rank, c in enumerate(group)]
        for future in futures:
            future.result(timeout=HANG_GUARD_S)
    return [c.halted for c in group]


def test_the_launcher_halts_every_rank_at_the_same_iteration(
    channels: list[ParameterChannel],
) -> None:
    assert _exchange(channels, 0) == [False, False]
    channels[0].set_halt(True)
    assert _exchange(channels, 1) == [True, True]
    channels[0].set_halt(False)
    assert _exchange(channels, 2) == [False, False]
    assert channels[1].parameters()[0] == 3  # every update applied once


@pytest.mark.parametrize(("platform", "says"), [
    ({}, "sets no `max_vcpu`, .*, or pass `--oversubscribe`$"),
    ({"max_vcpu": 1024}, "allows 1024 vCPU, more than this machine's .*--oversubscribe`$"),
    ({"max_vcpu": 1, "max_functions": 65},
     "allows up to 65 functions, more than the 64 workers .* measured here$"),
])
def test_local_adaptive_refuses_a_plan_it_could_switch_beyond_this_machine(
    platform: dict[str, Any], says: str
) -> None:
    """Every plan the controller may pick must fit here: the platform's limits are checked
    up front, naming the one that does not (Lambda's platform sets no vCPU limit)."""
    plan = solve("instances/mobilenet-cifar10.yaml")
    instance = plan.solved_from
    limits = {"max_functions": platform.pop("max_functions", 64)}
    instance = dataclasses.replace(
        instance, platform=dataclasses.replace(instance.platform, **platform),
        limits=dataclasses.replace(instance.limits, **limits),
    )
    spec = dataclasses.replace(LaunchSpec.from_plan(plan), instance=instance)
    with pytest.raises(LaunchError, match=rf"^`--adaptive` may switch to any plan of .*{says}"):
        run_local(spec, controller=Controller.of(spec))


def test_a_specs_controller_keeps_the_plans_batch_deadline_and_guarantee() -> None:
    plan = solve("instances/mobilenet-cifar10.yaml", guarantee=0.99)
    spec = LaunchSpec.from_mapping(json.loads(json.dumps(plan.to_dict())))
    assert spec.guarantee == 0.99 and spec.deadline_s == plan.deadline_s
    controller = Controller.of(spec)
    assert (controller.functions, controller.memory_mb) == (spec.functions, spec.memory_mb)
    assert controller.global_batch == spec.functions * spec.local_batch
    assert controller.iterations == spec.iterations and controller.guarantee == 0.99
    assert controller.deadline_s == plan.deadline_s
    with pytest.raises(LaunchError, match="carries none"):
        Controller.of(LaunchSpec.from_mapping({**plan.to_dict(), "instance_spec": None}))
    with pytest.raises(InstanceError, match="`guarantee`"):
        LaunchSpec.from_mapping({**plan.to_dict(), "guarantee": 1.0})


def test_adaptive_run_observes_each_timed_iteration_once() -> None:
    run = AdaptiveRun(SPEC, Script((2, 1769), [(3, 2, 1769)]))

    def records(first: int, count: int) -> list[dict[str, Any]]:
        return [{"round": 0, "rank": rank, "first_iteration": first,
                 "compute_s": [1.0 + rank] * count, "exchange_s": [0.5 - 0.1 * rank] * count}
                for rank in range(2)]

    first = run.observation(records(0, 4))
    np.testing.assert_array_equal(first.compute_s, [[1.0, 2.0]] * 4)
    np.testing.assert_allclose(first.communication_s, [0.4] * 4)  # the least exchange
    assert run.observation(records(0, 4)).iterations == 0  # nothing new
    assert run.observation(records(0, 6)).iterations == 2


def test_adaptive_run_measures_each_rounds_set_up_once() -> None:
    """A round's set-up, from its launch to its last rank's first iteration, reaches the
    controller once, at the first check after that rank started; a round not started yet
    waits for a later check."""
    run = AdaptiveRun(SPEC, Script((2, 1769), [(3, 2, 1769)]))
    run.launched(100.0)

    def records(first_at: list[float | None]) -> list[dict[str, Any]]:
        return [{"round": 0, "rank": rank, "first_iteration": 0, "first_at": at,
                 "compute_s": [1.0], "exchange_s": [0.1]}
                for rank, at in enumerate(first_at)]

    assert run.observation(records([None, None])).rounds == 0
    seen = run.observation(records([103.0, 104.5]))
    assert (seen.rounds, seen.setup_s) == (1, pytest.approx(4.5))
    assert run.observation(records([103.0, 104.5])).rounds == 0  # counted once


# -- AWS ----------------------------------------------------------------------------------


class FakeChannel:
    """The channel as the launcher sees it, with workers that train one iteration per poll,
    stop when halted and record their timings (the last one `returned`)."""

    def __init__(self, total: int) -> None:
        self.total, self.iteration, self.halt = total, 0, False
        self.workers = 0
        self.round = -1
        self.records: list[dict[str, Any]] = []
        self.running = False

    def invoked(self, workers: int) -> None:
        self.round += 1
        self.workers, self.running = workers, True

    def progress(self) -> dict[str, Any]:
        if self.running and self.iteration < self.total:
            self.iteration += 1
            if self.halt:
                self.running = False
        self.records = [r for r in self.records if r["round"] != self.round]
        self.records += [{"round": self.round, "rank": rank, "first_iteration": 0,
                          "compute_s": [1.0] * self.iteration,
                          "exchange_s": [0.1] * self.iteration, "returned": not self.running}
                         for rank in range(self.workers)]
        return {"iteration": self.iteration, "done": self.iteration >= self.total}

    def set_halt(self, on: bool) -> None:
        self.halt = on

    def timings(self) -> list[dict[str, Any]]:
        return self.records

    def result(self) -> None:
        return None

    def record_restart(self) -> int:
        return self.round + 1

    def request_checkpoint(self) -> None:
        pass


def test_aws_changes_memory_and_concurrency_between_rounds(
    client: Any, target: AwsTarget,  # noqa: F811
) -> None:
    recorded = Recording(client)
    clock = FakeClock()
    fake = FakeChannel(total=ITERATIONS)
    script = Script((3, 2048), [(5, 4, 1024)])
    spec = LaunchSpec(functions=3, memory_mb=2048, local_batch=8, iterations=ITERATIONS,
                      time_s=60.0, restarts=0, platform="aws-lambda-x86_64",
                      architecture="x86_64")
    invoke: Callable[..., Any] = recorded.invoke

    def counting_invoke(**params: Any) -> Any:
        event = json.loads(params["Payload"])
        if event["rank"] == 0:
            fake.invoked(event["workers"])
        return invoke(**params)

    recorded.invoke = counting_invoke
    report = run_aws(
        spec, recorded, target, redis_url=REDIS_URL, job="job-adaptive", channel=fake,
        controller=script, following=following(clock),
    )
    operations = recorded.operations()
    resize = operations.index("UpdateFunctionConfiguration")
    assert operations[resize:resize + 3] == [
        "UpdateFunctionConfiguration", "GetFunction", "PutFunctionConcurrency"]
    update = recorded.calls[resize].params
    assert update == {"FunctionName": target.function_name, "MemorySize": 1024}
    assert recorded.calls[resize + 2].params["ReservedConcurrentExecutions"] == 4
    events = [json.loads(c.params["Payload"]) for c in recorded.calls if c.operation == "Invoke"]
    assert [(e["rank"], e["workers"]) for e in events] == [
        (0, 3), (1, 3), (2, 3), (0, 4), (1, 4), (2, 4), (3, 4)]
    assert {e["global_batch"] for e in events} == {24}
    invokes = [i for i, operation in enumerate(operations) if operation == "Invoke"]
    assert invokes[2] < resize < invokes[3]  # between the rounds
    assert not fake.halt  # cleared for the new group
    assert [(r["functions"], r["memory_mb"]) for r in report.rounds] == [(3, 2048), (4, 1024)]
    assert report.rounds[0]["iterations_to"] == report.rounds[1]["iterations_from"] >= 5
    assert report.invocations == 7 and report.restarts == 0
    assert operations[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]


# -- CLI ----------------------------------------------------------------------------------


@pytest.fixture
def plan_json(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(solve("instances/mobilenet-cifar10.yaml").to_dict()))
    return path


def test_launch_adaptive_prints_the_rounds_and_their_reasons(
    plan_json: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passed: list[object] = []

    def fake_run(spec: LaunchSpec, **options: Any) -> LaunchReport:
        passed.append(options["controller"])
        run = AdaptiveRun(spec, options["controller"])
        run.close(3)
        return LaunchReport.of(
            spec, backend="local", workload="digits-cnn", iterations=3, restarts=0,
            wall_time_s=1.0, result=None, runs_on="test",
            prediction=Prediction(None, None, "test"), timings=summarise([], [0.0]),
            rounds=[*run.to_list(), {**run.to_list()[0], "functions": 7, "action": "scale-up",
                                     "reason": "behind: scripted"}],
        )

    monkeypatch.setattr("lambdadnn.launcher.local.run_local", fake_run)
    result = CliRunner().invoke(main, ["launch", str(plan_json), "--adaptive"])
    assert result.exit_code == 0, result.output
    assert isinstance(passed[0], Controller)
    lines = result.output.splitlines()
    first = lines.index("  rounds") + 1
    assert lines[first].startswith(f"    1. {passed[0].functions} × ")
    assert "start — the plan as solved from the belief" in lines[first]
    assert lines[first + 1].startswith("    2. 7 × ") and "scale-up — behind: scripted" in lines[
        first + 1]
    as_json = CliRunner().invoke(main, ["launch", str(plan_json), "--adaptive", "--json"])
    assert json.loads(as_json.output)["rounds"][1]["action"] == "scale-up"


@pytest.mark.parametrize("extra, message", [
    (["--backend", "aws", "--role-arn", "arn:aws:iam::1:role/r", "--dry-run"],
     "`--adaptive` re-plans from what the run measures"),
    ([], "carries none (`instance_spec`)"),
])
def test_launch_adaptive_refuses_what_it_cannot_do_in_one_line(
    plan_json: Path, extra: list[str], message: str
) -> None:
    if "--dry-run" not in extra:
        plan = json.loads(plan_json.read_text())
        plan_json.write_text(json.dumps({**plan, "instance_spec": None}))
    result = CliRunner().invoke(main, ["launch", str(plan_json), "--adaptive", *extra])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and message in line
