"""`lambdadnn profile`: designed trial runs of a workload, the model fitted to them, an instance.

The design (see `design`) varies one thing at a time around a pilot run: memory at n = 1 (the
rate R(m)), the batch at n = 1 (per-sample against per-iteration cost), n at a fixed memory
and at a fixed total vCPU (the exchange), and one run with restarts at a short invocation
limit (the overhead between rounds); every trial's start-up feeds the start-up fit. The
trials run through the launcher exactly as a plan does, so the fitted instance predicts what
a launch measures.
The trials are sized to fit the budget. After the first pass, what the budget leaves goes
first to the trials the fit says would identify what it has not (`FittedModel.missing`),
refitting after each round, then to repeats of the first pass. The machine's 1-minute load
average is recorded before and after every trial; locally, a trial during which it exceeded
the CPUs is left out of the fit. The instance's file is checked before the first trial
(`check_out`) and written whole or not at all (`write_out`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import platform as machine_platform
import re
import secrets
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inputs.files import brief
from ..models.prices import bill
from ..solver.instance import MAX_RATE, MB_PER_VCPU, Instance, instance_mapping
from ..solver.instance_yaml import load_instance
from ..solver.prediction import predict_run
from . import LaunchError
from .fit import FittedModel, Grid, Point, Trial, fit_trials, fittable
from .spec import LaunchReport, LaunchSpec, default_margin, limit_for

__all__ = ["Capacity", "Runner", "TrialPlan", "check_out", "design", "instance_name",
           "profile_workload", "workload_sizes", "write_out"]

# The invocation limit of the trials and of the profiled platform (run_local's default: Lambda's).
INVOCATION_S = 900.0
_PILOT_ITERATIONS = 200
_MIN_ITERATIONS, _MAX_ITERATIONS = 20, 20_000
_LARGE_MBPS = 1e6  # "no S3": data arrives with the workload, so loading costs nothing here
_RESTART_ROUNDS = 3  # rounds of the restart trial: two gaps to measure
# Seconds of training per trial at most. Long, because this machine's speed drifts by ±25%
# from one few-second window to the next (the same torch loop, alone, took 3.3–5.7 ms per
# iteration over a minute): a trial must average over several windows.
_MAX_TRAIN_S = 12.0
_ESSENTIAL = 4  # designed trials that always run: with the pilot, 5 at 3 memories and 2 n
_KINDS = {stat.S_IFDIR: "folder", stat.S_IFCHR: "device", stat.S_IFBLK: "device",
          stat.S_IFIFO: "named pipe", stat.S_IFSOCK: "socket"}

# Runs one trial (a spec, at an invocation limit) and reports what the launch measured.
Runner = Callable[[LaunchSpec, float], LaunchReport]


@dataclass(frozen=True)
class Capacity:
    """What the backend holds and charges: the platform the fitted instance will plan for."""

    name: str
    backend: str
    max_vcpu: float | None  # all functions together (None: no limit, as on Lambda)
    max_memory_mb: int
    max_functions: int
    architecture: str
    price_per_gb_second: float
    price_per_request: float


@dataclass(frozen=True)
class TrialPlan:
    """One designed trial: what to run, at which invocation limit, and why; the seconds it is
    expected to take, and whether it repeats a trial of the first pass."""

    functions: int
    memory_mb: int
    local_batch: int
    iterations: int
    timeout_s: float
    purpose: str
    estimate_s: float
    repeat: bool


def _iteration_guess(pilot: Trial, functions: int, memory_mb: int, batch: int) -> float:
    """Seconds per iteration from the pilot, assuming it all scales with batch and CPU."""
    share = min(pilot.memory_mb, MB_PER_VCPU) / min(memory_mb, MB_PER_VCPU)
    return pilot.iteration_mean_s * share * max(1.0, batch / pilot.local_batch) * (
        1 + 0.1 * (functions - 1))


def _restart_limit(training_s: float) -> float:
    """An invocation limit for rounds of 1/2.2 of the training each: the model counts 3
    rounds, and so does the run while the start-up inside an invocation (connecting, the
    first pull, waiting for the last rank) stays under ~12% of the training."""
    return limit_for(training_s / 2.2)


def _startup_guess(pilot_s: float, functions: int) -> float:
    """Seconds a trial of `functions` spends outside training, from the pilot's start-up: it
    grows with n (processes start one after another and share the CPUs), plus a second
    for the end of the run."""
    return pilot_s * (0.6 + 0.4 * functions) + 1.0


def _top_memory(capacity: Capacity) -> int:
    """The pilot's memory: one full vCPU (a single-threaded worker saturates there)."""
    cap = capacity.max_memory_mb
    if capacity.max_vcpu is not None:
        cap = min(cap, math.floor(capacity.max_vcpu * MB_PER_VCPU))
    return max(128, min(MB_PER_VCPU, cap))


def _trial_mb(capacity: Capacity) -> int:
    """The memory all functions of one trial share at most: the capacity's vCPU, or with no
    limit on it (Lambda) one vCPU's worth, so a trial of n functions costs what one does."""
    if capacity.max_vcpu is None:
        return _top_memory(capacity)
    return math.floor(capacity.max_vcpu * MB_PER_VCPU)


def _points(capacity: Capacity, batch: int) -> list[tuple[int, int, int, str, bool]]:
    """The designed trials after the pilot, (n, memory, batch, purpose, repeat), in order of
    what they add to the fit: one pass over the spreads, then a second (the pilot's point
    included, the restart trial not)."""
    top = _top_memory(capacity)

    def each(functions: int) -> int:
        """Memory per function for `functions` sharing the total vCPU (at most one each)."""
        return min(top, _trial_mb(capacity) // functions)

    low = top // 4  # the smallest memory measured: the profiled grid starts there
    wide = batch * 4
    spreads: list[tuple[int, int, int, str]] = [
        (1, top // 2, batch, "R(m)"), (2, each(2), batch, "exchange against n"),
        (1, low, batch, "R(m)"), (2, low, batch, "exchange against n at a fixed memory"),
        (4, min(each(4), low), batch, "exchange against n"),
        (1, top, wide, "per-sample against per-iteration cost"),
        (2, each(2), batch, "restart overhead"),
        (1, top * 3 // 4, batch, "R(m)"), (1, top // 3, batch, "R(m)"),
        (1, top // 2, wide, "per-sample against per-iteration cost"),
        (1, low, wide, "per-sample against per-iteration cost"),
    ]
    replicates = [(1, top, batch, "R(m)")] + [s for s in spreads if s[3] != "restart overhead"]
    return [(*s, False) for s in spreads] + [(*s, True) for s in replicates]


def _train_seconds(capacity: Capacity, pilot: Trial, batch: int, left_s: float) -> float:
    """Seconds of training per trial: what `left_s` leaves after the designed trials' start-ups,
    shared among them (so the short ones are not all start-up), within 1 s and `_MAX_TRAIN_S`."""
    points = _points(capacity, batch)
    startup = sum(pilot.startup_s) / len(pilot.startup_s)
    startups = sum(_startup_guess(startup, functions) for functions, *_ in points)
    return min(_MAX_TRAIN_S, max(1.0, (left_s - startups) / len(points)))


def _sized(
    capacity: Capacity, pilot: Trial, point: tuple[int, int, int, str, bool], train_s: float,
) -> TrialPlan | None:
    """A trial at `point` training about `train_s` seconds (a restart trial: a round of it per
    invocation), and the seconds it is expected to take; None when the capacity cannot run it."""
    functions, memory, batch, purpose, repeat = point
    if functions > capacity.max_functions or memory < 128:
        return None
    guess = _iteration_guess(pilot, functions, memory, batch)
    rounds = _RESTART_ROUNDS if purpose == "restart overhead" else 1
    iterations = int(min(_MAX_ITERATIONS, max(_MIN_ITERATIONS, train_s * rounds / guess)))
    startup = sum(pilot.startup_s) / len(pilot.startup_s)
    cost = rounds * _startup_guess(startup, functions) + iterations * guess
    timeout = _restart_limit(iterations * guess) if rounds > 1 else INVOCATION_S
    return TrialPlan(functions, memory, batch, iterations, timeout, purpose, cost, repeat)


def design(
    capacity: Capacity, pilot: Trial, *, batch: int, budget_s: float, spent_s: float,
) -> list[TrialPlan]:
    """The trials after the pilot, in order of what they add to the fit, sized for the budget.

    Each trains for about the same seconds (`_train_seconds`), and a trial is left out when
    the budget's estimate would be overrun, except the first `_ESSENTIAL` (with the pilot, the
    fewest the fit can use: a budget too small for them is overrun rather than spent on a
    profile that cannot be fitted). What the budget leaves after one pass buys a second pass
    (marked `repeat`), which `profile_workload` runs after the trials that would identify
    what the first pass did not: a trial that a burst of load slowed then weighs half as much.
    """
    left = budget_s - spent_s
    train_s = _train_seconds(capacity, pilot, batch, left)
    plans: list[TrialPlan] = []
    for index, point in enumerate(_points(capacity, batch)):
        plan = _sized(capacity, pilot, point, train_s)
        if plan is None or (plan.estimate_s > left and index >= _ESSENTIAL):
            continue
        plans.append(plan)
        left -= plan.estimate_s
    return plans


def _identifying(
    capacity: Capacity, pilot: Trial, point: Point, batch: int, train_s: float,
) -> TrialPlan | None:
    """A trial at a design point the fit asks for, within the capacity, like a designed one."""
    memory = min(point.memory_mb, _top_memory(capacity), _trial_mb(capacity) // point.functions)
    purpose = "restart overhead" if point.restarts else "identification"
    return _sized(capacity, pilot, (point.functions, memory, point.local_batch or batch,
                                    purpose, True), train_s)


def _spec(plan: TrialPlan, capacity: Capacity) -> LaunchSpec:
    """A trial as a launch; the restart trial declares the restarts it is designed for, so a
    backend that bounds re-invocations by the plan's (AWS: 3 × its rounds) allows for a
    machine slower than the pilot measured instead of giving up after one extra round."""
    restarts = _RESTART_ROUNDS - 1 if plan.purpose == "restart overhead" else 0
    return LaunchSpec(functions=plan.functions, memory_mb=plan.memory_mb,
                      local_batch=plan.local_batch, iterations=plan.iterations, time_s=1.0,
                      restarts=restarts, platform=capacity.name,
                      architecture=capacity.architecture)


def _instance_mapping(
    *, name: str, workload: str, capacity: Capacity, fitted: FittedModel,
    sizes: Mapping[str, float], settings: Mapping[str, float], lowest_mb: int,
) -> dict[str, Any]:
    """The instance the fit describes, without its `fit` section. Its memory grid starts at
    the smallest memory a trial ran at (`lowest_mb`): R(m) is measured there, not
    extrapolated below; and R saturates at one vCPU, since the worker trains on one thread."""
    value = {key: estimate.value for key, estimate in fitted.estimates.items()}
    platform: dict[str, Any] = {
        "name": capacity.name, "architecture": capacity.architecture,
        "memory_mb": {"min": lowest_mb, "max": capacity.max_memory_mb, "step": 1},
        "price_per_gb_second": capacity.price_per_gb_second,
        "price_per_request": capacity.price_per_request,
        "timeout_s": INVOCATION_S, "timeout_margin_s": default_margin(INVOCATION_S),
        "restart_overhead_s": value["platform.restart_overhead_s"],
        "max_concurrency": capacity.max_functions,
    }
    if capacity.max_vcpu is not None:
        platform["max_vcpu"] = capacity.max_vcpu
    return {
        "name": name,
        "platform": platform,
        "workload": {
            "model_size_mb": sizes["model_size_mb"], "dataset_size_mb": sizes["dataset_size_mb"],
            "samples": int(sizes["samples"]), "epochs": int(settings["epochs"]),
            "local_batch": int(settings["local_batch"]),
            "max_global_batch": int(settings["max_global_batch"]),
        },
        "profile": {
            "rate": {"slope": value["profile.rate.slope"],
                     "intercept": value["profile.rate.intercept"],
                     "saturates_at_mb": _top_memory(capacity)},
            "storage_bandwidth": {"slope": 0.0, "intercept": _LARGE_MBPS,
                                  "max_mbps": _LARGE_MBPS},
            "latency_s": value["profile.latency_s"],
            "startup": {"base_s": value["profile.startup.base_s"],
                        "per_function_s": value["profile.startup.per_function_s"]},
        },
        "parameter_server": {
            "bandwidth_mbps": value["parameter_server.bandwidth_mbps"],
            "function_bandwidth_mbps": value["parameter_server.function_bandwidth_mbps"],
            "price_per_hour": 0.0,
        },
        "objective": {"deadline_s": float(settings["deadline_s"])},
    }


def _not_measured(capacity: Capacity) -> dict[str, tuple[float, str]]:
    """Parameters set, not fitted: the value written, and why."""
    return {
        "profile.rate.saturates_at_mb": (float(_top_memory(capacity)), (
            "set, not measured: the worker trains on one thread (torch.set_num_threads(1)), so "
            "a function uses at most one vCPU, 1,769 MB; the trials stop there")),
        "profile.storage_bandwidth.max_mbps": (_LARGE_MBPS, (
            "not identified: the workers read no training data from storage (no S3 here); "
            "the data comes with the workload, inside start-up, so loading costs nothing")),
        "parameter_server.price_per_hour": (0.0, (
            "not measured: the channel is a Redis the user runs; its price is not the "
            "profile's")),
    }


def workload_sizes(reference: str, seed: int) -> dict[str, float]:
    """The model size (gradient MB, float32), training set size (MB) and samples of a workload."""
    import torch

    from .workloads import length, load_workload, sample

    workload = load_workload(reference, seed)
    parameters = sum(p.numel() for p in workload.model.parameters() if p.requires_grad)
    samples = length(workload.train)
    x, y = sample(workload.train, torch.arange(1))
    per_sample = x.element_size() * x.numel() + y.element_size() * y.numel()
    return {"model_size_mb": parameters * 4 / 1e6,
            "dataset_size_mb": max(per_sample * samples / 1e6, 1e-6), "samples": samples}


def _load_average() -> float | None:
    """The machine's 1-minute load average (None where the system reports none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {"node": machine_platform.node()[:60], "machine": machine_platform.machine(),
            "cpus": os.cpu_count() or 1, "python": machine_platform.python_version(),
            **{f"load_average_{span}": round(x, 2) for span, x in zip(("1m", "5m", "15m"), load,
                                                                     strict=True)}}


def instance_name(workload: str, backend: str) -> str:
    """A name for the profiled instance: the workload's, made file-safe, and the backend."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', workload).strip('-')[:60]}-{backend}"


@dataclass(frozen=True)
class _Ran:
    """A trial as it ran: its plan, report, figures and invocation limit, the machine's 1-minute
    load average before and after it, and why it is left out of the fit (None: it is not) or
    why it is flagged but kept."""

    plan: TrialPlan
    report: LaunchReport
    trial: Trial
    timeout_s: float
    load: tuple[float | None, float | None]
    left_out: str | None
    flagged: str | None = None  # under load, yet kept: too few trials were taken without it


def _left_out(
    capacity: Capacity, load: tuple[float | None, float | None], max_load: float,
) -> str | None:
    """Why a trial is left out of the fit: run here (the local backend), it had the machine's
    1-minute load average above `max_load` (by default its CPUs) before or after it, so other
    work competed for the CPUs and it measured that contention, not the workload. The trials
    themselves stay under it: they use the capacity's vCPUs, `--reserve-cpus` fewer than the
    CPUs, and a 1-minute average lags a trial of seconds. Trials on AWS ran elsewhere."""
    peak = max((x for x in load if x is not None), default=None)
    if capacity.backend != "local" or peak is None or peak <= max_load:
        return None
    return f"1-minute load average {peak:.2f} above {max_load:g}"


def _timeout(plan: TrialPlan, ran: Sequence[_Ran]) -> float:
    """The plan's invocation limit; for a restart trial, from the same run measured without
    restarts where there is one (its rounds then split as designed)."""
    if plan.purpose != "restart overhead":
        return plan.timeout_s
    same = [r.trial for r in ran if (r.trial.functions, r.trial.memory_mb, r.trial.local_batch)
            == (plan.functions, plan.memory_mb, plan.local_batch)]
    return _restart_limit(plan.iterations * same[-1].iteration_mean_s) if same else plan.timeout_s


def _grid(capacity: Capacity, trials: Sequence[Trial]) -> Grid:
    """Where the instance will be solved: R(m) from the lowest trial memory (the instance's
    grid starts there) to saturation, 1 to as many functions as the capacity holds there."""
    lowest = min(t.memory_mb for t in trials)
    plans = capacity.max_functions
    if capacity.max_vcpu is not None:
        plans = min(plans, math.floor(capacity.max_vcpu * MB_PER_VCPU) // lowest)
    trial = min(capacity.max_functions, _trial_mb(capacity) // lowest)
    return Grid(memory_mb=(lowest, _top_memory(capacity)), functions=max(1, plans),
                trial_functions=max(1, trial))


def profile_workload(
    workload: str, capacity: Capacity, run: Runner, *, budget_s: float = 300.0,
    seed: int = 0, local_batch: int = 64, epochs: int = 100, max_global_batch: int = 1024,
    deadline_s: float = 60.0, progress: Callable[[int, int, str], None] | None = None,
    max_load: float | None = None,
) -> dict[str, Any]:
    """Profile `workload` on the backend that `run` launches on; the instance YAML's mapping.

    `run(spec, timeout_s)` launches one trial. The result loads with `load_instance`: the
    fitted `profile`, the backend's `platform`, the workload's sizes and the given
    `epochs`, `local_batch`, `max_global_batch` and `deadline_s`, and a `fit` section with
    every parameter's estimate, standard error, identification and (if not identified) the
    trials that would identify it, every trial with its measured and predicted time and the
    load average around it, the profiling seconds and its cost in USD.

    After the pilot and the first designed pass, the budget left (by the clock or by the
    trials' estimates, whichever says less) buys rounds of trials, the fit redone after each:
    the design points the fit misses (or, when too few trials are left, those the load took
    away), else the next repeat of the first pass. Locally, a trial with the machine's
    1-minute load average above `max_load` (None: its CPUs) is left out of the fit. When the
    trials left in are too few to fit, a given `max_load` raises `LaunchError`; by default
    (the whole machine was loaded) every trial is kept and flagged `under_load`.
    """
    started = time.monotonic()
    sizes = workload_sizes(workload, seed)
    samples = int(sizes["samples"])
    if local_batch * 4 > samples:  # a batch larger than a worker's shard would silently shrink
        raise LaunchError(
            f"`local_batch` {local_batch} is too large for the {samples:,} training samples of "
            f"{workload}: the trials train 4× it on one function and it on each of 4 (each "
            f"on its shard); give at most {samples // 4}"
        )
    ran: list[_Ran] = []
    limit = float(os.cpu_count() or 1) if max_load is None else max_load

    def trial(plan: TrialPlan, todo: int) -> None:
        """Run `plan` (the progress bar counting `todo` trials after it)."""
        if progress is not None:
            label = "pilot" if not ran else f"{plan.functions} × {plan.memory_mb} MB"
            progress(len(ran), len(ran) + 1 + todo, label)
        timeout = _timeout(plan, ran)
        before = _load_average()
        report = run(_spec(plan, capacity), timeout)
        load = (before, _load_average())
        ran.append(_Ran(plan, report, Trial.of(report), timeout, load,
                        _left_out(capacity, load, limit)))

    top = _top_memory(capacity)
    trial(TrialPlan(1, top, local_batch, _PILOT_ITERATIONS, INVOCATION_S, "pilot", 0.0, False),
          0)
    pilot = ran[0].trial
    spent = time.monotonic() - started  # then also every trial's estimate: see `left`
    plans = design(capacity, pilot, batch=local_batch, budget_s=budget_s, spent_s=spent)
    train_s = _train_seconds(capacity, pilot, local_batch, budget_s - spent)
    queued = [plan for plan in plans if plan.repeat]
    first = [plan for plan in plans if not plan.repeat]
    for index, plan in enumerate(first):
        trial(plan, len(first) - index - 1 + len(queued))
        spent += plan.estimate_s

    def left() -> float:
        return budget_s - max(time.monotonic() - started, spent)

    bounds = {
        "profile.rate.slope": (0.0, MAX_RATE), "profile.rate.intercept": (-MAX_RATE, MAX_RATE),
        "parameter_server.bandwidth_mbps": (1e-9, MAX_RATE), "profile.latency_s": (0.0, 1.0),
    }

    def fit(trials: list[Trial]) -> FittedModel:
        return fit_trials(trials, model_size_mb=sizes["model_size_mb"],
                          reference_batch=local_batch, bounds=bounds,
                          grid=_grid(capacity, trials))

    while True:
        kept = [r.trial for r in ran if r.left_out is None]
        fitted = fit(kept) if fittable(kept, local_batch) else None
        if fitted is None:  # what the load took away, again
            wanted = [_sized(capacity, pilot, (r.plan.functions, r.plan.memory_mb,
                                               r.plan.local_batch, r.plan.purpose, True), train_s)
                      for r in ran if r.left_out is not None]
        else:
            wanted = [_identifying(capacity, pilot, point, local_batch, train_s)
                      for point in fitted.missing]
        # A round: the trials wanted, and the next repeat of the first pass, as the budget allows.
        chosen = [p for p in dict.fromkeys(wanted) if p is not None and p.estimate_s <= left()]
        chosen += [p for p in queued if p.estimate_s <= left()][:1]
        if not chosen:
            break
        for index, plan in enumerate(chosen):
            if plan.estimate_s > left():
                break
            if plan in queued:
                queued.remove(plan)
            trial(plan, len(chosen) - index - 1 + len(queued))
            spent += plan.estimate_s
    if progress is not None:
        progress(len(ran), len(ran), "fit")
    if fitted is None and max_load is None and fittable([r.trial for r in ran], local_batch):
        # The whole machine was loaded (a CI runner): by default the trials are flagged, not
        # refused; `--max-load` refuses them. A uniform load slows every trial alike.
        ran = [dataclasses.replace(r, left_out=None, flagged=r.left_out) for r in ran]
        kept = [r.trial for r in ran]
        fitted = fit(kept)
    if fitted is None:
        _refuse_the_load(ran, local_batch, limit)
        fitted = fit(kept)  # not fittable, and not for the load: says what is missing
    settings = {"epochs": epochs, "local_batch": local_batch,
                "max_global_batch": max_global_batch, "deadline_s": deadline_s}
    mapping = _instance_mapping(name=instance_name(workload, capacity.backend),
                                workload=workload, capacity=capacity, fitted=fitted,
                                sizes=sizes, settings=settings,
                                lowest_mb=min(t.memory_mb for t in kept))
    instance = load_instance(mapping)
    seconds = time.monotonic() - started
    residuals = iter(fitted.iteration_residuals)
    mapping["fit"] = {
        "workload": workload, "backend": capacity.backend, "seconds": round(seconds, 2),
        "cost_usd": _cost([r.report for r in ran], capacity), "machine": _machine(),
        "parameters": {
            **{name: estimate.to_dict() for name, estimate in fitted.estimates.items()},
            **{name: {"value": value, "stderr": None, "identified": False, "note": note}
               for name, (value, note) in _not_measured(capacity).items()},
            **{name: estimate.to_dict() for name, estimate in fitted.batch_split.items()},
        },
        "runs": [_run_entry(instance, r, None if r.left_out else next(residuals))
                 for r in ran],
        **({} if fitted.rate_correlation is None
           else {"rate_correlation": fitted.rate_correlation}),
    }
    return instance_mapping(load_instance(mapping))


def _refuse_the_load(ran: Sequence[_Ran], reference_batch: int, max_load: float) -> None:
    """One line when the trials left out under load leave too few to fit (the caller has
    found them too few); nothing when none was left out."""
    out = [r for r in ran if r.left_out is not None]
    if not out:
        return
    peak = max(x for r in out for x in r.load if x is not None)
    raise LaunchError(
        f"{len(out)} of the {len(ran)} trials ran with the machine's 1-minute load average "
        f"above `--max-load` {max_load:g} (up to {peak:.2f}) and were left out of the fit, and "
        f"the rest are too few for it (5 at batch {reference_batch}, over 2 memory sizes and "
        "2 numbers of functions): profile on an idle machine"
    )


def _run_entry(instance: Instance, ran: _Ran, residual: float | None) -> dict[str, Any]:
    """A trial as the `fit` section lists it: what ran and why, what it measured, what the
    fitted model predicts for it, the relative miss, and the load average around it."""
    trial = ran.trial
    predicted = predict_run(
        instance, functions=trial.functions, memory_mb=trial.memory_mb,
        local_batch=trial.local_batch, iterations=trial.iterations, timeout_s=ran.timeout_s,
        timeout_margin_s=default_margin(ran.timeout_s),
    ).time_s
    return {**trial.to_dict(), "timeout_s": round(ran.timeout_s, 3),
            "predicted_time_s": round(predicted, 4),
            "error": round((trial.measured_time_s - predicted) / predicted, 4),
            "iteration_residual": None if residual is None else round(residual, 4),
            "purpose": ran.plan.purpose, "load_before": ran.load[0], "load_after": ran.load[1],
            "left_out": ran.left_out, "under_load": ran.flagged}


def _cost(reports: list[LaunchReport], capacity: Capacity) -> float:
    """What the trials' functions were billed: nothing locally, Lambda's prices on AWS."""
    if capacity.backend == "local":
        return 0.0
    return round(sum(
        bill(r.wall_time_s, r.functions, r.memory_mb, requests=r.invocations,
             price_per_gb_second=capacity.price_per_gb_second,
             price_per_request=capacity.price_per_request) for r in reports), 6)


def _temporary(target: Path) -> Path:
    """A fresh name next to `target`, where the instance is written before it is renamed."""
    return target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")


def check_out(out: Path) -> None:
    """Refuse `--out` before any trial runs: a path (through any symlink) that exists and is not
    a regular file (a folder, /dev/full, a pipe: root's rename would even replace a device),
    or whose folder is missing or takes no new file (tried: as root, permission bits say
    nothing of /proc or a read-only mount)."""
    target = Path(os.path.realpath(out))
    named = f"`--out` {brief(str(out), 120)}"
    try:
        mode: int | None = target.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet, or no folder
        mode = None
    except OSError as error:  # a symlink loop, a folder that cannot be searched
        raise LaunchError(f"{named} cannot be checked ({error.strerror or error}): give "
                          "another path") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise LaunchError(f"{named} is a {_KINDS.get(stat.S_IFMT(mode), 'special file')}, not "
                          "a regular file: give the path of a file to write (a file already "
                          "there is replaced)")
    if not target.parent.is_dir():
        raise LaunchError(f"{named}: {brief(str(target.parent), 120)} is not an existing "
                          "folder: create it, or give a path in an existing folder")
    probe = _temporary(target)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as error:
        raise LaunchError(f"{named}: cannot create a file in {brief(str(target.parent), 120)} "
                          f"({error.strerror or error}): give a path in a folder you can "
                          "write to") from None


def write_out(out: Path, text: str) -> None:
    """Write `text` to `out` whole or not at all: into a new file in the same folder, synced to
    disk, then renamed over `out` (through any symlink, onto its target). On a failure (a full
    disk, an I/O error) or Ctrl-C the new file is removed and a file already at `out` is left
    as it was."""
    target = Path(os.path.realpath(out))
    temporary = _temporary(target)
    try:
        with temporary.open("x", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if not isinstance(error, OSError):
            raise
        raise LaunchError(
            f"cannot write `--out` {brief(str(out), 120)} ({error.strerror or error}): nothing "
            "was written and a file already there is left as it was; free some space or give "
            "another path") from None
