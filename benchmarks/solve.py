"""Is `solver.solve` fast and exact enough to be called in-process thousands of times?

Run as ``.venv/bin/python -m benchmarks.solve [--calls 50] [--json]`` from the repository root.
For every shipped instance (``instances/*.yaml``) it times, as medians:

* `solver.solve(instance)` — warm calls (one untimed call first, so the once-per-process
  lambdification is not charged to it), because a scheduler calls it in a loop;
* `tests.oracle.brute_force(instance)` — the full-grid enumeration that defines "optimal";
* `simulator.ldnn_alg1.ldnn_alg1(instance)` — λDNN's published heuristic, the baseline;

and checks that `solve` returns the brute-force optimum (same `functions` and `memory_mb`,
cost within 1e-9 relative) and how far Algorithm 1 is from it.  It also times the ``lambdadnn
solve`` command cold, in fresh subprocesses, next to a bare ``python -c pass`` so that the
interpreter's own start-up is visible.  The targets come from DESIGN.md's users: a person at a
terminal (cold CLI ≤ 1.5 s) and a scheduler in-process (≤ 20 ms, ≥ 10× brute force, exact).
It exits non-zero when a target fails, so CI can run it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lambdadnn import solve
from lambdadnn.simulator.ldnn_alg1 import ldnn_alg1
from lambdadnn.solver.errors import LambdaDnnError, NoValidPlanError
from lambdadnn.solver.instance import Instance, load_instance

from tests.oracle import brute_force

ROOT = Path(__file__).resolve().parent.parent
CLI_INSTANCE = "instances/mobilenet-cifar10.yaml"
COST_RTOL = 1e-9
TARGET_SPEEDUP = 10.0
TARGET_SOLVE_MS = 20.0
TARGET_CLI_S = 1.5


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
    """Timings and exactness for one instance; `error` says what could not be measured."""

    instance: str
    solve_ms: float | None
    brute_ms: float | None
    alg1_ms: float
    speedup: float | None  # brute_ms / solve_ms
    optimum: PlanSummary | None
    solve: PlanSummary | None
    solve_candidates: int | None
    solve_exact: bool
    alg1: PlanSummary
    alg1_exact: bool
    alg1_cost_ratio: float | None  # alg1 cost / optimum cost, when both are feasible
    alg1_plans_evaluated: int
    errors: tuple[str, ...]


@dataclass(frozen=True)
class CliReport:
    """Cold start-up of the command line, next to the bare interpreter's."""

    command: tuple[str, ...]
    cli_s: float | None
    python_s: float
    runs: int
    error: str | None


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    passed: bool


def median_ms(call: Callable[[], Any], runs: int, *, warmup: bool) -> tuple[float, Any]:
    """Median wall time of `runs` calls in milliseconds, and the last call's result."""
    result = call() if warmup else None
    samples: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        result = call()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), result


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
    instance: Instance, *, calls: int, brute_calls: int, alg1_calls: int
) -> InstanceReport:
    """Time solve, brute force and Algorithm 1 on one instance and compare their plans."""
    errors: list[str] = []
    solve_ms: float | None = None
    candidates: int | None = None
    try:
        solve_ms, plan = median_ms(lambda: solve(instance), calls, warmup=True)
        solved = summarise(plan)
        candidates = plan.candidates_evaluated
    except NoValidPlanError:  # the documented answer when no plan is valid at all
        solved = PlanSummary("none", None, None, None, None)

    brute_ms, answer = median_ms(lambda: brute_force(instance), brute_calls, warmup=False)
    optimum: PlanSummary | None = summarise(answer)

    alg1_ms, alg1_result = median_ms(lambda: ldnn_alg1(instance), alg1_calls, warmup=True)
    alg1 = PlanSummary(
        status="feasible" if alg1_result.found else "not found",
        functions=alg1_result.functions,
        memory_mb=alg1_result.memory_mb,
        cost_usd=alg1_result.cost_usd,
        time_s=alg1_result.time_s,
    )

    feasible_optimum = optimum is not None and optimum.status == "optimal"
    alg1_exact = (
        optimum is not None
        and feasible_optimum
        and alg1_result.found
        and same_choice(alg1, optimum)
    )
    ratio: float | None = None
    if feasible_optimum and optimum is not None and optimum.cost_usd and alg1.cost_usd:
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
        solve_exact=solved is not None and optimum is not None and same_plan(solved, optimum),
        alg1=alg1,
        alg1_exact=alg1_exact,
        alg1_cost_ratio=ratio,
        alg1_plans_evaluated=alg1_result.plans_evaluated,
        errors=tuple(errors),
    )


def cli_command() -> tuple[str, ...]:
    """The installed console script if there is one, else `python cli.py` from the repo."""
    for folder in (Path(sys.executable).parent, ROOT / ".venv" / "bin"):
        script = folder / "lambdadnn"
        if script.is_file():
            return (str(script),)
    return (sys.executable, str(ROOT / "cli.py"))


def time_process(command: Sequence[str], runs: int) -> tuple[float, str | None]:
    """Median wall time in seconds of `runs` fresh processes, and the first failure if any."""
    samples: list[float] = []
    error: str | None = None
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        samples.append(time.perf_counter() - start)
        if done.returncode != 0 and error is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            error = f"exit status {done.returncode}: {tail[0]}"
    return statistics.median(samples), error


def bench_cli(runs: int) -> CliReport:
    """`lambdadnn solve` cold, and `python -c pass` timed the same way as its floor."""
    command = (*cli_command(), "solve", CLI_INSTANCE)
    python_s, _ = time_process((sys.executable, "-c", "pass"), runs)
    cli_s, error = time_process(command, runs)
    return CliReport(command, None if error else cli_s, python_s, runs, error)


def targets(reports: Sequence[InstanceReport], cli: CliReport) -> list[Target]:
    """The four promises of DESIGN.md's users, each measured and judged."""
    speedups = [r.speedup for r in reports]
    solve_times = [r.solve_ms for r in reports]
    worst_speedup = min((s for s in speedups if s is not None), default=None)
    worst_solve = max((t for t in solve_times if t is not None), default=None)
    exact = [r.instance for r in reports if r.solve_exact]
    return [
        Target(
            "speed-up",
            f"solve ≥ {TARGET_SPEEDUP:g}× faster than brute force on every instance",
            "n/a" if worst_speedup is None else f"worst {worst_speedup:.1f}×",
            None not in speedups and worst_speedup is not None and worst_speedup >= TARGET_SPEEDUP,
        ),
        Target(
            "latency",
            f"solve median ≤ {TARGET_SOLVE_MS:g} ms on every instance",
            "n/a" if worst_solve is None else f"worst {worst_solve:.2f} ms",
            None not in solve_times and worst_solve is not None and worst_solve <= TARGET_SOLVE_MS,
        ),
        Target(
            "exact",
            "solve returns the brute-force optimum on every instance",
            f"{len(exact)}/{len(reports)} exact",
            len(exact) == len(reports),
        ),
        Target(
            "cold CLI",
            f"`lambdadnn solve {CLI_INSTANCE}` cold ≤ {TARGET_CLI_S:g} s",
            f"failed: {cli.error}"
            if cli.cli_s is None
            else f"{cli.cli_s:.3f} s (python -c pass {cli.python_s:.3f} s)",
            cli.cli_s is not None and cli.cli_s <= TARGET_CLI_S,
        ),
    ]


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _plan(plan: PlanSummary | None) -> str:
    if plan is None:
        return "—"
    if plan.functions is None:
        return plan.status
    return f"{plan.functions}×{plan.memory_mb} MB ${_fmt(plan.cost_usd, '.6f')} ({plan.status})"


def render_text(reports: Sequence[InstanceReport], cli: CliReport, judged: Sequence[Target]) -> str:
    """The human-readable report: a timing table, a plan table, the CLI and the targets."""
    header = (
        f"{'instance':<20} {'solve ms':>9} {'brute ms':>10} {'alg1 ms':>8} {'brute/solve':>12} "
        f"{'solve exact':>12} {'alg1 exact':>11} {'alg1 cost/opt':>14}"
    )
    lines = [header]
    for r in reports:
        lines.append(
            f"{r.instance:<20} {_fmt(r.solve_ms, '9.3f')} {_fmt(r.brute_ms, '10.1f')} "
            f"{r.alg1_ms:8.2f} {_fmt(r.speedup, '11.1f') + '×':>12} "
            f"{'yes' if r.solve_exact else 'NO':>12} {'yes' if r.alg1_exact else 'no':>11} "
            f"{_fmt(r.alg1_cost_ratio, '14.4f'):>14}"
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
    lines.append(
        f"cold CLI ({' '.join(cli.command)}), median of {cli.runs} runs: "
        + (f"{cli.cli_s:.3f} s" if cli.cli_s is not None else f"FAILED ({cli.error})")
    )
    lines.append(f"python -c pass, median of {cli.runs} runs: {cli.python_s:.3f} s")
    lines.append("")
    lines.append("targets:")
    for t in judged:
        lines.append(f"  {'PASS' if t.passed else 'FAIL'}  {t.goal}: {t.measured}")
    return "\n".join(line.rstrip() for line in lines)


def render_json(reports: Sequence[InstanceReport], cli: CliReport, judged: Sequence[Target]) -> str:
    payload = {
        "instances": [asdict(r) for r in reports],
        "cli": asdict(cli),
        "targets": [asdict(t) for t in judged],
        "passed": all(t.passed for t in judged),
    }
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.solve", description=__doc__)
    parser.add_argument("--calls", type=_positive, default=50, help="warm solve() calls")
    parser.add_argument("--brute-calls", type=_positive, default=3, help="brute-force calls")
    parser.add_argument("--alg1-calls", type=_positive, default=10, help="Algorithm 1 calls")
    parser.add_argument("--cli-runs", type=_positive, default=5, help="cold CLI processes")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
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
            calls=args.calls,
            brute_calls=args.brute_calls,
            alg1_calls=args.alg1_calls,
        )
        for instance in instances
    ]
    cli = bench_cli(args.cli_runs)
    judged = targets(reports, cli)
    print(render_json(reports, cli, judged) if args.json else render_text(reports, cli, judged))
    return 0 if all(t.passed for t in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
