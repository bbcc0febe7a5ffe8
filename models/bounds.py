"""Bounds on `n` and `m` derived by the program from the model's SymPy expressions.

`models.derivation.facts()` proves what the bounds rest on (∂T_train/∂m ≤ 0 in each of the
model's 16 regimes; T = T_train plus terms per round — restart overhead, model v2's start-up
s0 + s1·n — free of m and non-decreasing in the restart count, so T is non-decreasing in
T_train; T depends on m only through R and B_f^s; the cost weight non-decreasing in `m`) and
solves for the thresholds where validity starts and where the time stops depending on `m`;
the compiled program (`models.compiled`) carries those thresholds as numpy code. `box()`
turns them into integer bounds for one instance; `cost_lower_bound()` is the bound the
solver prunes with. This module imports numpy only (SymPy just for `deadline_crossings`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from . import performance as model

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Bounds:
    """The box of the grid the optimum provably lies in, and how each side was derived.

    `grid_points` counts the whole grid (n = 1..the concurrency limit × every memory size);
    `box_points` the plans inside the bounds; `evaluated_points` those the solver then had to
    evaluate after pruning by cost against its incumbent.
    """

    n_min: int
    n_max: int
    m_min: int
    m_max: int
    deadline_met: bool
    grid_points: int
    box_points: int
    evaluated_points: int
    derivations: tuple[str, ...]

    @property
    def share_kept(self) -> float:
        """The fraction of the grid inside the bounds."""
        return self.box_points / self.grid_points

    @property
    def share_evaluated(self) -> float:
        """The fraction of the grid the solver evaluated."""
        return self.evaluated_points / self.grid_points

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["derivations"] = list(self.derivations)
        out["share_kept"] = self.share_kept
        out["share_evaluated"] = self.share_evaluated
        return out


@dataclass(frozen=True)
class Box:
    """Bounds for one instance, with the arrays the solver reuses (indices into the grid)."""

    memory: Array
    m_lo: int
    m_hi: int
    functions: npt.NDArray[np.int64]
    row_hi: npt.NDArray[np.int64]  # per n: the largest useful memory index within the vCPU limit
    envelope_time: Array  # per n: the time checked against the deadline at memory[row_hi]
    deadline_met: bool
    n_min: int
    n_max: int
    box_points: int
    explain: Callable[[], Bounds] = field(repr=False, compare=False)
    top: Mapping[str, Array] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def bounds(self) -> Bounds:
        """The bounds with their derivations, written out only for a box a plan reports (a
        choice over many servers needs the numbers of each, the text of one)."""
        return self.explain()


def _first(mask: npt.NDArray[np.bool_]) -> int:
    """Index of the first True (len(mask) when there is none)."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else len(mask)


def lowest_valid_memory(values: tuple[float, ...], memory: Array, min_memory_mb: float) -> int:
    """Index of the first size with R > 0, B_f^s > 0 and ≥ min_memory_mb (len(memory): none);
    R and B_f^s never fall as m grows, so every larger size is valid too."""
    return _lowest(*_per_memory(values, memory), memory, min_memory_mb)


def _per_memory(values: tuple[float, ...], memory: Array) -> tuple[Array, Array]:
    """R and B_f^s at every size (they do not depend on n)."""
    per_memory = model.figures(values, 1.0, memory, ("rate", "storage_bandwidth"))
    return per_memory["rate"], per_memory["storage_bandwidth"]


def _lowest(rate: Array, storage: Array, memory: Array, min_memory_mb: float) -> int:
    return _first((rate > 0) & (storage > 0) & (memory >= min_memory_mb))


def box(
    values: tuple[float, ...], memory: Array, *, max_functions: int, min_memory_mb: float,
    deadline_s: float, noise: model.NoiseTerms | None = None,
    vcpu_memory_mb: int | None = None, tops: tuple[str, ...] = (),
) -> Box | None:
    """Integer bounds for one instance, or None when no plan within its limits is valid.

    `values` are the parameters from `model.parameter_values`. Memory: validity (R > 0,
    B_f^s > 0) and `min_memory_mb` from below; from above, the first size from which R and
    B_f^s no longer grow — T is constant past it while the weight grows, so a larger size is
    never cheaper. Functions: b_l ≥ 1 and the limits from above; then, since T only falls
    as m grows, n must meet the deadline at the largest useful memory, evaluated for every n.
    When no n does, the box keeps every valid n (the solver then returns the fastest plan).
    A vCPU limit (`vcpu_memory_mb`: n·m may not exceed it) caps row n's memory at
    ⌊vcpu_memory_mb / n⌋ and n where that cap falls below the smallest valid size; the same
    monotonicity puts each row's fastest plan at its own cap (`row_hi`).
    """
    return boxes([values], memory, max_functions=max_functions, min_memory_mb=min_memory_mb,
                 deadline_s=deadline_s, noise=noise, vcpu_memory_mb=vcpu_memory_mb, tops=tops)[0]


def boxes(
    servers: list[tuple[float, ...]], memory: Array, *, max_functions: int,
    min_memory_mb: float, deadline_s: float, noise: model.NoiseTerms | None = None,
    vcpu_memory_mb: int | None = None, tops: tuple[str, ...] = (),
) -> list[Box | None]:
    """`box` of one instance on each of several parameter servers (`servers`: each one's
    parameter vector, differing in the PS's parameters only): validity, the memory bounds
    and the rows do not depend on the PS, so they are found once, and every server's times
    at the rows' tops come from one evaluation (`performance.per_server`), with the figures
    `tops` there too (`Box.top`, for a search that starts from the tops)."""
    compiled = model.program()
    values = model.per_server(servers)
    with np.errstate(all="ignore"):  # a zero slope: no threshold
        thresholds = compiled.thresholds(*values)
    rate_root, storage_root, storage_cap, batch_limit = map(float, thresholds)
    params = dict(zip(compiled.parameters, values, strict=True))
    rate, storage = _per_memory(values, memory)
    m_lo = _lowest(rate, storage, memory, min_memory_mb)
    if m_lo == len(memory):
        return [None] * len(servers)
    m_hi = max(m_lo, _first((rate == rate[-1]) & (storage == storage[-1])))
    n_valid = min(max_functions, math.floor(batch_limit))
    if vcpu_memory_mb is not None:
        n_valid = min(n_valid, vcpu_memory_mb // int(memory[m_lo]))
    if n_valid < 1:
        return [None] * len(servers)
    every = np.arange(1, n_valid + 1, dtype=np.int64)
    top = np.full(n_valid, m_hi, dtype=np.int64)
    if vcpu_memory_mb is not None:  # the last size ≤ ⌊budget / n⌋: ≥ m_lo for n ≤ n_valid
        cap = np.searchsorted(memory, vcpu_memory_mb // every, side="right") - 1
        top = np.minimum(top, cap)
    # Crashes: a plan whose crash load reaches 1 never finishes (its times are +∞). The loads
    # fall as m grows (proved), so an n that fails at its largest memory fails at every size.
    checked = model.deadline_figure(noise)
    names = tuple(dict.fromkeys((checked, "crash_load", "crash_load_quantile", *tops)))
    if len(servers) == 1:
        found = model.figures(values, every, memory[top], names, noise)
        rows = [found]
    else:
        shape = (len(servers), n_valid)
        found = model.figures(
            model.at(values, np.arange(len(servers)), column=True),
            np.broadcast_to(every, shape), np.broadcast_to(memory[top], shape), names, noise)
        rows = [{name: found[name][s] for name in names} for s in range(len(servers))]

    grid_points = max_functions * len(memory)
    at = f"{memory[m_hi]:g} MB" if vcpu_memory_mb is None else "its largest memory in the limit"

    def shared() -> tuple[str, ...]:
        """The derivations every server's box shares (memory, validity)."""
        def mb(value: float) -> str:
            return f"{value:,.1f} MB" if math.isfinite(value) else "none"

        alpha1, alpha2 = params["alpha1"], params["alpha2"]
        rate_at = mb(rate_root) if alpha1 > 0 else "none (α1 = 0: R is constant)"
        storage_at = mb(storage_root) if alpha2 > 0 else "none (α2 = 0)"
        cap_at = mb(storage_cap) if alpha2 > 0 else "none (α2 = 0)"
        m_sat = params["m_sat"]
        sat_at = mb(m_sat) if alpha1 > 0 else "everywhere (α1 = 0)"
        return (
            f"m ≥ {memory[m_lo]:g} MB: validity R(m) > 0 ⇔ m > {rate_at} (R = α1·m + β1 = 0 "
            f"solved for m), B_f^s(m) > 0 ⇔ m > {storage_at}, and min_memory_mb "
            f"{min_memory_mb:g}; the first grid size satisfying all three",
            f"m ≤ {memory[m_hi]:g} MB: ∂T/∂m = 0 once m ≥ m_sat ({sat_at}) and α2·m + β2 ≥ B_s "
            f"(solved: m ≥ {cap_at}), while ∂weight/∂m = n·p_gbs/1024 ≥ 0, so no larger size is "
            "cheaper; the first grid size past both thresholds",
            f"n ≤ {n_valid}: validity b_l = b_g^max/n ≥ 1 ⇔ n ≤ {batch_limit:g} (solved for n), "
            f"and the concurrency limit {max_functions}",
        )

    out: list[Box | None] = []
    for row in rows:
        finishes = ~((row["crash_load"] >= 1) | (row["crash_load_quantile"] >= 1))
        if not finishes.any():
            out.append(None)
            continue
        functions, row_hi, envelope = every[finishes], top[finishes], row[checked][finishes]
        meets = envelope <= deadline_s
        deadline_met = bool(meets.any())
        n_min, n_max = ((int(functions[meets][0]), int(functions[meets][-1])) if deadline_met
                        else (int(functions[0]), int(functions[-1])))
        inside = (functions >= n_min) & (functions <= n_max)
        box_points = int((row_hi[inside] - m_lo + 1).sum())

        def explain(functions: npt.NDArray[np.int64] = functions,
                    row_hi: npt.NDArray[np.int64] = row_hi, meets: npt.NDArray[np.bool_] = meets,
                    deadline_met: bool = deadline_met, n_min: int = n_min, n_max: int = n_max,
                    box_points: int = box_points) -> Bounds:
            dropped = n_valid - len(functions)
            never = f"; {dropped} never finish: crash load n·φ·c ≥ 1 even there" if dropped else ""
            deadline_text = (
                f"T(n, {at}) ≤ T_o = {deadline_s:g} s holds for n = {n_min}..{n_max} "
                f"({int(meets.sum())} of {n_valid} values of n{never})"
                if deadline_met else
                f"no n meets T_o = {deadline_s:g} s even at {at}; every valid n kept to find "
                "the fastest plan"
            )
            vcpu = () if vcpu_memory_mb is None else (
                f"n·m ≤ {vcpu_memory_mb:,} MB (the platform's max_vcpu in MB of functions): "
                f"row n keeps m ≤ ⌊{vcpu_memory_mb:,} / n⌋ MB (down to {memory[row_hi[-1]]:g} "
                f"MB at n = {n_valid}), and n ≤ {vcpu_memory_mb // int(memory[m_lo])} keeps one "
                "valid size",
            )
            derivations = (
                *shared(), *vcpu,
                f"n ∈ [{n_min}, {n_max}]: ∂T_train/∂m ≤ 0 proved in all "
                f"{compiled.regimes_proved} regimes and T non-decreasing in T_train, so "
                f"T(n, m) ≥ T(n, m_max); {deadline_text}",
            )
            return Bounds(n_min, n_max, int(memory[m_lo]), int(memory[m_hi]), deadline_met,
                          grid_points, box_points, box_points, derivations)

        out.append(Box(memory, m_lo, m_hi, functions, row_hi, envelope, deadline_met, n_min,
                       n_max, box_points, explain,
                       {name: row[name][finishes] for name in tops}))
    return out


def cost_lower_bound(
    values: tuple[float, ...], functions: Array, memory_low: Array, high_time: Array,
    high_restarts: Array,
) -> Array:
    """A lower bound on the cost of every plan (n, m) with m in [memory_low, m_high].

    T and the restarts are non-increasing in m (so at most their value at m_high is wrong
    the right way) and the weight is non-decreasing (so its value at memory_low is a floor):
    C = T·weight + n·(r + 1)·p_req ≥ T(m_high)·weight(memory_low) + n·(r(m_high) + 1)·p_req.
    """
    weight = model.figures(values, functions, memory_low, ("weight",))["weight"]
    p_req = values[model.program().parameters.index("p_req")]
    lower: Array = high_time * weight + functions * (high_restarts + 1) * p_req
    return lower


@dataclass(frozen=True)
class Crossing:
    """Where T_train(n) = T_o in one regime, at a fixed memory: the paper's closed forms."""

    regime: str
    functions: float


def deadline_crossings(
    values: tuple[float, ...], memory_mb: float, deadline_s: float
) -> list[Crossing]:
    """The real, positive n where MODEL.md's T_train(n, memory_mb) = T_o, each checked to lie
    in the regime it was solved in, smallest first (restarts and start-ups only add to T, so
    these are where the deadline can start or stop being met, never later or earlier)."""
    from .derivation import deadline_roots

    params = dict(zip(model.program().parameters, values, strict=True))
    per_memory = model.figures(values, 1.0, memory_mb, ("rate", "storage_bandwidth"))
    rate, storage = float(per_memory["rate"]), float(per_memory["storage_bandwidth"])
    crossings = []
    for name, fixed_local, function_bound, function in deadline_roots():
        with np.errstate(all="ignore"):
            roots = np.asarray(function(*map(np.float64, values), rate, storage, deadline_s),
                               dtype=np.float64).ravel()
        for n in roots[np.isfinite(roots) & (roots > 0)]:
            in_batch = (n * params["b_lf"] <= params["b_gmax"]) == fixed_local
            in_comm = (params["B_fmax"] <= params["k_ps"] * params["B_p"] / n) == function_bound
            if in_batch and in_comm:
                crossings.append(Crossing(name, float(n)))
    return sorted(crossings, key=lambda crossing: crossing.functions)
