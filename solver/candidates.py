"""Candidate plans: the grid inside the bounds, enumerated by vectorised branch and bound.

Each row `n` starts as one interval of memory indices. An interval is split into pieces; each
piece's right end is evaluated exactly (a real plan, and the incumbent if it is the cheapest
feasible one so far) and gives, through `models.bounds.cost_lower_bound`, a floor for every
plan in the piece. Pieces that miss the deadline even at their right end, or whose floor is
above the incumbent, are dropped; small pieces are evaluated point by point. The bound only
uses monotonicity that `models.bounds.facts()` proved, so no optimal plan is ever dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from lambdadnn.models import bounds as model_bounds
from lambdadnn.models import performance as model

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]

PIECES = 16
LEAF = 24
# Relative slack when pruning by cost: far above float rounding, far below the 1e-12 tie rule's
# reach, so plans tied with the optimum are always kept.
PRUNE_RTOL = 1e-9
TIE_RTOL = 1e-12


@dataclass(frozen=True)
class Candidates:
    """Exactly evaluated feasible plans (parallel arrays) and how many plans were evaluated."""

    functions: Index
    memory_index: Index
    time: Array
    cost: Array
    evaluated: int


def _split(n: Index, lo: Index, hi: Index) -> tuple[Index, Index, Index]:
    """Cut each interval [lo, hi] into up to PIECES contiguous pieces."""
    width = hi - lo + 1
    count = np.minimum(width, PIECES)
    owner = np.repeat(np.arange(len(n)), count)
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    starts = lo[owner] + (offset * width[owner]) // count[owner]
    ends = lo[owner] + ((offset + 1) * width[owner]) // count[owner] - 1
    return n[owner], starts, ends


def _expand(n: Index, lo: Index, hi: Index) -> tuple[Index, Index]:
    """Every point of each interval [lo, hi]."""
    width = hi - lo + 1
    owner = np.repeat(np.arange(len(n)), width)
    offset = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width)
    return n[owner], lo[owner] + offset


def enumerate_candidates(
    values: tuple[float, ...], memory: Array, rows: Index, m_lo: int, m_hi: int,
    deadline_s: float, noise: model.NoiseTerms | None = None,
) -> Candidates:
    """Every feasible plan that could be (tied with) the cheapest, plus those seen on the way.

    `time` in the result is the time checked against the deadline: the model's, or under a
    guarantee its quantile (`noise`); the cost is always the expected one.
    """
    checked = model.deadline_figure(noise)
    names = tuple(dict.fromkeys(("time", "restarts", "cost", checked)))
    found_n: list[Index] = []
    found_m: list[Index] = []
    found_t: list[Array] = []
    found_c: list[Array] = []
    evaluated = 0
    incumbent = np.inf

    def record(n: Index, index: Index) -> dict[str, Array]:
        nonlocal evaluated, incumbent
        figures = model.figures(values, n.astype(np.float64), memory[index], names, noise)
        evaluated += len(n)
        feasible = figures[checked] <= deadline_s
        found_n.append(n[feasible])
        found_m.append(index[feasible])
        found_t.append(figures[checked][feasible])
        found_c.append(figures["cost"][feasible])
        if feasible.any():
            incumbent = min(incumbent, float(figures["cost"][feasible].min()))
        return figures

    n = rows.astype(np.int64)
    lo = np.full(len(n), m_lo, dtype=np.int64)
    hi = np.full(len(n), m_hi, dtype=np.int64)
    while len(n):
        leaf = hi - lo + 1 <= LEAF
        if leaf.any():
            record(*_expand(n[leaf], lo[leaf], hi[leaf]))
        n, lo, hi = _split(n[~leaf], lo[~leaf], hi[~leaf])
        if not len(n):
            break
        at_end = record(n, hi)
        floor = model_bounds.cost_lower_bound(
            values, n.astype(np.float64), memory[lo], at_end["time"], at_end["restarts"]
        )
        keep = (at_end[checked] <= deadline_s) & (floor <= incumbent * (1 + PRUNE_RTOL))
        keep &= hi > lo  # a one-point piece was evaluated exactly just now
        n, lo, hi = n[keep], lo[keep], hi[keep]
    return Candidates(
        np.concatenate(found_n), np.concatenate(found_m), np.concatenate(found_t),
        np.concatenate(found_c), evaluated,
    )


def pareto(time: Array, cost: Array, functions: Index, memory: Index) -> Index:
    """Indices of the plans not dominated in (time, cost), sorted by time.

    Among plans equal in both, the one with fewer functions, then less memory, is kept, so the
    front carries DESIGN.md's tie order.
    """
    order = np.lexsort((memory, functions, cost, time))
    sorted_cost = cost[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], sorted_cost[:-1])))
    return order[sorted_cost < best_before]


def canonical(time: Array, cost: Array, functions: Index, memory: Index) -> int:
    """DESIGN.md's optimum among feasible plans: least cost; within 1e-12, least T, n, m."""
    tied = np.flatnonzero(cost <= cost.min() * (1 + TIE_RTOL))
    order = np.lexsort((memory[tied], functions[tied], time[tied]))
    return int(tied[order[0]])
