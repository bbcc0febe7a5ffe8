"""Issue 21's test of `lambdadnn-adaptive`: does it keep the deadlines hindsight can keep, in
worlds its model does not describe, at hindsight's cost?

Run as ``.venv/bin/python -m benchmarks.adaptive_worlds [--jobs 150] [--seeds 0]
[--worlds all] [--random 8] [--processes 2] [--json]``. In every named world
(instances/worlds/) and in `--random` worlds drawn by `simulator.world.draw`, it runs
`lambdadnn` (static), `lambdadnn-adaptive` and `hindsight` (the best static plan knowing the
job's realised luck) on the same bursty Philly-like trace (deadlines U[600, 1200] s), and
reports per world: the adaptive controller's share of the jobs hindsight meets, its cost
against hindsight's on the jobs both meet, and static `lambdadnn`'s share. The targets:
≥ 99.5% of the hindsight-feasible jobs, ≤ 1.10× hindsight's cost, and never below static on
met share. It measures and prints each target as met or missed; it exits 0 either way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from benchmarks.paper import WORLDS, run
from lambdadnn.simulator.world import World
from lambdadnn.simulator.world.draw import random_world

STRATEGIES = ("lambdadnn", "lambdadnn-adaptive")
MET_TARGET, COST_TARGET = 0.995, 1.10


def _world(name: str) -> World | str:
    if name.startswith("random-"):
        return random_world(np.random.default_rng(int(name.removeprefix("random-"))), name)
    return name


def _one(name: str, jobs: int, seeds: list[int]) -> dict[str, Any]:
    result = run(_world(name), jobs=jobs, seeds=seeds, hindsight=True, strategies=STRATEGIES)
    rows = {row["strategy"]: row for row in result["strategies"]}
    adaptive, static = rows["lambdadnn-adaptive"], rows["lambdadnn"]
    share = adaptive["met_of_hindsight_feasible"]
    ratio = adaptive["cost_vs_hindsight"]
    return {
        **result,
        "targets": {
            "met_of_hindsight_feasible": share is not None and share >= MET_TARGET,
            "cost_vs_hindsight": ratio is not None and ratio <= COST_TARGET,
            "not_below_static": adaptive["deadline_met"] >= static["deadline_met"],
        },
    }


def _line(result: dict[str, Any]) -> str:
    rows = {row["strategy"]: row for row in result["strategies"]}
    adaptive, static = rows["lambdadnn-adaptive"], rows["lambdadnn"]

    def share(row: dict[str, Any]) -> str:
        value = row["met_of_hindsight_feasible"]
        return "—" if value is None else f"{value:.2%}"

    ratio = adaptive["cost_vs_hindsight"]
    marks = "".join("✓" if ok else "✗" for ok in result["targets"].values())
    return (f"{result['world']:<16}{result['hindsight_feasible']:>9}{share(static):>12}"
            f"{static['deadline_met']:>9.2%}{share(adaptive):>12}{adaptive['deadline_met']:>9.2%}"
            f"{'—' if ratio is None else f'{ratio:.3f}':>9}{adaptive['seconds']:>9.0f}  {marks}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--worlds", default="all",
                        help="comma-separated shipped worlds, or `all`, or `none`")
    parser.add_argument("--random", type=int, default=8, help="random worlds (seeds 0..N-1)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    named = (sorted(p.stem for p in WORLDS.glob("*.yaml")) if args.worlds == "all"
             else [] if args.worlds == "none" else [w for w in args.worlds.split(",") if w])
    names = [*named, *(f"random-{i}" for i in range(args.random))]
    started = time.perf_counter()
    if not args.json:
        print(f"{'world':<16}{'feasible':>9}{'static':>12}{'met':>9}{'adaptive':>12}{'met':>9}"
              f"{'× cost':>9}{'wall s':>9}  targets (≥99.5% of feasible, ≤1.10× cost, ≥ static)",
              flush=True)
    results = []
    with ProcessPoolExecutor(max(1, args.processes)) as pool:
        for result in pool.map(_one, names, [args.jobs] * len(names),
                               [seeds] * len(names)):
            results.append(result)
            if not args.json:
                print(_line(result), flush=True)
    if args.json:
        json.dump({"results": results, "wall_s": time.perf_counter() - started}, sys.stdout,
                  indent=2)
        print()
    else:
        held = {key: sum(r["targets"][key] for r in results) for key in results[0]["targets"]}
        print(f"targets held in {len(results)} worlds: " + ", ".join(
            f"{key} {count}/{len(results)}" for key, count in held.items()))
        print(f"wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
