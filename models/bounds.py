"""Bounds on `n` and `m` derived by the program from the model's SymPy expressions.

`facts()` proves, once per process, what the bounds rest on: in each of the 16 regimes of the
model (fixed local / global batch × function- / PS-bound communication × rate linear /
saturated × storage bandwidth linear / capped) ∂T_train/∂m ≤ 0 under the validity
assumptions R > 0 and B_f^s > 0; T is a non-decreasing function of T_train; and the cost
weight (dollars per second) is non-decreasing in `m`. It also solves for the thresholds where
validity starts and where the time stops depending on `m`. `box()` turns these into integer
bounds for one instance; `cost_lower_bound()` is the bound the solver prunes with.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt
import sympy as sp
from lambdadnn.models import performance as model
from lambdadnn.models.errors import DerivationError

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Facts:
    """What `facts()` proved, and the thresholds it solved for (as SymPy expressions)."""

    regimes_proved: int
    rate_root: sp.Expr
    storage_root: sp.Expr
    storage_cap: sp.Expr
    batch_limit: sp.Expr
    thresholds: Callable[..., tuple[float, float, float, float]]


def _regimes() -> list[tuple[str, dict[sp.Basic, sp.Basic], dict[sp.Basic, sp.Basic]]]:
    """Every branch choice of the model's Min and Piecewise terms, with its positivity substitution.

    Each regime pins the rate and storage bandwidth to one branch; under validity these are
    positive, which we state by rewriting the intercepts through positive symbols ρ1, ρ2.
    """
    rho1, rho2 = sp.symbols("rho1 rho2", positive=True)
    piecewise = (model.t_train + model.spread_variance).atoms(sp.Piecewise)
    if any(pw.args[0].cond.canonical != model.fixed_local.canonical for pw in piecewise):
        raise DerivationError("every Piecewise of the model must branch on the batch regime")
    rate_min = sp.Min(model.m, model.m_sat)
    storage_min = sp.Min(model.alpha2 * model.m + model.beta2, model.B_s)
    ps_min = sp.Min(model.B_fmax, model.B_p / model.n)
    regimes = []
    for batch, comm, rate_arg, storage_arg in itertools.product(
        (True, False), ps_min.args, rate_min.args, storage_min.args
    ):
        choice: dict[sp.Basic, sp.Basic] = {
            pw: pw.args[0].expr if batch else pw.args[1].expr for pw in piecewise
        }
        choice.update({rate_min: rate_arg, storage_min: storage_arg, ps_min: comm})
        positivity = {model.beta1: rho1 - model.alpha1 * rate_arg}
        if storage_arg != model.B_s:
            positivity[model.beta2] = rho2 - model.alpha2 * model.m
        name = (
            f"{'fixed-local' if batch else 'fixed-global'} batch, "
            f"{'function' if comm == model.B_fmax else 'PS'}-bound, "
            f"rate {'linear' if rate_arg == model.m else 'saturated'}, "
            f"storage {'capped' if storage_arg == model.B_s else 'linear'}"
        )
        regimes.append((name, choice, positivity))
    return regimes


def _root(expression: sp.Expr, symbol: sp.Symbol) -> sp.Expr:
    """The one root of `expression` in `symbol` (simplification skipped: it costs 50 ms each)."""
    roots = sp.solve(expression, symbol, simplify=False, check=False)
    if len(roots) != 1:
        raise DerivationError(f"expected one root of {expression} in {symbol}, found {roots}")
    root: sp.Expr = roots[0]
    return root


@cache
def facts() -> Facts:
    """Prove the monotonicity the bounds rely on and solve for the thresholds (once per process)."""
    regimes = _regimes()
    for name, choice, positivity in regimes:
        # The quantile T_train + z·√variance falls with m when both parts do (√ increases).
        for label, expression in (("T_train", model.t_train),
                                  ("the spread's variance", model.spread_variance)):
            slope = sp.diff(expression.xreplace(choice), model.m).subs(positivity)
            if not slope.is_nonpositive:
                raise DerivationError(
                    f"could not prove ∂({label})/∂m ≤ 0 in regime {name}: {slope}"
                )
    if not sp.diff(model.weight, model.m).is_nonnegative:
        raise DerivationError("could not prove that the cost weight is non-decreasing in m")
    linear_rate = model.alpha1 * model.m + model.beta1
    linear_storage = model.alpha2 * model.m + model.beta2
    fixed_global_batch = model.local_batch.args[1].expr
    rate_root = _root(linear_rate, model.m)
    storage_root = _root(linear_storage, model.m)
    storage_cap = _root(linear_storage - model.B_s, model.m)
    batch_limit = _root(fixed_global_batch - 1, model.n)
    thresholds = sp.lambdify(
        model.PARAMETER_SYMBOLS, (rate_root, storage_root, storage_cap, batch_limit),
        modules="numpy",
    )
    return Facts(len(regimes), rate_root, storage_root, storage_cap, batch_limit, thresholds)


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

    bounds: Bounds
    memory: Array
    m_lo: int
    m_hi: int
    functions: npt.NDArray[np.int64]
    envelope_time: Array


def _first(mask: npt.NDArray[np.bool_]) -> int:
    """Index of the first True (len(mask) when there is none)."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else len(mask)


def box(
    values: tuple[float, ...], memory: Array, *, max_functions: int, min_memory_mb: float,
    deadline_s: float, noise: model.NoiseTerms | None = None,
) -> Box | None:
    """Integer bounds for one instance, or None when no plan within its limits is valid.

    `values` are the parameters in `model.PARAMETERS` order. Memory: validity (R > 0,
    B_f^s > 0) and `min_memory_mb` from below; from above, the first size from which R and
    B_f^s no longer grow — T is constant past it while the weight grows, so a larger size is
    never cheaper. Functions: b_l ≥ 1 and the limits from above; then, since T only falls
    as m grows, n must meet the deadline at the largest useful memory, evaluated for every n.
    When no n does, the box keeps every valid n (the solver then returns the fastest plan).
    """
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero slope: no threshold
        thresholds = facts().thresholds(*map(np.float64, values))
    rate_root, storage_root, storage_cap, batch_limit = map(float, thresholds)
    params = dict(zip(model.PARAMETERS, values, strict=True))
    per_memory = model.figures(values, 1.0, memory, ("rate", "storage_bandwidth"))
    rate, storage = per_memory["rate"], per_memory["storage_bandwidth"]
    m_lo = _first((rate > 0) & (storage > 0) & (memory >= min_memory_mb))
    if m_lo == len(memory):
        return None
    m_hi = max(m_lo, _first((rate == rate[-1]) & (storage == storage[-1])))
    n_valid = min(max_functions, math.floor(batch_limit))
    if n_valid < 1:
        return None
    functions = np.arange(1, n_valid + 1, dtype=np.int64)
    checked = model.deadline_figure(noise)
    envelope = model.figures(values, functions, memory[m_hi], (checked,), noise)[checked]
    meets = envelope <= deadline_s
    deadline_met = bool(meets.any())
    if deadline_met:
        n_min, n_max = int(functions[meets][0]), int(functions[meets][-1])
    else:
        n_min, n_max = 1, n_valid
    grid_points = max_functions * len(memory)
    box_points = (n_max - n_min + 1) * (m_hi - m_lo + 1)

    def mb(value: float) -> str:
        return f"{value:,.1f} MB" if math.isfinite(value) else "none"

    alpha1, alpha2 = params["alpha1"], params["alpha2"]
    rate_at = mb(rate_root) if alpha1 > 0 else "none (α1 = 0: R is constant)"
    storage_at = mb(storage_root) if alpha2 > 0 else "none (α2 = 0)"
    cap_at = mb(storage_cap) if alpha2 > 0 else "none (α2 = 0)"
    m_sat = params["m_sat"]
    sat_at = mb(m_sat) if alpha1 > 0 else "everywhere (α1 = 0)"
    deadline_text = (
        f"T(n, {memory[m_hi]:g} MB) ≤ T_o = {deadline_s:g} s holds for n = {n_min}..{n_max} "
        f"({int(meets.sum())} of {n_valid} values of n)"
        if deadline_met else
        f"no n meets T_o = {deadline_s:g} s even at {memory[m_hi]:g} MB; every valid n kept "
        "to find the fastest plan"
    )
    derivations = (
        f"m ≥ {memory[m_lo]:g} MB: validity R(m) > 0 ⇔ m > {rate_at} (R = α1·m + β1 = 0 "
        f"solved for m), B_f^s(m) > 0 ⇔ m > {storage_at}, and min_memory_mb "
        f"{min_memory_mb:g}; the first grid size satisfying all three",
        f"m ≤ {memory[m_hi]:g} MB: ∂T/∂m = 0 once m ≥ m_sat ({sat_at}) and α2·m + β2 ≥ B_s "
        f"(solved: m ≥ {cap_at}), while ∂weight/∂m = n·p_gbs/1024 ≥ 0, so no larger size is "
        "cheaper; the first grid size past both thresholds",
        f"n ≤ {n_valid}: validity b_l = b_g^max/n ≥ 1 ⇔ n ≤ {batch_limit:g} (solved for n), "
        f"and the concurrency limit {max_functions}",
        f"n ∈ [{n_min}, {n_max}]: ∂T_train/∂m ≤ 0 proved in all {facts().regimes_proved} "
        f"regimes and T non-decreasing in T_train, so T(n, m) ≥ T(n, m_max); {deadline_text}",
    )
    bounds = Bounds(
        n_min, n_max, int(memory[m_lo]), int(memory[m_hi]), deadline_met, grid_points,
        box_points, box_points, derivations,
    )
    return Box(bounds, memory, m_lo, m_hi, functions, envelope)


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
    p_req = values[model.PARAMETERS.index("p_req")]
    lower: Array = high_time * weight + functions * (high_restarts + 1) * p_req
    return lower


@dataclass(frozen=True)
class Crossing:
    """Where T_train(n) = T_o in one regime, at a fixed memory: the paper's closed forms."""

    regime: str
    functions: float


@cache
def _deadline_roots() -> tuple[tuple[str, bool, bool, Callable[..., Any]], ...]:
    """T_train = T_o solved for n per (batch, communication) regime, with the rate and storage
    bandwidth held as symbols R, B_fs (memory fixed). Built on first use: it is for
    explaining the bounds (`lambdadnn bounds`), not on the solver's path."""
    rate_symbol, storage_symbol, deadline = sp.symbols("R B_fs T_o", positive=True)
    piecewise = model.t_train.atoms(sp.Piecewise)
    rate = model.alpha1 * sp.Min(model.m, model.m_sat) + model.beta1
    storage = sp.Min(model.alpha2 * model.m + model.beta2, model.B_s)
    ps_min = sp.Min(model.B_fmax, model.B_p / model.n)
    solved = []
    for fixed_local, comm in itertools.product((True, False), ps_min.args):
        choice: dict[sp.Basic, sp.Basic] = {
            pw: pw.args[0 if fixed_local else 1].expr for pw in piecewise
        }
        choice.update({ps_min: comm, rate: rate_symbol, storage: storage_symbol, model.s_c: 1})
        t_train = model.t_train.xreplace(choice)
        roots = [
            root for root in sp.solve(t_train - deadline, model.n, simplify=False, check=False)
            if root != 0
        ]
        name = (f"{'fixed-local' if fixed_local else 'fixed-global'} batch, "
                f"{'function' if comm == model.B_fmax else 'PS'}-bound")
        function = sp.lambdify(
            (*model.PARAMETER_SYMBOLS, rate_symbol, storage_symbol, deadline), roots,
            modules="numpy",
        )
        solved.append((name, fixed_local, comm == model.B_fmax, function))
    return tuple(solved)


def deadline_crossings(
    values: tuple[float, ...], memory_mb: float, deadline_s: float
) -> list[Crossing]:
    """The real, positive n where DESIGN.md's T_train(n, memory_mb) = T_o, each checked to lie
    in the regime it was solved in, smallest first (restarts only add to T, so these are
    where the deadline can start or stop being met, never later or earlier)."""
    params = dict(zip(model.PARAMETERS, values, strict=True))
    per_memory = model.figures(values, 1.0, memory_mb, ("rate", "storage_bandwidth"))
    rate, storage = float(per_memory["rate"]), float(per_memory["storage_bandwidth"])
    crossings = []
    for name, fixed_local, function_bound, function in _deadline_roots():
        with np.errstate(all="ignore"):
            roots = np.asarray(function(*map(np.float64, values), rate, storage, deadline_s),
                               dtype=np.float64).ravel()
        for n in roots[np.isfinite(roots) & (roots > 0)]:
            in_batch = (n * params["b_lf"] <= params["b_gmax"]) == fixed_local
            in_comm = (params["B_fmax"] <= params["B_p"] / n) == function_bound
            if in_batch and in_comm:
                crossings.append(Crossing(name, float(n)))
    return sorted(crossings, key=lambda crossing: crossing.functions)
