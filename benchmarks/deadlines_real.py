"""Issue 21's real runs: do plans at `guarantee=0.9` meet their deadlines on this machine?

Run as ``.venv/bin/python -m benchmarks.deadlines_real [--workloads digits-cnn,digits-mlp]
[--runs 24] [--budget-s 300] [--out DIR] [--json] [--instances DIR]`` on an idle machine
(profiling about 4 minutes per workload, then the runs about 20 minutes). It:

1. profiles each workload locally (`calibration.profile_local`: `lambdadnn profile`'s library
   call), writing DIR/WORKLOAD-local.yaml; with `--instances DIR` it reads those files, written
   by an earlier run's `--out`, instead of profiling again. The profile is the right belief;
2. sizes the epochs so that the fastest plan trains for about `TRAIN_S` seconds
   (`adaptive_real.sized`) and designs the runs (`design`): blocks of four at one workload and
   one deadline, the deadlines spread evenly over 1.2–3× the fastest plan's time, the
   workloads taking turns. A block is {static, `--adaptive`} × {right, wrong belief}; the
   wrong belief cycles through R × 1.5, R ÷ 1.5 and start-up × 0.3 from block to block (with
   two workloads, 24 runs cover every workload × wrong belief once). Each plan is
   `solve(belief, deadline_s=…, guarantee=0.9)`; a wrong-belief plan is solved from the wrong
   instance, and runs the real workload all the same;
3. launches each plan as `lambdadnn launch plan.json [--adaptive]` does (`run_local`, with
   `Controller.of(spec)` when adaptive, so the controller starts from the plan's belief),
   reading the 1-minute load average before and after;
4. predicts each run from the profile, whatever belief planned it (`predict`: the model's
   mean and 90% interval for the plans as they ran), and writes every row to
   DIR/deadlines_real.json as soon as it is measured, so an interrupted run loses nothing.

Targets on an idle machine (every run counts; a run that failed counts as a miss, outside its
interval, with an infinite error): ≥ 90% of the right-belief runs meet their deadline; ≥ 90%
of the wrong-belief adaptive runs meet theirs; ≥ 85% of all runs fall inside their 90%
interval; the median |point error| is ≤ 10%. Also printed: the machine's own run-to-run spread
(runs of one plan that kept it, e.g. a block's static and adaptive runs when the controller
never switched), which bounds what any prediction can achieve here. Exits 1 when a target
fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from lambdadnn import evaluate, load_instance, solve
from lambdadnn.benchmarks.adaptive_real import rate_times, run_cost, sized
from lambdadnn.benchmarks.calibration import profile_local, profile_path
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.local import Interrupted, run_local
from lambdadnn.launcher.profile import write_out
from lambdadnn.launcher.spec import LaunchSpec, RunFailed
from lambdadnn.launcher.workloads import SHIPPED
from lambdadnn.models.errors import LambdaDnnError
from lambdadnn.solver.adaptive import Controller
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.plan import Plan

GUARANTEE = 0.9
TRAIN_S = 20.0  # the fastest plan's predicted training, seconds
DEADLINES = (1.2, 3.0)  # × the fastest plan's time: the first and the last block's
INTERVAL = 0.9  # the prediction interval's coverage: from its upper quantile, (1 + 0.9) / 2
RESULTS = "deadlines_real.json"
RIGHT = "right"
WRONG = ("R×1.5", "R÷1.5", "startup×0.3")
MEET_RIGHT, MEET_WRONG_ADAPTIVE, INSIDE, MEDIAN_ERROR = 0.90, 0.90, 0.85, 0.10


class UsageError(LambdaDnnError):
    """A bad option: one `error:` line naming it, its value and the fix."""


def startup_times(instance: Instance, factor: float) -> Instance:
    """The instance with its start-up × `factor`: a belief that is wrong about each round's."""
    startup = instance.profile.startup
    wrong = dataclasses.replace(startup, base_s=startup.base_s * factor,
                                per_function_s=startup.per_function_s * factor)
    return dataclasses.replace(
        instance, name=f"{instance.name} (start-up × {factor:.3g})",
        profile=dataclasses.replace(instance.profile, startup=wrong),
    )


BELIEFS: dict[str, Callable[[Instance], Instance]] = {
    RIGHT: lambda truth: truth,
    "R×1.5": lambda truth: rate_times(truth, 1.5),
    "R÷1.5": lambda truth: rate_times(truth, 1 / 1.5),
    "startup×0.3": lambda truth: startup_times(truth, 0.3),
}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the design: what to launch, from which belief, at which deadline."""

    workload: str
    adaptive: bool
    belief: str
    deadline_factor: float  # × the fastest plan's time


def design(runs: int, workloads: Sequence[str]) -> list[Cell]:
    """`runs` cells in blocks of four (see the module docstring): static right, adaptive
    wrong, adaptive right, static wrong, so that a short run (2) still has both launches and
    both beliefs. Balanced (half static, half right) when `runs` is a multiple of 4."""
    blocks = math.ceil(runs / 4)
    low, high = DEADLINES
    cells = []
    for block in range(blocks):
        workload, wrong = workloads[block % len(workloads)], WRONG[block % len(WRONG)]
        factor = low if blocks == 1 else low + (high - low) * block / (blocks - 1)
        for adaptive, belief in ((False, RIGHT), (True, wrong), (True, RIGHT), (False, wrong)):
            cells.append(Cell(workload, adaptive, belief, round(factor, 3)))
    return cells[:runs]


def round_instance(truth: Instance, global_batch: int, iterations: int) -> Instance:
    """The truth training `iterations` iterations of `global_batch` samples, whatever n: one
    epoch of iterations × B samples, the global batch capped at B (at n functions each trains
    B/n), as an adaptive round runs after a switch."""
    workload = dataclasses.replace(
        truth.workload, samples=iterations * global_batch, epochs=1,
        local_batch=global_batch, max_global_batch=global_batch,
    )
    return dataclasses.replace(truth, workload=workload)


def predict(truth: Instance, rounds: Sequence[dict[str, Any]], iterations: int
            ) -> tuple[float, float, float]:
    """The model's mean and 90% interval (mean, low, high) for a run as it ran, in seconds.

    From the profile (the right belief, whichever belief planned the run), at each round's
    n × m (a static run has one round; an adaptive run one more per switch): the round is
    `round_instance` (its iterations at the run's global batch) evaluated with
    `guarantee=0.95`: without its `fit:` section that gives its mean under the noise model
    `solve` plans with (stragglers, cold starts) as `time_s`, the point prediction; with it,
    its 95% quantile as `deadline_time_s`, covering whatever else the solver covers at a
    guarantee (the fit's standard errors and the trials' spread about it, MODEL.md "Fit
    uncertainty"). The noise model clamps its normal quantile at 0 below p = 0.5, so the 5%
    quantile is the mirror image, mean − (q95 − mean). Each round pays its start-up
    and data load, as a switch does; rounds add up: their means, and their spreads
    q95 − mean (exact for one round, conservative for several). A round the run did not
    finish (a failed run) is predicted to the run's last iteration.
    """
    upper = (1 + INTERVAL) / 2
    mean = spread = 0.0
    for round_ in rounds:
        functions, memory = int(round_["functions"]), int(round_["memory_mb"])
        batch = round(float(round_["local_batch"]) * functions)
        last = iterations if round_["iterations_to"] is None else int(round_["iterations_to"])
        done = max(1, last - int(round_["iterations_from"]))  # a round always starts up
        at = round_instance(truth, batch, done)
        point = evaluate(dataclasses.replace(at, fit=None), functions=functions,
                         memory_mb=memory, guarantee=upper).time_s
        quantile = evaluate(at, functions=functions, memory_mb=memory,
                            guarantee=upper).deadline_time_s
        mean += point
        spread += quantile - point
    return mean, mean - spread, mean + spread


def decisions(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every decision of a run in order: each round's opening one, then its checks."""
    found = []
    for round_ in rounds:
        plan = f"{round_['functions']} × {round_['memory_mb']} MB"
        found.append({"iteration": round_["iterations_from"], "plan": plan,
                      "action": round_["action"], "reason": round_["reason"]})
        found += [{"iteration": check["iteration"], "plan": plan, "action": check["action"],
                   "reason": check["reason"]} for check in round_["checks"]]
    return found


def launch(cell: Cell, plan: Plan, truth: Instance, number: int) -> dict[str, Any]:
    """Launch `plan` as `lambdadnn launch` does and measure it against its deadline and the
    truth's prediction: the row of the results. A failed run is a row too, never dropped."""
    spec = LaunchSpec.from_plan(plan)
    before = os.getloadavg()[0]
    error = None
    try:
        report = run_local(spec, workload=cell.workload,
                           controller=Controller.of(spec) if cell.adaptive else None).to_dict()
    except RunFailed as failure:  # it ran, and its report says how far
        report, error = failure.report.to_dict(), str(failure)
    except LaunchError as failure:  # it could not run (or the controller asked the impossible)
        error = str(failure)
        report = {"status": "error", "measured_time_s": None, "rounds": [{
            "functions": spec.functions, "memory_mb": spec.memory_mb,
            "local_batch": spec.local_batch, "iterations_from": 0, "iterations_to": None,
            "seconds": None, "action": "start", "reason": error, "checks": []}]}
    after = os.getloadavg()[0]
    rounds = [{key: r[key] for key in ("functions", "memory_mb", "local_batch",
                                       "iterations_from", "iterations_to", "seconds", "action",
                                       "reason", "checks")} for r in report["rounds"]]
    done = report["status"] == "done"
    measured = report["measured_time_s"]
    mean, low, high = predict(truth, rounds, spec.iterations)
    return {
        "run": number, "workload": cell.workload,
        "launch": "adaptive" if cell.adaptive else "static", "belief": cell.belief,
        "deadline_factor": cell.deadline_factor, "deadline_s": plan.deadline_s,
        "guarantee": plan.guarantee, "plan_status": plan.status,
        "functions": plan.functions, "memory_mb": plan.memory_mb, "iterations": spec.iterations,
        "final_functions": rounds[-1]["functions"], "final_memory_mb": rounds[-1]["memory_mb"],
        "status": report["status"], "error": error, "measured_s": measured,
        "met": done and measured <= plan.deadline_s,
        "predicted_s": mean, "interval_s": [low, high],
        "inside": done and low <= measured <= high,
        "point_error": (measured - mean) / mean if done else None,
        "cost_usd": None if measured is None else run_cost(report, truth),
        "load_before": before, "load_after": after, "decisions": decisions(rounds),
        "rounds": rounds,
    }


@dataclasses.dataclass(frozen=True)
class Target:
    """One of issue 21's targets: `value` (None: no run to judge) against `bound`."""

    name: str
    value: float | None
    bound: float
    at_least: bool  # value ≥ bound (a share), else value ≤ bound (an error)
    count: int  # the runs it counts, or for a share those that pass
    of: int

    @property
    def met(self) -> bool:
        if self.value is None:
            return False
        return self.value >= self.bound if self.at_least else self.value <= self.bound


def _share(name: str, rows: Sequence[dict[str, Any]], key: str, bound: float) -> Target:
    passed = sum(bool(row[key]) for row in rows)
    return Target(name, passed / len(rows) if rows else None, bound, True, passed, len(rows))


def targets(rows: Sequence[dict[str, Any]]) -> list[Target]:
    """The four targets over every row; a run that did not finish has an infinite error."""
    right = [row for row in rows if row["belief"] == RIGHT]
    wrong_adaptive = [row for row in rows if row["belief"] != RIGHT
                      and row["launch"] == "adaptive"]
    errors = [math.inf if row["point_error"] is None else abs(row["point_error"])
              for row in rows]
    return [
        _share("right-belief runs meeting their deadline", right, "met", MEET_RIGHT),
        _share("wrong-belief adaptive runs meeting theirs", wrong_adaptive, "met",
               MEET_WRONG_ADAPTIVE),
        _share("runs inside their 90% prediction interval", rows, "inside", INSIDE),
        Target("median |point error|", statistics.median(errors) if errors else None,
               MEDIAN_ERROR, False, len(errors), len(rows)),
    ]


def spread(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The machine's run-to-run spread: finished runs of one workload that ran one plan (n, m,
    iterations) throughout, grouped; per group (max − min) / mean of their measured times.
    Beside it the intervals' median half-width relative to their mean, to compare."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        if row["status"] == "done" and len(row["rounds"]) == 1:
            key = (row["workload"], row["functions"], row["memory_mb"], row["iterations"])
            groups.setdefault(key, []).append(row["measured_s"])
    spreads = [(max(times) - min(times)) / statistics.fmean(times)
               for times in groups.values() if len(times) > 1]
    widths = [(row["interval_s"][1] - row["interval_s"][0]) / 2 / row["predicted_s"]
              for row in rows]
    return {
        "groups": len(spreads), "runs": sum(len(t) for t in groups.values() if len(t) > 1),
        "median": statistics.median(spreads) if spreads else None,
        "max": max(spreads) if spreads else None,
        "interval_half_width": statistics.median(widths) if widths else None,
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    found = targets(rows)
    return {"targets": [{**dataclasses.asdict(t), "met": t.met} for t in found],
            "all_met": all(t.met for t in found), "spread": spread(rows)}


def _plan_text(row: dict[str, Any]) -> str:
    text = f"{row['functions']} × {row['memory_mb']} MB"
    final = (row["final_functions"], row["final_memory_mb"])
    if final != (row["functions"], row["memory_mb"]):
        text += f" → {final[0]} × {final[1]} MB"
    return text + (" (infeasible)" if row["plan_status"] != "optimal" else "")


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a markdown table (docs/CALIBRATION.md's), then each adaptive run's
    decisions as a list."""
    lines = ["| run | workload | launch | belief | deadline | plan | measured | predicted "
             "(90% interval) | error | inside | met | cost | load before → after |",
             "|---:|---|---|---|---:|---|---:|---:|---:|---|---|---:|---|"]
    for r in rows:
        measured = f"{r['measured_s']:.1f} s" if r["status"] == "done" else r["status"]
        error = "—" if r["point_error"] is None else f"{r['point_error']:+.1%}"
        low, high = r["interval_s"]
        cost = "—" if r["cost_usd"] is None else f"${r['cost_usd']:.2e}"
        lines.append(
            f"| {r['run']} | {r['workload']} | {r['launch']} | {r['belief']} | "
            f"{r['deadline_s']:.1f} s ({r['deadline_factor']:g}×) | {_plan_text(r)} | "
            f"{measured} | {r['predicted_s']:.1f} s ({low:.1f}–{high:.1f}) | {error} | "
            f"{'yes' if r['inside'] else 'no'} | {'yes' if r['met'] else '**no**'} | "
            f"{cost} | {r['load_before']:.2f} → {r['load_after']:.2f} |")
    adaptive = [r for r in rows if r["launch"] == "adaptive"]
    if adaptive:
        lines += ["", "Decisions of the adaptive runs (iteration: plan, action — reason):", ""]
    for r in adaptive:
        lines.append(f"- run {r['run']} ({r['workload']}, {r['belief']}):")
        lines += [f"  - {d['iteration']}: {d['plan']}, {d['action']} — {d['reason']}"
                  for d in r["decisions"]]
    return "\n".join(lines)


def summary_text(summary: dict[str, Any]) -> str:
    lines = []
    for t in summary["targets"]:
        sign = "≥" if t["at_least"] else "≤"
        if t["value"] is None:
            value = "no runs"
        elif t["at_least"]:
            value = f"{t['count']} of {t['of']} ({t['value']:.1%})"
        else:
            value = f"{t['value']:.1%} over {t['of']} runs"
        lines.append(f"{t['name']}: {value}, target {sign} {t['bound']:.0%}: "
                     f"{'met' if t['met'] else 'MISSED'}")
    s = summary["spread"]
    width = ("" if s["interval_half_width"] is None
             else f"; the 90% intervals' median half-width is {s['interval_half_width']:.1%}")
    if s["groups"]:
        lines.append(f"run-to-run spread: {s['groups']} plans run more than once ({s['runs']} "
                     f"runs), (max − min) / mean median {s['median']:.1%}, at most "
                     f"{s['max']:.1%}{width}")
    else:
        lines.append(f"run-to-run spread: no plan ran twice, not measured{width}")
    lines.append("all targets met" if summary["all_met"] else "targets MISSED")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Options:
    workloads: list[str]
    runs: int
    budget_s: float
    out: Path | None
    as_json: bool
    instances: Path | None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 1, as the project's CLI
        raise UsageError(f"{message}; see --help")


def options(argv: Sequence[str] | None) -> Options:
    """The checked options; `UsageError` names the first bad one."""
    parser = _Parser(prog="python -m benchmarks.deadlines_real",
                     description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="digits-cnn,digits-mlp",
                        help=f"comma-separated, of {', '.join(SHIPPED)}")
    parser.add_argument("--runs", default="24", help="launches (balanced: a multiple of 4)")
    parser.add_argument("--budget-s", default="300", help="each workload's profiling budget")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the profiles and results (default: a new temporary one)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--instances", type=Path, default=None,
                        help="an earlier run's --out: reuse its profiles instead of profiling")
    args = parser.parse_args(argv)
    workloads = list(dict.fromkeys(w.strip() for w in args.workloads.split(",") if w.strip()))
    unknown = [w for w in workloads if w not in SHIPPED]
    if not workloads or unknown:
        raise UsageError(f"`--workloads` {args.workloads!r} must name shipped workloads "
                         f"({', '.join(SHIPPED)}), comma-separated; give e.g. "
                         "`--workloads digits-cnn,digits-mlp`")
    try:
        runs = int(args.runs)
    except ValueError:
        runs = 0
    if runs < 1:
        raise UsageError(f"`--runs` {args.runs!r} must be a whole number ≥ 1; give 24 for the "
                         "measurement, 2 for a smoke run")
    try:
        budget = float(args.budget_s)
    except ValueError:
        budget = math.nan
    if not (math.isfinite(budget) and budget > 0):
        raise UsageError(f"`--budget-s` {args.budget_s!r} must be a number of seconds > 0; "
                         "give 300 (the default)")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"`--out` {str(args.out)!r} is not a folder; give a folder (it is "
                         "created when missing)")
    if args.instances is not None:
        missing = [w for w in workloads if not profile_path(args.instances, w).is_file()]
        if missing:
            raise UsageError(f"`--instances` {str(args.instances)!r} has no "
                             f"{profile_path(args.instances, missing[0]).name}; give the --out "
                             "folder of an earlier run, or leave it out to profile")
    return Options(workloads, runs, budget, args.out, args.json, args.instances)


def _record(path: Path, settings: dict[str, Any], rows: list[dict[str, Any]],
            summary: dict[str, Any] | None = None) -> None:
    write_out(path, json.dumps({"settings": settings, "runs": rows, "summary": summary},
                               indent=2))


def run(chosen: Options, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Profile (or read the profiles), plan every run, launch them in order; the settings and
    the rows, each written to `out`/RESULTS as soon as it is measured."""
    truths: dict[str, tuple[Instance, float]] = {}
    for workload in chosen.workloads:
        profiled = (load_instance(profile_path(chosen.instances, workload))
                    if chosen.instances is not None
                    else profile_local(workload, chosen.budget_s, out))
        truths[workload] = sized(profiled, TRAIN_S)
    cells = design(chosen.runs, chosen.workloads)
    plans = [solve(BELIEFS[cell.belief](truths[cell.workload][0]), guarantee=GUARANTEE,
                   deadline_s=cell.deadline_factor * truths[cell.workload][1])
             for cell in cells]
    settings = {
        "workloads": chosen.workloads, "runs": chosen.runs, "budget_s": chosen.budget_s,
        "guarantee": GUARANTEE,
        "train_s": TRAIN_S, "fastest_s": {w: truths[w][1] for w in chosen.workloads},
        "profiles": str(chosen.instances or out), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
    }
    rows: list[dict[str, Any]] = []
    for number, (cell, plan) in enumerate(zip(cells, plans, strict=True), 1):
        print(f"run {number}/{len(cells)}: {cell.workload}, "
              f"{'adaptive' if cell.adaptive else 'static'}, belief {cell.belief}, deadline "
              f"{plan.deadline_s:.1f} s, {plan.functions} × {plan.memory_mb} MB …",
              file=sys.stderr, flush=True)
        rows.append(launch(cell, plan, truths[cell.workload][0], number))
        _record(out / RESULTS, settings, rows)
    return settings, rows


def main(argv: Sequence[str] | None = None) -> int:
    try:
        chosen = options(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    out = chosen.out or Path(tempfile.mkdtemp(prefix="deadlines-real-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"results: {out / RESULTS}", file=sys.stderr, flush=True)
    try:
        settings, rows = run(chosen, out)
    except KeyboardInterrupt as stop:  # run_local has stopped and removed its processes
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        print(f"error: stopped by {signal.Signals(signum).name}; the runs measured so far are "
              f"in {out / RESULTS}", file=sys.stderr)
        return 128 + signum
    except LambdaDnnError as error:  # no redis-server, a profile that cannot be fitted, …
        print(f"error: {error}", file=sys.stderr)
        return 1
    summary = summarise(rows)
    _record(out / RESULTS, settings, rows, summary)
    if chosen.as_json:
        print(json.dumps({"settings": settings, "runs": rows, "summary": summary}, indent=2))
    else:
        print(table(rows))
        print()
        print(summary_text(summary))
    return 0 if summary["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
