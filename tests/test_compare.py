"""Strategies side by side, the guarantee under simulation, and the `simulate`/`compare` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lambdadnn import NoiseModel, load_instance, solve
from lambdadnn.cli import main
from lambdadnn.simulator.compare import compare, summarise
from lambdadnn.simulator.defaults import MODEL_STRATEGY_NAMES
from lambdadnn.simulator.engine import simulate_job
from lambdadnn.simulator.pool import JobOutcome
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.trace_file import write_trace

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED)
def test_guaranteed_plans_meet_the_deadline_in_simulation(path: str) -> None:
    """At p = 0.999, 400 simulated runs of the plan miss at most a handful (expected 0.4);
    the exact model's plan, which sits on the deadline, misses far more often.

    The deadline is made tight (the cheapest plan's own time, rounded up) so that it binds.
    """
    loose = load_instance(path)
    deadline = float(np.ceil(solve(loose).time_s))
    instance = loose.with_deadline(deadline)
    noise = NoiseModel()
    runs = 400
    for guarantee, most_misses in ((0.999, 4), (None, runs)):
        plan = solve(instance, guarantee=guarantee, noise=noise if guarantee else None)
        assert plan.status == "optimal"
        rng = np.random.default_rng(11)
        times = [simulate_job(instance, plan.functions, plan.memory_mb, noise=noise,
                              rng=rng).time_s for _ in range(runs)]
        misses = sum(t > deadline for t in times)
        assert misses <= most_misses
        if guarantee is None:
            assert misses > runs // 4  # planning at the mean is not enough under noise


def outcome(index: int, *, cost: float, met: bool, status: str = "ok") -> JobOutcome:
    return JobOutcome(
        index=index, instance_name="x", deadline_s=100.0, submit_time_s=0.0,
        start_time_s=0.0, end_time_s=90.0 if met else 120.0, functions=4, memory_mb=2048,
        predicted_time_s=85.0, time_s=90.0 if met else 120.0, cost_usd=cost, gb_seconds=10.0,
        restarts=0, failures=0, exploration_cost_usd=0.5, exploration_runs=1, met_deadline=met,
        status=status,  # type: ignore[arg-type]
    )


def test_summary_arithmetic() -> None:
    report = summarise("s", [outcome(0, cost=1.0, met=True), outcome(1, cost=3.0, met=False),
                             outcome(2, cost=0.0, met=False, status="no-plan")])
    assert report.jobs == 3 and report.no_plan == 1
    assert report.deadline_met == pytest.approx(1 / 3)
    assert report.total_cost_usd == pytest.approx(1.0 + 3.0 + 3 * 0.5)
    assert report.exploration_cost_usd == pytest.approx(1.5)
    assert report.mean_memory_gb == pytest.approx(8.0)
    assert report.mean_abs_prediction_error_s == pytest.approx((5 + 35) / 2)


@pytest.mark.slow
def test_every_strategy_on_the_same_jobs() -> None:
    jobs = generate_trace(24, seed=4)
    comparison = compare(jobs, MODEL_STRATEGY_NAMES, seed=4, noise=NoiseModel(),
                         pool_size=50_000)
    results = comparison.outcomes
    assert list(results) == list(MODEL_STRATEGY_NAMES)
    assert all(seconds > 0 for seconds in comparison.seconds.values())
    for outcomes in results.values():
        assert [o.index for o in outcomes] == list(range(24))
        assert [o.deadline_s for o in outcomes] == [j.deadline_s for j in jobs]
    reports = {r.name: r for r in comparison.reports()}
    ours = reports["lambdadnn"]
    assert ours.deadline_met == 1.0
    # With no mismatch the exact search costs no more than Algorithm 1 with its information,
    # and the clairvoyant planner is lambdadnn itself.
    assert ours.total_cost_usd <= reports["ldnn-alg1-q"].total_cost_usd
    assert results["clairvoyant"] == results["lambdadnn"]
    again = compare(jobs, ["lambdadnn"], seed=4, noise=NoiseModel(), pool_size=50_000)
    assert again.outcomes["lambdadnn"] == results["lambdadnn"]


def test_the_truth_is_not_leaked_to_the_planners() -> None:
    """Under a slower truth lambdadnn, planning with the belief, misses far more than its
    guarantee allows; clairvoyant, told the truth, keeps it."""
    jobs = generate_trace(60, seed=1)
    comparison = compare(jobs, ["lambdadnn", "clairvoyant"], seed=1, noise=NoiseModel(),
                         pool_size=50_000, truth=Truth(rate_scale=0.8))
    reports = {r.name: r for r in comparison.reports()}
    assert reports["lambdadnn"].deadline_met < 0.8
    assert reports["clairvoyant"].deadline_met == 1.0
    assert reports["clairvoyant"].total_cost_usd > reports["lambdadnn"].total_cost_usd


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_compare_cli_json_and_plots(tmp_path: Path) -> None:
    code, out, err = run("compare", "--jobs", "12", "--seed", "2", "--strategies",
                         "lambdadnn,ldnn-alg1", "--plots", str(tmp_path), "--json")
    assert code == 0, err
    payload = json.loads(out)
    names = [s["name"] for s in payload["strategies"]]
    assert names == ["lambdadnn", "ldnn-alg1"]
    for strategy in payload["strategies"]:
        assert {"deadline_met", "total_cost_usd", "mean_cost_usd", "mean_memory_gb",
                "gb_seconds", "exploration_cost_usd",
                "mean_abs_prediction_error_s"} <= strategy.keys()
    for name in ("cost_cdf.png", "time_vs_deadline.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert payload["truth"] == {}


def test_compare_cli_states_the_truth_it_ran_under() -> None:
    args = ["compare", "--jobs", "30", "--seed", "1", "--strategies", "lambdadnn,clairvoyant",
            "--json"]
    code, out, err = run(*args, "--truth", "rate_scale=0.8", "--truth", "compute_cv=0.2")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["truth"] == {"rate_scale": 0.8, "compute_cv": 0.2}
    met = {s["name"]: s["deadline_met"] for s in payload["strategies"]}
    assert met["lambdadnn"] < met["clairvoyant"] == 1.0
    code, out, _ = run(*args[:-1])
    assert "truth: as believed" in out
    code, out, _ = run(*args[:-1], "--truth", "rate_scale=0.8")
    assert "truth: rate_scale=0.8" in out


@pytest.mark.parametrize(("item", "says"), [
    ("rate", "KEY=VALUE"), ("speed=2", "KEY=VALUE"), ("rate_scale=fast", "must be a number"),
    ("rate_scale=0", "`truth.rate_scale` must be a number > 0"),
    ("compute_cv=-1", "`truth.compute_cv` must be a number ≥ 0"),
    ("rate_scale=nan", "`truth.rate_scale`"),
])
def test_bad_truths_are_one_line(item: str, says: str) -> None:
    code, _, err = run("compare", "--jobs", "3", "--truth", item)
    assert code == 1 and says in err and err.count("\n") == 1


def test_simulate_cli_replays_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    write_trace(generate_trace(6, seed=9), trace)
    code, out, err = run("simulate", str(trace), "--strategy", "power-tuning")
    assert code == 0, err
    assert "power-tuning" in out and "6 jobs" in out
    code, out, _ = run("simulate", str(trace), "--json")
    payload = json.loads(out)
    assert payload["strategy"]["name"] == "lambdadnn" and len(payload["jobs"]) == 6


def test_bad_strategy_names_are_one_line() -> None:
    code, _, err = run("compare", "--jobs", "3", "--strategies", "lambdadnn,cheapest")
    assert code == 1 and "`--strategies`" in err and err.count("\n") == 1
    code, _, _ = run("simulate", "nope.csv", "--strategy", "cheapest")
    assert code == 2


def test_a_missing_trace_is_one_line() -> None:
    code, _, err = run("simulate", "no/such/trace.csv")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1


def test_compare_generates_the_trace_it_is_asked_for() -> None:
    args = ["compare", "--jobs", "20", "--rate", "2", "--strategies", "lambdadnn", "--json"]
    costs = []
    for extra in ([], ["--arrival", "bursty"], ["--mix", "heavy"]):
        code, out, err = run(*args, *extra)
        assert code == 0, err
        (report,) = json.loads(out)["strategies"]
        assert report["jobs"] == 20
        costs.append(report["total_cost_usd"])
    assert costs[2] > costs[0]  # the same jobs with heavy-tailed epochs cost more
    code, _, err = run("compare", "--trace", "x.csv", "--mix", "heavy")
    assert code == 1 and "`--mix`" in err and err.count("\n") == 1
