"""`lambdadnn launch` through click's CliRunner: local runs, the AWS dry run and wiring, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lambdadnn.launcher.aws
from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec, Prediction
from lambdadnn.launcher.timings import summarise

pytestmark = pytest.mark.real  # local launches: a redis-server and torch workers

ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn-worker:latest"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    """The 1DCNN plan from `solve --json`, shrunk to 2 workers and 120 iterations of digits."""
    plan = solve("instances/1dcnn-imdb.yaml").to_dict()
    plan.update(functions=2, iterations=120)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_local_launch_reports_in_json(plan_file: Path, redis_url: str) -> None:
    code, out, err = run("launch", str(plan_file), "--redis-url", redis_url, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report.keys() == {field for field in LaunchReport.__dataclass_fields__}
    assert report["status"] == "done" and report["iterations"] == 120
    assert report["backend"] == "local" and report["architecture"] == "x86_64"
    # The plan's instance (1dcnn-imdb) describes no workload the launcher runs: no figure.
    assert report["predicted_time_s"] is None and report["prediction_error"] is None
    assert "has no `fit` section" in report["prediction_note"]
    assert report["time_to_first_iteration_s"] > 0
    assert report["test_accuracy"] > 0.8 and report["workload"] == "digits-cnn"


def test_aws_dry_run_lists_every_call_without_making_one(plan_file: Path) -> None:
    code, out, err = run("launch", str(plan_file), "--backend", "aws", "--role-arn", ROLE,
                         "--image-uri", IMAGE, "--dry-run")
    assert code == 0 and err == "", err
    calls = json.loads(out)
    operations = [call["operation"] for call in calls]
    assert operations[0] == "CreateFunction" and operations[-1] == "DeleteFunction"
    assert operations.count("Invoke") == 2
    create = calls[0]["params"]
    assert create["MemorySize"] == json.loads(plan_file.read_text())["memory_mb"]
    assert create["Timeout"] == 900
    assert create["Code"] == {"ImageUri": IMAGE} and create["PackageType"] == "Image"
    assert "VpcConfig" not in create  # no --subnet-ids: outside any VPC
    ranks = sorted(json.loads(c["params"]["Payload"])["rank"] for c in calls
                   if c["operation"] == "Invoke")
    assert ranks == [0, 1]
    assert {json.loads(c["params"]["Payload"])["workload"] for c in calls
            if c["operation"] == "Invoke"} == {"digits-cnn"}


def test_aws_dry_run_of_a_zip_says_launch_refuses_it(plan_file: Path) -> None:
    """The worker imports torch, which no zip holds: the dry run lists the zip's calls and
    says, in one warning line, that a launch refuses them."""
    code, out, err = run("launch", str(plan_file), "--backend", "aws", "--role-arn", ROLE,
                         "--dry-run")
    assert code == 0 and json.loads(out)[0]["params"]["PackageType"] == "Zip"
    (line,) = err.splitlines()
    assert line.startswith("warning: these are the calls of a zip deployment, which `launch` "
                           "refuses: the worker imports torch"), err


def test_print_policy_names_the_actions() -> None:
    code, out, _ = run("launch", "--print-policy")
    actions = {a for s in json.loads(out)["Statement"] for a in s["Action"]}
    assert code == 0 and {"lambda:CreateFunction", "lambda:InvokeFunction"} <= actions


def test_aws_backend_is_wired_to_the_channel(
    plan_file: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI hands run_aws the job's channel: its progress, result, timings and restarts."""
    seen: dict[str, Any] = {}

    def fake_run_aws(
        spec: LaunchSpec, client: Any, target: Any, **kwargs: Any
    ) -> LaunchReport:
        seen.update(kwargs, target=target, spec=spec)
        progress = kwargs["channel"].progress()
        workload = kwargs["options"].workload
        return LaunchReport.of(spec, backend="aws", workload=workload,
                               iterations=progress["iteration"], restarts=0, wall_time_s=1.0,
                               result={"final_loss": 0.1, "test_accuracy": 0.95},
                               runs_on="a fake",
                               prediction=Prediction.of(spec, backend="aws", workload=workload,
                                                        timeout_s=900, timeout_margin_s=30),
                               timings=summarise(kwargs["channel"].timings(), [0.0]))

    monkeypatch.setattr(lambdadnn.launcher.aws, "run_aws", fake_run_aws)
    code, out, err = run("launch", str(plan_file), "--backend", "aws", "--role-arn", ROLE,
                         "--image-uri", IMAGE, "--redis-url", redis_url,
                         "--endpoint-url", "http://127.0.0.1:9", "--workload", "digits-mlp",
                         "--json")
    assert code == 0, err
    assert seen["redis_url"] == redis_url and seen["target"].role_arn == ROLE
    assert seen["target"].image_uri == IMAGE
    assert callable(seen["channel"].result) and callable(seen["channel"].record_restart)
    assert callable(seen["channel"].timings)
    assert seen["spec"].functions == 2 and seen["spec"].iterations == 120
    assert json.loads(out)["status"] == "done" and json.loads(out)["workload"] == "digits-mlp"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["launch"], "`SOURCE`"),
        (["launch", "{plan}", "--backend", "aws"], "`--role-arn`"),
        (["launch", "{plan}", "--backend", "aws", "--role-arn", ROLE], "`--image-uri`"),
        (["launch", "{plan}", "--backend", "aws", "--role-arn", ROLE, "--image-uri", IMAGE],
         "`--redis-url`"),
        (["launch", "{plan}", "--dry-run"], "`--dry-run`"),
        (["launch", "{bad}"], "`memory_mb`"),
        (["launch", "no/such/plan.json"], "does not exist"),
        (["launch", "{plan}", "--workload", "resnet"], "`--workload` 'resnet'"),
        (["launch", "{plan}", "--workload", "no_such_pkg.models:make"], "cannot import"),
        (["launch", "{plan}", "--backend", "aws", "--role-arn", ROLE, "--dry-run",
          "--workload", "lambdadnn.launcher.workloads:nothing"], "has no attribute 'nothing'"),
    ],
)
def test_launch_errors_are_one_line(
    args: list[str], fragment: str, plan_file: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"functions": 2}')
    code, out, err = run(*(a.format(plan=plan_file, bad=bad) for a in args))
    assert code == 1 and fragment in err and err.count("\n") == 1, err
    assert "Traceback" not in out + err


def test_a_workload_module_is_found_in_the_working_folder(
    plan_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with `python -m`: the CLI imports it from here (the console script's path lacks it)."""
    package = tmp_path / "here" / "cwdpkg_launch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("def other(seed: int) -> None: ...\n")
    monkeypatch.chdir(package.parent)
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(package.parent))])
    code, _, err = run("launch", str(plan_file), "--workload", "cwdpkg_launch.models:make")
    assert code == 1 and err.count("\n") == 1, err
    assert "module 'cwdpkg_launch.models' has no attribute 'make'" in err  # it was imported
