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

The boto3 client is always passed in, never built at import time, so that tests can point it
at a moto server, and `--dry-run` can hand over a `DryRunClient` that records every call
without making it. The same reason keeps botocore out of the imports: AWS errors are told
apart by their error code (`exc.response["Error"]["Code"]`), which is all a fake needs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
import re
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..inputs.files import brief
from ..solver.instance import ARCHITECTURES
from ..solver.instance_yaml import platform_path, read_yaml
from . import LaunchError
from .adaptive import Planner
from .backend import Channel, Observed
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
from .spec import WORKER_DEFAULTS, LaunchReport, LaunchSpec

__all__ = [
    "FUNCTION_TIMEOUT_S", "HANDLER", "JOB_ENV", "NEEDS_IMAGE", "NO_CREDENTIALS", "POLICY_ACTIONS",
    "REDIS_URL_ENV", "RUNTIME", "AwsBackend", "AwsLaunchError", "AwsLauncher", "AwsTarget",
    "Call", "DryRunClient", "Following", "aws_client", "dry_run", "lambda_client", "package_worker",
    "profile_capacity", "profile_runner", "required_policy", "run_aws", "run_aws_job",
]

HANDLER = "lambdadnn.launcher.worker.handler"
RUNTIME = "python3.11"
FUNCTION_TIMEOUT_S = 900
REDIS_URL_ENV = "LAMBDADNN_REDIS_URL"
JOB_ENV = "LAMBDADNN_JOB"

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
    "EC2ThrottledException", "ResourceNotReadyException",
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
}
NO_CREDENTIALS = ("needs AWS credentials and found none: set AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run `aws configure`")
_RETRY_FIX = ("raise the account's Lambda concurrency quota (Service Quotas) or run the plan "
              "with fewer functions")


class AwsLaunchError(LaunchError):
    """An AWS call of the launcher failed, or the job did not progress on Lambda.

    `code` is the AWS error code when an AWS call failed, so callers (and the launcher
    itself) can tell "already gone" or "already exists" from a real failure.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


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
            return dict(self._ANSWERS.get(operation, {}))

        return record


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
    if target is None or target.layers:
        # Attaching a layer to a function requires reading that layer version.
        statements.append({
            "Sid": "LambdaDnnReadLayers",
            "Effect": "Allow",
            "Action": "lambda:GetLayerVersion",
            "Resource": list(target.layers) if target else "arn:aws:lambda:*:*:layer:*:*",
        })
    return {"Version": "2012-10-17", "Statement": statements}


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
    ) -> None:
        self.client = client
        self.target = target
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._ready_polls = ready_polls
        self._ready_poll_s = ready_poll_s
        if max_attempts < 1:
            raise AwsLaunchError(f"max_attempts must be at least 1, not {max_attempts}")
        self._created_function = False
        self._reserved_concurrency = False

    # -- calls -------------------------------------------------------------------------------

    def _call(self, method: str, **params: Any) -> dict[str, Any]:
        """One client call, retried with exponential backoff and jitter while throttled.

        The delay before retry k is uniform in [d/2, d] with d = min(cap, base·2^k) ("equal
        jitter"): never zero, so a throttled burst backs off, and spread, so `n` callers do
        not retry in lockstep.
        """
        operation = _operation_name(method)
        attempt = 0
        while True:
            try:
                response: dict[str, Any] = getattr(self.client, method)(**params)
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
                        f"{operation} on function {self.target.function_name!r} failed with "
                        f"{code}: {exc}; {fix}", code=code,
                    ) from exc
                if attempt == self._max_attempts:
                    raise AwsLaunchError(
                        f"{operation} on function {self.target.function_name!r} was refused "
                        f"{attempt} times ({code}): {_RETRY_FIX}", code=code,
                    ) from exc
                delay = min(self._backoff_cap_s, self._backoff_base_s * 2 ** (attempt - 1))
                self._sleep(delay / 2 + self._rng.uniform(0, delay / 2))

    # -- deploy ------------------------------------------------------------------------------

    def _configuration(
        self, memory_mb: int, redis_url: str, job: str, timeout_s: int
    ) -> dict[str, Any]:
        """The settings shared by CreateFunction and UpdateFunctionConfiguration."""
        config: dict[str, Any] = {
            "FunctionName": self.target.function_name,
            "Role": self.target.role_arn,
            "MemorySize": memory_mb,
            "Timeout": timeout_s,
            "Environment": {"Variables": {REDIS_URL_ENV: redis_url, JOB_ENV: job}},
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
        self, spec: LaunchSpec, redis_url: str, job: str, *, timeout_s: int = FUNCTION_TIMEOUT_S
    ) -> None:
        """Create the function (or bring an existing one up to date) and reserve `n` slots.

        Memory and architecture are the spec's (checked within Lambda's range when it was
        built); `timeout_s` is the function's Timeout, the invocation limit. Reserved
        concurrency `n` guarantees the BSP barrier can be reached: all `n` ranks can run at
        once, and no other function of the account can take their slots.
        """
        config = self._configuration(spec.memory_mb, redis_url, job, timeout_s)
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
            self._sleep(self._ready_poll_s)
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

    # -- cleanup -----------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Delete what this launcher created; a function it only updated keeps existing.

        Every deletion is attempted even if one fails, so a failure leaves as little behind
        as possible; `ResourceNotFoundException` (already gone) is the only error ignored.
        """
        name = self.target.function_name
        steps: list[tuple[str, bool]] = [
            ("delete_function_concurrency", self._reserved_concurrency),
            ("delete_function", self._created_function),
        ]
        failures: list[AwsLaunchError] = []
        for method, wanted in steps:
            if not wanted:
                continue
            try:
                self._call(method, FunctionName=name)
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

    `setup` deploys the function (`AwsLauncher.deploy`), `reconfigure` resizes it between
    the rounds of an adaptive launch, `stop` deletes what it created. Lambda's Timeout is
    whole seconds, so the function gets ⌈timeout_s⌉ and the workers a margin larger by the
    difference: they stop where a limit of exactly `timeout_s` would stop them, which is what
    the report's prediction assumes. A round in which nothing moved means the workers never
    ran: that is an error, not a reason to retry.
    """

    name = "aws"
    warnings: tuple[str, ...] = ()

    def __init__(
        self, spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
        channel: Channel, timeout_s: float, following: Following = Following(),
    ) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            0 < timeout_s <= FUNCTION_TIMEOUT_S
        ):
            raise AwsLaunchError(
                f"`timeout_s` {brief(timeout_s)} is no Lambda invocation limit: give seconds in "
                f"(0, {FUNCTION_TIMEOUT_S}]"
            )
        _check_concurrency(spec)
        self.job, self.redis_url, self.channel = job, redis_url, channel
        self._spec, self._target, self._following = spec, target, following
        self._timeout_s = float(timeout_s)
        self._launcher = AwsLauncher(client, target, sleep=following.sleep,
                                     clock=following.clock.monotonic)
        self._rounds = self._functions = 0
        self._polled = self._moved = False
        self._round_start = self._last_change = 0.0
        self._previous: dict[str, Any] | None = None

    @property
    def runs_on(self) -> str:
        target = self._target
        return f"function {target.function_name} ({self._spec.architecture}) in {target.region}"

    def setup(self) -> int:
        self._launcher.deploy(self._spec, self.redis_url, self.job,
                              timeout_s=math.ceil(self._timeout_s))
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
        return iteration  # the workers resume from the checkpoint themselves

    def reconfigure(self, functions: int, memory_mb: int) -> None:
        self._launcher.resize(functions, memory_mb)

    def throttled_share(self) -> float | None:
        return None

    def verdict(self, result: Mapping[str, Any] | None) -> str | None:
        return None

    def stop(self, *, finished: bool) -> None:
        self._launcher.cleanup()

    def capacity(self) -> Capacity:
        return profile_capacity(region=self._target.region, architecture=self._spec.architecture)


def run_aws(
    spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
    channel: Channel, options: RunOptions = DEFAULTS, hooks: Hooks = SILENT,
    controller: Planner | None = None, following: Following = Following(),
) -> LaunchReport:
    """Run a plan on Lambda: deploy → invoke all ranks → follow → clean up (always): the
    orchestrator (`launcher.orchestrator`) over an `AwsBackend`.

    The Redis of `channel` at `redis_url` must be reachable from Lambda (a Redis next to the
    parameter server, not 127.0.0.1). `options.max_restarts` defaults to three times the
    rounds the plan predicts, so a job far slower than planned stops instead of running up a
    bill. A user's factory module must be in the deployed code (`--image-uri` or a layer).
    With a `controller`, a change of plan halts the group, and once every rank has
    checkpointed and returned the function gets the new `MemorySize` and reserved
    concurrency and the new n ranks are invoked with the same global batch.
    """
    backend = AwsBackend(spec, client, target, redis_url=redis_url, job=job, channel=channel,
                         timeout_s=options.timeout_s, following=following)
    if options.max_restarts is None:
        options = dataclasses.replace(options, max_restarts=3 * (spec.restarts + 1))
    return orchestrate(spec, backend, options=options, hooks=hooks, controller=controller,
                       clock=following.clock)


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
    options: RunOptions = DEFAULTS,
) -> list[Call]:
    """Every AWS call `run_aws` would make for this plan, in order, without making any.

    It runs `run_aws` itself against a `DryRunClient`, with a channel that reports the job
    done at once: the listing cannot drift from what a real run does.
    """
    client = DryRunClient()
    run_aws(spec, client, target, redis_url=redis_url, job=job, channel=_DoneChannel(),
            options=options, following=Following(sleep=lambda _seconds: None))
    return client.calls


def run_aws_job(
    spec: LaunchSpec, client: Any, target: AwsTarget, *, redis_url: str, job: str,
    options: RunOptions = DEFAULTS, hooks: Hooks = SILENT,
    controller: Planner | None = None, following: Following = Following(),
) -> LaunchReport:
    """`run_aws` with the job's own parameter channel on the Redis at `redis_url`.

    The channel's keys are deleted afterwards, whether the run ended or failed, and a Redis
    that fails mid-run is one `LaunchError` line naming it (`channel_failed`).
    """
    import redis

    from .channel import ParameterChannel, channel_failed, redis_client

    channel = ParameterChannel(redis_client(redis_url, option="--redis-url"), job,
                               workers=spec.functions)
    try:
        try:
            return run_aws(spec, client, target, redis_url=redis_url, job=job, channel=channel,
                           options=options, hooks=hooks, controller=controller,
                           following=following)
        finally:
            channel.cleanup()
            channel.client.close()
    except redis.RedisError as error:
        raise channel_failed(redis_url, error) from None


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
