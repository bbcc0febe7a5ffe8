"""An independent exact judge for `solve_many`'s schedules of many jobs on a shared pool.

Two unrelated methods compute the same optimum, and `optimum` insists that they agree: a
depth-first enumeration of every combination, and a time-indexed MILP handed to HiGHS
directly (`highspy`, no Pyomo). Every plan's time and cost come from tests/oracle.py's numpy
model; like it, this module imports nothing from `lambdadnn` (tests/test_schedule_brute.py
checks), so it shares no code with the solver it judges.

The model (this is its definition):

* Plans of a job: every (n, m) on its instance's grid that is valid and within the instance's
  limits (`oracle.grid(...)["within_limits"]`) with n ≤ C, the concurrency; T is the oracle's
  time and c its cost. A run of plan (n, m) started at a holds n functions over [a, a + T).
* Starts: t0 is the earliest submission over the jobs. Job j, submitted at s_j and due at
  d_j = s_j + D_j, may start at s_j or at any t0 + i·S (i an integer, S the slot) with
  t0 + i·S > s_j. A (plan, start) is allowed iff a + T ≤ d_j, computed in floats exactly so.
* Capacity at every moment t: Σ n over the chosen runs with a ≤ t < a + T, plus the functions
  of the reserved runs (start, finish, functions) held over [start, finish), is at most C.
  The functions held are a step function that only rises at a start, so checking at every
  run start and every reserved start checks every moment.
* Each job takes one allowed (plan, start) or is missed.
* The optimum is lexicographic: fewest missed jobs, then least total cost of the jobs met
  (a missed job costs nothing).

A safe reduction (used by the enumeration only; the MILP keeps every plan, so their agreement
also checks it): plan p of a job dominates plan q when n_p ≤ n_q, T_p ≤ T_q and c_p ≤ c_q.
Given any feasible schedule running q at a, run p at a instead: the start is still allowed
(the starts do not depend on the plan), a + T_p ≤ a + T_q ≤ d_j meets the deadline,
[a, a + T_p) ⊆ [a, a + T_q) and n_p ≤ n_q so no moment holds more functions, and the cost does
not grow. So some optimum uses no dominated plan, and dominated plans may be dropped (of exact
duplicates, equal in n, T and c, one is kept).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import highspy
import numpy as np
import yaml

from tests import oracle

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("1dcnn-imdb", "espcn-bsds500", "mobilenet-cifar10", "resnet50-cifar10")
SLOTS = (60.0, 100.0, 200.0, 300.0, 500.0)
#: Relative cost difference under which the two methods count as agreeing.
AGREE_RTOL = 1e-9

#: A reserved run: (start, finish, functions), holding the functions over [start, finish).
Reserved = tuple[float, float, int]
#: One job of a spec: (instance mapping or YAML path, submission, deadline from submission).
SpecEntry = tuple[Mapping[str, Any] | str | Path, float, float]


@dataclass(frozen=True)
class Plan:
    """One (functions, memory) plan with its time and cost from tests/oracle.py."""

    functions: int
    memory_mb: int
    time_s: float
    cost_usd: float


@dataclass(frozen=True)
class Job:
    """A job as the judge sees it: the plans it may run, when it is submitted and due."""

    plans: tuple[Plan, ...]
    submit_s: float
    due_s: float


@dataclass(frozen=True)
class Run:
    """A chosen (plan, start) of job number `job`."""

    job: int
    plan: Plan
    start_s: float

    @property
    def finish_s(self) -> float:
        return self.start_s + self.plan.time_s


@dataclass(frozen=True)
class Best:
    """The lexicographic optimum (missed jobs, then the met jobs' cost) and one schedule that
    reaches it: the runs of the met jobs, in job order."""

    missed: int
    cost_usd: float
    runs: tuple[Run, ...]


# --- jobs ------------------------------------------------------------------------------------

def plans_of(source: Mapping[str, Any] | str | Path, *, concurrency: int) -> tuple[Plan, ...]:
    """Every valid plan of the instance within its limits and `concurrency` functions, on
    every parameter server it may choose (`oracle.servers`), each server's in the oracle's
    grid order (n, then m, increasing)."""
    plans: list[Plan] = []
    for server in oracle.servers(source if isinstance(source, Mapping) else str(source)):
        values = oracle.grid(server.problem)
        usable = values["within_limits"] & (values["functions"] <= concurrency)
        n = np.broadcast_to(values["functions"], usable.shape)
        m = np.broadcast_to(values["memory_mb"], usable.shape)
        rows, cols = np.nonzero(usable)
        plans.extend(
            Plan(int(n[r, c]), int(m[r, c]), float(values["time"][r, c]),
                 float(values["cost"][r, c]))
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True))
    return tuple(plans)


def jobs_from(spec: Sequence[SpecEntry], concurrency: int) -> list[Job]:
    """The jobs of (instance mapping or path, submit_s, deadline_s) entries, with every plan
    (dominated ones too)."""
    return [
        Job(plans_of(source, concurrency=concurrency), float(submit),
            float(submit) + float(deadline))
        for source, submit, deadline in spec
    ]


def undominated(plans: Sequence[Plan]) -> tuple[Plan, ...]:
    """The plans no other plan dominates (n, T and c all no larger; see the module docstring),
    keeping the first of exact duplicates, in their given order."""
    kept: list[Plan] = []
    for i, q in enumerate(plans):
        beaten = False
        for k, p in enumerate(plans):
            if k == i or not (p.functions <= q.functions and p.time_s <= q.time_s
                              and p.cost_usd <= q.cost_usd):
                continue
            duplicate = (p.functions, p.time_s, p.cost_usd) == (q.functions, q.time_s, q.cost_usd)
            if not duplicate or k < i:
                beaten = True
                break
        if not beaten:
            kept.append(q)
    return tuple(kept)


def starts(job: Job, *, t0: float, slot: float) -> list[float]:
    """The job's starts from which its fastest plan still meets its deadline: its
    submission, then every t0 + i·slot after the submission, increasing."""
    if not job.plans:
        return []
    fastest = min(p.time_s for p in job.plans)
    out = [job.submit_s] if job.submit_s + fastest <= job.due_s else []
    i = 1  # t0 + 0·slot = t0 is never after a submission
    while t0 + i * slot <= job.submit_s:
        i += 1
    # a + T is non-decreasing in a, so the first start too late ends the list.
    while t0 + i * slot + fastest <= job.due_s:
        out.append(t0 + i * slot)
        i += 1
    return out


def columns(job: Job, index: int, *, t0: float, slot: float,
            plans: Sequence[Plan] | None = None) -> list[Run]:
    """Every allowed (plan, start) of the job (a + T ≤ due), over `plans` (default all)."""
    chosen = job.plans if plans is None else plans
    return [Run(index, p, a) for a in starts(job, t0=t0, slot=slot) for p in chosen
            if a + p.time_s <= job.due_s]


def _held(t: float, runs: Sequence[Run], reserved: Sequence[Reserved]) -> int:
    """The functions held at moment t by runs and reserved runs, each over [start, finish)."""
    return (sum(r.plan.functions for r in runs if r.start_s <= t < r.finish_s)
            + sum(n for a, f, n in reserved if a <= t < f))


def _check_reserved(reserved: Sequence[Reserved], concurrency: int) -> None:
    for a, _, _ in reserved:
        if _held(a, (), reserved) > concurrency:
            raise ValueError(f"the reserved runs alone hold more than {concurrency} at {a}")


def schedule_errors(jobs: Sequence[Job], runs: Sequence[Run], *, concurrency: int,
                    slot: float, reserved: Sequence[Reserved] = ()) -> list[str]:
    """What is wrong with `runs` as a schedule of `jobs` under the model (empty: nothing):
    a job run twice, a plan not the job's, a start not allowed, a deadline missed, or more
    than `concurrency` functions held at some run's or reserved run's start."""
    errors: list[str] = []
    t0 = min(job.submit_s for job in jobs)
    seen: set[int] = set()
    for run in runs:
        job = jobs[run.job]
        if run.job in seen:
            errors.append(f"job {run.job} runs twice")
        seen.add(run.job)
        if run.plan not in job.plans:
            errors.append(f"job {run.job}: {run.plan} is not one of its plans")
        if run.start_s not in starts(job, t0=t0, slot=slot):
            errors.append(f"job {run.job}: start {run.start_s} is not allowed")
        if not run.start_s + run.plan.time_s <= job.due_s:
            errors.append(f"job {run.job}: finishes {run.finish_s} after {job.due_s}")
    for t in [r.start_s for r in runs] + [a for a, _, _ in reserved]:
        if _held(t, runs, reserved) > concurrency:
            errors.append(f"{_held(t, runs, reserved)} functions held at {t}")
    return errors


# --- method 1: enumeration -------------------------------------------------------------------

def enumerate_optimum(jobs: Sequence[Job], concurrency: int, slot: float,
                      reserved: Sequence[Reserved] = ()) -> Best:
    """The optimum by depth-first search over every (plan, start) or miss per job.

    Only undominated plans are tried (safe: module docstring). Capacity is checked exactly:
    a new run over [a, f) only adds functions within it, so the moments to re-check are its
    start and the starts of runs (and reserved runs) already placed inside (a, f). The only
    pruning is the lexicographic bound: (missed so far + jobs left with no allowed column,
    cost so far + each remaining job's cheapest allowed column), which no completion beats.
    """
    _check_reserved(reserved, concurrency)
    if not jobs:
        return Best(0, 0.0, ())
    t0 = min(job.submit_s for job in jobs)
    options = [
        sorted(columns(job, j, t0=t0, slot=slot, plans=undominated(job.plans)),
               key=lambda r: (r.plan.cost_usd, r.start_s, r.plan.functions))
        for j, job in enumerate(jobs)
    ]
    forced = [0] * (len(jobs) + 1)  # jobs from j on with no allowed column
    cheap = [0.0] * (len(jobs) + 1)  # their cheapest columns' costs, summed
    for j in range(len(jobs) - 1, -1, -1):
        forced[j] = forced[j + 1] + (0 if options[j] else 1)
        cheap[j] = cheap[j + 1] + (options[j][0].plan.cost_usd if options[j] else 0.0)
    held: list[tuple[float, float, int]] = list(reserved)  # (start, finish, functions)
    chosen: list[Run] = []
    best: list[Any] = [(len(jobs) + 1, math.inf), ()]

    def fits(a: float, f: float, n: int) -> bool:
        for t in [a] + [s for s, _, _ in held if a < s < f]:
            if n + sum(k for s, e, k in held if s <= t < e) > concurrency:
                return False
        return True

    def search(j: int, missed: int, cost: float) -> None:
        if (missed + forced[j], cost + cheap[j]) >= best[0]:
            return
        if j == len(jobs):
            best[0], best[1] = (missed, cost), tuple(chosen)
            return
        for run in options[j]:
            n = run.plan.functions
            if not fits(run.start_s, run.finish_s, n):
                continue
            held.append((run.start_s, run.finish_s, n))
            chosen.append(run)
            search(j + 1, missed, cost + run.plan.cost_usd)
            chosen.pop()
            held.pop()
        search(j + 1, missed + 1, cost)

    search(0, 0, 0.0)
    missed, _ = best[0]
    runs: tuple[Run, ...] = best[1]
    return Best(int(missed), math.fsum(r.plan.cost_usd for r in runs), runs)


# --- method 2: time-indexed MILP -------------------------------------------------------------

def milp_optimum(jobs: Sequence[Job], concurrency: int, slot: float,
                 reserved: Sequence[Reserved] = ()) -> Best:
    """The optimum of a time-indexed MILP over every plan, solved by HiGHS to a zero gap.

    Binary x per allowed (job, plan, start) and u per job with Σ x + u = 1 per job; a
    capacity row per moment τ among the columns' and reserved runs' starts: Σ n·x over the
    columns with a ≤ τ < a + T is at most C minus the reserved functions held at τ. The
    objective BIG·Σu + Σ c·x has costs scaled so the dearest column costs 1 and BIG = jobs + 1,
    more than any difference in total cost, so it is lexicographic. The answer is re-checked
    with `schedule_errors` and its cost summed from the plans, not read from HiGHS.
    """
    _check_reserved(reserved, concurrency)
    if not jobs:
        return Best(0, 0.0, ())
    t0 = min(job.submit_s for job in jobs)
    cols = [run for j, job in enumerate(jobs) for run in columns(job, j, t0=t0, slot=slot)]
    unit = max((r.plan.cost_usd for r in cols), default=1.0) or 1.0
    big = float(len(jobs) + 1)
    n_x, n_u = len(cols), len(jobs)
    # Rows: one assignment row per job, then one capacity row per moment a column covers.
    entries: list[list[tuple[int, float]]] = [[] for _ in range(n_x + n_u)]
    for k, run in enumerate(cols):
        entries[k].append((run.job, 1.0))
    for j in range(n_u):
        entries[n_x + j].append((j, 1.0))
    row_upper = [1.0] * n_u
    row_lower = [1.0] * n_u
    moments = sorted({r.start_s for r in cols} | {a for a, _, _ in reserved})
    for tau in moments:
        covering = [k for k, r in enumerate(cols) if r.start_s <= tau < r.finish_s]
        if not covering:
            continue
        row = len(row_upper)
        for k in covering:
            entries[k].append((row, float(cols[k].plan.functions)))
        row_lower.append(-highspy.kHighsInf)
        row_upper.append(float(concurrency - sum(n for a, f, n in reserved if a <= tau < f)))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_x + n_u, len(row_upper)
    lp.col_cost_ = np.array([r.plan.cost_usd / unit for r in cols] + [big] * n_u)
    lp.col_lower_ = np.zeros(n_x + n_u)
    lp.col_upper_ = np.ones(n_x + n_u)
    lp.row_lower_ = np.array(row_lower)
    lp.row_upper_ = np.array(row_upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.cumsum([0] + [len(e) for e in entries]).astype(np.int32)
    lp.a_matrix_.index_ = np.array([i for e in entries for i, _ in e], dtype=np.int32)
    lp.a_matrix_.value_ = np.array([v for e in entries for _, v in e], dtype=np.float64)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * (n_x + n_u)
    solver = highspy.Highs()
    for option, value in (("output_flag", False), ("threads", 1), ("mip_rel_gap", 0.0),
                          ("mip_abs_gap", 0.0), ("mip_feasibility_tolerance", 1e-9),
                          ("primal_feasibility_tolerance", 1e-9),
                          ("dual_feasibility_tolerance", 1e-9)):
        solver.setOptionValue(option, value)
    solver.passModel(lp)
    solver.run()
    status = solver.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise AssertionError(f"HiGHS ended {solver.modelStatusToString(status)}")
    x = np.asarray(solver.getSolution().col_value, dtype=np.float64)
    runs = tuple(sorted((cols[k] for k in range(n_x) if x[k] > 0.5), key=lambda r: r.job))
    errors = schedule_errors(jobs, runs, concurrency=concurrency, slot=slot, reserved=reserved)
    assert not errors, errors
    return Best(len(jobs) - len(runs), math.fsum(r.plan.cost_usd for r in runs), runs)


def optimum(jobs: Sequence[Job], concurrency: int, slot: float,
            reserved: Sequence[Reserved] = (), *, fast: bool = False) -> Best:
    """The optimum by the MILP and, unless `fast`, by the enumeration too, which must agree
    (missed equal, cost within `AGREE_RTOL` relative); the MILP's schedule is returned."""
    by_milp = milp_optimum(jobs, concurrency, slot, reserved)
    if not fast:
        by_search = enumerate_optimum(jobs, concurrency, slot, reserved)
        assert by_search.missed == by_milp.missed, (by_search, by_milp)
        assert math.isclose(by_search.cost_usd, by_milp.cost_usd, rel_tol=AGREE_RTOL,
                            abs_tol=1e-15), (by_search, by_milp)
        errors = schedule_errors(jobs, by_search.runs, concurrency=concurrency, slot=slot,
                                 reserved=reserved)
        assert not errors, errors
    return by_milp


# --- random cases ----------------------------------------------------------------------------

# A catalogue instance's servers in a random case: ec2's m5.large and c5n.large at 1 or 2
# shards (the shipped 40 servers would make the judge's enumeration far too slow).
SMALL_CATALOGUE: dict[str, Any] = {
    "catalogue": {"types": {"m5.large": {"bandwidth_mbps": 1200, "price_per_hour": 0.096},
                            "c5n.large": {"bandwidth_mbps": 3125, "price_per_hour": 0.108}}},
    "function_bandwidth_mbps": 84, "max_shards": 2,
}


def shipped(name: str) -> dict[str, Any]:
    """A shipped instance with its platform read in by name, as a fresh mapping."""
    raw: dict[str, Any] = yaml.safe_load((ROOT / "instances" / f"{name}.yaml").read_text())
    raw["platform"] = yaml.safe_load(
        (ROOT / "instances" / "platforms" / f"{raw['platform']}.yaml").read_text()
    )
    return raw


def _fastest_s(instance: Mapping[str, Any], concurrency: int) -> float | None:
    times = [p.time_s for p in plans_of(instance, concurrency=concurrency)]
    return min(times) if times else None


def random_case(seed: int) -> tuple[list[tuple[dict[str, Any], float, float]], int, float]:
    """A small random case (spec, concurrency, slot), as plain data `solve_many` accepts.

    2–6 jobs on 2–8 functions and a slot of 60–500 s. Each job is a shipped instance on a
    coarse grid (128 MB up by 320–960 MB to at most 3,008 MB) with 2–7 functions: at most 70
    plans. Its sample count is scaled so its fastest plan takes about 0.3–4 slots (the shipped
    ones take 3–70 slots: that many starts would make the enumeration far too slow); its
    deadline is 1–3× that fastest time, rounded up to a whole second, or for one job in ten
    0.9× it (no allowed column: it must be missed). Submissions lie within 3 slots, half of
    them on the slot grid.
    """
    rng = random.Random(seed)
    slot = rng.choice(SLOTS)
    concurrency = rng.randint(2, 8)
    spec: list[tuple[dict[str, Any], float, float]] = []
    for _ in range(rng.randint(2, 6)):
        instance = shipped(rng.choice(SHIPPED))
        if "catalogue" in instance["parameter_server"]:  # two of its types, up to 2 shards
            instance["parameter_server"] = dict(SMALL_CATALOGUE)
        instance["platform"]["memory_mb"] = {"min": 128, "step": rng.choice((320, 480, 640, 960)),
                                             "max": 3008}
        instance["limits"] = {"max_functions": rng.randint(2, 7)}
        fastest = _fastest_s(instance, concurrency)
        assert fastest is not None, instance["name"]
        workload = instance["workload"]
        target = slot * rng.uniform(0.3, 4.0)
        workload["samples"] = max(1, round(workload["samples"] * target / fastest))
        fastest = _fastest_s(instance, concurrency)
        assert fastest is not None, instance["name"]
        factor = 0.9 if rng.random() < 0.1 else rng.uniform(1.0, 3.0)
        deadline = float(math.ceil(fastest * factor)) if factor >= 1.0 else fastest * factor
        if rng.random() < 0.5:
            submit = float(slot * rng.randint(0, 3))
        else:
            submit = float(rng.randint(0, int(3 * slot)))
        spec.append((instance, submit, deadline))
    return spec, concurrency, slot


# --- reproductions ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Reproduction:
    """A case with a known optimum: the spec, pool and slot, the expected misses and cost (to
    the stated precision), and the plans (functions, memory) and starts of the jobs in order."""

    spec: tuple[tuple[dict[str, Any], float, float], ...]
    concurrency: int
    slot: float
    missed: int
    cost_usd: float
    runs: tuple[tuple[int, int, float], ...]
    why: str


_MERGE_A: dict[str, Any] = {
    "name": "a",
    "platform": {"name": "coarse", "memory_mb": {"min": 128, "max": 3008, "step": 320},
                 "price_per_gb_second": 1.66667e-05, "price_per_request": 2.0e-07,
                 "timeout_s": 900, "timeout_margin_s": 30, "restart_overhead_s": 6,
                 "max_concurrency": 1000},
    "workload": {"model_size_mb": 2, "dataset_size_mb": 41.1, "samples": 25000, "epochs": 3,
                 "local_batch": 32, "max_global_batch": 512},
    "profile": {"rate": {"slope": 0.1, "intercept": -8.8},
                "storage_bandwidth": {"slope": 0.002228, "intercept": 16.12, "max_mbps": 115}},
    "parameter_server": {"bandwidth_mbps": 1200, "function_bandwidth_mbps": 84,
                         "price_per_hour": 0.0},
    "objective": {"deadline_s": 136},
    "limits": {"max_functions": 7},
}


def _with(instance: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of the instance with top-level keys replaced."""
    copied: dict[str, Any] = yaml.safe_load(yaml.safe_dump(dict(instance)))
    copied.update(changes)
    return copied


#: Cases a solver once got wrong, by name, with the optimum this judge finds.
REPRODUCTIONS: dict[str, Reproduction] = {
    "merge": Reproduction(
        spec=((_with(_MERGE_A), 0.0, 136.0),
              (_with(_MERGE_A, limits={"max_functions": 2}), 0.0, 400.0)),
        concurrency=8, slot=300.0, missed=0, cost_usd=0.031256,
        runs=((6, 1408, 0.0), (2, 1408, 0.0)),
        why="a's cheapest plan (7 x 1,088 MB) leaves one function, on which b costs more; "
            "both must start at 0 (b's next start, 300 s, is too late), so a takes 6 x 1,408 "
            "MB and b 2 x 1,408 MB",
    ),
}
