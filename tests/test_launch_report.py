"""The launch report compares like with like: the prediction for the run actually launched,
from the instance the plan was solved from, or null with the reason; its new figures; the
progress bar's ETA from the first iteration; and one short real local launch."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lambdadnn.cli import _IterationBar, _launch_text, main
from lambdadnn.launcher.local import CpuCap
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec, Prediction
from lambdadnn.launcher.timings import RunTimings, summarise
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import solve
from lambdadnn.solver.prediction import predict_run

ROOT = Path(__file__).resolve().parent.parent
FIT: dict[str, Any] = {"workload": "digits-cnn", "backend": "local", "seconds": 60.0,
                       "cost_usd": 0.0, "parameters": {}}


def instance_mapping_with(fit: dict[str, Any] | None) -> dict[str, Any]:
    """The 1D CNN instance, with `fit` as `lambdadnn profile` would have added it."""
    mapping = yaml.safe_load((ROOT / "instances" / "1dcnn-imdb.yaml").read_text())
    return mapping if fit is None else {**mapping, "fit": fit}


def plan_of(fit: dict[str, Any] | None, **edits: Any) -> dict[str, Any]:
    """`solve --json`'s plan (with its `instance_spec`), edited as a user may edit it."""
    plan = solve(instance_mapping_with(fit)).to_dict()
    plan.update(edits)
    return plan


def predict(spec: LaunchSpec, workload: str = "digits-cnn", backend: str = "local",
            timeout_s: float = 900.0) -> Prediction:
    return Prediction.of(spec, backend=backend, workload=workload, timeout_s=timeout_s,
                         timeout_margin_s=timeout_s / 4)


# -- Prediction.of -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "workload", "backend", "fragments"),
    [
        pytest.param({k: v for k, v in plan_of(FIT).items() if k != "instance_spec"},
                     "digits-cnn", "local", ["`instance_spec`", "lambdadnn solve"],
                     id="no instance"),
        pytest.param(plan_of(None), "digits-cnn", "local",
                     ["'1dcnn-imdb'", "no `fit` section", "lambdadnn profile"], id="no fit"),
        pytest.param(plan_of(FIT), "digits-mlp", "local",
                     ["'digits-cnn' on local", "not for 'digits-mlp' on local",
                      "lambdadnn profile --backend local"], id="other workload"),
        pytest.param(plan_of(FIT), "digits-cnn", "aws",
                     ["'digits-cnn' on local", "on aws", "lambdadnn profile --backend aws"],
                     id="other backend"),
    ],
)
def test_no_figure_for_another_network_only_a_one_line_reason(
    plan: dict[str, Any], workload: str, backend: str, fragments: list[str]
) -> None:
    prediction = predict(LaunchSpec.from_mapping(plan), workload, backend)
    assert prediction.time_s is None and prediction.restarts is None
    note = prediction.note
    assert note is not None and "\n" not in note
    assert all(fragment in note for fragment in fragments), note


def test_the_figure_is_for_the_run_launched_not_the_plans_stale_one() -> None:
    """An edited plan (n, m, batch, iterations) at a short invocation limit: the figure is
    the model's for exactly that run, restarts included, never the plan's `time_s`."""
    plan = plan_of(FIT, functions=2, memory_mb=1024, local_batch=16, iterations=4000)
    spec = LaunchSpec.from_mapping(plan)
    prediction = predict(spec, timeout_s=60.0)
    expected = predict_run(load_instance(instance_mapping_with(FIT)), functions=2,
                           memory_mb=1024, local_batch=16, iterations=4000, timeout_s=60.0,
                           timeout_margin_s=15.0)
    assert prediction.note is None
    assert prediction.time_s == pytest.approx(expected.time_s)
    assert prediction.restarts == expected.restarts >= 1
    assert prediction.time_s != pytest.approx(plan["time_s"])
    longer = predict(LaunchSpec.from_mapping({**plan, "iterations": 8000}), timeout_s=60.0)
    assert longer.time_s is not None and longer.time_s > prediction.time_s


def test_a_run_the_model_cannot_time_still_gets_a_report() -> None:
    """Rate ≤ 0 at the plan's memory: a one-line note instead of an error after the run."""
    mapping = instance_mapping_with(FIT)
    mapping["profile"]["rate"] = {"slope": 0.1, "intercept": -100.0}  # R(m) > 0 above 1,000 MB
    plan = solve(mapping).to_dict()
    plan.update(memory_mb=512)
    prediction = predict(LaunchSpec.from_mapping(plan))
    assert prediction.time_s is None and prediction.note is not None
    assert "`memory_mb` 512" in prediction.note and "\n" not in prediction.note


# -- LaunchReport ------------------------------------------------------------------------------

SPEC = LaunchSpec(functions=2, memory_mb=1769, local_batch=32, iterations=3, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")
TIMED = summarise([{"round": 0, "rank": rank, "first_iteration": 0, "first_at": 12.0 + rank,
                    "ended_at": 30.0, "compute_s": [0.5, 0.25, 0.5],
                    "exchange_s": [0.25, 0.5, 0.5]} for rank in range(2)], [10.0])


def report(backend: str, prediction: Prediction, timings: RunTimings) -> LaunchReport:
    return LaunchReport.of(SPEC, backend=backend, workload="digits-cnn", iterations=3,
                           restarts=0, wall_time_s=25.0, result=None, runs_on="here",
                           prediction=prediction, timings=timings, throttled_share=0.25)


def test_prediction_error_is_measured_minus_predicted_over_predicted() -> None:
    timed = report("local", Prediction(16.0, 0, None), TIMED)
    assert timed.measured_time_s == 20.0  # launch (10) → last update (30), not the wall time
    assert timed.wall_time_s == 25.0
    assert timed.prediction_error == pytest.approx((20.0 - 16.0) / 16.0)
    assert timed.time_to_first_iteration_s == 3.0 and timed.startup_s == (3.0,)
    assert timed.compute_s + timed.exchange_s <= timed.measured_time_s
    untimed = report("local", Prediction(50.0, 0, None), summarise([], [10.0]))
    assert untimed.measured_time_s == 25.0  # nothing timed: the wall time stands in
    assert untimed.prediction_error == pytest.approx(-0.5)
    assert report("local", Prediction(None, None, "why"), TIMED).prediction_error is None


def test_the_json_report_has_the_same_keys_on_both_backends_timed_or_not() -> None:
    keys = set(LaunchReport.__dataclass_fields__)
    for backend in ("local", "aws"):
        for prediction in (Prediction(16.0, 0, None), Prediction(None, None, "no instance")):
            for timings in (TIMED, summarise([], [10.0])):
                out = report(backend, prediction, timings).to_dict()
                assert set(out) == keys
                assert json.loads(json.dumps(out, allow_nan=False)) == out | {
                    "startup_s": list(out["startup_s"]),
                    "restart_gap_s": list(out["restart_gap_s"])}


def test_the_text_report_shows_the_prediction_or_why_there_is_none() -> None:
    text = _launch_text(report("local", Prediction(16.0, 0, None), TIMED))
    assert "measured 20.0 s; predicted 16.0 s" in text and "error +25.0%" in text
    assert "after 3.00 s of start-up" in text and "25% of periods" in text
    assert "(compute 50%, exchange 50%)" in text
    untimed = _launch_text(report("aws", Prediction(None, None, "the plan carries no "
                                                    "instance"), summarise([], [10.0])))
    assert "no prediction: the plan carries no instance" in untimed
    assert "median n/a s" in untimed and "after n/a s" in untimed


# -- the progress bar --------------------------------------------------------------------------


def test_the_bar_starts_at_the_first_trained_iteration() -> None:
    bar = _IterationBar(True, 100)
    bar.update(0)  # start-up: the channel is initialised, nothing trained yet
    assert bar.bar is None
    before = time.time()
    bar.update(1)
    try:
        assert bar.bar is not None and bar.origin == 1
        assert bar.bar.length == 99 and bar.bar.pos == 0  # counts from there
        assert bar.bar.start >= before  # its ETA does not average the start-up in
        bar.update(51)
        assert bar.bar.pos == 50
        bar.update(41)  # a restore to the checkpoint steps back, and on from there
        assert bar.bar.pos == 40
        bar.update(45)
        assert bar.bar.pos == 44
    finally:
        bar.close()
    quiet = _IterationBar(False, 100)
    quiet.update(5)
    assert quiet.bar is None


# -- CPU throttling ----------------------------------------------------------------------------


def _cgroup(tmp_path: Path, name: str, stat: str | None) -> str:
    folder = tmp_path / name
    folder.mkdir()
    if stat is not None:
        (folder / "cpu.stat").write_text(stat)
    return str(folder / "cgroup.procs")


def test_throttled_share_sums_the_workers_cpu_stat(tmp_path: Path) -> None:
    v2 = "usage_usec 900\nnr_periods 100\nnr_throttled 50\nthrottled_usec 7000\n"
    v1 = "nr_periods 300\nnr_throttled 30\nthrottled_time 123456\n"
    procs = [_cgroup(tmp_path, "rank-0", v2), _cgroup(tmp_path, "rank-1", v1)]
    assert CpuCap("capped", procs).throttled_share() == pytest.approx(80 / 400)
    idle = [_cgroup(tmp_path, "idle", "nr_periods 0\nnr_throttled 0\n")]
    assert CpuCap("capped", idle).throttled_share() is None
    missing = [*procs, _cgroup(tmp_path, "gone", None)]
    assert CpuCap("capped", missing).throttled_share() is None
    assert CpuCap("uncapped: no controller", [None, None]).throttled_share() is None


# -- one real short run ------------------------------------------------------------------------


@pytest.mark.real
def test_a_short_local_launch_reports_its_prediction_and_timings(
    tmp_path: Path, redis_url: str
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_of(FIT, functions=1, memory_mb=1769, local_batch=32,
                                       iterations=300)))
    result = CliRunner().invoke(main, ["launch", str(path), "--redis-url", redis_url, "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["iterations"] == 300 and out["prediction_note"] is None
    predicted, error = out["predicted_time_s"], out["prediction_error"]
    assert math.isfinite(predicted) and predicted > 0 and math.isfinite(error)
    assert error == pytest.approx((out["measured_time_s"] - predicted) / predicted)
    assert out["time_to_first_iteration_s"] > 0
    assert 0 < out["iteration_median_s"] <= out["iteration_p90_s"]
    assert out["compute_s"] > 0
    assert out["compute_s"] + out["exchange_s"] <= out["measured_time_s"] <= out["wall_time_s"]
    share = out["throttled_share"]
    assert share is None or 0 <= share <= 1


# -- the worker's clock ------------------------------------------------------------------------


class _Context:
    def get_remaining_time_in_millis(self) -> int:
        return 600_000


@pytest.mark.real
def test_a_worker_records_its_last_update_before_its_checkpoint(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ended_at` is when the last update was applied: the checkpoint after it is restart
    overhead or past the end, not part of the time the model predicts."""
    import redis

    from lambdadnn.launcher import worker
    from lambdadnn.launcher.channel import ParameterChannel

    checkpoints: list[float] = []

    class Watched(ParameterChannel):
        def checkpoint(self, iteration: int) -> None:
            checkpoints.append(time.time())
            super().checkpoint(iteration)

    monkeypatch.setattr(worker, "ParameterChannel", Watched)
    job = f"test-{time.time_ns()}"
    event = {"rank": 0, "workers": 1, "job": job, "redis_url": redis_url, "iterations": 4,
             "local_batch": 16, "checkpoint_every": 100, "timeout_margin_s": 1.0, "seed": 3,
             "workload": "digits-cnn"}
    with redis.Redis.from_url(redis_url) as client:
        channel = ParameterChannel(client, job, workers=1)
        try:
            assert worker.handler(event, _Context())["status"] == "done"
            (record,) = channel.timings()
        finally:
            channel.cleanup()
    assert len(checkpoints) == 1  # the final one, at iteration 4
    assert record["first_at"] <= record["ended_at"] <= checkpoints[0]
    assert len(record["compute_s"]) == len(record["exchange_s"]) == 4
