"""`lambdadnn sweep`: a Dask run equals the serial one, intervals, truths, errors, clean-up."""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from scipy import stats as scipy_stats

from lambdadnn.cli import main
from lambdadnn.inputs.errors import InputError
from lambdadnn.models.noise import NoiseModel
from lambdadnn.plot import plot_sweep
from lambdadnn.simulator.sweep import (
    Cell,
    Setup,
    aggregate,
    grid,
    interval,
    one_factor_truths,
    run_dask,
    run_serial,
)
from lambdadnn.simulator.truth import Truth
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # Dask clusters and their processes

LAMBDADNN = Path(sys.executable).with_name("lambdadnn")
SLOWED = Truth(rate_scale=0.8)


@pytest.fixture(scope="module")
def runs() -> tuple[list[Cell], list[dict[str, Any]], list[dict[str, Any]], int]:
    """2 strategies × 2 seeds × 2 truths × 40 jobs, serially and on a 2-worker LocalCluster."""
    cells = grid(["lambdadnn", "naive"], [0, 1], [Truth(), SLOWED], [0.2])
    setup = Setup(40)
    serial = run_serial(cells, setup)
    on_dask, workers = run_dask(cells, setup, workers=2)
    return cells, serial, on_dask, workers


def _without_wall(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in result.items() if key != "wall_s"}
            for result in results]


def test_dask_gives_exactly_the_serial_numbers(runs: Any) -> None:
    cells, serial, on_dask, workers = runs
    assert workers == 2
    assert len(on_dask) == len(cells) == 8
    assert _without_wall(on_dask) == _without_wall(serial)  # equal, not approximately
    assert [(r["strategy"], r["seed"], r["truth"]) for r in on_dask] == [
        (c.strategies[0], c.seed, c.truth.changed()) for c in cells
    ]
    assert all(len(c.strategies) == 1 for c in cells)  # without hindsight: a cell per strategy


def test_the_truth_reaches_the_engine(runs: Any) -> None:
    """A slower truth than believed makes lambdadnn miss, seed by seed: ignored, it could not."""
    cells, serial, _, _ = runs
    met = {(c.strategies[0], c.seed, c.truth): r["deadline_met"]
           for c, r in zip(cells, serial, strict=True)}
    for seed in (0, 1):
        assert met["lambdadnn", seed, SLOWED] < met["lambdadnn", seed, Truth()]


def _wilson_by_hand(successes: int, trials: int) -> list[float]:
    """The Wilson score interval from its formula (Wilson 1927), z the normal's 97.5% point."""
    z = 1.959963984540054
    centre = (successes + z * z / 2) / (trials + z * z)
    half = z / (trials + z * z) * math.sqrt(successes * (trials - successes) / trials + z * z / 4)
    return [centre - half, centre + half]


def test_aggregates_are_means_and_t_intervals_over_seeds(runs: Any) -> None:
    """Every figure: the mean and the t interval over seeds (SciPy's, clipped to [0, 1] for the
    share); the share also pooled over both seeds' jobs with its Wilson interval."""
    cells, serial, _, _ = runs
    rows = aggregate(cells, serial)
    assert [(row["strategy"], row["truth"]) for row in rows] == [
        ("lambdadnn", {}), ("naive", {}), ("lambdadnn", {"rate_scale": 0.8}),
        ("naive", {"rate_scale": 0.8}),
    ]
    for row in rows:
        runs_of_row = [r for c, r in zip(cells, serial, strict=True) if
                       (c.strategies[0], c.truth.changed()) == (row["strategy"], row["truth"])]
        assert len(runs_of_row) == 2
        for metric in ("deadline_met", "total_cost_usd", "mean_cost_usd"):
            values = [r[metric] for r in runs_of_row]
            mean = statistics.fmean(values)
            half = scipy_stats.t.ppf(0.975, 1) * scipy_stats.sem(values)
            low, high = mean - half, mean + half
            if metric == "deadline_met":
                low, high = max(0.0, low), min(1.0, high)
            assert row[metric]["mean"] == pytest.approx(mean, rel=1e-12)
            assert row[metric]["ci95"] == pytest.approx([low, high], rel=1e-9, abs=1e-12)
        met = sum(round(r["deadline_met"] * 40) for r in runs_of_row)
        share = row["deadline_met"]
        assert (share["successes"], share["trials"]) == (met, 80)
        assert share["wilson_ci95"] == pytest.approx(_wilson_by_hand(met, 80), rel=1e-9)
        assert "met_of_hindsight_feasible" not in row and "cost_vs_hindsight" not in row


def test_share_intervals_are_clipped_and_never_zero_width_pooled() -> None:
    """Seeds 100% and 90% met: the t interval reaches past 1 unclipped; two seeds that agree
    give a zero-width t interval, but the Wilson interval over their jobs is not."""
    cells = grid(["naive"], [0, 1], [Truth()], [0.2])
    spread = aggregate(cells, [{"seed": 0, "jobs": 10, "deadline_met": 1.0, "total_cost_usd": 1.0,
                                "mean_cost_usd": 0.1},
                               {"seed": 1, "jobs": 10, "deadline_met": 0.9, "total_cost_usd": 2.0,
                                "mean_cost_usd": 0.2}])[0]["deadline_met"]
    assert 0.95 + 12.7 * 0.05 > 1  # t(.975, 1) × s/√2 = 0.635: unclipped it would pass 1
    assert spread["ci95"][1] == 1.0 and spread["ci95"][0] == pytest.approx(0.95 - 0.63531, 1e-4)
    assert 0.0 < spread["wilson_ci95"][0] < 0.95 < spread["wilson_ci95"][1] < 1.0
    agree = aggregate(cells, [{"seed": s, "jobs": 10, "deadline_met": 1.0, "total_cost_usd": 1.0,
                               "mean_cost_usd": 0.1} for s in (0, 1)])[0]["deadline_met"]
    assert agree["ci95"] == [1.0, 1.0]
    assert agree["wilson_ci95"] == pytest.approx(_wilson_by_hand(20, 20))
    assert agree["wilson_ci95"][1] == pytest.approx(1.0) and agree["wilson_ci95"][0] < 0.9


def test_interval_by_hand_and_with_one_seed() -> None:
    result = interval([0.9, 0.95, 1.0])  # mean 0.95, s = 0.05, t(.975, 2) = 4.302652729…
    half = 4.302652729911275 * 0.05 / math.sqrt(3)
    assert result["mean"] == pytest.approx(0.95)
    assert result["ci95"] == pytest.approx([0.95 - half, 0.95 + half])
    alone = interval([0.7])
    assert alone["mean"] == 0.7 and alone["ci95"] is None and "2 seeds" in alone["no_interval"]
    assert interval([0.1, 0.5], share=True)["ci95"][0] == 0.0  # not below 0 for a share
    assert interval([0.1, 0.5])["ci95"][0] < -2  # any other figure is not clipped


def test_one_factor_truths_keep_the_reference_first() -> None:
    truths = one_factor_truths(["rate_scale=0.8,1,0.9", "compute_cv=0.2"])
    assert truths == [Truth(), Truth(rate_scale=0.8), Truth(rate_scale=0.9),
                      Truth(compute_cv=0.2)]


def test_plots_per_key_and_against_the_rate(tmp_path: Path) -> None:
    cells = grid(["lambdadnn", "naive"], [0, 1], [Truth(), Truth(compute_cv=0.3),
                                                   Truth(saturates_at_mb=3008)], [0.2, 0.5])
    results = [{"deadline_met": 0.5 + 0.1 * c.seed, "total_cost_usd": 10.0 + c.seed,
                "mean_cost_usd": 0.1 * (1 + c.seed), "seed": c.seed, "jobs": 10} for c in cells]
    written = plot_sweep(aggregate(cells, results), tmp_path, NoiseModel())
    assert sorted(p.name for p in written) == [
        "met_vs_rate.png", "truth_compute_cv_rate0.2.png", "truth_compute_cv_rate0.5.png",
        "truth_saturates_at_mb_rate0.2.png", "truth_saturates_at_mb_rate0.5.png",
    ]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def test_cli_sweep_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "sweep", "--strategies", "lambdadnn", "--seed-list", "3", "--truth", "compute_cv=0.3",
        "--jobs", "6", "--workers", "1", "--plots", str(tmp_path), "--json",
    ])
    assert result.exit_code == 0, result.output
    import json

    payload = json.loads(result.stdout)
    assert payload["workers"] == 1 and payload["seeds"] == [3]
    assert payload["truths"] == [{}, {"compute_cv": 0.3}]
    assert [cell["truth"] for cell in payload["cells"]] == [{}, {"compute_cv": 0.3}]
    first = payload["aggregates"][0]
    assert first["deadline_met"]["ci95"] is None and first["deadline_met"]["no_interval"]
    assert payload["plots"] == [str(tmp_path / "truth_compute_cv.png")]
    assert payload["wall_s"] > 0


@pytest.mark.parametrize(("arguments", "named"), [
    (["--seeds", "2", "--seed-list", "0,1"], "`--seeds` and `--seed-list`"),
    (["--seed-list", "0,x"], "`--seed-list`"),
    (["--seed-list", "1,1"], "`--seed-list` names 1 twice"),
    (["--rates", "0.2,0.2"], "`--rates` names 0.2 twice"),
    (["--seed-list", "-1"], "`--seed-list`"),
    (["--rates", "0.2,0"], "`--rates`"),
    (["--rates", "0.2,nan"], "`--rates`"),
    (["--truth", "rate_scale=0.8,abc"], "`--truth`"),
    (["--truth", "speed=2"], "`--truth`"),
    (["--truth", "rate_scale"], "`--truth`"),
    (["--truth", "rate_scale=-1"], "`truth.rate_scale`"),
    (["--truth", "rate_scale=0.8", "--truth", "rate_scale=0.9"], "`--truth`"),
    (["--strategies", "lambdadnn,nope"], "`--strategies`"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "`--workers`"),
])
def test_bad_options_are_one_line_errors(arguments: list[str], named: str) -> None:
    """Each bad option fails before any cell runs, in one line naming it (click's own usage
    errors, exit 2, are checked below)."""
    result = CliRunner().invoke(main, ["sweep", "--jobs", "5", *arguments])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines


def test_a_file_as_plot_folder_is_refused_before_the_sweep(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("")
    result = CliRunner().invoke(main, ["sweep", "--plots", str(target / "plots")])
    assert result.exit_code == 1 and "`--plot-dir`" in result.stderr


def test_an_unreachable_scheduler_is_one_line_naming_it() -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    cells = grid(["naive"], [0], [Truth()], [0.2])
    with pytest.raises(InputError) as caught:
        run_dask(cells, Setup(5), scheduler=address, connect_timeout_s=1)
    message = str(caught.value)
    assert "`--scheduler`" in message and address in message and "\n" not in message


def test_without_dask_one_line_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed → ImportError
    with pytest.raises(InputError, match=r"pip install 'lambdadnn\[sweep\]'"):
        run_dask(grid(["naive"], [0], [Truth()], [0.2]), Setup(5), workers=1)


def test_dask_is_imported_only_by_a_sweep() -> None:
    code = ("import sys, lambdadnn.cli, lambdadnn.simulator.sweep; "
            "assert 'distributed' not in sys.modules and 'dask' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=HANG_GUARD_S)


def _alive(processes: list[psutil.Process]) -> list[int]:
    return [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize(("signum", "group"), [
    (signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True),  # True: Ctrl-C
])
def test_a_stopped_sweep_leaves_no_process(signum: int, group: bool) -> None:
    sweep = subprocess.Popen(
        [str(LAMBDADNN), "sweep", "--strategies", "lambdadnn", "--seeds", "4", "--jobs", "3000",
         "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        parent = psutil.Process(sweep.pid)
        assert sweep.stderr is not None
        # The bar's label comes once the cluster runs (a Ctrl-C during its start is ignored).
        ready, _, _ = select.select([sweep.stderr], [], [], HANG_GUARD_S)
        assert ready and sweep.stderr.readline() == "sweep\n"
        time.sleep(0.5)
        descendants = parent.children(recursive=True)
        assert len(descendants) >= 2, "the sweep has no worker processes"
        if group:
            os.killpg(sweep.pid, signum)
        else:
            sweep.send_signal(signum)
        _, stderr = sweep.communicate(timeout=HANG_GUARD_S)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr  # workers ignore the group's SIGINT; the sweep stops them
    assert stderr.strip().splitlines()[-1] == (
        f"error: sweep stopped by {signal.Signals(signum).name}; its Dask cluster was closed"
    )
    left = _alive(descendants)
    guard = time.monotonic() + HANG_GUARD_S  # reaped by then, or left behind
    while left and time.monotonic() < guard:
        time.sleep(0.1)
        left = _alive(descendants)
    assert left == []


def test_an_unknown_arrival_process_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["sweep", "--jobs", "5", "--arrival", "nope"])
    assert result.exit_code == 2 and "'--arrival'" in result.stderr
