"""The `lambdadnn` command through click's CliRunner: outputs, JSON keys and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from lambdadnn import evaluate, solve
from lambdadnn.cli import main

MOBILENET = "instances/mobilenet-cifar10.yaml"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, mapping: dict[str, object], name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(mapping))
    return str(path)


def mobilenet() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(Path(MOBILENET).read_text())
    return loaded


def test_solve_prints_the_plan_and_its_breakdowns() -> None:
    code, out, err = run("solve", MOBILENET)
    plan = solve(MOBILENET)
    assert code == 0, err
    assert f"{plan.functions} functions × {plan.memory_mb:,} MB" in out
    for word in ("time breakdown", "cost breakdown", "margin", "HiGHS"):
        assert word in out


def test_solve_json_has_the_documented_keys() -> None:
    code, out, _ = run("solve", MOBILENET, "--json")
    payload = json.loads(out)
    assert code == 0
    assert {"status", "functions", "memory_mb", "time_s", "cost_usd"} <= payload.keys()
    assert payload["status"] == "optimal"
    assert payload["time_s"] <= payload["deadline_s"]


def test_platform_option_changes_the_grid() -> None:
    code, out, _ = run("solve", MOBILENET, "--json", "--platform", "aws-lambda-2020")
    payload = json.loads(out)
    assert code == 0
    assert payload["platform"] == "aws-lambda-2020"
    assert (payload["memory_mb"] - 128) % 64 == 0 and payload["memory_mb"] <= 3008


def test_infeasible_instance_exits_3_with_the_fastest_plan(tmp_path: Path) -> None:
    job = mobilenet()
    job["objective"] = {"deadline_s": 60}
    code, out, err = run("solve", write(tmp_path, job), "--json")
    payload = json.loads(out)
    assert code == 3
    assert payload["status"] == "infeasible"
    assert payload["time_s"] > 60
    assert "move the deadline out by at least" in err
    assert f"{payload['functions']} × {payload['memory_mb']} MB" in err


def test_no_valid_plan_exits_3_with_one_line(tmp_path: Path) -> None:
    job = mobilenet()
    job["profile"]["rate"] = {"slope": 0.0, "intercept": -1.0}  # type: ignore[index]
    code, _, err = run("solve", write(tmp_path, job))
    assert code == 3
    assert err.count("\n") == 1 and "no valid plan" in err


def test_evaluate_json_matches_the_library() -> None:
    code, out, _ = run("evaluate", MOBILENET, "--functions", "8", "--memory", "2048", "--json")
    payload = json.loads(out)
    expected = evaluate(MOBILENET, functions=8, memory_mb=2048)
    assert code == 0
    assert {"time_s", "cost_usd", "valid", "feasible"} <= payload.keys()
    assert payload["time_s"] == expected.time_s and payload["cost_usd"] == expected.cost_usd


def test_evaluate_explains_an_infeasible_plan() -> None:
    code, out, _ = run("evaluate", MOBILENET, "-n", "2", "-m", "128")
    assert code == 0
    assert "not feasible" in out and "past the deadline" in out


def test_validate_and_bounds() -> None:
    code, out, _ = run("validate", MOBILENET)
    assert code == 0 and out.startswith("ok: mobilenet-cifar10")
    code, out, _ = run("bounds", MOBILENET)
    assert code == 0
    assert "derivation" in out and "∂T_train/∂m ≤ 0" in out and "branch and bound" in out
    code, out, _ = run("bounds", MOBILENET, "--json")
    payload = json.loads(out)
    assert 0 < payload["share_kept"] <= 1 and payload["derivations"]


def test_frontier_table_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "frontier.png"
    code, out, err = run("frontier", MOBILENET, "--points", "4", "--plot", str(png))
    assert code == 0, err
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert out.count("optimal") >= 3
    code, out, _ = run("frontier", MOBILENET, "--from", "800", "--to", "2400", "--points", "3",
                       "--json")
    plans = json.loads(out)["plans"]
    assert [p["deadline_s"] for p in plans] == [800, 1600, 2400]
    costs = [p["cost_usd"] for p in plans if p["status"] == "optimal"]
    assert costs == sorted(costs, reverse=True)  # a later deadline never costs more


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["solve", "no/such/file.yaml"], "does not exist"),
        (["solve", MOBILENET, "--platform", "nope"], "`platform`"),
        (["evaluate", MOBILENET, "-n", "0", "-m", "512"], "`functions`"),
        (["solve", MOBILENET, "--deadline", "-5"], "`deadline_s`"),
        (["frontier", MOBILENET, "--from", "900", "--to", "100"], "`--from`"),
    ],
)
def test_bad_input_is_one_line_on_stderr(args: list[str], fragment: str) -> None:
    code, out, err = run(*args)
    assert code == 1
    assert fragment in err and err.startswith("error: ") and err.count("\n") == 1
    assert "Traceback" not in out + err


def test_malformed_yaml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nworkload: {model_size_mb: 18,\n")
    code, _, err = run("solve", str(path))
    assert code == 1 and "not valid YAML" in err and err.count("\n") == 1


def test_usage_error_exits_2() -> None:
    code, _, _ = run("evaluate", MOBILENET)
    assert code == 2
