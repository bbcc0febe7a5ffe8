"""A Gantt-style figure of a `solve_many` schedule: the functions in use against the limit, and
when each job runs against its due time (`lambdadnn solve-many --plot`)."""

from __future__ import annotations

from pathlib import Path

from lambdadnn.solver.capacity import Capacity
from lambdadnn.solver.frontier import plot_path, save_plot
from lambdadnn.solver.schedule import Schedule

MAX_LABELLED_JOBS = 40  # beyond this the job axis is numbered by matplotlib, not labelled


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


def _label(index: int, name: str) -> str:
    """A job's axis label; a `$` in its name is text, not the start of mathtext."""
    return f"#{index} {shown(name, 24)}".replace("$", r"\$")


def plot_schedule(schedule: Schedule, path: Path) -> Path:
    """Draw `schedule` to `path` (a .png, .pdf or .svg; checked as `frontier.plot_path` does)
    and return the path written.

    Top: functions in use over time, with the concurrency limit dashed. Bottom: one bar per
    job from its start to its finish (green when it meets its deadline, red when it misses), a
    thin line from its submission to its start (waiting) and a tick at its due time.
    """
    path = plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        lanes.set_yticks(list(rows), [_label(job.index, job.name) for job in jobs],
                         fontsize=7)
    lanes.invert_yaxis()  # job 0 on top, as in the table
    lanes.set(xlabel="time (s)", ylabel="job")
    lanes.grid(axis="x", alpha=0.3)
    lanes.legend(loc="lower right", fontsize=8)
    return save_plot(figure, path)
