"""`lambdadnn sweep --truth-file`: cells in the independent world on Dask equal a serial
`compare(..., world=...)`, shares with both intervals, hostile world options refused."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambdadnn.cli import _SWEEP_WORLD_NAMES, _sweep_text, main
from lambdadnn.inputs.errors import InputError
from lambdadnn.models.noise import NoiseModel
from lambdadnn.plot import plot_sweep
from lambdadnn.simulator import sweep as sweep_module
from lambdadnn.simulator.compare import compare
from lambdadnn.simulator.defaults import (
    DEFAULT_GUARANTEE,
    DEFAULT_POOL_SIZE,
    HINDSIGHT_NAME,
    MODEL_STRATEGY_NAMES,
)
from lambdadnn.simulator.sweep import (
    NamedWorld,
    Setup,
    SweepResult,
    aggregate,
    grid,
    named_worlds,
    run_dask,
)
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.simulator.world import World

pytestmark = pytest.mark.real  # Dask clusters

WORLD = """\
name: rough
stragglers: {cv: 0.2, tail: {kind: pareto, shape: 1.5, share: 0.02}}
cold_start: {base_s: 0.5, per_gb_s: 0.1}
measurement: {cv: 0.05}
checkpoint_s: 1.0
"""
NAMES = ["lambdadnn", "replan-heuristic", HINDSIGHT_NAME]
JOBS = 8


@pytest.fixture(scope="module")
def world_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("worlds") / "rough.yaml"
    path.write_text(WORLD)
    return path


def _bare(result: dict[str, Any]) -> dict[str, Any]:
    """A cell's report without its coordinates and wall time: `StrategyReport.to_dict`'s
    figures but `name` and `seconds`."""
    coordinates = {"strategy", "seed", "world", "rate_per_s", "hindsight_feasible", "wall_s"}
    return {key: value for key, value in result.items() if key not in coordinates}


def test_world_cells_on_dask_are_a_serial_compare(world_file: Path) -> None:
    """With hindsight a cell runs every strategy of its seed; on a 2-worker LocalCluster each
    gives exactly the report of `compare(..., world=...)` run here, hindsight's figures too."""
    (named,) = named_worlds([world_file])
    assert named.name == "rough"
    cells = grid(NAMES, [0, 1], [named], [0.2])
    assert [(cell.strategies, cell.seed) for cell in cells] == [(tuple(NAMES), 0),
                                                                (tuple(NAMES), 1)]
    results, workers = run_dask(cells, Setup(JOBS), workers=2)
    assert workers == 2
    assert [(r["strategy"], r["seed"], r["world"]) for r in results] == [
        (name, seed, "rough") for seed in (0, 1) for name in NAMES
    ]
    assert all("truth" not in r for r in results)
    world = World.load(world_file)
    for seed in (0, 1):
        comparison = compare(generate_trace(JOBS, seed=seed, rate_per_s=0.2), NAMES, seed=seed,
                             noise=NoiseModel(), pool_size=DEFAULT_POOL_SIZE,
                             guarantee=DEFAULT_GUARANTEE, world=world)
        expected = [{k: v for k, v in report.to_dict().items() if k not in ("name", "seconds")}
                    for report in comparison.reports()]
        ours = [r for r in results if r["seed"] == seed]
        assert [_bare(r) for r in ours] == expected  # equal, not approximately
        assert all(r["hindsight_feasible"] == comparison.hindsight_feasible for r in ours)
        assert ours[0]["met_of_hindsight_feasible"] is not None


def test_a_world_cell_pickles_and_is_keyed_by_its_name(world_file: Path) -> None:
    (named,) = named_worlds([world_file])
    (cell,) = grid(["naive"], [3], [named], [0.2])
    again = pickle.loads(pickle.dumps(cell))
    assert isinstance(again.truth, NamedWorld) and again.truth.world == World.load(world_file)
    assert again == cell
    assert hash(again) == hash(cell)


def _world_rows(values: list[float], feasible: list[int] | None = None) -> list[dict[str, Any]]:
    """Aggregates of `naive` in a world over len(values) seeds of 10 jobs, met share each."""
    named = NamedWorld("w", World())
    cells = grid(["naive"], list(range(len(values))), [named], [0.2])
    results = [{"seed": seed, "jobs": 10, "deadline_met": value, "total_cost_usd": 1.0 + seed,
                "mean_cost_usd": 0.1 + seed / 10,
                **({} if feasible is None else {"met_of_hindsight_feasible": value,
                                                "hindsight_feasible": feasible[seed],
                                                "cost_vs_hindsight": 1.5 + seed})}
               for seed, value in enumerate(values)]
    return aggregate(cells, results)


def test_hindsight_figures_pool_over_the_jobs_hindsight_met() -> None:
    (row,) = _world_rows([1.0, 0.5], feasible=[4, 8])
    share = row["met_of_hindsight_feasible"]
    assert (share["successes"], share["trials"]) == (4 + 4, 12)
    assert share["pooled"] == pytest.approx(8 / 12) and share["mean"] == pytest.approx(0.75)
    assert share["ci95"] == [0.0, 1.0]  # unclipped: 0.75 ± 3.18
    assert 0.0 < share["wilson_ci95"][0] < 8 / 12 < share["wilson_ci95"][1] < 1.0
    assert row["cost_vs_hindsight"]["mean"] == pytest.approx(2.0)
    assert row["world"] == "w" and "truth" not in row


def test_the_table_shows_wilson_for_shares_never_zero_width() -> None:
    """Two seeds that both meet every deadline: the t interval has zero width, so the table
    shows the Wilson interval over their 20 jobs, and says which interval is which."""
    rows = _world_rows([1.0, 1.0])
    assert rows[0]["deadline_met"]["ci95"] == [1.0, 1.0]
    text = _sweep_text(SweepResult([], rows, [], 1.0, 2), 2)
    header = text.splitlines()[1]
    assert "Wilson" in header and "Student t" in header
    line = next(line for line in text.splitlines() if line.strip().startswith("naive"))
    assert "± 0.00%" not in text and "100.00% [83.89, 100.00%]" in line


def test_worlds_are_plotted_per_world(tmp_path: Path) -> None:
    cells = grid(["naive", "replan-heuristic"], [0, 1],
                 [NamedWorld("a", World()), NamedWorld("b", World(name="b"))], [0.2])
    results = [{"seed": c.seed, "jobs": 10, "deadline_met": 0.5 + 0.1 * c.seed,
                "total_cost_usd": 1.0, "mean_cost_usd": 0.1 * (1 + c.seed)} for c in cells]
    written = plot_sweep(aggregate(cells, results), tmp_path, NoiseModel())
    assert [p.name for p in written] == ["worlds.png"]
    assert written[0].read_bytes().startswith(b"\x89PNG")


def test_cli_sweep_in_a_world_json(world_file: Path) -> None:
    result = CliRunner().invoke(main, [
        "sweep", "--truth-file", str(world_file), "--strategies", "naive,replan-heuristic",
        "--seeds", "2", "--jobs", "5", "--workers", "1", "--json",
    ])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert "truths" not in payload
    assert [world["name"] for world in payload["worlds"]] == ["rough"]
    assert payload["worlds"][0]["stragglers"]["cv"] == 0.2
    assert {cell["world"] for cell in payload["cells"]} == {"rough"}
    for row in payload["aggregates"]:
        met = row["deadline_met"]
        assert row["world"] == "rough" and met["trials"] == 10
        assert 0.0 <= met["ci95"][0] <= met["ci95"][1] <= 1.0
        assert 0.0 <= met["wilson_ci95"][0] < met["wilson_ci95"][1] <= 1.0


@pytest.mark.parametrize(("files", "expected"), [
    ([], MODEL_STRATEGY_NAMES), (["W"], _SWEEP_WORLD_NAMES),
])
def test_default_strategies_follow_the_engine(
    monkeypatch: pytest.MonkeyPatch, world_file: Path, files: list[str],
    expected: tuple[str, ...],
) -> None:
    """Like compare: every strategy of the engine; in a world all but hindsight (slow)."""
    asked: list[list[str]] = []

    def fake(names: list[str], *_: Any, **__: Any) -> SweepResult:
        asked.append(list(names))
        return SweepResult([], [], [], 0.0, 1)

    monkeypatch.setattr(sweep_module, "sweep", fake)
    arguments = [item for _ in files for item in ("--truth-file", str(world_file))]
    result = CliRunner().invoke(main, ["sweep", *arguments, "--json"])
    assert result.exit_code == 0, result.output
    assert asked == [list(expected)]
    assert HINDSIGHT_NAME not in expected and "siren" in _SWEEP_WORLD_NAMES


@pytest.mark.parametrize(("write", "arguments", "named"), [
    (None, ["--truth-file", "{dir}/absent.yaml"], "absent.yaml' does not exist"),
    ("cpu: [1, 2\n", ["--truth-file", "{file}"], "is not valid YAML"),
    ("- cpu\n", ["--truth-file", "{file}"], "must be a mapping"),
    ("speed: 2\n", ["--truth-file", "{file}"], "speed"),
    ("name: w\n", ["--truth-file", "{file}", "--truth", "rate_scale=0.8"],
     "`--truth` and `--truth-file`"),
    ("name: w\n", ["--truth-file", "{file}", "--truth-file", "{file}"],
     "`--truth-file` names the world 'w' twice"),
    ("name: w\n", ["--truth-file", "{file}", "--strategies", "clairvoyant"],
     "`--strategies` names 'clairvoyant'"),
    ("name: w\n", ["--truth-file", "{file}", "--strategies", "lambdadnn-batch"],
     "`--strategies` names 'lambdadnn-batch'"),
    (None, ["--strategies", "lambdadnn,hindsight"], "add `--truth-file`"),
    (None, ["--strategies", "siren"], "add `--truth-file`"),
])
def test_hostile_world_options_are_one_line_errors(
    tmp_path: Path, write: str | None, arguments: list[str], named: str,
) -> None:
    """Each fails before a cluster starts, in one line saying what and how to fix it."""
    path = tmp_path / "world.yaml"
    if write is not None:
        path.write_text(write)
    filled = [item.format(dir=tmp_path, file=path) for item in arguments]
    result = CliRunner().invoke(main, ["sweep", "--jobs", "5", *filled])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines


def test_grid_checks_each_truth_engine() -> None:
    """The API refuses what the CLI does: a world-only strategy under a model truth."""
    with pytest.raises(InputError, match="runs in the independent world only"):
        grid(["replan-heuristic"], [0], [Truth()], [0.2])
    with pytest.raises(InputError, match="`--strategies` names 'clairvoyant'"):
        grid(["clairvoyant"], [0], [NamedWorld("w", World())], [0.2])
