"""Does a 5-seed sweep over 3 truths and 6 strategies (2,000 jobs each) finish in 10 minutes?

Run as ``.venv/bin/python -m benchmarks.sweep [--jobs 2000] [--seeds 5] [--serial-seeds 1]
[--workers N] [--json]`` on an otherwise idle machine (it takes every core for minutes).
Issue 10's target: that sweep, through the local Dask cluster, within `TARGET_S` on this
2-core machine. The truths are the belief, `rate_scale=0.8` and `compute_cv=0.2`; the
strategies are `WANTED` (what is missing from `MODEL_STRATEGY_NAMES` is replaced by other
strategies, and said so).

In the same run, the cells of the first `--serial-seeds` seeds run again serially in this
process: they must give exactly the Dask numbers, and their time, scaled to all seeds (seeds
are exchangeable: each cell of a seed has a twin in every other seed), estimates the serial
sweep, so the speed-up over it is printed. Exits non-zero when the target fails or a serial
number differs; the target is judged only on the issue's configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import click

from lambdadnn.simulator.defaults import MODEL_STRATEGY_NAMES
from lambdadnn.simulator.sweep import Setup, grid, run_serial, sweep, usable_cores
from lambdadnn.simulator.trace import DEFAULT_RATE_PER_S
from lambdadnn.simulator.truth import Truth

TARGET_S = 600.0
WANTED = ("lambdadnn", "lambdadnn-mean", "ldnn-alg1", "ldnn-alg1-q", "naive", "clairvoyant")
TRUTHS = (Truth(), Truth(rate_scale=0.8), Truth(compute_cv=0.2))
ISSUE = {"jobs": 2000, "seeds": 5}


def strategies() -> tuple[list[str], list[str]]:
    """Six strategies: `WANTED` where they exist, then others; and the missing wanted ones."""
    chosen = [name for name in WANTED if name in MODEL_STRATEGY_NAMES]
    missing = [name for name in WANTED if name not in MODEL_STRATEGY_NAMES]
    others = [name for name in MODEL_STRATEGY_NAMES if name not in chosen]
    chosen += others[: len(WANTED) - len(chosen)]
    return chosen, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=ISSUE["jobs"])
    parser.add_argument("--seeds", type=int, default=ISSUE["seeds"])
    parser.add_argument("--serial-seeds", type=int, default=1,
                        help="seeds run again serially for the speed-up (0: none)")
    parser.add_argument("--workers", type=int, default=None,
                        help="local Dask workers [default: usable cores]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names, missing = strategies()
    seeds = list(range(args.seeds))
    setup = Setup(args.jobs)
    total = len(names) * len(seeds) * len(TRUTHS)
    with click.progressbar(length=total, label="sweep on Dask", file=sys.stderr) as bar:
        result = sweep(names, seeds, TRUTHS, setup=setup, rates=[DEFAULT_RATE_PER_S],
                       workers=args.workers,
                       progress=lambda done, _total: bar.update(1))
    subset = seeds[: args.serial_seeds]
    serial_cells = grid(names, subset, TRUTHS, [DEFAULT_RATE_PER_S])
    started = time.perf_counter()
    serial = run_serial(serial_cells, setup) if subset else []
    serial_s = time.perf_counter() - started
    on_dask = [cell for cell in result.cells if cell["seed"] in subset]  # `grid`'s order
    identical = _bare(serial) == _bare(on_dask)
    estimate = serial_s * len(seeds) / len(subset) if subset else None
    issue = args.jobs == ISSUE["jobs"] and args.seeds == ISSUE["seeds"]
    row = {
        "strategies": names, "missing_strategies": missing, "seeds": len(seeds),
        "truths": [truth.label() for truth in TRUTHS], "jobs": args.jobs, "cells": total,
        "workers": result.workers, "usable_cores": usable_cores(), "dask_wall_s": result.wall_s,
        "serial_seeds": len(subset), "serial_subset_s": serial_s,
        "serial_estimate_s": estimate,
        "speed_up": estimate / result.wall_s if estimate is not None else None,
        "serial_identical": identical, "target_s": TARGET_S,
        "passed": (result.wall_s <= TARGET_S) if issue else None,
    }
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        print(f"{total} cells ({len(names)} strategies × {len(seeds)} seeds × {len(TRUTHS)} "
              f"truths, {args.jobs:,} jobs each) on {result.workers} Dask workers: "
              f"{result.wall_s:.1f} s")
        if missing:
            print(f"  not in MODEL_STRATEGY_NAMES: {', '.join(missing)}; ran {', '.join(names)}")
        if estimate is not None:
            print(f"  serial, {len(subset)} seed(s): {serial_s:.1f} s → all seeds ≈ "
                  f"{estimate:.1f} s; speed-up {row['speed_up']:.2f}×; identical numbers: "
                  f"{identical}")
        verdict = ("not the issue's configuration (2,000 jobs, 5 seeds): no verdict" if not issue
                   else "passed" if row["passed"] else "FAILED")
        print(f"  target ≤ {TARGET_S:.0f} s: {verdict}")
    return 0 if identical and row["passed"] is not False else 1


def _bare(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells without their wall time, the one figure that differs from run to run."""
    return [{key: value for key, value in cell.items() if key != "wall_s"} for cell in cells]


if __name__ == "__main__":
    sys.exit(main())
