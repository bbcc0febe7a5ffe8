"""`solve_many()` against the judge of its schedule model (tests/schedule_brute.py), its
properties on shipped instances, its input validation, and its statelessness."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lambdadnn import (
    InstanceError,
    NoiseModel,
    NoValidPlanError,
    Schedule,
    SolverError,
    Submission,
    evaluate,
    solve,
    solve_many,
)
from tests import oracle
from tests.hang_guard import HANG_GUARD_S
from tests.schedule_brute import jobs_from, optimum

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")
PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def _tiny(name: str) -> str:
    """A shipped instance on a coarse grid (128, 1,088, 2,048, 3,008 MB; ≤ 3 functions: ≤ 12
    plans), as YAML text so that each test gets a fresh mapping."""
    raw = yaml.safe_load((ROOT / "instances" / f"{name}.yaml").read_text())
    platform = yaml.safe_load(
        (ROOT / "instances" / "platforms" / f"{raw['platform']}.yaml").read_text()
    )
    platform["memory_mb"] = {"min": 128, "step": 960, "max": 3008}
    return yaml.safe_dump({**raw, "platform": platform, "limits": {"max_functions": 3}})


def tiny(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(_tiny(name))
    return loaded


def _fastest_s(name: str) -> float:
    """The tiny instance's fastest plan, from the oracle."""
    time = oracle.fastest(tiny(name)).time_s
    assert time is not None
    return time


def functions_held(starts_s: list[float], finishes_s: list[float], functions: list[int]) -> int:
    """The most functions held at once by runs over [start, finish): a numpy sweep over
    every start (where the most is reached), each run counted while start ≤ t < finish."""
    start = np.asarray(starts_s, dtype=np.float64)
    finish = np.asarray(finishes_s, dtype=np.float64)
    held = np.asarray(functions, dtype=np.int64)
    if not start.size:
        return 0
    running = (start[np.newaxis, :] <= start[:, np.newaxis]) & (
        start[:, np.newaxis] < finish[np.newaxis, :])
    return int((running * held[np.newaxis, :]).sum(axis=1).max())


# --- 1. brute force --------------------------------------------------------------------------

#: (jobs as (instance, submit, deadline), concurrency, slot): capacity binds in each.
CASES = [
    pytest.param([("mobilenet-cifar10", 0, 4000)] * 2, 3, 500, id="mobilenet-twice-in-turn"),
    pytest.param([("mobilenet-cifar10", 0, 4000), ("resnet50-cifar10", 300, 5000),
                  ("1dcnn-imdb", 600, 1500)], 4, 400, id="three-kinds"),
    pytest.param([("1dcnn-imdb", 0, 1300)] * 3 + [("espcn-bsds500", 200, 9000)], 5, 300,
                 id="four-jobs"),
    # Two 2-function plans side by side meet both deadlines; the (time, cost) front holds
    # only 3-function plans (each 2-function plan is beaten by a 3-function one in both),
    # which cannot run side by side under 4 and are too slow one after the other.
    pytest.param([("mobilenet-cifar10", 0, 3300)] * 2, 4, 500, id="fewer-functions-fit"),
    # The model counts both at check point 0 (6 functions > 4) and leaves one out; placed
    # late, it fits before the other starts and meets its deadline after all.
    pytest.param([("1dcnn-imdb", 900, 410), ("1dcnn-imdb", 100, 413)], 4, 1000,
                 id="placed-late-still-meets"),
]


def _solve_tiny(spec: list[tuple[str, float, float]], concurrency: int, slot: float) -> Schedule:
    return solve_many([Submission(tiny(n), s, d) for n, s, d in spec],
                      concurrency=concurrency, slot_s=slot, gap=0.0)


def _brute_force_case(spec: list[tuple[str, float, float]], concurrency: int,
                      slot: float) -> None:
    """solve_many (gap 0) against the judge's optimum over every plan, starts on the grid and
    capacity at every moment (tests/schedule_brute.py). A job the grid cannot fit is placed
    late at the first moment the pool has room, which may lie off the grid and still meet its
    deadline: solve_many may miss fewer deadlines than the judge, never more."""
    judged = [(tiny(name), float(submit), float(deadline)) for name, submit, deadline in spec]
    best = optimum(jobs_from(judged, concurrency), concurrency, slot)
    schedule = _solve_tiny(spec, concurrency, slot)
    seen = (schedule.to_dict(), best)
    assert len(schedule.missed) <= best.missed, seen
    if schedule.status == "infeasible":
        assert best.missed > 0, seen
    if best.missed == 0:
        assert schedule.status == "optimal", seen
        assert schedule.total_cost_usd == pytest.approx(best.cost_usd, rel=1e-9), seen
        assert schedule.lower_bound_usd <= best.cost_usd * (1 + 1e-9), seen


@pytest.mark.parametrize(("spec", "concurrency", "slot"), CASES)
def test_the_judges_optimum(spec: list[tuple[str, float, float]], concurrency: int,
                            slot: float) -> None:
    """On hand-made cases where capacity binds, the judge's optimum exactly (gap 0),
    including where only a plan beaten by the front in time and cost fits beside another
    job (`fewer-functions-fit`)."""
    _brute_force_case(spec, concurrency, slot)


@st.composite
def tiny_job_sets(draw: st.DrawFn) -> tuple[list[tuple[str, float, float]], int, float]:
    """2–3 tiny jobs, submitted within 25 minutes, with deadlines from their fastest time to
    4× it, on 3–5 functions (each job's fastest plan takes 3) and slots of 200–1,000 s."""
    spec = []
    for _ in range(draw(st.integers(2, 3))):
        name = draw(st.sampled_from(SHIPPED))
        submit = 100.0 * draw(st.integers(0, 15))
        deadline = float(math.ceil(_fastest_s(name) * draw(st.floats(1.0, 4.0))))
        spec.append((name, submit, deadline))
    return spec, draw(st.integers(3, 5)), draw(st.sampled_from([200.0, 300.0, 500.0, 1000.0]))


@PROPERTY
@given(tiny_job_sets())
def test_the_judges_optimum_random(
    case: tuple[list[tuple[str, float, float]], int, float],
) -> None:
    """Property: on random tiny job sets solve_many's optimum is the judge's."""
    spec, concurrency, slot = case
    _brute_force_case(spec, concurrency, slot)


# --- 2. properties on shipped instances ------------------------------------------------------

@st.composite
def job_sets(draw: st.DrawFn, *, largest: int = 6) -> list[Submission]:
    """2–`largest` shipped jobs submitted within 20 minutes, deadlines ½–3× their own."""
    jobs = []
    for _ in range(draw(st.integers(2, largest))):
        name = draw(st.sampled_from(SHIPPED))
        own = float(yaml.safe_load((ROOT / "instances" / f"{name}.yaml").read_text())
                    ["objective"]["deadline_s"])
        jobs.append(Submission(f"instances/{name}.yaml", 30.0 * draw(st.integers(0, 40)),
                               round(own * draw(st.floats(0.5, 3.0)), 1)))
    return jobs


def _solve_alone(job: Submission, guarantee: float | None = None) -> Any:
    return solve(job.instance, deadline_s=job.deadline_s, guarantee=guarantee)


@PROPERTY
@given(job_sets(), st.sampled_from([10, 20, 40, 80, 1000]),
       st.sampled_from([30.0, 60.0, 300.0]), st.sampled_from([None, None, 0.9]))
def test_properties(jobs: list[Submission], concurrency: int, slot: float,
                    guarantee: float | None) -> None:
    """Property: (a) the functions held never exceed the concurrency; (b) every met job
    starts after its submission and really finishes by its due time (the oracle's time, or
    `evaluate`'s quantile under a guarantee); (c) a met job costs at least its own `solve()`
    optimum, so the met jobs together cost at least the sum of theirs."""
    schedule = solve_many(jobs, concurrency=concurrency, slot_s=slot, guarantee=guarantee)
    entries = schedule.jobs
    held = functions_held([e.start_s for e in entries], [e.finish_s for e in entries],
                          [e.functions for e in entries])
    assert held <= concurrency
    assert schedule.peak_functions == held
    alone_cost = 0.0
    for entry, job in zip(entries, jobs, strict=True):
        assert entry.start_s >= job.submit_s
        assert entry.finish_s == entry.start_s + entry.time_s
        if guarantee is None:
            time = float(oracle.grid(str(job.instance), entry.functions, entry.memory_mb)["time"])
        else:
            time = evaluate(job.instance, functions=entry.functions, memory_mb=entry.memory_mb,
                            guarantee=guarantee).deadline_time_s
        assert entry.time_s == pytest.approx(time, rel=1e-9)
        assert entry.met == (entry.finish_s <= job.submit_s + float(job.deadline_s or 0))
        if entry.met:
            alone = _solve_alone(job, guarantee)
            assert alone.status == "optimal"
            assert entry.cost_usd >= alone.cost_usd * (1 - 1e-9)
            alone_cost += alone.cost_usd
        else:
            assert entry.late_s == pytest.approx(entry.finish_s - entry.due_s, rel=1e-12)
    met_cost = sum(e.cost_usd for e in entries if e.met)
    assert met_cost >= alone_cost * (1 - 1e-9)


@PROPERTY
@given(job_sets())
def test_total_cost_at_least_the_sum_of_optima(jobs: list[Submission]) -> None:
    """Property: when every job meets its deadline alone and in the schedule, the total
    cost is at least the sum of the jobs' own `solve()` costs."""
    alone = [_solve_alone(job) for job in jobs]
    assume(all(plan.status == "optimal" for plan in alone))
    schedule = solve_many(jobs, concurrency=40, slot_s=60.0)
    assume(not schedule.missed)
    assert schedule.total_cost_usd >= sum(p.cost_usd for p in alone) * (1 - 1e-9)


@PROPERTY
@given(job_sets(), st.sampled_from([30.0, 60.0, 300.0]))
def test_unlimited_pool_gives_each_job_its_own_optimum(jobs: list[Submission],
                                                       slot: float) -> None:
    """Property: with room for every job's own plan at once, each job runs its `solve()`
    plan at its submission: optimal, gap 0, the sum of the solve() costs."""
    alone = [_solve_alone(job) for job in jobs]
    assume(all(plan.status == "optimal" for plan in alone))
    room = sum(plan.functions for plan in alone)
    schedule = solve_many(jobs, concurrency=room, slot_s=slot)
    assert (schedule.status, schedule.gap) == ("optimal", 0.0)
    for entry, plan, job in zip(schedule.jobs, alone, jobs, strict=True):
        assert (entry.functions, entry.memory_mb, entry.start_s) == (
            plan.functions, plan.memory_mb, job.submit_s)
    assert schedule.total_cost_usd == pytest.approx(sum(p.cost_usd for p in alone), rel=1e-9)


# --- 3. validation ---------------------------------------------------------------------------

GOOD = "instances/espcn-bsds500.yaml"


@pytest.mark.parametrize(("change", "field"), [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": 1.5}, "concurrency"),
    ({"concurrency": True}, "concurrency"),
    ({"slot_s": 0}, "slot_s"),
    ({"slot_s": -60.0}, "slot_s"),
    ({"slot_s": math.nan}, "slot_s"),
    ({"gap": 1}, "gap"),
    ({"gap": 1.5}, "gap"),
    ({"gap": -0.01}, "gap"),
    ({"time_limit_s": 0}, "time_limit_s"),
    ({"time_limit_s": -1.0}, "time_limit_s"),
    ({"jobs": GOOD}, "jobs"),
    ({"jobs": {"instance": GOOD}}, "jobs"),
    ({"jobs": 3}, "jobs"),
    ({"jobs": [GOOD, {"instance": GOOD, "deadline_s": -5.0}]}, "jobs[1].deadline_s"),
    ({"jobs": [{"instance": GOOD, "submit_s": math.nan}]}, "jobs[0].submit_s"),
    ({"jobs": [{"instance": GOOD, "submit_s": np.float64(-1)}]}, "jobs[0].submit_s"),
    ({"jobs": [GOOD, {"instance": GOOD, "deadlines": 60}]}, "jobs[1]"),
    ({"jobs": [GOOD, "instances/no-such.yaml"]}, "jobs[1].instance"),
    ({"jobs": [Submission(GOOD, name="")]}, "jobs[0].name"),
    ({"noise": NoiseModel()}, "noise"),
    ({"guarantee": 1.0}, "guarantee"),
])
def test_bad_input_names_the_field(change: dict[str, Any], field: str) -> None:
    """Each bad input gives one one-line InstanceError naming the field in backticks."""
    arguments: dict[str, Any] = {"jobs": [GOOD, GOOD], "concurrency": 20, **change}
    jobs = arguments.pop("jobs")
    with pytest.raises(InstanceError) as raised:
        solve_many(jobs, **arguments)
    message = str(raised.value)
    assert f"`{field}`" in message, message
    assert len(message.splitlines()) == 1, message


def test_no_jobs_is_an_empty_optimal_schedule() -> None:
    schedule = solve_many([], concurrency=10)
    assert (schedule.status, schedule.jobs, schedule.total_cost_usd) == ("optimal", (), 0.0)
    assert schedule.to_dict()["missed"] == []


def test_a_job_no_plan_meets_is_reported_late_after_the_others() -> None:
    """A deadline no plan meets: infeasible, the job is in `missed` with how late it is, and
    it waits for room: the pool is never over the limit."""
    concurrency = 20
    fastest = solve(GOOD, deadline_s=1.0)
    assert fastest.status == "infeasible"
    jobs = [Submission(GOOD, 0.0, 600.0, name="fits"),
            Submission(GOOD, 0.0, fastest.deadline_time_s / 2, name="hopeless")]
    schedule = solve_many(jobs, concurrency=concurrency)
    assert schedule.status == "infeasible"
    fits, hopeless = schedule.jobs
    assert fits.met and schedule.missed == (hopeless,)
    assert hopeless.late_s == pytest.approx(hopeless.finish_s - hopeless.due_s) and \
        hopeless.late_s > 0
    assert fits.functions + hopeless.functions > concurrency  # so they cannot overlap
    assert hopeless.start_s >= fits.finish_s
    assert functions_held([fits.start_s, hopeless.start_s], [fits.finish_s, hopeless.finish_s],
                          [fits.functions, hopeless.functions]) <= concurrency


# --- 4. no state kept by a failed call --------------------------------------------------------

def _without_timing(schedule: Schedule) -> dict[str, Any]:
    out = schedule.to_dict()
    del out["solve_seconds"]
    return out


GOOD_CALL = """
import json
from lambdadnn import Submission, solve_many
jobs = [Submission("instances/mobilenet-cifar10.yaml", 0.0, 900.0),
        Submission("instances/mobilenet-cifar10.yaml", 120.0, 1000.0),
        Submission("instances/1dcnn-imdb.yaml", 60.0, 300.0)]
schedule = solve_many(jobs, concurrency=24, slot_s=60.0)
"""


@pytest.mark.real
def test_a_failed_call_changes_no_later_answer() -> None:
    """A call that fails after planning (a job with no valid plan at all, found only when
    it is placed late), with longer deadlines on the same instances, then the good call:
    the same schedule as in a fresh process."""
    fresh = subprocess.run(
        [sys.executable, "-c", GOOD_CALL + "out = schedule.to_dict()\ndel out['solve_seconds']\n"
         "print(json.dumps(out))"],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, check=True,
    )
    no_valid_plan = copy.deepcopy(tiny("espcn-bsds500"))
    no_valid_plan["platform"]["memory_mb"]["max"] = 2048  # its rate is negative below 2,300 MB
    with pytest.raises(NoValidPlanError, match=r"`jobs\[2\]`"):
        solve_many([Submission("instances/mobilenet-cifar10.yaml", 0.0, 3600.0),
                    Submission("instances/1dcnn-imdb.yaml", 0.0, 3600.0),
                    Submission(no_valid_plan, 0.0, 60.0)], concurrency=24, slot_s=60.0)
    scope: dict[str, Any] = {}
    exec(GOOD_CALL, scope)
    assert json.loads(json.dumps(_without_timing(scope["schedule"]))) == json.loads(fresh.stdout)


@pytest.mark.real
def test_the_judge_imports_nothing_from_lambdadnn() -> None:
    """tests/schedule_brute.py stays independent of the package it judges."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, tests.schedule_brute; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lambdadnn'))"],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, check=True,
    )
    assert loaded.stdout.strip() == "[]"


# --- 6. the re-check catches a wrong answer -------------------------------------------------

def _tampered(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Make the MILP's answer wrong in one way before `solve_many` re-checks it."""
    from lambdadnn.solver import many

    real = many.solve_timetable

    def wrong(tasks: Any, *args: Any, **options: Any) -> Any:
        return change(real(tasks, *args, **options))

    monkeypatch.setattr(many, "solve_timetable", wrong)


def _three_mobilenets() -> list[Submission]:
    return [Submission(tiny("mobilenet-cifar10"), 0.0, 4000.0) for _ in range(3)]


def test_recheck_refuses_a_schedule_over_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job moved to start at once (past the limit of 3): `SolverError`, not a schedule."""

    _tampered(monkeypatch, lambda answer: dataclasses.replace(
        answer, start_s=np.where(answer.functions >= 0, 0.0, answer.start_s)))
    with pytest.raises(SolverError, match="more than the concurrency"):
        solve_many(_three_mobilenets(), concurrency=3, slot_s=500, gap=0.0)


def test_recheck_refuses_a_start_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job started so late it cannot finish in time, yet counted as met: `SolverError`."""

    jobs = [Submission(tiny("mobilenet-cifar10"), 0.0, 4000.0)]
    _tampered(monkeypatch, lambda answer: dataclasses.replace(
        answer, start_s=answer.start_s + 3999.0))
    with pytest.raises(SolverError, match="yet is marked met=True"):
        solve_many(jobs, concurrency=3, slot_s=500, gap=0.0)


# --- 7. Ctrl-C stops HiGHS --------------------------------------------------------------------

INTERRUPTED = r"""
import sys
import threading
from lambdadnn import Submission, solve_many
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.solver import master

real = master.Master.branch_and_bound
running = []

def announced(self, *args):
    running.append(self)
    # Said a second after the call, when HiGHS is surely inside its run.
    threading.Timer(1.0, lambda: print("branch and bound", file=sys.stderr, flush=True)).start()
    return real(self, *args)

master.Master.branch_and_bound = announced
jobs = generate_trace(100, seed=1, rate_per_s=0.02)
try:
    solve_many([Submission(j.instance, submit_s=j.submit_time_s, deadline_s=j.deadline_s)
                for j in jobs], concurrency=100, guarantee=0.999, time_limit_s=300, gap=0.0)
except KeyboardInterrupt:
    print("interrupted", running[0].solver.highs.getModelStatus().name, file=sys.stderr, flush=True)
    sys.exit(130)
print("finished", file=sys.stderr, flush=True)
"""


@pytest.mark.real
def test_ctrl_c_stops_highs_and_reaches_the_caller() -> None:
    """SIGINT while HiGHS's branch and bound runs (a tight pool, a 300 s limit) stops HiGHS
    itself (no finished solve's status: highspy leaves `kNotset` after a cancel) and raises
    KeyboardInterrupt in the caller."""
    import signal

    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED], stderr=subprocess.PIPE, text=True, cwd=ROOT,
        # Ctrl-C's default, even when this test runs where SIGINT is ignored (a background
        # job inherits SIG_IGN, and Python then installs no KeyboardInterrupt handler)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # blocks until HiGHS's branch and bound starts
        assert line.strip() == "branch and bound"
        process.send_signal(signal.SIGINT)
        rest = process.stderr.read()
        assert process.wait(timeout=HANG_GUARD_S) == 130, rest
        word, status = rest.split()[:2]
        assert word == "interrupted"
        assert status not in ("kOptimal", "kTimeLimit"), rest  # HiGHS did not run on to an end
    finally:
        process.kill()
        process.wait()
