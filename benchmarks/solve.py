"""Is `solve` fast and exact enough to be called in-process thousands of times, and quick
from the command line?

Run as ``.venv/bin/python -m benchmarks.solve [--calls 200] [--json] [--check]`` from the
repository root. For every shipped instance (``instances/*.yaml``), loaded once as a scheduler
does, it times, as medians:

* `solve(instance)` — warm calls (one untimed call first, so loading the compiled model is
  not charged to it), exact over the full 1 MB grid;
* `tests.oracle.brute_force(path)` — the full-grid enumeration that defines "optimal", from
  the oracle's own reading of the YAML;
* `simulator.ldnn_alg1.ldnn_alg1(instance)` — λDNN's published heuristic, the baseline;

and checks that `solve` returns the brute-force optimum (same `functions` and `memory_mb`,
cost within 1e-9 relative) and how far Algorithm 1 is from it. In fresh processes it times
``lambdadnn --help`` and a cold ``lambdadnn solve``, the latter both with an empty model
cache (the first run after installing or changing the model: SymPy derives and proves it)
and with a warm one (every later run), next to a bare ``python -c pass``.

Targets (issue 7): warm solve ≤ 2 ms median on every instance, ≥ 10× faster than brute
force, exact; ``--help`` ≤ 0.25 s; a cold solve ≤ 0.6 s with the cache warm (the empty-cache
figure is shown against the same 0.6 s, for information). Each figure is measured on its
own: one that fails prints FAIL with the reason and the rest still run. The exit status is 0
unless ``--check`` is given, then 1 when a required target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lambdadnn import solve
from lambdadnn.simulator.ldnn_alg1 import ldnn_alg1
from lambdadnn.solver.errors import LambdaDnnError, NoValidPlanError
from lambdadnn.solver.instance import Instance
from lambdadnn.solver.instance_yaml import load_instance
from tests.oracle import brute_force

ROOT = Path(__file__).resolve().parent.parent
CLI_INSTANCE = "instances/mobilenet-cifar10.yaml"
COST_RTOL = 1e-9
TARGET_SPEEDUP = 10.0
TARGET_SOLVE_MS = 2.0
TARGET_HELP_S = 0.25
TARGET_COLD_S = 0.6


@dataclass(frozen=True)
class PlanSummary:
    """The few fields of a plan the comparison needs, whoever produced it."""

    status: str
    functions: int | None
    memory_mb: int | None
    cost_usd: float | None
    time_s: float | None


@dataclass(frozen=True)
class InstanceReport:
    """Timings and exactness for one instance; `errors` says what could not be measured."""

    instance: str
    solve_ms: float | None
    brute_ms: float | None
    alg1_ms: float | None
    speedup: float | None  # brute_ms / solve_ms
    optimum: PlanSummary | None
    solve: PlanSummary | None
    solve_candidates: int | None
    selected_by: str | None
    solve_exact: bool
    alg1: PlanSummary | None
    alg1_exact: bool
    alg1_cost_ratio: float | None  # alg1 cost / optimum cost, when both are feasible
    alg1_plans_evaluated: int | None
    errors: tuple[str, ...]


@dataclass(frozen=True)
class ProcessReport:
    """Median wall time of a command in fresh processes, or why it could not be measured."""

    name: str
    command: tuple[str, ...]
    seconds: float | None
    runs: int
    error: str | None


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool
    required: bool = True


def median_ms(call: Callable[[], Any], runs: int, *, warmup: bool) -> tuple[float, Any]:
    """Median wall time of `runs` calls in milliseconds, and the last call's result."""
    result = call() if warmup else None
    samples: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        result = call()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), result


def _failure(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]


def summarise(plan: Any) -> PlanSummary:
    """A `Plan`, an oracle result or anything with the same attributes, reduced for comparing."""

    def number(name: str) -> float | None:
        value = getattr(plan, name, None)
        return None if value is None else float(value)

    def integer(name: str) -> int | None:
        value = getattr(plan, name, None)
        return None if value is None else int(value)

    return PlanSummary(
        status=str(getattr(plan, "status", "?")),
        functions=integer("functions"),
        memory_mb=integer("memory_mb"),
        cost_usd=number("cost_usd"),
        time_s=number("time_s"),
    )


def same_choice(a: PlanSummary, b: PlanSummary) -> bool:
    """Same (n, m), and costs equal to 1e-9 relative: the same plan, whatever its label."""
    if (a.functions, a.memory_mb) != (b.functions, b.memory_mb):
        return False
    if a.cost_usd is None or b.cost_usd is None:
        return False
    return abs(a.cost_usd - b.cost_usd) <= COST_RTOL * max(abs(a.cost_usd), abs(b.cost_usd))


def same_plan(a: PlanSummary, b: PlanSummary) -> bool:
    """`same_choice` and the same status (an infeasible answer is not an optimal one).

    When no plan is valid at all both sides say so with status 'none' and no plan.
    """
    if a.status == b.status == "none":
        return a.functions is None and b.functions is None
    return a.status == b.status and same_choice(a, b)


def bench_instance(
    instance: Instance, path: Path, *, calls: int, brute_calls: int, alg1_calls: int
) -> InstanceReport:
    """Time solve, brute force and Algorithm 1 on one instance and compare their plans; a
    failure of one is recorded and the others still run. The brute force reads `path` itself
    (the oracle shares no code with the package, not even the loader)."""
    errors: list[str] = []
    solve_ms: float | None = None
    solved: PlanSummary | None = None
    candidates: int | None = None
    selected_by: str | None = None
    try:
        solve_ms, plan = median_ms(lambda: solve(instance), calls, warmup=True)
        solved = summarise(plan)
        candidates, selected_by = plan.candidates_evaluated, plan.selected_by
    except NoValidPlanError:  # the documented answer when no plan is valid at all
        solved = PlanSummary("none", None, None, None, None)
    except Exception as error:
        errors.append(f"solve: {_failure(error)}")

    brute_ms: float | None = None
    optimum: PlanSummary | None = None
    try:
        brute_ms, answer = median_ms(lambda: brute_force(path), brute_calls, warmup=False)
        optimum = summarise(answer)
    except Exception as error:
        errors.append(f"brute force: {_failure(error)}")

    alg1_ms: float | None = None
    alg1: PlanSummary | None = None
    alg1_evaluated: int | None = None
    try:
        alg1_ms, alg1_result = median_ms(lambda: ldnn_alg1(instance), alg1_calls, warmup=True)
        alg1 = PlanSummary(
            status="feasible" if alg1_result.found else "not found",
            functions=alg1_result.functions,
            memory_mb=alg1_result.memory_mb,
            cost_usd=alg1_result.cost_usd,
            time_s=alg1_result.time_s,
        )
        alg1_evaluated = alg1_result.plans_evaluated
    except Exception as error:
        errors.append(f"Algorithm 1: {_failure(error)}")

    feasible_optimum = optimum is not None and optimum.status == "optimal"
    alg1_found = alg1 is not None and alg1.status == "feasible"
    alg1_exact = bool(
        optimum is not None and alg1 is not None and feasible_optimum and alg1_found
        and same_choice(alg1, optimum)
    )
    ratio: float | None = None
    if feasible_optimum and optimum is not None and optimum.cost_usd and alg1 and alg1.cost_usd:
        ratio = alg1.cost_usd / optimum.cost_usd
    return InstanceReport(
        instance=instance.name,
        solve_ms=solve_ms,
        brute_ms=brute_ms,
        alg1_ms=alg1_ms,
        speedup=None if solve_ms is None or brute_ms is None else brute_ms / solve_ms,
        optimum=optimum,
        solve=solved,
        solve_candidates=candidates,
        selected_by=selected_by,
        solve_exact=solved is not None and optimum is not None and same_plan(solved, optimum),
        alg1=alg1,
        alg1_exact=alg1_exact,
        alg1_cost_ratio=ratio,
        alg1_plans_evaluated=alg1_evaluated,
        errors=tuple(errors),
    )


def cli_command() -> tuple[str, ...]:
    """The installed console script if there is one, else `python -m lambdadnn.cli`."""
    for folder in (Path(sys.executable).parent, ROOT / ".venv" / "bin"):
        script = folder / "lambdadnn"
        if script.is_file():
            return (str(script),)
    return (sys.executable, "-m", "lambdadnn.cli")


def time_process(
    command: Sequence[str], runs: int, *, cache_home: Callable[[], str] | None = None
) -> float:
    """Median wall time in seconds of `runs` fresh processes; raises on the first failure.

    `cache_home` gives each run its XDG_CACHE_HOME (the model cache's home), so a benchmark
    never reads or writes the user's own cache.
    """
    samples: list[float] = []
    for _ in range(runs):
        env = dict(os.environ)
        if cache_home is not None:
            env["XDG_CACHE_HOME"] = cache_home()
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False, timeout=300)
        samples.append(time.perf_counter() - start)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}: {tail[0]}")
    return statistics.median(samples)


def bench_processes(runs: int) -> list[ProcessReport]:
    """`python -c pass` (the floor), `lambdadnn --help`, and `lambdadnn solve` cold with an
    empty and with a warm model cache; each measured on its own."""
    cli = cli_command()
    solve_command = (*cli, "solve", CLI_INSTANCE)
    reports = []
    with tempfile.TemporaryDirectory(prefix="lambdadnn-bench-") as scratch:
        warm = str(Path(scratch) / "warm")
        counter = iter(range(1_000_000))

        def empty() -> str:
            return str(Path(scratch) / f"empty-{next(counter)}")

        def primed() -> str:
            return warm

        cases: list[tuple[str, tuple[str, ...], Callable[[], str] | None]] = [
            ("python -c pass", (sys.executable, "-c", "pass"), None),
            ("lambdadnn --help", (*cli, "--help"), None),
            ("cold solve, empty cache", solve_command, empty),
            ("cold solve, warm cache", solve_command, primed),
        ]
        for name, command, cache_home in cases:
            try:
                if cache_home is primed:  # fill the cache once, untimed
                    time_process(command, 1, cache_home=primed)
                seconds = time_process(command, runs, cache_home=cache_home)
                reports.append(ProcessReport(name, command, seconds, runs, None))
            except Exception as error:
                reports.append(ProcessReport(name, command, None, runs, _failure(error)))
    return reports


def targets(reports: Sequence[InstanceReport], processes: Sequence[ProcessReport]) -> list[Target]:
    """The promises of issue 7 and MODEL.md's users, each measured and judged."""
    judged = []
    for r in reports:
        judged.append(Target(
            f"warm {r.instance}",
            f"warm solve median ≤ {TARGET_SOLVE_MS:g} ms: {r.instance}",
            f"{r.solve_ms:.3f} ms" if r.solve_ms is not None
            else "failed: " + ("; ".join(r.errors) or "no figure"),
            r.solve_ms is not None and r.solve_ms <= TARGET_SOLVE_MS,
        ))
    speedups = [r.speedup for r in reports]
    worst_speedup = min((s for s in speedups if s is not None), default=None)
    exact = [r.instance for r in reports if r.solve_exact]
    judged.append(Target(
        "speed-up",
        f"solve ≥ {TARGET_SPEEDUP:g}× faster than brute force on every instance",
        "n/a" if worst_speedup is None else f"worst {worst_speedup:.1f}×",
        None not in speedups and worst_speedup is not None and worst_speedup >= TARGET_SPEEDUP,
    ))
    judged.append(Target(
        "exact", "solve returns the brute-force optimum on every instance",
        f"{len(exact)}/{len(reports)} exact", len(exact) == len(reports),
    ))
    floor = next((p.seconds for p in processes if p.name == "python -c pass"), None)
    limits = {"lambdadnn --help": (TARGET_HELP_S, True),
              "cold solve, warm cache": (TARGET_COLD_S, True),
              "cold solve, empty cache": (TARGET_COLD_S, False)}
    for p in processes:
        if p.name not in limits:
            continue
        limit, required = limits[p.name]
        measured = (
            f"failed: {p.error}" if p.seconds is None
            else f"{p.seconds:.3f} s" + (f" (python -c pass {floor:.3f} s)" if floor else "")
        )
        note = "" if required else " (for information: the first run after installing)"
        judged.append(Target(
            p.name, f"{p.name} ≤ {limit:g} s{note}", measured,
            p.seconds is not None and p.seconds <= limit, required,
        ))
    return judged


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _plan(plan: PlanSummary | None) -> str:
    if plan is None:
        return "—"
    if plan.functions is None:
        return plan.status
    return f"{plan.functions}×{plan.memory_mb} MB ${_fmt(plan.cost_usd, '.6f')} ({plan.status})"


def render_text(
    reports: Sequence[InstanceReport], processes: Sequence[ProcessReport],
    judged: Sequence[Target],
) -> str:
    """The human-readable report: a timing table, a plan table, the processes, the targets."""
    header = (
        f"{'instance':<20} {'solve ms':>9} {'brute ms':>10} {'alg1 ms':>8} {'brute/solve':>12} "
        f"{'solve exact':>12} {'chosen by':>12} {'alg1 exact':>11} {'alg1 cost/opt':>14}"
    )
    lines = [header]
    for r in reports:
        lines.append(
            f"{r.instance:<20} {_fmt(r.solve_ms, '9.3f')} {_fmt(r.brute_ms, '10.1f')} "
            f"{_fmt(r.alg1_ms, '8.2f')} {_fmt(r.speedup, '11.1f') + '×':>12} "
            f"{'yes' if r.solve_exact else 'NO':>12} {r.selected_by or '—':>12} "
            f"{'yes' if r.alg1_exact else 'no':>11} {_fmt(r.alg1_cost_ratio, '14.4f'):>14}"
        )
    lines.append("")
    lines.append(f"{'instance':<20} {'optimum (brute force)':<36} {'solve':<36} {'alg1':<36}")
    for r in reports:
        lines.append(
            f"{r.instance:<20} {_plan(r.optimum):<36} {_plan(r.solve):<36} {_plan(r.alg1):<36}"
        )
    for r in reports:
        for error in r.errors:
            lines.append(f"! {r.instance}: {error}")
    lines.append("")
    for p in processes:
        figure = f"{p.seconds:.3f} s" if p.seconds is not None else f"FAILED ({p.error})"
        lines.append(f"{p.name + ',':<25} median of {p.runs} fresh processes: {figure}")
    lines.append(f"  (cold solve: `{' '.join(cli_command())} solve {CLI_INSTANCE}`; the model "
                 "cache in a scratch XDG_CACHE_HOME)")
    lines.append("")
    lines.append("targets:")
    for t in judged:
        verdict = "PASS" if t.passed else ("FAIL" if t.required else "over")
        lines.append(f"  {verdict}  {t.goal}: {t.measured}")
    return "\n".join(line.rstrip() for line in lines)


def render_json(
    reports: Sequence[InstanceReport], processes: Sequence[ProcessReport],
    judged: Sequence[Target],
) -> str:
    payload = {
        "instances": [asdict(r) for r in reports],
        "processes": [asdict(p) for p in processes],
        "targets": [asdict(t) for t in judged],
        "passed": all(t.passed for t in judged if t.required),
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def bench_rotation(instances: Sequence[Instance], calls: int) -> tuple[float | None, str | None]:
    """Median ms of a warm `solve` when each call takes the next instance in turn, as a
    scheduler serving many jobs does: no call finds the previous call's instance in any cache
    (the per-instance figure above repeats one instance). `(None, reason)` if it fails."""
    solvable = []
    for instance in instances:
        try:
            solve(instance)  # warm-up; instances with no valid plan at all are left out
        except NoValidPlanError:
            continue
        except Exception as error:
            return None, _failure(error)
        solvable.append(instance)
    if len(solvable) < 2:
        return None, "fewer than two solvable instances to rotate over"
    turn = iter(range(calls * len(solvable)))
    try:
        ms, _ = median_ms(lambda: solve(solvable[next(turn) % len(solvable)]), calls,
                          warmup=False)
    except Exception as error:
        return None, _failure(error)
    return ms, None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.solve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=_positive, default=200, help="warm solve() calls")
    parser.add_argument("--brute-calls", type=_positive, default=3, help="brute-force calls")
    parser.add_argument("--alg1-calls", type=_positive, default=10, help="Algorithm 1 calls")
    parser.add_argument("--cli-runs", type=_positive, default=5, help="fresh processes each")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a required target fails (default: always exit 0)")
    parser.add_argument(
        "instances", nargs="*", type=Path, help="instance files (default: instances/*.yaml)"
    )
    args = parser.parse_args(argv)
    paths = args.instances or sorted((ROOT / "instances").glob("*.yaml"))
    try:
        instances = [load_instance(path) for path in paths]
    except LambdaDnnError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    reports = [
        bench_instance(
            instance,
            path,
            calls=args.calls,
            brute_calls=args.brute_calls,
            alg1_calls=args.alg1_calls,
        )
        for instance, path in zip(instances, paths, strict=True)
    ]
    rotation_ms, rotation_error = bench_rotation(instances, args.calls)
    processes = bench_processes(args.cli_runs)
    judged = targets(reports, processes)
    judged.insert(len(reports), Target(
        "warm rotation", f"warm solve median ≤ {TARGET_SOLVE_MS:g} ms, rotating over the instances",
        f"failed: {rotation_error}" if rotation_ms is None else f"{rotation_ms:.3f} ms",
        rotation_ms is not None and rotation_ms <= TARGET_SOLVE_MS,
    ))
    print(render_json(reports, processes, judged) if args.json
          else render_text(reports, processes, judged))
    failed = not all(t.passed for t in judged if t.required)
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
