"""Random worlds: each effect on with probability ½, at a level drawn from a plausible range.

The ranges (docs/WORLD.md, "Random worlds") span the named worlds and past them: a CPU whose
extra vCPUs help from not at all to fully, stragglers from a mild scatter to a heavy Pareto
tail, a PS NIC from 600 MB/s to 2 GB/s, bandwidth from half to 1.2× the profile's with AR(1)
drift, cold starts up to 3 s plus image size, start-up up to 10 s a round, crashes up to 5 per
function-hour, and up to 10% measurement noise. A planner evaluated on them meets worlds
nobody tuned it for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import World

__all__ = ["random_world"]

ON = 0.5  # the probability that each effect is on


def random_world(rng: np.random.Generator, name: str = "random") -> World:
    """One world drawn with `rng` (module docstring)."""
    mapping: dict[str, Any] = {"name": name, "description": "drawn by simulator.world.draw"}

    def on() -> bool:
        return bool(rng.random() < ON)

    def uniform(low: float, high: float) -> float:
        return float(rng.uniform(low, high))

    if on():
        mapping["cpu"] = {"mb_per_vcpu": 1769, "max_vcpu": 6,
                          "parallel_fraction": uniform(0.05, 1.0)}
    if on():
        mapping["stragglers"] = {"cv": uniform(0.05, 0.4), "tail": {
            "kind": "pareto", "shape": uniform(1.5, 3.0), "share": uniform(0.0, 0.05)}}
    if on():
        mapping["ps"] = {"nic_mbps": uniform(600.0, 2000.0),
                         "per_message_ms": uniform(0.0, 3.0),
                         "service": "fifo" if on() else "fair"}
    if on():
        mapping["bandwidth"] = {"scale": uniform(0.5, 1.2), "drift": {
            "kind": "ar1", "sd": uniform(0.05, 0.4), "period_s": uniform(30.0, 180.0)}}
    if on():
        mapping["cold_start"] = {"base_s": uniform(0.0, 3.0), "per_gb_s": uniform(0.0, 0.3),
                                 "cv": 0.3}
    if on():
        mapping["startup"] = {"base_s": uniform(0.0, 10.0),
                              "per_function_s": uniform(0.0, 0.2)}
    if on():
        mapping["crashes"] = {"rate_per_h": uniform(0.0, 5.0)}
    if on():
        mapping["measurement"] = {"cv": uniform(0.0, 0.1)}
    return World.from_mapping(mapping, source=name)
