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
from .candidates import enumerate_candidates, pareto
from .fit_uncertainty import corner
from .instance import Instance
from .pipeline import pinned, undominated

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
_fronts: OrderedDict[_Key, tuple[float, Options]] = OrderedDict()
_lock = threading.Lock()


def _front(instance: Instance, noise: PlanningNoise | None, max_functions: int,
           slowest_s: float) -> Options:
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
    found = enumerate_candidates(
        values, memory, rows, box.m_lo, row_hi, slowest_s, noise, ceiling=ceiling
    )
    front = pareto(found.time, found.cost, found.functions, found.memory_index)
    return Options(
        found.time[front], found.cost[front], found.functions[front],
        memory[found.memory_index[front]].astype(np.int64),
    )


def options(instance: Instance, *, guarantee: float | None, noise: NoiseModel | None,
            max_functions: int, slowest_s: float) -> Options:
    """The Pareto front of plans with at most `max_functions` functions (and the instance's
    own limits) taking at most `slowest_s`, planned as `solve(guarantee=, noise=)` plans
    (inputs already checked; a profiled instance at its fit's adverse corner); empty when
    none does. An instance that chooses its parameter server has the front of the plans on
    all its servers together (those another beats left out, as `solve()` leaves them)."""
    if instance.servers:
        return merged([options(pinned(instance, instance.servers[i]), guarantee=guarantee,
                               noise=noise, max_functions=max_functions, slowest_s=slowest_s)
                       for i in undominated(instance.servers)])
    limit = min(max_functions, instance.max_functions)
    key = (instance.undated_key(), guarantee, noise, limit)  # a front serves every deadline
    with _lock:
        kept = _fronts.get(key)
        if kept is not None:
            _fronts.move_to_end(key)
    if kept is not None and kept[0] >= slowest_s:
        return kept[1].within(slowest_s)
    planning = None if guarantee is None else planning_noise(
        noise or NoiseModel(), guarantee, instance.max_functions
    )
    front = _front(corner(instance, planning).instance, planning, limit, slowest_s)
    with _lock:
        _fronts[key] = (slowest_s, front)
        _fronts.move_to_end(key)
        while len(_fronts) > FRONTS_KEPT:
            _fronts.popitem(last=False)
    return front
