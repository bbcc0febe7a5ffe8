"""The newcomer's path: shipped instances by name, one CLI vocabulary, `-v/-q`, `--json`."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambdadnn import InstanceError, Submission, load_instance, solve, solve_many
from lambdadnn.cli import EXIT_CODES, main, platform_option
from lambdadnn.solver.shipped import instances_folder, names, platforms_folder

SHIPPED = instances_folder() / "mobilenet-cifar10.yaml"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working folder with no `instances/` in it, as an installed user's would be."""
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(previous)


def test_a_shipped_instance_loads_by_name_from_any_folder(elsewhere: Path) -> None:
    assert load_instance("mobilenet-cifar10") == load_instance(SHIPPED)


def test_a_submission_names_a_shipped_instance(elsewhere: Path) -> None:
    schedule = solve_many([Submission("mobilenet-cifar10")], concurrency=1000)
    assert schedule.jobs[0].met
    assert schedule.jobs[0].cost_usd == pytest.approx(solve(SHIPPED).cost_usd, rel=1e-9)


def test_a_file_at_that_path_wins_over_the_shipped_name(elsewhere: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8").replace("name: mobilenet-cifar10", "name: mine")
    (elsewhere / "mobilenet-cifar10").write_text(text, encoding="utf-8")
    assert load_instance("mobilenet-cifar10").name == "mine"


def test_an_unknown_name_lists_the_shipped_ones(elsewhere: Path) -> None:
    with pytest.raises(InstanceError) as error:
        load_instance("mobilenet-cifar")
    message = str(error.value)
    assert "`instance`" in message and "neither a file nor a shipped instance" in message
    for name in names(instances_folder()):
        assert name in message


def test_the_cli_solves_a_shipped_name(elsewhere: Path) -> None:
    by_name = CliRunner().invoke(main, ["solve", "mobilenet-cifar10", "--json"])
    by_path = CliRunner().invoke(main, ["solve", str(SHIPPED), "--json"])
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.stdout)["cost_usd"] == json.loads(by_path.stdout)["cost_usd"]


def test_platform_may_be_a_platform_files_path(tmp_path: Path) -> None:
    copy = tmp_path / "my-arm.yaml"
    shutil.copy(platforms_folder() / "aws-lambda-arm64.yaml", copy)
    by_path = load_instance(SHIPPED, platform=str(copy))
    assert by_path.platform == load_instance(SHIPPED, platform="aws-lambda-arm64").platform
    result = CliRunner().invoke(main, ["validate", str(SHIPPED), "--platform", str(copy)])
    assert result.exit_code == 0, result.output
    assert "aws-lambda-arm64" in result.stdout


def test_an_instance_file_still_names_its_platform_by_name_only(tmp_path: Path) -> None:
    """A received file must not point at another file: `platform: ../x.yaml` is refused."""
    text = SHIPPED.read_text(encoding="utf-8")
    (tmp_path / "x.yaml").write_text(
        re.sub(r"(?m)^platform: .*$", "platform: ../etc/x.yaml", text), encoding="utf-8")
    with pytest.raises(InstanceError, match="`platform` must be a platform name"):
        load_instance(tmp_path / "x.yaml")


def test_validate_prints_json() -> None:
    result = CliRunner().invoke(main, ["validate", "mobilenet-cifar10", "--json"])
    assert result.exit_code == 0, result.output
    loaded = load_instance(SHIPPED)
    assert json.loads(result.stdout) == {
        "ok": True, "instance": loaded.name, "platform": loaded.platform.name,
        "memory_mb": {"min": loaded.platform.memory.min_mb, "max": loaded.platform.memory.max_mb,
                      "step": loaded.platform.memory.step_mb},
        "max_functions": loaded.max_functions, "deadline_s": loaded.objective.deadline_s,
    }


def test_deadline_s_is_the_spelling_and_deadline_an_alias() -> None:
    new = CliRunner().invoke(main, ["solve", "mobilenet-cifar10", "--deadline-s", "900", "--json"])
    old = CliRunner().invoke(main, ["solve", "mobilenet-cifar10", "--deadline", "900", "--json"])
    assert new.exit_code == old.exit_code == 0, new.output + old.output
    assert json.loads(new.stdout) == {**json.loads(old.stdout),
                                      "solve_seconds": json.loads(new.stdout)["solve_seconds"]}
    shown = CliRunner().invoke(main, ["solve", "--help"]).stdout
    assert "--deadline-s" in shown and "--deadline " not in shown and "--deadline," not in shown


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_plot_dir_is_the_spelling_and_plots_an_alias(command: str) -> None:
    shown = CliRunner().invoke(main, [command, "--help"]).stdout
    assert "--plot-dir" in shown and "--plots" not in shown


def test_verbose_and_quiet_set_the_library_loggers_level() -> None:
    logger = logging.getLogger("lambdadnn")
    for flags, level in (([], logging.WARNING), (["-v"], logging.DEBUG),
                         (["-q"], logging.ERROR)):
        result = CliRunner().invoke(main, [*flags, "validate", "mobilenet-cifar10"])
        assert result.exit_code == 0, result.output
        assert logger.level == level
    both = CliRunner().invoke(main, ["-v", "-q", "validate", "mobilenet-cifar10"])
    assert both.exit_code == 2 and "contradict" in both.output


def test_the_library_logs_through_the_cli_at_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record of a `lambdadnn.*` logger reaches stderr at -v and is hidden by default."""
    from lambdadnn.solver import pipeline

    original = pipeline.solve

    def noisy(*args: object, **kwargs: object) -> object:
        logging.getLogger("lambdadnn.solver.pipeline").debug("searching the grid")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "solve", noisy)
    loud = CliRunner().invoke(main, ["-v", "solve", "mobilenet-cifar10"])
    plain = CliRunner().invoke(main, ["solve", "mobilenet-cifar10"])
    assert "debug: searching the grid" in loud.stderr
    assert "searching the grid" not in plain.stderr


def test_help_names_every_shipped_instance_and_platform() -> None:
    """The hand-written lists in `--help` (kept by hand so that `--help` stays light) match
    what is shipped."""
    assert f"({', '.join(names(instances_folder()))})" in " ".join(EXIT_CODES.split())
    help_text = " ".join(str(platform_option(lambda: None).__click_params__[0].help).split())
    for name in names(platforms_folder()):
        assert name in help_text


def test_no_library_module_prints() -> None:
    """The library speaks through `logging` and its results, never `print`."""
    import ast

    root = Path(__file__).resolve().parent.parent
    for package in ("models", "solver", "simulator", "launcher"):
        for path in (root / package).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Name) and node.func.id == "print"]
            assert not calls, f"{path.name} prints at lines {calls}"
