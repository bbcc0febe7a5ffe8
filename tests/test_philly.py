"""The Philly job-log converter on a hand-written sample in the published format
(tests/data/philly/cluster_job_log: 13 jobs, 6 convertible, the others unfinished, unrecorded,
failed or inconsistent), end to end through `read_trace` and the CLI, and its one-line errors."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.inputs.errors import InputError, InstanceError, TraceError
from lambdadnn.inputs.files import brief
from lambdadnn.simulator import philly
from lambdadnn.simulator.philly import (
    DEFAULT_SLACK,
    DEFAULT_WORKLOAD_MAP,
    KEPT_STATUSES,
    convert_job_log,
    parse_workload_map,
)
from lambdadnn.solver.trace_file import read_trace, write_trace

SAMPLE = Path(__file__).parent / "data" / "philly" / "cluster_job_log"
HOUR = 3600.0

# Each kept job by hand: G GPU-seconds → the workload whose reference (0.1, 1, 10, 100 GPU-h)
# is nearest on a log scale → epochs round(E·G/reference); deadline ceil(1.5 × first start to
# last end); submission relative to job 2's 2017-10-07 00:30:00, the earliest kept.
EXPECTED = [
    # job 2: Killed, 4 GPUs × 2 h = 8 GPU-h → mobilenet (E 6, ref 10)
    (0.0, "mobilenet-cifar10", round(6 * 8 / 10), math.ceil(1.5 * 2 * HOUR)),
    # job 0: 1 GPU × 10 min → 1dcnn (E 10, ref 0.1); submitted 01:05:00
    (35 * 60.0, "1dcnn-imdb", round(10 * (10 / 60) / 0.1), math.ceil(1.5 * 600)),
    # job 1 (the README's example): 8 GPUs × (74 s + 2 d 5:39:42) → resnet50 (E 2, ref 100);
    # run 01:12:09 → 2 d later 06:53:12; submitted 01:11:39
    (41 * 60.0 + 39, "resnet50-cifar10", round(2 * 8 * (74 + 192_342) / HOUR / 100),
     math.ceil(1.5 * (2 * 24 * HOUR + 5 * HOUR + 41 * 60 + 3))),
    # job 11: same submission as job 1, later in the list; 1 GPU × 30 s → 1dcnn, ≥ 1 epoch
    (41 * 60.0 + 39, "1dcnn-imdb", max(1, round(10 * 30 / HOUR / 0.1)), math.ceil(1.5 * 30)),
    # job 8: 2 servers × 8 GPUs × 5 min = 1.33 GPU-h → espcn (E 20, ref 1); a day and 11.5 h in
    (35.5 * HOUR, "espcn-bsds500", round(20 * 16 * 300 / HOUR / 1), math.ceil(1.5 * 300)),
    # job 12: 1 GPU × (1 h + 2 h) = 3 GPU-h, nearer 1 than 10 → espcn; runs 08:10 → 12:10
    (55.5 * HOUR, "espcn-bsds500", 20 * 3, math.ceil(1.5 * 4 * HOUR)),
]
SKIPPED = {
    "no GPU time": 1,  # job 10: an attempt with no servers
    "no attempts": 1,  # job 4
    "status Failed": 1,  # job 3
    "times out of order": 1,  # job 9: ends before it starts (across the DST change)
    "unrecorded time": 3,  # job 5 still running (null end), job 6 "None" start, job 7 "" submit
}


def _rows(path: Path) -> list[tuple[float, str, int, float]]:
    return [(job.submit_time_s, job.instance_name, job.epochs, job.deadline_s)
            for job in read_trace(path)]


def test_sample_converts_to_a_trace_that_reads_back(tmp_path: Path) -> None:
    conversion = convert_job_log(SAMPLE)
    assert conversion.skipped == SKIPPED
    write_trace(conversion.jobs, tmp_path / "trace.csv")
    assert _rows(tmp_path / "trace.csv") == EXPECTED
    assert read_trace(tmp_path / "trace.csv") == conversion.jobs
    for job in conversion.jobs:
        assert job.instance.workload.epochs == job.epochs
        assert job.instance.objective.deadline_s == job.deadline_s


def test_statuses_slack_and_limit_are_honoured() -> None:
    with_failed = convert_job_log(SAMPLE, statuses=("Pass", "Failed"), slack=3.0)
    rows = [(job.submit_time_s, job.instance_name, job.epochs, job.deadline_s)
            for job in with_failed.jobs]
    # job 3, Failed: 1 GPU × 52 s, submitted 03:00:00 (2.5 h after the earliest kept job, now
    # job 0 at 01:05:00 since the Killed job 2 is left out)
    assert (115 * 60.0, "1dcnn-imdb", max(1, round(10 * 52 / HOUR / 0.1)), math.ceil(3 * 52)) \
        in rows
    assert with_failed.skipped["status Killed"] == 3  # jobs 2, 6 and 12
    assert rows[0][0] == 0.0 and rows[0][3] == math.ceil(3.0 * 600)
    first_two = convert_job_log(SAMPLE, limit=2)
    assert [job.instance_name for job in first_two.jobs] == ["mobilenet-cifar10", "1dcnn-imdb"]
    assert first_two.skipped == {**SKIPPED, "beyond limit": 4}


def test_a_workload_map_replaces_the_default(tmp_path: Path) -> None:
    profile = tmp_path / "mine.yaml"
    profile.write_text(Path("instances/1dcnn-imdb.yaml").read_text("utf-8"), encoding="utf-8")
    conversion = convert_job_log(SAMPLE, workload_map={"mobilenet-cifar10": 0.5,
                                                       str(profile): 50.0})
    by_name = {job.instance_name for job in conversion.jobs}
    assert by_name == {"mobilenet-cifar10", str(profile)}
    resnet_job = conversion.jobs[2]  # 427.6 GPU-h: nearest 50, ten epochs of mine.yaml each
    assert resnet_job.instance_name == str(profile)
    assert resnet_job.epochs == round(10 * 8 * (74 + 192_342) / HOUR / 50)


def test_too_many_jobs_asks_for_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(philly, "MAX_TRACE_JOBS", 5)
    with pytest.raises(TraceError, match=r"6 jobs to convert, more than 5; pass `limit`"):
        convert_job_log(SAMPLE)
    assert len(convert_job_log(SAMPLE, limit=5).jobs) == 5


def _sample() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = json.loads(SAMPLE.read_text("utf-8"))
    return jobs


def _set(path: tuple[str | int, ...], value: object) -> Any:
    def change(jobs: list[Any]) -> list[Any]:
        changed = copy.deepcopy(jobs)
        target: Any = changed
        for step in path[:-1]:
            target = target[step]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return changed
    return change


@pytest.mark.parametrize(
    ("change", "job", "field"),
    [
        (_set((3,), 5), 3, "(job)"),
        (_set((0, "status"), "Running"), 0, "status"),
        (_set((0, "status"), KeyError), 0, "status"),
        (_set((2, "attempts"), None), 2, "attempts"),
        (_set((2, "attempts"), KeyError), 2, "attempts"),
        (_set((1, "submitted_time"), 1507338699), 1, "submitted_time"),
        (_set((1, "submitted_time"), KeyError), 1, "submitted_time"),
        (_set((1, "attempts", 1, "start_time"), "07/10/2017 01:13"), 1, "attempts[1].start_time"),
        (_set((1, "attempts", 1, "end_time"), KeyError), 1, "attempts[1].end_time"),
        (_set((1, "attempts", 0), "attempt"), 1, "attempts[0]"),
        (_set((8, "attempts", 0, "detail", 1, "gpus"), "gpu0"), 8, "attempts[0].detail[1].gpus"),
        (_set((8, "attempts", 0, "detail", 1), ["m101"]), 8, "attempts[0].detail[1]"),
        (_set((8, "attempts", 0, "detail"), {}), 8, "attempts[0].detail"),
        # checked although the job is not kept: malformed is malformed
        (_set((3, "attempts", 0, "end_time"), "2017-10-07 25:00:00"), 3, "attempts[0].end_time"),
    ],
)
def test_malformed_jobs_are_named_by_index_and_field(
    tmp_path: Path, change: Any, job: int, field: str,
) -> None:
    log = tmp_path / "cluster_job_log"
    log.write_text(json.dumps(change(_sample())), encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        convert_job_log(log)
    message = str(caught.value)
    assert f"Philly job log {brief(str(log), 80)}, job {job}, field `{field}`:" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[{]", r"not valid JSON \(line 1, column 3"),
        ('{"status": "Pass"}', "must be a JSON list of jobs, got dict"),
        ("[" * 100_000, "not valid JSON|nested too deeply"),
    ],
)
def test_a_file_that_is_no_job_log_is_one_line(tmp_path: Path, text: str, match: str) -> None:
    log = tmp_path / "log.json"
    log.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError, match=match) as caught:
        convert_job_log(log)
    assert "\n" not in str(caught.value)


def test_a_missing_log_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        convert_job_log(tmp_path / "cluster_job_log")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"slack": 0}, "`slack`"), ({"slack": math.nan}, "`slack`"), ({"slack": True}, "`slack`"),
        ({"statuses": "Pass"}, "`statuses`"), ({"statuses": ()}, "`statuses`"),
        ({"statuses": ("Pass", "Running")}, "`statuses`"),
        ({"limit": 0}, "`limit`"), ({"limit": 2.5}, "`limit`"), ({"limit": True}, "`limit`"),
        ({"workload_map": {}}, "`workload_map`"),
        ({"workload_map": {"1dcnn-imdb": 0}}, "`workload_map`"),
        ({"workload_map": {"1dcnn-imdb": 1, "espcn-bsds500": 1.0}}, "`workload_map`"),
        ({"workload_map": {"no-such-workload": 1}}, "`workload_map`"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError, match=f"^{field} ") as caught:
        convert_job_log(SAMPLE, **kwargs)
    assert "\n" not in str(caught.value)
    # An option is an input error; a workload that is no instance, the instance's own.
    assert isinstance(caught.value, InstanceError) == ("no-such-workload" in str(kwargs))


@pytest.mark.parametrize("item", ["resnet50-cifar10", "=3", "resnet50-cifar10=-1",
                                  "resnet50-cifar10=lots", "resnet50-cifar10=inf"])
def test_bad_workload_map_items_are_named(item: str) -> None:
    with pytest.raises(InputError, match=r"^`--workload-map` must be NAME=GPU_HOURS"):
        parse_workload_map([item])


def test_cli_converts_and_the_trace_loads(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    result = CliRunner().invoke(main, ["philly", str(SAMPLE), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["jobs"] == len(EXPECTED) and summary["skipped"] == SKIPPED
    assert summary["workloads"] == {"mobilenet-cifar10": 1, "1dcnn-imdb": 2,
                                    "resnet50-cifar10": 1, "espcn-bsds500": 2}
    assert _rows(out) == EXPECTED
    mapped = CliRunner().invoke(main, [
        "philly", str(SAMPLE), "--out", str(out), "--workload-map", "mobilenet-cifar10=2",
        "--keep", "Pass, Killed", "--slack", "2", "--limit", "3",
    ])
    assert mapped.exit_code == 0, mapped.output
    assert "3 of 13 jobs" in mapped.output
    assert {row[1] for row in _rows(out)} == {"mobilenet-cifar10"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--out", "{tmp}/no/such/folder/t.csv"], "error: `--out` "),
        (["--out", "{tmp}/t.csv", "--keep", "Pass,Running"], "error: `statuses` (--keep) "),
        (["--out", "{tmp}/t.csv", "--slack", "-1"], "error: `slack` (--slack) "),
        (["--out", "{tmp}/t.csv", "--limit", "0"], "error: `limit` (--limit) "),
        (["--out", "{tmp}/t.csv", "--workload-map", "x"], "error: `--workload-map` "),
    ],
)
def test_cli_errors_are_one_line(tmp_path: Path, arguments: list[str], message: str) -> None:
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    result = CliRunner().invoke(main, ["philly", str(SAMPLE), *arguments])
    assert result.exit_code == 1
    assert result.output.startswith(message) and result.output.count("\n") == 1


def test_cli_help_states_the_library_defaults() -> None:
    result = CliRunner().invoke(main, ["philly", "--help"], terminal_width=400,
                                max_content_width=400)  # unwrapped: click breaks at hyphens
    text = " ".join(result.output.split())
    assert f"(default {DEFAULT_SLACK:g})" in text
    assert f"(default {','.join(KEPT_STATUSES)})" in text
    assert ", ".join(f"{name}={hours:g}" for name, hours in DEFAULT_WORKLOAD_MAP.items()) in text
