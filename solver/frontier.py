"""The cost–deadline frontier: the cheapest plan for each deadline in a range."""

from __future__ import annotations

from collections.abc import Sequence

from ..inputs.files import brief
from .errors import InstanceError
from .instance import MAX_SECONDS
from .instance_yaml import load_instance
from .pipeline import InstanceLike, fastest, solve
from .plan import Plan


def deadline_range(instance: InstanceLike) -> tuple[float, float]:
    """From the fastest achievable time to four times it (or the instance's deadline if later),
    within the largest deadline the loader accepts."""
    loaded = load_instance(instance)
    fastest_s = fastest(loaded).time_s
    if not fastest_s < MAX_SECONDS:
        raise InstanceError(
            f"instance {brief(loaded.name)}: its fastest plan takes {fastest_s:.3g} s, beyond the "
            f"largest deadline ({MAX_SECONDS:,.0f} s); check its workload and profile"
        )
    return fastest_s, min(max(4 * fastest_s, loaded.objective.deadline_s), MAX_SECONDS)


def frontier(instance: InstanceLike, deadlines: Sequence[float]) -> list[Plan]:
    """One solved plan per deadline (infeasible ones included, with status `infeasible`)."""
    loaded = load_instance(instance)
    if not deadlines:
        raise InstanceError("`deadlines` must name at least one deadline")
    return [solve(loaded, deadline_s=deadline) for deadline in deadlines]
