"""What sharded parameter servers buy: on a Philly-like trace, how many more deadlines can be
met, how much cheaper the jobs already met get, which machines the optimum picks, and what
the choice costs in solve time.

Run as ``.venv/bin/python -m benchmarks.ps_shards [--seed 1] [--jobs 1000] [--json] [--check]
[--quick] [--full]`` (about 3 minutes on two busy cores, ``--quick`` about 1). The trace is
`generate_trace` (the paper's mix: the four shipped workloads, each at its own epochs, Poisson
arrivals) of `--jobs` jobs (1,000; ``--quick``: 150), drawn once per deadline range with the
same seed, so the same workloads in the same order meet U[600, 1200] s (the paper's),
U[300, 600] s and U[150, 300] s deadlines. Every job is planned twice:

* **1 PS** — today's single parameter server, each shipped instance as it is (one m5.large:
  1,200 MB/s, $0.096/h; `resnet50-cifar10`, which now names the catalogue, gets the m5.large
  its comment says it had);
* **catalogue** — the same instance with ``parameter_server: {catalogue: <ec2>,
  function_bandwidth_mbps: <its own>}``: `solve()` chooses the type (instances/servers/ec2.yaml)
  and the shard count (1–8), 40 servers in all.

Three bandwidth variants, each applied to both (the function links keep their 84 MB/s):
``nominal`` (the catalogue as shipped: its "up to" burst figures), ``half`` (every PS
bandwidth halved, the single PS's and every type's) and ``baseline`` (every type at its
published sustained `baseline_mbps`, the single m5.large too: 93.75 MB/s). Each is planned at
the 99.9% guarantee (`NoiseModel()`, as benchmarks/solve_many.py plans); ``nominal`` also
without one, and with ``--full`` every variant.

Each distinct question (variant, guarantee, PS, workload, epochs, deadline) is solved once
and cached; one untimed solve per workload, variant, guarantee and PS first, so the timings
are warm. Reported per setting: the share of jobs whose plan is ``optimal`` (meets its
deadline) with each PS; the jobs the catalogue rescues; on the jobs already met with one PS,
the saving 1 − cost(catalogue)/cost(1 PS) (median, mean, max) and the total; the (type, k)
picked per workload; the median solve time of a question with each PS and their ratio
(the two solves of a question run back to back, so the machine's load hits both alike).

The single m5.large is one of the catalogue's servers in every variant, so a catalogue plan
can never cost more, nor a deadline met with one PS be missed with the catalogue: each
occurrence is printed as VIOLATION, and ``--check`` exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lambdadnn import LambdaDnnError, solve
from lambdadnn.simulator.trace import WORKLOADS, generate_trace
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance, read_yaml
from lambdadnn.solver.shipped import instances_folder, servers_folder

GUARANTEE = 0.999
DEADLINE_RANGES: tuple[tuple[int, int], ...] = ((600, 1200), (300, 600), (150, 300))
VARIANTS = ("nominal", "half", "baseline")
# (bandwidth variant, guarantee) pairs run by default; `--full` adds the other variants
# without a guarantee (each pair costs about a minute on 1,000 jobs, nearly all of it the
# catalogue's solves).
SETTINGS: tuple[tuple[str, float | None], ...] = (
    ("nominal", GUARANTEE), ("nominal", None), ("half", GUARANTEE), ("baseline", GUARANTEE))
FULL_SETTINGS: tuple[tuple[str, float | None], ...] = tuple(
    (variant, guarantee) for variant in VARIANTS for guarantee in (GUARANTEE, None))
CATALOGUE = "ec2"
SINGLE_TYPE = "m5.large"  # the paper's parameter server, and every shipped instance's
JOBS = 1000
QUICK_JOBS = 150
COST_RTOL = 1e-9  # a catalogue plan dearer than this over the single PS's is a violation


@dataclass(frozen=True)
class Outcome:
    """One solve, reduced: whether the deadline is met, at what cost, on which server."""

    status: str  # "optimal", "infeasible" or "error"
    cost_usd: float | None
    ps_type: str | None
    shards: int
    seconds: float
    error: str | None = None

    @property
    def met(self) -> bool:
        return self.status == "optimal"


def catalogue(variant: str) -> dict[str, Any]:
    """The shipped EC2 catalogue with its PS bandwidths as `variant` says: as shipped, halved,
    or each type's sustained `baseline_mbps`."""
    shipped = read_yaml(servers_folder() / f"{CATALOGUE}.yaml", what="a parameter-server catalogue")
    changed = copy.deepcopy(shipped)
    for entry in changed["types"].values():
        entry["bandwidth_mbps"] = _bandwidth(entry, variant)
    return dict(changed)


def _bandwidth(entry: Mapping[str, Any], variant: str) -> float:
    nominal = float(entry["bandwidth_mbps"])
    if variant == "nominal":
        return nominal
    if variant == "half":
        return nominal / 2
    if variant == "baseline":
        return float(entry.get("baseline_mbps", nominal))
    raise ValueError(f"unknown bandwidth variant {variant!r}; use one of {', '.join(VARIANTS)}")


def shipped_single(raw_ps: Mapping[str, Any]) -> dict[str, Any]:
    """Today's one machine of a shipped `parameter_server:` section: the section itself, or,
    for one that names the catalogue, the catalogue's m5.large (what it had before)."""
    if "catalogue" not in raw_ps:
        return dict(raw_ps)
    m5 = catalogue("nominal")["types"][SINGLE_TYPE]
    return {"bandwidth_mbps": m5["bandwidth_mbps"],
            "function_bandwidth_mbps": raw_ps["function_bandwidth_mbps"],
            "price_per_hour": m5["price_per_hour"]}


def single_in_catalogue(raw_ps: Mapping[str, Any]) -> bool:
    """Whether today's single PS is the catalogue's m5.large (bandwidth and price): what makes
    "never dearer, never less feasible" a theorem rather than a hope."""
    single, m5 = shipped_single(raw_ps), catalogue("nominal")["types"][SINGLE_TYPE]
    return (float(single["bandwidth_mbps"]) == float(m5["bandwidth_mbps"])
            and float(single["price_per_hour"]) == float(m5["price_per_hour"])
            and float(single.get("message_s", 0.0)) == float(m5.get("message_s", 0.0))
            and int(single.get("shards", 1)) == 1)


def instances(workload: str, variant: str) -> tuple[Instance, Instance]:
    """(the single-PS instance, the catalogue instance) of a shipped workload under `variant`:
    the same YAML but for `parameter_server:`, the single PS's bandwidth changed as the
    catalogue's m5.large is."""
    raw = read_yaml(instances_folder() / f"{workload}.yaml")
    single = shipped_single(raw["parameter_server"])
    m5 = catalogue("nominal")["types"][SINGLE_TYPE]
    if variant == "baseline":
        # the sustained rate of the machine: m5.large's, scaled if the instance's differs
        single["bandwidth_mbps"] = (float(single["bandwidth_mbps"]) * _bandwidth(m5, variant)
                                    / float(m5["bandwidth_mbps"]))
    else:
        single["bandwidth_mbps"] = _bandwidth(single, variant)
    choice = {"catalogue": catalogue(variant),
              "function_bandwidth_mbps": single["function_bandwidth_mbps"]}
    return (load_instance({**raw, "parameter_server": single}),
            load_instance({**raw, "parameter_server": choice}))


def _solve(instance: Instance, guarantee: float | None) -> Outcome:
    started = time.perf_counter()
    try:
        plan = solve(instance, guarantee=guarantee)
    except LambdaDnnError as error:
        return Outcome("error", None, None, 0, time.perf_counter() - started,
                       f"{type(error).__name__}: {error}".splitlines()[0][:200])
    seconds = time.perf_counter() - started
    server = plan.solved_from.parameter_server
    return Outcome(plan.status, plan.cost_usd, server.type, server.shards, seconds)


def _dated(base: Instance, epochs: int, deadline_s: float) -> Instance:
    workload = dataclasses.replace(base.workload, epochs=epochs)
    return dataclasses.replace(base, workload=workload).with_deadline(deadline_s)


def _share(count: int, total: int) -> float | None:
    return count / total if total else None


def _quantiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "mean": None, "max": None, "min": None}
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "max": max(values), "min": min(values)}


def summarise(jobs: Sequence[tuple[str, Outcome, Outcome]]) -> dict[str, Any]:
    """The figures of one setting from its jobs, each (workload, 1-PS outcome, catalogue
    outcome); violations are listed, not raised."""
    total = len(jobs)
    met_single = sum(one.met for _, one, _ in jobs)
    met_catalogue = sum(many.met for _, _, many in jobs)
    rescued = sum(many.met and not one.met for _, one, many in jobs)
    lost = [w for w, one, many in jobs if one.met and not many.met]
    both = [(w, one, many) for w, one, many in jobs if one.met and many.met]
    costlier = [w for w, one, many in both
                if many.cost_usd > one.cost_usd * (1 + COST_RTOL)]  # type: ignore[operator]
    savings = [1 - many.cost_usd / one.cost_usd  # type: ignore[operator]
               for _, one, many in both]
    spent_single = math.fsum(one.cost_usd for _, one, _ in both)  # type: ignore[misc]
    spent_catalogue = math.fsum(many.cost_usd for _, _, many in both)  # type: ignore[misc]
    picks: dict[str, Counter[str]] = {}
    per_workload: dict[str, dict[str, Any]] = {}
    for workload, one, many in jobs:
        counts = per_workload.setdefault(workload, {"jobs": 0, "met_single": 0,
                                                    "met_catalogue": 0})
        counts["jobs"] += 1
        counts["met_single"] += one.met
        counts["met_catalogue"] += many.met
        if many.met:
            picks.setdefault(workload, Counter())[f"{many.ps_type}×{many.shards}"] += 1
    for workload, counts in per_workload.items():
        own = [1 - many.cost_usd / one.cost_usd  # type: ignore[operator]
               for w, one, many in both if w == workload]
        counts["saving_mean"] = statistics.fmean(own) if own else None
    errors = sorted({o.error for _, one, many in jobs for o in (one, many) if o.error})
    return {
        "jobs": total,
        "met_single": met_single, "met_catalogue": met_catalogue,
        "met_single_share": _share(met_single, total),
        "met_catalogue_share": _share(met_catalogue, total),
        "rescued": rescued,
        "lost": len(lost), "costlier": len(costlier),
        "violations": [f"{w}: {n} job(s) met with 1 PS, missed with the catalogue"
                       for w, n in Counter(lost).items()]
        + [f"{w}: {n} job(s) whose catalogue plan costs more than the 1-PS plan"
           for w, n in Counter(costlier).items()],
        "met_both": len(both),
        "saving": _quantiles(savings),
        "saved_usd": spent_single - spent_catalogue,
        "saved_share": _share_of(spent_single - spent_catalogue, spent_single),
        "cheaper": sum(s > COST_RTOL for s in savings),
        # every met job's cost, for comparing variants on the same jobs
        "spent_single_usd": math.fsum(one.cost_usd for _, one, _ in jobs  # type: ignore[misc]
                                      if one.met),
        "spent_catalogue_usd": math.fsum(many.cost_usd  # type: ignore[misc]
                                         for _, _, many in jobs if many.met),
        "per_workload": per_workload,
        "picks": {w: dict(c.most_common()) for w, c in sorted(picks.items())},
        "errors": errors,
    }


def _share_of(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def run(
    jobs: int, seed: int, *, settings: Iterable[tuple[str, float | None]] = SETTINGS,
    deadline_ranges: Iterable[tuple[int, int]] = DEADLINE_RANGES,
    workloads: Sequence[str] = WORKLOADS,
) -> dict[str, Any]:
    """Every setting ((variant, guarantee) × deadline range) on the seeded trace: its figures
    (`summarise`) and the warm solve times of its distinct questions, with each PS."""
    ranges = tuple(deadline_ranges)
    traces = {r: generate_trace(jobs, seed=seed, deadlines=r, workloads=workloads)
              for r in ranges}
    cache: dict[tuple[Any, ...], tuple[Outcome, Outcome]] = {}
    rows_out: list[dict[str, Any]] = []
    started = time.perf_counter()
    built: dict[str, dict[str, tuple[Instance, Instance]]] = {}
    for variant, guarantee in settings:
        if variant not in built:
            built[variant] = {w: instances(w, variant) for w in workloads}
        pairs = built[variant]
        for single, several in pairs.values():  # warm: one untimed solve of each
            _solve(single, guarantee)
            _solve(several, guarantee)
        for low, high in ranges:
            print(f"… {variant}, deadlines U[{low}, {high}] s, guarantee {guarantee}",
                  file=sys.stderr, flush=True)
            rows: list[tuple[str, Outcome, Outcome]] = []
            asked: set[tuple[Any, ...]] = set()
            for job in traces[(low, high)]:
                key = (variant, guarantee, job.instance_name, job.epochs, job.deadline_s)
                if key not in cache:
                    single, several = pairs[job.instance_name]
                    cache[key] = (
                        _solve(_dated(single, job.epochs, job.deadline_s), guarantee),
                        _solve(_dated(several, job.epochs, job.deadline_s), guarantee))
                asked.add(key)
                rows.append((job.instance_name, *cache[key]))
            one_ms = [cache[k][0].seconds * 1e3 for k in asked]
            many_ms = [cache[k][1].seconds * 1e3 for k in asked]
            median_one = statistics.median(one_ms) if one_ms else None
            median_many = statistics.median(many_ms) if many_ms else None
            rows_out.append({
                "variant": variant, "guarantee": guarantee, "deadlines": [low, high],
                **summarise(rows),
                "questions": len(asked),
                "solve_ms_single": median_one, "solve_ms_catalogue": median_many,
                "solve_ms_ratio": (median_many / median_one
                                   if median_one and median_many is not None else None),
                "solve_s_total_single": math.fsum(one_ms) / 1e3,
                "solve_s_total_catalogue": math.fsum(many_ms) / 1e3,
            })
    raw = {w: read_yaml(instances_folder() / f"{w}.yaml")["parameter_server"]
           for w in workloads}
    return {
        "jobs": jobs, "seed": seed, "guarantee_noise": "NoiseModel()",
        "catalogue": CATALOGUE, "single_type": SINGLE_TYPE,
        "single_in_catalogue": {w: single_in_catalogue(ps) for w, ps in raw.items()},
        "settings": rows_out, "solves": 2 * len(cache),
        "seconds": time.perf_counter() - started,
    }


def violations(report: Mapping[str, Any]) -> list[str]:
    """Every broken promise: a catalogue plan dearer than the 1-PS plan of the same job, a
    deadline met with one PS and missed with the catalogue, a single PS that is not the
    catalogue's m5.large (so the promise would not hold)."""
    found = [f"{w}: its single PS is not the catalogue's {SINGLE_TYPE}"
             for w, ok in report["single_in_catalogue"].items() if not ok]
    for row in report["settings"]:
        where = _setting(row)
        found += [f"{where}: {text}" for text in row["violations"]]
        if row["met_catalogue"] < row["met_single"]:
            found.append(f"{where}: fewer deadlines met with the catalogue "
                         f"({row['met_catalogue']} < {row['met_single']})")
    return found


def _setting(row: Mapping[str, Any]) -> str:
    low, high = row["deadlines"]
    guarantee = "—" if row["guarantee"] is None else f"{row['guarantee']:.1%}"
    return f"{row['variant']} U[{low},{high}] {guarantee}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def table(report: Mapping[str, Any]) -> list[str]:
    """The settings as a markdown table, then the picks per workload."""
    lines = [
        "| bandwidth | deadlines s | guarantee | met, 1 PS | met, catalogue | rescued | "
        "saving median / mean / max | total saved | dearer | lost | ms 1 PS | ms catalogue | × |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["settings"]:
        low, high = row["deadlines"]
        guarantee = "none" if row["guarantee"] is None else f"{row['guarantee']:.1%}"
        saving = row["saving"]
        ratio = "—" if row["solve_ms_ratio"] is None else f"{row['solve_ms_ratio']:.1f}×"
        lines.append(
            f"| {row['variant']} | {low}–{high} | {guarantee} "
            f"| {_percent(row['met_single_share'])} | {_percent(row['met_catalogue_share'])} "
            f"| {row['rescued']} | {_percent(saving['median'])} / {_percent(saving['mean'])} / "
            f"{_percent(saving['max'])} | {_percent(row['saved_share'])} "
            f"| {row['costlier']} | {row['lost']} | {_ms(row['solve_ms_single'])} "
            f"| {_ms(row['solve_ms_catalogue'])} | {ratio} |")
    lines += ["", "| bandwidth | deadlines s | guarantee | workload | met 1 PS → catalogue "
              "| mean saving | (type × shards): jobs |", "|---|---|---|---|---:|---:|---|"]
    for row in report["settings"]:
        low, high = row["deadlines"]
        guarantee = "none" if row["guarantee"] is None else f"{row['guarantee']:.1%}"
        for workload, counts in row["per_workload"].items():
            picked = ", ".join(f"{name} {n}" for name, n in row["picks"].get(workload, {}).items())
            lines.append(f"| {row['variant']} | {low}–{high} | {guarantee} | {workload} "
                         f"| {counts['met_single']} → {counts['met_catalogue']} of "
                         f"{counts['jobs']} | {_percent(counts['saving_mean'])} "
                         f"| {picked or '—'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"jobs in the trace (default {JOBS:,}; --quick {QUICK_JOBS})")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a catalogue plan is dearer or a met deadline is lost")
    parser.add_argument("--quick", action="store_true", help=f"a {QUICK_JOBS}-job trace")
    parser.add_argument("--full", action="store_true",
                        help="every bandwidth variant also without a guarantee")
    args = parser.parse_args(argv)
    jobs = args.jobs if args.jobs is not None else QUICK_JOBS if args.quick else JOBS
    if jobs < 1:
        parser.error("--jobs must be at least 1")
    report = run(jobs, args.seed, settings=FULL_SETTINGS if args.full else SETTINGS)
    broken = violations(report)
    report["violations"] = broken
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(table(report)))
        print(f"\n{jobs:,} jobs, seed {args.seed}: {report['solves']:,} solves in "
              f"{report['seconds']:.0f} s")
        errors = sorted({e for row in report["settings"] for e in row["errors"]})
        for error in errors:
            print(f"  ERROR  {error}")
    for text in broken:
        print(f"VIOLATION  {text}", file=sys.stderr)
    return 1 if broken and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
