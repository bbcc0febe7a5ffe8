"""`frontier --plot` stays readable: no two point labels overlap, each sits inside the axes
and names a plan of the frontier, and every change of plan is labelled where room allows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lambdadnn import plot as plot_module
from lambdadnn.plot import plot_frontier
from lambdadnn.solver.frontier import deadline_range, frontier
from lambdadnn.solver.shipped import instances_folder, names

SHIPPED = sorted(names(instances_folder()))


def _rendered_labels(
    monkeypatch: pytest.MonkeyPatch, instance: str, points: int, tmp_path: Path
) -> tuple[list[Any], list[Any], Any, list[str]]:
    """The label extents as the saved image has them (after the save's own layout), with the
    axes' extent and the plans' `n×m` texts, for the CLI's default deadlines."""
    start, stop = deadline_range(instance)
    plans = frontier(instance, [start + (stop - start) * i / (points - 1)
                                for i in range(points)])
    seen: dict[str, Any] = {}
    save = plot_module.save_figure

    def capture(figure: Any, path: Path, *, option: str) -> Path:
        figure.tight_layout()  # what the save does first, so extents are the image's
        renderer = figure.canvas.get_renderer()
        figure.draw(renderer)
        axes = figure.axes[0]
        seen["labels"] = [text.get_window_extent(renderer) for text in axes.texts]
        seen["texts"] = [text.get_text() for text in axes.texts]
        seen["axes"] = axes.get_window_extent(renderer)
        return save(figure, path, option=option)

    monkeypatch.setattr(plot_module, "save_figure", capture)
    plot_frontier(plans, tmp_path / f"{instance}.png")
    shown = [f"{p.functions}×{p.memory_mb}" for p in plans if p.status == "optimal"]
    assert set(seen["texts"]) <= set(shown)
    return seen["labels"], seen["texts"], seen["axes"], shown


@pytest.mark.parametrize("points", [12, 60])
@pytest.mark.parametrize("instance", SHIPPED)
def test_no_two_labels_overlap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: str, points: int
) -> None:
    boxes, texts, axes, _ = _rendered_labels(monkeypatch, instance, points, tmp_path)
    assert boxes, "no plan is labelled"
    for i, box in enumerate(boxes):
        for j in range(i):
            assert not box.overlaps(boxes[j]), (
                f"{instance}: labels {texts[j]!r} and {texts[i]!r} overlap")
        assert axes.contains(box.x0, box.y0) and axes.contains(box.x1, box.y1), (
            f"{instance}: label {texts[i]!r} leaves the axes")


@pytest.mark.parametrize("instance", SHIPPED)
def test_every_change_of_plan_is_labelled_at_the_default_points(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: str
) -> None:
    """At the CLI's 12 deadlines there is room for each distinct plan's label, once."""
    _, texts, _, shown = _rendered_labels(monkeypatch, instance, 12, tmp_path)
    distinct = list(dict.fromkeys(shown))
    assert sorted(texts) == sorted(distinct)
