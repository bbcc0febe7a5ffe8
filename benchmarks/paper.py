"""λDNN's headline comparison, reproduced in shape in the independent world.

The paper (Sec. 6) reports, on a Philly-derived trace with deadlines uniform in 600–1,200 s,
that λDNN met 99.98% of the deadlines, Siren (deep RL) 91.3% and naive provisioning 79.5%,
saving up to 66.7% of the cost. This benchmark runs the same three kinds of planner, λDNN's
Algorithm 1 as published (`ldnn-alg1`), the Siren-like policy (`siren`) and `naive`, beside
ours (`lambdadnn`, `lambdadnn-adaptive`, `replan-heuristic`, `sample-search`) and the
hindsight reference, on a bursty Philly-like trace (gamma inter-arrivals of CV 2 over the
shipped workloads, deadlines U[600, 1200] s) in each named world, over several seeds.

Run as ``.venv/bin/python -m benchmarks.paper [--jobs 300] [--seeds 0,1,2]
[--worlds nominal,lambda-2024] [--no-hindsight] [--json]``. It prints, per world and
strategy, the share of deadlines met (pooled over seeds, with its 95% Wilson interval), the
share of the jobs hindsight could meet, cost per job and cost against hindsight's, next to
the paper's figures where the paper has one. It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.compare import compare, wilson
from lambdadnn.simulator.defaults import DEFAULT_POOL_SIZE
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.world import World
from lambdadnn.simulator.worlds import load_world

WORLDS = Path(__file__).resolve().parent.parent / "instances" / "worlds"
PAPER = {"ldnn-alg1": 0.9998, "siren": 0.913, "naive": 0.795}  # λDNN paper, Sec. 6
STRATEGIES = ("ldnn-alg1", "siren", "naive", "lambdadnn", "lambdadnn-adaptive",
              "replan-heuristic", "sample-search")


def run(
    world: str | World, *, jobs: int, seeds: list[int], hindsight: bool,
    strategies: tuple[str, ...] = STRATEGIES,
) -> dict[str, Any]:
    """Every strategy over `seeds` traces in one world (a shipped name, or a `World`): pooled
    figures per strategy."""
    world = world if isinstance(world, World) else load_world(WORLDS / f"{world}.yaml")
    names = [*strategies, *(["hindsight"] if hindsight else [])]
    pooled: dict[str, dict[str, float]] = {
        name: {"met": 0, "jobs": 0, "cost": 0.0, "feasible_met": 0, "both_cost": 0.0,
               "both_reference": 0.0, "seconds": 0.0} for name in names}
    feasible = 0
    for seed in seeds:
        trace = generate_trace(jobs, seed=seed, arrival="bursty", mix="paper")
        comparison = compare(trace, names, seed=seed, noise=NoiseModel(),
                             pool_size=DEFAULT_POOL_SIZE, world=world)
        reference = comparison.outcomes.get("hindsight")
        if reference is not None:
            feasible += sum(o.met_deadline for o in reference)
        for name, outcomes in comparison.outcomes.items():
            row = pooled[name]
            row["met"] += sum(o.met_deadline for o in outcomes)
            row["jobs"] += len(outcomes)
            row["cost"] += sum(o.cost_usd + o.exploration_cost_usd for o in outcomes)
            row["seconds"] += comparison.seconds[name]
            if reference is not None:
                for ours, best in zip(outcomes, reference, strict=True):
                    if best.met_deadline and ours.met_deadline:
                        row["feasible_met"] += 1
                        row["both_cost"] += ours.cost_usd + ours.exploration_cost_usd
                        row["both_reference"] += best.cost_usd
    rows = []
    for name, row in pooled.items():
        met, count = int(row["met"]), int(row["jobs"])
        rows.append({
            "strategy": name, "jobs": count, "deadline_met": met / count,
            "deadline_met_ci95": wilson(met, count),
            "met_of_hindsight_feasible": row["feasible_met"] / feasible if feasible else None,
            "cost_vs_hindsight": row["both_cost"] / row["both_reference"]
            if row["both_reference"] else None,
            "mean_cost_usd": row["cost"] / count, "paper_deadline_met": PAPER.get(name),
            "seconds": row["seconds"],
        })
    return {"world": world.name, "jobs_per_seed": jobs, "seeds": seeds,
            "hindsight_feasible": feasible if hindsight else None, "strategies": rows}


def _table(result: dict[str, Any]) -> str:
    lines = [f"world {result['world']}: {result['jobs_per_seed']} jobs × seeds "
             f"{result['seeds']}; hindsight meets {result['hindsight_feasible']}",
             f"  {'strategy':<20}{'met':>8}{'95% Wilson':>18}{'paper':>8}{'of feasible':>13}"
             f"{'$ per job':>11}{'× hindsight':>13}{'wall s':>8}"]
    for row in result["strategies"]:
        low, high = row["deadline_met_ci95"]
        paper = "" if row["paper_deadline_met"] is None else f"{row['paper_deadline_met']:.2%}"
        share = row["met_of_hindsight_feasible"]
        ratio = row["cost_vs_hindsight"]
        lines.append(
            f"  {row['strategy']:<20}{row['deadline_met']:>8.2%}"
            f"{f'[{low:.1%}, {high:.1%}]':>18}{paper:>8}"
            f"{'—' if share is None else f'{share:.2%}':>13}{row['mean_cost_usd']:>11.4f}"
            f"{'—' if ratio is None else f'{ratio:.3f}':>13}{row['seconds']:>8.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--worlds", default="nominal,lambda-2024")
    parser.add_argument("--no-hindsight", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    started = time.perf_counter()
    results = []
    for world_name in [w for w in args.worlds.split(",") if w]:
        result = run(world_name, jobs=args.jobs, seeds=seeds, hindsight=not args.no_hindsight)
        results.append(result)
        if not args.json:
            print(_table(result), flush=True)
    if args.json:
        json.dump({"results": results, "wall_s": time.perf_counter() - started}, sys.stdout,
                  indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
