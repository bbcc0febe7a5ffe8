"""A received file never chooses code: a plan or instance naming a non-shipped workload.

Each test writes, into a fresh working folder, a `helpers.py` that leaves a marker (one line
per importing process) when imported, and a plan JSON or instance YAML whose `fit.workload`
names `helpers:make` (or the standard library's `this:x`). `launch` must refuse it, in one
line that names the fix, before importing anything, on every path that reads `fit.workload`
(local, `--backend aws --dry-run`, and a real AWS launch). When the user names
`--workload helpers:make` on the command line, it runs, in the launcher and every worker.
Neither the launcher's nor a worker's import path gets the current folder otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.workloads import SHIPPED, resolve_workload
from lambdadnn.solver.pipeline import solve

pytestmark = pytest.mark.real  # torch (workloads are loaded) and a redis-server

ROOT = Path(__file__).resolve().parent.parent
ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"
MARKER = "imported.txt"
# Imported, it appends its process id to the marker; its factory is the shipped CNN's.
HELPERS = f"""
import os
with open({MARKER!r}, "a") as marker:
    marker.write(f"{{os.getpid()}}\\n")
from lambdadnn.launcher.workloads import digits_cnn as make
"""
FIT: dict[str, Any] = {"backend": "local", "seconds": 60.0, "cost_usd": 0.0, "parameters": {}}


def instance_naming(workload: str) -> dict[str, Any]:
    """The 1D CNN instance as `lambdadnn profile` of `workload` would have written it."""
    mapping = yaml.safe_load((ROOT / "instances" / "1dcnn-imdb.yaml").read_text())
    return {**mapping, "fit": {**FIT, "workload": workload}}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A received folder as the working folder, holding `helpers.py`; the test process's
    `sys.path` and `sys.modules` as they were afterwards."""
    folder = tmp_path / "received"
    folder.mkdir()
    (folder / "helpers.py").write_text(HELPERS)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert "helpers" not in sys.modules and "this" not in sys.modules
    yield Path(os.getcwd())
    for name in ("helpers", "this"):
        sys.modules.pop(name, None)


def received(folder: Path, workload: str, kind: str, **edits: Any) -> Path:
    """A plan JSON (`solve --json` of the instance) or the instance YAML itself."""
    if kind == "yaml":
        path = folder / "instance.yaml"
        path.write_text(yaml.safe_dump(instance_naming(workload)))
        return path
    plan = solve(instance_naming(workload)).to_dict()
    plan.update(functions=2, iterations=20, **edits)
    path = folder / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


AWS = ["--backend", "aws", "--role-arn", ROLE]
COMMANDS = {
    "local": [],
    "local-adaptive": ["--adaptive"],
    "aws-dry-run": [*AWS, "--dry-run"],
    "aws": [*AWS, "--redis-url", "redis://127.0.0.1:9/0", "--endpoint-url", "http://127.0.0.1:9"],
}


@pytest.mark.parametrize("kind", ["json", "yaml"])
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("workload", ["helpers:make", "this:x"])
def test_a_received_file_naming_unshipped_code_is_refused_before_any_import(
    here: Path, workload: str, command: str, kind: str
) -> None:
    source = received(here, workload, kind)
    path_before = list(sys.path)
    code, out, err = invoke("launch", source.name, *COMMANDS[command])
    assert not (here / MARKER).exists()
    assert "helpers" not in sys.modules and "this" not in sys.modules
    assert sys.path == path_before and str(here) not in sys.path
    field = "instance_spec.fit.workload" if kind == "json" else "fit.workload"
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in out + err, err
    assert err.startswith(f"error: `{field}` in file '{source.name}' names '{workload}', which is "
                          "not a shipped workload"), err
    assert err.rstrip().endswith(f"name your own code on the command line: --workload {workload}")


def test_the_user_naming_the_code_on_the_command_line_runs_it_everywhere(
    here: Path, redis_url: str
) -> None:
    """The same received plan, with the user's `--workload`: the launcher and both workers
    import it (the workers from the folder the launcher imported it from)."""
    source = received(here, "helpers:make", "json", local_batch=16)
    code, out, err = invoke("launch", source.name, "--workload", "helpers:make",
                            "--redis-url", redis_url, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["status"] == "done" and report["workload"] == "helpers:make"
    assert report["prediction_note"] is None  # the plan's fit is for what ran: a figure
    importers = set((here / MARKER).read_text().split())
    assert str(os.getpid()) in importers and len(importers) >= 3  # the launcher, 2 workers
    assert sys.path[0] == str(here)  # the rule: the user named code of this folder


def test_a_worker_never_has_the_current_folder_on_its_path(
    here: Path, redis_url: str
) -> None:
    """A received folder holding a module of the name a worker imports (`redis`) is not
    imported by the workers of a shipped workload; the launch runs as if it were absent."""
    (here / "redis.py").write_text(HELPERS + "raise ImportError('a received redis.py ran')\n")
    source = received(here, "digits-cnn", "json")
    code, out, err = invoke("launch", source.name, "--redis-url", redis_url, "--json")
    assert not (here / MARKER).exists()
    assert code == 0, err
    assert json.loads(out)["workload"] == "digits-cnn"
    assert str(here) not in sys.path


@pytest.mark.parametrize("kind", ["json", "yaml"])
def test_a_shipped_workload_named_by_the_file_is_taken(here: Path, kind: str) -> None:
    """A file may choose among the shipped workloads: the dry run's workers get its choice."""
    source = received(here, "digits-mlp", kind)
    code, out, err = invoke("launch", source.name, *AWS, "--dry-run")
    assert code == 0, err
    payloads = [json.loads(call["params"]["Payload"]) for call in json.loads(out)
                if call["operation"] == "Invoke"]
    assert payloads and {payload["workload"] for payload in payloads} == {"digits-mlp"}
    assert str(here) not in sys.path


def test_resolve_workload(here: Path) -> None:
    """The rule itself: the user's name is taken (a non-shipped one puts the current folder on
    the path); a file's only when shipped; a malformed file's is not echoed as a command."""
    before = list(sys.path)
    assert resolve_workload(None) == "digits-cnn"
    for name in SHIPPED:
        assert resolve_workload(None, recorded=name) == name
        assert resolve_workload(name, recorded="helpers:make") == name
    assert sys.path == before
    with pytest.raises(LaunchError, match=r"names 'x; rm -rf ~:y'.*--workload package\.module:f"):
        resolve_workload(None, recorded="x; rm -rf ~:y", source="file 'p.json'")
    with pytest.raises(LaunchError, match="is not of the form"):
        resolve_workload("x; rm -rf ~:y")
    assert sys.path == before
    assert resolve_workload("helpers:make", recorded="this:x") == "helpers:make"
    assert sys.path == [str(here), *before]
    assert not (here / MARKER).exists()  # resolving imports nothing; checking it does
