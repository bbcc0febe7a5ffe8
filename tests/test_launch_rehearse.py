"""`lambdadnn launch PLAN --truth-file WORLD`: the launch played in a world, nothing started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambdadnn import load_instance, solve
from lambdadnn.cli import main
from lambdadnn.simulator.world import World, run_plan
from lambdadnn.simulator.worlds import job_spec

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = str(ROOT / "instances" / "mobilenet-cifar10.yaml")
WORLD = ROOT / "instances" / "worlds" / "straggler-tail.yaml"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["launch", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_rehearsal_is_the_plans_run_in_the_world(nothing_starts: None) -> None:
    """The JSON's time and cost are the world's run of the solved plan under the seed's key
    (job 0 of seed 3), and nothing is launched (the fixture fails on any process)."""
    code, out, err = _run(INSTANCE, "--truth-file", str(WORLD), "--seed", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    instance = load_instance(INSTANCE)
    plan = solve(instance)  # what launch solves an instance YAML to
    expected = run_plan(World.load(WORLD), job_spec(instance), plan.functions, plan.memory_mb,
                        (3, 0, 1))
    assert (data["functions"], data["memory_mb"]) == (plan.functions, plan.memory_mb)
    assert data["time_s"] == expected.time_s and data["cost_usd"] == expected.cost_usd
    assert data["met"] == (expected.time_s <= instance.objective.deadline_s)
    assert data["world"] == {"file": str(WORLD), "name": "straggler-tail"}


def test_an_adaptive_rehearsal_lists_its_plans(nothing_starts: None) -> None:
    code, out, err = _run(INSTANCE, "--truth-file", str(WORLD), "--adaptive", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["decisions"][0][1:] == [data["functions"], data["memory_mb"]]
    assert len(data["stages"]) == data["switches"] + 1
    code, out, err = _run(INSTANCE, "--truth-file", str(WORLD), "--adaptive")
    assert code == 0 and out.startswith("rehearsed in world straggler-tail"), (out, err)


@pytest.mark.parametrize(("extra", "named"), [
    (["--backend", "aws"], "--backend aws"),
    (["--dry-run"], "--dry-run"),
    (["--resume", "job"], "--resume"),
    (["--redis-url", "redis://127.0.0.1:1"], "--redis-url"),
    (["--workload", "digits-cnn"], "--workload"),
])
def test_launch_options_are_refused_in_a_rehearsal(
    extra: list[str], named: str, nothing_starts: None
) -> None:
    code, _out, err = _run(INSTANCE, "--truth-file", str(WORLD), *extra)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("error: ") and named in err, err


def test_a_bad_world_file_is_one_line(tmp_path: Path, nothing_starts: None) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("stragglers: {cv: -1}\n", encoding="utf-8")
    for world, named in ((bad, "stragglers.cv"), (tmp_path / "none.yaml", "none.yaml")):
        code, out, err = _run(INSTANCE, "--truth-file", str(world))
        assert code == 1, out
        assert err.count("\n") == 1 and err.startswith("error: ") and named in err, err
