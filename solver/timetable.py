"""The schedule behind `solve_many`: one plan and one start for each job under one concurrency
limit, by column generation (Dantzig–Wolfe) over every plan, with `solve()`'s branch and bound
as the pricing oracle.

The model (docs/MODEL.md): a column is a job j on a plan p = (n, m) from a start a on the grid
(`solver.columns`) with a + T_p ≤ due_j; it holds n functions at the moments a ≤ τ < a + T_p.
Binary x per column, u_j when j is missed:

    Σ_columns of j x + u_j = 1                      every job j
    Σ_columns at τ n · x ≤ free_τ                    every moment τ a run may start at
    minimise Σ c · x + Σ_j penalty_j · u_j.

Checking capacity at every possible start checks it at every moment, so the model is exact
for starts on the grid. It has a column for every plan at every start — millions — so it is
never written out. The master (`solver.master`) starts from each job's cheapest plan at each
start; each round solves its LP relaxation, reads the prices π_τ ≥ 0 of the moments and
prices every job over every plan (`solver.pricing`), adding the columns whose reduced cost is
negative. For any π ≥ 0,

    L(π) = Σ_j min(penalty_j, min over j's columns of [c + n · Σ_{τ held} π_τ]) − Σ_τ π_τ·free_τ

is at most the optimum (a schedule within capacity pays at least its priced cost), whatever
columns the master holds; the pricing computes each minimum exactly over every plan, so the
best L(π) seen is a lower bound over every schedule on the grid, and at convergence it is the
LP bound of the whole model. Integer schedules come from the greedy placement guided by the
LP values (`solver.incumbents`) and then HiGHS's branch and bound over the columns generated
(price and branch); the gap is measured against L, never against HiGHS's own bound over the
generated columns only.

A miss is proven, not assumed: if for some π ≥ 0 the least functions-weighted price of every
job together, Σ_j min [n · Σ_{τ held} π_τ], exceeds Σ_τ π_τ·free_τ, no schedule on the grid
meets every deadline (each would hold at most free_τ at every τ).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import highs
from .columns import Columns, Grid, Task, distinct, grid
from .highs import Status
from .incumbents import incumbent as placed
from .master import Master, objective
from .pricing import OFFERED_PER_JOB, REDUCED_RTOL, Catalogue, Offer, Starts, price, reach

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
# What `solve_many` reports to `progress`, in order (a phase may be skipped).
PHASES = ("fronts", "grid", "greedy schedule", "master", "column generation",
          "branch and bound", "re-check")
# Rounds of column generation at most: each adds a few columns per job.
MAX_ROUNDS = 500
# The master's first columns' nonzeros at most (HiGHS holds some 100 bytes a nonzero): past
# it the greedy schedule stands, measured against the cheapest plans' bound L(0).
MAX_MASTER_NONZEROS = 20_000_000
# Classes (and columns) enumerated at most to complete the master for branch and bound
# (`pricing.reach`).
MAX_REACH = 2_000
MAX_REACH_COLUMNS = 200_000
# Sums of a few thousand costs agree to this much: a gap below it is a gap of 0.
GAP_RTOL = 1e-12
# A proof that some deadline must be missed needs Σ_j min [n·π(held)] above Σ π·free by this
# share of the latter (float sums carry rounding).
MISS_RTOL = 1e-9


@dataclass(frozen=True)
class Answer:
    """The chosen column of each task (functions and kind −1, NaN for a missed one), kept apart
    from how it was found: the objective, the bound L over every plan on the grid, whether a miss
    is proven, HiGHS's last status (`not_run`: no HiGHS was needed) and the model's size."""

    functions: Index
    memory_mb: Index
    kind: Index
    start_s: Array
    time_s: Array
    cost_usd: Array
    penalty_usd: Array
    objective_usd: float
    bound_usd: float
    miss_proven: bool
    solver_status: Status
    columns: int
    check_points: int
    rounds: int
    seconds: float


def penalties(tasks: Sequence[Task]) -> Array:
    """Each task's price for a missed deadline: its fastest plan's cost plus more than the
    front costs of all tasks can vary together (Σ_k (dearest_k − cheapest_k) + mean cheapest),
    so a schedule of front plans never trades a met deadline for a saving; 0 for a task with
    no plan, which misses whatever is chosen."""
    dearest = np.array([t.options.cost_usd[0] if len(t.options) else 0.0 for t in tasks])
    cheapest = np.array([t.options.cost_usd[-1] if len(t.options) else 0.0 for t in tasks])
    has = np.array([len(t.options) > 0 for t in tasks], dtype=bool)
    if not has.any():
        return np.zeros(len(tasks))
    spread = float((dearest - cheapest)[has].sum()) + float(cheapest[has].mean())
    return np.where(has, dearest + spread, 0.0)


def gap_of(objective_usd: float, bound_usd: float) -> float:
    """The relative gap of an objective to a bound (0 when the objective is 0 or below it)."""
    return max(0.0, (objective_usd - bound_usd) / objective_usd) if objective_usd > 0 else 0.0


def proven(objective_usd: float, bound_usd: float, gap: float) -> bool:
    """Whether the gap is within `gap`, float sums' rounding (GAP_RTOL) allowed."""
    return gap_of(objective_usd, bound_usd) <= gap + GAP_RTOL


def _offered(offer: Offer, duals: Array) -> Index:
    """The offered columns with negative reduced cost: at most OFFERED_PER_JOB per job, the
    most negative first."""
    reduced = offer.priced - duals[offer.task]
    good = np.flatnonzero(reduced < -REDUCED_RTOL * (np.abs(offer.cost_usd) + 1e-9))
    if not len(good):
        return good
    order = good[np.lexsort((reduced[good], offer.task[good]))]
    task = offer.task[order]
    rank = np.arange(len(order)) - np.searchsorted(task, task, side="left")
    return order[rank < OFFERED_PER_JOB]


def solve_timetable(
    tasks: Sequence[Task], catalogues: list[Catalogue], *, concurrency: int, slot: float,
    time_limit_s: float, gap: float, reserved: Sequence[tuple[float, float, int]] = (),
    progress: Callable[[str], None] = lambda phase: None,
) -> Answer:
    """The least-penalised schedule of `tasks` on the grid (see the module), around the
    functions `reserved` runs already hold (start, finish, functions); the tasks' kinds index
    `catalogues`. Stops once the gap to L is at most `gap`, or at `time_limit_s` (which may be
    used up already: then the greedy schedule is the answer)."""
    started = time.perf_counter()

    def left() -> float:
        return time_limit_s - (time.perf_counter() - started)

    progress(PHASES[1])
    moments = grid(tasks, slot=slot, concurrency=concurrency, reserved=reserved)
    pairs = _starts(tasks, moments)
    penalty = penalties(tasks)
    zero = np.zeros(len(moments.times))
    first = price(pairs, catalogues, moments.times, zero, moments.free, penalty)
    cols = distinct(_columns(moments, _cheapest_per_start(first.offer)))
    bound, miss_proven, proof = first.bound, first.needs_more > 0, first
    progress(PHASES[2])
    chosen = placed(cols, tasks, moments.free, budget_s=max(0.0, min(time_limit_s / 4, left())))
    best = objective(chosen, cols, penalty)
    status, rounds = Status.NOT_RUN, 0
    size = int((cols.stop - cols.first).sum()) + 2 * len(cols)
    if proven(best, bound, gap) or not len(cols) or left() <= 0 or size > MAX_MASTER_NONZEROS:
        if not proven(best, bound, gap):
            status = Status.TIME_LIMIT  # the master would not be built in time or in memory
        return _answer(chosen, cols, penalty, best, bound, miss_proven, status, moments,
                       rounds, started)
    with highs.lock:  # HiGHS and Pyomo's compiler: one solve at a time in the process
        progress(PHASES[3])
        master = Master(penalty, moments.free)
        master.add(cols)
        progress(PHASES[4])
        values = np.zeros(len(cols))
        while rounds < MAX_ROUNDS and left() > 0:
            rounds += 1
            status, lp, values, prices, duals = master.relaxation(left())
            if status != Status.OPTIMAL:
                break
            if gap_of(lp, bound) <= gap / 2:  # near the bound: is an integer schedule?
                chosen, best = _better(chosen, best, master, tasks, moments.free, values,
                                       penalty, left())
                if proven(best, bound, gap):
                    break  # pricing could only raise a bound that is already enough
            priced = price(pairs, catalogues, moments.times, prices, moments.free, penalty)
            if priced.bound > bound:
                bound, proof = priced.bound, priced
            miss_proven |= priced.needs_more > MISS_RTOL * float(prices @ moments.free)
            if proven(best, bound, gap):
                break
            wanted = _offered(priced.offer, duals)
            if not len(wanted) or not master.add(_columns(moments, priced.offer, wanted)):
                break  # no column prices below its job's dual: the LP bound is reached
        cols = master.columns
        if len(values) and not proven(best, bound, gap):
            chosen, best = _better(chosen, best, master, tasks, moments.free, values, penalty,
                                   left())
        if not proven(best, bound, gap) and left() > 0:
            progress(PHASES[5])
            # Every column that could be in a schedule better than the incumbent, if few:
            # then HiGHS's bound over the master is one over every plan too.
            within = reach(proof, pairs, catalogues, moments.times, penalty, best - bound,
                           most=MAX_REACH, most_columns=MAX_REACH_COLUMNS,
                           until=time.perf_counter() + left() / 2)
            if within is not None:
                master.add(_columns(moments, within))
                cols = master.columns
            incumbent = best
            status, found, mip_bound, mip = master.branch_and_bound(chosen, left(), gap)
            if mip is not None and found < best:
                chosen, best = mip, objective(mip, cols, penalty)
            if within is not None:
                bound = max(bound, min(mip_bound, incumbent))
    return _answer(chosen, cols, penalty, best, bound, miss_proven, status, moments, rounds,
                   started)


def _better(chosen: Index, best: float, master: Master, tasks: Sequence[Task], free: Array,
            values: Array, penalty: Array, seconds: float) -> tuple[Index, float]:
    """The greedy placement guided by the LP's `values` (columns added since: 0), if it beats
    `chosen`."""
    cols = master.columns
    values = np.concatenate((values, np.zeros(len(cols) - len(values))))
    guided = placed(cols, tasks, free, preference=values, budget_s=max(0.0, seconds / 4))
    found = objective(guided, cols, penalty)
    return (guided, found) if found < best else (chosen, best)


def _starts(tasks: Sequence[Task], moments: Grid) -> Starts:
    """Every (job, start) pair of the grid once per kind of the job."""
    count = np.array([len(task.kinds) for task in tasks], dtype=np.int64)
    offset = np.concatenate(([0], np.cumsum(count)))
    every = np.array([kind for task in tasks for kind in task.kinds], dtype=np.int64)
    times = count[moments.task]
    pair = np.repeat(np.arange(len(moments.task)), times)
    rank = np.arange(len(pair)) - np.repeat(np.cumsum(times) - times, times)
    task = moments.task[pair]
    due = np.array([t.due_s for t in tasks])
    return Starts(task, every[offset[task] + rank], moments.start_s[pair], moments.row[pair],
                  due[task])


def _cheapest_per_start(offer: Offer) -> Offer:
    """Of the offers at one job's start, the cheapest: a job of several kinds (servers)
    starts with one column per start, as a job of one kind does; pricing adds the others
    where they help."""
    order = np.lexsort((offer.cost_usd, offer.start_s, offer.task))
    task, start = offer.task[order], offer.start_s[order]
    first = np.r_[True, (task[1:] != task[:-1]) | (start[1:] != start[:-1])] if len(order) \
        else np.zeros(0, dtype=np.bool_)
    return offer.take(np.sort(order[first]))


def _columns(moments: Grid, offer: Offer, which: Index | None = None) -> Columns:
    pick = slice(None) if which is None else which
    return moments.columns(offer.task[pick], offer.kind[pick], offer.functions[pick],
                           offer.memory_mb[pick], offer.start_s[pick], offer.time_s[pick],
                           offer.cost_usd[pick])


def _answer(chosen: Index, cols: Columns, penalty: Array, best: float, bound: float,
            miss_proven: bool, status: Status, moments: Grid, rounds: int,
            started: float) -> Answer:
    taken = chosen >= 0
    pick = chosen[taken]
    functions = np.full(len(chosen), -1, dtype=np.int64)
    memory = np.full(len(chosen), -1, dtype=np.int64)
    kind = np.full(len(chosen), -1, dtype=np.int64)
    start, seconds, cost = (np.full(len(chosen), math.nan) for _ in range(3))
    functions[taken], memory[taken] = cols.functions[pick], cols.memory_mb[pick]
    kind[taken] = cols.kind[pick]
    start[taken], seconds[taken], cost[taken] = (cols.start_s[pick], cols.time_s[pick],
                                                 cols.cost_usd[pick])
    return Answer(functions, memory, kind, start, seconds, cost, penalty, best, bound,
                  miss_proven, status, len(cols), len(moments.times), rounds,
                  time.perf_counter() - started)
