"""The cost–deadline frontier: the cheapest plan for each deadline in a range."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.inputs import brief
from lambdadnn.solver.instance import MAX_SECONDS, load_instance
from lambdadnn.solver.pipeline import InstanceLike, solve
from lambdadnn.solver.plan import Plan

PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def deadline_range(instance: InstanceLike) -> tuple[float, float]:
    """From the fastest achievable time to four times it (or the instance's deadline if later),
    within the largest deadline the loader accepts."""
    loaded = load_instance(instance)
    fastest = solve(loaded, deadline_s=1e-9).time_s
    if not fastest < MAX_SECONDS:
        raise InstanceError(
            f"instance {brief(loaded.name)}: its fastest plan takes {fastest:.3g} s, beyond the "
            f"largest deadline ({MAX_SECONDS:,.0f} s); check its workload and profile"
        )
    return fastest, min(max(4 * fastest, loaded.objective.deadline_s), MAX_SECONDS)


def frontier(instance: InstanceLike, deadlines: Sequence[float]) -> list[Plan]:
    """One solved plan per deadline (infeasible ones included, with status `infeasible`)."""
    loaded = load_instance(instance)
    if not deadlines:
        raise InstanceError("`deadlines` must name at least one deadline")
    return [solve(loaded, deadline_s=deadline) for deadline in deadlines]


def plot_path(path: Path) -> Path:
    """Where `plot` writes for `path` (`.png` added when it has no suffix), checked so that a
    path that cannot be written fails before any solving: a PNG, PDF or SVG in an existing,
    writable folder."""
    if not path.suffix:
        path = path.with_name(f"{path.name}.png")
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise InstanceError(
            f"`--plot` must end in {', '.join(PLOT_SUFFIXES)} (or have no suffix: .png is "
            f"added), got {brief(path.name)}"
        )
    folder = path.parent
    if not folder.is_dir():
        raise InstanceError(
            f"`--plot` must be in an existing folder; {brief(str(folder), 80)} is none"
        )
    if path.is_dir() or not os.access(folder, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise InstanceError(f"`--plot` cannot write {brief(str(path), 80)}; choose another path")
    return path


def plot(plans: Sequence[Plan], path: Path) -> Path:
    """Cost against deadline (feasible plans), each change of plan labelled n × m, saved as an
    image; the path written (see `plot_path`) is returned."""
    path = plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    figure.tight_layout()  # the labels are placed in the final layout (`save_plot` keeps it)
    _label_changes(axes, feasible)
    return save_plot(figure, path)


# Where a label may sit, in order of preference: its nearest corner at (dx, dy) points from its
# point, above (dy > 0) or below, right (dx > 0) or left; all so close to the point that no
# label can be read as another point's.
LABEL_OFFSETS = ((4, 5), (4, -5), (-4, 5), (-4, -5))
MARKER_HALF_PT = 4.0  # half the side of the box kept clear around each point's marker


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


def save_plot(figure: Any, path: Path) -> Path:
    """Write `figure` to `path` (checked by `plot_path`) and close it; a write that fails
    (a full disk, a quota) leaves no truncated image behind and is one `--plot` line."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        with contextlib.suppress(OSError):
            path.unlink()
        raise InstanceError(
            f"`--plot` cannot write {brief(str(path), 80)}: {error.strerror or 'I/O error'}"
        ) from None
    finally:
        plt.close(figure)
    return path

