"""Does a 10,000-job × 3-seed sweep of the main strategies in a shipped world finish in 20 min?

Run as ``.venv/bin/python -m benchmarks.world_sweep [--jobs 10000] [--seeds 3] [--world W.yaml]
[--workers N] [--json]`` on an otherwise idle machine (it takes every core for minutes).
The target (the independent world's issue): that sweep, in the independent engine
(`simulator.world`) through the local Dask cluster with its progress bar, within `TARGET_S`
on this 2-core machine. The strategies are `MAIN`; `siren` only when its trained policy is
shipped (`simulator.siren.POLICY_PATH`), else it is skipped and said so. `hindsight` is not
run: it is a full search of plans per job, far slower than every strategy it judges.

Prints the wall time against the target, and per strategy the seconds its cells took (the
sum over seeds, so where the time goes) and its met share. Exits non-zero when the target is
missed; the target is judged only on the issue's configuration (10,000 jobs, 3 seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import click

import lambdadnn
from lambdadnn.simulator.siren import POLICY_PATH
from lambdadnn.simulator.sweep import Setup, named_worlds, sweep, usable_cores
from lambdadnn.simulator.trace import DEFAULT_RATE_PER_S

TARGET_S = 1200.0
MAIN = ("lambdadnn", "lambdadnn-adaptive", "replan-heuristic", "naive", "ldnn-alg1")
WORLDS = Path(lambdadnn.__file__).parent / "instances" / "worlds"
PREFERRED_WORLD = "degraded.yaml"
ISSUE = {"jobs": 10_000, "seeds": 3}


def default_world() -> Path:
    """`PREFERRED_WORLD` among the shipped worlds, else the first shipped one."""
    preferred = WORLDS / PREFERRED_WORLD
    if preferred.exists():
        return preferred
    shipped = sorted(WORLDS.glob("*.yaml"))
    if not shipped:
        raise SystemExit(f"error: no world in {WORLDS}; give one with --world")
    return shipped[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=ISSUE["jobs"])
    parser.add_argument("--seeds", type=int, default=ISSUE["seeds"])
    parser.add_argument("--world", type=Path, default=None,
                        help=f"world file [default: {PREFERRED_WORLD} if shipped]")
    parser.add_argument("--workers", type=int, default=None,
                        help="local Dask workers [default: usable cores]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    world_path = args.world or default_world()
    names = [*MAIN, *(["siren"] if POLICY_PATH.exists() else [])]
    skipped = [] if POLICY_PATH.exists() else ["siren"]
    worlds = named_worlds([world_path])
    seeds = list(range(args.seeds))
    load_before = os.getloadavg()
    total = len(names) * len(seeds)
    with click.progressbar(length=total, label="world sweep on Dask", file=sys.stderr) as bar:
        result = sweep(names, seeds, worlds, setup=Setup(args.jobs), rates=[DEFAULT_RATE_PER_S],
                       workers=args.workers,
                       progress=lambda done, _total: bar.update(done - bar.pos))
    issue = args.jobs == ISSUE["jobs"] and args.seeds == ISSUE["seeds"]
    per_strategy = {
        name: {
            "cell_s": sum(cell["wall_s"] for cell in result.cells if cell["strategy"] == name),
            "deadline_met": next(row["deadline_met"]["pooled"] for row in result.aggregates
                                 if row["strategy"] == name),
        }
        for name in names
    }
    row = {
        "world": worlds[0].name, "world_file": str(world_path), "strategies": names,
        "skipped": skipped, "jobs": args.jobs, "seeds": len(seeds), "cells": total,
        "workers": result.workers, "usable_cores": usable_cores(),
        "load_average_before": list(load_before), "wall_s": result.wall_s,
        "per_strategy": per_strategy, "target_s": TARGET_S,
        "passed": (result.wall_s <= TARGET_S) if issue else None,
    }
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        print(f"{total} cells ({len(names)} strategies × {len(seeds)} seeds, {args.jobs:,} jobs "
              f"each) in world {worlds[0].name} on {result.workers} Dask workers: "
              f"{result.wall_s:.1f} s (load average before: {load_before[0]:.2f})")
        if skipped:
            print(f"  skipped: siren (no trained policy at {POLICY_PATH})")
        for name, figures in per_strategy.items():
            print(f"  {name:<19} cells {figures['cell_s']:>8.1f} s   met "
                  f"{figures['deadline_met']:.2%}")
        verdict = ("not the issue's configuration (10,000 jobs, 3 seeds): no verdict"
                   if not issue else "passed" if row["passed"] else "FAILED")
        print(f"  target ≤ {TARGET_S:.0f} s: {verdict}")
    return 0 if row["passed"] is not False else 1


if __name__ == "__main__":
    sys.exit(main())
