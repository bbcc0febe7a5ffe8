"""The AWS backend against a real moto server on 127.0.0.1 (Lambda without docker).

The server is started here (moto's ThreadedMotoServer on a free loopback port) unless
MOTO_ENDPOINT names one already running (the Makefile starts `moto_server`). Either way the
suite switches Lambda's docker use off through `/moto-api/config`, so invocations are
accepted and recorded, never executed. Time is faked wherever the launcher waits.
"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import subprocess
import sys
import urllib.request
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.aws import (
    FUNCTION_TIMEOUT_S,
    HANDLER,
    JOB_ENV,
    POLICY_ACTIONS,
    REDIS_URL_ENV,
    AwsLauncher,
    AwsLaunchError,
    AwsTarget,
    Call,
    DryRunClient,
    Following,
    dry_run,
    lambda_client,
    package_worker,
    required_policy,
    run_aws,
)
from lambdadnn.launcher.orchestrator import Clock, Hooks, RunOptions
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec
from lambdadnn.solver.errors import LambdaDnnError
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # a moto server (its fixtures) and a redis-server

REGION = "us-east-1"
REDIS_URL = "redis://ps.internal.example:6379/0"  # only ever written into the function's config
PLAN = LaunchSpec.from_mapping({"functions": 3, "memory_mb": 2048, "time_s": 321.0,
                                "iterations": 586.5, "local_batch": 64.0, "restarts": 0,
                                "status": "optimal", "platform": "aws-lambda-x86_64",
                                "architecture": "x86_64"})


def spec(memory_mb: int, functions: int, architecture: str = "x86_64") -> LaunchSpec:
    """A plan of `functions` × `memory_mb` for the deploy tests."""
    return LaunchSpec(functions=functions, memory_mb=memory_mb, local_batch=32, iterations=10,
                      time_s=60.0, restarts=0, platform=f"aws-lambda-{architecture}",
                      architecture=architecture)
TRUST_POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
    "Action": "sts:AssumeRole"}]})


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server on loopback with Lambda's docker use disabled (configured over HTTP)."""
    server = None
    endpoint = os.environ.get("MOTO_ENDPOINT")
    if not endpoint:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    request = urllib.request.Request(
        f"{endpoint}/moto-api/config", method="POST",
        data=json.dumps({"lambda": {"use_docker": False}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=HANG_GUARD_S) as response:
        assert json.load(response)["lambda"]["use_docker"] is False
    yield endpoint
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def aws_env(moto_endpoint: str) -> Iterator[dict[str, str]]:
    """Dummy credentials, no profile or config file: nothing can reach real AWS."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        patch.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield {"endpoint_url": moto_endpoint, "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing"}


@pytest.fixture(scope="session")
def client(aws_env: dict[str, str]) -> Any:
    return lambda_client(REGION, **aws_env)


@pytest.fixture(scope="session")
def role_arn(aws_env: dict[str, str]) -> str:
    import boto3

    iam = boto3.client("iam", region_name=REGION, **aws_env)
    name = f"lambdadnn-worker-{uuid.uuid4().hex[:8]}"
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST_POLICY)
    return str(role["Role"]["Arn"])


@pytest.fixture
def target(role_arn: str) -> AwsTarget:
    return AwsTarget(function_name=f"lambdadnn-test-{uuid.uuid4().hex[:10]}", role_arn=role_arn)


class Recording:
    """Forwards to a real client, recording each call; `faults` injects AWS errors first."""

    def __init__(self, client: Any, faults: dict[str, list[str]] | None = None) -> None:
        self.client = client
        self.calls: list[Call] = []
        self.faults = faults or {}

    def __getattr__(self, method: str) -> Callable[..., Any]:
        operation = "".join(part.capitalize() for part in method.split("_"))

        def call(**params: Any) -> Any:
            self.calls.append(Call(operation, params))
            if self.faults.get(method):
                code = self.faults[method].pop(0)
                raise ClientError({"Error": {"Code": code, "Message": "injected"}}, operation)
            return getattr(self.client, method)(**params)

        return call

    def operations(self) -> list[str]:
        return [call.operation for call in self.calls]


class FakeClock:
    """A clock that only moves when the launcher sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def launcher(client: Any, target: AwsTarget, clock: FakeClock | None = None) -> AwsLauncher:
    clock = clock or FakeClock()
    return AwsLauncher(client, target, sleep=clock.sleep, clock=clock, rng=random.Random(7))


def error_code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


# -- deploy -----------------------------------------------------------------------------------


def test_deploy_sets_memory_timeout_environment_concurrency_and_layers(
    client: Any, target: AwsTarget, aws_env: dict[str, str]
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("python/placeholder.py", "")
    layer = client.publish_layer_version(
        LayerName="lambdadnn-deps", Content={"ZipFile": buffer.getvalue()},
        CompatibleRuntimes=["python3.11"],
    )["LayerVersionArn"]
    target = AwsTarget(target.function_name, target.role_arn, layers=(layer,))
    aws = launcher(client, target)
    aws.deploy(spec(1769, 3), REDIS_URL, "job-1")
    try:
        function = client.get_function(FunctionName=target.function_name)
        config = function["Configuration"]
        assert config["MemorySize"] == 1769
        assert config["Timeout"] == FUNCTION_TIMEOUT_S == 900
        assert config["Handler"] == HANDLER
        assert config["Runtime"] == "python3.11"
        assert config["Environment"]["Variables"] == {REDIS_URL_ENV: REDIS_URL, JOB_ENV: "job-1"}
        assert [entry["Arn"] for entry in config["Layers"]] == [layer]
        assert function["Concurrency"]["ReservedConcurrentExecutions"] == 3
        invoke_config = client.get_function_event_invoke_config(FunctionName=target.function_name)
        assert invoke_config["MaximumRetryAttempts"] == 0
    finally:
        aws.cleanup()


def test_deploy_updates_an_existing_function_and_leaves_it_behind(
    client: Any, target: AwsTarget
) -> None:
    first = launcher(client, target)
    first.deploy(spec(1024, 2), REDIS_URL, "job-a")
    recorded = Recording(client)
    second = launcher(recorded, target)
    second.deploy(spec(3008, 4), "redis://other.example:6379/0", "job-b")
    assert "UpdateFunctionConfiguration" in recorded.operations()
    assert "UpdateFunctionCode" in recorded.operations()
    function = client.get_function(FunctionName=target.function_name)
    assert function["Configuration"]["MemorySize"] == 3008
    assert function["Configuration"]["Environment"]["Variables"][JOB_ENV] == "job-b"
    assert function["Concurrency"]["ReservedConcurrentExecutions"] == 4

    second.cleanup()  # it only updated the function: concurrency released, function kept
    assert "Concurrency" not in client.get_function(FunctionName=target.function_name)
    first.cleanup()
    with pytest.raises(ClientError) as gone:
        client.get_function(FunctionName=target.function_name)
    assert error_code(gone.value) == "ResourceNotFoundException"


def test_deploy_from_a_container_image(client: Any, target: AwsTarget) -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn:latest"
    target = AwsTarget(target.function_name, target.role_arn, image_uri=image)
    aws = launcher(client, target)
    aws.deploy(spec(2048, 2), REDIS_URL, "job-image")
    try:
        config = client.get_function(FunctionName=target.function_name)["Configuration"]
        assert config["PackageType"] == "Image"
        assert config["ImageConfigResponse"]["ImageConfig"]["Command"] == [HANDLER]
        assert config["MemorySize"] == 2048
    finally:
        aws.cleanup()


def test_deploy_uses_the_architecture_of_the_plans_platform(
    client: Any, target: AwsTarget
) -> None:
    recorded = Recording(client)
    aws = launcher(recorded, target)
    aws.deploy(spec(1024, 2, "arm64"), REDIS_URL, "job-arm")
    try:
        config = client.get_function(FunctionName=target.function_name)["Configuration"]
        assert config["Architectures"] == ["arm64"]
    finally:
        aws.cleanup()
    create = next(c for c in recorded.calls if c.operation == "CreateFunction")
    assert create.params["Architectures"] == ["arm64"]


def test_target_checks_its_arguments(role_arn: str) -> None:
    with pytest.raises(AwsLaunchError, match="no layers"):
        AwsTarget("f", role_arn, layers=("arn:aws:lambda:us-east-1:1:layer:x:1",),
                  image_uri="1.dkr.ecr.us-east-1.amazonaws.com/x:1")
    with pytest.raises(AwsLaunchError, match="IAM role ARN"):
        AwsTarget("f", "my-role")
    assert issubclass(AwsLaunchError, LambdaDnnError)


def test_package_holds_the_handler_and_is_reproducible() -> None:
    archive = package_worker()
    names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
    assert {"lambdadnn/__init__.py", "lambdadnn/launcher/__init__.py",
            "lambdadnn/launcher/worker.py", "lambdadnn/launcher/channel.py",
            "lambdadnn/models/errors.py", "lambdadnn/inputs/files.py"} <= set(names)
    assert all(name.startswith("lambdadnn/") for name in names)
    assert not any(name.startswith("lambdadnn/solver/") for name in names)
    assert not any("__pycache__" in name or "tests/" in name for name in names)
    assert package_worker() == archive


def test_the_handler_imports_from_the_unzipped_package_alone(tmp_path: Path) -> None:
    """As Lambda does: only the zip's folder on the path (torch etc. from the venv's layer)."""
    zipfile.ZipFile(io.BytesIO(package_worker())).extractall(tmp_path)
    module, function = HANDLER.rsplit(".", 1)
    probe = (f"import {module} as m; assert callable(m.{function}); print(m.__file__)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(tmp_path)


# -- invoke -----------------------------------------------------------------------------------


def test_invoke_all_makes_n_asynchronous_invocations_with_distinct_ranks(
    client: Any, target: AwsTarget
) -> None:
    launcher(client, target).deploy(spec(1024, 4), REDIS_URL, "job-ranks")
    recorded = Recording(client)
    aws = launcher(recorded, target)
    try:
        aws.invoke_all({"job": "job-ranks", "iterations": 10}, 4)
    finally:
        aws.cleanup()
    invokes = [call for call in recorded.calls if call.operation == "Invoke"]
    assert len(invokes) == 4
    assert {call.params["InvocationType"] for call in invokes} == {"Event"}
    payloads = [json.loads(call.params["Payload"]) for call in invokes]
    assert sorted(payload["rank"] for payload in payloads) == [0, 1, 2, 3]
    assert all(p["workers"] == 4 and p["job"] == "job-ranks" for p in payloads)


def test_throttling_is_retried_with_growing_backoff(client: Any, target: AwsTarget) -> None:
    launcher(client, target).deploy(spec(1024, 1), REDIS_URL, "job-throttle")
    recorded = Recording(client, {"invoke": ["TooManyRequestsException"] * 2})
    clock = FakeClock()
    aws = launcher(recorded, target, clock)
    try:
        aws.invoke_all({"job": "job-throttle"}, 1)
    finally:
        aws.cleanup()
    assert recorded.operations().count("Invoke") == 3
    assert len(clock.sleeps) == 2
    assert 0 < clock.sleeps[0] <= clock.sleeps[1]


def test_throttling_gives_up_after_bounded_attempts(target: AwsTarget) -> None:
    throttled = Recording(object(), {"invoke": ["TooManyRequestsException"] * 50})
    clock = FakeClock()
    aws = AwsLauncher(throttled, target, sleep=clock.sleep, clock=clock, max_attempts=5)
    with pytest.raises(AwsLaunchError, match="quota") as failure:
        aws.invoke_all({}, 2)
    assert failure.value.code == "TooManyRequestsException"
    assert len(throttled.calls) == 5
    assert len(clock.sleeps) == 4


def test_other_errors_are_not_retried(target: AwsTarget) -> None:
    denied = Recording(object(), {"invoke": ["AccessDeniedException"]})
    clock = FakeClock()
    with pytest.raises(AwsLaunchError, match="--print-policy"):
        launcher(denied, target, clock).invoke_all({}, 1)
    assert clock.sleeps == []


# -- follow -----------------------------------------------------------------------------------


class Channel:
    """The channel as the orchestrator reads it, made of a test's callables; `record_restart`
    (the call before each re-invocation) runs `on_restart` and counts."""

    def __init__(
        self, progress: Callable[[], dict[str, Any]], *,
        result: Callable[[], dict[str, Any] | None] = lambda: None,
        timings: Callable[[], list[dict[str, Any]]] = list,
        on_restart: Callable[[], object] = lambda: None,
    ) -> None:
        self.progress, self.result, self.timings = progress, result, timings
        self.on_restart, self.restarts = on_restart, 0
        self.halt = False

    def record_restart(self) -> int:
        self.on_restart()
        self.restarts += 1
        return self.restarts

    def set_halt(self, on: bool) -> None:
        self.halt = on

    def request_checkpoint(self) -> None:
        pass


def following(clock: FakeClock, **polling: float) -> Following:
    return Following(sleep=clock.sleep, clock=Clock(monotonic=clock, wall=clock), **polling)


def follow(
    target: AwsTarget, clock: FakeClock, progress: Callable[[], dict[str, Any]], *,
    reinvoke: Callable[[], object] = lambda: None, max_restarts: int = 1_000,
    seen: list[int] | None = None, **polling: float,
) -> LaunchReport:
    """Follow a job on a client that makes no call, as `run_aws` does."""
    return run_aws(
        PLAN, DryRunClient(), target, redis_url=REDIS_URL, job="job-follow",
        channel=Channel(progress, on_restart=reinvoke),
        options=RunOptions(max_restarts=max_restarts),
        hooks=Hooks(progress=None if seen is None else lambda i, _total: seen.append(i)),
        following=following(clock, **polling),
    )


class FakeJob:
    """Workers that do one iteration every 10 s and stop at their timeout margin (870 s)."""

    def __init__(self, clock: FakeClock, total: int, late_start_s: float = 0.0) -> None:
        self.clock = clock
        self.total = total
        self.round_start = late_start_s
        self.resumed_from = 0
        self.reinvocations = 0

    def progress(self) -> dict[str, Any]:
        running = min(max(0.0, self.clock.now - self.round_start), 870.0)
        iteration = min(self.resumed_from + int(running // 10), self.total)
        return {"iteration": iteration, "done": iteration >= self.total}

    def reinvoke(self) -> None:
        self.resumed_from = self.progress()["iteration"]
        self.round_start = self.clock.now
        self.reinvocations += 1


def test_follow_reinvokes_a_round_that_timed_out_before_done(target: AwsTarget) -> None:
    clock = FakeClock()
    job = FakeJob(clock, total=120)
    seen: list[int] = []
    followed = follow(target, clock, job.progress, reinvoke=job.reinvoke, poll_s=5, quiet_s=60,
                      seen=seen)
    assert followed.restarts == job.reinvocations == 1
    assert followed.iterations == 120 and followed.status == "done"
    assert 870 + 60 <= job.round_start < 900 + 60 + 5  # re-invoked once the round went quiet
    assert seen[-1] == 120


def test_follow_does_not_reinvoke_a_late_round_that_still_progresses(target: AwsTarget) -> None:
    clock = FakeClock()
    job = FakeJob(clock, total=80, late_start_s=120.0)  # done at 920 s, past the timeout
    followed = follow(target, clock, job.progress, reinvoke=job.reinvoke, poll_s=5, quiet_s=60)
    assert followed.restarts == job.reinvocations == 0
    assert clock.now >= 900


def test_follow_stops_when_no_worker_ever_reports(target: AwsTarget) -> None:
    clock = FakeClock()
    reinvoked: list[float] = []
    with pytest.raises(AwsLaunchError, match="CloudWatch"):
        follow(target, clock, lambda: {"iteration": 0, "done": False},
               reinvoke=lambda: reinvoked.append(1))
    assert reinvoked == []
    assert clock.now >= FUNCTION_TIMEOUT_S


def test_follow_stops_when_a_new_round_never_starts(target: AwsTarget) -> None:
    clock = FakeClock()
    job = FakeJob(clock, total=500)
    restarts = 0

    def progress() -> dict[str, Any]:
        return {**job.progress(), "restarts": restarts}

    def reinvoke() -> None:  # counts the restart, but no worker runs again
        nonlocal restarts
        restarts += 1
        job.round_start = float("inf")
        job.resumed_from = 87

    with pytest.raises(AwsLaunchError, match="no progress"):
        follow(target, clock, progress, reinvoke=reinvoke)
    assert restarts == 1


def test_follow_bounds_the_number_of_rounds(target: AwsTarget) -> None:
    clock = FakeClock()
    job = FakeJob(clock, total=10_000)
    with pytest.raises(LaunchError, match="re-invoked 2 times"):
        follow(target, clock, job.progress, reinvoke=job.reinvoke, max_restarts=2)
    assert job.reinvocations == 2


# -- cleanup ----------------------------------------------------------------------------------


def test_cleanup_deletes_the_function_and_ignores_only_not_found(
    client: Any, target: AwsTarget
) -> None:
    aws = launcher(client, target)
    aws.deploy(spec(512, 2), REDIS_URL, "job-clean")
    aws.cleanup()
    with pytest.raises(ClientError) as gone:
        client.get_function(FunctionName=target.function_name)
    assert error_code(gone.value) == "ResourceNotFoundException"
    aws.cleanup()  # already deleted: ResourceNotFoundException is ignored

    other = AwsTarget(f"{target.function_name}-b", target.role_arn)
    denied = Recording(client, {"delete_function": ["AccessDeniedException"]})
    aws = launcher(denied, other)
    aws.deploy(spec(512, 2), REDIS_URL, "job-clean")
    with pytest.raises(AwsLaunchError) as failure:
        aws.cleanup()
    assert failure.value.code == "AccessDeniedException"
    assert denied.operations()[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]
    aws.cleanup()  # the injected fault is spent: this one deletes it
    with pytest.raises(ClientError):
        client.get_function(FunctionName=other.function_name)


# -- run_aws, dry run, policy -----------------------------------------------------------------


def test_run_aws_deploys_invokes_follows_and_cleans_up(client: Any, target: AwsTarget) -> None:
    recorded = Recording(client)
    clock = FakeClock()
    polls = iter(range(100))

    def progress() -> dict[str, Any]:
        iteration = next(polls) * 200
        return {"iteration": min(iteration, 587), "done": iteration >= 587}

    report = run_aws(
        PLAN, recorded, target, redis_url=REDIS_URL, job="job-run", channel=Channel(
            progress,
            result=lambda: {"final_loss": 0.1, "test_accuracy": 0.95, "status": "ignored"}),
        following=following(clock),
    )
    assert report.status == "done" and report.backend == "aws"
    assert report.iterations == 587
    assert report.restarts == 0
    # The plan carries no instance: no figure for a network the model was not fitted to.
    assert report.predicted_time_s is None and report.prediction_error is None
    assert report.prediction_note is not None and "`instance_spec`" in report.prediction_note
    # No worker recorded timings (invocations are never executed): the wall time stands in.
    assert report.measured_time_s == report.wall_time_s == 15.0  # three polls of 5 s
    assert report.time_to_first_iteration_s is None and report.iteration_median_s is None
    assert report.test_accuracy == 0.95 and report.final_loss == 0.1
    invokes = [json.loads(c.params["Payload"]) for c in recorded.calls if c.operation == "Invoke"]
    assert sorted(event["rank"] for event in invokes) == [0, 1, 2]
    assert {event["iterations"] for event in invokes} == {587}
    assert {event["local_batch"] for event in invokes} == {64}
    assert {event["redis_url"] for event in invokes} == {REDIS_URL}
    with pytest.raises(ClientError):
        client.get_function(FunctionName=target.function_name)


def test_run_aws_reinvokes_every_rank_after_a_timed_out_round(
    client: Any, target: AwsTarget
) -> None:
    recorded = Recording(client)
    clock = FakeClock()
    job = FakeJob(clock, total=120)
    restarts: list[float] = []

    def record_restart() -> None:
        job.reinvoke()  # the fake workers resume from where they stopped
        restarts.append(clock.now)

    launched: list[float] = []

    def wall_clock() -> float:
        launched.append(clock.now)
        return clock.now

    def timings() -> list[dict[str, Any]]:
        """Each rank's first iteration 2 s + rank after its round's launch; round 0 ends at
        its margin (870 s), round 1 after 300 s; one iteration of 10 s each."""
        return [{"round": r, "rank": rank, "first_iteration": 0, "first_at": at + 2 + rank,
                 "ended_at": at + (870 if r == 0 else 300), "compute_s": [6.0],
                 "exchange_s": [4.0]} for r, at in enumerate(launched) for rank in range(3)]

    report = run_aws(
        PLAN, recorded, target, redis_url=REDIS_URL, job="job-restart",
        channel=Channel(job.progress, timings=timings, on_restart=record_restart),
        following=Following(sleep=clock.sleep, clock=Clock(monotonic=clock, wall=wall_clock)),
    )
    assert len(launched) == 2 and launched[1] == restarts[0]  # each round's invocation time
    assert report.startup_s == (4.0, 4.0) and report.time_to_first_iteration_s == 4.0
    assert report.restart_gap_s == (launched[1] - launched[0] - 870,)
    assert report.measured_time_s == launched[1] + 300 - launched[0]
    assert report.iteration_median_s == 10.0 and report.compute_s == 6.0
    assert report.restarts == len(restarts) == 1
    assert report.invocations == 6
    assert report.iterations == 120
    assert report.final_loss is None  # no result published: null, not a made-up number
    ranks = [json.loads(c.params["Payload"])["rank"] for c in recorded.calls
             if c.operation == "Invoke"]
    assert ranks == [0, 1, 2, 0, 1, 2]
    assert recorded.operations()[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]


def test_run_aws_cleans_up_when_the_job_fails(client: Any, target: AwsTarget) -> None:
    clock = FakeClock()
    with pytest.raises(AwsLaunchError, match="no progress"):
        run_aws(PLAN, client, target, redis_url=REDIS_URL, job="job-stuck",
                channel=Channel(lambda: {"iteration": 0}), following=following(clock))
    with pytest.raises(ClientError):
        client.get_function(FunctionName=target.function_name)


def test_dry_run_lists_every_call_without_any_network(
    target: AwsTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*_args: Any) -> None:
        raise AssertionError("the dry run opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    calls = dry_run(PLAN, target, redis_url=REDIS_URL, job="job-dry")
    assert [call.operation for call in calls] == [
        "CreateFunction", "GetFunction", "PutFunctionEventInvokeConfig",
        "PutFunctionConcurrency", "Invoke", "Invoke", "Invoke",
        "DeleteFunctionConcurrency", "DeleteFunction",
    ]
    create = calls[0].params
    assert create["MemorySize"] == 2048 and create["Timeout"] == 900
    assert create["Code"]["ZipFile"].endswith(" bytes>")
    assert calls[3].params["ReservedConcurrentExecutions"] == 3
    json.dumps([call.params for call in calls])  # printable as JSON for `--dry-run --json`


def test_policy_grants_every_call_the_launcher_makes(client: Any, target: AwsTarget) -> None:
    recorded = Recording(client)
    creator = launcher(recorded, target)
    creator.deploy(spec(1024, 2), REDIS_URL, "job-policy")
    updater = launcher(recorded, target)
    updater.deploy(spec(1024, 2), REDIS_URL, "job-policy")  # the function exists: the update path
    updater.invoke_all({}, 2)
    updater.cleanup()
    creator.cleanup()
    operations = set(recorded.operations())
    dry = {call.operation for call in dry_run(PLAN, target, redis_url=REDIS_URL, job="j")}
    assert dry <= operations  # the dry run lists what real runs do

    policy = required_policy(target)
    granted = {action for statement in policy["Statement"]
               for action in ([statement["Action"]] if isinstance(statement["Action"], str)
                              else statement["Action"])}
    assert {POLICY_ACTIONS[operation] for operation in operations} <= granted
    assert set(POLICY_ACTIONS.values()) == granted - {"iam:PassRole"}
    pass_role = next(s for s in policy["Statement"] if s["Action"] == "iam:PassRole")
    assert pass_role["Resource"] == target.role_arn
    assert policy["Statement"][0]["Resource"] == target.function_arn
    generic = required_policy()
    assert "lambda:GetLayerVersion" in json.dumps(generic)
