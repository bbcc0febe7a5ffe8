"""The truth: what each key changes in the world the engine runs, and nothing else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import InputError, Instance, NoiseModel, load_instance
from lambdadnn.models import performance
from lambdadnn.simulator.truth import TRUTH_KEYS, Truth

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = load_instance(ROOT / "instances" / "mobilenet-cifar10.yaml")
MEMORY = np.array([512.0, 1769.0, 3008.0, 6000.0, 10240.0])


def _figures(instance: Instance, names: tuple[str, ...]) -> dict[str, performance.Array]:
    values = instance.values()
    return performance.figures(values, 4.0, MEMORY, names)


def test_the_default_truth_is_the_belief() -> None:
    assert Truth().instance(MOBILENET) is MOBILENET
    noise = NoiseModel(compute_cv=0.3)
    assert Truth().noise(noise) is noise
    assert Truth().changed() == {} and Truth().label() == "as believed"


@settings(max_examples=60, deadline=None)
@given(st.floats(0.1, 5.0))
def test_rate_scale_scales_the_rate_at_every_memory(scale: float) -> None:
    """Property: R_truth(m) = scale · R_belief(m) at every m (numpy as the oracle)."""
    believed = _figures(MOBILENET, ("rate",))["rate"]
    true = _figures(Truth(rate_scale=scale).instance(MOBILENET), ("rate",))["rate"]
    np.testing.assert_allclose(true, scale * believed, rtol=1e-12)


def test_saturation_caps_the_rate_beyond_it() -> None:
    believed = _figures(MOBILENET, ("rate",))["rate"]
    true = _figures(Truth(saturates_at_mb=3008).instance(MOBILENET), ("rate",))["rate"]
    below = MEMORY <= 3008
    np.testing.assert_allclose(true[below], believed[below])
    np.testing.assert_allclose(true[~below], believed[MEMORY == 3008][0])


def test_bandwidth_scale_scales_every_bandwidth() -> None:
    names = ("storage_bandwidth", "t_comm_total", "t_load")
    believed = _figures(MOBILENET, names)
    true = _figures(Truth(bandwidth_scale=0.5).instance(MOBILENET), names)
    np.testing.assert_allclose(true["storage_bandwidth"], 0.5 * believed["storage_bandwidth"])
    np.testing.assert_allclose(true["t_comm_total"], 2 * believed["t_comm_total"])
    np.testing.assert_allclose(true["t_load"], 2 * believed["t_load"])


def test_startup_scale_scales_what_each_round_pays() -> None:
    profile = dataclasses.replace(
        MOBILENET.profile,
        startup=dataclasses.replace(MOBILENET.profile.startup, base_s=4.0, per_function_s=0.5),
    )
    instance = dataclasses.replace(MOBILENET, profile=profile)
    true = Truth(startup_scale=3.0).instance(instance)
    assert (true.profile.startup.base_s, true.profile.startup.per_function_s) == (12.0, 1.5)
    assert true.platform.restart_overhead_s == 3 * instance.platform.restart_overhead_s
    assert true.profile.rate == instance.profile.rate  # nothing else moves


def test_noise_keys_replace_the_noise() -> None:
    truth = Truth(compute_cv=0.2, comm_cv=0.1, cold_start_median_s=2.0, failure_rate_per_h=0.1)
    noise = truth.noise(NoiseModel(checkpoint_every=7))
    assert noise == NoiseModel(compute_cv=0.2, bandwidth_cv=0.1, cold_start_median_s=2.0,
                               failure_rate_per_hour=0.1, checkpoint_every=7)
    assert truth.instance(MOBILENET) == MOBILENET  # the noise keys leave the instance alone


def test_parse_and_of_agree() -> None:
    parsed = Truth.parse(["rate_scale=0.8", "compute_cv=0.2"])
    assert parsed == Truth.of({"rate_scale": 0.8, "compute_cv": 0.2})
    assert parsed == Truth.of(["rate_scale=0.8", "compute_cv=0.2"]) == Truth.of(parsed)
    assert parsed.changed() == {"rate_scale": 0.8, "compute_cv": 0.2}
    assert Truth.of(None) == Truth()
    assert set(TRUTH_KEYS) == {"rate_scale", "saturates_at_mb", "bandwidth_scale",
                               "startup_scale", "compute_cv", "comm_cv", "cold_start_median_s",
                               "failure_rate_per_h"}


@pytest.mark.parametrize(("value", "says"), [
    (["rate_scale=1", "rate_scale=2"], "twice"),
    (["=1"], "KEY=VALUE"),
    ({"speed": 1.0}, "no key 'speed'"),
    ({"rate_scale": -1.0}, "`truth.rate_scale` must be a number > 0"),
    ({"saturates_at_mb": 0.0}, "`truth.saturates_at_mb`"),
    ({"failure_rate_per_h": float("inf")}, "`truth.failure_rate_per_h`"),
    ({"compute_cv": True}, "`truth.compute_cv`"),
    (3, "`truth` must be"),
])
def test_bad_truths_name_the_key(value: object, says: str) -> None:
    with pytest.raises(InputError, match=says) as caught:
        Truth.of(value)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
