"""`lambdadnn`: a thin click shell over the library (solve, evaluate, validate, bounds, frontier).

Exit codes: 0 success, 1 bad input (one line on stderr, never a traceback), 2 usage (click),
3 no plan meets the deadline (or none is valid at all).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from solver import (
    Evaluation,
    InstanceError,
    LambdaDnnError,
    NoValidPlanError,
    Plan,
    evaluate,
    load_instance,
    solve,
)
from solver.frontier import deadline_range, frontier, plot

EXIT_INFEASIBLE = 3
F = TypeVar("F", bound=Callable[..., Any])

instance_argument = click.argument("instance", type=click.Path(dir_okay=False, path_type=Path))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
platform_option = click.option(
    "--platform", metavar="NAME", help="Use this platform (a file in instances/platforms/)."
)


def friendly(command: F) -> F:
    """Turn every deliberate error into one line on stderr and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except NoValidPlanError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(EXIT_INFEASIBLE)
        except LambdaDnnError as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _emit_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def _money(value: float) -> str:
    return f"${value:,.6f}"


def _seconds(value: float) -> str:
    return f"{value:,.1f} s"


def _restarts(count: int) -> str:
    return f"{count} restart{'' if count == 1 else 's'}"


def _breakdown_lines(result: Plan | Evaluation) -> list[str]:
    tb, cb = result.time_breakdown, result.cost_breakdown
    total_t, total_c = result.time_s or 1.0, result.cost_usd or 1.0
    lines = ["  time breakdown                    seconds    share"]
    for label, value in (
        ("load training data", tb.load_s), ("compute", tb.compute_s),
        ("communication (push + pull)", tb.communication_s),
        ("restart overhead", tb.restart_overhead_s), ("cold starts", tb.cold_start_s),
    ):
        lines.append(f"    {label:<28}{value:>12,.1f}  {value / total_t:>6.1%}")
    lines.append("  cost breakdown                        USD    share")
    for label, value in (
        ("functions (GB-seconds)", cb.functions_usd),
        ("parameter server", cb.parameter_server_usd), ("requests", cb.requests_usd),
    ):
        lines.append(f"    {label:<28}{value:>12,.6f}  {value / total_c:>6.1%}")
    return lines


def _plan_text(plan: Plan) -> str:
    restarts = _restarts(plan.restarts)
    margin = plan.margin_s
    b = plan.bounds
    quantile = (
        "" if plan.guarantee is None
        else f"; {plan.guarantee:g} of runs within {_seconds(plan.deadline_time_s)}"
    )
    lines = [
        f"{plan.instance} on {plan.platform}: {plan.status}",
        f"  plan       {plan.functions} functions × {plan.memory_mb:,} MB",
        f"  time       {_seconds(plan.time_s)}{' expected' if quantile else ''}  (deadline "
        f"{_seconds(plan.deadline_s)}{quantile}, "
        f"{'margin' if margin >= 0 else 'late by'} {_seconds(abs(margin))})",
        f"  cost       {_money(plan.cost_usd)}",
        f"  training   local batch {plan.local_batch:g}, global batch {plan.global_batch:g}, "
        f"{plan.iterations:,.1f} iterations, {restarts}, {plan.invocations} invocations",
        *_breakdown_lines(plan),
        f"  search     n ∈ [{b.n_min}, {b.n_max}], m ∈ [{b.m_min:,}, {b.m_max:,}] MB keeps "
        f"{b.share_kept:.2%} of the {b.grid_points:,}-plan grid; {plan.candidates_evaluated:,} "
        f"plans evaluated ({b.share_evaluated:.3%}), {plan.pareto_candidates} to HiGHS "
        f"({plan.solver_status}), {plan.solve_seconds * 1000:.1f} ms",
    ]
    return "\n".join(lines)


def _infeasible_message(plan: Plan) -> str:
    late = plan.deadline_time_s - plan.deadline_s
    return (
        f"no plan meets the deadline of {_seconds(plan.deadline_s)}: the fastest plan, "
        f"{plan.functions} × {plan.memory_mb} MB, takes {_seconds(plan.deadline_time_s)}; move "
        f"the deadline out by at least {_seconds(late)} "
        f"(objective.deadline_s ≥ {plan.deadline_time_s:.1f})"
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lambdadnn")
def main() -> None:
    """lambdadnn: the cheapest serverless plan that trains a DNN before its deadline."""


@main.command("solve")
@instance_argument
@json_option
@platform_option
@click.option("--deadline", type=float, metavar="S", help="Override objective.deadline_s.")
@click.option("--guarantee", type=float, metavar="P",
              help="Meet the deadline in at least this share of runs (e.g. 0.999) under the "
                   "default noise model, instead of in the model's mean.")
@friendly
def solve_command(
    instance: Path, as_json: bool, platform: str | None, deadline: float | None,
    guarantee: float | None,
) -> None:
    """Find the cheapest plan (functions × memory) that meets the deadline."""
    plan = solve(instance, platform=platform, deadline_s=deadline, guarantee=guarantee)
    if as_json:
        _emit_json(plan.to_dict())
    else:
        click.echo(_plan_text(plan))
    if plan.status == "infeasible":
        click.echo(f"error: {_infeasible_message(plan)}", err=True)
        sys.exit(EXIT_INFEASIBLE)


@main.command("evaluate")
@instance_argument
@click.option("--functions", "-n", type=int, required=True, help="Number of functions.")
@click.option("--memory", "-m", type=int, required=True, help="Memory per function, MB.")
@json_option
@platform_option
@friendly
def evaluate_command(
    instance: Path, functions: int, memory: int, as_json: bool, platform: str | None
) -> None:
    """The model's time and cost for any plan, and why it is not feasible if it is not."""
    result = evaluate(load_instance(instance, platform=platform), functions=functions,
                      memory_mb=memory)
    if as_json:
        _emit_json(result.to_dict())
        return
    verdict = "feasible" if result.feasible else ("valid, not feasible" if result.valid
                                                  else "not valid")
    lines = [
        f"{result.instance}: {result.functions} functions × {result.memory_mb:,} MB — {verdict}",
        f"  time       {_seconds(result.time_s)}  (deadline {_seconds(result.deadline_s)})",
        f"  cost       {_money(result.cost_usd)}",
        f"  training   local batch {result.local_batch:g}, global batch {result.global_batch:g}, "
        f"{result.iterations:,.1f} iterations, {_restarts(result.restarts)}",
        *_breakdown_lines(result),
        *(f"  ! {violation}" for violation in result.violations),
    ]
    click.echo("\n".join(lines))


@main.command("validate")
@instance_argument
@platform_option
@friendly
def validate_command(instance: Path, platform: str | None) -> None:
    """Check an instance file; print a one-line summary or the first problem."""
    loaded = load_instance(instance, platform=platform)
    grid = loaded.platform.memory
    click.echo(
        f"ok: {loaded.name} — platform {loaded.platform.name} ({grid.min_mb}..{grid.max_mb} MB "
        f"in {grid.step_mb} MB steps), up to {loaded.max_functions} functions, deadline "
        f"{_seconds(loaded.objective.deadline_s)}"
    )


@main.command("bounds")
@instance_argument
@json_option
@platform_option
@friendly
def bounds_command(instance: Path, as_json: bool, platform: str | None) -> None:
    """The derived bounds on n and m, the share of the grid they keep, and how each was derived."""
    plan = solve(instance, platform=platform)
    b = plan.bounds
    if as_json:
        _emit_json(b.to_dict())
        return
    lines = [
        f"{plan.instance} on {plan.platform}",
        f"  functions  n ∈ [{b.n_min}, {b.n_max}]",
        f"  memory     m ∈ [{b.m_min:,}, {b.m_max:,}] MB",
        f"  kept       {b.box_points:,} of {b.grid_points:,} plans ({b.share_kept:.2%}); after "
        f"pruning by cost, {b.evaluated_points:,} evaluated ({b.share_evaluated:.3%})",
        "  derivation",
        *(f"    - {line}" for line in b.derivations),
    ]
    click.echo("\n".join(lines))


@main.command("frontier")
@instance_argument
@click.option("--from", "start", type=float, metavar="S", help="First deadline, s.")
@click.option("--to", "stop", type=float, metavar="S", help="Last deadline, s.")
@click.option("--points", type=click.IntRange(2, 200), default=12, show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the frontier to this PNG.")
@json_option
@platform_option
@friendly
def frontier_command(
    instance: Path, start: float | None, stop: float | None, points: int,
    plot_path: Path | None, as_json: bool, platform: str | None,
) -> None:
    """The cheapest plan for each deadline over a range (default: fastest time to 4× it)."""
    loaded = load_instance(instance, platform=platform)
    if start is None or stop is None:
        fastest, latest = deadline_range(loaded)
        start = fastest if start is None else start
        stop = latest if stop is None else stop
    if not 0 < start < stop:
        raise InstanceError(f"`--from` ({start:g}) must be positive and below `--to` ({stop:g})")
    deadlines = [start + (stop - start) * i / (points - 1) for i in range(points)]
    plans = frontier(loaded, deadlines)
    if plot_path is not None:
        plot(plans, plot_path)
    if as_json:
        _emit_json({"instance": loaded.name, "plans": [p.to_dict() for p in plans]})
        return
    lines = [f"{loaded.name}: cheapest plan per deadline",
             f"  {'deadline s':>12} {'status':>11} {'n':>5} {'memory MB':>10} {'time s':>10} "
             f"{'cost USD':>11}"]
    for p in plans:
        lines.append(
            f"  {p.deadline_s:>12,.1f} {p.status:>11} {p.functions:>5} {p.memory_mb:>10,} "
            f"{p.time_s:>10,.1f} {p.cost_usd:>11.6f}"
        )
    if plot_path is not None:
        lines.append(f"  plot written to {plot_path}")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
