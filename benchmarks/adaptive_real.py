"""Issue 11's real runs: a wrong belief launched as planned and with `--adaptive`, on this machine.

Run as ``.venv/bin/python -m benchmarks.adaptive_real [--profile PATH] [--budget-s 240]
[--out DIR] [--json]`` on an idle machine (about 10 minutes). It:

1. profiles `digits-cnn` locally (`lambdadnn profile`'s library call), or reads `--profile`:
   the machine as well as it can be known, the "truth" of this experiment. The epochs are set
   so that the fastest plan trains for about `TRAIN_S` seconds;
2. **optimistic belief**: the profile with R × 1.5. Among deadlines of 1.2–3× the fastest
   plan's time it takes the one where, by the truth's model, the belief's plan misses by
   the most while the truth's plan needs more n·m than the belief plans, and its fastest
   has 20% to spare.
   It launches the belief's plan twice, exactly as `lambdadnn launch plan.json` and
   `lambdadnn launch plan.json --adaptive` do (`run_local`, with `Controller.of(spec)`);
3. **pessimistic belief**: R / 1.5, at a deadline of 3× the fastest plan's time: the belief
   plans more than the machine needs, and the adaptive run should scale down and cost less.

Each run's cost is what Lambda would bill for its rounds: n·m/1024 GB × seconds × the
platform's price, plus a request per invocation (`run_cost`). The report's measured time
(launch → last update) is compared with the deadline. Everything is printed, with each
adaptive round's (n, m) and reason; `--json` writes the rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from lambdadnn import evaluate, load_instance, solve
from lambdadnn.launcher.local import local_capacity, local_runner, run_local
from lambdadnn.launcher.profile import profile_workload
from lambdadnn.launcher.spec import LaunchSpec
from lambdadnn.models.prices import bill
from lambdadnn.solver.adaptive import Controller
from lambdadnn.solver.instance import Instance, instance_mapping
from lambdadnn.solver.plan import Plan

WORKLOAD = "digits-cnn"
TRAIN_S = 30.0  # the fastest plan's predicted training, seconds
GUARANTEE = 0.95
WRONG_BY = 1.5  # the belief's R is the truth's × 1.5 (optimistic) or / 1.5 (pessimistic)
DEADLINES = (1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0)  # × the fastest plan's time


def _with_epochs(instance: Instance, epochs: int) -> Instance:
    mapping = instance_mapping(instance)
    mapping["workload"]["epochs"] = epochs
    return load_instance(mapping)


def rate_times(instance: Instance, factor: float) -> Instance:
    """The instance with R(m) × `factor`: a belief that is wrong about the rate."""
    rate = instance.profile.rate
    wrong = dataclasses.replace(rate, slope=rate.slope * factor,
                                intercept=rate.intercept * factor)
    return dataclasses.replace(
        instance, name=f"{instance.name} (R × {factor:.3g})",
        profile=dataclasses.replace(instance.profile, rate=wrong),
    )


def _plan(instance: Instance, deadline_s: float) -> Plan:
    return solve(instance, deadline_s=deadline_s, guarantee=GUARANTEE)


def sized(truth: Instance, train_s: float = TRAIN_S) -> tuple[Instance, float]:
    """The truth with its epochs set for ~`train_s` s on the fastest plan, and that time."""
    one = _with_epochs(truth, 1)
    fastest = solve(one, deadline_s=1e-3)  # infeasible: the fastest plan
    per_epoch = fastest.time_s - fastest.time_breakdown.startup_s
    sized_truth = _with_epochs(truth, max(1, math.ceil(train_s / per_epoch)))
    return sized_truth, solve(sized_truth, deadline_s=1e-3).time_s


def optimistic_deadline(truth: Instance, fastest_s: float) -> float:
    """The deadline where the optimistic belief's plan misses by the most under the truth's
    model, while the truth's cheapest plan needs more n·m and its fastest has 20% to spare
    (room to catch up once the run has found out)."""
    belief = rate_times(truth, WRONG_BY)
    best: tuple[float, float] | None = None
    for factor in DEADLINES:
        deadline = factor * fastest_s
        planned, needed = _plan(belief, deadline), _plan(truth, deadline)
        true_time = evaluate(truth, functions=planned.functions,
                             memory_mb=planned.memory_mb).time_s
        room = needed.status == "optimal" and fastest_s <= 0.8 * deadline
        more = needed.functions * needed.memory_mb > planned.functions * planned.memory_mb
        if room and more and (best is None or true_time / deadline > best[1]):
            best = (deadline, true_time / deadline)
    if best is None:
        raise SystemExit("no deadline separates the optimistic belief from the truth here")
    return best[0]


def run_cost(report: dict[str, Any], instance: Instance) -> float:
    """What Lambda would bill for the run's rounds (functions and requests; the PS too)."""
    platform, server = instance.platform, instance.parameter_server
    rounds = sum(bill(round_["seconds"] or 0.0, round_["functions"], round_["memory_mb"],
                      requests=round_["invocations"],
                      price_per_gb_second=platform.price_per_gb_second,
                      price_per_request=platform.price_per_request)
                 for round_ in report["rounds"])
    return rounds + report["measured_time_s"] * server.shards * server.price_per_hour / 3600


def launch(label: str, plan: Plan, deadline_s: float, *, adaptive: bool) -> dict[str, Any]:
    spec = LaunchSpec.from_plan(plan)
    load = os.getloadavg()[0]
    report = run_local(spec, workload=WORKLOAD,
                       controller=Controller.of(spec) if adaptive else None).to_dict()
    row = {
        "case": label, "launch": "adaptive" if adaptive else "static", "load": load,
        "deadline_s": deadline_s, "measured_s": report["measured_time_s"],
        "met": report["measured_time_s"] <= deadline_s,
        "cost_usd": run_cost(report, plan.solved_from),
        "plan": f"{plan.functions} × {plan.memory_mb} MB", "final_loss": report["final_loss"],
        "rounds": [{key: r[key] for key in ("functions", "memory_mb", "iterations_from",
                                             "iterations_to", "seconds", "action", "reason",
                                             "checks")}
                   for r in report["rounds"]],
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def run(profile: Path | None, budget_s: float, out: Path) -> list[dict[str, Any]]:
    if profile is None:
        print(f"profiling {WORKLOAD} …", file=sys.stderr, flush=True)
        mapping = profile_workload(WORKLOAD, local_capacity(),
                                   local_runner(workload=WORKLOAD, seed=0), budget_s=budget_s)
        profile = out / f"{WORKLOAD}-local.yaml"
        profile.write_text(yaml.safe_dump(mapping, sort_keys=False))
    truth, fastest_s = sized(load_instance(profile))
    rows = []
    deadline = optimistic_deadline(truth, fastest_s)
    optimistic = _plan(rate_times(truth, WRONG_BY), deadline)
    for adaptive in (False, True):
        rows.append(launch("optimistic (R × 1.5)", optimistic, deadline, adaptive=adaptive))
    deadline = DEADLINES[-1] * fastest_s
    pessimistic = _plan(rate_times(truth, 1 / WRONG_BY), deadline)
    for adaptive in (False, True):
        rows.append(launch("pessimistic (R / 1.5)", pessimistic, deadline, adaptive=adaptive))
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'case':<22} {'launch':<9} {'plan':<14} {'deadline':>9} {'measured':>9} "
             f"{'met':>4} {'cost $':>10} {'loss':>7} {'load':>5}"]
    for row in rows:
        lines.append(
            f"{row['case']:<22} {row['launch']:<9} {row['plan']:<14} "
            f"{row['deadline_s']:>8.1f}s {row['measured_s']:>8.1f}s "
            f"{'yes' if row['met'] else 'NO':>4} {row['cost_usd']:>10.3e} "
            f"{row['final_loss']:>7.4f} {row['load']:>5.2f}")
        for number, r in enumerate(row["rounds"], 1):
            lines.append(f"    {number}. {r['functions']} × {r['memory_mb']} MB, iterations "
                         f"{r['iterations_from']}–{r['iterations_to']}, {r['seconds']:.1f} s: "
                         f"{r['action']} — {r['reason']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="A local profile of digits-cnn to reuse.")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="adaptive-real-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = run(args.profile, args.budget_s, out)
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
