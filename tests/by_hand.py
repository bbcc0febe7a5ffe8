"""MODEL.md's equations for one plan, typed line by line in plain Python floats.

The expectations of the model, simulator and guarantee tests, and the oracle's own scalar
check: computed from plain numbers (the oracle's `Problem`), read either by the oracle or
straight from an `Instance`'s fields (not `Instance.parameters()`, not the SymPy model, not
its compiled program), so a slip in any of those shows up as a disagreement with this page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lambdadnn.solver.instance import Instance
from tests.oracle import Problem


@dataclass(frozen=True)
class HandFigures:
    """One plan's figures; `t_comp`, `t_comm` are one iteration's, one average worker's.

    `valid` is MODEL.md's validity (R > 0, B_f^s > 0, b_l ≥ 1); an invalid plan's times may
    be infinite or negative.
    """

    valid: bool
    global_batch: float
    local_batch: float
    iterations: float
    t_load: float
    t_comp: float
    t_comm: float
    t_train: float
    restarts: int
    t_startup: float
    time: float
    cost: float


def problem_of(instance: Instance) -> Problem:
    """The package loader's reading of an instance, as the oracle's plain numbers (so the two
    readings can be compared whole, and the equations below serve both)."""
    w, ps, pf = instance.workload, instance.parameter_server, instance.platform
    rate, storage = instance.profile.rate, instance.profile.storage_bandwidth
    return Problem(
        d_m=w.model_size_mb, d_t=w.dataset_size_mb, n_t=w.samples, e=w.epochs,
        b_lf=w.local_batch, b_gmax=w.max_global_batch, alpha1=rate.slope, beta1=rate.intercept,
        m_sat=math.inf if rate.saturates_at_mb is None else rate.saturates_at_mb,
        alpha2=storage.slope, beta2=storage.intercept, b_s=storage.max_mbps,
        b_p=ps.bandwidth_mbps, b_fmax=ps.function_bandwidth_mbps, p_ps=ps.price_per_hour,
        p_gbs=pf.price_per_gb_second, p_req=pf.price_per_request, timeout_s=pf.timeout_s,
        timeout_margin_s=pf.timeout_margin_s, restart_overhead_s=pf.restart_overhead_s,
        deadline_s=instance.objective.deadline_s, memory_min=pf.memory.min_mb,
        memory_max=pf.memory.max_mb, memory_step=pf.memory.step_mb,
        max_functions=instance.max_functions, min_memory_mb=instance.min_memory_mb,
        latency_s=instance.profile.latency_s, startup_base_s=instance.profile.startup.base_s,
        startup_per_function_s=instance.profile.startup.per_function_s,
        max_vcpu=instance.platform.max_vcpu, shards=ps.shards, message_s=ps.message_s,
    )


def restarts_for(instance: Instance, t_train: float) -> int:
    """r = max(0, ⌈T_train / L⌉ − 1)."""
    return _restarts(problem_of(instance), t_train)


def _restarts(p: Problem, t_train: float) -> int:
    return max(0, math.ceil(t_train / (p.timeout_s - p.timeout_margin_s)) - 1)


def hand(p: Problem, n: int, m: float) -> HandFigures:
    """MODEL.md's "Equations", without noise, for `n` functions of `m` MB."""
    if n * p.b_lf <= p.b_gmax:
        b_g, b_l = n * p.b_lf, p.b_lf
    else:
        b_g, b_l = p.b_gmax, p.b_gmax / n
    k = p.n_t * p.e / b_g
    rate = p.alpha1 * min(m, p.m_sat) + p.beta1
    storage_bandwidth = min(p.alpha2 * m + p.beta2, p.b_s)
    ps_bandwidth = min(p.b_fmax, p.shards * p.b_p / n)
    valid = rate > 0 and storage_bandwidth > 0 and b_l >= 1
    t_load = p.d_t / (n * storage_bandwidth) if storage_bandwidth else math.inf
    t_comp = b_l / rate if rate else math.inf
    t_comm = 2 * (p.d_m / ps_bandwidth + p.latency_s + p.shards * p.message_s)
    t_train = t_load + k * (t_comp + t_comm)
    restarts = _restarts(p, t_train) if valid else 0
    t_startup = (restarts + 1) * (p.startup_base_s + p.startup_per_function_s * n)
    time = t_train + restarts * p.restart_overhead_s + t_startup
    cost = (
        time * (n * m / 1024 * p.p_gbs + p.shards * p.p_ps / 3600) + n * (restarts + 1) * p.p_req
    )
    return HandFigures(
        valid=valid, global_batch=float(b_g), local_batch=float(b_l), iterations=k,
        t_load=t_load, t_comp=t_comp, t_comm=t_comm, t_train=t_train, restarts=restarts,
        t_startup=t_startup, time=time, cost=cost,
    )


def by_hand(instance: Instance, n: int, m: float) -> HandFigures:
    """`hand` on the package loader's reading of `instance`."""
    return hand(problem_of(instance), n, m)
