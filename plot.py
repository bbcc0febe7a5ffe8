"""Every figure lambdadnn draws: the cost–deadline frontier, a schedule's Gantt chart, a
comparison's CDFs and a sweep's met share and cost.

It draws what the solver and the simulator return, and only the CLI calls it, so neither
layer needs matplotlib. matplotlib is the optional extra `lambdadnn[plot]` and is imported
only when a figure is drawn; `plot_path` and `plot_folder`, which every `--plot` and
`--plot-dir` goes through before any work, say in one line when it is missing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .inputs.errors import InputError, LambdaDnnError
from .inputs.files import brief
from .simulator.truth import Truth
from .solver.capacity import Capacity

if TYPE_CHECKING:
    from .models.noise import NoiseModel
    from .simulator.pool import JobOutcome
    from .solver.plan import Plan
    from .solver.schedule import Schedule

PLOT_EXTRA = "pip install 'lambdadnn[plot]'"
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
MAX_LABELLED_JOBS = 40  # beyond this the job axis is numbered by matplotlib, not labelled
# Where a frontier label may sit, in order of preference: its nearest corner at (dx, dy)
# points from its point, above (dy > 0) or below, right (dx > 0) or left; all so close to the
# point that no label can be read as another point's.
LABEL_OFFSETS = ((4, 5), (4, -5), (-4, 5), (-4, -5))
MARKER_HALF_PT = 4.0  # half the side of the box kept clear around each point's marker


class PlotError(InputError):
    """Where a figure was asked for cannot take it: a bad `--plot` path or `--plot-dir`
    folder, or a write that failed."""


class MissingPlotExtraError(LambdaDnnError):
    """A figure was asked for but matplotlib, the extra `lambdadnn[plot]`, is not installed."""


def require_matplotlib(option: str) -> None:
    """One line naming the extra when matplotlib is missing, before any work is done."""
    try:
        found = find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a broken parent package, or a module set to None
        found = False
    if not found:
        raise MissingPlotExtraError(f"`{option}` needs matplotlib: {PLOT_EXTRA}")


def plot_path(path: Path) -> Path:
    """Where a `--plot` figure goes for `path` (`.png` added when it has no suffix), checked
    so that a path that cannot be written fails before any solving: a PNG, PDF or SVG in an
    existing, writable folder."""
    require_matplotlib("--plot")
    if not path.suffix:
        path = path.with_name(f"{path.name}.png")
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise PlotError(
            f"`--plot` must end in {', '.join(PLOT_SUFFIXES)} (or have no suffix: .png is "
            f"added), got {brief(path.name)}"
        )
    folder = path.parent
    if not folder.is_dir():
        raise PlotError(
            f"`--plot` must be in an existing folder; {brief(str(folder), 80)} is none"
        )
    if path.is_dir() or not os.access(folder, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise PlotError(f"`--plot` cannot write {brief(str(path), 80)}; choose another path")
    return path


def plot_folder(folder: Path) -> Path:
    """`folder` for `--plot-dir`, created if need be and writable: checked before a
    simulation runs, so a bad folder never costs the whole simulation."""
    require_matplotlib("--plot-dir")
    quoted = brief(str(folder), 80)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PlotError(f"`--plot-dir` {quoted} is a file; give a folder") from None
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "unusable"
        raise PlotError(
            f"`--plot-dir` {quoted} cannot be created ({reason}); give a folder you can write to"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PlotError(f"`--plot-dir` {quoted} is not writable; give a folder you can write to")
    return folder


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display is ever needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, *, option: str) -> Path:
    """Write `figure` to `path` and close it; a write that fails (a full disk, a quota, a
    folder made read-only meanwhile) leaves no truncated image behind and is one line naming
    `option`."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        with contextlib.suppress(OSError):
            path.unlink()
        raise PlotError(
            f"`{option}` cannot write {brief(str(path), 80)}: {error.strerror or 'I/O error'}"
        ) from None
    finally:
        plt.close(figure)
    return path


# --- the frontier (`lambdadnn frontier --plot`) ------------------------------------------


def plot_frontier(plans: Sequence[Plan], path: Path) -> Path:
    """Cost against deadline (feasible plans), each change of plan labelled n × m, saved as an
    image; the path written (see `plot_path`) is returned."""
    path = plot_path(path)
    plt = _pyplot()
    feasible = [plan for plan in plans if plan.status == "optimal"]
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    axes.step(
        [p.deadline_s for p in feasible], [p.cost_usd for p in feasible], where="post",
        marker="o", color="tab:blue", label="cheapest plan meeting the deadline",
    )
    name = plans[0].instance if plans else ""
    title = f"{name}: cost of meeting a deadline"
    axes.set(xlabel="deadline (s)", ylabel="cost (USD)", title=title)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right")
    axes.margins(x=0.08, y=0.08)  # room for the labels of the first and last points
    figure.tight_layout()  # the labels are placed in the final layout (`save_figure` keeps it)
    _label_changes(axes, feasible)
    return save_figure(figure, path, option="--plot")


def _label_changes(axes: Any, plans: Sequence[Plan]) -> None:
    """Label the first point of each plan along the frontier (where the plan changes; repeating
    the label at every deadline it holds for only crowds the figure). Each label takes the first
    offset in `LABEL_OFFSETS` at which its rendered text stays inside the axes and clear of the
    legend, every marker and every label placed before it; one with no room is left out (the
    table and `--json` list every plan)."""
    from matplotlib.transforms import Bbox

    renderer = axes.figure.canvas.get_renderer()
    axes.figure.draw(renderer)  # the final limits and layout, so extents are the image's
    inside = axes.get_window_extent(renderer)
    half = MARKER_HALF_PT * axes.figure.dpi / 72
    points = [axes.transData.transform((p.deadline_s, p.cost_usd)) for p in plans]
    taken = [axes.get_legend().get_window_extent(renderer)]
    taken += [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in points]
    previous = None
    for plan in plans:
        if (plan.functions, plan.memory_mb) == previous:
            continue
        previous = (plan.functions, plan.memory_mb)
        for dx, dy in LABEL_OFFSETS:
            label = axes.annotate(
                f"{plan.functions}×{plan.memory_mb}", (plan.deadline_s, plan.cost_usd),
                textcoords="offset points", xytext=(dx, dy), fontsize=7,
                ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top",
            )
            label.set_in_layout(False)  # the save's layout must not move the axes under it
            box = label.get_window_extent(renderer)
            if (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1)
                    and not any(box.overlaps(other) for other in taken)):
                taken.append(box)
                break
            label.remove()


# --- a schedule (`lambdadnn solve-many --plot`) ------------------------------------------


def usage(schedule: Schedule) -> tuple[list[float], list[int]]:
    """The functions in use over time as a step function: `used[i]` from `times[i]` on.

    The jobs are laid onto an unbounded `Capacity`, so each is held exactly where the schedule
    starts it, with the pool's own rule that a job ending as another starts does not overlap it.
    """
    pool = Capacity(sum(job.functions for job in schedule.jobs))
    for job in schedule.jobs:
        pool.take(job.start_s, job.functions, job.time_s)
    return pool.times.tolist(), pool.used.tolist()


def shown(name: str, width: int) -> str:
    """A job's name as one short line, for the table and the chart: unprintable characters
    (a tab or newline in a file name) shown as `?`, cut to `width` characters."""
    text = "".join(char if char.isprintable() else "?" for char in name)
    return text if len(text) <= width else f"{text[:width - 1]}…"


def _job_label(index: int, name: str) -> str:
    """A job's axis label; a `$` in its name is text, not the start of mathtext."""
    return f"#{index} {shown(name, 24)}".replace("$", r"\$")


def plot_schedule(schedule: Schedule, path: Path) -> Path:
    """Draw `schedule` to `path` (a .png, .pdf or .svg; checked by `plot_path`) and return
    the path written.

    Top: functions in use over time, with the concurrency limit dashed. Bottom: one bar per
    job from its start to its finish (green when it meets its deadline, red when it misses), a
    thin line from its submission to its start (waiting) and a tick at its due time.
    """
    path = plot_path(path)
    plt = _pyplot()
    jobs = schedule.jobs
    height = 2.5 + min(len(jobs), MAX_LABELLED_JOBS) * 0.22
    figure, (pool, lanes) = plt.subplots(
        2, 1, sharex=True, figsize=(9, 2.5 + height), dpi=120,
        gridspec_kw={"height_ratios": [2.5, height]},
    )
    times, used = usage(schedule)
    end = max([job.finish_s for job in jobs] + [job.due_s for job in jobs] + [times[-1]])
    pool.step([*times, end], [*used, used[-1]], where="post", color="tab:blue",
              label="functions in use")
    pool.axhline(schedule.concurrency, color="black", linestyle="--", linewidth=1,
                 label=f"concurrency limit ({schedule.concurrency:,})")
    pool.set(ylabel="functions", ylim=(0, schedule.concurrency * 1.4),
             title=rf"{len(jobs)} jobs, {schedule.status}: \${schedule.total_cost_usd:,.4f}, "
                   f"{len(schedule.missed)} missed")
    pool.yaxis.get_major_locator().set_params(integer=True)  # functions are whole
    pool.grid(alpha=0.3)
    pool.legend(loc="upper right", fontsize=8)
    rows = range(len(jobs))
    lanes.hlines(rows, [job.submit_s for job in jobs], [job.start_s for job in jobs],
                 color="0.6", linewidth=1)
    lanes.barh(rows, [job.time_s for job in jobs], left=[job.start_s for job in jobs],
               height=0.6, color=["tab:green" if job.met else "tab:red" for job in jobs])
    lanes.scatter([job.due_s for job in jobs], rows, marker="|", s=120, color="black",
                  linewidths=1, zorder=3, label="due time")
    if len(jobs) <= MAX_LABELLED_JOBS:
        lanes.set_yticks(list(rows), [_job_label(job.index, job.name) for job in jobs],
                         fontsize=7)
    lanes.invert_yaxis()  # job 0 on top, as in the table
    lanes.set(xlabel="time (s)", ylabel="job")
    lanes.grid(axis="x", alpha=0.3)
    lanes.legend(loc="lower right", fontsize=8)
    return save_figure(figure, path, option="--plot")


# --- a comparison (`lambdadnn compare --plot-dir`) ---------------------------------------


def plot_comparison(results: Mapping[str, Sequence[JobOutcome]], folder: Path) -> list[Path]:
    """Two PNGs: the CDF of cost per job, and (completion − submission) ÷ deadline per job."""
    plot_folder(folder)
    costs = {name: [o.cost_usd + o.exploration_cost_usd for o in outcomes]
             for name, outcomes in results.items()}
    lateness = {name: [(o.end_time_s - o.submit_time_s) / o.deadline_s
                       for o in outcomes if o.status == "ok"]
                for name, outcomes in results.items()}
    return [
        _cdf_plot(costs, folder / "cost_cdf.png", title="CDF of cost per job",
                  xlabel="cost per job (USD, exploration included)"),
        _cdf_plot(lateness, folder / "time_vs_deadline.png", deadline_line=True,
                  title="Simulated time against the deadline",
                  xlabel="(completion − submission) ÷ deadline (right of the line: missed)"),
    ]


def _cdf_plot(
    series: Mapping[str, Sequence[float]], path: Path, *, xlabel: str, title: str,
    deadline_line: bool = False,
) -> Path:
    """One step CDF per strategy on a log x-axis, saved as a PNG."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, values in series.items():
        ordered = np.sort(np.asarray(values, dtype=np.float64))
        share = np.arange(1, len(ordered) + 1) / max(1, len(ordered))
        axes.step(ordered, share, where="post", label=name)
    if deadline_line:
        axes.axvline(1.0, color="black", linestyle="--", linewidth=1)
    axes.set(xscale="log", xlabel=xlabel, ylabel="share of jobs", title=title)
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(figure, path, option="--plot-dir")


# --- a sweep (`lambdadnn sweep --plot-dir`) ----------------------------------------------


def _reference_value(key: str, noise: NoiseModel) -> float | None:
    """Where the unperturbed truth sits on `key`'s axis: the field's default (a scale), the
    belief's own figure for a noise key, or None (`saturates_at_mb`: no saturation)."""
    default = next(f.default for f in fields(Truth) if f.name == key)
    if isinstance(default, float):
        return default
    probe = Truth(**{key: 12.5}).noise(noise)  # the one noise field this key replaces
    changed = [f.name for f in fields(noise) if getattr(probe, f.name) != getattr(noise, f.name)]
    return float(getattr(noise, changed[0])) if changed else None


def plot_sweep(aggregates: Sequence[dict[str, Any]], folder: Path, noise: NoiseModel) -> list[Path]:
    """Per rate, one PNG per perturbation key: met share and mean cost against the key's
    value, and one for the worlds: met share and mean cost per world; a line per strategy,
    error bars the 95% Wilson interval for the share and the t interval over seeds for the
    cost. When several rates are swept, the met share against the arrival rate under the
    reference truth. `aggregates` are `simulator.sweep.aggregate`'s rows."""
    plot_folder(folder)
    plt = _pyplot()
    names = list(dict.fromkeys(row["strategy"] for row in aggregates))
    rates = list(dict.fromkeys(row["rate_per_s"] for row in aggregates))
    keys = list(dict.fromkeys(key for row in aggregates for key in row.get("truth", {})))
    worlds = list(dict.fromkeys(row["world"] for row in aggregates if "world" in row))
    written: list[Path] = []

    def bars(rows: list[dict[str, Any]], metric: str) -> tuple[list[float], list[list[float]]]:
        """Values and error bars: a share pooled over jobs with its Wilson interval, another
        figure's mean with its t interval (none for one seed)."""
        values, spread = [], []
        for row in rows:
            entry = row[metric]
            if "wilson_ci95" in entry:
                value, (low, high) = entry["pooled"], entry["wilson_ci95"]
            else:
                value = entry["mean"]
                low, high = entry["ci95"] or (value, value)
            values.append(value)
            spread.append([value - low, high - value])
        return values, [list(pair) for pair in zip(*spread, strict=True)]

    def save(figure: Any, path: Path) -> None:
        written.append(save_figure(figure, path, option="--plot-dir"))

    def draw(axes: tuple[Any, Any], x: Sequence[Any], rows: list[dict[str, Any]],
             name: str) -> None:
        for side, metric in zip(axes, ("deadline_met", "mean_cost_usd"), strict=True):
            values, errors = bars(rows, metric)
            side.errorbar(x, values, yerr=errors, marker="o", capsize=3, label=name)

    def finish(axes: tuple[Any, Any], path: Path, figure: Any) -> None:
        axes[0].set_ylim(-0.02, 1.02)
        for side in axes:
            side.grid(alpha=0.3)
        axes[0].legend(fontsize="small")
        save(figure, path)

    for rate in rates:
        suffix = "" if len(rates) == 1 else f"_rate{rate:g}"
        for key in keys:
            reference = _reference_value(key, noise)
            figure, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
            for name in names:
                rows = [row for row in aggregates if row["strategy"] == name
                        and row["rate_per_s"] == rate and "truth" in row
                        and set(row["truth"]) <= {key}]
                points = sorted(
                    ((row["truth"].get(key, reference), row) for row in rows
                     if key in row["truth"] or reference is not None),
                    key=lambda pair: pair[0],
                )
                draw(axes, [value for value, _ in points], [row for _, row in points], name)
            where = "" if reference is not None else " (as believed: not shown, no saturation)"
            axes[0].set(xlabel=f"truth {key}{where}", ylabel="deadlines met (share of jobs)",
                        title=f"Deadlines met against {key}")
            axes[1].set(xlabel=f"truth {key}", ylabel="mean cost per job (USD)",
                        title=f"Cost against {key}")
            finish(axes, folder / f"truth_{key}{suffix}.png", figure)
        if worlds:
            figure, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
            for name in names:
                by_world = {row["world"]: row for row in aggregates if row["strategy"] == name
                            and row["rate_per_s"] == rate and "world" in row}
                present = [world for world in worlds if world in by_world]
                draw(axes, present, [by_world[world] for world in present], name)
            axes[0].set(xlabel="world", ylabel="deadlines met (share of jobs)",
                        title="Deadlines met per world")
            axes[1].set(xlabel="world", ylabel="mean cost per job (USD)",
                        title="Cost per world")
            finish(axes, folder / f"worlds{suffix}.png", figure)
    if len(rates) > 1 and any(row.get("truth") == {} for row in aggregates):
        figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
        for name in names:
            rows = sorted((row for row in aggregates
                           if row["strategy"] == name and row.get("truth") == {}),
                          key=lambda row: row["rate_per_s"])
            values, errors = bars(rows, "deadline_met")
            axes.errorbar([row["rate_per_s"] for row in rows], values, yerr=errors, marker="o",
                          capsize=3, label=name)
        axes.set_ylim(-0.02, 1.02)
        axes.set(xscale="log", xlabel="arrival rate (jobs/s)", ylabel="deadlines met",
                 title="Deadlines met against the arrival rate (truth as believed)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        save(figure, folder / "met_vs_rate.png")
    return written
