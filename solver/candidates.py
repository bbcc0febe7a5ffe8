"""Candidate plans: the grid inside the bounds, enumerated by vectorised branch and bound.

Each row `n` starts as one interval of memory indices. An interval is split into pieces; each
piece's right end is evaluated exactly (a real plan, and the incumbent if it is the cheapest
feasible one so far) and gives, through `models.bounds.cost_lower_bound`, a floor for every
plan in the piece. Pieces that miss the deadline even at their right end, or whose floor is
above the incumbent, are dropped; small pieces are evaluated point by point. The bound only
uses monotonicity that `models.derivation.facts()` proved, so no optimal plan is ever dropped
(and float rounding cannot break it: T is built of operations each monotone in m).

The model is evaluated on (interval × piece) arrays, `n` one column per interval, so the terms
that depend on n alone are computed once per interval rather than once per plan; the figures
are the same to the last bit as for one plan at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..models import bounds as model_bounds
from ..models import performance as model

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]

PIECES = 8
LEAF = 16  # ≥ PIECES: an interval wider than a leaf always splits into PIECES pieces
# Relative slack when pruning by cost: far above float rounding, far below the 1e-12 tie rule's
# reach, so plans tied with the optimum are always kept.
PRUNE_RTOL = 1e-9
TIE_RTOL = 1e-12
_PIECE = np.arange(PIECES)
_LEAF_POINT = np.arange(LEAF)


@dataclass(frozen=True)
class Candidates:
    """Exactly evaluated feasible plans (parallel arrays) and how many plans were evaluated."""

    functions: Index
    memory_index: Index
    time: Array
    cost: Array
    evaluated: int
    server: Index | None = None  # each plan's server, when the rows had one


def enumerate_candidates(
    values: tuple[float, ...], memory: Array, rows: Index, m_lo: int | Index, row_hi: Index,
    deadline_s: float, noise: model.NoiseTerms | None = None, *, ceiling: float | None = None,
    weight: float = 0.0, above: float = np.inf, server: Index | None = None,
    beaten: Beaten | None = None, front_only: bool = False, tops_first: bool = False,
) -> Candidates:
    """Every feasible plan that could be (tied with) the cheapest, plus those seen on the way.

    With a `ceiling` the incumbent stays there: every feasible plan that could cost at most
    `ceiling` is kept, so the result holds the whole (time, cost) Pareto front below it.

    Row `rows[i]` spans the memory indices `m_lo..row_hi[i]` (a vCPU limit lowers the top
    of the rows with many functions; `m_lo` may be one per row, for a search that starts
    from pieces of rows). With `tops_first` each interval is first evaluated at its top
    alone (one plan) and pruned whole before it is split: for intervals another bound has
    already cut down, which are then mostly dropped at one plan each rather than PIECES.

    With a `weight` w ≥ 0 the plans are ranked by cost + w·n instead of the cost: a schedule
    prices each function it holds (`solver.pricing`). The bound stays valid, n being fixed
    along a row; the result holds every plan that could be (tied with) the least of it, of
    those ranked at most `above` (a plan known to reach it: the search starts there).

    `time` in the result is the time checked against the deadline: the model's, or under a
    guarantee its quantile (`noise`); the cost is always the expected one.

    With `server`, row i runs on parameter server `server[i]`: the parameters that differ
    between servers are arrays in `values`, one entry per server (`pipeline` chooses among
    servers so, in one search with one incumbent), and the result says each plan's server.

    With `beaten` (plans known on other servers), a piece is dropped when a known plan with
    at most its functions is at least as fast as its fastest plan and cheaper than its floor:
    every plan in it is dominated in (time, cost, functions), so no schedule needs it.

    With `front_only` (and a `ceiling`), only the (time, cost) Pareto front of the plans no
    known plan beats is wanted: a piece is also dropped when a plan already found (and not
    beaten) is at least as fast as its fastest plan and cheaper than its floor. The result
    then holds that front, not every plan below `ceiling`.
    """
    checked = model.deadline_figure(noise)
    names = tuple(dict.fromkeys(("time", "restarts", "cost", checked)))
    found_n: list[Index] = []
    found_m: list[Index] = []
    found_t: list[Array] = []
    found_c: list[Array] = []
    evaluated = 0
    incumbent = above if ceiling is None else ceiling

    found_s: list[Index] = []
    stair = _Staircase()

    def on(which: Index | None) -> tuple[float, ...]:
        """The parameters of rows whose servers are `which` (as a column)."""
        return values if which is None else model.at(values, which, column=True)

    def record(n: Index, index: Index, real: npt.NDArray[np.bool_],
               which: Index | None) -> dict[str, Array]:
        """Evaluate plans n[i] × memory[index[i, j]]; keep the `real` ones that are feasible."""
        nonlocal evaluated, incumbent
        figures = model.figures(on(which), n[:, None], memory[index], names, noise)
        evaluated += int(real.sum())
        feasible = (figures[checked] <= deadline_s) & real
        if which is not None:
            found_s.append(np.broadcast_to(which[:, None], index.shape)[feasible])
        found_n.append(np.broadcast_to(n[:, None], index.shape)[feasible])
        found_m.append(index[feasible])
        found_t.append(figures[checked][feasible])
        found_c.append(figures["cost"][feasible])
        if front_only:  # only plans no known one beats: the front is of those
            unbeaten = (slice(None) if beaten is None else
                        ~(beaten.least(found_n[-1], found_t[-1]) < found_c[-1]))
            stair.add(found_t[-1][unbeaten], found_c[-1][unbeaten])
        if feasible.any() and ceiling is None:
            ranked = found_c[-1] + weight * found_n[-1]
            incumbent = min(incumbent, float(ranked.min()))
        return figures

    n = rows.astype(np.int64)
    lo = np.broadcast_to(np.asarray(m_lo, dtype=np.int64), n.shape).copy()
    hi = row_hi.astype(np.int64)
    which = None if server is None else server.astype(np.int64)
    whole = tops_first
    while len(n):
        leaf = hi - lo + 1 <= LEAF
        if leaf.any() and not whole:
            record(n[leaf], *_leaf_points(lo[leaf], hi[leaf]),
                   None if which is None else which[leaf])
            n, lo, hi = n[~leaf], lo[~leaf], hi[~leaf]
            which = None if which is None else which[~leaf]
            if not len(n):
                break
        starts, ends = (lo[:, None], hi[:, None]) if whole else pieces(lo, hi)
        whole = False
        at_end = record(n, ends, np.ones(ends.shape, dtype=np.bool_), which)
        floor = _floor(on(which), memory, n, starts, at_end, weight)
        keep = (at_end[checked] <= deadline_s) & (floor <= incumbent * (1 + PRUNE_RTOL))
        keep &= ends > starts  # a one-point piece was evaluated exactly just now
        if beaten is not None:
            known = beaten.least(np.broadcast_to(n[:, None], keep.shape), at_end[checked])
            keep &= ~(known < floor * (1 - PRUNE_RTOL))
        if front_only:
            keep &= ~(stair.least(at_end[checked]) < floor * (1 - PRUNE_RTOL))
        n = np.broadcast_to(n[:, None], keep.shape)[keep]
        if which is not None:
            which = np.broadcast_to(which[:, None], keep.shape)[keep]
        lo, hi = starts[keep], ends[keep]
    return Candidates(
        np.concatenate(found_n), np.concatenate(found_m), np.concatenate(found_t),
        np.concatenate(found_c), evaluated,
        None if server is None else np.concatenate(found_s or [np.empty(0, np.int64)]),
    )


class _Staircase:
    """The (time, cost) front of the plans seen so far: asked, the least cost of one taking at
    most t (+∞: none)."""

    def __init__(self) -> None:
        self.times: Array = np.empty(0)
        self.costs: Array = np.empty(0)

    def add(self, time: Array, cost: Array) -> None:
        if not len(time):
            return
        time, cost = np.concatenate((self.times, time)), np.concatenate((self.costs, cost))
        none = np.zeros(len(time), dtype=np.int64)
        keep = pareto(time, cost, none, none)
        self.times, self.costs = time[keep], cost[keep]

    def least(self, time: Array) -> Array:
        return _on_stairs(self.times, self.costs, time)


def _on_stairs(times: Array, costs: Array, time: Array) -> Array:
    """The cost of a staircase (`times` ascending, `costs` the least up to each) at each
    `time`: +∞ before its first step."""
    if not len(times):
        return np.full(np.shape(time), np.inf)
    at = np.searchsorted(times, time, side="right") - 1
    return np.where(at >= 0, costs[np.maximum(at, 0)], np.inf)


BEATEN_BUCKETS = 32  # function counts at which `Beaten` keeps a staircase


@dataclass(frozen=True)
class Beaten:
    """Known plans, asked: the least cost of one with at most n functions taking at most t.

    The plans with at most each of a few function counts (`BEATEN_BUCKETS` quantiles) are
    kept as a staircase (time ascending, running least cost); a question at n is answered
    from the largest count ≤ n, so the answer is a real plan's cost, at least the exact least.
    """

    counts: Index
    offsets: Index
    times: Array
    costs: Array

    @classmethod
    def of(cls, time: Array, cost: Array, functions: Index) -> Beaten:
        counts = np.unique(np.quantile(functions, np.linspace(0, 1, BEATEN_BUCKETS),
                                       method="lower").astype(np.int64))
        times, costs, offsets = [], [], [0]
        for count in counts.tolist():
            mine = np.flatnonzero(functions <= count)
            order = mine[np.argsort(time[mine], kind="stable")]
            times.append(time[order])
            costs.append(np.minimum.accumulate(cost[order]))
            offsets.append(offsets[-1] + len(order))
        return cls(counts, np.array(offsets, dtype=np.int64), np.concatenate(times),
                   np.concatenate(costs))

    def least(self, functions: Index, time: Array) -> Array:
        """The least known cost with at most `functions` taking at most `time` (+∞: none)."""
        out = np.full(np.shape(time), np.inf)
        bucket = np.searchsorted(self.counts, functions, side="right") - 1
        for b in np.unique(bucket[bucket >= 0]).tolist():
            mine = bucket == b
            lo, hi = int(self.offsets[b]), int(self.offsets[b + 1])
            out[mine] = _on_stairs(self.times[lo:hi], self.costs[lo:hi], time[mine])
        return out


def _leaf_points(lo: Index, hi: Index) -> tuple[Index, npt.NDArray[np.bool_]]:
    """Every memory index of each small interval [lo, hi], padded to LEAF with its last
    (padding marked not real)."""
    points = lo[:, None] + _LEAF_POINT
    return np.minimum(points, hi[:, None]), points <= hi[:, None]


def pieces(lo: Index, hi: Index) -> tuple[Index, Index]:
    """PIECES contiguous pieces per interval, one row each: [starts, ends] (inclusive)."""
    width = (hi - lo + 1)[:, None]
    return (lo[:, None] + (_PIECE * width) // PIECES,
            lo[:, None] + ((_PIECE + 1) * width) // PIECES - 1)


def _floor(values: tuple[float, ...], memory: Array, n: Index, starts: Index,
           at_end: dict[str, Array], weight: float | Array) -> Array:
    """The least cost + weight·n of any plan in each piece (`cost_lower_bound`)."""
    cost: Array = model_bounds.cost_lower_bound(
        values, n[:, None].astype(np.float64), memory[starts], at_end["time"],
        at_end["restarts"],
    )
    return cost + weight * n[:, None]


def pareto(time: Array, cost: Array, functions: Index, memory: Index) -> Index:
    """Indices of the plans not dominated in (time, cost), sorted by time.

    Among plans equal in both, the one with fewer functions, then less memory, is kept, so the
    front carries MODEL.md's tie order.
    """
    order = np.lexsort((memory, functions, cost, time))
    sorted_cost = cost[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], sorted_cost[:-1])))
    return order[sorted_cost < best_before]


def canonical(time: Array, cost: Array, functions: Index, memory: Index) -> int:
    """MODEL.md's optimum among feasible plans: least cost; within 1e-12, least T, n, m."""
    tied = np.flatnonzero(cost <= cost.min() * (1 + TIE_RTOL))
    order = np.lexsort((memory[tied], functions[tied], time[tied]))
    return int(tied[order[0]])


def _choices(best: int, rivals: Index, value: Array, floor: float) -> tuple[Index, Array]:
    """`best` then `rivals`, with their excess of `value` over `floor` in units of TIE_RTOL."""
    chosen = np.concatenate(([best], rivals)).astype(np.int64)
    if not len(rivals):
        return chosen, np.zeros(1)
    objective = (value[chosen] - floor) / (floor * TIE_RTOL)
    objective[0] = 0.0
    return chosen, objective


def cheapest_choices(
    time: Array, cost: Array, functions: Index, memory: Index
) -> tuple[Index, Array]:
    """The feasible plans left to choose among, and the objective that makes the tie rule exact.

    The tie rule's plan (`canonical`) stands for every plan within TIE_RTOL of the least cost:
    those cost the same by the rule and are no faster, so they are no choice. The rest of the
    Pareto front costs more than that by more than the rule's margin; the objective is a
    plan's cost above the least in units of the margin: 0 for the rule's plan, above 1 for the
    others. Returns indices into the arrays (the rule's plan first) and the objective.
    """
    best = canonical(time, cost, functions, memory)
    front = pareto(time, cost, functions, memory)
    least = float(cost.min())
    return _choices(best, front[cost[front] > least * (1 + TIE_RTOL)], cost, least)


def fastest_choices(
    time: Array, cost: Array, functions: Index, memory: Index
) -> tuple[Index, Array]:
    """The fastest plan and the Pareto plans within PRUNE_RTOL of its time (no plan meets the
    deadline), with their time above the fastest in units of TIE_RTOL as the objective.

    Equal times go to the cheaper plan, then fewer functions, then less memory (the Pareto
    front's order), so its first plan is MODEL.md's answer and every other is slower: at
    least one ulp, ≥ 1e-4 in these units.
    """
    front = pareto(time, cost, functions, memory)
    fastest = float(time[front[0]])
    rivals = front[1:][time[front[1:]] <= fastest * (1 + PRUNE_RTOL)]
    return _choices(int(front[0]), rivals, time, fastest)


@dataclass(frozen=True)
class Least:
    """For each query, the plan of least cost + weight·n found below its `above` (found false:
    none is, or none meets its time), as parallel arrays."""

    found: npt.NDArray[np.bool_]
    functions: Index
    memory_index: Index
    time: Array
    cost: Array


def least_priced(
    values: tuple[float, ...], memory: Array, m_lo: int, functions: Index, row_hi: Index,
    query: Index, within: Array, weight: Array, above: Array,
    noise: model.NoiseTerms | None = None,
) -> Least:
    """Many searches at once, each `enumerate_candidates(weight=...)` with its own deadline
    `within[q]`, weight and starting incumbent `above[q]`: interval i is row `functions[i]`
    (memory indices m_lo..row_hi[i]) of query `query[i]`. The same pruning, per query."""
    checked = model.deadline_figure(noise)
    names = tuple(dict.fromkeys(("time", "restarts", "cost", checked)))
    queries = len(within)
    incumbent = above.astype(np.float64).copy()
    found = np.zeros(queries, dtype=np.bool_)
    best_n = np.zeros(queries, dtype=np.int64)
    best_m = np.zeros(queries, dtype=np.int64)
    best_t = np.zeros(queries)
    best_c = np.zeros(queries)

    def record(q: Index, n: Index, index: Index, real: npt.NDArray[np.bool_]
               ) -> dict[str, Array]:
        figures = model.figures(values, n[:, None], memory[index], names, noise)
        owner = np.broadcast_to(q[:, None], index.shape)
        ranked = figures["cost"] + weight[q][:, None] * n[:, None]
        good = real & (figures[checked] <= within[q][:, None]) & (ranked < incumbent[owner])
        if good.any():
            who, rank = owner[good], ranked[good]
            order = np.lexsort((figures[checked][good], rank, who))
            first = order[np.r_[True, who[order][1:] != who[order][:-1]]]
            winner = who[first]
            better = rank[first] < incumbent[winner]
            winner, first = winner[better], first[better]
            incumbent[winner] = rank[first]
            found[winner] = True
            best_n[winner] = np.broadcast_to(n[:, None], index.shape)[good][first]
            best_m[winner] = index[good][first]
            best_t[winner] = figures[checked][good][first]
            best_c[winner] = figures["cost"][good][first]
        return figures

    q = query.astype(np.int64)
    n = functions.astype(np.int64)
    lo = np.full(len(n), m_lo, dtype=np.int64)
    hi = row_hi.astype(np.int64)
    while len(n):
        leaf = hi - lo + 1 <= LEAF
        if leaf.any():
            record(q[leaf], n[leaf], *_leaf_points(lo[leaf], hi[leaf]))
            q, n, lo, hi = q[~leaf], n[~leaf], lo[~leaf], hi[~leaf]
            if not len(n):
                break
        starts, ends = pieces(lo, hi)
        at_end = record(q, n, ends, np.ones(ends.shape, dtype=np.bool_))
        floor = _floor(values, memory, n, starts, at_end, weight[q][:, None])
        keep = (at_end[checked] <= within[q][:, None])
        keep &= floor <= incumbent[q][:, None] * (1 + PRUNE_RTOL)
        keep &= ends > starts
        q = np.broadcast_to(q[:, None], keep.shape)[keep]
        n = np.broadcast_to(n[:, None], keep.shape)[keep]
        lo, hi = starts[keep], ends[keep]
    return Least(found, best_n, best_m, best_t, best_c)
