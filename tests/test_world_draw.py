"""Random worlds (simulator/world/draw.py): reproducible, valid, and spanning their effects."""

from __future__ import annotations

import numpy as np

from lambdadnn.simulator.world import World
from lambdadnn.simulator.world.draw import random_world

EFFECTS = ("cpu", "stragglers", "ps", "bandwidth", "cold_start", "startup", "crashes",
           "measurement")


def test_a_seed_gives_the_same_world() -> None:
    first = random_world(np.random.default_rng(7), "w")
    again = random_world(np.random.default_rng(7), "w")
    assert first == again and isinstance(first, World) and first.name == "w"


def test_every_effect_is_on_in_some_worlds_and_off_in_others() -> None:
    """Over 64 seeds each effect is on in some and off in others, at levels in its range."""
    worlds = [random_world(np.random.default_rng(seed)) for seed in range(64)]
    for effect in EFFECTS:
        on = sum(getattr(world, effect) is not None for world in worlds)
        assert 0 < on < len(worlds), effect
    fractions = [w.cpu.parallel_fraction for w in worlds if w.cpu is not None]
    assert all(0.05 <= f <= 1.0 for f in fractions) and min(fractions) < 0.5
