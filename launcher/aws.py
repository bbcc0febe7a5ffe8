"""The AWS Lambda backend: every AWS call lambdadnn makes goes through this one module.

A plan runs on Lambda as `n` copies of one function (`MemorySize = m`, `Timeout = 900`),
invoked asynchronously with ranks 0..n-1; the workers talk to each other only through the
Redis parameter channel (`launcher/channel.py`), whose URL the function finds in its
environment. The function runs the container image holding the worker and its dependencies
(`launcher/image.py`): the worker imports torch, which no zip and its layers can hold
(`NEEDS_IMAGE`), so `lambdadnn launch` runs no zip. The zip of the package's code
(`package_worker`, with `layers`) stays the library's default for a target without an image,
which the tests deploy to a moto server, where nothing runs. Its architecture is the plan's
(`LaunchSpec.architecture`): a plan priced for `aws-lambda-arm64` runs on Graviton. With
`subnet_ids` and `security_group_ids` it runs in a VPC (`VpcConfig`), next to the Redis that
`deploy/stack.yaml` starts (`launcher/stack.py`).

A launch of k parameter-server shards (`LaunchSpec.shards`: the plan's, or `--shards`)
runs shard 0 on the channel's Redis (the stack's, which the launcher follows) and, when k > 1,
shards 1..k-1 on k − 1 EC2 instances of the plan's type (`parameter_server.type`) for the
launch alone: `start_shards` runs them beside the channel's Redis (its subnet, security
groups, image and password, `placement_of`), the function finds every shard's URL in
`LAMBDADNN_REDIS_URLS` (comma-separated, in shard order, the channel's Redis first) and
`stop_shards` terminates them when the launch ends, however it ends. With k = 1 the channel's
Redis is the parameter server, as it always was. Since shard 0 is the channel's Redis, a
plan timed and priced for another type than that Redis's is refused before anything starts.

The boto3 client is always passed in, never built at import time, so that tests can point it
at a moto server, and `--dry-run` can hand over a `DryRunClient` that records every call
without making it. The same reason keeps botocore out of the imports: AWS errors are told
apart by their error code (`exc.response["Error"]["Code"]`), which is all a fake needs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import ipaddress
import json
import math
import random
import re
import signal
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from ..inputs.files import brief
from ..models.prices import price_per_second
from ..solver.instance import ARCHITECTURES, ParameterServer
from ..solver.instance_yaml import platform_path, read_yaml
from . import LaunchError
from .adaptive import Planner
from .backend import Channel, Observed
from .channel import REDIS_URLS_ENV
from .local import Interrupted, StopSignals
from .orchestrator import (
    DEFAULTS,
    REAL_TIME,
    SILENT,
    Clock,
    Hooks,
    RunOptions,
    orchestrate,
)
from .profile import Capacity, Runner
from .spec import WORKER_DEFAULTS, LaunchReport, LaunchSpec, RunFailed

__all__ = [
    "FUNCTION_TIMEOUT_S", "HANDLER", "JOB_ENV", "LAUNCH_TAG", "NEEDS_IMAGE", "NO_CREDENTIALS",
    "POLICY_ACTIONS", "REDIS_URLS_ENV", "REDIS_URL_ENV", "RUNTIME", "SHARD_POLICY_ACTIONS",
    "AwsBackend", "AwsInterrupted", "AwsLaunchError", "AwsLauncher", "AwsTarget", "Call",
    "DryRunClient", "Following", "Retry", "ShardBill", "ShardOptions", "ShardPlacement", "Shards",
    "aws_client", "call_aws", "check_ps_type", "dry_run", "lambda_client", "package_worker",
    "placement_of", "profile_capacity", "profile_runner", "redis_type_of", "required_policy",
    "run_aws", "run_aws_job", "shard_count", "start_shards", "stop_shards",
]

HANDLER = "lambdadnn.launcher.worker.handler"
RUNTIME = "python3.11"
FUNCTION_TIMEOUT_S = 900
REDIS_URL_ENV = "LAMBDADNN_REDIS_URL"
JOB_ENV = "LAMBDADNN_JOB"
LAUNCH_TAG = "lambdadnn:launch"  # on every PS shard: the launch that started it
SHARD_PORT = 6379

ASYNC_PAYLOAD_LIMIT_BYTES = 1_048_576  # Lambda's limit for one asynchronous invocation
# The worker imports `lambdadnn.launcher`, the error root (`models.errors`, from `inputs`) and
# `inputs.files.brief`: all pure Python, shipped together; the solver is not among them.
WORKER_PACKAGES = ("inputs", "launcher", "models")
# Why the worker runs from an image: CPU-only torch alone is larger than a zip may be.
NEEDS_IMAGE = ("the worker imports torch, which is larger than Lambda's 250 MB limit on a zip "
               "deployment and its layers")
# Lambda's VpcConfig: at most 16 subnets and 5 security groups, by ID (8 or 17 hex digits).
_VPC_IDS: dict[str, tuple[str, str, int]] = {
    "subnet_ids": ("--subnet-ids", "subnet", 16),
    "security_group_ids": ("--security-group-ids", "sg", 5),
}

# Error codes that mean "try again later": throttling and Lambda's own transient faults.
RETRYABLE_CODES = frozenset({
    "TooManyRequestsException", "ThrottlingException", "ServiceException",
    "EC2ThrottledException", "ResourceNotReadyException", "RequestLimitExceeded",
})

# The IAM action of each client operation the launcher makes (only `Invoke` differs in name).
# GetFunctionConfiguration is granted beside GetFunction because boto3's `function_active`
# and `function_updated` waiters poll it: a caller who waits with them needs no other policy.
POLICY_ACTIONS: dict[str, str] = {
    "CreateFunction": "lambda:CreateFunction",
    "UpdateFunctionCode": "lambda:UpdateFunctionCode",
    "UpdateFunctionConfiguration": "lambda:UpdateFunctionConfiguration",
    "GetFunction": "lambda:GetFunction",
    "GetFunctionConfiguration": "lambda:GetFunctionConfiguration",
    "PutFunctionConcurrency": "lambda:PutFunctionConcurrency",
    "DeleteFunctionConcurrency": "lambda:DeleteFunctionConcurrency",
    "PutFunctionEventInvokeConfig": "lambda:PutFunctionEventInvokeConfig",
    "Invoke": "lambda:InvokeFunction",
    "DeleteFunction": "lambda:DeleteFunction",
}
# The EC2 operations of a sharded launch (`start_shards`, `placement_of`, `stop_shards`); a
# one-shard launch in a VPC makes DescribeInstances alone (`redis_type_of`).
# CreateTags is RunInstances' own tagging (TagSpecifications), which IAM checks separately.
SHARD_POLICY_ACTIONS: dict[str, str] = {
    "RunInstances": "ec2:RunInstances",
    "CreateTags": "ec2:CreateTags",
    "DescribeInstances": "ec2:DescribeInstances",
    "TerminateInstances": "ec2:TerminateInstances",
}
_INSTANCE_NOT_FOUND = "InvalidInstanceID.NotFound"

# What to do about an AWS error, by code: the message of every AwsLaunchError ends with one.
_FIXES: dict[str, str] = {
    "AccessDeniedException": "grant the caller the policy printed by "
                             "`lambdadnn launch --print-policy`",
    "AccessDenied": "grant the caller the policy printed by `lambdadnn launch --print-policy`",
    "UnrecognizedClientException": "check the AWS credentials (AWS_PROFILE or "
                                   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
    "InvalidParameterValueException": "check the role (it must exist and trust "
                                      "lambda.amazonaws.com), the layers and the memory size",
    "CodeStorageExceededException": "delete old function versions or ship the code as an image",
    "ResourceNotFoundException": "check the function name and region",
    "UnauthorizedOperation": "grant the caller the policy printed by "
                             "`lambdadnn launch --print-policy`",
    "InvalidParameterValue": "check the parameter server's `type` (an EC2 instance type of "
                             "this region, of the image's architecture)",
    "Unsupported": "the instance type is not offered in the Redis's availability zone: solve "
                   "with another parameter-server type",
    "InsufficientInstanceCapacity": "EC2 has no capacity of that type there now: launch again "
                                    "later, or solve with another parameter-server type",
    "VcpuLimitExceeded": "raise the account's EC2 vCPU quota (Service Quotas) or solve with "
                         "fewer shards",
    "InstanceLimitExceeded": "raise the account's EC2 instance quota or solve with fewer shards",
}
NO_CREDENTIALS = ("needs AWS credentials and found none: set AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run `aws configure`")
_RETRY_FIX = ("raise the account's Lambda concurrency quota (Service Quotas) or run the plan "
              "with fewer functions")
_EC2_RETRY_FIX = "EC2 throttles the account's API requests: wait a minute and launch again"


class AwsLaunchError(LaunchError):
    """An AWS call of the launcher failed, or the job did not progress on Lambda.

    `code` is the AWS error code when an AWS call failed, so callers (and the launcher
    itself) can tell "already gone" or "already exists" from a real failure.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class AwsInterrupted(Interrupted):
    """An AWS launch stopped by SIGINT, SIGTERM or SIGHUP: raised at the launcher's next
    check, it reaches the caller once `stop` has deleted the function and terminated the PS
    shards (`lambdadnn launch` exits with 128 + the signal)."""

    def __init__(self, signum: int) -> None:
        KeyboardInterrupt.__init__(
            self, f"launch stopped by {signal.Signals(signum).name}; it left nothing it "
                  "created on AWS behind (the function, the PS shards)")
        self.signum = signum
        self.resumable = None


def _nothing() -> None:
    """No interruption to check: cleanup, and callers outside a launch."""


@dataclass(frozen=True)
class Retry:
    """How AWS calls are paced: backoff while throttled, and `interrupt` (which raises a noted
    stop signal) checked before each call and after each pause. `sleep` and `rng` are
    injected so that backoff is instant and deterministic in tests."""

    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    max_attempts: int = 8
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 20.0
    interrupt: Callable[[], None] = _nothing

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise AwsLaunchError(f"max_attempts must be at least 1, not {self.max_attempts}")

    def pause(self, seconds: float) -> None:
        self.sleep(seconds)
        self.interrupt()

    def uninterrupted(self) -> Retry:
        """The same pacing without checks: what cleans up is never cut short."""
        return dataclasses.replace(self, interrupt=_nothing)


def call_aws(
    client: Any, method: str, subject: str, retry: Retry = Retry(), *,
    retry_fix: str = _RETRY_FIX, **params: Any,
) -> dict[str, Any]:
    """One client call, retried with exponential backoff and jitter while throttled.

    The delay before retry k is uniform in [d/2, d] with d = min(cap, base·2^k) ("equal
    jitter"): never zero, so a throttled burst backs off, and spread, so `n` callers do
    not retry in lockstep. Any other AWS error is one `AwsLaunchError` naming the operation,
    `subject`, the code and the fix; an error without a code (no answer) is raised as is.
    """
    operation = _operation_name(method)
    attempt = 0
    while True:
        retry.interrupt()
        try:
            response: dict[str, Any] = getattr(client, method)(**params)
            return response
        except Exception as exc:
            code = _error_code(exc)
            if code is None and _missing_credentials(exc):
                raise AwsLaunchError(f"{operation} {NO_CREDENTIALS}") from None
            if code is None:
                raise
            attempt += 1
            if code not in RETRYABLE_CODES:
                fix = _FIXES.get(code, "see the AWS error message above")
                raise AwsLaunchError(
                    f"{operation} on {subject} failed with {code}: {exc}; {fix}", code=code,
                ) from exc
            if attempt == retry.max_attempts:
                raise AwsLaunchError(
                    f"{operation} on {subject} was refused {attempt} times ({code}): "
                    f"{retry_fix}", code=code,
                ) from exc
            delay = min(retry.backoff_cap_s, retry.backoff_base_s * 2 ** (attempt - 1))
            retry.pause(delay / 2 + retry.rng.uniform(0, delay / 2))


@dataclass(frozen=True)
class AwsTarget:
    """Where and how the worker function is deployed.

    `layers` (ARNs) carry the heavy dependencies of a zip deployment; `image_uri` (an ECR
    image holding code and dependencies) replaces both the zip and the layers, since Lambda
    accepts no layers on image functions. An image's ECR repository must let Lambda pull it
    (its repository policy); that is not the launcher's policy. `subnet_ids` and
    `security_group_ids`, both or neither, put the function in a VPC (its `VpcConfig`).
    """

    function_name: str
    role_arn: str
    layers: tuple[str, ...] = ()
    image_uri: str | None = None
    region: str = "us-east-1"
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.function_name:
            raise AwsLaunchError("AwsTarget needs a function_name (e.g. 'lambdadnn-worker')")
        if not self.role_arn.startswith("arn:") or ":role/" not in self.role_arn:
            raise AwsLaunchError(
                f"role_arn {self.role_arn!r} is not an IAM role ARN: pass the ARN of a role "
                "that trusts lambda.amazonaws.com (arn:aws:iam::ACCOUNT:role/NAME)"
            )
        if self.image_uri is not None and self.layers:
            raise AwsLaunchError(
                "an image function takes no layers: put the dependencies in the image, or "
                "drop image_uri and deploy the zip with the layers"
            )
        for name, (option, prefix, most) in _VPC_IDS.items():
            ids: tuple[str, ...] = getattr(self, name)
            for bad in ids:
                if not re.fullmatch(rf"{prefix}-(?:[0-9a-f]{{8}}|[0-9a-f]{{17}})", bad, re.ASCII):
                    raise AwsLaunchError(
                        f"`{option}` holds {brief(bad)}, which is no ID like "
                        f"{prefix}-0123456789abcdef0: give the IDs comma-separated, as the "
                        "stack's outputs list them"
                    )
            if len(ids) > most:
                raise AwsLaunchError(f"`{option}` holds {len(ids)} IDs; a Lambda function "
                                     f"takes at most {most}: give fewer")
        if bool(self.subnet_ids) != bool(self.security_group_ids):
            given, missing = (("--subnet-ids", "--security-group-ids") if self.subnet_ids
                              else ("--security-group-ids", "--subnet-ids"))
            raise AwsLaunchError(
                f"`{given}` without `{missing}`: a function in a VPC needs both (the stack's "
                "SubnetIds and SecurityGroupIds outputs), or give neither"
            )

    @property
    def account(self) -> str:
        """The account of the role, which is the account the function lives in."""
        return self.role_arn.split(":")[4] or "*"

    @property
    def function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"


@dataclass(frozen=True)
class Call:
    """One recorded client call: the operation's API name and its parameters."""

    operation: str
    params: dict[str, Any]


def _operation_name(method: str) -> str:
    """`put_function_concurrency` → `PutFunctionConcurrency`, the name IAM and the API use."""
    return "".join(part.capitalize() for part in method.split("_"))


def _printable(value: Any) -> Any:
    """Bytes (the code zip) are listed by size: a dry run prints its calls, not megabytes."""
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {key: _printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(item) for item in value]
    return value


@dataclass
class DryRunClient:
    """A stand-in Lambda client that records every call and makes none.

    It answers as a healthy Lambda would (the function active at once, invocations accepted),
    so a dry run walks the very code path of a real run and lists the same calls.
    """

    calls: list[Call] = field(default_factory=list)

    _ANSWERS: ClassVar[dict[str, dict[str, Any]]] = {
        "GetFunction": {"Configuration": {"State": "Active", "LastUpdateStatus": "Successful"}},
        "Invoke": {"StatusCode": 202},
    }

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
        if method.startswith("_"):
            raise AttributeError(method)
        operation = _operation_name(method)

        def record(**params: Any) -> dict[str, Any]:
            self.calls.append(Call(operation, _printable(params)))
            return _dry_answer(operation, params) or dict(self._ANSWERS.get(operation, {}))

        return record


def _dry_instance(shard: int) -> dict[str, Any]:
    return {"InstanceId": f"i-dry-run-shard-{shard}", "PrivateIpAddress": f"SHARD-{shard}-HOST",
            "State": {"Name": "running"}}


def _dry_answer(operation: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
    """EC2's answers in a dry run: the shards asked for (1..k-1: shard 0 is the channel's
    Redis), running at once at placeholder addresses, beside a Redis of placeholder subnet,
    security group and image, and of no known type (so no type is refused)."""
    if operation == "RunInstances":
        return {"Instances": [_dry_instance(shard)
                              for shard in range(1, int(params["MinCount"]) + 1)]}
    if operation == "DescribeInstances" and "InstanceIds" in params:
        shards = [int(str(i).rsplit("-", 1)[1]) for i in params["InstanceIds"]]
        return {"Reservations": [{"Instances": [_dry_instance(shard) for shard in shards]}]}
    if operation == "DescribeInstances":
        return {"Reservations": [{"Instances": [{
            "InstanceId": "i-dry-run-redis", "SubnetId": "SUBNET-OF-THE-REDIS",
            "SecurityGroups": [{"GroupId": "SG-OF-THE-REDIS"}], "ImageId": "AMI-OF-THE-REDIS",
            "State": {"Name": "running"}}]}]}
    return None


def _error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore `ClientError` (or a look-alike), else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def lambda_client(region: str, *, endpoint_url: str | None = None, **client_kwargs: Any) -> Any:
    """A boto3 Lambda client (`aws_client`)."""
    return aws_client("lambda", region, endpoint_url=endpoint_url, **client_kwargs)


def aws_client(
    service: str, region: str, *, endpoint_url: str | None = None, **client_kwargs: Any
) -> Any:
    """A boto3 client; boto3 is imported here so the rest of lambdadnn never needs it.

    botocore's standard retry mode absorbs brief network faults and throttles; a throttle
    that outlasts it reaches the launcher's own backoff (bounded, with an injectable sleep).
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise AwsLaunchError(
            "the AWS backend needs boto3: `pip install boto3` in lambdadnn's environment"
        ) from exc
    return boto3.client(
        service, region_name=region, endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard"}), **client_kwargs,
    )


def package_root() -> Path:
    """The folder `lambdadnn` was imported from: a checkout, an editable or a wheel install."""
    return Path(__file__).resolve().parents[1]


def _source_files(root: Path, packages: tuple[str, ...]) -> Iterator[Path]:
    yield root / "__init__.py"  # `lambdadnn` itself: the handler is lambdadnn.launcher.worker
    for package in packages:
        yield from sorted((root / package).rglob("*.py"))


def package_worker(
    root: Path | None = None, packages: tuple[str, ...] = WORKER_PACKAGES
) -> bytes:
    """A zip of the worker's code laid out as `lambdadnn/...`, for the handler `HANDLER`.

    `root` is the package folder (default: the one `lambdadnn` was imported from, so it works
    from an installed package too). Only sources go in (no caches), with fixed timestamps and
    order: the same code gives the same bytes, so Lambda's CodeSha256 changes only when the
    code does.
    """
    root = package_root() if root is None else root
    if not (root / "launcher" / "worker.py").is_file():
        raise AwsLaunchError(
            f"{root / 'launcher' / 'worker.py'} is missing: the function would have no handler "
            f"{HANDLER!r}; reinstall lambdadnn"
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in _source_files(root, packages):
            if "__pycache__" in path.parts:
                continue
            name = f"lambdadnn/{path.relative_to(root).as_posix()}"
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16  # readable by Lambda's unprivileged user
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def required_policy(target: AwsTarget | None = None) -> dict[str, Any]:
    """The IAM policy document the launcher needs, scoped to the target when one is given.

    Without a target (nothing deployed yet) it grants the same actions on any function and
    role, for an administrator to narrow down.
    """
    function = target.function_arn if target else "arn:aws:lambda:*:*:function:*"
    role = target.role_arn if target else "arn:aws:iam::*:role/*"
    statements: list[dict[str, Any]] = [
        {
            "Sid": "LambdaDnnWorkerFunction",
            "Effect": "Allow",
            "Action": sorted(set(POLICY_ACTIONS.values())),
            "Resource": function,
        },
        {
            "Sid": "LambdaDnnPassWorkerRole",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": role,
            "Condition": {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}},
        },
    ]
    if target is None or target.subnet_ids:
        # Lambda checks a VpcConfig's subnets and groups with the caller's permissions.
        statements.append({
            "Sid": "LambdaDnnDescribeVpc",
            "Effect": "Allow",
            "Action": ["ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"],
            "Resource": "*",
        })
    if target is None or target.subnet_ids:
        # A launch of k > 1 PS shards starts shards 1..k-1 in the VPC for the launch, and ends
        # them; any launch there checks the plan's PS type against the channel's Redis's.
        statements.extend([
            {
                "Sid": "LambdaDnnStartShards",
                "Effect": "Allow",
                "Action": ["ec2:DescribeInstances", "ec2:RunInstances"],
                "Resource": "*",
            },
            {
                "Sid": "LambdaDnnTagShardsAtLaunch",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": "*",
                "Condition": {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
            },
            {
                "Sid": "LambdaDnnTerminateShards",
                "Effect": "Allow",
                "Action": "ec2:TerminateInstances",
                "Resource": "arn:aws:ec2:*:*:instance/*",
                "Condition": {"StringLike": {f"ec2:ResourceTag/{LAUNCH_TAG}": "*"}},
            },
        ])
    if target is None or target.layers:
        # Attaching a layer to a function requires reading that layer version.
        statements.append({
            "Sid": "LambdaDnnReadLayers",
            "Effect": "Allow",
            "Action": "lambda:GetLayerVersion",
            "Resource": list(target.layers) if target else "arn:aws:lambda:*:*:layer:*:*",
        })
    return {"Version": "2012-10-17", "Statement": statements}


# -- PS shards ----------------------------------------------------------------------------------

_PASSWORD = re.compile(r"[A-Za-z0-9]{1,128}", re.ASCII)  # goes into a shell script as is
_GONE = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


def _ps_of(spec: LaunchSpec) -> ParameterServer | None:
    """The parameter server the plan was solved with (None: the plan carries no instance)."""
    return None if spec.instance is None else spec.instance.parameter_server


def shard_count(spec: LaunchSpec) -> int:
    """The PS shards k a launch of `spec` runs: `spec.shards` (the plan's, or `--shards`',
    checked when the spec was built), so that the workers, whose event says k, and the
    launcher agree. Shard 0 is the channel's Redis; k > 1 starts k − 1 EC2 instances of the
    plan's `parameter_server.type` for shards 1..k-1, refused before any call without one."""
    shards = spec.shards
    ps = _ps_of(spec)
    if shards > 1 and (ps is None or not ps.type):
        raise AwsLaunchError(
            f"the launch runs {shards} PS shards and the plan's parameter server has no "
            f"`type`: shards 1..{shards - 1} start as EC2 instances of a catalogue type; solve "
            "with `parameter_server: {catalogue: ec2, type: ...}`, or launch with `--shards 1`"
        )
    return shards


@dataclass(frozen=True)
class ShardPlacement:
    """Where PS shards run, and the Redis password they require: the subnet, security groups
    and image of the channel's Redis (`placement_of`), so that whatever reaches it (the
    functions, through its security group) reaches them. `password` None: no password (and
    Redis's protected mode off, which otherwise refuses every remote client).
    `instance_type` is the channel's Redis's own type, shard 0's (None: unknown, unchecked)."""

    subnet_id: str
    security_group_ids: tuple[str, ...]
    image_id: str
    password: str | None = None
    instance_type: str | None = None

    def __post_init__(self) -> None:
        if not (self.subnet_id and self.image_id and self.security_group_ids):
            raise AwsLaunchError(
                f"a PS shard needs a subnet, an image and a security group; got subnet "
                f"{brief(self.subnet_id)}, image {brief(self.image_id)} and groups "
                f"{brief(self.security_group_ids)}"
            )
        if self.password is not None and _PASSWORD.fullmatch(self.password) is None:
            raise AwsLaunchError(
                "the Redis password holds characters other than letters and digits, which "
                "PS shards cannot be given safely: use a password of 1-128 letters and digits "
                "(the stack's RedisPassword is one)"
            )


def _redis_host(redis_url: str) -> str | None:
    """The host of a redis:// URL (None: another scheme, or no host)."""
    parts = urlsplit(redis_url)
    return parts.hostname if parts.scheme == "redis" and parts.hostname else None


def _redis_instance(ec2: Any, host: str, retry: Retry) -> dict[str, Any] | None:
    """The running EC2 instance at `host` (its private address or DNS name), else None."""
    try:
        ipaddress.IPv4Address(host)
        by = "private-ip-address"
    except ValueError:
        by = "private-dns-name"
    found = call_aws(
        ec2, "describe_instances", f"the channel's Redis {host}", retry,
        retry_fix=_EC2_RETRY_FIX,
        Filters=[{"Name": by, "Values": [host]},
                 {"Name": "instance-state-name", "Values": ["running"]}],
    )
    instances = _instances(found)
    return instances[0] if instances else None


def _type_of(instance: Mapping[str, Any]) -> str | None:
    return str(instance.get("InstanceType") or "") or None


def placement_of(ec2: Any, redis_url: str, retry: Retry = Retry()) -> ShardPlacement:
    """The placement of the running EC2 instance that serves `redis_url` (found by its
    private address or DNS name), with the URL's password and the instance's own type
    (shard 0's): PS shards start beside it."""
    host = _redis_host(redis_url)
    if host is None:
        parts = urlsplit(redis_url)
        shown = f"{parts.scheme}://{parts.hostname or parts.path}"  # without the password
        raise AwsLaunchError(
            f"PS shards start beside the channel's Redis, and {brief(shown, 60)} is no "
            "redis:// URL of a host (the shards speak no TLS): launch with `--stack NAME`"
        )
    instance = _redis_instance(ec2, host, retry)
    if instance is None:
        raise AwsLaunchError(
            f"the channel's Redis {host} is no running EC2 instance of this region, and PS "
            "shards start beside it (its subnet, security groups and image): launch with "
            "`--stack NAME`, whose Redis is one, or `--redis-url` of one"
        )
    password = urlsplit(redis_url).password
    return ShardPlacement(
        subnet_id=str(instance.get("SubnetId") or ""),
        security_group_ids=tuple(str(group["GroupId"])
                                 for group in instance.get("SecurityGroups", [])),
        image_id=str(instance.get("ImageId") or ""),
        password=None if not password else unquote(password),
        instance_type=_type_of(instance),
    )


def redis_type_of(ec2: Any, redis_url: str, retry: Retry = Retry()) -> str | None:
    """The EC2 instance type of the channel's Redis at `redis_url`, shard 0 of every launch;
    None when that is no running EC2 instance of this region (a `rediss://` or other Redis
    that `placement_of` refuses), so a one-shard launch beside such a Redis goes on."""
    host = _redis_host(redis_url)
    instance = None if host is None else _redis_instance(ec2, host, retry)
    return None if instance is None else _type_of(instance)


def check_ps_type(plan_type: str | None, redis_type: str | None) -> None:
    """Refuse, in one line, a plan timed and priced for a parameter server of `plan_type`
    that would run its shard 0 on the channel's Redis of another `redis_type` (either None:
    nothing to compare)."""
    if plan_type and redis_type and plan_type != redis_type:
        raise AwsLaunchError(
            f"the plan's parameter server is {plan_type}, but its shard 0 is the channel's "
            f"Redis, a {redis_type}, so it would not run as timed and priced: deploy the stack "
            f"with `PsInstanceType` = {plan_type}, or solve with `parameter_server: "
            f"{{catalogue: ec2, type: {redis_type}}}`"
        )


def _user_data(password: str | None, lifetime_s: float | None) -> str:
    """The shard's boot script: redis-server on every address at SHARD_PORT, with the
    password, no persistence (a shard holds a launch's parameters, for that launch only).
    With `lifetime_s`, the machine powers itself off (and so terminates, see
    `start_shards`) after that long: a shard whose launcher died unseen ends anyway."""
    settings = (["bind 0.0.0.0", f"port {SHARD_PORT}", 'save ""', "appendonly no"]
                + (["protected-mode no"] if password is None else [f"requirepass {password}"]))
    lines = ["#!/bin/bash", "set -euo pipefail"]
    if lifetime_s is not None:
        lines.append(f"shutdown -P +{max(1, math.ceil(lifetime_s / 60))}")
    lines += ["dnf install -y redis6",
              f"printf '%s\\n' {' '.join(repr(line) for line in settings)} "
              ">> /etc/redis6/redis6.conf",
              "systemctl enable --now redis6"]
    return "\n".join(lines) + "\n"


def _shard_url(address: str, password: str | None) -> str:
    auth = "" if password is None else f":{password}@"
    return f"redis://{auth}{address}:{SHARD_PORT}/0"


@dataclass(frozen=True)
class Shards:
    """PS shards that are running (a launch's 1..k-1, on EC2): their instances and Redis URLs
    in shard order, and when `start_shards` returned (on the clock it was given), where their
    billed time starts."""

    ids: tuple[str, ...]
    urls: tuple[str, ...]
    instance_type: str
    started_at: float


def _instances(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [instance for reservation in answer.get("Reservations", [])
            for instance in reservation.get("Instances", [])]


def start_shards(
    ec2: Any, *, count: int, instance_type: str, placement: ShardPlacement, launch_id: str,
    name: str = "lambdadnn", retry: Retry = Retry(), clock: Callable[[], float] = time.monotonic,
    deadline_s: float = 600.0, poll_s: float = 5.0, lifetime_s: float | None = None,
    ready: Callable[[str], bool] | None = None,
) -> Shards:
    """Run `count` EC2 instances of `instance_type` (passed as is: EC2 judges it) that each
    start redis-server at boot, tagged `LAUNCH_TAG` = `launch_id`, and wait until all are
    running (and, with `ready`, until `ready(url)` holds for each), at most `deadline_s`.

    It returns running shards or leaves none: on any failure after RunInstances, a stop
    signal included, it terminates what it started before raising. `launch_id` is also
    RunInstances' ClientToken, so a retried request starts no second set; when the request
    itself failed without an answer, the instances it may have started are found by tag.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise AwsLaunchError(f"`count` of PS shards must be a whole number ≥ 1, got "
                             f"{brief(count)}")
    if not isinstance(instance_type, str) or not instance_type:
        raise AwsLaunchError(f"PS shards need an EC2 instance type, got {brief(instance_type)}")
    if not 0 < deadline_s < math.inf or not 0 < poll_s < math.inf:
        raise AwsLaunchError(f"`deadline_s` {deadline_s!r} and `poll_s` {poll_s!r} must be "
                             "finite seconds > 0")
    subject = f"{count} PS shards ({instance_type})"
    tags = [{"Key": "Name", "Value": f"{name}-ps-shard"}, {"Key": LAUNCH_TAG, "Value": launch_id},
            {"Key": "lambdadnn:shards", "Value": str(count)}]
    ids: tuple[str, ...] = ()
    try:
        try:
            started = call_aws(
                ec2, "run_instances", subject, retry, retry_fix=_EC2_RETRY_FIX,
                ImageId=placement.image_id, InstanceType=instance_type, MinCount=count,
                MaxCount=count, SubnetId=placement.subnet_id,
                SecurityGroupIds=list(placement.security_group_ids),
                UserData=_user_data(placement.password, lifetime_s),
                InstanceInitiatedShutdownBehavior="terminate", ClientToken=launch_id[-64:],
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )
        except AwsLaunchError:
            raise  # EC2 answered with an error: nothing started
        except Exception:  # no answer: the instances may exist, known by their tag only
            with contextlib.suppress(Exception):
                ids = _tagged(ec2, launch_id, retry.uninterrupted())
            raise
        ids = tuple(str(instance["InstanceId"]) for instance in started.get("Instances", []))
        if len(ids) != count:
            raise AwsLaunchError(f"RunInstances started {len(ids)} of {subject}: EC2 gave "
                                 "fewer than asked; launch again")
        addresses = _wait_running(ec2, ids, subject, retry, clock, deadline_s, poll_s)
        urls = tuple(_shard_url(address, placement.password) for address in addresses)
        if ready is not None:
            _wait_answering(urls, ready, subject, retry, clock, deadline_s, poll_s)
        return Shards(ids, urls, instance_type, clock())
    except BaseException:
        if ids:
            stop_shards(ec2, ids, retry.uninterrupted())
        raise


def _tagged(ec2: Any, launch_id: str, retry: Retry) -> tuple[str, ...]:
    """The instances of a launch that are not (being) terminated, found by `LAUNCH_TAG`."""
    found = call_aws(ec2, "describe_instances", f"the PS shards of launch {launch_id}", retry,
                     retry_fix=_EC2_RETRY_FIX,
                     Filters=[{"Name": f"tag:{LAUNCH_TAG}", "Values": [launch_id]},
                              {"Name": "instance-state-name",
                               "Values": ["pending", "running", "stopping", "stopped"]}])
    return tuple(str(instance["InstanceId"]) for instance in _instances(found))


def _wait_running(
    ec2: Any, ids: tuple[str, ...], subject: str, retry: Retry, clock: Callable[[], float],
    deadline_s: float, poll_s: float,
) -> list[str]:
    """The private addresses of `ids`, in their order, once all are running. Right after
    RunInstances EC2 may not know the ids yet (InvalidInstanceID.NotFound): not yet running."""
    began = clock()
    states: dict[str, str] = {}
    while True:
        try:
            found = _instances(call_aws(ec2, "describe_instances", subject, retry,
                                        retry_fix=_EC2_RETRY_FIX, InstanceIds=list(ids)))
        except AwsLaunchError as exc:
            if exc.code != _INSTANCE_NOT_FOUND:
                raise
            found = []
        by_id = {str(instance["InstanceId"]): instance for instance in found}
        states = {i: str(by_id.get(i, {}).get("State", {}).get("Name", "pending")) for i in ids}
        gone = [i for i in ids if states[i] in _GONE]
        if gone:
            reason = by_id[gone[0]].get("StateReason", {}).get("Message", "no reason given")
            raise AwsLaunchError(f"PS shard {gone[0]} of {subject} is {states[gone[0]]} before "
                                 f"it ran ({reason}): launch again, or solve with another type")
        if all(state == "running" and by_id[i].get("PrivateIpAddress")
               for i, state in states.items()):
            return [str(by_id[i]["PrivateIpAddress"]) for i in ids]
        if clock() - began >= deadline_s:
            waiting = sorted({state for state in states.values() if state != "running"})
            raise AwsLaunchError(f"{subject} were not running after {deadline_s:g} s (still "
                                 f"{', '.join(waiting) or 'without an address'}): check them in "
                                 "the EC2 console, then launch again")
        retry.pause(poll_s)


def _wait_answering(
    urls: tuple[str, ...], ready: Callable[[str], bool], subject: str, retry: Retry,
    clock: Callable[[], float], deadline_s: float, poll_s: float,
) -> None:
    """Until `ready(url)` holds for every shard (its Redis answers), at most `deadline_s`."""
    began, waiting = clock(), list(range(len(urls)))
    while True:
        waiting = [shard for shard in waiting if not ready(urls[shard])]
        if not waiting:
            return
        if clock() - began >= deadline_s:
            raise AwsLaunchError(f"the Redis of shard {waiting[0]} of {subject} did not answer "
                                 f"within {deadline_s:g} s of running: read the instance's "
                                 "console output (its user data installs Redis)")
        retry.pause(poll_s)


def stop_shards(ec2: Any, ids: tuple[str, ...] | list[str], retry: Retry = Retry()) -> None:
    """Terminate the PS shards `ids`; an instance already gone (InvalidInstanceID.NotFound) is
    the only error ignored. EC2 refuses a whole request for one unknown id, so then each is
    terminated alone, every one attempted even if one fails."""
    ids = list(ids)
    if not ids:
        return
    subject = f"{len(ids)} PS shards"
    try:
        call_aws(ec2, "terminate_instances", subject, retry, retry_fix=_EC2_RETRY_FIX,
                 InstanceIds=ids)
        return
    except AwsLaunchError as exc:
        if exc.code != _INSTANCE_NOT_FOUND:
            raise
    failures: list[AwsLaunchError] = []
    for one in ids:
        try:
            call_aws(ec2, "terminate_instances", f"PS shard {one}", retry,
                     retry_fix=_EC2_RETRY_FIX, InstanceIds=[one])
        except AwsLaunchError as exc:
            if exc.code != _INSTANCE_NOT_FOUND:
                failures.append(exc)
    if failures:
        raise failures[0]


@dataclass(frozen=True)
class ShardBill:
    """What a sharded launch's parameter server costs, priced as the model prices the PS:
    all `count` (k) shards, shard 0 (the channel's Redis) included, at `price_per_hour` each,
    for the run's `up_s` seconds, from `start_shards`' return (the EC2 shards 1..k-1 run)
    to the `stop_shards` call."""

    count: int
    instance_type: str
    price_per_hour: float
    up_s: float

    @property
    def cost_usd(self) -> float:
        return self.up_s * price_per_second(
            0, 0, price_per_gb_second=0.0, ps_price_per_hour=self.count * self.price_per_hour)

    def describe(self) -> str:
        started = self.count - 1
        return (f"PS {self.count} × {self.instance_type} (the channel's Redis and {started} "
                f"EC2 instance{'s' if started != 1 else ''}) at ${self.price_per_hour:g}/h "
                f"each for {self.up_s:.0f} s: ${self.cost_usd:.4f}")


@dataclass(frozen=True)
class ShardOptions:
    """How a launch reaches EC2: the `ec2` client, the shards' `placement` (None:
    `placement_of` the channel's Redis; its `instance_type` is what the plan's type is
    checked against), the wait for them (`deadline_s`, `poll_s`), and `ready(url)`, whether a
    shard's Redis answers (None: running is enough, the workers retry; the stack's security
    group admits the functions to 6379, not the launcher). Given to a one-shard launch, it
    only checks the plan's type against the channel's Redis's (`check_ps_type`)."""

    ec2: Any
    placement: ShardPlacement | None = None
    deadline_s: float = 600.0
    poll_s: float = 5.0
    ready: Callable[[str], bool] | None = None


class AwsLauncher:
    """Deploys the worker function, invokes its ranks, resizes it and cleans up: the AWS
    calls of an `AwsBackend`.

    `sleep` and `clock` are injected so that backoff and readiness polling are instant and
    deterministic in tests.
    """

    def __init__(
        self,
        client: Any,
        target: AwsTarget,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        max_attempts: int = 8,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 20.0,
        ready_polls: int = 150,
        ready_poll_s: float = 2.0,
        interrupt: Callable[[], None] = _nothing,
    ) -> None:
        self.client = client
        self.target = target
        self._clock = clock
        self._retry = Retry(sleep=sleep, rng=rng or random.Random(), max_attempts=max_attempts,
                            backoff_base_s=backoff_base_s, backoff_cap_s=backoff_cap_s,
                            interrupt=interrupt)
        self._ready_polls = ready_polls
        self._ready_poll_s = ready_poll_s
        self._created_function = False
        self._reserved_concurrency = False

    # -- calls -------------------------------------------------------------------------------

    def _call(self, method: str, *, retry: Retry | None = None, **params: Any
              ) -> dict[str, Any]:
        """One Lambda call on the target's function (`call_aws`)."""
        return call_aws(self.client, method, f"function {self.target.function_name!r}",
                        self._retry if retry is None else retry, **params)

    # -- deploy ------------------------------------------------------------------------------

    def _configuration(
        self, memory_mb: int, redis_url: str, job: str, timeout_s: int,
        shard_urls: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The settings shared by CreateFunction and UpdateFunctionConfiguration."""
        variables = {REDIS_URL_ENV: redis_url, JOB_ENV: job}
        if shard_urls:
            variables[REDIS_URLS_ENV] = ",".join(shard_urls)
        config: dict[str, Any] = {
            "FunctionName": self.target.function_name,
            "Role": self.target.role_arn,
            "MemorySize": memory_mb,
            "Timeout": timeout_s,
            "Environment": {"Variables": variables},
        }
        if self.target.image_uri is None:
            config.update(Runtime=RUNTIME, Handler=HANDLER, Layers=list(self.target.layers))
        else:
            config["ImageConfig"] = {"Command": [HANDLER]}
        if self.target.subnet_ids:
            config["VpcConfig"] = {"SubnetIds": list(self.target.subnet_ids),
                                   "SecurityGroupIds": list(self.target.security_group_ids)}
        return config

    def _code(self) -> dict[str, Any]:
        if self.target.image_uri is not None:
            return {"ImageUri": self.target.image_uri}
        return {"ZipFile": package_worker()}

    def deploy(
        self, spec: LaunchSpec, redis_url: str, job: str, *, timeout_s: int = FUNCTION_TIMEOUT_S,
        shard_urls: tuple[str, ...] = (),
    ) -> None:
        """Create the function (or bring an existing one up to date) and reserve `n` slots.

        Memory and architecture are the spec's (checked within Lambda's range when it was
        built); `timeout_s` is the function's Timeout, the invocation limit. Reserved
        concurrency `n` guarantees the BSP barrier can be reached: all `n` ranks can run at
        once, and no other function of the account can take their slots. `shard_urls`, every
        PS shard's in shard order (`redis_url` first: shard 0), go into the environment as
        `REDIS_URLS_ENV`, where the workers of a sharded launch find them.
        """
        config = self._configuration(spec.memory_mb, redis_url, job, timeout_s, shard_urls)
        code = self._code()
        package_type = "Image" if self.target.image_uri is not None else "Zip"
        try:
            self._call(
                "create_function", **config, Code=code, PackageType=package_type,
                Architectures=[spec.architecture],
            )
            self._created_function = True
        except AwsLaunchError as exc:
            if exc.code != "ResourceConflictException":
                raise
            # The function exists (a previous run, or a run that died before its cleanup):
            # Lambda refuses a code update while a configuration update is in progress.
            self._wait_ready()
            self._call("update_function_configuration", **config)
            self._wait_ready()
            self._call(
                "update_function_code", FunctionName=self.target.function_name, **code,
                Architectures=[spec.architecture],
            )
        self._wait_ready()
        # Lambda retries a failed asynchronous invocation twice by itself; a retried rank
        # would join the barrier beside the one `follow` re-invokes, so the launcher alone
        # decides when a rank runs again.
        self._call(
            "put_function_event_invoke_config", FunctionName=self.target.function_name,
            MaximumRetryAttempts=0,
        )
        self._call(
            "put_function_concurrency", FunctionName=self.target.function_name,
            ReservedConcurrentExecutions=spec.functions,
        )
        self._reserved_concurrency = True

    def resize(self, functions: int, memory_mb: int) -> None:
        """Between two rounds of an adaptive launch: the function's new `MemorySize` (waiting
        until Lambda has applied it, as `deploy` does) and `functions` reserved slots."""
        self._wait_ready()
        self._call("update_function_configuration", FunctionName=self.target.function_name,
                   MemorySize=memory_mb)
        self._wait_ready()
        self._call(
            "put_function_concurrency", FunctionName=self.target.function_name,
            ReservedConcurrentExecutions=functions,
        )

    def _wait_ready(self) -> None:
        """Poll until the function is Active with no update in progress (or say why not)."""
        for _ in range(self._ready_polls):
            configuration = self._call(
                "get_function", FunctionName=self.target.function_name
            ).get("Configuration", {})
            state = configuration.get("State", "Active")
            update = configuration.get("LastUpdateStatus", "Successful")
            if state == "Failed" or update == "Failed":
                reason = (configuration.get("StateReason")
                          or configuration.get("LastUpdateStatusReason") or "no reason given")
                raise AwsLaunchError(
                    f"function {self.target.function_name!r} failed to deploy: {reason}; fix "
                    "the layer, image or role it names and launch again"
                )
            if state == "Active" and update != "InProgress":
                return
            self._retry.pause(self._ready_poll_s)
        raise AwsLaunchError(
            f"function {self.target.function_name!r} was not active after "
            f"{self._ready_polls * self._ready_poll_s:.0f} s: check its state in the Lambda "
            "console, then launch again"
        )

    # -- invoke ------------------------------------------------------------------------------

    def invoke_all(self, event_base: Mapping[str, Any], workers: int) -> None:
        """Invoke ranks 0..n-1 asynchronously: Lambda queues them, nobody waits for them."""
        for rank in range(workers):
            payload = json.dumps({**event_base, "rank": rank, "workers": workers})
            if len(payload.encode()) > ASYNC_PAYLOAD_LIMIT_BYTES:
                raise AwsLaunchError(
                    f"the event of rank {rank} is {len(payload.encode())} bytes, over Lambda's "
                    f"{ASYNC_PAYLOAD_LIMIT_BYTES}-byte asynchronous limit: pass large data "
                    "through the channel, not the event"
                )
            response = self._call(
                "invoke", FunctionName=self.target.function_name, InvocationType="Event",
                Payload=payload,
            )
            if response.get("StatusCode") != 202:
                raise AwsLaunchError(
                    f"Lambda did not queue rank {rank} of {self.target.function_name!r} (status "
                    f"{response.get('StatusCode')}): check the function's state and launch again"
                )

    def invoke_restore(self, event: Mapping[str, Any]) -> int | None:
        """Run `event` (`action` "restore") in the function and wait for its answer: the
        iteration every PS shard is back at, or None when the job holds no checkpoint.

        Synchronous (RequestResponse), since the next round must not start before it is
        done, and through `_call`: a throttled invocation never ran, and a restore run twice
        restores the same checkpoint, so it is retried like any other call. A failure of
        the function, or an answer that is no restore's, is an `AwsLaunchError`.
        """
        name = self.target.function_name
        response = self._call("invoke", FunctionName=name, InvocationType="RequestResponse",
                              Payload=json.dumps(dict(event)))
        body = response.get("Payload", b"")
        raw = body.read() if hasattr(body, "read") else body
        try:
            answer = json.loads(raw) if raw else None
        except (TypeError, ValueError):
            answer = None
        fields: Mapping[str, Any] = answer if isinstance(answer, dict) else {}
        job = brief(event.get("job"))
        logs = (f"read the function's CloudWatch logs (log group /aws/lambda/{name}), fix what "
                "they show, and launch again")

        def word(value: object) -> str:  # an error's type: as is when it is one word
            if isinstance(value, str) and re.fullmatch(r"[\w.:-]{1,60}", value, re.ASCII):
                return value
            return brief(value, 60)

        if response.get("FunctionError"):
            raise AwsLaunchError(
                f"function {name!r} failed to restore the PS shards of job {job} to its "
                f"checkpoint ({word(response['FunctionError'])}: "
                f"{word(fields.get('errorType'))}: {brief(fields.get('errorMessage'), 300)}): "
                f"{logs}"
            )
        status, iteration = fields.get("status"), fields.get("iteration")
        if status == "no-checkpoint" and iteration is None:
            return None
        if status != "restored" or isinstance(iteration, bool) or not isinstance(
                iteration, int) or iteration < 0:
            # Only these two fields are shown: the rest may echo the URLs and their password.
            shown = (f"status {brief(status, 40)} and iteration {brief(iteration, 40)}"
                     if isinstance(answer, dict) else "no JSON object")
            raise AwsLaunchError(
                f"function {name!r} answered the restore of the PS shards of job {job} with "
                f"{shown}, not the iteration they are back at: its code may predate the "
                f"restore (deploy the current image); {logs}"
            )
        return iteration

    # -- cleanup -----------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Delete what this launcher created; a function it only updated keeps existing.

        Every deletion is attempted even if one fails, so a failure leaves as little behind
        as possible; `ResourceNotFoundException` (already gone) is the only error ignored.
        A stop signal does not cut it short.
        """
        name = self.target.function_name
        retry = self._retry.uninterrupted()
        steps: list[tuple[str, bool]] = [
            ("delete_function_concurrency", self._reserved_concurrency),
            ("delete_function", self._created_function),
        ]
        failures: list[AwsLaunchError] = []
        for method, wanted in steps:
            if not wanted:
                continue
            try:
                self._call(method, retry=retry, FunctionName=name)
            except AwsLaunchError as exc:
                if exc.code != "ResourceNotFoundException":
                    failures.append(exc)
        if failures:
            raise failures[0]


@dataclass(frozen=True)
class Following:
    """How the AWS backend follows a job through its channel: a look every `poll_s`, and a
    round is over once the invocation limit has passed *and* the channel has not changed for
    `quiet_s` (an asynchronous invocation may start late, and re-invoking a rank still alive
    would put two copies of it on the barrier). `sleep` and `clock` are injected so that
    following a 15-minute round is instant and deterministic in tests."""

    poll_s: float = 5.0
    quiet_s: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    clock: Clock = REAL_TIME


class AwsBackend:
    """A plan's ranks as asynchronous invocations of one Lambda function (a `Backend`).

    `setup` checks the plan's PS type against the channel's Redis (shard 0) when `shards` gives
    an EC2 client, starts shards 1..k-1 when the launch runs k > 1 (`start_shards`), then has
    `channel` become `with_shards(their URLs)` (the launcher's channel over every shard, whose
    clients its caller closes), and deploys the function (`AwsLauncher.deploy`) with every
    shard's URL; `rewind` after a round cut short has the function itself put every shard back
    at the checkpoint when k > 1 (`AwsLauncher.invoke_restore`: shards 1..k-1 are reached only
    inside the VPC); `reconfigure` resizes it between the rounds of an adaptive launch, `stop`
    terminates the shards and deletes what it created; `shard_bill` is then what the k shards
    cost. `interrupt` raises a noted stop signal: it is checked before each AWS call and after
    each pause. Lambda's Timeout is whole seconds, so the function gets ⌈timeout_s⌉ and the
    workers a margin larger by the difference: they stop where a limit of exactly `timeout_s`
    would stop them, which is what the report's prediction assumes. A round in which nothing
    moved means the workers never ran: that is an error, not a reason to retry.
    """

    name = "aws"
    warnings: tuple[str, ...] = ()

    def __init__(
        self, spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
        channel: Channel, timeout_s: float, following: Following = Following(),
        shards: ShardOptions | None = None, interrupt: Callable[[], None] = _nothing,
        with_shards: Callable[[tuple[str, ...]], Channel] | None = None,
    ) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            0 < timeout_s <= FUNCTION_TIMEOUT_S
        ):
            raise AwsLaunchError(
                f"`timeout_s` {brief(timeout_s)} is no Lambda invocation limit: give seconds in "
                f"(0, {FUNCTION_TIMEOUT_S}]"
            )
        _check_concurrency(spec)
        self._shard_count = shard_count(spec)
        if self._shard_count > 1 and shards is None:
            raise AwsLaunchError(
                f"the launch runs {self._shard_count} PS shards, of which it starts shards "
                f"1..{self._shard_count - 1} on EC2, and no EC2 client was given "
                "(`ShardOptions`)"
            )
        if self._shard_count > 1 and not target.subnet_ids:
            raise AwsLaunchError(
                f"PS shards 1..{self._shard_count - 1} of the launch are reached at private "
                "addresses in the channel's VPC: launch the function in it (`--stack NAME`, "
                "or `--subnet-ids` and `--security-group-ids`)"
            )
        self.job, self.redis_url, self.channel = job, redis_url, channel
        self._spec, self._target, self._following = spec, target, following
        self._timeout_s = float(timeout_s)
        self._interrupt = interrupt
        self._launcher = AwsLauncher(client, target, sleep=following.sleep,
                                     clock=following.clock.monotonic, interrupt=interrupt)
        self._shard_options, self._with_shards = shards, with_shards
        self._retry = Retry(sleep=following.sleep, interrupt=interrupt)
        self.launch_id = f"{job}-{uuid.uuid4().hex[:12]}"
        self._shards: Shards | None = None
        self._shard_bill: ShardBill | None = None
        self._rounds = self._functions = 0
        self._polled = self._moved = False
        self._round_start = self._last_change = 0.0
        self._previous: dict[str, Any] | None = None

    @property
    def runs_on(self) -> str:
        target = self._target
        return f"function {target.function_name} ({self._spec.architecture}) in {target.region}"

    @property
    def shard_bill(self) -> ShardBill | None:
        """What the PS shards cost, once `stop` has terminated them (None: no shards)."""
        return self._shard_bill

    def setup(self) -> int:
        options, ps = self._shard_options, _ps_of(self._spec)
        urls: tuple[str, ...] = ()
        if options is not None and ps is not None and ps.type:  # k > 1 has one: shard_count
            placement = None
            if self._shard_count > 1:
                placement = options.placement or placement_of(options.ec2, self.redis_url,
                                                              self._retry)
                redis_type = placement.instance_type
            elif options.placement is not None:
                redis_type = options.placement.instance_type
            else:
                redis_type = redis_type_of(options.ec2, self.redis_url, self._retry)
            check_ps_type(ps.type, redis_type)  # before anything starts
            if placement is not None:
                self._shards = start_shards(
                    options.ec2, count=self._shard_count - 1, instance_type=ps.type,
                    placement=placement, launch_id=self.launch_id,
                    name=self._target.function_name, retry=self._retry,
                    clock=self._following.clock.monotonic, deadline_s=options.deadline_s,
                    poll_s=options.poll_s, lifetime_s=self._spec.key_ttl_s,
                    ready=options.ready,
                )
                urls = (self.redis_url, *self._shards.urls)
                if self._with_shards is not None:
                    self.channel = self._with_shards(self._shards.urls)
        self._launcher.deploy(self._spec, self.redis_url, self.job,
                              timeout_s=math.ceil(self._timeout_s), shard_urls=urls)
        return 0

    def start(self, event: Mapping[str, Any]) -> None:
        self._functions, self._rounds = int(event["workers"]), self._rounds + 1
        extra = math.ceil(self._timeout_s) - self._timeout_s
        self._launcher.invoke_all(
            {**event, "timeout_margin_s": float(event["timeout_margin_s"]) + extra},
            self._functions)
        self._round_start = self._last_change = self._following.clock.monotonic()
        self._moved, self._previous = False, None

    def observe(self, *, halting: bool) -> Observed:
        following = self._following
        if self._polled:
            following.sleep(following.poll_s)
            self._interrupt()
        self._polled = True
        progress = dict(self.channel.progress())
        now = following.clock.monotonic()
        seen = Observed(int(progress.get("iteration", 0)))
        if progress.get("done"):
            return Observed(seen.iteration, done=True)
        if halting and self._returned():
            return Observed(seen.iteration, over=True)
        if self._previous is not None and progress != self._previous:
            self._moved, self._last_change = True, now
        self._previous = progress
        if now - self._round_start < self._timeout_s or now - self._last_change < following.quiet_s:
            return seen
        if not self._moved:
            raise AwsLaunchError(
                f"no progress from function {self._target.function_name!r} in "
                f"{now - self._round_start:.0f} s (progress: {progress}): the workers did not "
                "run; read their CloudWatch logs, and check that the channel URL is "
                "reachable from Lambda and the layer or image holds the dependencies"
            )
        return Observed(seen.iteration, over=True)

    def _returned(self) -> bool:
        """Whether every rank of the current round has returned (its last timing record)."""
        returned = {int(record["rank"]) for record in self.channel.timings()
                    if int(record["round"]) == self._rounds - 1 and record.get("returned")}
        return len(returned) == self._functions

    def rewind(self, iteration: int) -> int:
        """With one shard, `iteration`: its live state is always consistent, and the next
        round's workers resume from it themselves. With k > 1, a worker that died
        mid-exchange can leave the shards at different live iterations, so every shard goes
        back to shard 0's checkpoint, as `LocalBackend.rewind` does; shards 1..k-1 are at
        private VPC addresses, so the function does it (`AwsLauncher.invoke_restore`), given
        the channel's fields of the workers' event and every shard's URL."""
        if self._shard_count == 1:
            return iteration
        event: dict[str, Any] = {
            "action": "restore", "job": self.job, "redis_url": self.redis_url,
            "workers": self._functions or self._spec.functions, "shards": self._shard_count,
            "key_ttl_s": self._spec.key_ttl_s,
        }
        if self._shards is not None:
            event["redis_urls"] = [self.redis_url, *self._shards.urls]
        restored = self._launcher.invoke_restore(event)
        if restored is None:
            name = self._target.function_name
            raise AwsLaunchError(
                f"job {self.job!r} holds no checkpoint to resume its {self._shard_count} PS "
                f"shards from after iteration {iteration} (function {name!r} found none in the "
                "channel's Redis: its keys expired or were deleted): read the function's "
                f"CloudWatch logs (log group /aws/lambda/{name}), then launch again"
            )
        return restored

    def reconfigure(self, functions: int, memory_mb: int) -> None:
        self._launcher.resize(functions, memory_mb)

    def throttled_share(self) -> float | None:
        return None

    def verdict(self, result: Mapping[str, Any] | None) -> str | None:
        return None

    def stop(self, *, finished: bool) -> None:
        """Terminate the shards (their billed time ends here) and clean up the function; both
        are attempted even if one fails, and no stop signal cuts them short."""
        failures: list[BaseException] = []
        shards, options = self._shards, self._shard_options
        if shards is not None and options is not None:
            self._shards = None
            self._shard_bill = ShardBill(
                self._shard_count, shards.instance_type,
                self._spec.solved_from.parameter_server.price_per_hour,
                self._following.clock.monotonic() - shards.started_at)
            try:
                stop_shards(options.ec2, shards.ids, self._retry.uninterrupted())
            except Exception as exc:
                failures.append(exc)
        try:
            self._launcher.cleanup()
        except Exception as exc:
            failures.append(exc)
        if failures:
            raise failures[0]

    def capacity(self) -> Capacity:
        return profile_capacity(region=self._target.region, architecture=self._spec.architecture)


def run_aws(
    spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
    channel: Channel, options: RunOptions = DEFAULTS, hooks: Hooks = SILENT,
    controller: Planner | None = None, following: Following = Following(),
    shards: ShardOptions | None = None,
    with_shards: Callable[[tuple[str, ...]], Channel] | None = None,
) -> LaunchReport:
    """Run a plan on Lambda: (start its PS shards →) deploy → invoke all ranks → follow →
    clean up (always, on SIGINT, SIGTERM and SIGHUP too): the orchestrator
    (`launcher.orchestrator`) over an `AwsBackend`.

    The Redis of `channel` at `redis_url` must be reachable from Lambda (a Redis next to the
    parameter server, not 127.0.0.1). `options.max_restarts` defaults to three times the
    rounds the plan predicts, so a job far slower than planned stops instead of running up a
    bill. A user's factory module must be in the deployed code (`--image-uri` or a layer).
    With a `controller`, a change of plan halts the group, and once every rank has
    checkpointed and returned the function gets the new `MemorySize` and reserved
    concurrency and the new n ranks are invoked with the same global batch. A launch of
    k > 1 PS shards needs `shards` (its EC2 client): shard 0 is the Redis at `redis_url`,
    and once shards 1..k-1 run, the launcher follows `with_shards(their URLs)` (None:
    `channel` still); the report's `runs_on` ends with the k shards' cost. Given `shards`,
    a one-shard launch checks the plan's PS type against that Redis's (`check_ps_type`).
    """
    # The first signal is only noted and raised where the launcher checks (before each AWS
    # call and after each pause), so no call that creates something is cut in half.
    with StopSignals(raised=AwsInterrupted, insist=True) as signals:
        backend = AwsBackend(spec, client, target, redis_url=redis_url, job=job,
                             channel=channel, timeout_s=options.timeout_s, following=following,
                             shards=shards, interrupt=signals.check, with_shards=with_shards)
        if options.max_restarts is None:
            options = dataclasses.replace(options, max_restarts=3 * (spec.restarts + 1))
        try:
            report = orchestrate(spec, backend, options=options, hooks=hooks,
                                 controller=controller, clock=following.clock)
        except RunFailed as failure:
            raise RunFailed(_billed(failure.report, backend.shard_bill)) from None
    return _billed(report, backend.shard_bill)


def _billed(report: LaunchReport, bill: ShardBill | None) -> LaunchReport:
    """The report with its PS shards and their cost: known only once shards 1..k-1 are
    terminated, after the orchestrator has built the report."""
    if bill is None:
        return report
    return dataclasses.replace(report, runs_on=f"{report.runs_on}; {bill.describe()}")


def _needs_ec2(spec: LaunchSpec, target: AwsTarget) -> bool:
    """Whether a launch of `spec` calls EC2: to start shards 1..k-1 (k > 1), or, in a VPC
    (the stack's, whose policy grants DescribeInstances), to check the plan's PS type against
    the channel's Redis. A launch outside a VPC with one shard makes no EC2 call, as before."""
    ps = _ps_of(spec)
    return shard_count(spec) > 1 or bool(target.subnet_ids and ps is not None and ps.type)


class _DoneChannel:
    """A channel whose job is done at once: what a dry run follows."""

    def progress(self) -> dict[str, Any]:
        return {"done": True}

    def timings(self) -> list[dict[str, Any]]:
        return []

    def result(self) -> None:
        return None

    def record_restart(self) -> int:
        return 0

    def set_halt(self, on: bool) -> None:
        pass

    def request_checkpoint(self) -> None:
        pass


def dry_run(
    spec: LaunchSpec, target: AwsTarget, *, redis_url: str, job: str,
    options: RunOptions = DEFAULTS, placement: ShardPlacement | None = None,
) -> list[Call]:
    """Every AWS call `run_aws` would make for this plan, in order, without making any.

    It runs `run_aws` itself against a `DryRunClient` (as the Lambda and the EC2 client),
    with a channel that reports the job done at once: the listing cannot drift from what a
    real run does. The PS shards of a sharded plan get placeholder IDs and addresses, and the
    channel's Redis no type (so the plan's is not refused).
    """
    client = DryRunClient()
    run_aws(spec, client, target, redis_url=redis_url, job=job, channel=_DoneChannel(),
            options=options, following=Following(sleep=lambda _seconds: None),
            shards=(ShardOptions(ec2=client, placement=placement)
                    if _needs_ec2(spec, target) else None))
    return client.calls


def run_aws_job(
    spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
    options: RunOptions = DEFAULTS, hooks: Hooks = SILENT,
    controller: Planner | None = None, following: Following = Following(),
    shards: ShardOptions | None = None,
) -> LaunchReport:
    """`run_aws` with the job's own parameter channel on the Redis at `redis_url`.

    The channel's keys are deleted afterwards, whether the run ended or failed, and a Redis
    that fails mid-run is one `LaunchError` line naming it (`channel_failed`). A launch that
    calls EC2 (`_needs_ec2`) without `shards` gets an EC2 client beside `client`
    (`_ec2_beside`). Once shards 1..k-1 run, the launcher's channel holds a client of each
    (`shard_clients`, made without connecting: their Redis may still be installing), so that
    what it does to the job covers every shard; they are closed however the run ends. The
    keys are deleted from shard 0 alone: the others end with their instances.
    """
    import redis

    from .channel import ParameterChannel, channel_failed, redis_client

    if shards is None and _needs_ec2(spec, target):
        shards = ShardOptions(ec2=_ec2_beside(client, target.region))

    channel = ParameterChannel(redis_client(redis_url, option="--redis-url"), job,
                               workers=spec.functions)
    opened: list[redis.Redis] = []  # shards 1..k-1's clients, each closed at the end
    sharded: list[ParameterChannel] = []

    def with_shards(urls: tuple[str, ...]) -> Channel:
        clients: list[redis.Redis] = []
        for shard, url in enumerate(urls, start=1):
            clients.append(redis_client(url, option=f"PS shard {shard}", ping=False))
            opened.append(clients[-1])
        sharded.append(ParameterChannel(channel.client, job, workers=spec.functions,
                                        shard_clients=clients))
        return sharded[-1]

    try:
        try:
            return run_aws(spec, client, target, redis_url=redis_url, job=job, channel=channel,
                           options=options, hooks=hooks, controller=controller,
                           following=following, shards=shards, with_shards=with_shards)
        finally:
            try:
                channel.cleanup()
            finally:
                for each in sharded:
                    each.close()
                for shard_client in opened:
                    shard_client.close()
                channel.client.close()
    except redis.RedisError as error:
        raise channel_failed(redis_url, error) from None


def _ec2_beside(client: Any, region: str) -> Any:
    """An EC2 client of `region` at the Lambda `client`'s endpoint when that is no AWS one
    (a moto or LocalStack server serves every service at one address), else at EC2's own."""
    endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
    custom = isinstance(endpoint, str) and ".amazonaws.com" not in endpoint
    return aws_client("ec2", region, endpoint_url=endpoint if custom else None)


def _missing_credentials(error: Exception) -> bool:
    """Whether botocore found no (or half the) credentials: a setup step, not an AWS error."""
    return any(kind.__module__ == "botocore.exceptions"
               and kind.__name__ in {"NoCredentialsError", "PartialCredentialsError"}
               for kind in type(error).__mro__)


def _check_concurrency(spec: LaunchSpec) -> None:
    """Refuse, before any call, a plan of more functions than its platform runs at once (the
    plan's own platform, else the shipped `aws-lambda-<architecture>`): Lambda would throttle
    the extra ranks and the group would wait on them until its deadline had passed."""
    if spec.instance is not None:
        limit, source = spec.instance.platform.max_concurrency, spec.instance.platform.name
    else:
        source = f"aws-lambda-{spec.architecture}"
        limit = int(read_yaml(platform_path(source))["max_concurrency"])
    if spec.functions > limit:
        raise AwsLaunchError(
            f"the plan's {spec.functions:,} functions exceed the `max_concurrency` of "
            f"{limit:,} of platform {source}: solve the plan again within that limit, or raise "
            "the account's limit with AWS and give a platform that says so (--platform FILE)"
        )


def profile_capacity(*, region: str, architecture: str = "x86_64") -> Capacity:
    """Lambda in `region` as the platform `lambdadnn profile --backend aws` fits: no limit on
    the total vCPU, and the memory range, concurrency and prices of the shipped
    `aws-lambda-<architecture>` platform, so a profiled plan is priced as Lambda bills it."""
    if architecture not in ARCHITECTURES:
        raise AwsLaunchError(
            f"`architecture` {brief(architecture)} is not a Lambda architecture: give one of "
            f"{', '.join(ARCHITECTURES)}"
        )
    shipped = read_yaml(platform_path(f"aws-lambda-{architecture}"))
    return Capacity(
        name=f"aws-lambda-{architecture}-{region}", backend="aws", max_vcpu=None,
        max_memory_mb=int(shipped["memory_mb"]["max"]),
        max_functions=int(shipped["max_concurrency"]), architecture=architecture,
        price_per_gb_second=float(shipped["price_per_gb_second"]),
        price_per_request=float(shipped["price_per_request"]),
    )


def profile_runner(
    *,
    workload: str,
    seed: int,
    function_name: str,
    role_arn: str,
    image_uri: str | None,
    redis_url: str,
    region: str = "us-east-1",
    endpoint_url: str | None = None,
    client: Any = None,
    poll_s: float = 5.0,
    quiet_s: float = 60.0,
) -> Runner:
    """Run each profiling trial as one Lambda job: deploy → invoke → follow → clean up.

    Every trial gets a fresh job name and its own channel on `redis_url`, deleted after it
    even when it fails, and the function is deployed with the trial's invocation limit as
    its Timeout, so the restart trial really times out and is re-invoked. The worker needs
    torch, which fits no zip layer, so the function runs the container image `image_uri`
    (`lambdadnn image`). `client` replaces the boto3 client built for `region` and
    `endpoint_url` (tests pass one); the target, the image and the Redis are checked here,
    before any trial.
    """
    if not image_uri:
        raise AwsLaunchError(
            f"`--image-uri` is needed to profile on Lambda: {NEEDS_IMAGE}; build and push the "
            "image that `lambdadnn image` describes"
        )
    from .channel import redis_client

    target = AwsTarget(function_name, role_arn, image_uri=image_uri, region=region)
    redis_client(redis_url, option="--redis-url").close()
    lambda_ = lambda_client(region, endpoint_url=endpoint_url) if client is None else client
    following = Following(poll_s=poll_s, quiet_s=quiet_s)

    def run(spec: LaunchSpec, timeout_s: float) -> LaunchReport:
        options = RunOptions(timeout_s=timeout_s, seed=seed, workload=workload,
                             checkpoint_every=int(WORKER_DEFAULTS["checkpoint_every"]))
        return run_aws_job(
            spec, lambda_, target, redis_url=redis_url, job=f"profile-{uuid.uuid4().hex[:12]}",
            options=options, following=following,
        )

    return run
