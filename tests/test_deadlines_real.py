"""benchmarks/deadlines_real.py without a real launch: the design's balance, the prediction
interval against `evaluate`, the targets' arithmetic (every run counted), the markdown table,
the option errors, and the whole flow with `run_local` replaced by a script."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdadnn import evaluate, load_instance
from lambdadnn.benchmarks import deadlines_real as bench
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.local import Interrupted
from lambdadnn.launcher.spec import LaunchSpec, RunFailed
from lambdadnn.solver.instance import Instance, instance_mapping

# --- the design -------------------------------------------------------------------------


def test_the_full_design_is_balanced_over_launch_belief_workload_and_deadline() -> None:
    cells = bench.design(24, ["digits-cnn", "digits-mlp"])
    assert len(cells) == 24
    crossed = Counter((c.adaptive, c.belief == bench.RIGHT) for c in cells)
    assert crossed == {(False, True): 6, (False, False): 6, (True, True): 6, (True, False): 6}
    assert Counter(c.workload for c in cells) == {"digits-cnn": 12, "digits-mlp": 12}
    wrong = Counter((c.workload, c.belief) for c in cells if c.belief != bench.RIGHT)
    assert wrong == {(w, b): 2 for w in ("digits-cnn", "digits-mlp") for b in bench.WRONG}
    factors = sorted({c.deadline_factor for c in cells})
    assert factors[0] == 1.2 and factors[-1] == 3.0 and len(factors) == 6
    for start in range(0, 24, 4):  # a block: one workload, one deadline, one wrong belief
        block = cells[start:start + 4]
        assert len({(c.workload, c.deadline_factor) for c in block}) == 1
        assert len({c.belief for c in block}) == 2


def test_a_smoke_design_has_both_launches_and_both_beliefs() -> None:
    cells = bench.design(2, ["digits-mlp"])
    assert [(c.adaptive, c.belief) for c in cells] == [(False, bench.RIGHT), (True, "R×1.5")]
    assert {c.deadline_factor for c in cells} == {1.2}
    assert len(bench.design(5, ["digits-mlp"])) == 5


def test_wrong_beliefs_change_only_what_they_name() -> None:
    truth = load_instance("mobilenet-cifar10")
    fast = bench.BELIEFS["R×1.5"](truth)
    assert fast.profile.rate.slope == pytest.approx(truth.profile.rate.slope * 1.5)
    assert fast.profile.startup == truth.profile.startup
    started = dataclasses.replace(truth.profile.startup, base_s=2.0, per_function_s=0.5)
    quick = bench.BELIEFS["startup×0.3"](
        dataclasses.replace(truth, profile=dataclasses.replace(truth.profile, startup=started)))
    assert (quick.profile.startup.base_s, quick.profile.startup.per_function_s) == \
        pytest.approx((0.6, 0.15))
    assert quick.profile.rate == truth.profile.rate
    assert bench.BELIEFS[bench.RIGHT](truth) is truth


# --- the prediction ---------------------------------------------------------------------


def _whole_iterations(functions: int) -> Instance:
    """mobilenet with a dataset of exactly 100 iterations at `functions` × 64 samples."""
    truth = load_instance("mobilenet-cifar10")
    return dataclasses.replace(truth, workload=dataclasses.replace(
        truth.workload, samples=100 * functions * 64, epochs=1))


def _round(functions: int, memory_mb: int, first: int, last: int | None,
           batch: int = 256) -> dict[str, Any]:
    return {"functions": functions, "memory_mb": memory_mb, "local_batch": batch / functions,
            "iterations_from": first, "iterations_to": last, "seconds": 1.0,
            "action": "start", "reason": "why", "checks": []}


def test_one_round_is_the_plan_evaluated_at_95_percent_and_mirrored_below() -> None:
    truth = _whole_iterations(4)
    mean, low, high = bench.predict(truth, [_round(4, 2048, 0, 100)], 100)
    figures = evaluate(truth, functions=4, memory_mb=2048, guarantee=0.95)
    assert mean == pytest.approx(figures.time_s, rel=1e-12)
    assert high == pytest.approx(figures.deadline_time_s, rel=1e-12)
    assert mean - low == pytest.approx(high - mean, rel=1e-12) and high > mean


def test_rounds_add_up_each_paying_its_own_start_up() -> None:
    truth = _whole_iterations(4)
    first, second = _round(4, 2048, 0, 40), _round(2, 3008, 40, 100)
    parts = [bench.predict(truth, [r], 100) for r in (first, second)]
    mean, low, high = bench.predict(truth, [first, second], 100)
    assert mean == pytest.approx(parts[0][0] + parts[1][0])
    assert high - mean == pytest.approx(sum(p[2] - p[0] for p in parts))
    assert low == pytest.approx(mean - (high - mean))
    whole = bench.predict(truth, [_round(4, 2048, 0, 100)], 100)
    assert mean > whole[0] * 0.4 + parts[1][0]  # the switch pays a second start-up


def test_an_unfinished_round_is_predicted_to_the_runs_last_iteration() -> None:
    truth = _whole_iterations(4)
    assert bench.predict(truth, [_round(4, 2048, 0, None)], 100) == \
        bench.predict(truth, [_round(4, 2048, 0, 100)], 100)


# --- the targets, the spread, the table -------------------------------------------------


def row(number: int = 1, *, belief: str = bench.RIGHT, launch: str = "static", met: bool = True,
        inside: bool = True, error: float | None = 0.05, measured: float | None = 30.0,
        plan: tuple[int, int] = (1, 1000), rounds: int = 1, status: str = "done",
        workload: str = "digits-cnn") -> dict[str, Any]:
    steps = [_round(plan[0], plan[1], 0, 100)] + [_round(2, 1500, 100, 200)] * (rounds - 1)
    return {
        "run": number, "workload": workload, "launch": launch, "belief": belief,
        "deadline_factor": 1.2, "deadline_s": 36.0, "guarantee": 0.9, "plan_status": "optimal",
        "functions": plan[0], "memory_mb": plan[1], "iterations": 200,
        "final_functions": steps[-1]["functions"], "final_memory_mb": steps[-1]["memory_mb"],
        "status": status, "error": None, "measured_s": measured, "met": met,
        "predicted_s": 31.0, "interval_s": [29.0, 33.0], "inside": inside, "point_error": error,
        "cost_usd": 1e-4, "load_before": 0.5, "load_after": 1.0,
        "decisions": bench.decisions(steps), "rounds": steps,
    }


def by_name(rows: list[dict[str, Any]]) -> dict[str, bench.Target]:
    return {t.name.split()[0]: t for t in bench.targets(rows)}


def test_shares_count_every_run_at_their_bounds() -> None:
    rows = [row(met=i != 0) for i in range(10)]  # 9 of 10 right-belief runs met: exactly 90%
    rows += [row(belief="R×1.5", launch="adaptive", met=i < 8) for i in range(9)]  # 8/9
    rows += [row(belief="R÷1.5", launch="static", met=False)]  # no target for static wrong
    found = by_name(rows)
    assert (found["right-belief"].count, found["right-belief"].of) == (9, 10)
    assert found["right-belief"].met
    assert found["wrong-belief"].value == pytest.approx(8 / 9) and not found["wrong-belief"].met


def test_the_interval_share_and_the_median_error_count_failed_runs_as_misses() -> None:
    rows = [row(error=0.05)] * 5 + [row(error=-0.08)] * 2
    rows += [row(error=None, measured=None, status="error", met=False, inside=False)] * 3
    found = by_name(rows)
    assert found["runs"].count == 7 and found["runs"].of == 10 and not found["runs"].met
    # |errors|: five 5%, two 8%, three infinite: the median is the mean of the 5th and 6th
    assert found["median"].value == pytest.approx((0.05 + 0.08) / 2)
    assert found["median"].met
    rows += [row(error=None, measured=None, status="failed", met=False, inside=False)] * 5
    assert by_name(rows)["median"].value == math.inf


def test_a_target_without_runs_is_not_met() -> None:
    found = by_name([row(belief=bench.RIGHT)])
    assert found["wrong-belief"].value is None and not found["wrong-belief"].met
    assert not bench.summarise([row()])["all_met"]
    assert bench.summarise([row(), row(belief="R×1.5", launch="adaptive")])["all_met"]


def test_the_spread_is_over_runs_that_kept_one_plan() -> None:
    rows = [row(1, measured=30.0), row(2, launch="adaptive", measured=33.0),
            row(3, plan=(2, 800), measured=20.0), row(4, plan=(2, 800), measured=25.0),
            row(5, plan=(2, 800), measured=99.0, rounds=2),  # switched: not a repeat
            row(6, plan=(2, 800), measured=None, status="failed", error=None),
            row(7, workload="digits-mlp", measured=60.0)]  # another workload's plan
    found = bench.spread(rows)
    assert (found["groups"], found["runs"]) == (2, 4)
    assert found["median"] == pytest.approx((3 / 31.5 + 5 / 22.5) / 2)
    assert found["max"] == pytest.approx(5 / 22.5)
    assert found["interval_half_width"] == pytest.approx(2 / 31)
    assert bench.spread([row()])["median"] is None


def test_the_table_has_a_line_per_run_and_each_adaptive_decision() -> None:
    rows = [row(1), row(2, belief="R×1.5", launch="adaptive", rounds=2, met=False),
            row(3, status="error", measured=None, error=None, met=False, inside=False)]
    rows[2]["cost_usd"] = None
    text = bench.table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| run |") and len(lines[1].split("|")) == len(lines[0].split("|"))
    runs = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert len(runs) == 3 and all(len(r.split("|")) == len(lines[0].split("|")) for r in runs)
    assert "1 × 1000 MB → 2 × 1500 MB" in runs[1] and "**no**" in runs[1]
    assert "| error |" in runs[2] and "| — |" in runs[2]
    assert "31.0 s (29.0–33.0)" in runs[0] and "+5.0%" in runs[0]
    assert "- run 2 (digits-cnn, R×1.5):" in lines
    assert "  - 100: 2 × 1500 MB, start — why" in lines
    assert "run 1 (" not in text  # a static run has no decision list


def test_the_summary_says_what_missed() -> None:
    text = bench.summary_text(bench.summarise([row(met=False)]))
    assert "right-belief runs meeting their deadline: 0 of 1 (0.0%), target ≥ 90%: MISSED" in text
    assert "wrong-belief adaptive runs meeting theirs: no runs" in text
    assert "median |point error|: 5.0% over 1 runs, target ≤ 10%: met" in text
    assert "no plan ran twice" in text and text.endswith("targets MISSED")


# --- the options ------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "named"), [
    (["--runs", "0"], "`--runs` '0'"),
    (["--runs", "two"], "`--runs` 'two'"),
    (["--budget-s", "nan"], "`--budget-s` 'nan'"),
    (["--budget-s", "-5"], "`--budget-s` '-5'"),
    (["--workloads", "digits-cnn,resnet"], "`--workloads` 'digits-cnn,resnet'"),
    (["--workloads", ","], "`--workloads` ','"),
    (["--instances", "tests"], "`--instances` 'tests' has no digits-cnn-local.yaml"),
    (["--out", "README.md"], "`--out` 'README.md' is not a folder"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_bad_option_is_one_error_line_and_nothing_runs(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], nothing_starts: None,
) -> None:
    assert bench.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert named in captured.err


# --- the flow, run_local scripted -------------------------------------------------------


class Scripted:
    """`run_local` as a script: each launch takes `factor` × the plan's predicted time, or
    raises what `raises` makes of its spec, by launch number (from 1)."""

    def __init__(self, factor: float,
                 raises: dict[int, Callable[[LaunchSpec], BaseException]] | None = None) -> None:
        self.factor, self.raises = factor, raises or {}
        self.calls: list[tuple[LaunchSpec, dict[str, Any]]] = []

    def __call__(self, spec: LaunchSpec, **kwargs: Any) -> Report:
        self.calls.append((spec, kwargs))
        if len(self.calls) in self.raises:
            raise self.raises[len(self.calls)](spec)
        return Report(spec, self.factor)


class Report:
    """The keys of a `LaunchReport` that the benchmark reads."""

    def __init__(self, spec: LaunchSpec, factor: float, status: str = "done") -> None:
        self.spec, self.factor, self.status, self.error = spec, factor, status, "diverged"

    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        return {"status": self.status, "measured_time_s": spec.time_s * self.factor, "rounds": [{
            **_round(spec.functions, spec.memory_mb, 0, spec.iterations, spec.global_batch),
            "invocations": spec.functions}]}


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    """An earlier run's profile of digits-cnn (a shipped instance stands in for it)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    mapping = instance_mapping(load_instance("mobilenet-cifar10"))
    (folder / "digits-cnn-local.yaml").write_text(yaml.safe_dump(mapping))
    return folder


def _main(profiles: Path, out: Path, script: Scripted, monkeypatch: pytest.MonkeyPatch,
          *extra: str) -> int:
    monkeypatch.setattr(bench, "run_local", script)
    return bench.main(["--workloads", "digits-cnn", "--runs", "4", "--instances",
                       str(profiles), "--out", str(out), *extra])


def test_every_run_is_launched_as_planned_and_written(
    profiles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = Scripted(10.0)  # ten times the plan's time: every run misses
    assert _main(profiles, tmp_path / "out", script, monkeypatch, "--json") == 1
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "out" / bench.RESULTS).read_text())
    assert saved == printed and len(saved["runs"]) == 4
    assert [kwargs["controller"] is not None for _spec, kwargs in script.calls] == \
        [False, True, True, False]
    assert all(spec.guarantee == 0.9 for spec, _kwargs in script.calls)
    assert all(not r["met"] and not r["inside"] for r in saved["runs"])
    assert [r["belief"] for r in saved["runs"]] == ["right", "R×1.5", "right", "R×1.5"]
    assert not saved["summary"]["all_met"]
    assert not (tmp_path / "out" / "digits-cnn-local.yaml").exists()  # it did not profile


def test_failed_and_unlaunchable_runs_are_rows_and_an_interrupt_keeps_the_rows_so_far(
    profiles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    script = Scripted(1.0, {1: lambda spec: RunFailed(Report(spec, 0.5, "failed")),  # type: ignore[arg-type]
                            2: lambda _spec: LaunchError("no redis-server"),
                            4: lambda _spec: Interrupted(signal.SIGINT)})
    assert _main(profiles, out, script, monkeypatch) == 128 + signal.SIGINT
    assert "stopped by SIGINT" in capsys.readouterr().err
    saved = json.loads((out / bench.RESULTS).read_text())
    first, second, third = saved["runs"]
    assert first["status"] == "failed" and first["error"] == "diverged"
    assert not first["met"] and not first["inside"] and first["point_error"] is None
    assert second["status"] == "error" and second["measured_s"] is None
    assert second["cost_usd"] is None and second["rounds"][0]["reason"] == "no redis-server"
    assert third["status"] == "done" and saved["summary"] is None

