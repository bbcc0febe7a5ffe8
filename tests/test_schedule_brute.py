"""The judge of many-job schedules (tests/schedule_brute.py) judged: its two methods agree on
random cases, it reproduces known optima, it counts capacity at every moment rather than per
slot, it misses jobs that cannot make their deadline, and it stays independent of the
package it judges."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests import oracle
from tests.schedule_brute import (
    REPRODUCTIONS,
    Best,
    Job,
    Plan,
    Reproduction,
    Run,
    enumerate_optimum,
    jobs_from,
    milp_optimum,
    optimum,
    random_case,
    schedule_errors,
    shipped,
    starts,
    undominated,
)

ROOT = Path(__file__).resolve().parent.parent
#: How many seeded random cases the two methods must agree on.
RANDOM_CASES = 60


def _plan(functions: int, time_s: float, cost_usd: float, memory_mb: int = 1024) -> Plan:
    return Plan(functions, memory_mb, time_s, cost_usd)


# --- the two methods agree -------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_the_enumeration_and_the_milp_agree(seed: int) -> None:
    """On seeded random cases the depth-first enumeration (undominated plans) and the MILP
    (every plan) find the same misses and cost, and both schedules obey the model."""
    spec, concurrency, slot = random_case(seed)
    jobs = jobs_from(spec, concurrency)
    best = optimum(jobs, concurrency, slot)  # asserts the two agree
    assert not schedule_errors(jobs, best.runs, concurrency=concurrency, slot=slot)
    assert best.missed + len(best.runs) == len(jobs)


def test_random_cases_are_deterministic_plain_data() -> None:
    """The same seed gives the same case, as data YAML can carry, within the brief's sizes."""
    for seed in range(10):
        spec, concurrency, slot = random_case(seed)
        assert (spec, concurrency, slot) == random_case(seed)
        assert yaml.safe_load(yaml.safe_dump([list(entry) for entry in spec])) == [
            list(entry) for entry in spec]
        assert 2 <= len(spec) <= 6 and 2 <= concurrency <= 8
        assert slot in (60.0, 100.0, 200.0, 300.0, 500.0)
        for job in jobs_from(spec, concurrency):
            assert 1 <= len(job.plans) <= 70


# --- reproductions ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(REPRODUCTIONS))
def test_reproductions(name: str) -> None:
    """Each reproduction's optimum, by both methods: its misses, cost and plans."""
    case: Reproduction = REPRODUCTIONS[name]
    jobs = jobs_from(case.spec, case.concurrency)
    best = optimum(jobs, case.concurrency, case.slot)
    assert best.missed == case.missed
    assert best.cost_usd == pytest.approx(case.cost_usd, abs=5e-7)
    assert tuple((r.plan.functions, r.plan.memory_mb, r.start_s) for r in best.runs) == case.runs


def test_merge_prices_as_the_oracle_does() -> None:
    """The merge case's answer is made of single-job optima the oracle agrees with: a alone on
    at most 6 functions costs what 6 x 1,408 MB costs, b alone what 2 x 1,408 MB costs, and a
    alone on 7 functions would be cheaper (7 x 1,088 MB), so the pool decides."""
    a, b = (entry[0] for entry in REPRODUCTIONS["merge"].spec)
    six = oracle.brute_force({**a, "limits": {"max_functions": 6}})
    seven = oracle.brute_force(a)
    alone_b = oracle.brute_force(b, deadline_s=400.0)
    assert (six.functions, six.memory_mb) == (6, 1408)
    assert (seven.functions, seven.memory_mb) == (7, 1088)
    assert (alone_b.functions, alone_b.memory_mb) == (2, 1408)
    assert six.cost_usd is not None and alone_b.cost_usd is not None
    assert six.cost_usd + alone_b.cost_usd == pytest.approx(0.031256, abs=5e-7)


# --- capacity at every moment ----------------------------------------------------------------

def test_a_run_ending_lets_another_start_within_the_same_slot() -> None:
    """Two 2-function runs on a pool of 2 and a 300 s slot: [0, 100) and [100, 200) never
    overlap, so both meet their deadlines although both lie in slot 0; submitted at 99 s, the
    second overlaps the first over [99, 100) and one of them must be missed."""
    first = Job((_plan(2, 100.0, 1.0),), 0.0, 100.0)
    after = Job((_plan(2, 100.0, 1.0),), 100.0, 200.0)
    best = optimum([first, after], 2, 300.0)
    assert (best.missed, best.cost_usd) == (0, 2.0)
    assert [r.start_s for r in best.runs] == [0.0, 100.0]
    overlapping = Job((_plan(2, 100.0, 1.0),), 99.0, 199.0)
    best = optimum([first, overlapping], 2, 300.0)
    assert (best.missed, best.cost_usd) == (1, 1.0)


def test_reserved_runs_count_over_their_own_interval() -> None:
    """A reserved run over [0, 100) on all 2 functions: the job's 2-function plan fits from
    its next start, 100 s; reserved up to 100.5 s it does not, and the dearer 1-function plan
    beside a 1-function reservation is taken instead of missing."""
    job = Job((_plan(2, 100.0, 1.0), _plan(1, 150.0, 3.0)), 0.0, 250.0)
    assert starts(job, t0=0.0, slot=100.0) == [0.0, 100.0]
    best = optimum([job], 2, 100.0, reserved=[(0.0, 100.0, 2)])
    assert (best.missed, best.cost_usd, best.runs[0].start_s) == (0, 1.0, 100.0)
    best = optimum([job], 2, 100.0, reserved=[(0.0, 100.5, 2)])
    assert (best.missed, best.cost_usd) == (1, 0.0)
    best = optimum([job], 2, 100.0, reserved=[(0.0, 100.5, 1)])
    assert (best.missed, best.cost_usd, best.runs[0].plan.functions) == (0, 3.0, 1)
    with pytest.raises(ValueError, match="reserved"):
        optimum([job], 2, 100.0, reserved=[(0.0, 10.0, 2), (5.0, 20.0, 1)])


def test_starts_are_the_submission_then_later_slot_times() -> None:
    """t0 is the earliest submission; a job submitted off the grid starts at its submission
    or at the grid times after it, while its fastest plan can still finish in time."""
    early = Job((_plan(1, 50.0, 1.0),), 10.0, 1000.0)
    late = Job((_plan(1, 50.0, 1.0),), 130.0, 480.0)
    assert starts(late, t0=early.submit_s, slot=100.0) == [130.0, 210.0, 310.0, 410.0]
    on_grid = Job((_plan(1, 50.0, 1.0),), 110.0, 260.0)
    assert starts(on_grid, t0=10.0, slot=100.0) == [110.0, 210.0]


# --- deadlines no plan meets -----------------------------------------------------------------

def test_a_job_no_plan_can_finish_in_time_is_missed() -> None:
    """A job whose deadline is below its fastest plan is missed at no cost; the other job
    runs at its single-job optimum, as tests/oracle.py finds it."""
    instance = shipped("1dcnn-imdb")
    instance["platform"]["memory_mb"] = {"min": 128, "step": 640, "max": 3008}
    instance["limits"] = {"max_functions": 3}
    fastest = oracle.fastest(instance).time_s
    assert fastest is not None
    spec = [(instance, 0.0, 0.9 * fastest), (instance, 50.0, 2.0 * fastest)]
    best = optimum(jobs_from(spec, 3), 3, 200.0)
    alone = oracle.brute_force(instance, deadline_s=2.0 * fastest)
    assert best.missed == 1 and [r.job for r in best.runs] == [1]
    assert alone.cost_usd is not None
    assert best.cost_usd == pytest.approx(alone.cost_usd, rel=1e-12)
    hopeless = optimum(jobs_from(spec[:1], 3), 3, 200.0)
    assert (hopeless.missed, hopeless.cost_usd, hopeless.runs) == (1, 0.0, ())


def test_plans_wider_than_the_pool_are_left_out_or_never_fit() -> None:
    """A job's plans use at most the pool's functions; plans wider than the pool, handed in
    anyway, never fit, so both methods miss the job."""
    instance = shipped("resnet50-cifar10")
    instance["platform"]["memory_mb"] = {"min": 128, "step": 960, "max": 3008}
    (narrow,) = jobs_from([(instance, 0.0, 8000.0)], 1)
    assert {p.functions for p in narrow.plans} == {1}
    (job,) = jobs_from([(instance, 0.0, 8000.0)], 3)
    wide = Job(tuple(p for p in job.plans if p.functions > 1), 0.0, 8000.0)
    assert wide.plans and {p.functions for p in wide.plans} == {2, 3}
    assert milp_optimum([wide], 1, 100.0) == enumerate_optimum([wide], 1, 100.0) == Best(
        1, 0.0, ())


# --- the pieces the methods rest on ----------------------------------------------------------

plan_lists = st.lists(
    st.builds(_plan, st.integers(1, 3), st.sampled_from([1.0, 2.0, 3.0]),
              st.sampled_from([1.0, 2.0, 3.0]), st.sampled_from([128, 1024])),
    max_size=12,
)


@given(plan_lists)
def test_undominated_drops_only_dominated_plans(plans: list[Plan]) -> None:
    """Property: every dropped plan is dominated by a kept one (no more functions, time or
    cost), kept plans do not dominate each other unless equal, and of equal plans one is
    kept."""
    kept = undominated(plans)

    def dominates(p: Plan, q: Plan) -> bool:
        return p.functions <= q.functions and p.time_s <= q.time_s and p.cost_usd <= q.cost_usd

    def key(p: Plan) -> tuple[int, float, float]:
        return (p.functions, p.time_s, p.cost_usd)

    for q in plans:
        assert any(dominates(p, q) for p in kept)
    for i, p in enumerate(kept):
        for q in kept[i + 1:]:
            assert not dominates(p, q) and not dominates(q, p)
    assert len({key(p) for p in kept}) == len(kept)


def test_schedule_errors_catches_what_the_model_forbids() -> None:
    """The re-check both methods' answers pass flags an overlap beyond the pool, a start off
    the grid, a late finish, a foreign plan and a job run twice."""
    plan = _plan(2, 100.0, 1.0)
    jobs = [Job((plan,), 0.0, 300.0), Job((plan,), 0.0, 300.0)]
    assert not schedule_errors(jobs, [Run(0, plan, 0.0), Run(1, plan, 100.0)],
                               concurrency=2, slot=100.0)
    bad = {
        "overlap": [Run(0, plan, 0.0), Run(1, plan, 0.0)],
        "off grid": [Run(0, plan, 50.0)],
        "late": [Run(0, plan, 300.0)],
        "foreign": [Run(0, _plan(1, 100.0, 1.0), 0.0)],
        "twice": [Run(0, plan, 0.0), Run(0, plan, 100.0)],
    }
    for what, runs in bad.items():
        assert schedule_errors(jobs, runs, concurrency=2, slot=100.0), what


def test_the_lexicographic_objective_prefers_fewer_misses_to_any_saving() -> None:
    """Meeting both jobs side by side costs more than running one alone cheaply; fewer misses
    win however much they cost."""
    jobs = [Job((_plan(1, 100.0, 50.0), _plan(2, 60.0, 1.0)), 0.0, 100.0)] * 2
    best = optimum(jobs, 2, 300.0)
    assert (best.missed, best.cost_usd) == (0, 100.0)
    assert math.isclose(enumerate_optimum(jobs, 2, 300.0).cost_usd, 100.0)


# --- independence ----------------------------------------------------------------------------

def _imports(path: Path) -> list[str]:
    """The modules a file imports, by absolute name ('..' for a relative import); for
    `from M import x` both M and M.x (x may be a module)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.append("..")
            else:
                module = node.module or ""
                names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def test_the_judge_imports_nothing_from_lambdadnn() -> None:
    """tests/schedule_brute.py and the tests modules it imports (tests/oracle.py) import no
    `lambdadnn` module, absolutely or relatively (the repository's top level is `lambdadnn`)."""
    pending, seen = ["tests.schedule_brute"], set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _imports(ROOT / Path(*module.split(".")).with_suffix(".py")):
            assert name != ".." and name.split(".")[0] != "lambdadnn", (module, name)
            if name.startswith("tests.") and (ROOT / Path(*name.split("."))).with_suffix(
                    ".py").is_file():
                pending.append(name)
    assert seen == {"tests.schedule_brute", "tests.oracle"}
