"""The shared pool: jobs wait (FIFO) when it is short, no-plan jobs miss, runs are seeded.

Queueing is checked with a scripted strategy and engine (`simulate_job` replaced by one that
returns fixed durations), so start times are exact; determinism with the real engine.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import InputError, Instance, load_instance
from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator import pool
from lambdadnn.simulator.baselines import Measure, Strategy, StrategyPlan
from lambdadnn.simulator.engine import JobRun
from lambdadnn.simulator.pool import Capacity, JobOutcome, run_trace
from lambdadnn.simulator.strategies import strategy
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.trace_file import Job

ROOT = Path(__file__).resolve().parent.parent
BASE = load_instance(ROOT / "instances" / "mobilenet-cifar10.yaml")
NOISE = NoiseModel()


def _job(name: str, submit_time_s: float, deadline_s: float = 1000.0) -> Job:
    """A job whose instance carries `name`, so the scripted strategy and engine know it."""
    instance = dataclasses.replace(BASE, name=name).with_deadline(deadline_s)
    return Job(submit_time_s, name, BASE.workload.epochs, deadline_s, instance)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, float]]:
    """name → (functions, duration s): the strategy asks for those, the engine takes that long."""
    script: dict[str, tuple[int, float]] = {}

    def simulate_job(
        instance: Instance, functions: int, memory_mb: int, *, noise: NoiseModel,
        rng: np.random.Generator,
    ) -> JobRun:
        wanted, duration = script[instance.name]
        assert functions == wanted
        return JobRun(duration, 0.01 * duration, duration * functions, 1.0, functions, 0, 0,
                      0.0, 0)

    monkeypatch.setattr(pool, "simulate_job", simulate_job)
    return script


def _strategy(
    script: dict[str, tuple[int, float]],
    trials: dict[str, tuple[tuple[int, float], ...]] | None = None,
) -> Strategy:
    def plan(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        functions = script[instance.name][0]
        stages = (trials or {}).get(instance.name, ())
        return StrategyPlan(functions, 1024, 100.0, 0.0, len(stages), found=functions > 0,
                            trials=stages)

    return plan


def test_second_job_waits_until_the_first_frees_the_pool(
    scripted: dict[str, tuple[int, float]],
) -> None:
    scripted.update({"a": (15, 100.0), "b": (15, 50.0)})
    first, second = run_trace(
        [_job("a", 0.0), _job("b", 1.0, deadline_s=120.0)], _strategy(scripted),
        pool_size=20, noise=NOISE, seed=0,
    )
    assert (first.start_time_s, first.end_time_s) == (0.0, 100.0)
    assert (second.start_time_s, second.end_time_s) == (100.0, 150.0)
    assert first.met_deadline and not second.met_deadline  # 149 s after submission > 120 s
    assert first.status == second.status == "ok"


def test_jobs_that_fit_run_at_once(scripted: dict[str, tuple[int, float]]) -> None:
    scripted.update({"a": (10, 100.0), "b": (10, 100.0)})
    outcomes = run_trace(
        [_job("a", 0.0), _job("b", 5.0)], _strategy(scripted), pool_size=20, noise=NOISE, seed=0
    )
    assert [o.start_time_s for o in outcomes] == [0.0, 5.0]


def test_fifo_no_job_overtakes_an_earlier_one(scripted: dict[str, tuple[int, float]]) -> None:
    """c would fit beside a, but b (submitted earlier) is waiting: c starts no sooner."""
    scripted.update({"a": (15, 100.0), "b": (10, 30.0), "c": (5, 10.0)})
    a, b, c = run_trace(
        [_job("a", 0.0), _job("b", 1.0), _job("c", 2.0)], _strategy(scripted),
        pool_size=20, noise=NOISE, seed=0,
    )
    assert a.start_time_s == 0.0
    assert b.start_time_s == 100.0
    assert c.start_time_s == 100.0  # 10 + 5 ≤ 20 once a is done


def test_outcomes_in_job_order_served_by_submission(
    scripted: dict[str, tuple[int, float]],
) -> None:
    scripted.update({"late": (20, 10.0), "early": (20, 10.0)})
    late, early = run_trace(
        [_job("late", 5.0), _job("early", 0.0)], _strategy(scripted),
        pool_size=20, noise=NOISE, seed=0,
    )
    assert (late.index, early.index) == (0, 1)
    assert early.start_time_s == 0.0 and late.start_time_s == 10.0


def test_no_plan_and_oversized_plans_never_run(scripted: dict[str, tuple[int, float]]) -> None:
    scripted.update({"none": (0, 1.0), "huge": (21, 1.0), "ok": (20, 1.0)})
    none, huge, ok = run_trace(
        [_job("none", 0.0), _job("huge", 0.0), _job("ok", 0.0)], _strategy(scripted),
        pool_size=20, noise=NOISE, seed=0,
    )
    for outcome in (none, huge):
        assert outcome.status == "no-plan"
        assert not outcome.met_deadline
        assert outcome.cost_usd == 0.0 and outcome.gb_seconds == 0.0
        assert outcome.end_time_s == outcome.time_s == float("inf")
    assert huge.functions == 21
    assert ok.status == "ok" and ok.start_time_s == 0.0  # nobody held the pool


def test_progress_is_reported_after_each_job(scripted: dict[str, tuple[int, float]]) -> None:
    scripted.update({"a": (1, 1.0), "b": (1, 1.0), "c": (0, 1.0)})
    calls: list[tuple[int, int]] = []
    run_trace(
        [_job("a", 0.0), _job("b", 1.0), _job("c", 2.0)], _strategy(scripted),
        pool_size=20, noise=NOISE, seed=0, progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_run_randomness_does_not_depend_on_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two strategies consuming different draws while planning still see the same runs."""
    seen: list[float] = []

    def simulate_job(
        instance: Instance, functions: int, memory_mb: int, *, noise: NoiseModel,
        rng: np.random.Generator,
    ) -> JobRun:
        seen.append(float(rng.random()))
        return JobRun(1.0, 0.0, 0.0, 1.0, functions, 0, 0, 0.0, 0)

    def greedy(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        rng.random(1000)
        return StrategyPlan(1, 1024, 1.0, 0.0, 0, found=True)

    def frugal(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        return StrategyPlan(2, 2048, 1.0, 0.0, 0, found=True)

    monkeypatch.setattr(pool, "simulate_job", simulate_job)
    jobs = [_job("a", 0.0), _job("b", 1.0)]
    run_trace(jobs, greedy, noise=NOISE, seed=3)
    run_trace(jobs, frugal, noise=NOISE, seed=3)
    assert seen[:2] == seen[2:] and seen[0] != seen[1]


def test_real_engine_is_deterministic_per_seed() -> None:
    jobs = generate_trace(6, seed=5)
    naive = strategy("naive")
    first = run_trace(jobs, naive, noise=NOISE, seed=1)
    assert run_trace(jobs, naive, noise=NOISE, seed=1) == first
    other = run_trace(jobs, naive, noise=NOISE, seed=2)
    assert [o.time_s for o in other] != [o.time_s for o in first]
    for outcome, job in zip(first, jobs, strict=True):
        assert isinstance(outcome, JobOutcome) and outcome.status == "ok"
        assert outcome.end_time_s == pytest.approx(outcome.start_time_s + outcome.time_s)
        assert outcome.start_time_s >= job.submit_time_s
        assert outcome.met_deadline == (outcome.end_time_s - job.submit_time_s <= job.deadline_s)


@pytest.mark.parametrize("size", [0, -5, 2.5, True])
def test_pool_size_must_be_a_positive_integer(size: object) -> None:
    with pytest.raises(InputError, match="pool_size"):
        run_trace([], strategy("naive"), pool_size=size, noise=NOISE, seed=0)  # type: ignore[arg-type]


def test_trial_stages_hold_functions_before_the_job(
    scripted: dict[str, tuple[int, float]],
) -> None:
    """a tries twice (18 functions for 10 s, then 5 for 20 s) before its run; b, submitted
    later, fits beside the second stage but not the first, and its deadline counts the wait."""
    scripted.update({"a": (10, 100.0), "b": (10, 50.0)})
    a, b = run_trace(
        [_job("a", 0.0), _job("b", 1.0, deadline_s=70.0)],
        _strategy(scripted, {"a": ((18, 10.0), (5, 20.0))}), pool_size=20, noise=NOISE, seed=0,
    )
    assert (a.start_time_s, a.end_time_s) == (30.0, 130.0)  # after 10 s + 20 s of trials
    assert b.start_time_s == 10.0  # 5 + 10 ≤ 20 once the first stage is over; before a's run
    assert b.met_deadline  # ends at 60 s, 59 s after submission


def test_a_trial_larger_than_the_pool_means_no_plan(
    scripted: dict[str, tuple[int, float]],
) -> None:
    scripted.update({"a": (10, 100.0)})
    (a,) = run_trace([_job("a", 0.0)], _strategy(scripted, {"a": ((21, 1.0),)}),
                     pool_size=20, noise=NOISE, seed=0)
    assert a.status == "no-plan" and not a.met_deadline


def test_the_engine_runs_the_truth_and_the_planner_sees_the_belief(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, list[float]] = {"planned": [], "ran": [], "cv": []}

    def simulate_job(
        instance: Instance, functions: int, memory_mb: int, *, noise: NoiseModel,
        rng: np.random.Generator,
    ) -> JobRun:
        seen["ran"].append(instance.profile.rate.slope)
        seen["cv"].append(noise.compute_cv)
        return JobRun(1.0, 0.0, 0.0, 1.0, functions, 0, 0, 0.0, 0)

    def planner(
        instance: Instance, rng: np.random.Generator, noise: NoiseModel, measure: Measure
    ) -> StrategyPlan:
        seen["planned"].append(instance.profile.rate.slope)
        assert noise == NOISE
        return StrategyPlan(1, 1024, 1.0, 0.0, 0, found=True)

    monkeypatch.setattr(pool, "simulate_job", simulate_job)
    run_trace([_job("a", 0.0)], planner, noise=NOISE, seed=0,
              truth=Truth(rate_scale=0.5, compute_cv=0.3))
    assert seen["planned"] == [BASE.profile.rate.slope]
    assert seen["ran"] == [pytest.approx(BASE.profile.rate.slope * 0.5)]
    assert seen["cv"] == [0.3]


def _usage_at(placed: list[tuple[float, float, int]], moment: float) -> int:
    return sum(f for start, end, f in placed if start <= moment < end)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.integers(1, 10), st.floats(0.5, 50)),
                min_size=1, max_size=25))
def test_capacity_is_never_exceeded_and_starts_are_earliest(
    requests: list[tuple[float, int, float]],
) -> None:
    """Property: every placement starts at or after its request, never exceeds the pool at
    any moment, and could not have started at any earlier moment where usage changes."""
    capacity, placed = Capacity(10), []
    for start, functions, seconds in requests:
        at = capacity.take(start, functions, seconds)
        assert at >= start
        moments = np.array(sorted({start} | {p for s, e, _ in placed for p in (s, e)}))
        for earlier in moments[(moments >= start) & (moments < at)]:
            window = [earlier] + [p for s, e, _ in placed for p in (s, e)
                                  if earlier <= p < earlier + seconds]
            assert max(_usage_at(placed, w) for w in window) + functions > 10
        placed.append((at, at + seconds, functions))
        for s, _, _ in placed:
            assert _usage_at(placed, s) <= 10
