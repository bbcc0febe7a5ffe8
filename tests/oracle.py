"""An independent brute-force oracle for the performance and cost model of MODEL.md.

The solver evaluates one SymPy model (`models/equations.py`) and prunes the grid with bounds
derived from it. To test that machinery we need an answer that shares none of its code: this
module reads the instance itself (a YAML path or a plain mapping, with `yaml.safe_load`; a
platform given by name is read from `platforms/NAME.yaml` or `NAME.yaml` beside the instance,
else from the repository's `instances/platforms/`), works out the limits itself (n up to the
least of `platform.max_concurrency` and `limits.max_functions`, m from the larger of the
grid's minimum and `workload.min_memory_mb`, n·m/1769 vCPU within `platform.max_vcpu`),
re-types MODEL.md's equations by hand with plain numpy and scans the *whole* grid. It
imports nothing from `lambdadnn` (tests/test_oracle.py checks), so a wrong loader, a limit
ignored, a wrong derivation, a wrong lambdification or an unsound bound all show up as a
disagreement.

The parameter server is read in both of its forms: one machine given by its figures (with
optional `shards` k_ps and `message_s` c_msg, 1 and 0 by default), or a catalogue of types
(inline, or a shipped `instances/servers/NAME.yaml`) from which the solver chooses a type and
a shard count. Each such choice is one `Server` (a `Problem` with its k_ps, c_msg, B_p and p_ps);
`brute_force` scans every (n, m) of every choice.

Input is trusted: callers hand it instances the loader accepts (the loader's own tests judge
refusals).

Conventions (straight from docs/MODEL.md, "Equations" and "What counts as a plan"):

* `k` (the iterations) is real (never rounded); restarts `r = max(0, ceil(T_train / L) - 1)`
  are whole numbers.
* validity is `R > 0`, `B_f^s > 0` and `b_l >= 1`; feasibility adds `T <= T_o`,
  `n <= max_functions`, `m >= min_memory_mb` and `n * m / 1769 <= max_vcpu` (exactly).
* all comparisons are exact float comparisons: a plan whose time equals the deadline is
  feasible. Plans within one rounding error of a threshold (deadline, a multiple of `L`)
  may legitimately be classified differently by an implementation that orders its float
  operations differently; tests comparing against this oracle should allow for that.
* k_ps shards of one PS type, each holding 1/k_ps of the parameters behind its own NIC:
  per direction a function moves d_m at min(B_fmax, k_ps·B_p/n) and pays λ + k_ps·c_msg;
  the PS costs k_ps·p_ps per hour. Among several servers the cheapest optimum wins (ties
  within `COST_TIE`: the faster, then fewer shards, then the catalogue's order); with none
  feasible, the fastest of their fastest plans (exact time ties: the cheaper, then fewer
  shards, then the order).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import yaml

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

Status = Literal["optimal", "infeasible", "none"]

#: Relative cost difference under which two plans count as equally cheap (MODEL.md).
COST_TIE = 1e-12
#: Rows of `n` evaluated at once: 64 x 10,113 sizes x ~20 temporaries stays near 100 MB.
CHUNK_ROWS = 64


#: The repository's shipped platforms, where a platform named in an instance is found last.
PLATFORMS = Path(__file__).resolve().parent.parent / "instances" / "platforms"
#: The repository's shipped parameter-server catalogues, where `catalogue: NAME` is found.
SERVERS = Path(__file__).resolve().parent.parent / "instances" / "servers"
#: Shard counts a catalogue's types are tried at when `max_shards` is not given (MODEL.md).
DEFAULT_MAX_SHARDS = 8


@dataclass(frozen=True)
class Problem:
    """An instance as the plain numbers MODEL.md names, read by this module from the YAML."""

    d_m: float
    d_t: float
    n_t: float
    e: float
    b_lf: float
    b_gmax: float
    alpha1: float
    beta1: float
    m_sat: float  # inf without saturation
    alpha2: float
    beta2: float
    b_s: float
    b_p: float
    b_fmax: float
    p_ps: float
    p_gbs: float
    p_req: float
    timeout_s: float
    timeout_margin_s: float
    restart_overhead_s: float
    deadline_s: float
    memory_min: int
    memory_max: int
    memory_step: int
    max_functions: int  # min(platform.max_concurrency, limits.max_functions)
    min_memory_mb: float  # max(memory_mb.min, workload.min_memory_mb)
    # Model v2: 0 when the profile does not give them.
    latency_s: float = 0.0  # profile.latency_s, paid by every push and every pull
    startup_base_s: float = 0.0  # profile.startup.base_s, per invocation round
    startup_per_function_s: float = 0.0  # profile.startup.per_function_s, per round and function
    # platform.max_vcpu: every function gets m / 1,769 vCPU (as on Lambda), and together they
    # may use at most this many (None: no limit). Exact: see `vcpu_budget_mb`.
    max_vcpu: float | None = None
    # Sharded parameter servers: k machines (each B_p and p_ps above), c_msg per message.
    shards: int = 1  # parameter_server.shards, or the shard count of a catalogue choice
    message_s: float = 0.0  # parameter_server.message_s, or the catalogue type's

    def vcpu_budget_mb(self) -> int | None:
        """The largest whole n·m with n·m / 1769 ≤ max_vcpu, in exact rational arithmetic
        (n·m is an integer, so n·m ≤ max_vcpu·1769 ⇔ n·m ≤ its floor): a plan exactly at
        the limit is allowed, and float rounding decides nothing."""
        if self.max_vcpu is None:
            return None
        exact = Fraction(self.max_vcpu) * 1769
        return exact.numerator // exact.denominator

    def memory(self) -> FloatArray:
        """The platform's memory grid min, min + step, ..., max."""
        return np.arange(self.memory_min, self.memory_max + 1, self.memory_step, dtype=np.float64)


Source = Problem | str | Path | Mapping[str, Any]


def _platform(value: Any, beside: Path | None) -> Mapping[str, Any]:
    """The platform mapping: inline, or by name beside the instance, then the shipped one."""
    if isinstance(value, Mapping):
        return value
    folders = ([beside / "platforms", beside] if beside is not None else []) + [PLATFORMS]
    for folder in folders:
        path = folder / f"{value}.yaml"
        if path.is_file():
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
            assert isinstance(loaded, Mapping), path
            return loaded
    raise FileNotFoundError(f"no platform {value!r} beside {beside} or in {PLATFORMS}")


@dataclass(frozen=True)
class Server:
    """One parameter server the instance allows: a catalogue type (None: given by its figures,
    whatever label `type` gives it) at a shard count, and the instance's numbers on it."""

    type: str | None
    shards: int
    problem: Problem


def _raw(source: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], Path | None]:
    """The instance mapping, and the folder of its file (None for a mapping)."""
    if isinstance(source, (str, Path)):
        raw = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
        assert isinstance(raw, Mapping), source
        return raw, Path(source).resolve().parent
    return source, None


def _server_figures(ps: Mapping[str, Any]) -> list[tuple[str | None, int, float, float, float]]:
    """(type, k, B_p, p_ps, c_msg) of every server `ps` allows, in the catalogue's order, each
    type at every allowed shard count; the old form gives exactly one (type: its label)."""
    if "catalogue" not in ps:
        label = ps.get("type")
        return [(None if label is None else str(label), int(ps.get("shards") or 1),
                 float(ps["bandwidth_mbps"]), float(ps["price_per_hour"]),
                 float(ps.get("message_s") or 0.0))]
    catalogue = ps["catalogue"]
    if isinstance(catalogue, str):  # shipped only: a file never points at another file
        catalogue = yaml.safe_load((SERVERS / f"{catalogue}.yaml").read_text(encoding="utf-8"))
    assert isinstance(catalogue, Mapping), ps
    types: Mapping[str, Mapping[str, Any]] = catalogue["types"]
    if ps.get("type") is not None:
        allowed = {str(ps["type"])}
    elif ps.get("types") is not None:
        allowed = {str(name) for name in ps["types"]}
    else:
        allowed = set(types)
    if ps.get("shards") is not None:
        counts = [int(ps["shards"])]
    else:
        top = ps.get("max_shards")
        counts = list(range(1, (DEFAULT_MAX_SHARDS if top is None else int(top)) + 1))
    return [
        (str(name), k, float(entry["bandwidth_mbps"]), float(entry["price_per_hour"]),
         float(entry.get("message_s") or 0.0))
        for name, entry in types.items() if str(name) in allowed for k in counts
    ]


def servers(
    source: Source, *, platform: str | Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
) -> list[Server]:
    """Every parameter server of an instance YAML path or mapping (catalogue order, each type
    at each allowed shard count), each with the instance's `Problem` on it; the platform and
    deadline optionally replaced as `solve(platform=, deadline_s=)` does. A `Problem` is one
    server (type unknown: None)."""
    if isinstance(source, Problem):
        return [Server(None, source.shards, read(source, deadline_s=deadline_s))]
    raw, beside = _raw(source)
    base = _problem(raw, beside, platform=platform, deadline_s=deadline_s)
    return [
        Server(name, k, dataclasses.replace(base, b_p=b_p, p_ps=p_ps, shards=k, message_s=c))
        for name, k, b_p, p_ps, c in _server_figures(raw["parameter_server"])
    ]


def read(
    source: Source, *, platform: str | Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
) -> Problem:
    """The `Problem` of an instance YAML path or mapping (or a `Problem`, returned as is), with
    the platform and the deadline optionally replaced, as `solve(platform=, deadline_s=)` does.
    With a catalogue of several servers, the first (as the loader's `parameter_server`):
    `servers` gives them all."""
    if isinstance(source, Problem):
        if platform is not None:
            raise ValueError("a Problem's platform cannot be replaced; pass the YAML or mapping")
        return source if deadline_s is None else dataclasses.replace(source, deadline_s=deadline_s)
    return servers(source, platform=platform, deadline_s=deadline_s)[0].problem


def _problem(
    raw: Mapping[str, Any], beside: Path | None, *, platform: str | Mapping[str, Any] | None,
    deadline_s: float | None,
) -> Problem:
    """The instance's numbers, the parameter server's taken from `function_bandwidth_mbps`
    only (B_p, p_ps, k and c_msg are the caller's to fill in per server)."""
    pf = _platform(raw["platform"] if platform is None else platform, beside)
    w, rate, storage = raw["workload"], raw["profile"]["rate"], raw["profile"]["storage_bandwidth"]
    ps, grid_mb = raw["parameter_server"], pf["memory_mb"]
    cap = (raw.get("limits") or {}).get("max_functions")
    floor = w.get("min_memory_mb")
    saturation = rate.get("saturates_at_mb")
    startup = raw["profile"].get("startup") or {}
    return Problem(
        d_m=float(w["model_size_mb"]), d_t=float(w["dataset_size_mb"]), n_t=float(w["samples"]),
        e=float(w["epochs"]), b_lf=float(w["local_batch"]), b_gmax=float(w["max_global_batch"]),
        alpha1=float(rate["slope"]), beta1=float(rate["intercept"]),
        m_sat=math.inf if saturation is None else float(saturation),
        alpha2=float(storage["slope"]), beta2=float(storage["intercept"]),
        b_s=float(storage["max_mbps"]),
        b_p=math.nan, b_fmax=float(ps["function_bandwidth_mbps"]), p_ps=math.nan,
        p_gbs=float(pf["price_per_gb_second"]), p_req=float(pf["price_per_request"]),
        timeout_s=float(pf["timeout_s"]), timeout_margin_s=float(pf["timeout_margin_s"]),
        restart_overhead_s=float(pf["restart_overhead_s"]),
        deadline_s=float(raw["objective"]["deadline_s"] if deadline_s is None else deadline_s),
        memory_min=int(grid_mb["min"]), memory_max=int(grid_mb["max"]),
        memory_step=int(grid_mb["step"]),
        max_functions=int(pf["max_concurrency"]) if cap is None
        else min(int(cap), int(pf["max_concurrency"])),
        min_memory_mb=float(grid_mb["min"]) if floor is None
        else max(float(grid_mb["min"]), float(floor)),
        latency_s=float(raw["profile"].get("latency_s") or 0.0),
        startup_base_s=float(startup.get("base_s", 0.0)),
        startup_per_function_s=float(startup.get("per_function_s", 0.0)),
        max_vcpu=None if pf.get("max_vcpu") is None else float(pf["max_vcpu"]),
    )


@dataclass(frozen=True)
class OracleAnswer:
    """What the brute force found: the optimum, the fastest plan if none is feasible, or nothing.

    `status` is 'optimal' (the cheapest feasible plan), 'infeasible' (no feasible plan; the
    fields describe the fastest valid plan within the limits, as MODEL.md requires the solver
    to report) or 'none' (not even a valid plan exists; all other fields are None).
    """

    status: Status
    functions: int | None
    memory_mb: int | None
    time_s: float | None
    cost_usd: float | None
    # The server the plan runs on: its catalogue type (None: given by its figures) and shard
    # count; both None with status 'none'.
    ps_type: str | None = None
    shards: int | None = None


def _evaluate(p: Problem, n: FloatArray, m: FloatArray) -> dict[str, np.ndarray]:
    """Every quantity of the model for `n` and `m`, broadcast against each other.

    Written line by line from MODEL.md so that a reader can check it against the table of
    equations; numpy warnings are silenced because invalid points (R <= 0, B_f^s <= 0) divide
    by zero or go negative on purpose and are masked by `valid`.
    """
    usable = p.timeout_s - p.timeout_margin_s  # L

    with np.errstate(all="ignore"):
        fixed_local = n * p.b_lf <= p.b_gmax
        global_batch = np.where(fixed_local, n * p.b_lf, p.b_gmax)
        local_batch = np.where(fixed_local, p.b_lf, p.b_gmax / n)
        iterations = p.n_t * p.e / global_batch
        rate = p.alpha1 * np.minimum(m, p.m_sat) + p.beta1
        storage_bw = np.minimum(p.alpha2 * m + p.beta2, p.b_s)
        ps_bw = np.minimum(p.b_fmax, p.shards * p.b_p / n)  # k_ps shards' NICs, one link
        t_load = p.d_t / (n * storage_bw)
        t_comp = local_batch / rate
        # A push and a pull, each paying λ and one message to each of the k_ps shards.
        t_comm = 2.0 * (p.d_m / ps_bw + p.latency_s + p.shards * p.message_s)
        time_train = t_load + iterations * (t_comp + t_comm)
        restarts = np.maximum(0.0, np.ceil(time_train / usable) - 1.0)
        per_round = p.startup_base_s + p.startup_per_function_s * n
        # Without a start-up, an overflowed time (inf restarts) stays inf, not inf·0 = NaN.
        startup = np.where(per_round > 0, (restarts + 1.0) * per_round, 0.0)
        time = time_train + restarts * p.restart_overhead_s + startup
        cost = (
            time * (n * (m / 1024.0) * p.p_gbs + p.shards * p.p_ps / 3600.0)
            + n * (restarts + 1.0) * p.p_req
        )
        valid = (rate > 0) & (storage_bw > 0) & (local_batch >= 1)
        time = np.where(valid, time, np.nan)
        cost = np.where(valid, cost, np.nan)
        restarts = np.where(valid, restarts, np.nan)
        within_limits = (n <= p.max_functions) & (m >= p.min_memory_mb)
        budget = p.vcpu_budget_mb()
        if budget is not None:  # n and m are whole numbers below 2**53: n * m is exact
            within_limits = within_limits & (n * m <= budget)
        feasible = valid & within_limits & (time <= p.deadline_s)

    return {
        "functions": n,
        "memory_mb": m,
        "fixed_local": fixed_local,
        "global_batch": global_batch,
        "local_batch": local_batch,
        "iterations": iterations,
        "rate": rate,
        "storage_bandwidth": storage_bw,
        "ps_bandwidth": ps_bw,
        "t_load": t_load,
        "t_comp": t_comp,
        "t_comm": t_comm,
        "time_train": time_train,
        "restarts": restarts,
        "time": time,
        "cost": cost,
        "valid": valid,
        "within_limits": valid & within_limits,
        "feasible": feasible,
    }


def _default_functions(p: Problem) -> FloatArray:
    """n = 1..max_functions as a column, so it broadcasts against the memory row."""
    return np.arange(1, p.max_functions + 1, dtype=np.float64)[:, np.newaxis]


def grid(
    source: Source,
    functions: npt.ArrayLike | None = None,
    memory_mb: npt.ArrayLike | None = None,
    *,
    platform: str | Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
) -> dict[str, np.ndarray]:
    """The model evaluated on the full grid, or on the given `functions` and `memory_mb`.

    `source`, `platform` and `deadline_s` are as for `read` (a catalogue's first server; pass
    a `Server`'s `problem` for another). By default `functions` is the
    column n = 1..max_functions and `memory_mb` the row
    of the platform's memory grid, so 2-D results have shape (max_functions, grid size); given
    arrays are used as they are and broadcast by numpy's rules (pass a column and a row for a
    grid, or two equal-length vectors for a list of plans). Each quantity keeps its own
    broadcast shape (`rate` depends on m only, `local_batch` on n only); `time`, `cost`,
    `restarts` are NaN where the plan is not `valid`. Keys: functions, memory_mb, fixed_local,
    global_batch, local_batch, iterations, rate, storage_bandwidth, ps_bandwidth, t_load,
    t_comp, t_comm, time_train, restarts, time, cost, valid, within_limits (valid, n and m
    within limits), feasible. Memory is not checked to lie on the platform grid.
    """
    p = read(source, platform=platform, deadline_s=deadline_s)
    n = _default_functions(p) if functions is None else np.asarray(functions, np.float64)
    m = p.memory()[np.newaxis, :] if memory_mb is None else np.asarray(memory_mb, np.float64)
    if n.ndim != 2 or n.shape[1] != 1 or n.shape[0] <= CHUNK_ROWS:
        return _evaluate(p, n, m)
    # A tall column: evaluate a few rows at a time so temporaries stay small, then stack.
    parts = [
        _evaluate(p, n[i : i + CHUNK_ROWS], m) for i in range(0, n.shape[0], CHUNK_ROWS)
    ]
    result: dict[str, np.ndarray] = {}
    for key in parts[0]:
        pieces = [part[key] for part in parts]
        result[key] = pieces[0] if pieces[0].shape[0] == 1 else np.concatenate(pieces, axis=0)
    return result


def _first_min(
    primary: FloatArray, mask: BoolArray, secondary: FloatArray | None = None
) -> tuple[int, int] | None:
    """Row and column of the masked point least in `primary`, then `secondary`, then position.

    Position order is row-major, i.e. smaller n first, then smaller m, exactly the tie order
    MODEL.md asks for, because rows are increasing n and columns increasing m. Infinite
    values (a valid plan whose time overflows) still count: they are masked in, not out.
    """
    if not mask.any():
        return None
    # NaN (e.g. an overflowed time times a zero price) sorts last, like +inf.
    first = np.where(mask & ~np.isnan(primary), primary, np.inf)
    keep = mask & (first == first[mask].min())
    if secondary is not None:
        second = np.where(keep & ~np.isnan(secondary), secondary, np.inf)
        keep = keep & (second == second[keep].min())
    row, col = np.unravel_index(int(np.argmax(keep)), mask.shape)
    return int(row), int(col)


@dataclass(frozen=True)
class Search:
    """The brute force over every server: the answer, each server's own answer (in the
    catalogue's order) and the servers tied with the answer's — within `COST_TIE` of its cost
    when 'optimal', exactly as fast when 'infeasible' — as (type, shards) pairs."""

    answer: OracleAnswer
    per_server: tuple[tuple[Server, OracleAnswer], ...]
    tied: frozenset[tuple[str | None, int]]

    def on(self, ps_type: str | None, shards: int) -> tuple[Server, OracleAnswer]:
        """The server of that type and shard count, and the answer on it alone."""
        for server, answer in self.per_server:
            if (server.type, server.shards) == (ps_type, shards):
                return server, answer
        raise KeyError((ps_type, shards))


def brute_force(
    source: Source, *, chunk_rows: int = CHUNK_ROWS,
    platform: str | Mapping[str, Any] | None = None, deadline_s: float | None = None,
) -> OracleAnswer:
    """The exact optimum (or fastest valid plan) by scanning every (n, m) of the grid, on
    every parameter server the instance allows (`search`).

    Two passes over chunks of `chunk_rows` values of n keep memory bounded for the
    1,000 x 10,113 grid: the first finds the least feasible cost (and least time of the
    fallback plans), the second revisits only the chunks that can hold a tied point and
    picks, among points whose cost is at most the minimum times (1 + `COST_TIE`), the least
    time, then smallest n, then smallest m. With no feasible point, the answer is the fastest
    plan that is valid with n and m within limits (ties: least cost, smaller n, smaller m).
    The second pass recomputes the same floats, so both passes agree bit for bit.
    `source`, `platform` and `deadline_s` are as for `read`.
    """
    return search(source, chunk_rows=chunk_rows, platform=platform, deadline_s=deadline_s).answer


def search(
    source: Source | Sequence[Server], *, chunk_rows: int = CHUNK_ROWS,
    platform: str | Mapping[str, Any] | None = None, deadline_s: float | None = None,
    exhaustive: bool = False,
) -> Search:
    """`brute_force` on each server of `source` (`servers`; or the given servers, `deadline_s`
    replacing theirs), and the choice among them: the cheapest 'optimal' answer (ties within
    `COST_TIE`: the faster, then fewer shards, then the catalogue's order); with none, the
    fastest 'infeasible' one (exact ties: the cheaper, then fewer shards, then the order);
    with no valid plan anywhere, 'none'.

    Unless `exhaustive`, servers another one dominates (`dominated`) are not scanned: the
    answer is the same, but `per_server` and `tied` leave them out. A full grid costs about a
    second per server, and a shipped catalogue has forty.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    if isinstance(source, Sequence) and not isinstance(source, str):
        if platform is not None:
            raise ValueError("given servers' platform cannot be replaced")
        chosen = [server if deadline_s is None else Server(
            server.type, server.shards, dataclasses.replace(server.problem, deadline_s=deadline_s))
            for server in source]
    else:
        chosen = servers(source, platform=platform, deadline_s=deadline_s)
    if not exhaustive:
        chosen = [server for i, server in enumerate(chosen) if not dominated(chosen, i)]
    per_server = tuple(
        (server, dataclasses.replace(
            _scan(server.problem, chunk_rows), ps_type=server.type, shards=server.shards))
        for server in chosen
    )
    optimal = [(i, a) for i, (_, a) in enumerate(per_server) if a.status == "optimal"]
    fallback = [(i, a) for i, (_, a) in enumerate(per_server) if a.status == "infeasible"]
    if optimal:
        c_min = min(_number(a.cost_usd) for _, a in optimal)
        tied = [(i, a) for i, a in optimal if _number(a.cost_usd) <= c_min * (1.0 + COST_TIE)]
        _, best = min(tied, key=lambda pair: (_number(pair[1].time_s), pair[1].shards, pair[0]))
    elif fallback:
        t_min = min(_number(a.time_s) for _, a in fallback)
        tied = [(i, a) for i, a in fallback if a.time_s == t_min]
        _, best = min(tied, key=lambda pair: (_number(pair[1].cost_usd), pair[1].shards, pair[0]))
    else:
        return Search(OracleAnswer("none", None, None, None, None), per_server, frozenset())
    return Search(best, per_server, frozenset((a.ps_type, a.shards or 1) for _, a in tied))


def dominated(chosen: Sequence[Server], i: int) -> bool:
    """Whether another server has at least the k_ps·B_p of `chosen[i]`, at most its k_ps·c_msg
    and at most its k_ps·p_ps, and is better in one of them or ahead in the tie order (fewer
    shards, then earlier).

    The model sees a server only through those three products, and every plan's time and
    cost is monotone in each (in floats too: every operation rounds monotonically), so on
    such a server each plan is as fast and as cheap: its optimum is as cheap and (among the
    plans within `COST_TIE` of it) as fast, its fastest plan as fast and, among those as
    fast, as cheap. Dropping `chosen[i]` changes neither the status nor the time of the
    answer, nor its cost beyond `COST_TIE` (only a server tied with a better one may be
    named instead of it). The relation has no cycles, so one of equal servers stays."""

    def figures(server: Server) -> tuple[float, float, float]:
        p = server.problem
        return p.shards * p.b_p, -(p.shards * p.message_s), -(p.shards * p.p_ps)

    mine = figures(chosen[i])
    for j, other in enumerate(chosen):
        theirs = figures(other)
        if j != i and all(a >= b for a, b in zip(theirs, mine, strict=True)) and (
                theirs != mine or (other.shards, j) < (chosen[i].shards, i)):
            return True
    return False


def _number(value: float | None) -> float:
    """A figure of an answer that has a plan (NaN sorts last, like the single-server rule)."""
    assert value is not None
    return math.inf if math.isnan(value) else value


def _scan(p: Problem, chunk_rows: int) -> OracleAnswer:
    """`brute_force` on one server: the whole grid of `p`, in chunks of `chunk_rows` rows."""
    n_all = _default_functions(p)
    m_row = p.memory()[np.newaxis, :]
    starts = list(range(0, n_all.shape[0], chunk_rows))

    def chunk(start: int) -> dict[str, np.ndarray]:
        return _evaluate(p, n_all[start : start + chunk_rows], m_row)

    # Per chunk: the least cost of its feasible plans and least time of its fallback plans,
    # or None when it has no such plan (not inf: a valid plan's time may overflow to inf).
    least_cost: list[float | None] = []
    least_time: list[float | None] = []
    for start in starts:
        values = chunk(start)
        feasible, fallback = values["feasible"], values["within_limits"]
        least_cost.append(float(values["cost"][feasible].min()) if feasible.any() else None)
        least_time.append(float(values["time"][fallback].min()) if fallback.any() else None)

    def answer(
        status: Status, start: int, point: tuple[int, int], values: dict[str, np.ndarray]
    ) -> OracleAnswer:
        row, col = point
        return OracleAnswer(
            status=status,
            functions=start + row + 1,
            memory_mb=int(m_row[0, col]),
            time_s=float(values["time"][row, col]),
            cost_usd=float(values["cost"][row, col]),
        )

    candidates: list[tuple[tuple[float, int, int], OracleAnswer]] = []
    costs = [c for c in least_cost if c is not None]
    if costs:
        limit = min(costs) * (1.0 + COST_TIE)
        for start, chunk_cost in zip(starts, least_cost, strict=True):
            if chunk_cost is not None and chunk_cost <= limit:
                values = chunk(start)
                tied = values["feasible"] & (values["cost"] <= limit)
                point = _first_min(values["time"], tied)
                if point is not None:
                    found = answer("optimal", start, point, values)
                    key = (float(found.time_s or 0.0), start + point[0], point[1])
                    candidates.append((key, found))
        return min(candidates, key=lambda pair: pair[0])[1]

    times = [t for t in least_time if t is not None]
    if not times:
        return OracleAnswer("none", None, None, None, None)
    t_min = min(times)
    for start, chunk_time in zip(starts, least_time, strict=True):
        if chunk_time is not None and chunk_time == t_min:
            values = chunk(start)
            fastest = values["within_limits"] & (values["time"] == t_min)
            point = _first_min(values["cost"], fastest)
            if point is not None:
                found = answer("infeasible", start, point, values)
                key = (float(found.cost_usd or 0.0), start + point[0], point[1])
                candidates.append((key, found))
    return min(candidates, key=lambda pair: pair[0])[1]


def fastest(source: Source, *, platform: str | Mapping[str, Any] | None = None) -> OracleAnswer:
    """The fastest valid plan within the limits, whatever the deadline (status 'infeasible'),
    or status 'none' when there is no valid plan."""
    return brute_force(source, platform=platform, deadline_s=-math.inf)


#: How far `around_deadline` moves the deadline: ~45 ulps, far beyond the 1-2 ulps by which
#: an implementation that orders its float operations differently may compute a time.
DEADLINE_NUDGE = 1e-14


def around_deadline(source: Source) -> list[OracleAnswer]:
    """The answers at the deadline and at the deadline moved by `DEADLINE_NUDGE` relative,
    down then up. When they agree, no plan lies within rounding of the deadline and any
    implementation must give that answer; when they do not, it may give any of them."""
    return [found.answer for found in searches_around_deadline(source)]


def searches_around_deadline(source: Source, *, exhaustive: bool = False) -> list[Search]:
    """`search` at the deadline and at the deadline moved by `DEADLINE_NUDGE` relative, down
    then up (see `around_deadline`), over the servers of `source`."""
    chosen = servers(source)
    deadline = chosen[0].problem.deadline_s
    return [
        search(chosen, deadline_s=deadline * factor, exhaustive=exhaustive)
        for factor in (1.0, 1.0 - DEADLINE_NUDGE, 1.0 + DEADLINE_NUDGE)
    ]
