"""Issue 11's simulation targets: does `lambdadnn-adaptive` keep the deadline when the model is
wrong, and at what price?

Run as ``.venv/bin/python -m benchmarks.adaptive [--jobs 2000] [--seeds 3] [--truths 0,1]
[--json]``. For each truth (`TRUTHS`) and seed it generates a trace of `--jobs` jobs and runs
`lambdadnn`, `lambdadnn-adaptive` and `clairvoyant` through `simulator.compare.compare`
(the belief: the shipped instances and `NoiseModel()`). Per truth, over all seeds, it prints
each strategy's met-rate and cost, the adaptive met-rate among the jobs `clairvoyant` meets
(the issue's feasible set, matched by seed and job index), and the adaptive cost against
clairvoyant's and static `lambdadnn`'s. The issue's targets: ≥ 99.5% met among feasible jobs
under every truth, cost ≤ 1.10 × clairvoyant, and under `rate_scale=1.25` a cost below
static `lambdadnn`'s. For a few missed feasible jobs it re-runs the job's controller and
prints its decisions' reasons. Exits non-zero when a target fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lambdadnn import NoiseModel
from lambdadnn.simulator.adaptive import run_adaptive
from lambdadnn.simulator.compare import compare
from lambdadnn.simulator.defaults import DEFAULT_GUARANTEE, DEFAULT_POOL_SIZE
from lambdadnn.simulator.pool import JobOutcome, job_rng
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.trace_file import Job

NAMES = ("lambdadnn", "lambdadnn-adaptive", "clairvoyant")
TRUTHS = (
    Truth(rate_scale=0.8), Truth(rate_scale=1.25), Truth(compute_cv=0.2),
    Truth(failure_rate_per_h=0.1),
)
MET_AMONG_FEASIBLE = 0.995
COST_OVER_CLAIRVOYANT = 1.10
RUN_STREAM = 1  # `simulator.pool`'s stream of a job's run
SHOWN_MISSES = 3


def _decisions(job: Job, outcome: JobOutcome, truth: Truth, seed: int) -> list[str]:
    """The reasons of a job's decisions, re-run as the pool ran it (same budget, same rng)."""
    noise = NoiseModel()
    run = run_adaptive(
        job.instance, truth.instance(job.instance), truth.noise(noise),
        guarantee=DEFAULT_GUARANTEE, noise=noise,
        budget_s=job.deadline_s - (outcome.start_time_s - job.submit_time_s),
        rng=job_rng(seed, outcome.index, RUN_STREAM), max_functions=DEFAULT_POOL_SIZE,
    )
    lines = [f"{d.action} at {d.at_iteration:g} it, {d.at_s:.0f} s: {d.reason}"
             for d in run.decisions if d.action != "continue" or d is run.decisions[-1]]
    late = outcome.end_time_s - outcome.submit_time_s - outcome.deadline_s
    return [f"job {outcome.index} ({job.instance_name}, deadline {job.deadline_s:g} s, "
            f"late by {late:.1f} s, stages {list(run.stages)})", *lines]


def run_truth(truth: Truth, jobs: int, seeds: int) -> dict[str, Any]:
    """One truth over `seeds` traces: the figures of the module docstring."""
    met = dict.fromkeys(NAMES, 0)
    cost = dict.fromkeys(NAMES, 0.0)
    seconds = dict.fromkeys(NAMES, 0.0)
    feasible = adaptive_met = total = 0
    misses: list[list[str]] = []
    for seed in range(seeds):
        trace = generate_trace(jobs, seed=seed)
        comparison = compare(trace, NAMES, seed=seed, noise=NoiseModel(),
                             pool_size=DEFAULT_POOL_SIZE, truth=truth)
        outcomes = comparison.outcomes
        total += len(trace)
        for name in NAMES:
            met[name] += sum(o.met_deadline for o in outcomes[name])
            cost[name] += sum(o.cost_usd + o.exploration_cost_usd for o in outcomes[name])
            seconds[name] += comparison.seconds[name]
        for job, floor, ours in zip(trace, outcomes["clairvoyant"],
                                    outcomes["lambdadnn-adaptive"], strict=True):
            if floor.met_deadline:
                feasible += 1
                adaptive_met += ours.met_deadline
                if not ours.met_deadline and len(misses) < SHOWN_MISSES:
                    misses.append(_decisions(job, ours, truth, seed))
    among = adaptive_met / feasible if feasible else 1.0
    over_floor = cost["lambdadnn-adaptive"] / cost["clairvoyant"]
    over_static = cost["lambdadnn-adaptive"] / cost["lambdadnn"]
    passed = among >= MET_AMONG_FEASIBLE and over_floor <= COST_OVER_CLAIRVOYANT and (
        truth != Truth(rate_scale=1.25) or over_static < 1
    )
    return {
        "truth": truth.label(), "jobs": total, "seeds": seeds,
        "met": {name: met[name] / total for name in NAMES},
        "cost_usd": cost, "seconds": seconds, "feasible_jobs": feasible,
        "adaptive_met_among_feasible": among,
        "adaptive_cost_over_clairvoyant": over_floor,
        "adaptive_cost_over_static": over_static,
        "passed": passed, "missed_feasible_decisions": misses,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--truths", default=",".join(str(i) for i in range(len(TRUTHS))),
                        help="comma-separated indices into: "
                        + "; ".join(f"{i}: {t.label()}" for i, t in enumerate(TRUTHS)))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    chosen = [TRUTHS[int(i)] for i in args.truths.split(",")]
    rows = [run_truth(truth, args.jobs, args.seeds) for truth in chosen]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0 if all(row["passed"] for row in rows) else 1
    print(f"{'truth':<24}{'static':>8}{'adapt.':>8}{'clairv.':>8}{'adapt|feas':>11}"
          f"{'$ static':>10}{'$ adapt.':>10}{'$ clairv.':>10}{'a/c':>7}{'a/s':>7}{'adapt s':>9}")
    for row in rows:
        met, cost = row["met"], row["cost_usd"]
        print(f"{row['truth']:<24}" + "".join(f"{met[name]:>8.2%}" for name in NAMES)
              + f"{row['adaptive_met_among_feasible']:>11.2%}"
              + "".join(f"{cost[name]:>10.2f}" for name in NAMES)
              + f"{row['adaptive_cost_over_clairvoyant']:>7.3f}"
              f"{row['adaptive_cost_over_static']:>7.3f}"
              f"{row['seconds']['lambdadnn-adaptive']:>9.0f}")
    for row in rows:
        verdict = "PASS" if row["passed"] else "FAIL"
        print(f"  {verdict}  {row['truth']}: {row['jobs']:,} jobs over {row['seeds']} seeds, "
              f"{row['feasible_jobs']:,} feasible")
        for lines in row["missed_feasible_decisions"]:
            print("    " + "\n      ".join(lines))
    return 0 if all(row["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
