"""`solve()`: from an instance to a verified plan; `evaluate()`: the model's figures for a plan."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..inputs.files import brief
from ..models import bounds as model_bounds
from ..models import performance as model
from ..models.noise import NoiseModel, PlanningNoise, planning_noise
from .candidates import (
    PRUNE_RTOL,
    TIE_RTOL,
    Candidates,
    cheapest_choices,
    enumerate_candidates,
    fastest_choices,
    pieces,
)
from .errors import InstanceError, NoValidPlanError, SolverError
from .fit_uncertainty import FitCoverage, corner
from .instance import MB_PER_VCPU, Instance, ParameterServer
from .instance_validation import plan_size, probability
from .instance_yaml import load_instance
from .plan import (
    CostBreakdown,
    Evaluation,
    Plan,
    PlanFigures,
    Status,
    TimeBreakdown,
)
from .selection import select

InstanceLike = Instance | Mapping[str, Any] | str | Path
RECHECK_RTOL = 1e-12  # the re-check's time may differ from the search's in the last bits


def _evaluation(
    instance: Instance, functions: int, memory_mb: int, noise: PlanningNoise | None = None
) -> Evaluation:
    """The model's full figures for one plan, with every reason it is not feasible."""
    f = model.evaluate(instance.parameters(), functions, memory_mb, noise)
    figure = {name: float(value) for name, value in vars(f).items()}
    violations: list[str] = []
    if figure["rate"] <= 0:
        violations.append(
            f"the rate R({memory_mb} MB) = {figure['rate']:.4g} samples/s is not positive"
        )
    if figure["storage_bandwidth"] <= 0:
        violations.append(
            f"the storage bandwidth at {memory_mb} MB = {figure['storage_bandwidth']:.4g} MB/s "
            "is not positive"
        )
    if figure["local_batch"] < 1 - model.BATCH_SLACK:
        violations.append(f"the local batch {figure['local_batch']:.4g} is below 1")
    if noise is not None:
        violations += _never_finishes(instance, functions, memory_mb, noise)
    valid = not violations
    deadline = instance.objective.deadline_s
    checked = figure[model.deadline_figure(noise)]  # the very figure the search compares
    if valid and checked > deadline:
        violations.append(f"it takes {checked:.1f} s, past the deadline of {deadline:g} s")
    if functions > instance.max_functions:
        violations.append(f"{functions} functions exceed the limit of {instance.max_functions}")
    if memory_mb < instance.min_memory_mb:
        violations.append(f"{memory_mb} MB is below the minimum {instance.min_memory_mb:g} MB")
    budget = instance.platform.vcpu_memory_mb
    if budget is not None and functions * memory_mb > budget:
        violations.append(
            f"{functions} × {memory_mb} MB needs {functions * memory_mb / MB_PER_VCPU:.4f} vCPU "
            f"(m/{MB_PER_VCPU} each), more than the platform's `max_vcpu` "
            f"{instance.platform.max_vcpu:g} (n·m ≤ {budget:,} MB)"
        )
    grid = instance.platform.memory
    on_grid = (memory_mb - grid.min_mb) % grid.step_mb == 0
    if not (grid.min_mb <= memory_mb <= grid.max_mb and on_grid):
        violations.append(
            f"{memory_mb} MB is not on the platform's grid "
            f"({grid.min_mb}..{grid.max_mb} MB in steps of {grid.step_mb})"
        )
    restarts = int(figure["restarts"]) if valid else 0
    return Evaluation(
        instance=instance.name,
        functions=functions,
        memory_mb=memory_mb,
        valid=valid,
        feasible=not violations,
        violations=tuple(violations),
        time_s=figure["time"],
        cost_usd=figure["cost"],
        deadline_s=deadline,
        deadline_time_s=checked,
        local_batch=figure["local_batch"],
        global_batch=figure["global_batch"],
        iterations=figure["iterations"],
        restarts=restarts,
        invocations=functions * (restarts + 1),
        time_breakdown=TimeBreakdown(
            figure["t_load"], figure["t_comp_total"], figure["t_comm_total"],
            figure["t_restart"], figure["t_cold"], figure["t_startup"],
        ),
        cost_breakdown=CostBreakdown(
            figure["cost_functions"], figure["cost_ps"], figure["cost_requests"]
        ),
    )


def _never_finishes(
    instance: Instance, functions: int, memory_mb: int, noise: PlanningNoise
) -> list[str]:
    """Why a plan never finishes under the declared crashes (MODEL.md, "Failures"), if so."""
    names = ("crash_load", "crash_load_quantile")
    values = instance.values()
    loads = model.figures(values, functions, memory_mb, names, noise)
    load, load_quantile = (float(loads[name]) for name in names)
    if not (load >= 1 or load_quantile >= 1):
        return []
    return [
        f"it never finishes: at `noise.failure_rate_per_hour` = "
        f"{noise.failure_rate_per_s * 3600:g} its {functions} functions lose to crashes "
        f"{max(load, load_quantile):.3g} s per second of work (planned for: "
        f"{load:.3g} expected, {load_quantile:.3g} guaranteed; must be < 1); use fewer "
        "functions, more memory or a smaller `noise.checkpoint_every`"
    ]


def _no_valid_plan(instance: Instance, noise: PlanningNoise | None = None) -> str:
    """Why no plan within the instance's limits is valid, naming the field to change."""
    top = instance.platform.memory.max_mb
    if noise is not None and _never_finishes(instance, 1, top, noise):
        rate = noise.failure_rate_per_s * 3600
        return (f"instance {instance.name!r} has no valid plan: at `noise.failure_rate_per_hour` "
                f"= {rate:g} even one function of {top} MB loses to crashes more than a second "
                "per second of work, so no run ever finishes; lower the failure rate or "
                "checkpoint more often (`noise.checkpoint_every`)")
    best = model.evaluate(instance.parameters(), 1, top)  # R and B_f^s only grow with m
    if instance.min_memory_mb > top:
        reason = (f"`workload.min_memory_mb` ({instance.min_memory_mb:g}) exceeds the platform's "
                  f"largest memory ({top} MB)")
    elif best.rate <= 0:
        reason = (f"`profile.rate` gives R ≤ 0 samples/s at every memory size up to {top} MB "
                  f"(R({top} MB) = {float(best.rate):.4g}); check its slope and intercept")
    elif best.storage_bandwidth <= 0:
        reason = (f"`profile.storage_bandwidth` is ≤ 0 MB/s at every memory size up to {top} MB "
                  f"({float(best.storage_bandwidth):.4g} MB/s at {top} MB); check its slope "
                  "and intercept")
    else:  # valid sizes exist, but one function of the smallest exceeds the vCPU limit
        memory = instance.platform.memory.values()
        values = instance.values()
        smallest = memory[model_bounds.lowest_valid_memory(values, memory, instance.min_memory_mb)]
        reason = (f"the platform's `max_vcpu` {instance.platform.max_vcpu:g} allows "
                  f"{instance.platform.vcpu_memory_mb:,} MB of functions in all, less than one "
                  f"function of the smallest valid memory, {smallest:g} MB; raise "
                  "`platform.max_vcpu` or lower `workload.min_memory_mb`")
    return f"instance {instance.name!r} has no valid plan: {reason}"


def _extreme_input(instance: Instance) -> tuple[str, float]:
    """The instance's number farthest from 1 in magnitude, by its YAML field: the likely cause
    when the model overflows (the deadline, the limits and the memory grid, all capped by the
    loader, do not count)."""
    found: list[tuple[str, float]] = []

    def walk(path: str, section: Any) -> None:
        for field in dataclasses.fields(section):
            value = getattr(section, field.name)
            if dataclasses.is_dataclass(value) and field.name != "memory":
                walk(f"{path}.{field.name}", value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value:
                found.append((f"{path}.{field.name}", value))

    for section in ("platform", "workload", "profile", "parameter_server"):
        walk(section, getattr(instance, section))
    return max(found, key=lambda item: abs(math.log10(abs(item[1]))), default=("workload", 0.0))


def _require_finite(
    instance: Instance, figure: str, values: npt.NDArray[np.float64],
    functions: npt.NDArray[np.int64], memory_mb: npt.NDArray[np.float64],
) -> None:
    """Raise one `InstanceError` naming the likely field when the model overflowed (inf, NaN)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        first = int(bad[0])
        field, value = _extreme_input(instance)
        raise InstanceError(
            f"instance {brief(instance.name)}: the model's {figure} is {float(values[first])} "
            f"for {int(functions[first])} × {float(memory_mb[first]):g} MB (a float overflow); "
            f"the input farthest from ordinary magnitudes is `{field}` = {brief(value)}: give "
            "it a realistic value"
        )


def evaluate(
    instance: InstanceLike, *, functions: int, memory_mb: int, guarantee: float | None = None,
    noise: NoiseModel | None = None,
) -> Evaluation:
    """The model's figures for any plan, feasible or not (`valid`, `feasible`, `violations`);
    with `guarantee` (and `noise`) its deadline is checked as `solve` checks it, a profiled
    instance's at its fit's adverse corner (`fit_coverage`)."""
    n, m = plan_size(functions, memory_mb)
    loaded = load_instance(instance)
    planning = planning_terms(loaded, guarantee, noise)
    planned, coverage = corner(loaded, planning)
    found = _evaluation(planned, n, m, planning)
    return found if coverage is None else dataclasses.replace(found, fit_coverage=coverage)


def check_guarantee(guarantee: float | None, noise: NoiseModel | None) -> float | None:
    """The guarantee as a float (None: plan for the mean), or `InstanceError` for a bad pair."""
    if noise is not None and not isinstance(noise, NoiseModel):
        raise InstanceError(
            f"`noise` must be a lambdadnn.models.noise.NoiseModel, got {brief(noise)}"
        )
    if guarantee is None:
        if noise is not None:
            raise InstanceError("`noise` is only used with `guarantee`; pass both or neither")
        return None
    return probability("guarantee", guarantee)


def planning_terms(
    instance: Instance, guarantee: float | None, noise: NoiseModel | None
) -> PlanningNoise | None:
    """The noise terms `solve(guarantee=, noise=)` plans `instance` with (None without a
    guarantee)."""
    share = check_guarantee(guarantee, noise)
    if share is None:
        return None
    return planning_noise(noise or NoiseModel(), share, instance.max_functions)


def solve(
    instance: InstanceLike, *, platform: str | None = None, deadline_s: float | None = None,
    guarantee: float | None = None, noise: NoiseModel | None = None,
) -> Plan:
    """The cheapest plan that meets the deadline over the whole grid, proven optimal.

    `instance` is an `Instance`, a mapping in the YAML schema or a path to a YAML file;
    `platform` replaces its platform by name and `deadline_s` its deadline. When no plan
    meets the deadline the answer has `status == "infeasible"` and is the fastest plan.
    With `guarantee=p` the plan meets the deadline in at least a share p of runs under the
    noise model (`noise`, default `NoiseModel()`): the deadline is checked against the
    p-quantile of the training time, the cost is the expected one. A profiled instance (a
    `fit:` section) is then planned at its fit's adverse corner, so that the share p covers
    the fitted parameters' standard errors too (MODEL.md, "Fit uncertainty"; `fit_coverage`).
    The exact enumeration chooses when one plan is left after MODEL.md's tie rule, else
    HiGHS does (`plan.selected_by`).
    Raises `InstanceError` for bad input (naming the likely field when the model overflows,
    or the fitted parameter whose standard error the guarantee cannot plan for),
    `NoValidPlanError` when no plan is valid at all, `SolverError` when HiGHS does not prove
    an optimum or the re-check fails.
    """
    loaded = load_instance(instance, platform=platform)
    given = loaded if deadline_s is None else loaded.with_deadline(deadline_s)
    if given.servers:
        return _choose_server(given, guarantee, noise, fastest_only=False)
    return _solve(given, guarantee, noise, fastest_only=False)


def fastest(
    instance: InstanceLike, *, platform: str | None = None, guarantee: float | None = None,
    noise: NoiseModel | None = None,
) -> Plan:
    """The fastest valid plan, whatever the deadline: the plan `solve()` answers when no plan
    meets it, with `status == "infeasible"` (it was chosen for its time, not its cost) and the
    instance's own deadline. Under a guarantee, fastest at the guarantee's quantile of the
    time. Raises as `solve()` does."""
    loaded = load_instance(instance, platform=platform)
    if loaded.servers:
        return _choose_server(loaded, guarantee, noise, fastest_only=True)
    return _solve(loaded, guarantee, noise, fastest_only=True)


def _choose_server(
    given: Instance, guarantee: float | None, noise: NoiseModel | None, *, fastest_only: bool,
) -> Plan:
    """`solve()` over the instance's parameter servers (each a type at a shard count): the
    cheapest plan on any of them (ties within TIE_RTOL: the faster, then fewer shards, then
    the catalogue's order), or, when none meets the deadline, the fastest plan on any.

    Servers another one dominates are left out first (`undominated`); the rest are searched
    together (`_search_servers`), and the plan is chosen and re-checked on its server as a
    pinned solve would be, from that search. The fastest plan comes from every server's box
    (`models.bounds.boxes`, one evaluation).
    """
    started = time.perf_counter()
    servers = given.servers
    planning = planning_terms(given, guarantee, noise)
    candidates = undominated(servers)
    cornered = [corner(given.on_server(servers[i]), planning) for i in candidates]
    if not fastest_only:
        searched = _search_servers([instance for instance, _ in cornered], planning)
        if searched is not None:
            found, box, box_points, evaluated = searched
            assert found.server is not None
            shards = np.array([servers[i].shards for i in candidates])
            tied = np.flatnonzero(found.cost <= found.cost.min() * (1 + TIE_RTOL))
            on = found.server[tied]
            best = tied[np.lexsort((on, shards[on], found.time[tied]))[0]]
            mine = found.server == found.server[best]
            winner = int(found.server[best])
            own = Candidates(found.functions[mine], found.memory_index[mine], found.time[mine],
                             found.cost[mine], evaluated)
            chosen = _plan(given.on_server(servers[candidates[winner]]), *cornered[winner], box,
                           planning, guarantee, own, servers=len(servers))
            bounds = _over_servers(chosen.bounds, len(servers), len(candidates),
                                   (box.n_min, box.n_max), box_points, ideal=True)
            return dataclasses.replace(chosen, bounds=bounds,
                                       solve_seconds=time.perf_counter() - started)
    first_one = cornered[0][0]
    found_boxes = model_bounds.boxes(
        [instance.values() for instance, _ in cornered], first_one.platform.memory.values(),
        max_functions=first_one.max_functions, min_memory_mb=first_one.min_memory_mb,
        deadline_s=first_one.objective.deadline_s, noise=planning,
        vcpu_memory_mb=first_one.platform.vcpu_memory_mb,
    )
    boxes = {j: box for j, box in enumerate(found_boxes) if box is not None}
    if not boxes:  # no server has a valid plan: say why as a pinned solve would
        return _solve(given.on_server(servers[0]), guarantee, noise, fastest_only=fastest_only)
    # the fastest plan of the servers whose fastest time is the least (ties: cost)
    fastest_at = {j: float(box.envelope_time.min()) for j, box in boxes.items()}
    least = min(fastest_at.values())
    every = list(boxes.values())
    evaluated = sum(len(box.functions) for box in every)
    rivals = [(_plan(given.on_server(servers[candidates[j]]), *cornered[j], boxes[j], planning,
                     guarantee, None, servers=len(servers), evaluated_in_all=evaluated), j)
              for j in boxes if fastest_at[j] <= least * (1 + TIE_RTOL)]
    chosen, _ = min(rivals, key=lambda pair: (pair[0].deadline_time_s, pair[0].cost_usd,
                                              servers[candidates[pair[1]]].shards, pair[1]))
    bounds = _over_servers(
        chosen.bounds, len(servers), len(candidates),
        (min(box.n_min for box in every), max(box.n_max for box in every)),
        sum(box.box_points for box in every), ideal=False)
    return dataclasses.replace(chosen, bounds=bounds, solve_seconds=time.perf_counter() - started)


def _box(loaded: Instance, planning: PlanningNoise | None, *, tops: tuple[str, ...] = ()
         ) -> model_bounds.Box | None:
    """`models.bounds.box` of an instance as loaded (at its fit's corner)."""
    return model_bounds.box(
        loaded.values(), loaded.platform.memory.values(), max_functions=loaded.max_functions,
        min_memory_mb=loaded.min_memory_mb, deadline_s=loaded.objective.deadline_s,
        noise=planning, vcpu_memory_mb=loaded.platform.vcpu_memory_mb, tops=tops,
    )


def _over_servers(chosen: model_bounds.Bounds, servers: int, undominated_count: int,
                  n_range: tuple[int, int], box_points: int, *, ideal: bool
                  ) -> model_bounds.Bounds:
    """The bounds of a choice over servers: the box searched (the ideal server's when `ideal`,
    else the fastest plan's server's), how the servers were searched, the rows (server, n)
    of all of them, and the grid of every (type, shards) the catalogue offers."""
    n_min, n_max = n_range
    dominance = (
        f"servers: {undominated_count} of {servers} (type, shards) are not dominated (one "
        "with at least k·B_p, at most k·c_msg and at most k·p_ps is as fast and as cheap for "
        "every plan, proved)"
    )
    searched = (
        "; they are searched together, their rows (server, n) in the box of T*, the time on "
        "an ideal server with the greatest k·B_p and least k·c_msg of them (T non-increasing "
        "in k·B_p and non-decreasing in k·c_msg, proved, so no server is faster), and a row "
        "costs at least T*(n, top)·weight(n, m_lo) + n·p_req, so one above the incumbent is "
        "dropped before its own time is evaluated, and so is each piece of a row whose "
        "T*(n, piece top)·weight(n, piece start) + n·(r* + 1)·p_req is"
        if ideal else
        f"; the fastest plan is sought (none meets the deadline, or `fastest`), so every row "
        f"(server, n), n ∈ [{n_min}, {n_max}] in all, is evaluated at its top"
    )
    *box_lines, rows_line, pruning = chosen.derivations
    if ideal:
        rows_line = rows_line.replace("; T(n, ", "; on the ideal server, T*(n, ", 1)
    return dataclasses.replace(
        chosen, n_min=n_min, n_max=n_max, grid_points=chosen.grid_points * servers,
        box_points=box_points, derivations=(*box_lines, dominance + searched, rows_line, pruning),
    )


SEED_ROWS = 128  # the rows of least floor evaluated first, for an incumbent
SAMPLE_EVERY = 4  # `least` finds its threshold among every 4th value
# Above this many pieces kept, each is evaluated at its top before it is split: the level
# costs about as much as evaluating 2,000 plans (its fixed cost is the model's ~100 array
# operations), and it saves up to PIECES - 1 plans for each piece it drops.
TOPS_FIRST_PIECES = 512


def _search_servers(
    instances: list[Instance], planning: PlanningNoise | None
) -> tuple[Candidates, model_bounds.Box, int, int] | None:
    """The branch and bound over the rows (server, n) of every server in `instances` at once
    (the parameters that differ between servers as arrays, one entry per server; the plans'
    `server` index into `instances`), with the box they lie in (the ideal server's, below),
    its points over all servers and the plans evaluated; None when no plan on any server
    meets the deadline.

    T is non-increasing in k·B_p and non-decreasing in k·c_msg (proved), so an ideal server
    with the greatest k·B_p and the least k·c_msg of all is at least as fast for every
    plan: its box bounds every server's rows, and T*(n, top)·weight_s(n, m_lo) + n·p_req
    bounds the cost of row n on server s. The rows of least bound are searched first; every
    row whose bound is above the plan found is dropped before its own time is evaluated,
    and so is every piece of a row whose bound on the ideal server is.
    """
    best = ideal(instances[0], [instance.parameter_server for instance in instances])
    envelope = _box(best, planning, tops=("time",))
    if envelope is None or not envelope.deadline_met:
        return None
    deadline = instances[0].objective.deadline_s
    meets = envelope.envelope_time <= deadline
    count, rows_n, tops = len(instances), envelope.functions[meets], envelope.row_hi[meets]
    memory, low = envelope.memory, envelope.m_lo
    per_server = model.per_server([instance.values() for instance in instances])
    # The rows (server, n) are the cells of a servers × n grid, numbered server-major: row i
    # is n = rows_n[i % len(rows_n)] on server i // len(rows_n), so no per-row copy is made.
    n_of = rows_n.astype(np.float64)
    on_servers = model.at(per_server, np.arange(count, dtype=np.int64), column=True)
    grid = np.broadcast_to(n_of, (count, len(rows_n)))
    weight = model.figures(on_servers, grid, memory[low], ("weight",))["weight"]
    p_req = on_servers[model.parameter_index("p_req")]
    floor = (envelope.top["time"][meets] * weight + n_of * p_req).ravel()

    def cells(index: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The servers and the positions in `rows_n` of rows `index`."""
        return np.divmod(index, len(rows_n))

    checked = model.deadline_figure(planning)
    names = tuple(dict.fromkeys((checked, "time", "restarts", "cost")))
    # First an incumbent: the rows of least floor at PIECES memory sizes each and at their
    # tops (their fastest plans), in one evaluation. A row missing the deadline at its top
    # misses it everywhere; the others get their own floor, tighter than the ideal server's.
    pick = least(floor, SEED_ROWS)
    server_of, at_n = cells(pick)
    starts, ends = pieces(np.full(len(pick), low), tops[at_n])
    seen = model.figures(model.at(per_server, server_of, column=True), n_of[at_n][:, None],
                         memory[np.concatenate([starts, ends[:, -1:]], axis=1)], names, planning)
    feasible = seen[checked] <= deadline
    incumbent = float(seen["cost"][feasible].min()) if feasible.any() else np.inf
    floor[pick] = np.where(feasible[:, -1], np.maximum(floor[pick], model_bounds.cost_lower_bound(
        model.at(per_server, server_of), n_of[at_n], np.full(len(pick), memory[low]),
        seen["time"][:, -1], seen["restarts"][:, -1])), np.inf)
    evaluated = seen[checked].size
    alive = np.flatnonzero(floor <= incumbent * (1 + PRUNE_RTOL))
    if not len(alive):
        return None
    # The first level of every alive row's search, from the ideal server: each n's PIECES
    # pieces are evaluated there once (its time at a piece's top is a floor for every
    # server's), and a piece is kept on a server only if that floor meets the deadline and
    # its cost floor T*(n, top)·weight_s(n, start) + n·(r* + 1)·p_req is not above the plan.
    server_of, at_n = cells(alive)
    first_at, of_row = np.unique(at_n, return_inverse=True)
    piece_lo, piece_hi = pieces(np.full(len(first_at), low), tops[first_at])
    star = model.figures(best.values(), n_of[first_at][:, None], memory[piece_hi],
                         names, planning)
    piece_floor = model_bounds.cost_lower_bound(
        model.at(per_server, server_of, column=True), n_of[at_n][:, None],
        memory[piece_lo[of_row]], star["time"][of_row], star["restarts"][of_row])
    keep = (star[checked][of_row] <= deadline) & (piece_floor <= incumbent * (1 + PRUNE_RTOL))
    keep &= (piece_hi >= piece_lo)[of_row]  # a row narrower than PIECES has empty pieces
    shape = keep.shape
    found = enumerate_candidates(
        per_server, memory, np.broadcast_to(rows_n[at_n][:, None], shape)[keep],
        piece_lo[of_row][keep], piece_hi[of_row][keep], deadline, planning,
        server=np.broadcast_to(server_of[:, None], shape)[keep], above=incumbent,
        tops_first=int(keep.sum()) > TOPS_FIRST_PIECES)
    evaluated += found.evaluated
    if not len(found.cost):
        return None
    box_points = count * int((tops - low + 1).sum())
    return found, envelope, box_points, evaluated


def least(values: npt.NDArray[np.float64], count: int) -> npt.NDArray[np.int64]:
    """The indices of `count` least `values` (all of them if there are fewer; ties at the
    last one broken either way), for the search's seed rows.

    `np.argpartition` costs about 10 ns a value, 0.1 ms on a catalogue's 10,000 rows: a
    tenth of a warm `solve()`. The count-th least of every `SAMPLE_EVERY`-th value is at
    least the count-th least of all, so the values at most it hold every one wanted, and
    only those (about `count`·`SAMPLE_EVERY` of them) are partitioned.
    """
    if len(values) <= count:
        return np.arange(len(values))
    sample = values[::SAMPLE_EVERY]
    if len(sample) > count:
        below = np.flatnonzero(values <= np.partition(sample, count - 1)[count - 1])
        return below[np.argpartition(values[below], count - 1)[:count]]
    return np.argpartition(values, count - 1)[:count]


def ideal(instance: Instance, servers: Sequence[ParameterServer]) -> Instance:
    """`instance` pinned to an ideal server of `servers`: one machine with the greatest k·B_p,
    the least k·c_msg and the least k·p_ps of them, at least as fast and as cheap as each of
    them for every plan (`undominated`'s monotonicity): its box holds every server's rows."""
    return instance.on_server(ParameterServer(
        bandwidth_mbps=max(server.shards * server.bandwidth_mbps for server in servers),
        function_bandwidth_mbps=servers[0].function_bandwidth_mbps,
        price_per_hour=min(server.shards * server.price_per_hour for server in servers),
        message_s=min(server.shards * server.message_s for server in servers),
    ))


def undominated(servers: tuple[ParameterServer, ...]) -> list[int]:
    """The servers no other one beats: one with at least the bandwidth k·B_p, at most the
    message cost k·c_msg and at most the price k·p gives every plan a time and a cost no
    larger, so it is skipped when that one is also cheaper per hour or wins the tie rule
    (fewer shards, then earlier in the catalogue)."""
    k = np.array([server.shards for server in servers], dtype=np.float64)
    bandwidth = k * np.array([server.bandwidth_mbps for server in servers])
    price = k * np.array([server.price_per_hour for server in servers])
    message = k * np.array([server.message_s for server in servers])
    order = np.arange(len(servers))
    earlier = (k[:, None] < k[None, :]) | ((k[:, None] == k[None, :])
                                           & (order[:, None] < order[None, :]))
    # beats[j, i]: server j beats server i
    beats = ((bandwidth[:, None] >= bandwidth[None, :]) & (price[:, None] <= price[None, :])
             & (message[:, None] <= message[None, :])
             & ((price[:, None] < price[None, :]) | earlier))
    np.fill_diagonal(beats, False)
    return np.flatnonzero(~beats.any(axis=0)).tolist()


def _solve(
    given: Instance, guarantee: float | None, noise: NoiseModel | None, *, fastest_only: bool,
) -> Plan:
    """`solve()` of `given`; `fastest_only`: the fastest plan even where one meets the deadline
    (the box still holds every valid n then)."""
    started = time.perf_counter()
    planning = planning_terms(given, guarantee, noise)
    loaded, coverage = corner(given, planning)  # under a guarantee, the fit's adverse corner
    box = _box(loaded, planning)
    if box is None:
        raise NoValidPlanError(_no_valid_plan(loaded, planning))
    found = None
    if box.deadline_met and not fastest_only:
        meets = box.envelope_time <= loaded.objective.deadline_s
        found = enumerate_candidates(
            loaded.values(), box.memory, box.functions[meets], box.m_lo, box.row_hi[meets],
            loaded.objective.deadline_s, planning,
        )
    plan = _plan(given, loaded, coverage, box, planning, guarantee, found)
    return dataclasses.replace(plan, solve_seconds=time.perf_counter() - started)


def _plan(
    given: Instance, loaded: Instance, coverage: FitCoverage | None, box: model_bounds.Box,
    planning: PlanningNoise | None, guarantee: float | None, found: Candidates | None, *,
    servers: int = 1, evaluated_in_all: int | None = None,
) -> Plan:
    """The plan chosen among the search's feasible plans (`found`; None: none meets the
    deadline, or the fastest is asked for, so the box's rows at their tops), re-checked
    against the scalar model: `loaded` is `given` at its fit's adverse corner. A choice
    among `servers` parameter servers says so, with the plans evaluated on all of them
    (`evaluated_in_all`)."""
    values = loaded.values()
    memory = box.memory
    deadline = loaded.objective.deadline_s
    if found is not None:
        n, index, t, c = found.functions, found.memory_index, found.time, found.cost
        _require_finite(loaded, "cost", c, n, memory[index])
        # Only plans the cost bound cannot rule out reach the choice: the rest cost provably
        # more than the incumbent, a feasible plan.
        competitive = c <= c.min() * (1 + PRUNE_RTOL)
        n, index, t, c = n[competitive], index[competitive], t[competitive], c[competitive]
        choices, objective = cheapest_choices(t, c, n, index)
        status: Status = "optimal"
        evaluated = found.evaluated
    else:
        n, index, t = box.functions, box.row_hi, box.envelope_time
        _require_finite(loaded, model.deadline_figure(planning), t, n, memory[index])
        c = model.figures(
            values, n.astype(np.float64), memory[index], ("cost",), planning
        )["cost"]
        _require_finite(loaded, "cost", c, n, memory[index])
        choices, objective = fastest_choices(t, c, n, index)
        status = "infeasible"
        evaluated = len(n)
    selection = select(objective, t[choices], deadline_s=deadline if status == "optimal" else None)
    chosen = int(choices[selection.index])
    plan_n, plan_m, plan_t = int(n[chosen]), int(memory[index[chosen]]), float(t[chosen])

    checked = _evaluation(loaded, plan_n, plan_m, planning)
    # The search's figures are vectorised, the re-check's scalar: numpy may round them
    # differently in the last place, nothing more.
    agrees = math.isclose(checked.deadline_time_s, plan_t, rel_tol=RECHECK_RTOL)
    if not checked.valid or not agrees:
        raise SolverError(
            f"re-check failed: the model gives {checked.deadline_time_s!r} s for the chosen plan "
            f"({plan_n} × {plan_m} MB), the search {plan_t!r} s"
        )
    if status == "optimal" and not checked.feasible:
        raise SolverError(f"re-check failed: the chosen plan is not feasible: {checked.violations}")
    if evaluated_in_all is not None:
        evaluated = evaluated_in_all
    grid = "the grid" if servers == 1 else f"the grid of all {servers} servers"
    pruning = (
        f"cost: C(n, m ∈ [a, b]) ≥ T(n, b)·weight(n, a) + n·(r(n, b) + 1)·p_req (T, r "
        "non-increasing and the weight non-decreasing in m); branch and bound against the "
        f"incumbent evaluated {evaluated:,} plans, "
        f"{evaluated / (box.bounds.grid_points * servers):.3%} of {grid}"
        if status == "optimal" else
        f"fastest plan: T(n, {plan_m} MB) evaluated for all {evaluated:,} valid "
        + ("n" if servers == 1 else "(server, n)")
    )
    bounds = dataclasses.replace(
        box.bounds, evaluated_points=evaluated, derivations=(*box.bounds.derivations, pruning)
    )
    shared = {field.name: getattr(checked, field.name) for field in dataclasses.fields(PlanFigures)}
    return Plan(
        **shared,
        status=status,
        platform=loaded.platform.name,
        architecture=loaded.platform.architecture,
        guarantee=guarantee,
        bounds=bounds,
        candidates_evaluated=evaluated,
        pareto_candidates=len(choices),
        selected_by=selection.selected_by,
        solver_status=selection.solver_status,
        solve_seconds=0.0,
        solved_from=given,
        fit_coverage=coverage,
    )


def deadline_crossings(
    instance: InstanceLike, *, memory_mb: int, platform: str | None = None
) -> list[model_bounds.Crossing]:
    """Where MODEL.md's T_train(n, memory_mb) = T_o, per regime (the paper's closed forms for
    n, solved by SymPy): the n bounds of `solve()` lie between them, restarts only adding time.
    With several parameter servers, on the ideal one (`ideal`), whose box `solve()` reports."""
    loaded = load_instance(instance, platform=platform)
    if loaded.servers:
        loaded = ideal(loaded, [loaded.servers[i] for i in undominated(loaded.servers)])
    values = loaded.values()
    return model_bounds.deadline_crossings(values, memory_mb, loaded.objective.deadline_s)
