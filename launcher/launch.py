"""`lambdadnn launch` as one call: the backend, the controller and the job chosen from options.

The CLI parses its options into a `Launch` and renders what `launch` returns; the policy of
which backend runs a spec, how an adaptive launch builds its controller (`Controller.of`,
from the plan's instance) and what a job is called lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..solver.errors import InstanceError
from . import LaunchError
from .orchestrator import DEFAULTS, SILENT, Hooks, RunOptions
from .spec import LaunchReport, LaunchSpec

if TYPE_CHECKING:
    from .aws import AwsTarget

__all__ = ["Launch", "aws_job", "launch"]


@dataclass(frozen=True)
class Launch:
    """How to launch a spec: on `backend`, with the workers' `run` options.

    `redis_url` is the parameter channel (locally: None starts a redis-server); `adaptive`
    re-plans at the controller's checks. Local only: `oversubscribe` runs a plan needing
    more vCPU than this machine has, `resume` continues a stopped job. AWS only: `target`
    is the function to deploy, `endpoint_url` Lambda's endpoint (a moto server in tests).
    """

    backend: Literal["local", "aws"] = "local"
    run: RunOptions = DEFAULTS
    redis_url: str | None = None
    adaptive: bool = False
    oversubscribe: bool = False
    resume: str | None = None
    target: AwsTarget | None = None
    endpoint_url: str | None = None


def aws_job(spec: LaunchSpec, seed: int) -> str:
    """The job name of an AWS launch: its channel's keys and its function's environment."""
    return f"aws-{seed}-{spec.functions}x{spec.memory_mb}"


def launch(spec: LaunchSpec, how: Launch, hooks: Hooks = SILENT) -> LaunchReport:
    """Run `spec` as `how` says, to its report (see `run_local` and `run_aws_job` for what
    each backend raises)."""
    from ..solver.adaptive import Controller
    from . import aws, local
    from .channel import redis_client

    controller = Controller.of(spec) if how.adaptive else None
    if how.backend == "aws":
        if how.target is None:
            raise LaunchError("an aws launch needs `Launch.target`, got None; give the function "
                              "to deploy (`--role-arn` or `--stack NAME`)")
        if how.target.image_uri is None:
            raise InstanceError(f"`--image-uri` is needed for the aws backend: {aws.NEEDS_IMAGE}; "
                                "build the image (`lambdadnn image`), push it to ECR and pass "
                                "its URI, or `--stack NAME`")
        if not how.redis_url:
            raise InstanceError("`--redis-url` is needed for the aws backend: a Redis that the "
                                "Lambda functions can reach (not 127.0.0.1), or `--stack NAME`")
        client = aws.lambda_client(how.target.region, endpoint_url=how.endpoint_url)
        return aws.run_aws_job(spec, client, how.target, redis_url=how.redis_url,
                               job=aws_job(spec, how.run.seed), options=how.run, hooks=hooks,
                               controller=controller)
    if how.redis_url is not None:
        redis_client(how.redis_url, option="--redis-url").close()
    options = how.run
    return local.run_local(
        spec, redis_url=how.redis_url, timeout_s=options.timeout_s,
        timeout_margin_s=options.timeout_margin_s, checkpoint_every=options.checkpoint_every,
        seed=options.seed, workload=options.workload, oversubscribe=how.oversubscribe,
        warn=hooks.warn, progress=hooks.progress, controller=controller, resume=how.resume,
    )
