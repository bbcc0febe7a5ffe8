"""What the program derives from the SymPy model, once: proofs, thresholds and numpy code.

`facts()` proves what the bounds rest on: in each of the 16 regimes of the model (fixed local
/ global batch × function- / PS-bound communication × rate linear / saturated × storage
bandwidth linear / capped) ∂T_train/∂m ≤ 0 under the validity assumptions R > 0 and
B_f^s > 0; T is T_train plus a term free of m and non-decreasing in the restart count (the
restart overhead, version 2's start-up per round, the cold starts), so T is non-decreasing
in T_train (and its guaranteed quantile likewise); T depends on m only through R and B_f^s;
the cost is T·weight + a request term non-decreasing in the restarts and free of m; and the
weight (dollars per second) is non-decreasing in `m`. It also solves for the thresholds where
validity starts and where the time stops depending on `m`.

`derive()` runs those proofs and prints every figure of the model, with one common-subexpression
elimination over all of them, as numpy statements (`models.compiled` assembles and caches
them). Each figure is then computed by the same statements whichever other figures are asked
for with it, so the time that the search, the bounds, `evaluate` and the re-check compare
against a deadline is the same number to the last bit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import sympy as sp
from sympy.printing.numpy import NumPyPrinter

from . import equations as model
from .code import Code
from .errors import DerivationError


@dataclass(frozen=True)
class Facts:
    """What `facts()` proved, and the thresholds it solved for (as SymPy expressions)."""

    regimes_proved: int
    rate_root: sp.Expr
    storage_root: sp.Expr
    storage_cap: sp.Expr
    batch_limit: sp.Expr


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
    ps_min = model.ps_bandwidth
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


def _prove_servers(
    regimes: list[tuple[str, dict[sp.Basic, sp.Basic], dict[sp.Basic, sp.Basic]]],
) -> None:
    """What choosing among PS servers rests on (`pipeline.undominated`): written through the
    totals K_B = k·B_p, K_c = k·c_msg and K_p = k·p_ps, T_train, the spread's variance and the
    iteration time are non-increasing in K_B and non-decreasing in K_c in every regime (so T
    and its quantile are, as for m), and the cost weight is non-decreasing in K_p."""
    bandwidth, message, price = sp.symbols("K_B K_c K_p", positive=True)
    totals = {model.B_p: bandwidth / model.k_ps, model.c_msg: message / model.k_ps}
    for name, choice, positivity in regimes:
        for label, expression in (("T_train", model.t_train),
                                  ("the spread's variance", model.spread_variance),
                                  ("the iteration time", model.t_iteration)):
            total = expression.xreplace(choice).subs(totals).subs(positivity)
            if not sp.diff(total, bandwidth).is_nonpositive:
                raise DerivationError(f"could not prove ∂({label})/∂(k·B_p) ≤ 0 in regime {name}")
            if not sp.diff(total, message).is_nonnegative:
                raise DerivationError(f"could not prove ∂({label})/∂(k·c_msg) ≥ 0 in regime {name}")
    weight = model.weight.subs(model.p_ps, price / model.k_ps)
    if not sp.diff(weight, price).is_nonnegative:
        raise DerivationError("could not prove that the cost weight is non-decreasing in k·p_ps")


def _prove_rounds() -> None:
    """What the terms paid per round add, proved for the bounds: T = T_train + g(r) and
    T_q = T_train,q + g_q(r_q) with g free of m and non-decreasing in r; r = max(0,
    ⌈T_train/L⌉ − 1) with L > 0 (non-decreasing in T_train); T free of m once R and B_f^s are
    fixed; the cost T·weight + h(r), h free of m and non-decreasing in r."""
    r = sp.Symbol("r", nonnegative=True)
    tau = sp.Symbol("tau", positive=True)
    for restarts, train in ((model.restarts, model.t_train),
                            (model.restarts_quantile, model.t_train_quantile)):
        if restarts != sp.Max(0, sp.ceiling(train / model.L) - 1) or not model.L.is_positive:
            raise DerivationError(f"the restart count is not max(0, ⌈T_train/L⌉ − 1): {restarts}")
    rate, storage = sp.symbols("R B_fs", positive=True)
    through = {model.rate: rate, model.storage_bandwidth: storage}
    # The crash losses, non-increasing in m by `_prove_crashes`, stand as symbols here.
    lost = {model.t_crashes: sp.Symbol("kappa", nonnegative=True),
            model.t_crashes_quantile: sp.Symbol("kappa_q", nonnegative=True)}
    for label, total, restarts, train in (
        ("T", model.time, model.restarts, model.t_train),
        ("T's quantile", model.deadline_time, model.restarts_quantile, model.t_train_quantile),
        ("the request cost", model.cost_requests + tau, model.restarts, tau),
    ):
        extra = sp.expand(total.xreplace(lost).xreplace({restarts: r}) - train)
        if model.m in extra.free_symbols or not sp.diff(extra, r).is_nonnegative:
            raise DerivationError(
                f"could not prove that {label} adds a term free of m and non-decreasing in the "
                f"restarts: {extra}"
            )
        if model.m in total.xreplace(through).free_symbols:
            raise DerivationError(f"{label} depends on m other than through R and B_f^s")
    split = model.time * model.weight + model.cost_requests
    if sp.expand(model.cost - split) != 0:
        raise DerivationError("the cost is not T·weight + the request cost")


def _monotone(
    label: str, expression: sp.Expr, parts: Mapping[sp.Basic, sp.Symbol],
    rising: tuple[sp.Symbol, ...] = (), falling: tuple[sp.Symbol, ...] = (),
) -> None:
    """`expression` with `parts` replaced by symbols (in order, so a part may contain a later
    one; `subs`, so a part may be a sub-sum), proved free of m and non-decreasing in `rising`,
    non-increasing in `falling` (so it moves with m as those parts do)."""
    reduced = expression
    for part, symbol in parts.items():
        reduced = reduced.subs(part, symbol)
    if model.m in reduced.free_symbols:
        raise DerivationError(f"{label} depends on m other than through {tuple(parts.values())}")
    signs = [(s, "nonnegative") for s in rising] + [(s, "nonpositive") for s in falling]
    for symbol, sign in signs:
        if not getattr(sp.diff(reduced, symbol), f"is_{sign}"):
            raise DerivationError(f"could not prove that {label} is monotone in {symbol}")


def _prove_crashes() -> None:
    """The crash losses are non-increasing in m (given ∂t_iteration/∂m ≤ 0 per regime and T_train,
    its quantile and the restarts non-increasing): each is built of monotone parts.

    Expected: E·x/max(0, 1 − x), non-decreasing in the exposure E and the load x (x enters
    through max(0, 1 − x), non-increasing in x). Guaranteed: B(λU) = λU·c + √(2a·λU·b·c) +
    a·b/3 with U the larger root of U = E_q + B(λU), written for √U by the quadratic formula.
    H(U) = U − E_q − B(λU) is positive past that root (a quadratic in √U with a positive
    leading coefficient 1 − λc) and falls as E_q, b, c or λ grow, so the root moves right and
    B(λU) grows: proved here by checking the root solves the quadratic and the signs of H.
    Each loss is 0 without crashes (phi = 0) and checked to be the model's.
    """
    t_iter, exposure, load = sp.symbols("t_iter E x", nonnegative=True)
    slack = sp.Symbol("w", positive=True)  # where it is 0 the loss is +∞, the top of the order
    for label, term in (("the crash load", model.crash_load),
                        ("the guaranteed crash load", model.crash_load_quantile),
                        ("the guaranteed loss per crash", model.crash_cost_quantile),
                        ("its mean", model.crash_mean_quantile)):
        _monotone(label, term, {model.t_iteration: t_iter}, (t_iter,))
    r = sp.Symbol("r", nonnegative=True)
    for label, exposed, train, restarts in (
        ("the exposure", model.t_exposed, model.t_train, model.restarts),
        ("the guaranteed exposure", model.t_exposed_quantile, model.t_train_quantile,
         model.restarts_quantile),
    ):
        _monotone(label, exposed, {restarts: r, train: exposure}, (exposure, r))
    for label, loss, built in (
        ("the expected crash loss", model.t_crashes,
         model.crash_loss(model.t_exposed, model.crash_load)),
        ("the guaranteed crash loss", model.t_crashes_quantile, model.crash_loss_quantile(
            model.t_exposed_quantile, model.crash_mean_quantile, model.crash_cost_quantile,
            model.crash_rate)),
    ):
        if loss != sp.Piecewise((0, model.no_crashes), (built, True)):
            raise DerivationError(f"{label} is not 0 without crashes and the proved form else")
    expected = model.crash_loss(exposure, load).xreplace({sp.Max(0, 1 - load): slack})
    _monotone("the expected crash loss", expected, {}, (exposure, load), (slack,))
    # The guaranteed loss, in the costs b ≥ c, the rate λ, the exposure E_q and √U = s.
    b, c, rate, root, exposure_u = sp.symbols("b c lambda s U", positive=True)
    guaranteed = model.crash_loss_quantile(exposure, c, b, rate)
    spread = sp.sqrt(2 * model.a_f * rate * b * c)
    constant = exposure + model.a_f * b / 3
    formula = (spread + sp.sqrt(spread**2 + 4 * slack * constant)) / (2 * slack)
    leading = sp.Max(0, 1 - rate * c)
    at_root = model.crash_time_bound(rate * root**2, c, b).xreplace({root: formula})
    if guaranteed.xreplace({leading: slack}) != at_root:
        raise DerivationError("the guaranteed crash loss is not B(λU) at the quadratic's root")
    # (1 − λc)·U − spread·√U − constant = 0 with w = 1 − λc > 0 its leading coefficient
    if sp.simplify(slack * formula**2 - spread * formula - constant) != 0:
        raise DerivationError("the exposure's root does not solve U = E_q + B(λU)")
    excess = exposure_u - exposure - model.crash_time_bound(rate * exposure_u, c, b)
    _monotone("H(U) = U − E_q − B(λU)", excess, {}, (), (exposure, b, c, rate))
    _monotone("B(λU)", model.crash_time_bound(rate * root**2, c, b), {}, (b, c, rate, root))


@cache
def facts() -> Facts:
    """Prove the monotonicity the bounds rely on and solve for the thresholds (once per process)."""
    regimes = _regimes()
    for name, choice, positivity in regimes:
        # The quantile T_train + z·√variance falls with m when both parts do (√ increases).
        for label, expression in (("T_train", model.t_train),
                                  ("the spread's variance", model.spread_variance),
                                  ("the iteration time", model.t_iteration)):
            slope = sp.diff(expression.xreplace(choice), model.m).subs(positivity)
            if not slope.is_nonpositive:
                raise DerivationError(
                    f"could not prove ∂({label})/∂m ≤ 0 in regime {name}: {slope}"
                )
    if not sp.diff(model.weight, model.m).is_nonnegative:
        raise DerivationError("could not prove that the cost weight is non-decreasing in m")
    _prove_servers(regimes)
    _prove_rounds()
    _prove_crashes()
    linear_rate = model.alpha1 * model.m + model.beta1
    linear_storage = model.alpha2 * model.m + model.beta2
    fixed_global_batch = model.local_batch.args[1].expr
    return Facts(
        len(regimes),
        rate_root=_root(linear_rate, model.m),
        storage_root=_root(linear_storage, model.m),
        storage_cap=_root(linear_storage - model.B_s, model.m),
        batch_limit=_root(fixed_global_batch - 1, model.n),
    )


class _Printer(NumPyPrinter):  # type: ignore[misc]  # SymPy is untyped
    """numpy source with `numpy.` prefixes only: two-way `where` for the model's Piecewise (5×
    faster than `select`), nested `minimum`/`maximum` for Min/Max (no functools.reduce)."""

    def __init__(self) -> None:
        super().__init__({"fully_qualified_modules": True, "inline": True,
                          "allow_unknown_functions": False})

    def _print_Piecewise(self, expr: sp.Piecewise) -> str:
        if len(expr.args) != 2 or expr.args[1].cond != sp.true:
            raise DerivationError(f"expected a two-branch Piecewise, got {expr}")
        (then, condition), (otherwise, _) = expr.args
        return (f"numpy.where({self._print(condition)}, {self._print(then)}, "
                f"{self._print(otherwise)})")

    def _nested(self, function: str, args: tuple[sp.Expr, ...]) -> str:
        head, *rest = args
        if not rest:
            return str(self._print(head))
        return f"{function}({self._print(head)}, {self._nested(function, tuple(rest))})"

    def _print_Min(self, expr: sp.Min) -> str:
        return self._nested("numpy.minimum", expr.args)

    def _print_Max(self, expr: sp.Max) -> str:
        return self._nested("numpy.maximum", expr.args)


def generate(arguments: tuple[sp.Symbol, ...], expressions: Mapping[str, sp.Expr]) -> Code:
    """The expressions as numpy statements after one common-subexpression elimination."""
    replacements, reduced = sp.cse(list(expressions.values()))
    temporaries = {symbol for symbol, _ in replacements}
    printer = _Printer()

    def printed(expression: sp.Expr) -> tuple[str, tuple[str, ...]]:
        uses = sorted(str(s) for s in expression.free_symbols if s in temporaries)
        return str(printer.doprint(expression)), tuple(uses)

    statements = tuple((str(symbol), *printed(value)) for symbol, value in replacements)
    outputs = {name: printed(value) for name, value in zip(expressions, reduced, strict=True)}
    if set(printer.module_imports) - {"numpy"}:
        raise DerivationError(f"the model printed with modules {dict(printer.module_imports)}")
    return Code(tuple(str(a) for a in arguments), statements, outputs)


def derive() -> dict[str, Any]:
    """Prove the facts and generate the model's code: what `models.compiled` caches."""
    proved = facts()
    thresholds = {
        "rate_root": proved.rate_root, "storage_root": proved.storage_root,
        "storage_cap": proved.storage_cap, "batch_limit": proved.batch_limit,
    }
    return {
        "parameters": [s.name for s in model.PARAMETER_SYMBOLS],
        "noise": [s.name for s in model.NOISE_SYMBOLS],
        "exact": list(model.EXACT),
        "regimes_proved": proved.regimes_proved,
        "figures": generate(
            (model.n, model.m, *model.PARAMETER_SYMBOLS, *model.NOISE_SYMBOLS),
            {**model.FIGURES, **model.AUXILIARY},
        ).to_json(),
        "thresholds": generate(model.PARAMETER_SYMBOLS, thresholds).to_json(),
    }


@cache
def deadline_roots() -> tuple[tuple[str, bool, bool, Callable[..., Any]], ...]:
    """T_train = T_o solved for n per (batch, communication) regime, with the rate and storage
    bandwidth held as symbols R, B_fs (memory fixed). Built on first use: it is for
    explaining the bounds (`lambdadnn bounds`), not on the solver's path."""
    rate_symbol, storage_symbol, deadline = sp.symbols("R B_fs T_o", positive=True)
    piecewise = model.t_train.atoms(sp.Piecewise)
    rate = model.alpha1 * sp.Min(model.m, model.m_sat) + model.beta1
    storage = sp.Min(model.alpha2 * model.m + model.beta2, model.B_s)
    ps_min = model.ps_bandwidth
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
