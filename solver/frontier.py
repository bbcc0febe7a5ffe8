"""The cost–deadline frontier: the cheapest plan for each deadline in a range."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance import load_instance
from lambdadnn.solver.pipeline import InstanceLike, solve
from lambdadnn.solver.plan import Plan


def deadline_range(instance: InstanceLike) -> tuple[float, float]:
    """From the fastest achievable time to four times it (or the instance's deadline if later)."""
    loaded = load_instance(instance)
    fastest = solve(loaded, deadline_s=1e-9).time_s
    return fastest, max(4 * fastest, loaded.objective.deadline_s)


def frontier(instance: InstanceLike, deadlines: Sequence[float]) -> list[Plan]:
    """One solved plan per deadline (infeasible ones included, with status `infeasible`)."""
    loaded = load_instance(instance)
    if not deadlines:
        raise InstanceError("`deadlines` must name at least one deadline")
    return [solve(loaded, deadline_s=deadline) for deadline in deadlines]


def plot(plans: Sequence[Plan], path: Path) -> None:
    """Cost against deadline (feasible plans), annotated with n × m, saved as an image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feasible = [plan for plan in plans if plan.status == "optimal"]
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    axes.step(
        [p.deadline_s for p in feasible], [p.cost_usd for p in feasible], where="post",
        marker="o", color="tab:blue", label="cheapest plan meeting the deadline",
    )
    for plan in feasible:
        axes.annotate(
            f"{plan.functions}×{plan.memory_mb}", (plan.deadline_s, plan.cost_usd),
            textcoords="offset points", xytext=(4, 6), fontsize=7,
        )
    name = plans[0].instance if plans else ""
    title = f"{name}: cost of meeting a deadline"
    axes.set(xlabel="deadline (s)", ylabel="cost (USD)", title=title)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        raise InstanceError(f"`--plot` cannot write {str(path)!r}: {error.strerror}") from None
    finally:
        plt.close(figure)

