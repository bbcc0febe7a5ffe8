"""`lambdadnn`: a thin click shell over the library (solve, evaluate, validate, bounds, frontier,
solve-many, the simulator's commands, launch, deploy, image, profile).

Exit codes (the same for every command; README.md, "Exit codes", has the table): 0 success,
1 bad input (one line on stderr, never a traceback), 2 usage (click), 3 no plan meets the
deadline, or none is valid at all, or a job of `solve-many` misses, 128 + N stopped by signal
N (`launch`, `profile`, `sweep`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .inputs.files import MAX_TRACE_JOBS
from .models.errors import LambdaDnnError
from .simulator.defaults import (
    ARRIVALS,
    DEFAULT_GUARANTEE,
    DEFAULT_POOL_SIZE,
    HINDSIGHT_NAME,
    MIXES,
    MODEL_STRATEGY_NAMES,
    STRATEGY_NAMES,
    WORLD_STRATEGY_NAMES,
)
from .solver.errors import InstanceError, NoValidPlanError

# The library is imported inside each command, so `lambdadnn --help` loads neither numpy, SymPy,
# Pyomo nor matplotlib; these names are for annotations only.
if TYPE_CHECKING:
    from .simulator.compare import StrategyReport
    from .simulator.truth import Truth
    from .simulator.world import World
    from .solver.plan import Evaluation, Plan
    from .solver.schedule import Schedule

EXIT_INFEASIBLE = 3
F = TypeVar("F", bound=Callable[..., Any])

instance_argument = click.argument("instance", type=click.Path(dir_okay=False, path_type=Path))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
platform_option = click.option(
    "--platform", metavar="NAME|FILE",
    help="Use this platform: a shipped one (aws-lambda-x86_64, aws-lambda-arm64, "
         "aws-lambda-2020) or a platform YAML's path.",
)
QUIET = "lambdadnn.quiet"  # the key in click's context meta that `lambdadnn -q` sets


class FiniteRange(click.FloatRange):
    """A real number in a range, and finite: click's `FloatRange` lets NaN through, since
    every comparison with it is false (`--budget-s nan` ran a profile)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class AliasedOption(click.Option):
    """An option whose first spelling is the documented one: the others are old names, still
    accepted and hidden from `--help` (`--deadline` for `--deadline-s`)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        spellings, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = spellings


class _EchoHandler(logging.Handler):
    """The library's log records as `level: message` lines on click's stderr (the one the
    command writes to, a test runner's included)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(f"{record.levelname.lower()}: {self.format(record)}", err=True)
        except Exception:  # logging's contract: a handler never raises into the caller
            self.handleError(record)


_LOG_HANDLER = _EchoHandler()


def quiet() -> bool:
    """Whether `lambdadnn -q` asked for errors only, so that no progress bar is drawn."""
    context = click.get_current_context(silent=True)
    return context is not None and bool(context.meta.get(QUIET))


def friendly(command: F) -> F:
    """Turn every deliberate error into one line on stderr and an exit code, never a traceback.

    Output that cannot be written (a full disk) is one line and exit 1 too; a reader that went
    away (`| head -1`) is left to click, which exits quietly with 1.
    """

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
        except OSError as error:
            if isinstance(error, BrokenPipeError) or not _writing_output(error):
                raise
            click.echo(f"error: cannot write the output ({error.strerror or error}); free some "
                       "space or redirect it elsewhere", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _writing_output(error: OSError) -> bool:
    """Whether `error` was raised by `click.echo`: every command writes its output through it."""
    import traceback

    return any(frame.f_code is click.echo.__code__
               for frame, _ in traceback.walk_tb(error.__traceback__))


def _strict_json(value: Any) -> Any:
    """`value` with every NaN or ±inf float replaced by None: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(item) for item in value]
    return value


def _emit_json(payload: Any) -> None:
    """Strict JSON (RFC 8259): a figure that is not finite (the time of a plan whose rate is
    0) is printed as null, never as NaN or Infinity, which JSON parsers reject."""
    text = json.dumps(_strict_json(payload), indent=2, ensure_ascii=False, allow_nan=False)
    click.echo(text)


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
    parts = [
        ("load training data", tb.load_s), ("compute", tb.compute_s),
        ("communication (push + pull)", tb.communication_s),
        ("restart overhead", tb.restart_overhead_s),
    ]
    if tb.startup_s:  # only a profile with `startup` (model v2) has it
        parts.append(("start-up (every round)", tb.startup_s))
    if tb.cold_start_s:  # only a noise model (a guarantee) plans for cold starts
        parts.append(("cold starts", tb.cold_start_s))
    for label, value in parts:
        lines.append(f"    {label:<28}{value:>12,.1f}  {value / total_t:>6.1%}")
    lines.append("  cost breakdown                        USD    share")
    for label, value in (
        ("functions (GB-seconds)", cb.functions_usd),
        ("parameter server", cb.parameter_server_usd), ("requests", cb.requests_usd),
    ):
        lines.append(f"    {label:<28}{value:>12,.6f}  {value / total_c:>6.1%}")
    return lines


def _chooser(plan: Plan) -> str:
    """Who made the final choice: the enumeration when one plan was left, else HiGHS."""
    if plan.selected_by == "highs":
        return f"HiGHS chose among {plan.pareto_candidates} ({plan.solver_status})"
    return "one plan left, so no HiGHS model was needed"


def _server_lines(plan: Plan) -> list[str]:
    """The parameter server, when the plan chose it or shards it."""
    if plan.ps is None:
        return []
    server = plan.solved_from.parameter_server
    kind = server.type or "machine"
    return [f"  ps         {server.shards} × {kind} shard{'s' if server.shards > 1 else ''} "
            f"({server.bandwidth_mbps:,g} MB/s, ${server.price_per_hour:g}/h each)"]


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
        *_server_lines(plan),
        f"  training   local batch {plan.local_batch:g}, global batch {plan.global_batch:g}, "
        f"{plan.iterations:,.1f} iterations, {restarts}, {plan.invocations} invocations",
        *_breakdown_lines(plan),
        *([] if plan.fit_coverage is None else [f"  fit        {plan.fit_coverage.note}"]),
        f"  search     n ∈ [{b.n_min}, {b.n_max}], m ∈ [{b.m_min:,}, {b.m_max:,}] MB keeps "
        f"{b.share_kept:.2%} of the {b.grid_points:,}-plan grid; {plan.candidates_evaluated:,} "
        f"plans evaluated ({b.share_evaluated:.3%}), {_chooser(plan)}, "
        f"{plan.solve_seconds * 1000:.1f} ms",
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


EXIT_CODES = """\b
Exit codes, for every command:
  0        success
  1        bad input: one `error:` line on stderr naming the field, the value and the fix
  2        usage (an unknown command or option)
  3        no plan meets the deadline (solve), none is valid at all, or a job of solve-many
           misses its deadline
  128 + N  stopped by signal N (launch, profile, sweep: 130 Ctrl-C, 143 SIGTERM)

INSTANCE is the path of an instance YAML or a shipped instance's name (1dcnn-imdb,
espcn-bsds500, mobilenet-cifar10, resnet50-cifar10); a file at that path wins."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(package_name="lambdadnn")
@click.option("-v", "--verbose", is_flag=True,
              help="Log the library's detail (debug level, tracebacks included) to stderr.")
@click.option("-q", "--quiet", "be_quiet", is_flag=True,
              help="Errors only: no warnings, no progress bars.")
@click.pass_context
def main(context: click.Context, verbose: bool, be_quiet: bool) -> None:
    """lambdadnn: the cheapest serverless plan that trains a DNN before its deadline."""
    if verbose and be_quiet:
        raise click.UsageError("`-v/--verbose` and `-q/--quiet` contradict each other; give one")
    context.meta[QUIET] = be_quiet
    logger = logging.getLogger("lambdadnn")
    logger.addHandler(_LOG_HANDLER)  # once: the same handler is not added twice
    logger.setLevel(logging.DEBUG if verbose else logging.ERROR if be_quiet else logging.WARNING)


@main.command("solve")
@instance_argument
@json_option
@platform_option
@click.option("--deadline-s", "--deadline", "deadline", cls=AliasedOption, type=float, metavar="S",
              help="Override objective.deadline_s.")
@click.option("--guarantee", type=float, metavar="P",
              help="Meet the deadline in at least this share of runs (e.g. 0.999) under the "
                   "default noise model, instead of in the model's mean.")
@friendly
def solve_command(
    instance: Path, as_json: bool, platform: str | None, deadline: float | None,
    guarantee: float | None,
) -> None:
    """Find the cheapest plan (functions × memory) that meets the deadline."""
    from .solver.pipeline import solve

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
    from .solver.instance_yaml import load_instance
    from .solver.pipeline import evaluate

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
@json_option
@friendly
def validate_command(instance: Path, platform: str | None, as_json: bool) -> None:
    """Check an instance file; print a one-line summary or the first problem."""
    from .solver.instance_yaml import load_instance

    loaded = load_instance(instance, platform=platform)
    grid = loaded.platform.memory
    if as_json:
        _emit_json({"ok": True, "instance": loaded.name, "platform": loaded.platform.name,
                    "memory_mb": {"min": grid.min_mb, "max": grid.max_mb, "step": grid.step_mb},
                    "max_functions": loaded.max_functions,
                    "deadline_s": loaded.objective.deadline_s})
        return
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
    from .solver.pipeline import deadline_crossings, solve

    plan = solve(instance, platform=platform)
    b = plan.bounds
    crossings = deadline_crossings(instance, memory_mb=b.m_max, platform=platform)
    if as_json:
        _emit_json({**b.to_dict(), "crossings": [
            {"regime": c.regime, "functions": c.functions} for c in crossings]})
        return
    solved = ", ".join(f"n = {c.functions:,.2f} ({c.regime})" for c in crossings) or "none"
    lines = [
        f"{plan.instance} on {plan.platform}",
        f"  functions  n ∈ [{b.n_min}, {b.n_max}]",
        f"  memory     m ∈ [{b.m_min:,}, {b.m_max:,}] MB",
        f"  kept       {b.box_points:,} of {b.grid_points:,} plans ({b.share_kept:.2%}); after "
        f"pruning by cost, {b.evaluated_points:,} evaluated ({b.share_evaluated:.3%})",
        "  derivation",
        *(f"    - {line}" for line in b.derivations),
        f"    - closed forms, T_train(n, {b.m_max:,} MB) = T_o solved for n per regime: "
        f"{solved} (T ≥ T_train, so no n with T_train > T_o meets the deadline)",
    ]
    click.echo("\n".join(lines))


@main.command("frontier")
@instance_argument
@click.option("--from", "start", type=float, metavar="S", help="First deadline, s.")
@click.option("--to", "stop", type=float, metavar="S", help="Last deadline, s.")
@click.option("--points", type=click.IntRange(2, 200), default=12, show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the frontier to this .png, .pdf or .svg (no suffix: .png).")
@json_option
@platform_option
@friendly
def frontier_command(
    instance: Path, start: float | None, stop: float | None, points: int,
    plot_path: Path | None, as_json: bool, platform: str | None,
) -> None:
    """The cheapest plan for each deadline over a range (default: fastest time to 4× it)."""
    from .plot import plot_frontier
    from .plot import plot_path as checked_plot_path
    from .solver.frontier import deadline_range, frontier
    from .solver.instance import MAX_SECONDS
    from .solver.instance_validation import positive_number
    from .solver.instance_yaml import load_instance

    # Every option is checked before the first solve, so a bad one costs nothing.
    target = None if plot_path is None else checked_plot_path(plot_path)
    start = None if start is None else positive_number("--from", start, MAX_SECONDS)
    stop = None if stop is None else positive_number("--to", stop, MAX_SECONDS)
    loaded = load_instance(instance, platform=platform)
    if start is None or stop is None:
        fastest, latest = deadline_range(loaded)
        start = fastest if start is None else start
        stop = latest if stop is None else stop
    if not start < stop:
        raise InstanceError(f"`--from` ({start:g}) must be below `--to` ({stop:g})")
    deadlines = [start + (stop - start) * i / (points - 1) for i in range(points)]
    plans = frontier(loaded, deadlines)
    if target is not None:
        target = plot_frontier(plans, target)
    if as_json:
        _emit_json({"instance": loaded.name, "plans": [p.to_dict() for p in plans],
                    "plot": None if target is None else str(target)})
        return
    lines = [f"{loaded.name}: cheapest plan per deadline",
             f"  {'deadline s':>12} {'status':>11} {'n':>5} {'memory MB':>10} {'time s':>10} "
             f"{'cost USD':>11}"]
    for p in plans:
        lines.append(
            f"  {p.deadline_s:>12,.1f} {p.status:>11} {p.functions:>5} {p.memory_mb:>10,} "
            f"{p.time_s:>10,.1f} {p.cost_usd:>11.6f}"
        )
    if target is not None:
        lines.append(f"  plot written to {target}")
    click.echo("\n".join(lines))


MISSED_LISTED = 10  # the closing line names this many late jobs, then counts the rest


def _schedule_text(schedule: Schedule, target: Path | None) -> str:
    from .plot import shown

    s = schedule
    highs = f"HiGHS {s.solver_status.replace('_', ' ')}"
    bound = f"lower bound {_money(s.lower_bound_usd)}, gap {s.gap:.2%}; {highs}"
    cost = (
        [f"  cost       {_money(s.total_cost_usd)} ({bound})"] if not s.missed
        else [f"  cost       {_money(s.total_cost_usd)}, the late jobs included",
              f"  objective  {_money(s.objective_usd)} with a penalty per miss ({bound})"]
    )
    lines = [
        f"schedule: {s.status} — {len(s.jobs) - len(s.missed)} of {len(s.jobs)} jobs meet their "
        f"deadline under a concurrency of {s.concurrency:,}",
        *cost,
        f"  pool       peak {s.peak_functions:,} of {s.concurrency:,} functions in use; starts "
        f"on a {s.slot_s:g} s grid",
        f"  solve      {s.solve_seconds:.2f} s ({s.columns:,} columns, {s.check_points:,} "
        "capacity checks)",
        f"  {'#':>3} {'name':<18} {'submit s':>8} {'deadline':>8} {'n × m MB':>10} "
        f"{'start s':>9} {'finish s':>9} {'cost USD':>9}  outcome",
    ]
    for j in s.jobs:
        outcome = "met" if j.met else f"late by {_seconds(j.late_s)}"
        lines.append(
            f"  {j.index:>3} {shown(j.name, 18):<18} {j.submit_s:>8,.1f} {j.deadline_s:>8,.1f} "
            f"{f'{j.functions} × {j.memory_mb}':>10} {j.start_s:>9,.1f} {j.finish_s:>9,.1f} "
            f"{j.cost_usd:>9.6f}  {outcome}"
        )
    if target is not None:
        lines.append(f"  plot written to {target}")
    return "\n".join(lines)


def _missed_message(schedule: Schedule) -> str:
    from .plot import shown

    missed = schedule.missed
    named = ", ".join(f"#{j.index} {shown(j.name, 40)} by {_seconds(j.late_s)}"
                      for j in missed[:MISSED_LISTED])
    more = f" and {len(missed) - MISSED_LISTED:,} more" if len(missed) > MISSED_LISTED else ""
    return (
        f"{len(missed):,} of {len(schedule.jobs):,} jobs miss their deadline: {named}{more}; "
        "raise `--concurrency` or move their deadlines out"
    )


@main.command("solve-many")
@click.argument("jobs", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--concurrency", type=int, required=True, metavar="N",
              help="Functions all jobs may hold at once (the account's concurrency limit).")
@click.option("--slot-s", type=float, metavar="S",
              help="Step of the start-time grid, s  [default: 60]")
@click.option("--time-limit-s", type=float, metavar="T",
              help="Return within about this many seconds, the fronts and the greedy "
                   "schedule included; HiGHS gets what is left  [default: 10]")
@click.option("--gap", type=float, metavar="G",
              help="Stop HiGHS once the cost is proven within this relative gap  "
                   "[default: 0.001]")
@click.option("--guarantee", type=float, metavar="P",
              help="Meet each deadline in at least this share of runs (e.g. 0.999) under the "
                   "default noise model, instead of in the model's mean.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw a Gantt chart to this .png, .pdf or .svg (no suffix: .png).")
@json_option
@friendly
def solve_many_command(
    jobs: Path, concurrency: int, slot_s: float | None, time_limit_s: float | None,
    gap: float | None, guarantee: float | None, plot_path: Path | None, as_json: bool,
) -> None:
    """Schedule many jobs under one concurrency limit: for each, the plan and start that make
    the cheapest schedule meeting every deadline it can.

    JOBS is a trace CSV (submit_time_s,instance,epochs,deadline_s; the deadline counts from
    submission). Exit 3 when some job misses its deadline (the schedule is still printed).
    The phases show on stderr as they start (a terminal only; not under --json or -q).
    """
    from .inputs.files import brief
    from .plot import plot_path as checked_plot_path
    from .plot import plot_schedule
    from .solver import many
    from .solver.instance import MAX_CONCURRENCY, MAX_SECONDS
    from .solver.instance_validation import (
        non_negative_number,
        positive_integer,
        positive_number,
    )
    from .solver.schedule import Submission
    from .solver.timetable import PHASES
    from .solver.trace_file import read_trace

    # Every option is checked before the trace is read, so a bad one costs nothing.
    limit = positive_integer("--concurrency", concurrency, MAX_CONCURRENCY)
    slot = (many.DEFAULT_SLOT_S if slot_s is None
            else positive_number("--slot-s", slot_s, MAX_SECONDS))
    seconds = (many.DEFAULT_TIME_LIMIT_S if time_limit_s is None
               else positive_number("--time-limit-s", time_limit_s, MAX_SECONDS))
    tolerance = many.DEFAULT_GAP if gap is None else non_negative_number("--gap", gap, 1.0)
    target = None if plot_path is None else checked_plot_path(plot_path)
    trace = read_trace(jobs)
    if not trace:
        raise InstanceError(
            f"trace {brief(str(jobs), 80)} holds no jobs; add one row per job below its header"
        )
    with _phase_bar("solve-many", PHASES,
                    enabled=not as_json and sys.stderr.isatty()) as progress:
        schedule = many.solve_many(
            [Submission(job.instance, submit_s=job.submit_time_s, deadline_s=job.deadline_s,
                        name=job.instance_name) for job in trace],
            concurrency=limit, slot_s=slot, time_limit_s=seconds, gap=tolerance,
            guarantee=guarantee, progress=progress,
        )
    if target is not None:
        target = plot_schedule(schedule, target)
    if as_json:
        _emit_json(schedule.to_dict())
    else:
        click.echo(_schedule_text(schedule, target))
    if schedule.missed:
        click.echo(f"error: {_missed_message(schedule)}", err=True)
        sys.exit(EXIT_INFEASIBLE)


@contextlib.contextmanager
def _phase_bar(label: str, phases: Sequence[str], *,
               enabled: bool) -> Iterator[Callable[[str], None] | None]:
    """A progress bar over `phases` on stderr, moved to each phase as it starts (none under
    `-q`, or when not `enabled`); closed whatever happens."""
    if not enabled or quiet():
        yield None
        return
    with click.progressbar(length=len(phases), label=label, file=sys.stderr,
                           item_show_func=lambda phase: phase) as bar:
        def progress(phase: str) -> None:
            bar.update(phases.index(phase) - bar.pos, phase)

        yield progress


def _report_table(reports: list[StrategyReport]) -> str:
    against = any(r.met_of_hindsight_feasible is not None for r in reports)
    header = (f"  {'strategy':<19}{'met':>8}{'total $':>11}{'mean $':>10}{'explore $':>11}"
              f"{'mem GB':>8}{'GB-s':>14}{'|pred-sim| s':>14}{'wall s':>8}")
    if against:
        header += f"{'of feasible':>13}{'× hindsight $':>15}"
    lines = [header]
    for r in reports:
        line = (
            f"  {r.name:<19}{r.deadline_met:>8.2%}{r.total_cost_usd:>11.2f}"
            f"{r.mean_cost_usd:>10.4f}{r.exploration_cost_usd:>11.2f}{r.mean_memory_gb:>8.1f}"
            f"{r.gb_seconds:>14,.0f}{r.mean_abs_prediction_error_s:>14.1f}{r.seconds:>8.1f}"
        )
        if against:
            share, ratio = r.met_of_hindsight_feasible, r.cost_vs_hindsight
            line += (f"{'—' if share is None else f'{share:.2%}':>13}"
                     f"{'—' if ratio is None else f'{ratio:.3f}':>15}")
        lines.append(line)
    for r in reports:
        if r.abandoned:
            lines.append(
                f"  note: {r.name}: {r.abandoned:,} job(s) abandoned at the simulator's limits "
                "(stuck in crashes, or too long to simulate): counted as missed, paid for what "
                "they ran"
            )
        if r.untrainable:
            lines.append(
                f"  note: {r.name}: {r.untrainable:,} job(s) untrainable where they ran (no "
                "positive rate or storage bandwidth there): counted as missed, at no cost"
            )
    return "\n".join(lines)


def _world_json(world: World | None, truth_file: Path | None) -> dict[str, Any]:
    """The world a run used, for `--json`: nothing for the model-family engine."""
    if world is None:
        return {}
    return {"world": {"file": str(truth_file), "name": world.name, **world.to_mapping()}}


def _truth_label(truth: Truth, world: World | None, truth_file: Path | None) -> str:
    """What the jobs ran under, for the report's first line."""
    if world is None:
        return f"truth: {truth.label()}"
    return f"world: {world.name or truth_file} ({world.label()}; independent engine)"


def _progress_bars(enabled: bool) -> Callable[[str], Callable[[int, int], None]] | None:
    """A click progress bar per strategy on stderr (none when stderr is not a terminal, or
    under `-q`)."""
    if not enabled or quiet():
        return None

    def for_strategy(name: str) -> Callable[[int, int], None]:
        state: dict[str, Any] = {}

        def update(done: int, total: int) -> None:
            if "bar" not in state:
                state["bar"] = click.progressbar(length=total, label=f"{name:<19}",
                                                 file=sys.stderr)
                state["bar"].__enter__()
            state["bar"].update(1)
            if done == total:
                state["bar"].__exit__(None, None, None)

        return update

    return for_strategy


noise_options = [
    click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Seed of every draw (an integer ≥ 0)."),
    click.option("--pool", "pool_size", type=click.IntRange(min=1), default=DEFAULT_POOL_SIZE,
                 show_default=True, help="Functions shared by all jobs."),
    click.option("--guarantee", type=FiniteRange(0, 1, min_open=True, max_open=True),
                 default=DEFAULT_GUARANTEE, show_default=True,
                 help="lambdadnn plans to meet the deadline in this share of runs."),
    click.option("--failure-rate", type=FiniteRange(min=0), default=0.0, show_default=True,
                 help="Function crashes per function-hour, declared to the planners (a job "
                      "stuck in crashes is abandoned: see README)."),
    click.option("--truth", "truth_items", multiple=True, metavar="KEY=VALUE",
                 help="Run the jobs under a truth the planners do not see (repeatable): "
                      "rate_scale, saturates_at_mb, bandwidth_scale, startup_scale, compute_cv, "
                      "comm_cv, cold_start_median_s, failure_rate_per_h."),
    click.option("--truth-file", "truth_file", metavar="WORLD.yaml",
                 type=click.Path(dir_okay=False, path_type=Path),
                 help="Run the jobs in this world of the independent engine instead "
                      "(docs/WORLD.md; shipped worlds in instances/worlds/)."),
]


def _with_options(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


@main.command("simulate")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--strategy", "name", type=click.Choice(STRATEGY_NAMES), default="lambdadnn",
              show_default=True)
@_with_options(noise_options)
@json_option
@friendly
def simulate_command(
    trace: Path, name: str, seed: int, pool_size: int, guarantee: float, failure_rate: float,
    truth_items: tuple[str, ...], truth_file: Path | None, as_json: bool,
) -> None:
    """Replay a trace (CSV: submit_time_s,instance,epochs,deadline_s) with one strategy."""
    from .models.noise import NoiseModel
    from .simulator.compare import check_engine, compare
    from .simulator.truth import Truth
    from .simulator.worlds import load_world
    from .solver.trace_file import read_trace

    truth = Truth.parse(truth_items)
    world = None if truth_file is None else load_world(truth_file)
    check_engine([name], truth=truth, world=world)
    jobs = read_trace(trace)
    noise = NoiseModel(failure_rate_per_hour=failure_rate)
    comparison = compare(jobs, [name], seed=seed, noise=noise, pool_size=pool_size,
                         guarantee=guarantee, truth=truth, world=world,
                         progress=_progress_bars(not as_json))
    outcomes = comparison.outcomes[name]
    (report,) = comparison.reports()
    if as_json:
        _emit_json({"truth": truth.changed(), **_world_json(world, truth_file),
                    "strategy": report.to_dict(), "jobs": [o.to_dict() for o in outcomes]})
        return
    click.echo(f"{len(jobs)} jobs from {trace}, strategy {name}, seed {seed}, "
               f"{_truth_label(truth, world, truth_file)}")
    click.echo(_report_table([report]))


@main.command("compare")
@click.option("--jobs", "job_count", type=click.IntRange(1, MAX_TRACE_JOBS), default=1000,
              show_default=True,
              help="Jobs to generate (Poisson arrivals over the shipped workloads).")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path),
              help="Replay this trace instead of generating one.")
@click.option("--rate", "rate_per_s", type=FiniteRange(min=0, min_open=True),
              help="Jobs per second of the generated trace [default: 0.2].")
@click.option("--arrival", type=click.Choice(ARRIVALS), default=ARRIVALS[0], show_default=True,
              help="Arrival process of the generated trace.")
@click.option("--mix", type=click.Choice(MIXES), default=MIXES[0], show_default=True,
              help="Job sizes of the generated trace (heavy: heavy-tailed epochs).")
@click.option("--strategies", metavar="NAMES",
              help="Comma-separated strategy names [default: every strategy the engine runs: "
                   f"{', '.join(MODEL_STRATEGY_NAMES)}; with --truth-file "
                   f"{', '.join(WORLD_STRATEGY_NAMES)}].")
@_with_options(noise_options)
@click.option("--plot-dir", "--plots", "plots", cls=AliasedOption, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Write cost_cdf.png and time_vs_deadline.png to this folder.")
@json_option
@friendly
def compare_command(
    job_count: int, trace: Path | None, rate_per_s: float | None, arrival: str, mix: str,
    strategies: str | None, seed: int, pool_size: int, guarantee: float, failure_rate: float,
    truth_items: tuple[str, ...], truth_file: Path | None, plots: Path | None, as_json: bool,
) -> None:
    """Every strategy on the same simulated jobs: deadlines met, cost, memory, accuracy."""
    from .models.noise import NoiseModel
    from .plot import plot_comparison, plot_folder
    from .simulator.compare import check_engine, compare
    from .simulator.strategies import check_names
    from .simulator.trace import DEFAULT_RATE_PER_S, generate_trace
    from .simulator.truth import Truth
    from .simulator.worlds import load_world
    from .solver.trace_file import read_trace

    default = MODEL_STRATEGY_NAMES if truth_file is None else WORLD_STRATEGY_NAMES
    names = [name.strip() for name in (strategies or ",".join(default)).split(",")
             if name.strip()]
    check_names(names, field="--strategies")
    truth = Truth.parse(truth_items)
    world = None if truth_file is None else load_world(truth_file)
    check_engine(names, truth=truth, world=world)
    if plots is not None:
        plot_folder(plots)  # before the simulation, which can take minutes
    if trace is not None and (rate_per_s is not None or (arrival, mix) != (ARRIVALS[0], MIXES[0])):
        raise InstanceError("`--rate`, `--arrival` and `--mix` shape a generated trace; "
                            "drop them with `--trace`")
    jobs = read_trace(trace) if trace else generate_trace(
        job_count, seed=seed, arrival=arrival, mix=mix,
        rate_per_s=DEFAULT_RATE_PER_S if rate_per_s is None else rate_per_s,
    )
    noise = NoiseModel(failure_rate_per_hour=failure_rate)
    comparison = compare(jobs, names, seed=seed, noise=noise, pool_size=pool_size,
                         guarantee=guarantee, truth=truth, world=world,
                         progress=_progress_bars(not as_json))
    reports = comparison.reports()
    written = plot_comparison(comparison.outcomes, plots) if plots else []
    if as_json:
        _emit_json({"jobs": len(jobs), "seed": seed, "guarantee": guarantee,
                    "truth": truth.changed(), **_world_json(world, truth_file),
                    "hindsight_feasible": comparison.hindsight_feasible,
                    "strategies": [r.to_dict() for r in reports],
                    "plots": [str(p) for p in written]})
        return
    source = f"trace {trace}" if trace else f"{len(jobs)} generated jobs"
    click.echo(f"{source}, seed {seed}, pool {pool_size:,} functions, guarantee "
               f"{guarantee:g}, {_truth_label(truth, world, truth_file)}")
    if comparison.hindsight_feasible is not None:
        click.echo(f"hindsight meets {comparison.hindsight_feasible:,} of {len(jobs):,} "
                   "deadlines: the denominator of 'of feasible'")
    click.echo(_report_table(reports))
    for path in written:
        click.echo(f"  plot written to {path}")


_MAX_LIST = 1000  # values of one --seed-list, --rates or --truth key: more is surely a typo


def _sweep_list(text: str, option: str, parse: Callable[[str], Any], need: str) -> list[Any]:
    """The comma-separated values of `option`, parsed, distinct, or one line saying why."""
    from .inputs.files import brief

    values = []
    for item in text.split(","):
        try:
            values.append(parse(item.strip()))
        except ValueError:
            raise InstanceError(f"`{option}` takes comma-separated {need}, got "
                                f"{brief(item.strip())}") from None
    twice = [value for index, value in enumerate(values) if value in values[:index]]
    if twice:
        raise InstanceError(f"`{option}` names {brief(twice[0])} twice; give each value once")
    if len(values) > _MAX_LIST:
        raise InstanceError(f"`{option}` takes at most {_MAX_LIST} values, got {len(values):,}")
    return values


def _positive_rate(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


def _seed_value(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _sweep_text(result: Any, cells: int, *, plots: Sequence[Path] = ()) -> str:
    """The aggregates as a table: shares pooled over all jobs with their Wilson interval
    (never of zero width), other figures as means ± the t interval's half-width over seeds."""
    def share(entry: dict[str, Any] | None) -> str:
        if entry is None or entry["pooled"] is None:
            return "—"
        low, high = entry["wilson_ci95"]
        return f"{entry['pooled']:.2%} [{100 * low:.2f}, {high:.2%}]"

    def shown(entry: dict[str, Any] | None, form: str) -> str:
        if entry is None:
            return "—"
        interval = entry["ci95"]
        spread = "(1 seed)" if interval is None else f"± {(interval[1] - interval[0]) / 2:{form}}"
        return f"{entry['mean']:{form}} {spread}"

    against = any("met_of_hindsight_feasible" in row for row in result.aggregates)
    header = f"  {'strategy':<19}{'truth':<26}{'jobs/s':>7}  {'deadlines met':<26}"
    if against:
        header += f"{'of feasible':<26}{'× hindsight $':<18}"
    lines = [f"{cells} cells on {result.workers} Dask worker(s) in {result.wall_s:.1f} s",
             "  shares: over all jobs of all seeds pooled [95% Wilson interval]; costs: mean "
             "over seeds ± 95% Student t interval over seeds (both intervals in --json)",
             header + f"{'mean $ per job':<21}{'total $':<18}"]
    for row in result.aggregates:
        line = (f"  {row['strategy']:<19}{row['truth_label']:<26}{row['rate_per_s']:>7g}  "
                f"{share(row['deadline_met']):<26}")
        if against:
            line += (f"{share(row.get('met_of_hindsight_feasible')):<26}"
                     f"{shown(row.get('cost_vs_hindsight'), '.3f'):<18}")
        lines.append(line + f"{shown(row['mean_cost_usd'], '.4f'):<21}"
                            f"{shown(row['total_cost_usd'], ',.2f'):<18}")
    for row in result.aggregates:
        if row["strategy"] == HINDSIGHT_NAME:
            met = row["deadline_met"]
            lines.append(f"  hindsight meets {met['successes']:,} of {met['trials']:,} deadlines "
                         f"under {row['truth_label']} at {row['rate_per_s']:g} jobs/s (seeds "
                         "pooled): the denominator of 'of feasible'")
    lines += [f"  plot written to {path}" for path in plots]
    return "\n".join(line.rstrip() for line in lines)


_SWEEP_WORLD_NAMES = tuple(name for name in WORLD_STRATEGY_NAMES if name != HINDSIGHT_NAME)


@main.command("sweep")
@click.option("--strategies", metavar="NAMES",
              help="Comma-separated strategy names [default: "
                   f"{', '.join(MODEL_STRATEGY_NAMES)}; with --truth-file "
                   f"{', '.join(_SWEEP_WORLD_NAMES)}]. `hindsight` (with --truth-file) is "
                   "slow: a full search of plans per job; with it, each seed runs all the "
                   "strategies in one cell.")
@click.option("--seeds", "seed_count", type=click.IntRange(1, _MAX_LIST), metavar="N",
              help="Run seeds 0..N-1 [default: 5].")
@click.option("--seed-list", metavar="S1,S2,...", help="Run these seeds instead of --seeds.")
@click.option("--truth", "truth_items", multiple=True, metavar="KEY=V1,V2,...",
              help="Add one truth per value, changing only KEY (repeatable; the truth as "
                   "believed is always run too).")
@click.option("--truth-file", "truth_files", multiple=True, metavar="WORLD.yaml",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Run the cells in this world of the independent engine instead of "
                   "--truth's (repeatable: one truth per world; docs/WORLD.md; shipped "
                   "worlds in instances/worlds/).")
@click.option("--jobs", "job_count", type=click.IntRange(1, MAX_TRACE_JOBS), default=2000,
              show_default=True, help="Jobs per generated trace.")
@click.option("--rates", default="0.2", show_default=True, metavar="R1,R2,...",
              help="Arrival rates (jobs/s) to sweep.")
@click.option("--arrival", type=click.Choice(ARRIVALS), default=ARRIVALS[0], show_default=True,
              help="Arrival process of the traces (see `generate_trace`).")
@click.option("--mix", type=click.Choice(MIXES), default=MIXES[0], show_default=True,
              help="Job-size mix of the traces (see `generate_trace`).")
@click.option("--pool", "pool_size", type=click.IntRange(min=1), default=DEFAULT_POOL_SIZE,
              show_default=True, help="Functions shared by all jobs.")
@click.option("--guarantee", type=FiniteRange(0, 1, min_open=True, max_open=True),
              default=DEFAULT_GUARANTEE, show_default=True,
              help="The planning quantile of the strategies that plan for one.")
@click.option("--plot-dir", "--plots", "plots", cls=AliasedOption, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Write the figures (met-rate and cost against each truth key, or per "
                   "world) here.")
@click.option("--workers", type=click.IntRange(1, 1024), metavar="N",
              help="Processes of the local Dask cluster [default: usable cores].")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run on this existing Dask cluster (tcp://HOST:PORT) instead.")
@json_option
@friendly
def sweep_command(
    strategies: str | None, seed_count: int | None, seed_list: str | None,
    truth_items: tuple[str, ...], truth_files: tuple[Path, ...], job_count: int, rates: str,
    arrival: str, mix: str, pool_size: int, guarantee: float, plots: Path | None,
    workers: int | None, scheduler: str | None, as_json: bool,
) -> None:
    """Strategies × seeds × truths × arrival rates on Dask: means with 95% intervals.

    Each cell (strategy, seed, truth, rate) is one `compare` run on its own seeded trace,
    under a --truth or in a --truth-file world; the cells fan out over a local Dask cluster
    (or --scheduler's) and give exactly the numbers of a serial run.
    """
    from .plot import plot_folder, plot_sweep
    from .simulator.strategies import check_names
    from .simulator.sweep import (
        Setup,
        SweepInterrupted,
        named_worlds,
        one_factor_truths,
        sweep,
    )

    default = _SWEEP_WORLD_NAMES if truth_files else MODEL_STRATEGY_NAMES
    names = [name.strip() for name in (strategies or ",".join(default)).split(",")
             if name.strip()]
    check_names(names, field="--strategies")
    if truth_items and truth_files:
        raise InstanceError("`--truth` and `--truth-file` both choose the truths; give one "
                            "(a world's effects go in its file)")
    if seed_count is not None and seed_list is not None:
        raise InstanceError("`--seeds` and `--seed-list` both choose the seeds; give one")
    seeds = (_sweep_list(seed_list, "--seed-list", _seed_value, "integers ≥ 0")
             if seed_list is not None else list(range(seed_count or 5)))
    truths = named_worlds(truth_files) if truth_files else one_factor_truths(truth_items)
    rate_values = _sweep_list(rates, "--rates", _positive_rate, "positive numbers (jobs/s)")
    setup = Setup(job_count, arrival=arrival, mix=mix, pool_size=pool_size, guarantee=guarantee)
    if plots is not None:
        plot_folder(plots)  # before the cluster starts
    cells = len(names) * len(seeds) * len(truths) * len(rate_values)
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:  # once the cluster runs: a bad option never shows a bar
            bar = click.progressbar(length=total, label="sweep", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        result = sweep(names, seeds, truths, setup=setup, rates=rate_values,
                       workers=workers, scheduler=scheduler,
                       progress=None if as_json or quiet() else progress)
    except SweepInterrupted as stop:  # the shell's convention: 128 + the signal's number
        if bar is not None:
            bar.__exit__(None, None, None)
            bar = None
        click.echo(f"error: {stop}", err=True)
        sys.exit(128 + stop.signum)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    written = [] if plots is None else plot_sweep(result.aggregates, plots, setup.noise)
    if as_json:
        _emit_json({"jobs": job_count, "seeds": seeds, "strategies": names,
                    "rates": rate_values, "arrival": arrival, "mix": mix, "pool": pool_size,
                    "guarantee": guarantee, **result.to_dict(),
                    "plots": [str(path) for path in written]})
        return
    click.echo(_sweep_text(result, cells, plots=written))


@main.command("philly")
@click.argument("job_log", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The trace CSV to write (submit_time_s,instance,epochs,deadline_s).")
@click.option("--workload-map", "workload_map", multiple=True, metavar="NAME=GPU_HOURS",
              help="Map jobs to this workload by its reference GPU-hours (repeatable; replaces "
                   "the default 1dcnn-imdb=0.1, espcn-bsds500=1, mobilenet-cifar10=10, "
                   "resnet50-cifar10=100).")
@click.option("--slack", type=float, help="Deadline = slack × the job's run time on Philly "
              "(default 1.5).")
@click.option("--keep", metavar="STATUSES", help="Comma-separated statuses of the jobs to "
              "convert, of Pass, Killed, Failed (default Pass,Killed).")
@click.option("--limit", type=int, help="Convert only the earliest N jobs kept.")
@json_option
@friendly
def philly_command(
    job_log: Path, out: Path, workload_map: tuple[str, ...], slack: float | None,
    keep: str | None, limit: int | None, as_json: bool,
) -> None:
    """Convert a Philly trace's cluster_job_log (JSON) into a trace CSV for simulate/compare."""
    from .inputs.files import brief
    from .simulator.philly import convert_job_log, parse_workload_map
    from .solver.trace_file import write_trace

    options: dict[str, Any] = {"limit": limit}
    if workload_map:
        options["workload_map"] = parse_workload_map(workload_map)
    if slack is not None:
        options["slack"] = slack
    if keep is not None:
        options["statuses"] = tuple(status.strip() for status in keep.split(","))
    conversion = convert_job_log(job_log, **options)
    try:
        write_trace(conversion.jobs, out)
    except OSError as error:
        reason = error.strerror or "I/O error"
        raise InstanceError(f"`--out` {brief(str(out), 80)} cannot be written ({reason}); give "
                            "a writable file path") from None
    workloads: dict[str, int] = {}
    for job in conversion.jobs:
        workloads[job.instance_name] = workloads.get(job.instance_name, 0) + 1
    if as_json:
        _emit_json({"job_log": str(job_log), "out": str(out), "jobs": len(conversion.jobs),
                    "skipped": conversion.skipped, "workloads": workloads})
        return
    total = len(conversion.jobs) + sum(conversion.skipped.values())
    click.echo(f"{len(conversion.jobs):,} of {total:,} jobs from {job_log} written to {out}")
    for reason, count in conversion.skipped.items():
        click.echo(f"  skipped {count:,}: {reason}")
    for name, count in sorted(workloads.items()):
        click.echo(f"  {count:,} × {name}")


# For annotations only: the launcher (and redis, numpy) load when `launch` runs.
if TYPE_CHECKING:
    from .launcher.spec import LaunchReport, LaunchSpec


def _plan_to_launch(source: Path, platform: str | None, force: bool) -> LaunchSpec:
    """The spec of a plan from `lambdadnn solve --json` output, or of an instance solved first.

    A plan that misses its deadline (status infeasible) is launched only with `--force`.
    """
    from .inputs.files import brief
    from .launcher.spec import LaunchSpec, read_plan

    plan = None
    if source.suffix.lower() == ".json":
        if platform is not None:
            raise InstanceError(
                "`--platform` applies to an instance YAML; a plan JSON runs on the platform it "
                "was solved for (its `platform`): re-solve it with `--platform NAME`"
            )
        spec = read_plan(source)
    else:
        from .solver.pipeline import solve

        plan = solve(source, platform=platform)
        spec = LaunchSpec.from_plan(plan)
    if spec.status == "infeasible":
        why = (_infeasible_message(plan) if plan is not None else
               f"the plan in {brief(str(source), 80)} has `status` 'infeasible': it misses its "
               "deadline")
        if not force:
            raise InstanceError(f"{why}; pass `--force` to launch it anyway")
        click.echo(f"warning: {why}; launching it anyway (--force)", err=True)
    return spec


class _IterationBar:
    """A progress bar over iterations on stderr, drawn from the first trained iteration on.

    Before it, nothing is drawn (an error during start-up is the only line printed), and its
    ETA counts from there: start-up time says nothing about the iterations left. It may step
    back (a restore to the checkpoint).
    """

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled and not quiet(), total
        self.bar: Any = None
        self.origin = 0

    def update(self, iteration: int) -> None:
        if not self.enabled or (self.bar is None and iteration < 1):
            return
        if self.bar is None:
            self.origin = iteration
            self.bar = click.progressbar(length=max(1, self.total - iteration),
                                         label="training", file=sys.stderr)
            self.bar.__enter__()
        # make_step, not update(): update() drops a step back (it waits to make up for it)
        self.bar.make_step(max(0, iteration - self.origin) - self.bar.pos)
        self.bar.render_progress()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _launch_text(report: LaunchReport) -> str:
    def shown(value: float | None, form: str) -> str:
        return "n/a" if value is None else format(value, form)

    if report.predicted_time_s is None:
        prediction = f"no prediction: {report.prediction_note}"
    else:
        prediction = (f"predicted {_seconds(report.predicted_time_s)} "
                      f"({_restarts(report.predicted_restarts or 0)}), error "
                      f"{report.prediction_error:+.1%}")
    total = report.compute_s + report.exchange_s
    split = (f"compute {report.compute_s / total:.0%}, exchange {report.exchange_s / total:.0%}"
             if total > 0 else "n/a")
    return "\n".join([
        f"launched on {report.backend}: {report.functions} functions × {report.memory_mb:,} MB "
        f"({report.platform}, {report.architecture}) — {report.status}",
        f"  workload       {report.workload}, local batch {report.local_batch}",
        f"  iterations     {report.iterations:,} ({_restarts(report.restarts)}, "
        f"{report.invocations} invocations)",
        f"  time           measured {_seconds(report.measured_time_s)}; {prediction}",
        f"  first step     after {shown(report.time_to_first_iteration_s, '.2f')} s of start-up",
        f"  per iteration  median {shown(report.iteration_median_s, '.4f')} s, p90 "
        f"{shown(report.iteration_p90_s, '.4f')} s ({split})",
        f"  CPU throttled  {shown(report.throttled_share, '.0%')} of periods",
        f"  final loss     {shown(report.final_loss, '.4f')}",
        f"  test accuracy  {shown(report.test_accuracy, '.2%')}",
        f"  runs on        {report.runs_on}",
        *report.shard_lines(),
        *_rounds_lines(report.rounds),
    ])


def _rounds_lines(rounds: tuple[dict[str, Any], ...]) -> list[str]:
    """Each round's plan, iterations and time, and why it ran: the decision that started it
    and the checks that kept it (nothing when the report lists no rounds)."""
    lines = ["  rounds"] if rounds else []
    for number, round_ in enumerate(rounds, 1):
        seconds = "n/a" if round_["seconds"] is None else _seconds(round_["seconds"])
        lines.append(
            f"    {number}. {round_['functions']} × {round_['memory_mb']:,} MB, iterations "
            f"{round_['iterations_from']:,}–{round_['iterations_to']:,}, {seconds}: "
            f"{round_['action']} — {round_['reason']}"
        )
        lines.extend(f"       check at {check['iteration']:,}: {check['reason']}"
                     for check in round_["checks"])
    return lines


def _rehearse(
    source: Path, truth_file: Path, *, platform: str | None, force: bool, adaptive: bool,
    seed: int, as_json: bool,
) -> None:
    """`launch --truth-file`: the plan (or, with --adaptive, the controller's plans) run in
    the world instead of launched, the report in the launch's terms."""
    from .models.noise import NoiseModel
    from .simulator.replanners import ControllerReplanner
    from .simulator.worlds import load_world, rehearse

    world = load_world(truth_file)
    spec = _plan_to_launch(source, platform, force)
    if spec.instance is None:
        raise InstanceError("`SOURCE` carries no instance (instance_spec) to rehearse; give the "
                            "instance YAML or a plan from `lambdadnn solve --json`")
    if seed < 0:
        raise InstanceError(f"`--seed` must be ≥ 0 to rehearse, got {seed}")
    replanner = ControllerReplanner(spec.instance, spec.guarantee, NoiseModel()) if adaptive \
        else None
    rehearsal = rehearse(spec.instance, spec.functions, spec.memory_mb, world, seed=seed,
                         replanner=replanner)
    found = rehearsal.to_dict()
    if as_json:
        _emit_json({"world": {"file": str(truth_file), "name": world.name}, "seed": seed,
                    "predicted_time_s": spec.time_s, **found})
        return
    run = rehearsal.run
    verdict = "meets" if rehearsal.met else "misses"
    click.echo(f"rehearsed in world {world.name or truth_file} (independent engine, seed "
               f"{seed}): {rehearsal.functions} functions × {rehearsal.memory_mb:,} MB — "
               f"{found['status']}")
    click.echo(f"  time           {_seconds(run.time_s)} ({verdict} the "
               f"{_seconds(rehearsal.deadline_s)} deadline; the plan predicted "
               f"{_seconds(spec.time_s)})")
    click.echo(f"  cost           ${run.cost_usd:.4f} ({run.gb_seconds:,.0f} GB-s)")
    click.echo(f"  restarts       {run.restarts}, crashes {run.failures}, switches "
               f"{run.switches}")
    for (_, *before), (at_s, functions, memory_mb) in itertools.pairwise(rehearsal.decisions):
        if [functions, memory_mb] != before:
            click.echo(f"  switched at {_seconds(at_s)} to {functions} × {memory_mb:,} MB")


def _ids(text: str | None) -> tuple[str, ...]:
    """`--subnet-ids a,b` as ('a', 'b'); `AwsTarget` checks each ID."""
    return tuple(part.strip() for part in text.split(",")) if text else ()


@main.command("launch")
@click.argument("source", required=False,
                type=click.Path(dir_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(["local", "aws"]), default="local",
              show_default=True)
@click.option("--redis-url", help="The parameter channel (default for local: start one).")
@click.option("--timeout-s", type=FiniteRange(min=1), default=900.0, show_default=True,
              help="Each invocation's limit (on AWS at most Lambda's 900 s).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workload",
              help="What the workers train: digits-cnn, digits-mlp or package.module:factory "
                   "[default: the shipped workload the plan's instance was profiled for, "
                   "else digits-cnn; a file never names your own code].")
@click.option("--function-name", default="lambdadnn-worker", show_default=True)
@click.option("--role-arn", help="Execution role of the Lambda function (aws).")
@click.option("--image-uri",
              help="The worker's container image in ECR (`lambdadnn image`): needed on aws.")
@click.option("--stack", metavar="NAME",
              help="Take --role-arn, --image-uri (REPOSITORY:latest), --subnet-ids, "
                   "--security-group-ids and --redis-url from this stack's outputs "
                   "(`lambdadnn deploy`); the options given win.")
@click.option("--subnet-ids", metavar="ID,...",
              help="Run the function in these VPC subnets (with --security-group-ids).")
@click.option("--security-group-ids", metavar="ID,...",
              help="The function's VPC security groups (with --subnet-ids).")
@click.option("--region", default="us-east-1", show_default=True)
@click.option("--endpoint-url",
              help="AWS endpoint of Lambda and --stack's CloudFormation (e.g. a moto server).")
@click.option("--dry-run", is_flag=True,
              help="List every Lambda call without making it (--stack is still read).")
@click.option("--print-policy", is_flag=True, help="Print the IAM policy the AWS backend needs.")
@click.option("--oversubscribe", is_flag=True,
              help="Local: run a plan needing more vCPU (n·m/1769) than this machine has.")
@click.option("--force", is_flag=True, help="Launch a plan that misses its deadline.")
@click.option("--adaptive", is_flag=True,
              help="Re-plan (n, m) at checks from the measured speed to keep the deadline.")
@click.option("--resume", metavar="JOB",
              help="Local: continue JOB (named when a launch stops) from its last checkpoint, "
                   "which must be in --redis-url's Redis: the redis-server a launch starts "
                   "itself ends with it. A job's keys expire a day after its deadline.")
@click.option("--shards", type=int, default=None, metavar="K",
              help="Parameter-server shards to run (1 to 16) instead of the plan's "
                   "`parameter_server.shards`; locally a redis-server each, on AWS the "
                   "stack's Redis and K-1 EC2 instances of the plan's PS type beside it "
                   "(paid while the launch runs, terminated when it ends).")
@click.option("--truth-file", "truth_file", metavar="WORLD.yaml",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Rehearse: play the launch in this world of the independent engine "
                   "(docs/WORLD.md) under --seed's luck; nothing starts.")
@platform_option
@json_option
@friendly
def launch_command(
    source: Path | None, backend: str, redis_url: str | None, timeout_s: float,
    checkpoint_every: int, seed: int, workload: str | None, function_name: str,
    role_arn: str | None, image_uri: str | None, stack: str | None, subnet_ids: str | None,
    security_group_ids: str | None, region: str, endpoint_url: str | None, dry_run: bool,
    print_policy: bool, oversubscribe: bool, force: bool, adaptive: bool, platform: str | None,
    as_json: bool, resume: str | None, shards: int | None, truth_file: Path | None,
) -> None:
    """Run a plan (PLAN.json from `solve --json`, or an instance YAML, solved first).

    Locally at most 64 functions, within this machine's CPUs (see --oversubscribe). A
    `--workload` module is looked up in the current directory first, as `python -m` does;
    the plan's instance may name a shipped workload only (a received file runs no code).
    `--adaptive` measures the run and re-solves the rest of it at checks (the plan's
    instance is the belief): it changes the functions and memory between rounds when the
    deadline is at risk or a cheaper plan still meets it; the report lists the rounds.
    On AWS the worker runs from its image (`--image-uri`), in the VPC of `--subnet-ids` and
    `--security-group-ids`; `--stack NAME` takes all of them from a stack of `lambdadnn deploy`.
    """
    from .inputs.files import brief
    from .launcher import aws, require_extras
    from .launcher.workloads import resolve_workload

    def aws_target(role: str) -> aws.AwsTarget:
        return aws.AwsTarget(function_name, role, image_uri=image_uri, region=region,
                             subnet_ids=_ids(subnet_ids),
                             security_group_ids=_ids(security_group_ids))

    if print_policy:
        _emit_json(aws.required_policy(aws_target(role_arn) if role_arn else None))
        return
    if source is None:
        raise InstanceError("`SOURCE` is missing: give a plan JSON or an instance YAML")
    if truth_file is not None:
        launching = [name for name, given in (
            ("--backend aws", backend == "aws"), ("--dry-run", dry_run),
            ("--resume", resume is not None), ("--redis-url", redis_url is not None),
            ("--stack", stack is not None), ("--workload", workload is not None),
            ("--shards", shards is not None),
        ) if given]
        if launching:
            raise InstanceError(f"`--truth-file` rehearses the launch in a world, where nothing "
                                f"starts; drop `{launching[0]}` or `--truth-file`")
        _rehearse(source, truth_file, platform=platform, force=force, adaptive=adaptive,
                  seed=seed, as_json=as_json)
        return
    target = None
    if backend == "aws":
        if stack is not None:
            from .launcher.stack import stack_outputs

            outputs = stack_outputs(
                aws.aws_client("cloudformation", region, endpoint_url=endpoint_url), stack)
            role_arn, image_uri = role_arn or outputs.role_arn, image_uri or outputs.image_uri
            subnet_ids = subnet_ids or ",".join(outputs.subnet_ids)
            security_group_ids = security_group_ids or ",".join(outputs.security_group_ids)
            redis_url = redis_url or outputs.redis_url
        if not role_arn:
            raise InstanceError("`--role-arn` is needed for the aws backend (see --print-policy), "
                                "or `--stack NAME`")
        target = aws_target(role_arn)
    elif dry_run:
        raise InstanceError("`--dry-run` lists AWS calls; use it with `--backend aws`")
    elif stack or subnet_ids or security_group_ids:
        raise InstanceError("`--stack`, `--subnet-ids` and `--security-group-ids` set up the "
                            "Lambda function; use them with `--backend aws`")
    if adaptive and dry_run:
        raise InstanceError("`--adaptive` re-plans from what the run measures, which a dry run "
                            "does not run; drop `--dry-run` or `--adaptive`")
    if resume is not None and backend == "aws":
        raise InstanceError("`--resume` continues a local launch; the aws backend starts every "
                            "job afresh, so drop `--resume` or `--backend aws`")
    require_extras(backend)
    if resume is not None:
        from .launcher.local import check_resume

        check_resume(resume, redis_url)
    from .launcher.channel import redis_client
    from .launcher.launch import Launch, aws_job, launch
    from .launcher.local import Interrupted
    from .launcher.orchestrator import Hooks, RunOptions
    from .launcher.spec import RunFailed

    spec = _plan_to_launch(source, platform, force)
    if shards is not None:
        spec = spec.with_shards(shards)
    profiled = spec.instance.fit if spec.instance is not None else None
    workload = resolve_workload(
        workload, recorded=None if profiled is None else profiled.workload,
        field="instance_spec.fit.workload" if source.suffix.lower() == ".json" else "fit.workload",
        source=f"file {brief(str(source), 80)}",
    )
    options = RunOptions(timeout_s=timeout_s, checkpoint_every=checkpoint_every, seed=seed,
                         workload=workload)
    if target is not None and dry_run:
        url = redis_url or "redis://REDIS-HOST:6379/0"
        redis_client(url, option="--redis-url", ping=False).close()
        calls = aws.dry_run(spec, target, redis_url=url, job=aws_job(spec, seed), options=options)
        if target.image_uri is None:
            click.echo(f"warning: these are the calls of a zip deployment, which `launch` "
                       f"refuses: {aws.NEEDS_IMAGE}; give `--image-uri` or `--stack`", err=True)
        _emit_json([{"operation": c.operation, "params": c.params} for c in calls])
        return
    how = Launch(backend="aws" if target is not None else "local", run=options,
                 redis_url=redis_url, adaptive=adaptive, oversubscribe=oversubscribe,
                 resume=resume, target=target, endpoint_url=endpoint_url)
    bar = _IterationBar(not as_json, spec.iterations)
    try:
        report = launch(spec, how, Hooks(
            progress=lambda iteration, _total: bar.update(iteration),
            warn=lambda line: click.echo(f"warning: {line}", err=True),
        ))
    except RunFailed as failure:  # the report of what ran, then the one `error:` line
        bar.close()
        if as_json:
            _emit_json(failure.report.to_dict())
        else:
            click.echo(_launch_text(failure.report))
        raise
    except Interrupted as stop:  # the shell's convention: 128 + the signal's number
        bar.close()
        click.echo(f"error: {stop}", err=True)
        sys.exit(128 + stop.signum)
    finally:
        bar.close()
    if as_json:
        _emit_json(report.to_dict())
        return
    click.echo(_launch_text(report))


@main.command("deploy")
@click.option("--print", "print_template", is_flag=True,
              help="Write the stack's CloudFormation template to stdout.")
@friendly
def deploy_command(print_template: bool) -> None:
    """Print the CloudFormation stack of `launch --backend aws` (deploy/stack.yaml): the
    functions' execution role, the image's ECR repository, a VPC's subnets and security group,
    and the Redis channel on an EC2 instance of the parameter server's type (m5.large).

    Create it with the AWS CLI, push the worker's image (`lambdadnn image --help`) to its
    repository, and launch with its outputs:

    \b
      lambdadnn deploy --print > stack.yaml
      aws cloudformation deploy --stack-name lambdadnn --template-file stack.yaml \\
          --capabilities CAPABILITY_IAM \\
          --parameter-overrides RedisPassword=$(openssl rand -hex 24)
      lambdadnn launch PLAN --backend aws --stack lambdadnn

    The launcher reaches the Redis too: run it inside the VPC, or route the VPC to it over SSH
    (deploy with KeyName=KEY SshCidr=YOUR-IP/32, then run the stack's `Tunnel` output).
    """
    from .launcher.stack import template

    if not print_template:
        raise InstanceError("`lambdadnn deploy` prints the stack, which the AWS CLI creates: "
                            "pass `--print` (see `lambdadnn deploy --help`)")
    click.echo(template(), nl=False)


@main.command("image")
@click.option("--build", "build_image", is_flag=True,
              help="Build the image with docker (docker must be on PATH).")
@click.option("--tag", metavar="T",
              help="The image's name, for --build or --context [default: lambdadnn-worker].")
@click.option("--architecture", metavar="x86_64|arm64",
              help="The plan's architecture, for --build or --context [default: x86_64].")
@click.option("--context", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Write the build context (Dockerfile, lambdadnn/, workloads/) into DIR, "
                   "new or empty.")
@click.option("--workload-dir", "workload_dirs", multiple=True, metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="Put the contents of DIR beside lambdadnn in the image, for `launch "
                   "--workload module:factory` (repeatable).")
@friendly
def image_command(
    build_image: bool, tag: str | None, architecture: str | None, context: Path | None,
    workload_dirs: tuple[Path, ...],
) -> None:
    """Print the Dockerfile of the worker's Lambda container image, write its build context
    (--context), or build it (--build).

    torch does not fit Lambda's zip deployment, so `launch --backend aws` runs the worker from
    this image. Build it for the plan's architecture, push it to Amazon ECR, and launch with it:

    \b
      aws ecr create-repository --repository-name lambdadnn-worker
      aws ecr get-login-password | docker login --username AWS \\
          --password-stdin ACCOUNT.dkr.ecr.REGION.amazonaws.com
      docker tag lambdadnn-worker ACCOUNT.dkr.ecr.REGION.amazonaws.com/lambdadnn-worker
      docker push ACCOUNT.dkr.ecr.REGION.amazonaws.com/lambdadnn-worker
      lambdadnn launch PLAN --backend aws --image-uri \\
          ACCOUNT.dkr.ecr.REGION.amazonaws.com/lambdadnn-worker:latest --role-arn ...
    """
    import shlex

    from .launcher import image

    name = tag or image.DEFAULT_TAG
    arch = architecture or image.DEFAULT_ARCHITECTURE
    if build_image:
        image.build(name, architecture=arch, workload_dirs=workload_dirs, context=context)
        click.echo(f"built {name} for {arch}; push it to Amazon ECR and pass its URI to "
                   "`lambdadnn launch --backend aws --image-uri` (see `lambdadnn image --help`)")
    elif context is None:
        unused = [option for option, value in (("--tag", tag), ("--architecture", architecture),
                                               ("--workload-dir", workload_dirs)) if value]
        if unused:
            raise InstanceError(f"`{unused[0]}` is for a build: add `--context DIR` to write "
                                "the build context, or `--build` to build the image")
        click.echo(image.dockerfile(), nl=False)
    else:
        command = image.docker_command(name, arch, context)  # a bad tag writes nothing
        image.build_context(context, workload_dirs=workload_dirs)
        click.echo(f"wrote the build context to {context}; build the image with:\n"
                   f"  {shlex.join(command)}")



def _fit_text(fit: dict[str, Any], out: Path) -> str:
    """The profile's parameters (± standard error) and every trial's miss, as a table."""
    lines = [f"profiled {fit['workload']} on {fit['backend']} in {fit['seconds']:.0f} s "
             f"(${fit['cost_usd']:.4f}); wrote {out}", "", "parameter" + " " * 34 + "value"
             + " " * 10 + "± std. error"]
    for name, entry in fit["parameters"].items():
        value = "—" if entry["value"] is None else f"{entry['value']:.6g}"
        error = "" if entry["stderr"] is None else f"± {entry['stderr']:.2g}"
        flag = "" if entry["identified"] else "   (not identified)"
        lines.append(f"  {name:<40} {value:>12} {error:<12}{flag}")
    lines += ["", "  trial                         iterations  measured   fitted    error"]
    for run in fit["runs"]:
        label = f"{run['functions']} × {run['memory_mb']} MB, batch {run['local_batch']}"
        if run["restarts"]:
            label += f", {run['restarts']} restarts"
        left_out = f"   left out: {run['left_out']}" if run.get("left_out") else ""
        lines.append(f"  {label:<30} {run['iterations']:>10,} {run['measured_time_s']:>8.2f} s"
                     f" {run['predicted_time_s']:>7.2f} s {run['error']:>+8.1%}{left_out}")
    lines += ["", "Not identified, and what would identify it (the `fit` section's notes):"]
    lines += [f"  {name}: {entry.get('note', '')}" for name, entry in fit["parameters"].items()
              if not entry["identified"]]
    return "\n".join(lines)


@main.command("profile")
@click.option("--workload", default="digits-cnn", show_default=True,
              help="What to profile: digits-cnn, digits-mlp or package.module:factory.")
@click.option("--backend", type=click.Choice(["local", "aws"]), default="local",
              show_default=True)
@click.option("--out", type=click.Path(path_type=Path), metavar="FILE", required=True,
              help="Where to write the fitted instance YAML: checked before the first trial, "
                   "written whole or not at all.")
@click.option("--budget-s", type=FiniteRange(min=30, max=86_400), default=300.0,
              show_default=True, help="Profiling time to stay within.")
@click.option("--factory-timeout-s", type=FiniteRange(min=0, min_open=True, max=86_400),
              default=120.0, show_default=True,
              help="Seconds the workload's import, factory and model check may take, before "
                   "the first trial. Python code and its waits are stopped then; native code "
                   "that never returns to Python is not.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--local-batch", type=click.IntRange(min=1, max=100_000), default=64,
              show_default=True, help="The batch per function the plans will use.")
@click.option("--epochs", type=click.IntRange(min=1, max=10**9), default=100,
              show_default=True, help="Written into the instance's workload.")
@click.option("--max-global-batch", type=click.IntRange(min=1, max=10**9), default=1024,
              show_default=True, help="Written into the instance's workload.")
@click.option("--deadline-s", "--deadline", "deadline_s", cls=AliasedOption,
              type=FiniteRange(min=1, max=1e9), default=60.0,
              show_default=True, help="Written into the instance's objective.")
@click.option("--reserve-cpus", type=click.IntRange(min=0, max=1024), default=1,
              show_default=True,
              help="Local: CPUs kept for redis-server and the launcher; the functions may use "
                   "the rest (the platform's max_vcpu).")
@click.option("--max-load", type=FiniteRange(min=0, min_open=True, max=1e6), default=None,
              help="Local: a trial with the machine's 1-minute load average above this, before "
                   "or after it, is left out of the fit (other work competed for the CPUs); "
                   "given, too few trials left is an error. [default: the machine's CPUs; "
                   "when every trial was loaded, all are kept and flagged `under_load`]")
@click.option("--redis-url", help="aws: the parameter channel the Lambda functions reach.")
@click.option("--role-arn", help="aws: execution role of the Lambda function.")
@click.option("--image-uri", help="aws: the worker's container image (see `lambdadnn image`).")
@click.option("--function-name", default="lambdadnn-profile", show_default=True)
@click.option("--region", default="us-east-1", show_default=True)
@click.option("--endpoint-url", help="aws: Lambda endpoint (e.g. a moto server for testing).")
@json_option
@friendly
def profile_command(
    workload: str, backend: str, out: Path, budget_s: float, factory_timeout_s: float,
    seed: int, local_batch: int, epochs: int, max_global_batch: int, deadline_s: float,
    reserve_cpus: int, max_load: float | None, redis_url: str | None, role_arn: str | None,
    image_uri: str | None, function_name: str, region: str, endpoint_url: str | None,
    as_json: bool,
) -> None:
    """Measure a workload with short trial runs, fit the model, write an instance YAML.

    The instance (`--out`) solves, evaluates and launches like any other; its `fit` section
    holds every parameter with its standard error, every trial with its measured and fitted
    time, and what the design could not identify.
    """
    import yaml

    from .launcher import require_extras
    from .launcher.profile import check_out, profile_workload, write_out
    from .launcher.workloads import check_workload, resolve_workload

    check_out(out)
    require_extras(backend)
    bar: Any = None

    def progress(done: int, total: int, label: str) -> None:
        nonlocal bar
        if as_json or quiet() or not sys.stderr.isatty():
            return
        if bar is None:
            bar = click.progressbar(length=total, label="profiling", file=sys.stderr,
                                    item_show_func=lambda item: item)
            bar.__enter__()
        bar.length = total
        bar.update(done - bar.pos, label)

    from .launcher.local import Interrupted

    try:
        check_workload(resolve_workload(workload), seed, timeout_s=factory_timeout_s)
        if backend == "aws":
            from .launcher.aws import profile_capacity, profile_runner

            if not (role_arn and redis_url):
                raise InstanceError(
                    "`--role-arn` and `--redis-url` are needed for the aws backend")
            capacity = profile_capacity(region=region)
            runner = profile_runner(
                workload=workload, seed=seed, function_name=function_name, role_arn=role_arn,
                image_uri=image_uri, region=region, endpoint_url=endpoint_url,
                redis_url=redis_url,
            )
        else:
            from .launcher.local import local_capacity, local_runner

            capacity = local_capacity(reserve_cpus=reserve_cpus)
            runner = local_runner(workload=workload, seed=seed)
        mapping = profile_workload(
            workload, capacity, runner, budget_s=budget_s, seed=seed, local_batch=local_batch,
            epochs=epochs, max_global_batch=max_global_batch, deadline_s=deadline_s,
            progress=progress, max_load=max_load,
        )
    except Interrupted as stop:  # a trial stopped and cleaned up: exit as `launch` does
        if bar is not None:
            bar.__exit__(None, None, None)
            bar = None
        click.echo(f"error: {stop}; nothing was written", err=True)
        sys.exit(128 + stop.signum)
    except KeyboardInterrupt:  # Ctrl-C outside a trial (the factory's check, between two)
        click.echo("error: profile stopped by SIGINT outside a trial; nothing was written",
                   err=True)
        sys.exit(128 + 2)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    text = yaml.safe_dump(mapping, sort_keys=False, width=100)
    write_out(out, f"# Written by `lambdadnn profile --workload {workload} --backend {backend}`"
                   f"\n{text}")
    if as_json:
        _emit_json({"instance": str(out), **mapping})
        return
    click.echo(_fit_text(mapping["fit"], out))


if __name__ == "__main__":
    main()
