"""A job's options when jobs share a limit: its (time, cost) Pareto front, exactly.

`solve()` answers one deadline; a schedule may give a job a faster, dearer plan to start it
later, or a slower, cheaper one. Every such choice worth making is a point of the job's
Pareto front: the plans no other plan beats in both the time checked against the deadline
and the expected cost. The front is found by the same branch and bound as `solve()`, with
its incumbent held at the cost of the fastest plan (`enumerate_candidates(ceiling=...)`):
a plan dearer than the fastest is dominated by it, so no front point is pruned. The front
does not depend on the deadline except as its slowest point, so it is kept per instance
without its deadline and reused for every deadline up to the slowest computed; a call that
fails keeps nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..models import bounds as model_bounds
from ..models import performance as model
from ..models.noise import NoiseModel, PlanningNoise, planning_noise
from .candidates import Beaten, enumerate_candidates, pareto
from .fit_uncertainty import corner
from .instance import Instance
from .pipeline import undominated

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.int64]
FRONTS_KEPT = 256


@dataclass(frozen=True)
class Options:
    """A job's Pareto-optimal plans, fastest (and dearest) first: the time is the one checked
    against the deadline (the guarantee's quantile under one), held in the pool while the job
    runs; the cost is the expected one. Both strictly monotone: time up, cost down."""

    time_s: Array
    cost_usd: Array
    functions: Index
    memory_mb: Index

    def __len__(self) -> int:
        return len(self.time_s)

    def within(self, slowest_s: float) -> Options:
        """The options that take at most `slowest_s`."""
        keep = int(np.searchsorted(self.time_s, slowest_s, side="right"))
        return Options(
            self.time_s[:keep], self.cost_usd[:keep], self.functions[:keep],
            self.memory_mb[:keep],
        )


def merged(parts: list[Options]) -> Options:
    """The front of several fronts together (a job that may run on several servers)."""
    if len(parts) == 1:
        return parts[0]
    time = np.concatenate([part.time_s for part in parts])
    cost = np.concatenate([part.cost_usd for part in parts])
    functions = np.concatenate([part.functions for part in parts])
    memory = np.concatenate([part.memory_mb for part in parts])
    keep = pareto(time, cost, functions, memory)
    return Options(time[keep], cost[keep], functions[keep], memory[keep])


NO_OPTIONS = Options(
    np.empty(0), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
)
_Key = tuple[tuple[object, ...], float | None, NoiseModel | None, int]
_fronts: OrderedDict[_Key, tuple[float, tuple[Options, ...]]] = OrderedDict()
_lock = threading.Lock()


def _front(instance: Instance, noise: PlanningNoise | None, max_functions: int,
           slowest_s: float, known: Options) -> Options:
    """The front of `instance`'s plans, of those no plan of `known` (other servers' fronts)
    beats in time, cost and functions at once; its fastest plan always."""
    values = instance.values()
    memory = instance.platform.memory.values()
    box = model_bounds.box(
        values, memory, max_functions=max_functions, min_memory_mb=instance.min_memory_mb,
        deadline_s=slowest_s, noise=noise, vcpu_memory_mb=instance.platform.vcpu_memory_mb,
    )
    if box is None or not box.deadline_met:
        return NO_OPTIONS
    meets = box.envelope_time <= slowest_s
    rows, row_hi, envelope = box.functions[meets], box.row_hi[meets], box.envelope_time[meets]
    fastest = int(np.argmin(envelope))
    ceiling = float(model.figures(
        values, float(rows[fastest]), memory[row_hi[fastest]], ("cost",), noise
    )["cost"])
    beaten = Beaten.of(known.time_s, known.cost_usd, known.functions) if len(known) else None
    found = enumerate_candidates(
        values, memory, rows, box.m_lo, row_hi, slowest_s, noise, ceiling=ceiling,
        beaten=beaten, front_only=True,
    )
    time, cost, functions, index = found.time, found.cost, found.functions, found.memory_index
    if beaten is not None:
        # A real plan on the front is never wrong (pricing takes its cost and time as a
        # kind's cheapest within a time); the fastest stands for those above the ceiling.
        keep = ~(beaten.least(functions, time) < cost)
        keep[np.argmin(time)] = True
        time, cost, functions, index = time[keep], cost[keep], functions[keep], index[keep]
    front = pareto(time, cost, functions, index)
    return Options(time[front], cost[front], functions[front],
                   memory[index[front]].astype(np.int64))


def kind_fronts(instance: Instance, *, guarantee: float | None, noise: NoiseModel | None,
                max_functions: int, slowest_s: float) -> tuple[Options, ...]:
    """Per kind of plan of `instance` (itself, or each of its parameter servers another does
    not beat, in `undominated` order), the front of its plans that no plan of the kinds
    before it (cheapest per hour first) beats in time, cost and functions at once. Those
    are never in a cheaper schedule: their (time, cost) is no better and they hold no fewer
    functions for no shorter a time. The union of the kinds' fronts (`merged`) is
    `options`; the dear servers (whose fastest plans cost $10-25 on ResNet-50) are searched
    only where they are faster."""
    limit = min(max_functions, instance.max_functions)
    key = (instance.undated_key(), guarantee, noise, limit)  # a front serves every deadline
    with _lock:
        kept = _fronts.get(key)
        if kept is not None:
            _fronts.move_to_end(key)
    if kept is not None and kept[0] >= slowest_s:
        return tuple(front.within(slowest_s) for front in kept[1])
    planning = None if guarantee is None else planning_noise(
        noise or NoiseModel(), guarantee, instance.max_functions
    )
    servers = instance.servers
    variants = ([instance.on_server(servers[i]) for i in undominated(servers)] if servers
                else [instance])
    found = [NO_OPTIONS] * len(variants)
    known: list[Options] = []
    for j in sorted(range(len(variants)), key=lambda j: (
            variants[j].parameter_server.shards * variants[j].parameter_server.price_per_hour,
            j)):
        found[j] = _front(corner(variants[j], planning).instance, planning, limit, slowest_s,
                          _joined(known))
        known.append(found[j])
    fronts = tuple(found)
    with _lock:
        _fronts[key] = (slowest_s, fronts)
        _fronts.move_to_end(key)
        while len(_fronts) > FRONTS_KEPT:
            _fronts.popitem(last=False)
    return fronts


def _joined(parts: list[Options]) -> Options:
    """Every plan of `parts` together (not a front: a plan with fewer functions counts)."""
    if not parts:
        return NO_OPTIONS
    return Options(*(np.concatenate([getattr(part, name) for part in parts])
                     for name in ("time_s", "cost_usd", "functions", "memory_mb")))


def options(instance: Instance, *, guarantee: float | None, noise: NoiseModel | None,
            max_functions: int, slowest_s: float) -> Options:
    """The Pareto front of plans with at most `max_functions` functions (and the instance's
    own limits) taking at most `slowest_s`, planned as `solve(guarantee=, noise=)` plans
    (inputs already checked; a profiled instance at its fit's adverse corner); empty when
    none does. An instance that chooses its parameter server has the front of the plans on
    all its servers together (those another beats left out, as `solve()` leaves them)."""
    return merged(list(kind_fronts(instance, guarantee=guarantee, noise=noise,
                                   max_functions=max_functions, slowest_s=slowest_s)))
