"""Traces: the CSV format round-trips, bad rows are named by line and column, the generator is
a seeded Poisson process over the shipped workloads with the paper's deadlines."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from lambdadnn import InstanceError, load_instance
from lambdadnn.simulator.trace import WORKLOADS, generate_trace, read_trace, write_trace

HEADER = "submit_time_s,instance,epochs,deadline_s\n"


def _write(path: Path, body: str, header: str = HEADER) -> Path:
    path.write_text(header + body, encoding="utf-8")
    return path


def test_generated_trace_round_trips(tmp_path: Path) -> None:
    jobs = generate_trace(40, seed=7)
    write_trace(jobs, tmp_path / "trace.csv")
    assert read_trace(tmp_path / "trace.csv") == jobs


def test_rows_override_epochs_and_deadline_and_accept_paths(tmp_path: Path) -> None:
    profile = tmp_path / "profiles" / "mine.yaml"
    profile.parent.mkdir()
    profile.write_text(Path("instances/1dcnn-imdb.yaml").read_text("utf-8"), encoding="utf-8")
    trace = _write(
        tmp_path / "trace.csv",
        "0,mobilenet-cifar10,3,750.5\n\n2.5,profiles/mine.yaml,1,1200\n",
    )
    first, second = read_trace(trace)
    assert (first.submit_time_s, first.instance_name, first.epochs, first.deadline_s) == (
        0.0, "mobilenet-cifar10", 3, 750.5,
    )
    assert first.instance.workload.epochs == 3
    assert first.instance.objective.deadline_s == 750.5
    shipped = load_instance("instances/mobilenet-cifar10.yaml")
    assert first.instance.profile == shipped.profile
    assert second.instance_name == "profiles/mine.yaml"
    assert second.instance.name == "1dcnn-imdb"
    assert second.instance.workload.epochs == 1
    write_trace([first, second], tmp_path / "again.csv")
    assert read_trace(tmp_path / "again.csv") == [first, second]


def test_columns_may_come_in_any_order(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.csv", "900,6,mobilenet-cifar10,1.5\n",
        header="deadline_s,epochs,instance,submit_time_s\n",
    )
    (job,) = read_trace(trace)
    assert (job.submit_time_s, job.epochs, job.deadline_s) == (1.5, 6, 900.0)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("-1,mobilenet-cifar10,6,900", "submit_time_s"),
        ("soon,mobilenet-cifar10,6,900", "submit_time_s"),
        ("nan,mobilenet-cifar10,6,900", "submit_time_s"),
        ("1,mobilenet-cifar10,0,900", "epochs"),
        ("1,mobilenet-cifar10,2.5,900", "epochs"),
        ("1,mobilenet-cifar10,6,0", "deadline_s"),
        ("1,mobilenet-cifar10,6,inf", "deadline_s"),
        ("1,,6,900", "instance"),
        ("1,no-such-workload,6,900", "instance"),
        ("1,missing/file.yaml,6,900", "instance"),
    ],
)
def test_bad_rows_name_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    trace = _write(tmp_path / "t.csv", f"0,mobilenet-cifar10,6,900\n{row}\n")
    with pytest.raises(InstanceError) as caught:
        read_trace(trace)
    message = str(caught.value)
    assert "line 3" in message and f"column `{column}`" in message
    assert "\n" not in message


def test_bad_instance_yaml_is_reported_on_its_row(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("workload: [1, 2\n", encoding="utf-8")
    trace = _write(tmp_path / "t.csv", "0,broken.yaml,1,900\n")
    with pytest.raises(InstanceError, match=r"line 2, column `instance`: .*not valid YAML"):
        read_trace(trace)


@pytest.mark.parametrize(
    ("header", "body", "match"),
    [
        ("submit_time_s,instance,epochs\n", "", "line 1"),
        ("when,instance,epochs,deadline_s\n", "", "line 1"),
        (HEADER, "0,mobilenet-cifar10,6\n", "line 2: expected 4 columns"),
        (HEADER, "0,mobilenet-cifar10,6,900,extra\n", "line 2: expected 4 columns"),
    ],
)
def test_bad_shape_is_one_line_error(tmp_path: Path, header: str, body: str, match: str) -> None:
    trace = _write(tmp_path / "t.csv", body, header=header)
    with pytest.raises(InstanceError, match=match) as caught:
        read_trace(trace)
    assert "\n" not in str(caught.value)


def test_missing_file_is_an_instance_error(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="does not exist"):
        read_trace(tmp_path / "nope.csv")


def test_generator_is_seeded() -> None:
    assert generate_trace(30, seed=1) == generate_trace(30, seed=1)
    assert generate_trace(30, seed=1) != generate_trace(30, seed=2)


def test_generator_is_poisson_over_shipped_workloads_with_paper_deadlines() -> None:
    rate = 0.5
    jobs = generate_trace(4000, seed=11, rate_per_s=rate)
    times = [job.submit_time_s for job in jobs]
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    assert times == sorted(times)
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
    # exponential gaps: standard deviation equal to the mean
    assert statistics.pstdev(gaps) == pytest.approx(1 / rate, rel=0.1)
    deadlines = [job.deadline_s for job in jobs]
    assert all(600 <= d <= 1200 and d == int(d) for d in deadlines)
    assert min(deadlines) < 650 and max(deadlines) > 1150
    shipped = {name: load_instance(f"instances/{name}.yaml") for name in WORKLOADS}
    counts = dict.fromkeys(WORKLOADS, 0)
    for job in jobs:
        counts[job.instance_name] += 1
        epochs = shipped[job.instance_name].workload.epochs
        assert job.epochs == job.instance.workload.epochs == epochs
        assert job.instance.objective.deadline_s == job.deadline_s
    assert all(count > 4000 / len(WORKLOADS) * 0.85 for count in counts.values())


@pytest.mark.parametrize(
    "kwargs",
    [{"jobs": -1}, {"rate_per_s": 0.0}, {"deadlines": (1200, 600)}, {"workloads": ()}],
)
def test_generator_rejects_bad_arguments(kwargs: dict[str, object]) -> None:
    arguments: dict[str, object] = {"jobs": 3, "seed": 0, **kwargs}
    with pytest.raises(InstanceError):
        generate_trace(**arguments)  # type: ignore[arg-type]


def test_a_spreadsheet_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("\ufeff" + HEADER + "0,espcn-bsds500,20,600\n", encoding="utf-8")
    (job,) = read_trace(trace)
    assert job.instance.name == "espcn-bsds500"
