"""`solve()` and `solve_many()` from many threads at once: schedulers call us so."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from lambdadnn import Submission, solve, solve_many
from lambdadnn.solver import master
from lambdadnn.solver.shipped import instances_folder

SHIPPED = sorted(instances_folder().glob("*.yaml"))


def coarse(name: str) -> dict[str, Any]:
    """A shipped instance on a 64 MB memory grid: the same plans' shapes, 160 sizes instead of
    10,113, so that closing a schedule's gap over every plan takes a second, not ten."""
    raw = yaml.safe_load((instances_folder() / f"{name}.yaml").read_text())
    platform = yaml.safe_load(
        (instances_folder() / "platforms" / f"{raw['platform']}.yaml").read_text())
    platform["memory_mb"] = {"min": 128, "step": 64, "max": 10240}
    return {**raw, "platform": platform}


# Jobs that crowd a small pool, so that each schedule is built in Pyomo and solved by HiGHS.
CROWDS = [
    ([Submission(coarse("mobilenet-cifar10"), 0.0, 4000.0)] * 3, 40),
    ([Submission(coarse("1dcnn-imdb"), 0.0, 900.0),
      Submission(coarse("mobilenet-cifar10"), 30.0, 1500.0),
      Submission(coarse("1dcnn-imdb"), 60.0, 700.0)], 20),
    ([Submission(coarse("espcn-bsds500"), 0.0, 1200.0),
      Submission(coarse("mobilenet-cifar10"), 0.0, 1300.0)], 30),
]
DEADLINES = (700.0, 900.0, 1200.0)


def _question(index: int) -> tuple[int, ...]:
    """Call `index` of the mixed workload: a schedule (a third of them, `(crowd,)`) or a single
    plan (`(instance, deadline)`). The workload repeats with `PERIOD`."""
    if index % 3 == 0:
        return (index // 3 % len(CROWDS),)
    return index % len(SHIPPED), index % len(DEADLINES)


PERIOD = 3 * len(CROWDS) * len(SHIPPED) * len(DEADLINES)


def _answer(question: tuple[int, ...]) -> Any:
    """The answer to a `_question`: the schedule's jobs, or the plan's status and figures."""
    if len(question) == 1:
        jobs, concurrency = CROWDS[question[0]]
        schedule = solve_many(jobs, concurrency=concurrency, slot_s=60.0, time_limit_s=600.0,
                              gap=0.0)
        return [(job.functions, job.memory_mb, job.start_s, job.met) for job in schedule.jobs]
    instance, deadline = question
    plan = solve(SHIPPED[instance], deadline_s=DEADLINES[deadline])
    return plan.status, plan.functions, plan.memory_mb, plan.cost_usd


def test_the_crowds_reach_highs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedules of the thread test are HiGHS's, not the greedy start's alone (else the
    test below would not exercise the shared solver)."""
    built: list[int] = []
    original = master.Master.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(master.Master, "__init__", counting)
    for jobs, concurrency in CROWDS:
        before = len(built)
        solve_many(jobs, concurrency=concurrency, slot_s=60.0, time_limit_s=600.0, gap=0.0)
        assert len(built) > before


@pytest.mark.slow
def test_four_threads_of_solve_many_and_solve_give_the_serial_answers() -> None:
    """100 calls, a third of them `solve_many`, on 4 threads: each equal to the same call made
    alone (before the fix, 7 of 20 threaded `solve_many` calls failed in HiGHS or Pyomo). Each
    distinct question is answered alone once."""
    questions = [_question(index) for index in range(100)]
    assert len(set(questions)) == len({_question(index) for index in range(PERIOD)})
    serial = {question: _answer(question) for question in dict.fromkeys(questions)}
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(_answer, questions))
    for index, answer in enumerate(threaded):
        assert answer == serial[questions[index]], f"call {index}"
