"""`lambdadnn solve-many`: the table, JSON equal to the library's, exit codes, the Gantt chart,
and bad input refused in one line before anything is solved."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambdadnn import Submission, solve_many
from lambdadnn.cli import EXIT_INFEASIBLE, main
from lambdadnn.plot import PlotError, plot_schedule, usage
from lambdadnn.solver import many
from lambdadnn.solver.capacity import peak
from lambdadnn.solver.trace_file import read_trace

HEADER = "submit_time_s,instance,epochs,deadline_s"
# Shipped epochs and deadlines. Under 8 functions three mobilenets cannot all meet their
# 1,200 s beside the others (proven: the schedule says infeasible); under 40 every job can.
ROWS = [
    "0,mobilenet-cifar10,6,1200",
    "0,mobilenet-cifar10,6,1200",
    "30,1dcnn-imdb,10,300",
    "60,espcn-bsds500,20,600",
]
THIRD = "0,mobilenet-cifar10,6,1200"


def trace(tmp_path: Path, rows: list[str], name: str = "jobs.csv") -> str:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return str(path)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["solve-many", *args])
    return result.exit_code, result.stdout, result.stderr


# A limit the solve never reaches, so that the command and the library, compared below, take
# the same path however busy the machine (the proof's enumeration gets half the time left).
LIMIT_S = 600.0


def library(path: str, concurrency: int) -> dict[str, Any]:
    """The schedule `solve_many` gives for the trace's jobs, as the CLI should print it."""
    jobs = [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s,
                       name=job.instance_name) for job in read_trace(path)]
    return solve_many(jobs, concurrency=concurrency, time_limit_s=LIMIT_S).to_dict()


def rows_of(out: str) -> list[list[str]]:
    """The table's job rows, split into cells (the index first)."""
    return [line.split() for line in out.splitlines() if line.split()[0].isdigit()]


def test_a_roomy_pool_meets_every_deadline_and_exits_0(tmp_path: Path) -> None:
    code, out, err = run(trace(tmp_path, ROWS), "--concurrency", "40", "--time-limit-s",
                         str(LIMIT_S))
    assert code == 0, err
    assert err == ""
    assert out.startswith("schedule: optimal — 4 of 4 jobs meet their deadline")
    assert "peak" in out and "of 40 functions" in out and "lower bound" in out
    rows = rows_of(out)
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert [row[1] for row in rows] == ["mobilenet-cifar10"] * 2 + ["1dcnn-imdb",
                                                                     "espcn-bsds500"]
    assert all(row[-1] == "met" for row in rows)


def test_json_is_the_librarys_schedule_with_jobs_waiting(tmp_path: Path) -> None:
    path = trace(tmp_path, ROWS)
    code, out, err = run(path, "--concurrency", "20", "--json", "--time-limit-s", str(LIMIT_S))
    assert code == 0, err
    payload = json.loads(out)  # nothing but the JSON on stdout
    expected = library(path, 20)
    for schedule in (payload, expected):
        schedule.pop("solve_seconds")
    assert payload == expected
    assert payload["status"] in ("optimal", "feasible")
    assert any(job["start_s"] > job["submit_s"] for job in payload["jobs"])  # the pool is tight


def test_a_job_that_cannot_fit_is_late_and_exits_infeasible(tmp_path: Path) -> None:
    path = trace(tmp_path, [*ROWS, THIRD])
    code, out, err = run(path, "--concurrency", "8", "--time-limit-s", str(LIMIT_S))
    expected = library(path, 8)
    assert code == EXIT_INFEASIBLE
    assert out.startswith("schedule: infeasible")
    missed = [job for job in expected["jobs"] if not job["met"]]
    assert missed
    rows = rows_of(out)
    for job in missed:
        assert " ".join(rows[job["index"]][-4:]) == f"late by {job['late_s']:,.1f} s"
    (line,) = err.splitlines()
    assert line.startswith(f"error: {len(missed)} of 5 jobs miss their deadline: ")
    for job in missed:
        assert f"#{job['index']} mobilenet-cifar10 by {job['late_s']:,.1f} s" in line
    code, out, err = run(path, "--concurrency", "8", "--json", "--time-limit-s", str(LIMIT_S))
    assert code == EXIT_INFEASIBLE
    assert json.loads(out)["missed"] == [job["index"] for job in missed]
    assert err.startswith("error: ")


def test_plot_writes_a_png_and_json_stays_clean(tmp_path: Path) -> None:
    code, out, err = run(trace(tmp_path, [*ROWS, THIRD]), "--concurrency", "8", "--json",
                         "--plot", str(tmp_path / "gantt"), "--time-limit-s", str(LIMIT_S))
    png = tmp_path / "gantt.png"  # no suffix: .png added
    assert code == EXIT_INFEASIBLE, err
    json.loads(out)
    assert png.stat().st_size > 0 and png.read_bytes().startswith(b"\x89PNG")
    code, out, _ = run(trace(tmp_path, ROWS), "--concurrency", "40", "--plot",
                       str(tmp_path / "roomy.svg"), "--time-limit-s", str(LIMIT_S))
    assert code == 0
    assert f"plot written to {tmp_path / 'roomy.svg'}" in out
    assert (tmp_path / "roomy.svg").read_text().lstrip().startswith("<?xml")


def test_usage_steps_reach_the_sweeps_peak(tmp_path: Path) -> None:
    path = trace(tmp_path, [*ROWS, THIRD])
    jobs = [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s)
            for job in read_trace(path)]
    schedule = solve_many(jobs, concurrency=15)
    times, used = usage(schedule)
    top, at = peak([j.start_s for j in schedule.jobs], [j.finish_s for j in schedule.jobs],
                   [j.functions for j in schedule.jobs])
    assert max(used) == top == schedule.peak_functions
    assert used[times.index(at)] == top
    assert times[-1] == max(j.finish_s for j in schedule.jobs) and used[-1] == 0


def test_odd_names_stay_on_one_line_and_out_of_mathtext(tmp_path: Path) -> None:
    odd = "we\tird $\\q$.yaml"  # a tab; `$\q$` is no mathtext matplotlib can draw
    shutil.copy("instances/1dcnn-imdb.yaml", tmp_path / odd)
    png = tmp_path / "odd.png"
    code, out, err = run(trace(tmp_path, [f'0,"{odd}",10,300']), "--concurrency", "20",
                         "--plot", str(png))
    assert code == 0, err
    (row,) = rows_of(out)
    assert row[1:4] == ["we?ird", "$\\q$.yaml", "0.0"]
    assert png.stat().st_size > 0


def test_help_names_the_librarys_defaults() -> None:
    result = CliRunner().invoke(main, ["solve-many", "--help"])
    text = " ".join(result.stdout.split())
    for option, default in (("--slot-s", many.DEFAULT_SLOT_S),
                            ("--time-limit-s", many.DEFAULT_TIME_LIMIT_S),
                            ("--gap", many.DEFAULT_GAP)):
        assert f"{option} " in text and f"[default: {default:g}]" in text


@pytest.mark.parametrize(
    ("rows", "args", "named"),
    [
        (ROWS, ["--concurrency", "0"], "`--concurrency`"),
        (ROWS, ["--concurrency", "20", "--slot-s", "-60"], "`--slot-s`"),
        (ROWS, ["--concurrency", "20", "--time-limit-s", "nan"], "`--time-limit-s`"),
        (ROWS, ["--concurrency", "20", "--gap", "1"], "`gap`"),
        (ROWS, ["--concurrency", "20", "--guarantee", "1.5"], "`guarantee`"),
        (ROWS, ["--concurrency", "20", "--plot", "gantt.jpg"], "`--plot`"),
        (ROWS, ["--concurrency", "20", "--plot", "no-such-folder/gantt.png"], "`--plot`"),
        (["0,mobilenet-cifar10,6,soon"], ["--concurrency", "20"], "column `deadline_s`"),
        (["0,no-such-workload,6,1200"], ["--concurrency", "20"], "not a shipped instance"),
        ([], ["--concurrency", "20"], "holds no jobs"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_solved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[str], args: list[str],
    named: str,
) -> None:
    fronts: list[object] = []
    monkeypatch.setattr(many, "kind_fronts", lambda *a, **k: fronts.append(a))  # not reached
    monkeypatch.chdir(tmp_path)
    code, out, err = run(trace(tmp_path, rows), *args)
    assert (code, out, fronts) == (1, "", [])
    (line,) = err.splitlines()
    assert line.startswith("error: ") and named in line
    assert not list(tmp_path.glob("gantt*"))


def test_a_missing_trace_is_one_line(tmp_path: Path) -> None:
    code, out, err = run(str(tmp_path / "absent.csv"), "--concurrency", "20")
    assert (code, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith("error: ") and "does not exist" in line



@pytest.mark.real  # matplotlib's first import in a process may run fc-list for its font cache
def test_a_full_disk_leaves_no_image_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    def full(self: Figure, path: Path, **_: object) -> None:
        path.write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    schedule = solve_many([Submission("instances/1dcnn-imdb.yaml")], concurrency=20)
    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(PlotError, match=r"^`--plot` cannot write .*: No space left on device$"):
        plot_schedule(schedule, tmp_path / "gantt.png")
    assert not (tmp_path / "gantt.png").exists()
