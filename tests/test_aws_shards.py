"""PS shards on EC2 (`start_shards`, `stop_shards`, a sharded `run_aws`) against the moto
server on 127.0.0.1, as tests/test_aws.py runs Lambda there; time is faked wherever the
launcher waits. A launch of k shards runs shard 0 on the channel's Redis (the stack's, here
an instance of the plan's type) and starts k − 1 EC2 instances for shards 1..k-1.

What moto (5.2) does not do, so what these tests cannot check there:
- it accepts any instance type and any image ID (its type and AMI validation is off unless
  MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION / MOTO_ENABLE_AMI_VALIDATION are set): an unknown
  type starts, where EC2 answers InvalidParameterValue; that answer is injected instead;
- instances are running at once, never pending, and never fail to start: the waits and a
  shard that dies at boot are played by rewriting its answers;
- it ignores RunInstances' ClientToken (a repeated token starts a second set);
- it runs no user data, so no Redis answers on a shard; the script is read back and checked.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import math
import os
import signal
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.aws import (
    JOB_ENV,
    LAUNCH_TAG,
    POLICY_ACTIONS,
    REDIS_URL_ENV,
    REDIS_URLS_ENV,
    SHARD_POLICY_ACTIONS,
    AwsBackend,
    AwsInterrupted,
    AwsLaunchError,
    AwsTarget,
    Call,
    Retry,
    ShardBill,
    ShardOptions,
    ShardPlacement,
    _ec2_beside,
    aws_client,
    check_ps_type,
    dry_run,
    placement_of,
    redis_type_of,
    required_policy,
    run_aws,
    run_aws_job,
    shard_count,
    start_shards,
    stop_shards,
)
from lambdadnn.launcher.channel import (
    ChannelError,
    ParameterChannel,
    UnrecoverableError,
    shard_bounds,
)
from lambdadnn.launcher.local import Interrupted
from lambdadnn.launcher.orchestrator import RunOptions
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec, RunFailed
from lambdadnn.solver.errors import LambdaDnnError
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance
from tests import test_aws, test_channel_shards
from tests.test_aws import REGION, Channel, FakeClock, following

pytestmark = pytest.mark.real  # a moto server

# The moto server's fixtures of tests/test_aws.py (pytest finds them among the module's names).
moto_endpoint, aws_env = test_aws.moto_endpoint, test_aws.aws_env
client, role_arn = test_aws.client, test_aws.role_arn

PASSWORD = "s3cretPassw0rdForShards"
TYPE, PRICE = "c5n.large", 0.108  # instances/servers/ec2.yaml


def sharded(shards: int, ps_type: str | None = TYPE, functions: int = 3, *,
            solved: int | None = None) -> LaunchSpec:
    """A launch of `functions` × 2048 MB with `shards` PS shards, from a plan whose parameter
    server is `solved` (default: `shards`) machines of `ps_type` at PRICE an hour each."""
    base = load_instance("instances/1dcnn-imdb.yaml")
    ps = dataclasses.replace(base.parameter_server, shards=shards if solved is None else solved,
                             type=ps_type, price_per_hour=PRICE)
    instance: Instance = dataclasses.replace(base, parameter_server=ps)
    return LaunchSpec(functions=functions, memory_mb=2048, local_batch=32, iterations=10,
                      time_s=60.0, restarts=0, platform="aws-lambda-x86_64",
                      architecture="x86_64", instance=instance, shards=shards)


@dataclass(frozen=True)
class Network:
    """A stack's network in moto: a subnet, the Redis's and the functions' security groups,
    and the running Redis instance (of TYPE, the plans' type) the shards are placed beside."""

    subnet_id: str
    redis_group: str
    function_group: str
    image_id: str
    redis_url: str


@pytest.fixture(scope="module")
def ec2(aws_env: dict[str, str]) -> Any:
    return aws_client("ec2", REGION, **aws_env)


@pytest.fixture(scope="module")
def network(ec2: Any) -> Network:
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.0.0/24")["Subnet"]["SubnetId"]
    groups = [ec2.create_security_group(GroupName=f"{name}-{uuid.uuid4().hex[:6]}",
                                        Description=name, VpcId=vpc)["GroupId"]
              for name in ("redis", "functions")]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    redis = ec2.run_instances(ImageId=image, InstanceType=TYPE, MinCount=1, MaxCount=1,
                              SubnetId=subnet, SecurityGroupIds=[groups[0]])["Instances"][0]
    return Network(subnet, groups[0], groups[1], image,
                   f"redis://:{PASSWORD}@{redis['PrivateIpAddress']}:6379/0")


@pytest.fixture
def target(role_arn: str, network: Network) -> AwsTarget:
    return AwsTarget(f"lambdadnn-shards-{uuid.uuid4().hex[:10]}", role_arn,
                     subnet_ids=(network.subnet_id,),
                     security_group_ids=(network.function_group,))


@pytest.fixture
def placement(network: Network) -> ShardPlacement:
    return ShardPlacement(network.subnet_id, (network.redis_group,), network.image_id, PASSWORD)


class Recorded:
    """Forwards to a real client, recording each call with the fake time it was made at;
    `faults` injects AWS errors first, `rewrite(operation, answer)` changes answers."""

    def __init__(self, wrapped: Any, clock: FakeClock | None = None,
                 faults: dict[str, list[str]] | None = None,
                 rewrite: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.client, self.clock = wrapped, clock or FakeClock()
        self.calls: list[Call] = []
        self.times: list[float] = []
        self.faults, self.rewrite = faults or {}, rewrite

    def __getattr__(self, method: str) -> Callable[..., Any]:
        operation = "".join(part.capitalize() for part in method.split("_"))

        def call(**params: Any) -> Any:
            self.calls.append(Call(operation, params))
            self.times.append(self.clock.now)
            if self.faults.get(method):
                code = self.faults[method].pop(0)
                raise ClientError({"Error": {"Code": code, "Message": "injected"}}, operation)
            answer = getattr(self.client, method)(**params)
            return answer if self.rewrite is None else self.rewrite(operation, answer)

        return call

    def operations(self) -> list[str]:
        return [call.operation for call in self.calls]

    def first(self, operation: str) -> Call:
        return next(call for call in self.calls if call.operation == operation)


def states(ec2: Any, ids: tuple[str, ...] | list[str]) -> dict[str, str]:
    found = ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}


def tagged(ec2: Any, launch_id: str) -> dict[str, str]:
    """Every instance of a launch, by its tag, and its state."""
    found = ec2.describe_instances(
        Filters=[{"Name": f"tag:{LAUNCH_TAG}", "Values": [launch_id]}])["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}


def launch_id_of(recorded: Recorded) -> str:
    tags = recorded.first("RunInstances").params["TagSpecifications"][0]["Tags"]
    return str(next(tag["Value"] for tag in tags if tag["Key"] == LAUNCH_TAG))


def done_after(polls: int) -> Channel:
    """A channel whose job is done at its `polls`-th look."""
    seen = iter(range(10_000))
    return Channel(lambda: {"iteration": 0, "done": next(seen) + 1 >= polls})


def retry(clock: FakeClock) -> Retry:
    return Retry(sleep=clock.sleep)


# -- start and stop ---------------------------------------------------------------------------


def test_start_runs_k_tagged_instances_of_the_type_and_stop_terminates_them(
    ec2: Any, network: Network, placement: ShardPlacement
) -> None:
    recorded, launch = Recorded(ec2), f"launch-{uuid.uuid4().hex[:8]}"
    shards = start_shards(recorded, count=3, instance_type=TYPE, placement=placement,
                          launch_id=launch, name="lambdadnn-worker", lifetime_s=86_700,
                          retry=retry(recorded.clock), clock=recorded.clock)
    assert len(shards.ids) == len(set(shards.ids)) == 3 and shards.instance_type == TYPE
    found = {i["InstanceId"]: i for r in ec2.describe_instances(
        InstanceIds=list(shards.ids))["Reservations"] for i in r["Instances"]}
    assert {i["InstanceType"] for i in found.values()} == {TYPE}
    assert {i["SubnetId"] for i in found.values()} == {network.subnet_id}
    assert {i["ImageId"] for i in found.values()} == {network.image_id}
    assert all([g["GroupId"] for g in i["SecurityGroups"]] == [network.redis_group]
               for i in found.values())
    assert set(tagged(ec2, launch)) == set(shards.ids)
    assert all({"Key": "Name", "Value": "lambdadnn-worker-ps-shard"} in i["Tags"]
               for i in found.values())
    # The URLs are the shards' private addresses, in the order RunInstances gave the ids.
    assert shards.urls == tuple(f"redis://:{PASSWORD}@{found[i]['PrivateIpAddress']}:6379/0"
                                for i in shards.ids)
    run = recorded.first("RunInstances").params
    assert run["MinCount"] == run["MaxCount"] == 3
    assert run["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert run["ClientToken"] == launch

    script = base64.b64decode(ec2.describe_instance_attribute(
        InstanceId=shards.ids[0], Attribute="userData")["UserData"]["Value"]).decode()
    assert script.startswith("#!/bin/bash\nset -euo pipefail\n")
    assert "shutdown -P +1445\n" in script  # ⌈86,700 s / 60⌉: it outlives no launch for long
    assert "dnf install -y redis6" in script and "systemctl enable --now redis6" in script
    assert f"'requirepass {PASSWORD}'" in script and "'bind 0.0.0.0'" in script
    assert "'save \"\"'" in script and "protected-mode" not in script

    stop_shards(ec2, shards.ids)
    assert set(states(ec2, shards.ids).values()) <= {"shutting-down", "terminated"}
    stop_shards(ec2, shards.ids)  # already terminated: EC2 (and moto) accept it again
    stop_shards(ec2, ())  # nothing to stop: no call


def test_without_a_password_the_shards_redis_turns_protected_mode_off(
    ec2: Any, placement: ShardPlacement
) -> None:
    open_placement = dataclasses.replace(placement, password=None)
    shards = start_shards(ec2, count=2, instance_type=TYPE, placement=open_placement,
                          launch_id=f"launch-{uuid.uuid4().hex[:8]}")
    try:
        script = base64.b64decode(ec2.describe_instance_attribute(
            InstanceId=shards.ids[1], Attribute="userData")["UserData"]["Value"]).decode()
        assert "'protected-mode no'" in script and "requirepass" not in script
        assert "shutdown" not in script  # no lifetime given
        assert all(url.startswith("redis://10.42.0.") for url in shards.urls)
    finally:
        stop_shards(ec2, shards.ids)


def test_stop_of_gone_and_unknown_instances_terminates_the_rest(
    ec2: Any, placement: ShardPlacement
) -> None:
    shards = start_shards(ec2, count=2, instance_type=TYPE, placement=placement,
                          launch_id=f"launch-{uuid.uuid4().hex[:8]}")
    stop_shards(ec2, shards.ids[:1])
    unknown = "i-0123456789abcdef0"
    recorded = Recorded(ec2)
    # EC2 refuses the whole request for the unknown id; each is then terminated alone.
    stop_shards(recorded, [*shards.ids, unknown])
    assert recorded.operations() == ["TerminateInstances"] * 4
    assert set(states(ec2, shards.ids).values()) <= {"shutting-down", "terminated"}


def test_the_wait_takes_not_yet_known_and_pending_instances_as_not_running_yet(
    ec2: Any, placement: ShardPlacement
) -> None:
    pending = iter([True, True])

    def rewrite(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation == "DescribeInstances" and next(pending, False):
            for reservation in answer["Reservations"]:
                for instance in reservation["Instances"]:
                    instance["State"] = {"Name": "pending"}
        return answer

    clock = FakeClock()
    recorded = Recorded(ec2, clock, faults={"describe_instances": [
        "InvalidInstanceID.NotFound"]}, rewrite=rewrite)
    answered: list[str] = []

    def ready(url: str) -> bool:
        answered.append(url)
        return len(answered) > 2  # the first shard's Redis answers at the second look

    shards = start_shards(recorded, count=2, instance_type=TYPE, placement=placement,
                          launch_id=f"launch-{uuid.uuid4().hex[:8]}", retry=retry(clock),
                          clock=clock, poll_s=7.0, ready=ready)
    try:
        assert recorded.operations() == ["RunInstances"] + ["DescribeInstances"] * 4
        assert clock.sleeps == [7.0] * 4  # three looks at instances, then one at a Redis
        assert answered == [shards.urls[0], shards.urls[1], shards.urls[0], shards.urls[1]]
        assert shards.started_at == clock.now == 28.0
    finally:
        stop_shards(ec2, shards.ids)


def test_shards_not_running_by_the_deadline_are_terminated(
    ec2: Any, placement: ShardPlacement
) -> None:
    def never_running(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation == "DescribeInstances":
            for reservation in answer["Reservations"]:
                for instance in reservation["Instances"]:
                    instance["State"] = {"Name": "pending"}
        return answer

    clock = FakeClock()
    recorded = Recorded(ec2, clock, rewrite=never_running)
    launch = f"launch-{uuid.uuid4().hex[:8]}"
    with pytest.raises(AwsLaunchError, match=r"were not running after 60 s \(still pending\)"):
        start_shards(recorded, count=2, instance_type=TYPE, placement=placement,
                     launch_id=launch, retry=retry(clock), clock=clock, deadline_s=60.0,
                     poll_s=5.0)
    assert clock.now == 60.0
    assert recorded.operations()[-1] == "TerminateInstances"
    assert set(tagged(ec2, launch).values()) <= {"shutting-down", "terminated"}


def test_a_shard_that_dies_at_boot_fails_the_start_and_the_rest_are_terminated(
    ec2: Any, placement: ShardPlacement
) -> None:
    def first_dies(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation == "DescribeInstances":
            instance = answer["Reservations"][0]["Instances"][0]
            instance["State"] = {"Name": "terminated"}
            instance["StateReason"] = {"Message": "Server.InternalError"}
        return answer

    launch = f"launch-{uuid.uuid4().hex[:8]}"
    with pytest.raises(AwsLaunchError, match=r"is terminated before it ran \(Server.Internal"):
        start_shards(Recorded(ec2, rewrite=first_dies), count=2, instance_type=TYPE,
                     placement=placement, launch_id=launch)
    assert set(tagged(ec2, launch).values()) <= {"shutting-down", "terminated"}


def test_a_start_without_an_answer_terminates_what_its_tag_finds(
    ec2: Any, placement: ShardPlacement
) -> None:
    """RunInstances started the shards but its answer was lost (here: raised after the
    call, as a read timeout would): they are found by their launch tag and terminated."""

    class Lost(Exception):
        pass

    def lose(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation == "RunInstances":
            raise Lost("read timeout")
        return answer

    launch = f"launch-{uuid.uuid4().hex[:8]}"
    recorded = Recorded(ec2, rewrite=lose)
    with pytest.raises(Lost):
        start_shards(recorded, count=2, instance_type=TYPE, placement=placement,
                     launch_id=launch)
    assert recorded.operations() == ["RunInstances", "DescribeInstances", "TerminateInstances"]
    assert len(tagged(ec2, launch)) == 2
    assert set(tagged(ec2, launch).values()) <= {"shutting-down", "terminated"}


# -- EC2's errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "fix"), [
    ("InvalidParameterValue", "parameter server's `type`"),  # EC2's answer to an unknown type
    ("InsufficientInstanceCapacity", "no capacity of that type"),
    ("VcpuLimitExceeded", "vCPU quota"),
    ("UnauthorizedOperation", "--print-policy"),
    ("InvalidSubnetID.NotFound", "see the AWS error message"),
])
def test_ec2_refusing_the_start_is_one_launch_error_with_its_code_and_nothing_runs(
    ec2: Any, placement: ShardPlacement, code: str, fix: str
) -> None:
    launch = f"launch-{uuid.uuid4().hex[:8]}"
    recorded = Recorded(ec2, faults={"run_instances": [code]})
    with pytest.raises(AwsLaunchError) as refused:
        start_shards(recorded, count=2, instance_type=TYPE, placement=placement,
                     launch_id=launch)
    assert isinstance(refused.value, LaunchError) and refused.value.code == code
    message = str(refused.value)
    assert message.startswith(f"RunInstances on 2 PS shards ({TYPE}) failed with {code}: ")
    assert fix in message and "\n" not in message
    assert recorded.operations() == ["RunInstances"]  # EC2 answered: nothing to terminate
    assert tagged(ec2, launch) == {}


def test_other_errors_of_a_stop_propagate_with_their_code(
    ec2: Any, placement: ShardPlacement
) -> None:
    shards = start_shards(ec2, count=2, instance_type=TYPE, placement=placement,
                          launch_id=f"launch-{uuid.uuid4().hex[:8]}")
    denied = Recorded(ec2, faults={"terminate_instances": ["UnauthorizedOperation"]})
    with pytest.raises(AwsLaunchError, match="failed with UnauthorizedOperation") as refused:
        stop_shards(denied, shards.ids)
    assert refused.value.code == "UnauthorizedOperation"
    assert set(states(ec2, shards.ids).values()) == {"running"}
    # After an unknown id, each is terminated alone; a denied one does not stop the others.
    mixed = Recorded(ec2, faults={"terminate_instances": ["InvalidInstanceID.NotFound",
                                                         "UnauthorizedOperation"]})
    with pytest.raises(AwsLaunchError, match="UnauthorizedOperation"):
        stop_shards(mixed, shards.ids)
    assert states(ec2, shards.ids)[shards.ids[0]] == "running"
    assert states(ec2, shards.ids)[shards.ids[1]] in {"shutting-down", "terminated"}
    stop_shards(ec2, shards.ids)


def test_a_throttled_start_is_retried_with_the_same_client_token(
    ec2: Any, placement: ShardPlacement
) -> None:
    clock = FakeClock()
    recorded = Recorded(ec2, clock, faults={"run_instances": ["RequestLimitExceeded"] * 2})
    shards = start_shards(recorded, count=2, instance_type=TYPE, placement=placement,
                          launch_id=f"launch-{uuid.uuid4().hex[:8]}", retry=retry(clock),
                          clock=clock)
    try:
        runs = [call for call in recorded.calls if call.operation == "RunInstances"]
        assert len(runs) == 3 and len({call.params["ClientToken"] for call in runs}) == 1
        assert len(clock.sleeps) == 2 and 0 < clock.sleeps[0] <= clock.sleeps[1]
    finally:
        stop_shards(ec2, shards.ids)


# -- placement --------------------------------------------------------------------------------


def test_the_shards_are_placed_beside_the_channels_redis(ec2: Any, network: Network) -> None:
    assert placement_of(ec2, network.redis_url) == ShardPlacement(
        network.subnet_id, (network.redis_group,), network.image_id, PASSWORD, TYPE)
    assert redis_type_of(ec2, network.redis_url) == TYPE
    unauthenticated = network.redis_url.replace(f":{PASSWORD}@", "")
    assert placement_of(ec2, unauthenticated).password is None


@pytest.mark.parametrize(("url", "refusal"), [
    ("redis://:pw@10.99.99.99:6379/0", "is no running EC2 instance of this region"),
    ("redis://:pw@ps.internal.example:6379/0", "is no running EC2 instance of this region"),
    ("rediss://:pw@10.42.0.9:6379/0", "is no redis:// URL of a host"),
    ("unix:///tmp/redis.sock", "is no redis:// URL of a host"),
])
def test_a_redis_that_is_no_ec2_instance_is_refused(ec2: Any, url: str, refusal: str) -> None:
    with pytest.raises(AwsLaunchError, match=refusal) as refused:
        placement_of(ec2, url)
    assert ":pw@" not in str(refused.value)


@pytest.mark.parametrize("password", ["pa ss", "x'; rm -rf / #", "pässword", "", "a" * 129])
def test_a_password_unsafe_in_the_boot_script_is_refused(
    network: Network, password: str
) -> None:
    with pytest.raises(AwsLaunchError, match="letters and digits"):
        ShardPlacement(network.subnet_id, (network.redis_group,), network.image_id, password)


def test_a_placement_needs_a_subnet_an_image_and_a_group(network: Network) -> None:
    with pytest.raises(AwsLaunchError, match="needs a subnet, an image and a security group"
                       ) as refused:
        ShardPlacement(network.subnet_id, (), network.image_id, PASSWORD)
    assert PASSWORD not in str(refused.value)


# -- the plan's type and the channel's Redis (shard 0) ----------------------------------------

OTHER = "m5.large"  # the stack's default PsInstanceType


@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_plan_of_another_type_than_the_channels_redis_is_refused_before_anything_starts(
    client: Any, ec2: Any, target: AwsTarget, network: Network, k: int
) -> None:
    """Shard 0 is the stack's Redis (a TYPE here): a plan timed and priced for OTHER would
    not run as planned; refused in one line naming both types and both fixes."""
    machines, functions = Recorded(ec2), Recorded(client)
    with pytest.raises(AwsLaunchError) as refused:
        run_aws(sharded(k, OTHER), functions, target, redis_url=network.redis_url,
                job="job-type", channel=done_after(1), following=following(FakeClock()),
                shards=ShardOptions(ec2=machines))
    message = str(refused.value)
    assert "\n" not in message and PASSWORD not in message
    assert f"the plan's parameter server is {OTHER}, but its shard 0 is the channel's Redis, " \
           f"a {TYPE}" in message
    assert f"deploy the stack with `PsInstanceType` = {OTHER}" in message
    assert f"solve with `parameter_server: {{catalogue: ec2, type: {TYPE}}}`" in message
    assert machines.operations() == ["DescribeInstances"]  # nothing started
    assert functions.calls == []


def test_a_given_placement_of_another_type_is_refused_without_a_call(
    target: AwsTarget, network: Network, placement: ShardPlacement
) -> None:
    typed = dataclasses.replace(placement, instance_type=OTHER)
    with pytest.raises(AwsLaunchError, match=f"parameter server is {TYPE}, but .* a {OTHER}"):
        dry_run(sharded(3), target, redis_url=network.redis_url, job="job-type",
                placement=typed)
    calls = dry_run(sharded(3), target, redis_url=network.redis_url, job="job-type",
                    placement=dataclasses.replace(placement, instance_type=TYPE))
    assert calls[0].operation == "RunInstances"


@pytest.mark.parametrize("url", ["redis://:pw@10.42.0.250:6379/0",
                                 "rediss://:pw@cache.example:6379/0"])
def test_one_shard_beside_a_redis_that_is_no_ec2_instance_goes_on(
    client: Any, ec2: Any, target: AwsTarget, url: str
) -> None:
    """Its type is unknown (ElastiCache, a Redis elsewhere): nothing to compare, as before."""
    machines = Recorded(ec2)
    report = run_aws(sharded(1, OTHER), client, target, redis_url=url, job="job-elsewhere",
                     channel=done_after(1), following=following(FakeClock()),
                     shards=ShardOptions(ec2=machines))
    assert report.status == "done" and "PS" not in report.runs_on
    assert machines.operations() == (["DescribeInstances"] if url.startswith("redis:")
                                     else [])


@pytest.mark.parametrize(("plan", "redis"), [
    (TYPE, TYPE), (None, TYPE), (TYPE, None), (None, None)])
def test_the_type_check_passes_a_match_and_anything_unknown(
    plan: str | None, redis: str | None
) -> None:
    check_ps_type(plan, redis)


# -- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -1, True, 2.0])
def test_a_count_that_is_no_whole_number_of_at_least_one_makes_no_call(
    ec2: Any, placement: ShardPlacement, count: Any
) -> None:
    recorded = Recorded(ec2)
    with pytest.raises(AwsLaunchError, match="whole number"):
        start_shards(recorded, count=count, instance_type=TYPE, placement=placement,
                     launch_id="launch-hostile")
    assert recorded.calls == []


def test_an_unknown_type_is_passed_to_ec2_as_is(ec2: Any, placement: ShardPlacement) -> None:
    """EC2 refuses it (InvalidParameterValue, see the error test above); moto starts it."""
    recorded = Recorded(ec2)
    shards = start_shards(recorded, count=2, instance_type="c5n.bogus; reboot",
                          placement=placement, launch_id=f"launch-{uuid.uuid4().hex[:8]}")
    try:
        assert recorded.first("RunInstances").params["InstanceType"] == "c5n.bogus; reboot"
        found = ec2.describe_instances(InstanceIds=list(shards.ids))["Reservations"]
        assert {i["InstanceType"] for r in found for i in r["Instances"]} == {
            "c5n.bogus; reboot"}
    finally:
        stop_shards(ec2, shards.ids)
    with pytest.raises(AwsLaunchError, match="need an EC2 instance type"):
        start_shards(recorded, count=2, instance_type="", placement=placement,
                     launch_id="launch-hostile")


@pytest.mark.parametrize("solved", [1, 3])
def test_a_launch_of_shards_of_no_type_is_refused_before_any_call(
    target: AwsTarget, solved: int
) -> None:
    refusal = r"runs 3 PS shards and the plan's parameter server has no `type`: shards 1\.\.2"
    with pytest.raises(AwsLaunchError, match=refusal):
        shard_count(sharded(3, None, solved=solved))
    with pytest.raises(AwsLaunchError, match=refusal):
        dry_run(sharded(3, None, solved=solved), target, redis_url="redis://10.42.0.5:6379/0",
                job="j")
    assert shard_count(sharded(1, None, solved=solved)) == 1  # the channel's Redis: no type


@pytest.mark.parametrize("shards", [0, -3, True, 2.5, 17])
def test_a_count_of_shards_that_is_none_is_refused_with_the_spec(shards: Any) -> None:
    """`shard_count` reads `LaunchSpec.shards`, which no bad count gets into."""
    with pytest.raises(LambdaDnnError, match="whole number of parameter-server shards"):
        sharded(shards, solved=1)


def test_shards_without_the_plans_instance_are_refused(target: AwsTarget) -> None:
    spec = dataclasses.replace(sharded(2), instance=None)
    assert shard_count(dataclasses.replace(spec, shards=1)) == 1
    with pytest.raises(AwsLaunchError, match=r"has no `type`.*--shards 1"):
        shard_count(spec)


def test_one_shard_is_the_channels_redis_and_starts_nothing(
    target: AwsTarget, network: Network, role_arn: str
) -> None:
    """In a VPC it only looks up the Redis's type (the check); outside one, no EC2 call."""
    assert shard_count(sharded(1)) == 1
    calls = dry_run(sharded(1), target, redis_url=network.redis_url, job="job-one")
    assert calls[0].operation == "DescribeInstances" and "Filters" in calls[0].params
    assert not {"RunInstances", "TerminateInstances"} & {call.operation for call in calls}
    environment = calls[1].params["Environment"]["Variables"]
    assert REDIS_URLS_ENV not in environment and environment[REDIS_URL_ENV] == network.redis_url
    outside = AwsTarget(target.function_name, role_arn)
    calls = dry_run(sharded(1), outside, redis_url=network.redis_url, job="job-one")
    assert calls[0].operation == "CreateFunction"
    assert "DescribeInstances" not in {call.operation for call in calls}


def test_shards_need_a_function_in_the_vpc_and_an_ec2_client(
    client: Any, role_arn: str, network: Network
) -> None:
    outside = AwsTarget(f"lambdadnn-shards-{uuid.uuid4().hex[:10]}", role_arn)
    recorded = Recorded(client)
    with pytest.raises(AwsLaunchError, match="reached at private addresses in the channel's VPC"):
        run_aws(sharded(2), recorded, outside, redis_url=network.redis_url, job="j",
                channel=done_after(1), shards=ShardOptions(ec2=recorded))
    inside = dataclasses.replace(outside, subnet_ids=(network.subnet_id,),
                                 security_group_ids=(network.function_group,))
    with pytest.raises(AwsLaunchError, match="no EC2 client was given"):
        run_aws(sharded(2), recorded, inside, redis_url=network.redis_url, job="j",
                channel=done_after(1))
    assert recorded.calls == []


# -- a sharded launch -------------------------------------------------------------------------


def ec2_urls(ec2: Any, ids: list[str]) -> list[str]:
    """The URLs of the EC2 shards `ids`, in that order (shards 1..k-1)."""
    addresses = {i["InstanceId"]: i["PrivateIpAddress"] for r in ec2.describe_instances(
        InstanceIds=ids)["Reservations"] for i in r["Instances"]}
    return [f"redis://:{PASSWORD}@{addresses[i]}:6379/0" for i in ids]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_a_launch_of_k_shards_starts_k_minus_1_and_lists_the_channels_redis_first(
    client: Any, ec2: Any, target: AwsTarget, network: Network, k: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    functions, machines = Recorded(client, clock), Recorded(ec2, clock)
    report = run_aws(sharded(k), functions, target, redis_url=network.redis_url,
                     job="job-shards", channel=done_after(4), following=following(clock),
                     shards=ShardOptions(ec2=machines))
    assert report.status == "done" and report.shards == k
    assert machines.operations() == ["DescribeInstances", "RunInstances", "DescribeInstances",
                                     "TerminateInstances"]
    run = machines.first("RunInstances").params
    assert run["InstanceType"] == TYPE and run["MinCount"] == run["MaxCount"] == k - 1
    assert run["SubnetId"] == network.subnet_id
    assert run["SecurityGroupIds"] == [network.redis_group]
    launch = launch_id_of(machines)
    assert launch.startswith("job-shards-")
    ids = machines.calls[-1].params["InstanceIds"]
    assert len(ids) == k - 1 and set(ids) == set(tagged(ec2, launch))
    assert set(tagged(ec2, launch).values()) <= {"shutting-down", "terminated"}

    # The function's environment: shard 0 is the channel's Redis, then the EC2 shards.
    variables = functions.first("CreateFunction").params["Environment"]["Variables"]
    urls = [network.redis_url, *ec2_urls(ec2, ids)]
    assert variables == {REDIS_URL_ENV: network.redis_url, JOB_ENV: "job-shards",
                         REDIS_URLS_ENV: ",".join(urls)}
    # ... which is what a worker of this launch connects to, shard by shard.
    from lambdadnn.launcher.worker import shard_urls

    monkeypatch.setenv(REDIS_URLS_ENV, variables[REDIS_URLS_ENV])
    event = json.loads(functions.first("Invoke").params["Payload"])
    assert event["shards"] == k and event["redis_url"] == network.redis_url
    assert shard_urls(event) == urls
    assert functions.operations()[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]
    with pytest.raises(ClientError):
        client.get_function(FunctionName=target.function_name)

    # All k shards, the channel's Redis included, billed from start_shards' return (its
    # last look) to the stop call, at k × PRICE.
    up_s = machines.times[-1] - machines.times[2]
    assert up_s == 15.0  # three polls of 5 s: the channel reports done at its fourth look
    bill = ShardBill(k, TYPE, PRICE, up_s)
    assert bill.cost_usd == pytest.approx(k * PRICE * up_s / 3600, rel=1e-12)
    assert report.runs_on.endswith(f"; {bill.describe()}")
    assert bill.describe() == (
        f"PS {k} × {TYPE} (the channel's Redis and {k - 1} EC2 instance"
        f"{'s' if k > 2 else ''}) at ${PRICE:g}/h each for 15 s: ${bill.cost_usd:.4f}")


@pytest.mark.parametrize(("solved", "launched"), [(1, 3), (3, 2), (4, 1)])
def test_the_shards_launched_are_the_specs_so_shards_overrides_the_plans(
    target: AwsTarget, network: Network, solved: int, launched: int
) -> None:
    """`--shards` sets `LaunchSpec.shards`, which the workers' event carries: the EC2 shards
    follow it, not the plan's `parameter_server.shards`."""
    spec = sharded(solved).with_shards(launched)
    calls = dry_run(spec, target, redis_url=network.redis_url, job="job-override")
    runs = [call.params for call in calls if call.operation == "RunInstances"]
    assert [run["MinCount"] for run in runs] == ([launched - 1] if launched > 1 else [])
    create = next(call for call in calls if call.operation == "CreateFunction")
    listed = create.params["Environment"]["Variables"].get(REDIS_URLS_ENV, "")
    assert len(listed.split(",")) == launched if launched > 1 else listed == ""
    invoke = json.loads(next(c for c in calls if c.operation == "Invoke").params["Payload"])
    assert invoke.get("shards", 1) == launched


@pytest.mark.parametrize("denied", [False, True])
def test_the_launchers_channel_holds_every_shard_and_closes_them(
    client: Any, ec2: Any, target: AwsTarget, placement: ShardPlacement, redis_url: str,
    monkeypatch: pytest.MonkeyPatch, denied: bool,
) -> None:
    """`run_aws_job` on a real Redis (shard 0) and three moto shards: once they run, the
    launcher follows a channel of all four, whose shard clients are made without connecting
    (their Redis is still installing, and these answer nothing) and closed at the end, a
    failed deploy's end too; the job's keys are deleted from shard 0."""
    import redis as redis_py

    from lambdadnn.launcher import channel as channel_module

    made: list[tuple[str, bool]] = []
    closed: list[str] = []
    channels: list[Any] = []
    real_client = channel_module.redis_client

    def recorded_client(url: str, *, option: str = "redis_url", ping: bool = True) -> Any:
        made.append((url, ping))
        opened = real_client(url, option=option, ping=ping)
        close = opened.close
        opened.close = lambda: (closed.append(url), close())  # type: ignore[method-assign]
        return opened

    class RecordedChannel(channel_module.ParameterChannel):
        """Counts the launcher's looks at it."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.looks = 0
            channels.append(self)

        def progress(self) -> dict[str, Any]:
            self.looks += 1
            return super().progress()

    monkeypatch.setattr(channel_module, "redis_client", recorded_client)
    monkeypatch.setattr(channel_module, "ParameterChannel", RecordedChannel)
    job = f"job-{uuid.uuid4().hex[:8]}"
    shard0 = redis_py.Redis.from_url(redis_url)
    shard0.set(f"lambdadnn:{job}:result", json.dumps({"iterations": 10}))  # done at once
    clock = FakeClock()
    machines = Recorded(ec2, clock)
    functions = Recorded(client, faults={"create_function": ["AccessDeniedException"]}
                         if denied else None)
    try:
        report = run_aws_job(sharded(4), functions, target, redis_url=redis_url, job=job,
                             following=following(clock),
                             shards=ShardOptions(ec2=machines, placement=placement))
        assert not denied and report.status == "done"
    except AwsLaunchError as refused:
        assert denied and refused.code == "AccessDeniedException"
    ids = machines.calls[-1].params["InstanceIds"]
    assert machines.operations()[-1] == "TerminateInstances" and len(ids) == 3
    shard_urls = ec2_urls(ec2, ids)
    assert made == [(redis_url, True), *((url, False) for url in shard_urls)]
    assert [each.shards for each in channels] == [1, 4]
    assert channels[1].client is channels[0].client
    assert channels[0].looks == 0 and channels[1].looks == (0 if denied else 1)
    assert sorted(closed) == sorted([redis_url, *shard_urls])
    assert list(shard0.scan_iter(match=f"lambdadnn:{job}:*")) == []
    shard0.close()


def test_a_failed_deploy_still_terminates_the_shards(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    functions = Recorded(client, faults={"create_function": ["AccessDeniedException"]})
    machines = Recorded(ec2)
    with pytest.raises(AwsLaunchError, match=r"CreateFunction .* AccessDeniedException"):
        run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-denied",
                channel=done_after(1), following=following(FakeClock()),
                shards=ShardOptions(ec2=machines))
    assert machines.operations()[-1] == "TerminateInstances"
    assert len(tagged(ec2, launch_id_of(machines))) == 1  # shard 1; shard 0 is the Redis
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


def test_a_run_whose_workers_never_start_terminates_the_shards(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    machines = Recorded(ec2)
    with pytest.raises(AwsLaunchError, match="no progress"):
        run_aws(sharded(2), client, target, redis_url=network.redis_url, job="job-stuck",
                channel=Channel(lambda: {"iteration": 0}), following=following(FakeClock()),
                shards=ShardOptions(ec2=machines))
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


def test_a_failed_run_reports_the_shards_bill(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    """Rounds that move but never get past iteration 5: after three relaunches in a row
    without progress the run fails, with a report whose `runs_on` holds the bill."""
    clock = FakeClock()
    began = [0.0]

    def progress() -> dict[str, Any]:  # beats for 100 s of each round, then goes quiet
        return {"iteration": 5, "beat": min(clock.now - began[0], 100.0) // 5}

    machines = Recorded(ec2, clock)
    # Each rewind of the two shards is a restore in the function, which goes back to 5.
    functions = Restoring(client, clock, answers=[restored("job-stall", 5)] * 4)
    with pytest.raises(RunFailed, match="3 relaunches in a row") as failed:
        run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-stall",
                channel=Channel(progress, on_restart=lambda: began.__setitem__(0, clock.now)),
                options=RunOptions(max_restarts=10), following=following(clock),
                shards=ShardOptions(ec2=machines))
    assert len(functions.restores()) == 4 and functions.answers == []
    up_s = machines.times[-1] - machines.times[2]
    assert up_s >= 4 * 900
    bill = ShardBill(2, TYPE, PRICE, up_s)
    assert failed.value.report.runs_on.endswith(
        f"; PS 2 × {TYPE} (the channel's Redis and 1 EC2 instance) at ${PRICE:g}/h each for "
        f"{up_s:.0f} s: ${bill.cost_usd:.4f}")
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


@pytest.fixture
def guarded() -> Iterator[list[int]]:
    """Signal handlers of the test's own that record (not die of) a SIGINT, SIGTERM or
    SIGHUP that the launch let through; the launch must put them back as they were."""
    seen: list[int] = []

    def note(signum: int, _frame: FrameType | None) -> None:
        seen.append(signum)

    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, note) for number in numbers}
    try:
        yield seen
        assert all(signal.getsignal(number) is note for number in numbers)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@pytest.mark.parametrize(("signum", "times"), [
    (signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGHUP, 1), (signal.SIGTERM, 2),
])
def test_a_stop_signal_terminates_the_shards_and_deletes_the_function(
    client: Any, ec2: Any, target: AwsTarget, network: Network, guarded: list[int],
    signum: int, times: int,
) -> None:
    """At the first look only. Once: noted, and raised at the next check (after the next
    poll's pause, before the next look); twice: the second raises at once, with no pause."""
    looks: list[int] = []

    def progress() -> dict[str, Any]:
        looks.append(1)
        for _ in range(times if len(looks) == 1 else 0):
            os.kill(os.getpid(), signum)
        return {"iteration": 0}

    clock = FakeClock()
    machines, functions = Recorded(ec2), Recorded(client)
    with pytest.raises(AwsInterrupted) as stopped:
        run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-signal",
                channel=Channel(progress), following=following(clock),
                shards=ShardOptions(ec2=machines))
    assert isinstance(stopped.value, Interrupted) and stopped.value.signum == signum
    assert looks == [1] and clock.sleeps == ([5.0] if times == 1 else [])
    assert str(stopped.value).startswith(f"launch stopped by {signal.Signals(signum).name}; ")
    assert guarded == []
    assert machines.operations()[-1] == "TerminateInstances"
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}
    assert functions.operations()[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]
    with pytest.raises(ClientError):
        client.get_function(FunctionName=target.function_name)


def test_a_signal_during_the_wait_for_the_shards_terminates_them(
    ec2: Any, target: AwsTarget, network: Network, guarded: list[int]
) -> None:
    def pending_and_signalled(operation: str, answer: dict[str, Any]) -> dict[str, Any]:
        if operation == "DescribeInstances" and "Filters" not in str(machines.calls[-1]):
            os.kill(os.getpid(), signal.SIGTERM)
            for reservation in answer["Reservations"]:
                for instance in reservation["Instances"]:
                    instance["State"] = {"Name": "pending"}
        return answer

    clock = FakeClock()
    machines = Recorded(ec2, clock, rewrite=pending_and_signalled)
    functions = Recorded(object())
    with pytest.raises(AwsInterrupted):
        run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-wait",
                channel=done_after(1), following=following(clock),
                shards=ShardOptions(ec2=machines))
    assert machines.operations() == ["DescribeInstances", "RunInstances", "DescribeInstances",
                                     "TerminateInstances"]
    assert clock.sleeps == [5.0]  # raised after the first pause, not at the deadline
    assert functions.calls == []  # no function was made
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


# -- dry run, policy, clients -----------------------------------------------------------------


def test_the_dry_run_records_the_ec2_calls_without_making_them(
    target: AwsTarget, network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*_args: Any) -> None:
        raise AssertionError("the dry run opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    calls = dry_run(sharded(3), target, redis_url=network.redis_url, job="job-dry")
    assert [call.operation for call in calls] == [
        "DescribeInstances", "RunInstances", "DescribeInstances",
        "CreateFunction", "GetFunction", "PutFunctionEventInvokeConfig",
        "PutFunctionConcurrency", "Invoke", "Invoke", "Invoke",
        "TerminateInstances", "DeleteFunctionConcurrency", "DeleteFunction",
    ]
    run = calls[1].params
    assert run["InstanceType"] == TYPE and run["MinCount"] == run["MaxCount"] == 2
    assert run["SubnetId"] == "SUBNET-OF-THE-REDIS"  # the placeholders of a dry run
    assert f"requirepass {PASSWORD}" in run["UserData"]
    environment = calls[3].params["Environment"]["Variables"]
    assert environment[REDIS_URLS_ENV] == ",".join([network.redis_url, *(
        f"redis://:{PASSWORD}@SHARD-{shard}-HOST:6379/0" for shard in (1, 2))])
    assert calls[10].params["InstanceIds"] == [f"i-dry-run-shard-{s}" for s in (1, 2)]
    json.dumps([call.params for call in calls])  # printable as JSON for `--dry-run --json`

    given = ShardPlacement(network.subnet_id, (network.redis_group,), network.image_id)
    placed = dry_run(sharded(2), target, redis_url=network.redis_url, job="job-dry",
                     placement=given)
    assert placed[0].operation == "RunInstances"
    assert placed[0].params["SubnetId"] == network.subnet_id


def test_the_policy_grants_every_ec2_call_of_a_sharded_launch(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    machines, functions = Recorded(ec2), Recorded(client)
    run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-policy",
            channel=done_after(1), following=following(FakeClock()),
            shards=ShardOptions(ec2=machines))
    policy = required_policy(target)
    granted = {action for statement in policy["Statement"]
               for action in ([statement["Action"]] if isinstance(statement["Action"], str)
                              else statement["Action"])}
    made = {SHARD_POLICY_ACTIONS[operation] for operation in machines.operations()}
    assert made | {SHARD_POLICY_ACTIONS["CreateTags"]} == set(SHARD_POLICY_ACTIONS.values())
    assert set(SHARD_POLICY_ACTIONS.values()) <= granted
    assert {POLICY_ACTIONS[operation] for operation in functions.operations()} <= granted
    terminate = next(s for s in policy["Statement"] if s["Action"] == "ec2:TerminateInstances")
    assert terminate["Condition"] == {"StringLike": {f"ec2:ResourceTag/{LAUNCH_TAG}": "*"}}
    assert "ec2:RunInstances" not in json.dumps(required_policy(
        AwsTarget(target.function_name, target.role_arn)))  # no VPC, no shards


def test_the_ec2_client_beside_lambda_shares_a_test_servers_endpoint(
    client: Any, moto_endpoint: str
) -> None:
    assert _ec2_beside(client, REGION).meta.endpoint_url == moto_endpoint
    real = aws_client("lambda", REGION)
    assert _ec2_beside(real, REGION).meta.endpoint_url == "https://ec2.us-east-1.amazonaws.com"


def test_the_bill_is_the_models_ps_cost_for_the_uptime() -> None:
    """cost_ps = time · k · p_ps / 3600 (models/equations.py), for the time they were up."""
    assert ShardBill(4, TYPE, PRICE, 3600.0).cost_usd == pytest.approx(4 * PRICE)
    assert ShardBill(2, TYPE, PRICE, 0.0).cost_usd == 0.0
    assert math.isclose(ShardBill(3, TYPE, 0.5, 90.0).cost_usd, 3 * 0.5 * 90 / 3600)
    assert ShardBill(3, TYPE, 0.5, 90.0).describe() == (
        f"PS 3 × {TYPE} (the channel's Redis and 2 EC2 instances) at $0.5/h each for 90 s: "
        "$0.0375")


def test_reports_carry_the_bill_in_runs_on(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    report: LaunchReport = run_aws(
        sharded(2), client, target, redis_url=network.redis_url, job="job-report",
        channel=done_after(2), following=following(FakeClock()), shards=ShardOptions(ec2=ec2))
    assert report.runs_on.startswith(f"function {target.function_name} (x86_64) in {REGION}; ")
    assert report.runs_on.endswith(
        f"; PS 2 × {TYPE} (the channel's Redis and 1 EC2 instance) at $0.108/h each for 5 s: "
        f"${ShardBill(2, TYPE, PRICE, 5.0).cost_usd:.4f}")


# -- rewinding the shards after a crash: a restore in the function ------------------------------
#
# A worker that dies mid-exchange can leave the shards at different live iterations; the
# launcher cannot reach shards 1..k-1 (private VPC addresses), so with k > 1 `rewind` has the
# function restore them, synchronously. Moto runs no function (no Docker: it echoes the
# event), so `Restoring` answers those invocations as the worker would.


@dataclass(frozen=True)
class Reply:
    """The function's answer to a synchronous invocation: its `payload` (as JSON), and
    `FunctionError` when `error` ("Unhandled": the handler raised)."""

    payload: object
    error: str | None = None

    def response(self) -> dict[str, Any]:
        raw = json.dumps(self.payload).encode()
        return {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(raw), len(raw)),
                **({"FunctionError": self.error} if self.error else {})}


def restored(job: str, iteration: int) -> Reply:
    return Reply({"status": "restored", "job": job, "iteration": iteration})


class Restoring(Recorded):
    """`Recorded`, whose synchronous (RequestResponse) invocations are answered by the next of
    `answers` instead of moto: a `Reply`, an AWS error code (raised), or None (moto answers,
    echoing the event); `during` runs at each, as if while the function ran."""

    def __init__(self, wrapped: Any, clock: FakeClock | None = None,
                 answers: list[Reply | str | None] | None = None,
                 during: Callable[[], object] = lambda: None) -> None:
        super().__init__(wrapped, clock)
        self.answers, self.during = list(answers or []), during

    def __getattr__(self, method: str) -> Callable[..., Any]:
        forwarded = super().__getattr__(method)
        if method != "invoke":
            return forwarded

        def invoke(**params: Any) -> Any:
            if params.get("InvocationType") != "RequestResponse":
                return forwarded(**params)
            self.calls.append(Call("Invoke", params))
            self.times.append(self.clock.now)
            self.during()
            answer = self.answers.pop(0)
            if isinstance(answer, str):
                raise ClientError({"Error": {"Code": answer, "Message": "injected"}}, "Invoke")
            if answer is None:
                return self.client.invoke(**params)
            return answer.response()

        return invoke

    def restores(self) -> list[dict[str, Any]]:
        """The events of the synchronous invocations, in order."""
        return [json.loads(call.params["Payload"]) for call in self.calls
                if call.operation == "Invoke"
                and call.params["InvocationType"] == "RequestResponse"]


@contextlib.contextmanager
def between_rounds(
    spec: LaunchSpec, functions: Any, ec2: Any, target: AwsTarget, network: Network,
    placement: ShardPlacement, clock: FakeClock,
) -> Iterator[AwsBackend]:
    """An `AwsBackend` of `spec` as the orchestrator has it when it rewinds: set up (shards
    1..k-1 started, the function deployed) and a round invoked; stopped afterwards."""
    backend = AwsBackend(spec, functions, target, redis_url=network.redis_url,
                         job=f"job-{uuid.uuid4().hex[:8]}", channel=done_after(1),
                         timeout_s=900.0, following=following(clock),
                         shards=ShardOptions(ec2=Recorded(ec2, clock), placement=placement))
    try:
        backend.setup()
        backend.start(spec.worker_event(job=backend.job, redis_url=backend.redis_url,
                                        settings=RunOptions().settings()))
        yield backend
    finally:
        backend.stop(finished=False)


def test_one_shard_rewinds_to_the_live_iteration_without_a_call(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement
) -> None:
    """Its live state is always consistent: the next round resumes from it, as before."""
    clock = FakeClock()
    functions = Restoring(client, clock)  # a restore would find no answer and fail
    with between_rounds(sharded(1), functions, ec2, target, network, placement,
                        clock) as backend:
        made = len(functions.calls)
        assert backend.rewind(7) == 7
        assert len(functions.calls) == made and functions.restores() == []


@pytest.mark.parametrize("k", [2, 3])
def test_k_shards_rewind_to_the_checkpoint_the_function_restores(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement,
    k: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One synchronous invocation, whose event holds the channel's fields of the workers'
    event and every shard's URL (the channel's Redis first); the rewind is the iteration the
    function answers, not the live one."""
    from lambdadnn.launcher.worker import shard_urls

    clock = FakeClock()
    functions = Restoring(client, clock)
    spec = sharded(k)
    with between_rounds(spec, functions, ec2, target, network, placement, clock) as backend:
        functions.answers.append(restored(backend.job, 6))
        made = len(functions.calls)
        assert backend.rewind(9) == 6
        assert functions.answers == []
        (invoke,) = functions.calls[made:]
        assert invoke.operation == "Invoke"
        assert invoke.params["FunctionName"] == target.function_name
        assert invoke.params["InvocationType"] == "RequestResponse"
        (event,) = functions.restores()
        environment = functions.first("CreateFunction").params["Environment"]["Variables"]
        urls = environment[REDIS_URLS_ENV].split(",")  # the channel's Redis, then shards 1..
        assert len(urls) == k and urls[0] == network.redis_url
        assert event == {"action": "restore", "job": backend.job,
                         "redis_url": network.redis_url, "workers": 3, "shards": k,
                         "key_ttl_s": spec.key_ttl_s, "redis_urls": urls}
        worker = json.loads(next(c for c in functions.calls if c.operation == "Invoke"
                                 and c.params["InvocationType"] == "Event").params["Payload"])
        assert set(event) - set(worker) == {"action", "redis_urls"}
        assert all(event[name] == worker[name] for name in set(event) & set(worker))
        monkeypatch.delenv(REDIS_URLS_ENV, raising=False)
        assert shard_urls(event) == urls  # what the handler connects to, shard by shard


def test_a_sharded_run_restores_once_between_its_rounds_and_goes_on(
    client: Any, ec2: Any, target: AwsTarget, network: Network
) -> None:
    """The first round crashes at iteration 7 (it moves, then goes quiet); the function
    restores the shards to 5, and the second round finishes the job."""
    clock = FakeClock()
    rounds, began = [0], [0.0]

    def progress() -> dict[str, Any]:
        if rounds[0]:
            return {"iteration": 10, "done": True}
        return {"iteration": 7, "beat": min(clock.now - began[0], 100.0) // 5}

    def restart() -> None:
        rounds[0] += 1

    functions = Restoring(client, clock, answers=[restored("job-crash", 5)])
    machines = Recorded(ec2, clock)
    report = run_aws(sharded(2), functions, target, redis_url=network.redis_url,
                     job="job-crash", channel=Channel(progress, on_restart=restart),
                     following=following(clock), shards=ShardOptions(ec2=machines))
    assert report.status == "done" and functions.answers == []
    invokes = [call.params["InvocationType"] for call in functions.calls
               if call.operation == "Invoke"]
    assert invokes == ["Event"] * 3 + ["RequestResponse"] + ["Event"] * 3
    assert functions.restores()[0]["shards"] == 2
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


def test_a_throttled_restore_is_retried_after_a_pause(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement
) -> None:
    clock = FakeClock()
    functions = Restoring(client, clock)
    with between_rounds(sharded(2), functions, ec2, target, network, placement,
                        clock) as backend:
        functions.answers += ["TooManyRequestsException", restored(backend.job, 4)]
        paused = len(clock.sleeps)
        assert backend.rewind(8) == 4
        first, second = functions.restores()
        assert first == second and first["action"] == "restore"
        (pause,) = clock.sleeps[paused:]
        assert 0.25 <= pause <= 0.5  # the first backoff: [d/2, d] with d = 0.5 s


def test_a_restore_that_fails_in_the_function_is_one_line_naming_it_and_its_logs(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement
) -> None:
    """Not retried: the function ran and raised (here: a shard lost its checkpoint)."""
    clock = FakeClock()
    functions = Restoring(client, clock)
    with between_rounds(sharded(3), functions, ec2, target, network, placement,
                        clock) as backend:
        functions.answers.append(Reply({
            "errorType": "ChannelError", "stackTrace": ["..."],
            "errorMessage": f"job {backend.job!r} cannot be restored to iteration 4: shard 2 "
                            "holds no checkpoint of it"}, error="Unhandled"))
        with pytest.raises(AwsLaunchError) as failed:
            backend.rewind(6)
        assert len(functions.restores()) == 1
    message = str(failed.value)
    name = target.function_name
    assert message.startswith(f"function {name!r} failed to restore the PS shards of job ")
    assert f"(Unhandled: ChannelError: \"job {backend.job!r} cannot be restored to " in message
    assert "shard 2 holds no checkpoint of it\"): read the function's CloudWatch" in message
    assert f"CloudWatch logs (log group /aws/lambda/{name})" in message
    assert "\n" not in message and PASSWORD not in message


@pytest.mark.parametrize("payload", [
    {"status": "restored"}, {"status": "restored", "iteration": "4"},
    {"status": "restored", "iteration": True}, {"status": "restored", "iteration": -1},
    {"status": "done", "iteration": 4}, {"iteration": 4}, [4], "restored", None,
])
def test_an_answer_without_an_iteration_is_one_line_naming_the_function(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement,
    payload: object,
) -> None:
    """None: moto's own answer, the event echoed back (as a function of older code that
    returned it would): the URLs and the password it holds are not shown."""
    clock = FakeClock()
    functions = Restoring(client, clock,
                          answers=[None if payload is None else Reply(payload)])
    with between_rounds(sharded(2), functions, ec2, target, network, placement,
                        clock) as backend, pytest.raises(AwsLaunchError) as failed:
        backend.rewind(6)
    message = str(failed.value)
    assert message.startswith(f"function {target.function_name!r} answered the restore of "
                              "the PS shards of job ")
    assert "not the iteration they are back at" in message and "CloudWatch logs" in message
    assert "\n" not in message and PASSWORD not in message and "redis://" not in message
    assert len(functions.restores()) == 1


def test_a_job_without_a_checkpoint_to_restore_is_one_line(
    client: Any, ec2: Any, target: AwsTarget, network: Network, placement: ShardPlacement
) -> None:
    clock = FakeClock()
    functions = Restoring(client, clock)
    with between_rounds(sharded(2), functions, ec2, target, network, placement,
                        clock) as backend:
        functions.answers.append(Reply({"status": "no-checkpoint", "job": backend.job,
                                        "iteration": None}))
        with pytest.raises(AwsLaunchError, match=(
                rf"job {backend.job!r} holds no checkpoint to resume its 2 PS shards from "
                r"after iteration 6 .*CloudWatch logs \(log group /aws/lambda/")):
            backend.rewind(6)


def test_a_stop_signal_during_the_restore_stops_the_launch_and_cleans_up(
    client: Any, ec2: Any, target: AwsTarget, network: Network, guarded: list[int]
) -> None:
    """SIGTERM while the restore is throttled: raised after the backoff's pause, with no
    second invocation; the shards are terminated and the function deleted."""
    clock = FakeClock()
    began = [0.0]

    def progress() -> dict[str, Any]:
        return {"iteration": 7, "beat": min(clock.now - began[0], 100.0) // 5}

    functions = Restoring(client, clock, answers=["TooManyRequestsException"],
                          during=lambda: os.kill(os.getpid(), signal.SIGTERM))
    machines = Recorded(ec2, clock)
    with pytest.raises(AwsInterrupted) as stopped:
        run_aws(sharded(2), functions, target, redis_url=network.redis_url, job="job-stop",
                channel=Channel(progress), following=following(clock),
                shards=ShardOptions(ec2=machines))
    assert stopped.value.signum == signal.SIGTERM and guarded == []
    assert len(functions.restores()) == 1 and functions.answers == []
    assert 0.25 <= clock.sleeps[-1] <= 0.5  # the backoff, then the check that raised
    assert functions.operations()[-2:] == ["DeleteFunctionConcurrency", "DeleteFunction"]
    assert set(tagged(ec2, launch_id_of(machines)).values()) <= {"shutting-down", "terminated"}


# -- the function's side: the worker's restore, on real redis-servers -------------------------

# Three throw-away redis-servers, one per shard (tests/test_channel_shards.py's fixture).
servers = test_channel_shards.servers


class Context:
    """A Lambda context with time to spare (a restore reads no deadline)."""

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def test_the_worker_restores_shards_left_at_different_iterations(servers: list[str]) -> None:
    """A rank died mid-exchange of iteration 3: shard 1 applied its slice, shards 0 and 2
    did not, so the job cannot be read. The worker's restore puts every shard back to the
    checkpoint (2) with its expiry from the event; the job reads and trains on, and a
    retried restore changes nothing."""
    import redis as redis_py

    from lambdadnn.launcher.worker import handler

    size = test_channel_shards.SIZE
    job = f"job-{uuid.uuid4().hex[:8]}"
    clients = [redis_py.Redis.from_url(url) for url in servers]
    channel = ParameterChannel(clients[0], job, workers=1, shard_clients=clients[1:])
    rng = np.random.default_rng(11)
    channel.initialise(rng.normal(size=size), lr=test_channel_shards.LR,
                       momentum=test_channel_shards.MOMENTUM)
    try:
        for iteration in range(2):
            channel.exchange(0, iteration, rng.normal(size=size), 1.0)
        channel.checkpoint(2)
        saved = channel.parameters()[1]
        channel.exchange(0, 2, rng.normal(size=size), 1.0)
        bounds = shard_bounds(size, 3)
        gradient = rng.normal(size=size).astype(np.float32)
        channel._exchange_shard(1, 0, 3, gradient[bounds[1]:bounds[2]], 1.0, False)
        with pytest.raises(ChannelError, match=r"at iterations \[3, 4, 3\]"):
            channel.parameters()

        event = {"action": "restore", "job": job, "redis_url": servers[0], "workers": 4,
                 "shards": 3, "redis_urls": servers, "key_ttl_s": 600}
        assert handler(event, Context()) == {"status": "restored", "job": job, "iteration": 2}
        assert [int(client.hget(channel._key("state", shard), "iteration"))
                for shard, client in enumerate(clients)] == [2, 2, 2]
        live, params = channel.parameters()
        assert live == 2 and params.tobytes() == saved.tobytes()
        assert all(0 < client.ttl(channel._key("state", shard)) <= 600
                   for shard, client in enumerate(clients))
        assert handler(event, Context())["iteration"] == 2
        channel.exchange(0, 2, rng.normal(size=size), 1.0)
        assert channel.parameters()[0] == 3
    finally:
        channel.cleanup()
        channel.close()
        for client in clients:
            client.close()


def test_the_worker_reports_a_job_without_a_checkpoint(servers: list[str]) -> None:
    from lambdadnn.launcher.worker import handler

    job = f"job-{uuid.uuid4().hex[:8]}"
    event = {"action": "restore", "job": job, "redis_url": servers[0], "workers": 1,
             "shards": 3, "redis_urls": servers}
    assert handler(event, Context()) == {"status": "no-checkpoint", "job": job,
                                         "iteration": None}


@pytest.mark.parametrize("action", ["train", "Restore", "cleanup", "", None, ["restore"]])
def test_an_unknown_action_is_refused_before_anything_connects(
    action: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambdadnn.launcher import worker

    def no_connection(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the worker connected before refusing the action")

    monkeypatch.setattr(worker.redis.Redis, "from_url", no_connection)
    event = {"action": action, "job": "job-x", "redis_url": "redis://10.42.0.9:6379/0",
             "workers": 1, "shards": 2, "redis_urls": ["redis://10.42.0.9:6379/0"] * 2}
    with pytest.raises(UnrecoverableError, match=r"the event's `action` is .*; the worker "
                                                 r"runs only \"restore\"") as refused:
        worker.handler(event, Context())
    assert "\n" not in str(refused.value)
