"""The AWS backend refuses, in one line and before any call, what Lambda would not run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambdadnn.cli import main

pytestmark = pytest.mark.real  # torch (a launch loads the workload) and a redis-server

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn-worker:latest"
ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"


def _plan(tmp_path: Path, functions: int | None = None) -> Path:
    solved = CliRunner().invoke(main, ["solve", "mobilenet-cifar10", "--json"])
    assert solved.exit_code == 0, solved.output
    plan = json.loads(solved.stdout)
    if functions is not None:
        plan["functions"] = functions
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


@pytest.mark.parametrize("functions", [1001, 10_000])
def test_a_plan_past_the_platforms_concurrency_is_refused_even_in_a_dry_run(
        tmp_path: Path, functions: int) -> None:
    result = CliRunner().invoke(main, [
        "launch", str(_plan(tmp_path, functions)), "--backend", "aws", "--dry-run",
        "--redis-url", "redis://10.0.0.5:6379/0", "--image-uri", IMAGE, "--role-arn", ROLE])
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert f"{functions:,} functions exceed the `max_concurrency` of 1,000" in result.stderr
    assert "CreateFunction" not in result.stdout


def test_a_plan_within_the_limit_still_dry_runs(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "launch", str(_plan(tmp_path, 1000)), "--backend", "aws", "--dry-run",
        "--redis-url", "redis://10.0.0.5:6379/0", "--image-uri", IMAGE, "--role-arn", ROLE])
    assert result.exit_code == 0, result.output


def test_missing_credentials_are_one_line_naming_how_to_give_them(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = CliRunner().invoke(main, [
        "launch", str(_plan(tmp_path)), "--backend", "aws", "--redis-url", redis_url,
        "--image-uri", IMAGE, "--role-arn", ROLE, "--endpoint-url", "http://127.0.0.1:9"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.stderr.count("\n") == 1
    assert "needs AWS credentials and found none" in result.stderr
    assert "AWS_ACCESS_KEY_ID" in result.stderr and "aws configure" in result.stderr
