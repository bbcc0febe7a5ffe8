"""`lambdadnn profile --backend aws` against the moto server, with real workers.

Moto records invocations but runs nothing (docker is off), so `ExecutingLambda` stands in
for Lambda's execution: each asynchronous Invoke also runs the worker's handler in a thread,
with the remaining time of the function's Timeout. The design, the channel, the deploys and
clean-ups are the real ones; only the machine the workers run on is this one.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.aws import (
    FUNCTION_TIMEOUT_S,
    AwsLaunchError,
    AwsTarget,
    DryRunClient,
    lambda_client,
    profile_capacity,
    profile_runner,
    run_aws,
)
from lambdadnn.launcher.orchestrator import RunOptions
from lambdadnn.launcher.profile import Runner, profile_workload
from lambdadnn.launcher.spec import LaunchSpec, default_margin
from lambdadnn.solver.instance_yaml import load_instance
from tests.hang_guard import HANG_GUARD_S
from tests.test_aws import (  # noqa: F401  (fixtures, used by name)
    REGION,
    Channel,
    Recording,
    aws_env,
    moto_endpoint,
    role_arn,
)

pytestmark = pytest.mark.real  # a moto server and a redis-server, with real workers

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn-worker:latest"
WORKLOAD = "digits-mlp"
# Per trial: the deploy, then one Invoke per rank and round, then the clean-up.
DEPLOY = ["CreateFunction", "GetFunction", "PutFunctionEventInvokeConfig",
          "PutFunctionConcurrency"]
CLEANUP = ["DeleteFunctionConcurrency", "DeleteFunction"]


class _Remaining:
    """Lambda's context: the milliseconds left of the function's Timeout."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


class ExecutingLambda:
    """Forwards to a moto client; an asynchronous Invoke also runs the handler in a thread.

    Lambda ends an invocation at the function's Timeout, so a rank's next invocation never
    meets the last one. A thread cannot be ended, and on a loaded machine it can outlive the
    Timeout (a slow start-up, a slow last iteration): a rank's new invocation first waits for
    the rank's last thread to return: two copies of a rank never meet on the barrier."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.threads: list[threading.Thread] = []
        self.last: dict[tuple[str, int], threading.Thread] = {}
        self.failures: list[BaseException] = []

    def __getattr__(self, method: str) -> Any:
        return getattr(self.client, method)

    def invoke(self, **params: Any) -> Any:
        from lambdadnn.launcher.worker import handler

        event = json.loads(params["Payload"])
        rank = (params["FunctionName"], int(event["rank"]))
        if rank in self.last:
            self.last[rank].join(HANG_GUARD_S)
        response = self.client.invoke(**params)
        timeout = self.client.get_function_configuration(
            FunctionName=params["FunctionName"])["Timeout"]
        context = _Remaining(time.monotonic() + timeout)

        def execute() -> None:
            try:
                handler(event, context)
            except BaseException as exc:  # reported by `join`, not lost in the thread
                self.failures.append(exc)

        thread = threading.Thread(target=execute, daemon=True)
        thread.start()
        self.threads.append(thread)
        self.last[rank] = thread
        return response

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=HANG_GUARD_S)
        assert not any(thread.is_alive() for thread in self.threads)
        assert not self.failures, self.failures


def _trials(operations: list[str]) -> list[list[str]]:
    """The recorded operations cut into one list per trial, each starting at CreateFunction."""
    trials: list[list[str]] = []
    for operation in operations:
        if operation == "CreateFunction":
            trials.append([])
        trials[-1].append(operation)
    return trials


def _job_keys(url: str) -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return list(client.scan_iter(match="lambdadnn:profile-*"))


def _lambda_and_runner(
    env: dict[str, str], role: str, redis_url: str
) -> tuple[ExecutingLambda, Recording, str, Runner]:
    """Moto's Lambda with workers run per invocation, its recorder, a fresh function name, and
    the profile runner that deploys through them (fast polling)."""
    lam = ExecutingLambda(lambda_client(REGION, **env))
    recorded = Recording(lam)
    name = f"lambdadnn-profile-{uuid.uuid4().hex[:8]}"
    runner = profile_runner(
        workload=WORKLOAD, seed=0, function_name=name, role_arn=role, image_uri=IMAGE,
        redis_url=redis_url, region=REGION, client=recorded, poll_s=0.02, quiet_s=0.3,
    )
    return lam, recorded, name, runner


def test_profile_runs_the_design_as_lambda_jobs_and_leaves_nothing_behind(
    aws_env: dict[str, str], role_arn: str, redis_url: str  # noqa: F811
) -> None:
    lam, recorded, name, runner = _lambda_and_runner(aws_env, role_arn, redis_url)
    mapping = profile_workload(WORKLOAD, profile_capacity(region=REGION), runner,
                               budget_s=60, local_batch=32)
    lam.join()

    fit = mapping["fit"]
    assert fit["backend"] == "aws" and fit["workload"] == WORKLOAD
    assert fit["cost_usd"] > 0
    instance = load_instance(mapping)
    assert instance.fit is not None and instance.fit.backend == "aws"
    assert mapping["platform"]["name"] == f"aws-lambda-x86_64-{REGION}"
    assert "max_vcpu" not in mapping["platform"]  # Lambda has no limit on the total vCPU

    runs = fit["runs"]
    creates = [call.params for call in recorded.calls if call.operation == "CreateFunction"]
    assert len(_trials(recorded.operations())) == len(creates) == len(runs) >= 6
    for run, operations, create in zip(runs, _trials(recorded.operations()), creates,
                                       strict=True):
        invokes = run["functions"] * (run["restarts"] + 1)
        assert operations == DEPLOY + ["Invoke"] * invokes + CLEANUP
        assert create["MemorySize"] == run["memory_mb"]
        assert create["Timeout"] == -(-run["timeout_s"] // 1)  # ⌈the trial's limit⌉
        assert create["Code"] == {"ImageUri": IMAGE}
    short = [run for run in runs if run["timeout_s"] < FUNCTION_TIMEOUT_S]
    assert short and all(run["restarts"] >= 1 for run in short)  # restarted for real
    assert all(run["restarts"] == 0 for run in runs if run not in short)

    listed = lam.client.list_functions()["Functions"]
    assert [f for f in listed if f["FunctionName"] == name] == []
    assert _job_keys(redis_url) == []


def test_a_failure_mid_profile_is_one_line_and_leaves_nothing_deployed(
    aws_env: dict[str, str], role_arn: str, redis_url: str  # noqa: F811
) -> None:
    lam, recorded, name, runner = _lambda_and_runner(aws_env, role_arn, redis_url)

    def deny_after_the_pilot(spec: LaunchSpec, timeout_s: float) -> Any:
        report = runner(spec, timeout_s)
        recorded.faults["create_function"] = ["AccessDeniedException"]  # the 2nd CreateFunction
        return report

    with pytest.raises(AwsLaunchError) as failure:
        profile_workload(WORKLOAD, profile_capacity(region=REGION), deny_after_the_pilot,
                         budget_s=60, local_batch=32)
    lam.join()
    message = str(failure.value)
    assert "\n" not in message
    assert "CreateFunction" in message and "AccessDeniedException" in message
    assert "--print-policy" in message
    assert recorded.operations().count("CreateFunction") == 2
    assert recorded.operations()[-1] == "CreateFunction"  # nothing created: nothing to delete
    listed = lam.client.list_functions()["Functions"]
    assert [f for f in listed if f["FunctionName"] == name] == []
    assert _job_keys(redis_url) == []


def _spec(functions: int) -> LaunchSpec:
    return LaunchSpec(functions=functions, memory_mb=884, local_batch=32, iterations=50,
                      time_s=1.0, restarts=0, platform="aws-lambda-x86_64",
                      architecture="x86_64")


def test_a_trial_limit_in_fractions_of_a_second_stops_the_workers_where_it_would(
    role_arn: str,  # noqa: F811
) -> None:
    spec = _spec(functions=2)
    client = DryRunClient()
    target = AwsTarget("lambdadnn-dry", role_arn, image_uri=IMAGE)
    report = run_aws(spec, client, target, redis_url="redis://ps:6379/0", job="j",
                     channel=Channel(lambda: {"done": True}), options=RunOptions(timeout_s=4.4))
    create = next(call.params for call in client.calls if call.operation == "CreateFunction")
    assert create["Timeout"] == 5  # Lambda takes whole seconds
    margins = [json.loads(call.params["Payload"])["timeout_margin_s"]
               for call in client.calls if call.operation == "Invoke"]
    assert margins == [pytest.approx(default_margin(4.4) + 0.6)] * 2  # stop at 4.4 - margin
    assert report.invocations == 2


@pytest.mark.parametrize("timeout_s", [0, -1, 901, float("nan"), float("inf"), True, "5"])
def test_run_aws_refuses_a_limit_lambda_cannot_have(
    role_arn: str, timeout_s: Any  # noqa: F811
) -> None:
    client = DryRunClient()
    with pytest.raises(LaunchError, match=r"`timeout_s`.*give seconds in") as failure:
        run_aws(_spec(functions=1), client, AwsTarget("f", role_arn),
                redis_url="redis://ps:6379/0", job="j", options=RunOptions(timeout_s=timeout_s),
                channel=Channel(lambda: {"done": True}))
    assert "\n" not in str(failure.value)
    assert client.calls == []  # refused before any AWS call


def test_profile_capacity_is_the_shipped_lambda_platform() -> None:
    capacity = profile_capacity(region="eu-west-1", architecture="arm64")
    assert capacity.backend == "aws" and capacity.max_vcpu is None
    assert capacity.name == "aws-lambda-arm64-eu-west-1"
    assert (capacity.max_memory_mb, capacity.max_functions) == (10_240, 1000)
    assert capacity.price_per_gb_second > 0 and capacity.price_per_request > 0
    with pytest.raises(AwsLaunchError, match="`architecture` 'sparc'"):
        profile_capacity(region="us-east-1", architecture="sparc")


def test_profile_runner_checks_image_role_and_redis_before_any_trial(
    role_arn: str, redis_url: str  # noqa: F811
) -> None:
    kwargs: dict[str, Any] = {"workload": WORKLOAD, "seed": 0, "function_name": "f",
                              "role_arn": role_arn, "image_uri": IMAGE, "redis_url": redis_url,
                              "client": DryRunClient()}
    with pytest.raises(AwsLaunchError, match="`--image-uri` is needed"):
        profile_runner(**{**kwargs, "image_uri": None})
    with pytest.raises(AwsLaunchError, match="not an IAM role ARN"):
        profile_runner(**{**kwargs, "role_arn": "lambdadnn-role"})
    with pytest.raises(LaunchError, match=r"`--redis-url` .*no Redis answers"):
        profile_runner(**{**kwargs, "redis_url": "redis://127.0.0.1:1/0"})


def _profile_cli(tmp_path: Path, *extra: str) -> Any:
    return CliRunner().invoke(main, ["profile", "--workload", WORKLOAD, "--backend", "aws",
                                     "--out", str(tmp_path / "w.yaml"), *extra])


def test_cli_profile_aws_needs_role_and_redis(tmp_path: Path, moto_endpoint: str) -> None:  # noqa: F811
    for extra in ([], ["--role-arn", "arn:aws:iam::123456789012:role/r"],
                  ["--redis-url", "redis://127.0.0.1:6379/0"]):
        result = _profile_cli(tmp_path, "--endpoint-url", moto_endpoint, *extra)
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines() == [
            "error: `--role-arn` and `--redis-url` are needed for the aws backend"]
    assert not (tmp_path / "w.yaml").exists()


def test_cli_profile_aws_checks_image_and_redis_in_one_line(
    tmp_path: Path, moto_endpoint: str, role_arn: str, redis_url: str  # noqa: F811
) -> None:
    base = ["--endpoint-url", moto_endpoint, "--role-arn", role_arn]
    result = _profile_cli(tmp_path, *base, "--redis-url", redis_url)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "`--image-uri` is needed" in result.output
    result = _profile_cli(tmp_path, *base, "--image-uri", IMAGE,
                          "--redis-url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "`--redis-url`" in result.output
    assert not (tmp_path / "w.yaml").exists()


def test_run_aws_refuses_a_margin_not_under_the_limit(role_arn: str) -> None:  # noqa: F811
    client = DryRunClient()
    with pytest.raises(LaunchError, match=r"`timeout_margin_s` 5\.0 must be") as failure:
        run_aws(_spec(functions=1), client, AwsTarget("f", role_arn),
                redis_url="redis://ps:6379/0", job="j",
                options=RunOptions(timeout_s=4.4, timeout_margin_s=5),
                channel=Channel(lambda: {"done": True}))
    assert "\n" not in str(failure.value) and client.calls == []
