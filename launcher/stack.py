"""The AWS side of `launch --backend aws`, deployed as one CloudFormation stack.

`deploy/stack.yaml` (package data) creates everything a launch needs besides the function,
which `launch` creates per run: the function's execution role, the ECR repository of the
worker's image, a VPC's subnets and security group, and the Redis channel on an EC2 instance
of the parameter server's type. `lambdadnn deploy --print` writes it out, and
`stack_outputs` reads what the deployed stack gives `lambdadnn launch --stack NAME`.

As in `launcher/aws.py`, the boto3 client is passed in (a moto server's in the tests), never
built at import time, and AWS errors are told apart by their code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from ..inputs.files import brief
from .aws import (
    NO_CREDENTIALS,
    AwsLaunchError,
    _error_code,
    _missing_credentials,
)

__all__ = ["OUTPUTS", "StackError", "StackOutputs", "stack_outputs", "template"]

# The outputs `launch` reads, in the order of StackOutputs' fields.
OUTPUTS = ("RoleArn", "RepositoryUri", "SubnetIds", "SecurityGroupIds", "RedisUrl")
# A stack whose resources are all in place: created, or updated (even by a rollback).
_READY = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE",
                    "IMPORT_COMPLETE"})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}", re.ASCII)  # CloudFormation's stack names
_DEPLOY = "deploy it from `lambdadnn deploy --print` (see `lambdadnn deploy --help`)"


class StackError(AwsLaunchError):
    """The stack `--stack` names cannot be read, or lacks what `launch` needs."""


@dataclass(frozen=True)
class StackOutputs:
    """What the stack gives a launch: role, image repository, VPC and Redis channel."""

    role_arn: str
    repository_uri: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    redis_url: str

    @property
    def image_uri(self) -> str:
        """The image `docker push REPOSITORY:latest` put there (README, "Deploy on AWS")."""
        return f"{self.repository_uri}:latest"


def template() -> str:
    """The stack's CloudFormation template (package data, so a wheel install has it too)."""
    return (files("lambdadnn") / "deploy" / "stack.yaml").read_text(encoding="utf-8")


def _botocore_error(error: Exception) -> bool:
    """Whether botocore failed without an AWS answer (no endpoint, a timeout, no region)."""
    return any(kind.__module__ == "botocore.exceptions" and kind.__name__ == "BotoCoreError"
               for kind in type(error).__mro__)


def _describe(client: Any, name: str) -> dict[str, Any]:
    """The stack's description, or one line saying why there is none and what to do."""
    try:
        stacks: list[dict[str, Any]] = client.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:
        code = _error_code(exc)
        if code is None and _missing_credentials(exc):
            raise StackError(f"reading stack {name!r} {NO_CREDENTIALS}") from None
        if code is None and _botocore_error(exc):  # no answer: endpoint, region, network
            raise StackError(f"reading stack {name!r} failed: {brief(str(exc), 160)[1:-1]}; "
                             "check `--region`, `--endpoint-url` and the network") from None
        if code is None:
            raise
        if code == "ValidationError" and "does not exist" in str(exc):
            raise StackError(f"stack {name!r} does not exist in this region: check `--stack` "
                             f"and `--region`, or {_DEPLOY}", code=code) from None
        fix = ("grant the caller cloudformation:DescribeStacks on it"
               if code in {"AccessDenied", "AccessDeniedException"}
               else "see the AWS error message")
        raise StackError(f"reading stack {name!r} failed with {code}: "
                         f"{brief(str(exc), 160)[1:-1]}; {fix}", code=code) from None
    if not stacks:
        raise StackError(f"stack {name!r} does not exist in this region: check `--stack` and "
                         f"`--region`, or {_DEPLOY}")
    return stacks[0]


def stack_outputs(client: Any, name: str) -> StackOutputs:
    """The outputs `launch` needs from stack `name`, read with a CloudFormation `client`.

    A stack that is not (or no longer) complete, or that lacks one of `OUTPUTS` (deployed
    from another template), is one `StackError` line naming the stack, what is wrong and the
    fix. The IDs and URLs are checked where they are used (`AwsTarget`, the Redis client).
    """
    if _NAME.fullmatch(name) is None:
        raise StackError(f"`--stack` {brief(name)} is no CloudFormation stack name (a letter, "
                         "then up to 127 letters, digits and hyphens): give the name it was "
                         "deployed with")
    stack = _describe(client, name)
    status = str(stack.get("StackStatus", "unknown"))
    if status not in _READY:
        raise StackError(f"stack {name!r} is {status}, not deployed: wait for it to complete, "
                         "or read its events (`aws cloudformation describe-stack-events "
                         f"--stack-name {name}`), delete it and deploy again")
    outputs = {str(item.get("OutputKey")): str(item.get("OutputValue") or "")
               for item in stack.get("Outputs") or []}
    for key in OUTPUTS:
        if not outputs.get(key):
            raise StackError(f"stack {name!r} has no output `{key}`: it was not deployed from "
                             f"lambdadnn's template; {_DEPLOY}")
    return StackOutputs(
        role_arn=outputs["RoleArn"],
        repository_uri=outputs["RepositoryUri"],
        subnet_ids=tuple(outputs["SubnetIds"].split(",")),
        security_group_ids=tuple(outputs["SecurityGroupIds"].split(",")),
        redis_url=outputs["RedisUrl"],
    )
