"""Pricing for `solve_many`'s column generation: the cheapest (plan, start) of every job once
each moment's functions carry a price, over every plan, exactly.

With prices π_r ≥ 0 on the capacity rows (moments τ_r), a column — job j on plan p = (n, m)
from start a — costs c_p + n_p · Σ_{a ≤ τ_r < a + T_p} π_r. For one start, the rows priced
after a cut the plans into classes by the rows they reach: a plan with T ≤ e_k = τ_{k+1} − a
reaches at most the first k of them, so its priced cost is at most c + W_k·n (W_k the prices
of the rows reached), and the least priced cost of the job at that start is

    min_k  min { c_p + W_k · n_p  :  T_p ≤ e_k }            (the last e_k: the due time − a).

Each inner minimum is a `solve()`-like search, cost + W·n for a deadline e_k: `Catalogue.least`
runs the same exact branch and bound (`candidates.enumerate_candidates(weight=W)`). Most are
not needed: c ≥ (the cheapest plan within e_k) and n ≥ (the fewest functions within e_k),
two look-ups (the job's (T, c) front and each n's fastest time), so c + W·n is at least their
sum; a class whose floor is not below the best column already found cannot hold a better
one and is skipped. The result is exact, and every figure is a lower bound however few
classes are searched, which is what the Lagrangian bound needs (`Priced.bound`).

Float rounding goes the bound's way: each e_k is rounded up by one ulp (a plan that just
reaches the next row is priced without it: lower), and every column offered is re-priced
exactly from its rows and re-tested against its due time (`columns.meets`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..models import bounds as model_bounds
from ..models.noise import PlanningNoise
from .candidates import Least, enumerate_candidates, least_priced
from .instance import Instance
from .options import Options

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
# A column enters the master when its reduced cost is below −REDUCED_RTOL·(its cost + 1e-9).
REDUCED_RTOL = 1e-9
# A class is searched when its floor is below the best column found by more than this share.
SEARCH_RTOL = 1e-12
# Columns offered per job and round, cheapest priced first.
OFFERED_PER_JOB = 3


@dataclass
class Catalogue:
    """The plans of one kind of job (an instance without its deadline) as the pricing asks
    for them: the cheapest within a time (its front), the fewest functions within a time
    (each n's fastest time), and the least of cost + W·n within a time (branch and bound,
    remembered for the call)."""

    front: Options
    values: tuple[float, ...]
    memory: Array
    noise: PlanningNoise | None
    rows: Index  # the numbers of functions that can finish, ascending
    row_hi: Index
    m_lo: int
    envelope: Array  # each row's fastest time (at its largest useful memory)
    fewest_time: Array  # the fastest time of any n ≤ rows[i]: non-increasing
    searched: dict[tuple[float, float], tuple[int, int, float, float] | None] = field(
        default_factory=dict)

    @classmethod
    def of(cls, instance: Instance, front: Options, noise: PlanningNoise | None,
           max_functions: int, slowest_s: float) -> Catalogue:
        """The catalogue of `instance` (at its fit's adverse corner already) for plans of at
        most `max_functions` functions taking at most `slowest_s`."""
        values = instance.values()
        memory = instance.platform.memory.values()
        box = model_bounds.box(
            values, memory, max_functions=max_functions, min_memory_mb=instance.min_memory_mb,
            deadline_s=slowest_s, noise=noise, vcpu_memory_mb=instance.platform.vcpu_memory_mb,
        )
        if box is None or not len(front):
            empty = np.empty(0, dtype=np.int64)
            return cls(front, values, memory, noise, empty, empty, 0, np.empty(0), np.empty(0))
        return cls(front, values, memory, noise, box.functions, box.row_hi, box.m_lo,
                   box.envelope_time, np.minimum.accumulate(box.envelope_time))

    def cheapest(self, within: Array) -> Index:
        """The front's index of the cheapest plan taking at most each `within` (-1: none)."""
        return np.searchsorted(self.front.time_s, within, side="right") - 1

    def fewest(self, within: Array) -> Array:
        """The fewest functions of any plan taking at most each `within` (+∞: none)."""
        at = np.searchsorted(-self.fewest_time, -within, side="left")
        padded = np.append(self.rows.astype(np.float64), math.inf)
        return padded[np.minimum(at, len(self.rows))]

    def least(self, within: Array, weight: Array) -> list[tuple[int, int, float, float] | None]:
        """For each (within, weight), the plan (n, m, time, cost) of least cost + weight·n
        taking at most `within`, exactly; None when none does. The searches not already made
        in this call run together (`candidates.least_priced`)."""
        keys = list(zip(within.tolist(), weight.tolist(), strict=True))
        todo = list(dict.fromkeys(key for key in keys if key not in self.searched))
        if todo:
            self._search(np.array([k[0] for k in todo]), np.array([k[1] for k in todo]), todo)
        return [self.searched[key] for key in keys]

    def _search(self, within: Array, weight: Array, keys: list[tuple[float, float]]) -> None:
        at = self.cheapest(within)
        front = self.front
        # The front's plan is the cheapest within its time: a plan with as many functions or
        # more ranks no lower, so only rows with fewer can beat it, and only below its rank.
        cap = np.where(at >= 0, front.functions[np.maximum(at, 0)], 0)
        above = np.where(at >= 0, front.cost_usd[np.maximum(at, 0)] + weight * cap, math.inf)
        reach = (self.envelope[None, :] <= within[:, None]) & (self.rows[None, :] < cap[:, None])
        reach &= (weight > 0)[:, None]
        query, row = np.nonzero(reach)
        found = enumerate_least(self, query, row, within, weight, above * (1 + SEARCH_RTOL))
        for i, key in enumerate(keys):
            if at[i] < 0:
                self.searched[key] = None
            elif found.found[i]:
                self.searched[key] = (int(found.functions[i]),
                                      int(self.memory[found.memory_index[i]]),
                                      float(found.time[i]), float(found.cost[i]))
            else:
                j = int(at[i])
                self.searched[key] = (int(front.functions[j]), int(front.memory_mb[j]),
                                      float(front.time_s[j]), float(front.cost_usd[j]))


def enumerate_least(catalogue: Catalogue, query: Index, row: Index, within: Array,
                    weight: Array, above: Array) -> Least:
    """`candidates.least_priced` over the catalogue's rows `row` of each query."""
    return least_priced(catalogue.values, catalogue.memory, catalogue.m_lo,
                        catalogue.rows[row], catalogue.row_hi[row], query, within, weight,
                        above, catalogue.noise)


@dataclass(frozen=True)
class Offer:
    """Columns the pricing found, as parallel arrays (task, start, its row, n, m, T, c, the
    kind the plan is of), each with its priced cost."""

    task: Index
    start_s: Array
    row: Index
    functions: Index
    memory_mb: Index
    time_s: Array
    cost_usd: Array
    priced: Array
    kind: Index

    def __len__(self) -> int:
        return len(self.task)

    def take(self, which: Index | npt.NDArray[np.bool_]) -> Offer:
        return Offer(*(getattr(self, f)[which] for f in _OFFER_FIELDS))


_OFFER_FIELDS = ("task", "start_s", "row", "functions", "memory_mb", "time_s", "cost_usd",
                 "priced", "kind")


@dataclass(frozen=True)
class Classes:
    """The classes of one pricing: each (job, start) pair's class k as the plans taking at
    most `within` priced at `weight` per function, with a lower bound on its least (`low`)."""

    pair: Index
    kind: Index
    within: Array
    weight: Array
    low: Array


@dataclass(frozen=True)
class Priced:
    """One round of pricing at `prices`: each job's least priced cost (a lower bound, exact
    when every class that could hold a cheaper column was searched), the columns found, the
    Lagrangian bound they give, and the classes (`reach` reads them)."""

    prices: Array
    least: Array
    offer: Offer
    bound: float
    needs_more: float  # Σ_j min priced functions − Σ_r π_r·free_r: > 0 proves a miss
    classes: Classes


@dataclass(frozen=True)
class Starts:
    """Every (job, start) pair of the grid: the job, its kind, the start, its row, the due
    time."""

    task: Index
    kind: Index
    start_s: Array
    row: Index
    due_s: Array


def price(starts: Starts, catalogues: list[Catalogue], times: Array, prices: Array,
          free: Array, penalty: Array) -> Priced:
    """Price every job's columns at row prices `prices` (≥ 0) on the rows at `times`."""
    prefix = np.concatenate(([0.0], np.cumsum(prices)))
    priced_rows = np.flatnonzero(prices > 0)
    after = np.searchsorted(priced_rows, starts.row, side="right")
    before_due = np.searchsorted(times[priced_rows], starts.due_s, side="left")
    classes = np.maximum(before_due - after, 0) + 1
    pair = np.repeat(np.arange(len(starts.task)), classes)
    k = np.arange(len(pair)) - np.repeat(np.cumsum(classes) - classes, classes)
    start, row, due = starts.start_s[pair], starts.row[pair], starts.due_s[pair]
    last = k == classes[pair] - 1
    boundary = priced_rows[np.minimum(after[pair] + k, max(len(priced_rows) - 1, 0))] \
        if len(priced_rows) else np.zeros(len(pair), dtype=np.int64)
    limit = np.where(last, due, times[boundary] if len(times) else due) - start
    within = np.nextafter(limit, math.inf)
    reached = np.where(k == 0, row + 1,
                       priced_rows[np.maximum(after[pair] + k - 1, 0)] + 1
                       if len(priced_rows) else row + 1)
    weight = np.maximum(prefix[reached] - prefix[row], 0.0)
    floor = np.full(len(pair), math.inf)
    fewest = np.full(len(pair), math.inf)
    front_at = np.full(len(pair), -1, dtype=np.int64)
    kinds = starts.kind[pair]
    for kind, catalogue in enumerate(catalogues):
        mine = np.flatnonzero(kinds == kind)
        if not len(mine) or not len(catalogue.front):
            continue
        at = catalogue.cheapest(within[mine])
        some = at >= 0
        front_at[mine[some]] = at[some]
        fewest[mine] = catalogue.fewest(within[mine])
        floor[mine[some]] = (catalogue.front.cost_usd[at[some]]
                             + weight[mine[some]] * fewest[mine[some]])
    # The front's cheapest plan of each class is a real column: price it exactly.
    found = _columns(starts, catalogues, pair, front_at, times, prefix)
    tasks = len(penalty)
    best = np.full(tasks, math.inf)
    if len(found):
        np.minimum.at(best, found.task, found.priced)
    # Search the classes whose floor is below the best column found, in waves: each job's
    # lowest floor not yet searched, until no floor is below the job's best.
    bound_of = floor.copy()
    job_of = starts.task[pair]
    wanted = np.flatnonzero(floor < best[job_of] * (1 - SEARCH_RTOL))
    wanted = wanted[np.lexsort((floor[wanted], job_of[wanted]))]
    extras = [found]
    while len(wanted):
        wanted = wanted[floor[wanted] < best[job_of[wanted]] * (1 - SEARCH_RTOL)]
        owner = job_of[wanted]
        rank = np.arange(len(wanted)) - np.searchsorted(owner, owner, side="left")
        wave, wanted = wanted[rank < 1], wanted[rank >= 1]
        if not len(wave):
            break
        extra = _searched(starts, catalogues, pair, kinds, within, weight, wave, bound_of,
                          times, prefix)
        extras.append(extra)
        np.minimum.at(best, extra.task, extra.priced)
    found = _join(extras)
    least = best.copy()
    np.minimum.at(least, starts.task[pair], bound_of)
    held = np.full(tasks, math.inf)
    np.minimum.at(held, starts.task[pair],
                  np.where(np.isfinite(fewest), weight * np.where(np.isfinite(fewest), fewest, 0),
                           math.inf))
    bound = float(np.minimum(least, penalty).sum() - prices @ free)
    reachable = np.isfinite(held)
    needs_more = float(held[reachable].sum() - prices @ free) if reachable.all() else math.inf
    return Priced(prices, least, found, bound, needs_more,
                  Classes(pair, kinds, within, weight, bound_of))


def reach(priced: Priced, starts: Starts, catalogues: list[Catalogue], times: Array,
          penalty: Array, slack: float, *, most: int, most_columns: int,
          until: float) -> Offer | None:
    """Every column whose priced cost is within `slack` of its job's least (or its penalty):
    with `slack` the incumbent's objective less the bound L, no other column can be in a
    better schedule (a schedule pays at least L plus each job's priced excess over its
    least). None when more than `most` classes or `most_columns` columns would have to be
    enumerated, or when `until` (a `time.perf_counter()` reading) passes first."""
    top = np.minimum(priced.least, penalty) + slack
    classes = priced.classes
    job_of = starts.task[classes.pair]
    open_ = np.flatnonzero(classes.low <= top[job_of] * (1 + SEARCH_RTOL))
    if len(open_) > most:
        return None
    prefix = np.concatenate(([0.0], np.cumsum(priced.prices)))
    parts: list[Offer] = []
    total = 0
    for i in open_.tolist():
        if time.perf_counter() > until or total > most_columns:
            return None
        catalogue = catalogues[int(classes.kind[i])]
        within, weight = float(classes.within[i]), float(classes.weight[i])
        rows = np.flatnonzero(catalogue.envelope <= within)
        if not len(rows):
            continue
        ceiling = float(top[job_of[i]]) * (1 + SEARCH_RTOL)
        found = enumerate_candidates(catalogue.values, catalogue.memory, catalogue.rows[rows],
                                     catalogue.m_lo, catalogue.row_hi[rows], within,
                                     catalogue.noise, ceiling=ceiling, weight=weight)
        near = np.flatnonzero(found.cost + weight * found.functions <= ceiling)
        if len(near):
            offer = _exact(starts, np.full(len(near), classes.pair[i]),
                           found.functions[near], catalogue.memory[found.memory_index[near]]
                           .astype(np.int64), found.time[near], found.cost[near], times, prefix)
            offer = offer.take(offer.priced <= top[offer.task] * (1 + SEARCH_RTOL))
            parts.append(_cheapest_per_footprint(offer, times))
            total += len(parts[-1])
    return _join(parts) if parts else None


def _searched(starts: Starts, catalogues: list[Catalogue], pair: Index, kinds: Index,
              within: Array, weight: Array, wave: Index, bound_of: Array, times: Array,
              prefix: Array) -> Offer:
    """Search the classes `wave` (their bounds become exact) and price the plans found."""
    n = np.zeros(len(wave), dtype=np.int64)
    m = np.zeros(len(wave), dtype=np.int64)
    t = np.zeros(len(wave))
    c = np.zeros(len(wave))
    some = np.zeros(len(wave), dtype=np.bool_)
    for kind, catalogue in enumerate(catalogues):
        mine = np.flatnonzero(kinds[wave] == kind)
        if not len(mine):
            continue
        plans = catalogue.least(within[wave[mine]], weight[wave[mine]])
        for j, plan in zip(mine.tolist(), plans, strict=True):
            if plan is None:
                bound_of[wave[j]] = math.inf
                continue
            n[j], m[j], t[j], c[j] = plan
            some[j] = True
            bound_of[wave[j]] = c[j] + weight[wave[j]] * n[j]
    return _exact(starts, pair[wave[some]], n[some], m[some], t[some], c[some], times, prefix)


def _columns(starts: Starts, catalogues: list[Catalogue], pair: Index, front_at: Index,
             times: Array, prefix: Array) -> Offer:
    """The front plans `front_at` (one per class, -1: none) at their pairs' starts, priced."""
    some = front_at >= 0
    pair, at = pair[some], front_at[some]
    kinds = starts.kind[pair]
    n = np.empty(len(pair), dtype=np.int64)
    m = np.empty(len(pair), dtype=np.int64)
    t = np.empty(len(pair))
    c = np.empty(len(pair))
    for kind, catalogue in enumerate(catalogues):
        mine = np.flatnonzero(kinds == kind)
        if len(mine):
            front = catalogue.front
            n[mine], m[mine] = front.functions[at[mine]], front.memory_mb[at[mine]]
            t[mine], c[mine] = front.time_s[at[mine]], front.cost_usd[at[mine]]
    return _exact(starts, pair, n, m, t, c, times, prefix)


def _exact(starts: Starts, pair: Index, n: Index, m: Index, t: Array, c: Array,
           times: Array, prefix: Array) -> Offer:
    """Plans at their pairs' starts that meet the due time, priced from the rows they hold."""
    start = starts.start_s[pair]
    meets = start + t <= starts.due_s[pair]
    pair, n, m, t, c, start = pair[meets], n[meets], m[meets], t[meets], c[meets], start[meets]
    row = starts.row[pair]
    stop = np.searchsorted(times, start + t, side="left")
    priced = c + n * (prefix[stop] - prefix[row])
    return Offer(starts.task[pair], start, row, n, m, t, c, priced, starts.kind[pair])


def _cheapest_per_footprint(offer: Offer, times: Array) -> Offer:
    """Of the columns of one start that hold the same functions at the same moments, the
    cheapest: the others are never in a cheaper schedule (on the 1 MB grid, thousands of
    plans within a few cents hold the same rows)."""
    stop = np.searchsorted(times, offer.start_s + offer.time_s, side="left")
    order = np.lexsort((offer.cost_usd, offer.functions, stop, offer.row, offer.task))
    key = np.stack((offer.task[order], offer.row[order], stop[order],
                    offer.functions[order]))
    first = np.r_[True, (key[:, 1:] != key[:, :-1]).any(axis=0)] if len(order) else \
        np.zeros(0, dtype=np.bool_)
    return offer.take(order[first])


def _join(parts: list[Offer]) -> Offer:
    return Offer(*(np.concatenate([getattr(part, f) for part in parts])
                   for f in _OFFER_FIELDS))
