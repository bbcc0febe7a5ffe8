"""World files: hostile YAML is refused in one line naming the dotted field; shipped worlds load.

A world file comes from a user (`--truth-file`), so every way it can be wrong must end in one
`WorldError` that names the field in backticks, shows the value and says what to do, never a
traceback or a silently ignored key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn.simulator.world import (
    Bandwidth,
    ColdStart,
    Cpu,
    Crashes,
    Drift,
    Measurement,
    Persistent,
    PlatformRamp,
    Ps,
    Startup,
    Stragglers,
    Tail,
    World,
    WorldError,
)

WORLDS = Path(__file__).resolve().parent.parent / "instances" / "worlds"
NAMED = ("nominal", "saturating", "slow-start", "degraded", "straggler-tail", "crashy",
         "drifting", "lambda-2024")


def refused(text: str, tmp_path: Path) -> str:
    """The one-line message of the `WorldError` a world file of `text` raises."""
    path = tmp_path / "world.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(WorldError) as error:
        World.load(path)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "field", "shown"),
    [
        ("cpuu: {parallel_fraction: 0.5}", "cpuu", "fields here are"),
        ("cpu: {parallel_fraction: 0.5, mb_per_cpu: 1769}", "cpu.mb_per_cpu", "`mb_per_vcpu`"),
        ("stragglers: {tail: {shape: 2, share: 0.1, sahre: 1}}", "stragglers.tail.sahre", ""),
        ("crashes: {rate_per_h: -1}", "crashes.rate_per_h", "-1"),
        ("checkpoint_s: -0.5", "checkpoint_s", "-0.5"),
        ("stragglers: {cv: .nan}", "stragglers.cv", "nan"),
        ("bandwidth: {scale: .inf}", "bandwidth.scale", "inf"),
        ("measurement: {cv: true}", "measurement.cv", "True"),
        ("ps: {nic_mbps: fast}", "ps.nic_mbps", "'fast'"),
        ("ps: 5", "ps", "5"),
        ("ps: [1200, 2]", "ps", "a list"),
        ("cpu:", "cpu", "None"),
        ("ps: {nic_mbps: 1200, service: lifo}", "ps.service", "'lifo'"),
        ("stragglers: {tail: {shape: 2, share: 1.5}}", "stragglers.tail.share", "1.5"),
        ("stragglers: {tail: {shape: 1, share: 0.1}}", "stragglers.tail.shape", "1"),
        ("stragglers: {tail: {shape: 0.5, share: 0.1}}", "stragglers.tail.shape", "0.5"),
        ("stragglers: {tail: {shape: 2, share: 0.1, kind: lognormal}}", "stragglers.tail.kind",
         "'lognormal'"),
        ("stragglers: {persistent: {share: 0.1, slowdown: 0.5}}",
         "stragglers.persistent.slowdown", "0.5"),
        ("bandwidth: {drift: {sd: 0.3, period_s: 60, kind: ar2}}", "bandwidth.drift.kind",
         "'ar2'"),
        ("bandwidth: {drift: {sd: 0.3, period_s: 60, rho: 1.5}}", "bandwidth.drift.rho", "1.5"),
        ("cpu: {}", "cpu.parallel_fraction", "missing"),
        ("bandwidth: {drift: {sd: 0.3}}", "bandwidth.drift.period_s", "missing"),
        ("platform_ramp: {burst: 1000.5, per_10s: 500}", "platform_ramp.burst", "1000.5"),
        ("platform_ramp: {burst: 0, per_10s: 500}", "platform_ramp.burst", "0"),
        ("cold_start: {base_s: 1.0e+400}", "cold_start.base_s", "inf"),
        ("cold_start: {base_s: 1" + "0" * 400 + "}", "cold_start.base_s", "1000"),
        ("startup: {base_s: 1e300}", "startup.base_s", "'1e300'"),  # YAML 1.1: a string
        ("crashes: {rate_per_h: 1, checkpoint_every_s: 0}", "crashes.checkpoint_every_s", "0"),
        ("name: 5", "name", "5"),
        ("name: '   '", "name", "'   '"),
        ("description: [a, b]", "description", "a list"),
        ("cpu: {parallel_fraction: 0.5, source: 7}", "cpu.source", "7"),
        ("7: {cv: 0.1}", "7", "fields here are"),
    ],
)
def test_hostile_fields_are_named(text: str, field: str, shown: str, tmp_path: Path) -> None:
    message = refused(text, tmp_path)
    assert f"`{field}`" in message
    assert shown in message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- cpu\n- ps\n", "must be a mapping of effects"),
        ("", "must be a mapping of effects"),
        ("cpu: {parallel_fraction: [", "not valid YAML"),
        ("a: &a [*a, *a]\n", "not a world field"),
        ("cold_start: {base_s: 1" + "0" * 5000 + "}", "huge integer"),
    ],
)
def test_hostile_files_are_refused_in_one_line(text: str, says: str, tmp_path: Path) -> None:
    assert says in refused(text, tmp_path)


def test_a_missing_file_or_a_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(WorldError, match="does not exist"):
        World.load(tmp_path / "nowhere.yaml")
    with pytest.raises(WorldError, match="not a regular file"):
        World.load(tmp_path)


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 21), encoding="utf-8")
    with pytest.raises(WorldError, match="bytes"):
        World.load(path)


def test_the_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "my-world.yaml"
    path.write_text("checkpoint_s: 2\n", encoding="utf-8")
    world = World.load(path)
    assert (world.name, world.checkpoint_s, world.effects()) == ("my-world", 2.0,
                                                                 ("checkpoint_s",))


def test_the_default_world_has_no_effect() -> None:
    world = World()
    assert world.effects() == ()
    assert world.label() == "nominal (no effect)"
    assert World.from_mapping({}, source="nominal") == world


@pytest.mark.parametrize("name", NAMED)
def test_every_named_world_ships(name: str) -> None:
    path = WORLDS / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert raw["name"] == name and raw["description"] and raw["source"]
    world = World.load(path)
    for effect in world.effects():
        if effect != "checkpoint_s":
            assert getattr(world, effect).source, f"{name}: `{effect}` has no source"


@pytest.mark.parametrize("path", sorted(WORLDS.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_shipped_world_loads_and_round_trips(path: Path) -> None:
    world = World.load(path)
    assert world.name == path.stem
    assert World.from_mapping(world.to_mapping()) == world
    text = yaml.safe_dump(world.to_mapping(), allow_unicode=True)
    assert World.from_mapping(yaml.safe_load(text)) == world


def finite(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


text = st.text(st.characters(codec="utf-8", categories=("L", "N", "Zs")), max_size=20)
worlds = st.builds(
    World,
    name=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=10),
    description=text,
    cpu=maybe(st.builds(Cpu, parallel_fraction=finite(0, 1), mb_per_vcpu=finite(1, 1e4),
                        max_vcpu=finite(0.01, 64), profiled_mb=finite(1, 1e4), source=text)),
    ps=maybe(st.builds(Ps, nic_mbps=finite(0.5, 1e4), per_message_ms=finite(0, 10),
                       service=st.sampled_from(("fifo", "fair")))),
    stragglers=maybe(st.builds(
        Stragglers, cv=finite(0, 2),
        tail=maybe(st.builds(Tail, shape=finite(1.01, 10), share=finite(0, 1))),
        persistent=maybe(st.builds(Persistent, share=finite(0, 1), slowdown=finite(1, 10))),
    )),
    bandwidth=maybe(st.builds(
        Bandwidth, scale=finite(0.01, 10),
        drift=maybe(st.builds(Drift, sd=finite(0, 1), period_s=finite(1, 1e4),
                              rho=finite(0, 1))),
    )),
    cold_start=maybe(st.builds(ColdStart, base_s=finite(0, 10), cv=finite(0, 1))),
    startup=maybe(st.builds(Startup, base_s=finite(0, 10), per_function_s=finite(0, 1))),
    platform_ramp=maybe(st.builds(PlatformRamp, burst=st.integers(1, 5000),
                                  per_10s=st.integers(1, 5000))),
    crashes=maybe(st.builds(Crashes, rate_per_h=finite(0, 10),
                            checkpoint_every_s=finite(1, 1e4))),
    measurement=maybe(st.builds(Measurement, cv=finite(0, 1))),
    checkpoint_s=finite(0, 10),
)


@given(worlds)
def test_any_world_round_trips_through_its_mapping(world: World) -> None:
    """Property: `World.from_mapping(w.to_mapping()) == w`, through YAML text too, and the
    mapping holds exactly the effects that are on."""
    mapping = world.to_mapping()
    assert World.from_mapping(mapping) == world
    assert World.from_mapping(yaml.safe_load(yaml.safe_dump(mapping))) == world
    on = set(world.effects()) - {"checkpoint_s"}
    assert on == set(mapping) - {"name", "description", "source", "checkpoint_s"}
    assert not math.isnan(mapping["checkpoint_s"])
