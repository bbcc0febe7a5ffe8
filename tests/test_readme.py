"""The README shows what the program does: its YAML example solves to the plan its tour prints."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from click.testing import CliRunner

from lambdadnn import load_instance, solve
from lambdadnn.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
TOUR_COMMAND = "$ lambdadnn solve instances/mobilenet-cifar10.yaml\n"


def _block(language: str, after: str = "") -> str:
    start = README.index(after) if after else 0
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(README, start)
    assert match is not None, f"no ```{language} block after {after!r}"
    return match.group(1)


def _tour_output() -> list[str]:
    start = README.index(TOUR_COMMAND) + len(TOUR_COMMAND)
    return README[start:README.index("```", start)].splitlines()


def test_yaml_example_is_the_tours_instance_and_solves_to_the_tours_plan() -> None:
    example = yaml.safe_load(_block("yaml", after="## YAML schema"))
    shipped = yaml.safe_load(Path("instances/mobilenet-cifar10.yaml").read_text())
    assert example == shipped
    plan = solve(load_instance(example))
    shown = "\n".join(_tour_output())
    assert f"plan       {plan.functions} functions × {plan.memory_mb:,} MB" in shown
    assert f"cost       ${plan.cost_usd:.6f}" in shown


def test_tour_output_is_the_cli_output() -> None:
    """Every line of the tour but the timing of the search is what the command prints."""
    result = CliRunner().invoke(main, ["solve", "instances/mobilenet-cifar10.yaml"])
    assert result.exit_code == 0
    printed = result.stdout.splitlines()
    shown = _tour_output()
    timing = re.compile(r"\d[\d.,]* ms$")
    assert len(printed) == len(shown)
    for real, documented in zip(printed, shown, strict=True):
        assert timing.sub("", real) == timing.sub("", documented)


def test_solve_many_example_runs_and_meets_its_deadlines() -> None:
    """The README's `solve_many` example is code that runs, and its three jobs fit."""
    namespace: dict[str, object] = {}
    exec(_block("python", after="## Many jobs, one account"), namespace)
    schedule = namespace["schedule"]
    assert schedule.status == "optimal"  # type: ignore[attr-defined]
    assert [job.met for job in schedule.jobs] == [True, True, True]  # type: ignore[attr-defined]
