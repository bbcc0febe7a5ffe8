"""The loader's contract: shipped files load, and bad input of any shape is one `InstanceError`.

Two kinds of users feed `load_instance`: a person with a YAML file, who needs a one-line
message naming the field, the bad value and the fix; and a scheduler calling in-process, who
must be able to catch `InstanceError` (or `LambdaDnnError`) and nothing wider. The
property tests fuzz both routes (mappings and files); the example tests pin the wording of
the messages people will actually see.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lambdadnn.solver.errors import InstanceError, LambdaDnnError
from lambdadnn.solver.instance import Instance, Limits
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import solve
from tests.strategies import (
    arbitrary_mappings,
    instance_mappings,
    with_unknown_key,
    wrongly_typed,
)

INSTANCES = Path(__file__).resolve().parent.parent / "instances"
PLATFORMS = INSTANCES / "platforms"
MOBILENET = INSTANCES / "mobilenet-cifar10.yaml"

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def raw(path: Path) -> dict[str, Any]:
    """A YAML file as a plain mapping, to compare with what the loader made of it."""
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def mobilenet() -> dict[str, Any]:
    """A valid instance mapping to break one field at a time."""
    return raw(MOBILENET)


def error_of(source: Any, **kwargs: Any) -> str:
    """The message `load_instance` rejects `source` with; it must be a single line."""
    with pytest.raises(InstanceError) as caught:
        load_instance(source, **kwargs)
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


def assert_platform_equals(instance: Instance, expected: dict[str, Any]) -> None:
    """Every number of a platform mapping arrived unchanged in the `Platform`."""
    platform = instance.platform
    grid = expected["memory_mb"]
    assert platform.name == expected["name"]
    assert (platform.memory.min_mb, platform.memory.max_mb, platform.memory.step_mb) == (
        grid["min"], grid["max"], grid["step"])
    for key in ("price_per_gb_second", "price_per_request", "timeout_s", "timeout_margin_s",
                "restart_overhead_s", "max_concurrency"):
        assert getattr(platform, key) == expected[key], key


def assert_instance_equals(instance: Instance, expected: dict[str, Any]) -> None:
    """Every number of an instance mapping arrived unchanged, optional fields as None."""
    w, rate = instance.workload, instance.profile.rate
    for key in ("model_size_mb", "dataset_size_mb", "samples", "epochs", "local_batch",
                "max_global_batch"):
        assert getattr(w, key) == expected["workload"][key], key
    assert w.min_memory_mb == expected["workload"].get("min_memory_mb")
    assert rate.slope == expected["profile"]["rate"]["slope"]
    assert rate.intercept == expected["profile"]["rate"]["intercept"]
    assert rate.saturates_at_mb == expected["profile"]["rate"].get("saturates_at_mb")
    storage = instance.profile.storage_bandwidth
    assert (storage.slope, storage.intercept, storage.max_mbps) == tuple(
        expected["profile"]["storage_bandwidth"][k] for k in ("slope", "intercept", "max_mbps"))
    ps, given = instance.parameter_server, expected["parameter_server"]
    if "catalogue" in given:  # every type of the named catalogue at 1..8 shards
        types = raw(INSTANCES / "servers" / f"{given['catalogue']}.yaml")["types"]
        assert [(s.type, s.shards) for s in instance.servers] == [
            (name, k) for name in types for k in range(1, 9)]
        for server in instance.servers:
            entry = types[server.type]
            assert (server.bandwidth_mbps, server.function_bandwidth_mbps,
                    server.price_per_hour, server.message_s) == (
                entry["bandwidth_mbps"], given["function_bandwidth_mbps"],
                entry["price_per_hour"], entry.get("message_s", 0))
        assert ps == instance.servers[0]
    else:
        assert (ps.bandwidth_mbps, ps.function_bandwidth_mbps, ps.price_per_hour) == tuple(
            given[k] for k in ("bandwidth_mbps", "function_bandwidth_mbps", "price_per_hour"))
    assert instance.objective.deadline_s == expected["objective"]["deadline_s"]
    assert instance.limits == Limits(expected.get("limits", {}).get("max_functions"))


# --- shipped data ------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(INSTANCES.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_instance_loads_unchanged(path: Path) -> None:
    """Each instances/*.yaml loads, with its name, numbers and named platform intact."""
    expected = raw(path)
    instance = load_instance(path)
    assert instance.name == expected["name"] == path.stem
    assert_instance_equals(instance, expected)
    assert_platform_equals(instance, raw(PLATFORMS / f"{expected['platform']}.yaml"))


@pytest.mark.parametrize("path", sorted(PLATFORMS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_platform_loads_unchanged(path: Path) -> None:
    """Each instances/platforms/*.yaml loads by name as an override, numbers intact."""
    instance = load_instance(MOBILENET, platform=path.stem)
    assert_platform_equals(instance, raw(path))
    assert instance.platform.name == path.stem


@pytest.mark.parametrize(
    ("name", "price", "grid"),
    [
        ("aws-lambda-x86_64", 0.0000166667, (128, 10240, 1)),
        ("aws-lambda-arm64", 0.0000133334, (128, 10240, 1)),
        ("aws-lambda-2020", 0.0000166667, (128, 3008, 64)),
    ],
)
def test_design_platforms_are_shipped(name: str, price: float, grid: tuple[int, int, int]) -> None:
    """The three shipped platforms (README), with these prices and memory grids."""
    platform = load_instance(MOBILENET, platform=name).platform
    assert platform.price_per_gb_second == price
    assert (platform.memory.min_mb, platform.memory.max_mb, platform.memory.step_mb) == grid


@pytest.mark.parametrize(
    ("name", "architecture"),
    [("aws-lambda-x86_64", "x86_64"), ("aws-lambda-arm64", "arm64"),
     ("aws-lambda-2020", "x86_64")],
)
def test_platform_architecture_travels_into_the_plan(name: str, architecture: str) -> None:
    """The platform says which CPU it prices; the plan carries it to the launcher."""
    assert load_instance(MOBILENET, platform=name).platform.architecture == architecture
    assert solve(MOBILENET, platform=name).to_dict()["architecture"] == architecture


def test_platform_architecture_is_checked() -> None:
    inline = yaml.safe_load(Path("instances/platforms/aws-lambda-x86_64.yaml").read_text())
    mapping = {**yaml.safe_load(Path(MOBILENET).read_text()), "platform": inline}
    del inline["architecture"]
    assert load_instance(mapping).platform.architecture == "x86_64"  # optional, x86_64
    with pytest.raises(InstanceError, match=r"`platform\.architecture` must be one of x86_64, "
                                            r"arm64, got 'sparc'"):
        load_instance({**mapping, "platform": {**inline, "architecture": "sparc"}})


def test_platform_override() -> None:
    """`platform=` (the CLI's --platform) swaps the platform and keeps everything else."""
    own = load_instance(MOBILENET)
    other = load_instance(MOBILENET, platform="aws-lambda-2020")
    assert own.platform.name == "aws-lambda-x86_64"
    assert other.platform.name == "aws-lambda-2020"
    assert other.platform.memory.values()[-1] == 3008
    assert other.platform.memory.size == 46
    assert (other.name, other.workload, other.profile, other.limits) == (
        own.name, own.workload, own.profile, own.limits)
    # The same override applies to an already loaded Instance and to a mapping.
    assert load_instance(own, platform="aws-lambda-2020") == other
    assert load_instance(mobilenet(), platform="aws-lambda-2020").platform == other.platform
    assert load_instance(own) is own


def test_unknown_override_is_an_instance_error() -> None:
    """A mistyped --platform is reported like a mistyped `platform` field."""
    message = error_of(MOBILENET, platform="aws-lambda-x86")
    assert "`platform`" in message and "'aws-lambda-x86'" in message
    assert "aws-lambda-x86_64" in message  # the fix: the known names


def test_platform_file_beside_the_instance_wins(tmp_path: Path) -> None:
    """A platform named in an instance is looked up in platforms/ beside it before the shipped
    catalogue, so a user can keep a private platform next to their instances."""
    mine = raw(PLATFORMS / "aws-lambda-x86_64.yaml") | {"name": "aws-lambda-x86_64",
                                                        "max_concurrency": 7}
    (tmp_path / "platforms").mkdir()
    (tmp_path / "platforms" / "aws-lambda-x86_64.yaml").write_text(yaml.safe_dump(mine))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(mobilenet() | {"name": None}))
    instance = load_instance(tmp_path / "job.yaml")
    assert instance.platform.max_concurrency == 7
    assert instance.name == "job"  # no name: the file's stem


def test_bad_platform_file_names_the_field_and_the_file(tmp_path: Path) -> None:
    """An error inside a platform file says which field, and in which file (its path, cut
    short with `...` when it is long, as a deep temporary folder's is)."""
    broken = raw(PLATFORMS / "aws-lambda-x86_64.yaml") | {"timeout_s": "fifteen minutes"}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(mobilenet() | {"platform": "broken"}))
    message = error_of(tmp_path / "job.yaml")
    assert "`platform.timeout_s`" in message and "'fifteen minutes'" in message
    shown = message.split("(in '", 1)[1].removesuffix(")").removesuffix("'")
    assert str(tmp_path / "broken.yaml").startswith(shown.removesuffix("..."))
    assert len(shown.removesuffix("...")) > len(str(tmp_path)) // 2


# --- specific messages --------------------------------------------------------------------


def test_negative_epochs() -> None:
    """`workload.epochs: -1` names the field, shows -1 and says what is wanted."""
    mapping = mobilenet()
    mapping["workload"]["epochs"] = -1
    message = error_of(mapping)
    assert "`workload.epochs`" in message and "-1" in message and "positive integer" in message


def test_unknown_key_suggests_the_close_one() -> None:
    """A typo (`workload.epoch`) is not silently ignored, and the fix is suggested."""
    mapping = mobilenet()
    mapping["workload"]["epoch"] = mapping["workload"].pop("epochs")
    message = error_of(mapping)
    assert "`workload.epoch`" in message and "`epochs`" in message


def test_memory_min_above_max() -> None:
    """An empty memory grid (min > max) names both ends and the fix."""
    mapping = mobilenet()
    mapping["platform"] = raw(PLATFORMS / "aws-lambda-2020.yaml")
    mapping["platform"]["memory_mb"] = {"min": 3008, "max": 128, "step": 64}
    message = error_of(mapping)
    assert "`platform.memory_mb.min`" in message and "`platform.memory_mb.max`" in message
    assert "3008" in message and "128" in message and "swap" in message


def test_missing_platform_file() -> None:
    """`platform: no-such-platform` names `platform`, the bad name and the known ones."""
    mapping = mobilenet()
    mapping["platform"] = "no-such-platform"
    message = error_of(mapping)
    assert "`platform`" in message and "no-such-platform" in message
    assert "aws-lambda-x86_64" in message


@pytest.mark.parametrize("name", ["../platforms/aws-lambda-x86_64", "/etc/passwd", ".hidden"])
def test_platform_name_is_not_a_path(name: str) -> None:
    """A platform is a name, never a path: no reading files outside the catalogue."""
    mapping = mobilenet()
    mapping["platform"] = name
    assert "`platform`" in error_of(mapping)


def test_yaml_syntax_error_gives_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A YAML syntax error points at the line, not at a PyYAML traceback."""
    (tmp_path / "broken.yaml").write_text(
        "name: broken\nplatform: aws-lambda-x86_64\nworkload:\n  epochs: 6\n   samples: 5\n"
    )
    monkeypatch.chdir(tmp_path)  # a relative name: a long temporary folder is shortened
    message = error_of(Path("broken.yaml"))
    assert "broken.yaml" in message and "line 5" in message


def test_bool_where_a_number_is_wanted() -> None:
    """`samples: yes` is a YAML bool, not 1: rejected, showing the value."""
    mapping = mobilenet()
    mapping["workload"]["samples"] = True
    message = error_of(mapping)
    assert "`workload.samples`" in message and "True" in message


def test_nonexistent_file() -> None:
    """A wrong path is named in the message, with the fix."""
    message = error_of(INSTANCES / "no-such-instance.yaml")
    assert "no-such-instance.yaml" in message and "does not exist" in message


def test_missing_required_field() -> None:
    """A missing required field is named."""
    mapping = mobilenet()
    del mapping["objective"]["deadline_s"]
    message = error_of(mapping)
    assert "`objective.deadline_s`" in message and "missing" in message


def test_margin_not_below_timeout() -> None:
    """A timeout margin that leaves no usable time (L <= 0) is rejected, naming both fields."""
    mapping = mobilenet()
    mapping["platform"] = raw(PLATFORMS / "aws-lambda-x86_64.yaml") | {"timeout_margin_s": 900}
    message = error_of(mapping)
    assert "`platform.timeout_margin_s`" in message and "`platform.timeout_s`" in message


@pytest.mark.parametrize(
    ("section", "key", "value", "shown"),
    [
        ("workload", "model_size_mb", float("nan"), "nan"),
        ("workload", "dataset_size_mb", float("inf"), "inf"),
        ("workload", "local_batch", 2.5, "2.5"),
        ("workload", "max_global_batch", 0, "0"),
        ("workload", "min_memory_mb", -128, "-128"),
        ("profile.rate", "slope", -0.03, "-0.03"),
        ("profile.storage_bandwidth", "max_mbps", 0, "0"),
        ("parameter_server", "price_per_hour", -0.096, "-0.096"),
        ("objective", "deadline_s", "20 minutes", "'20 minutes'"),
        ("limits", "max_functions", 0, "0"),
    ],
)
def test_bad_values_are_named(section: str, key: str, value: Any, shown: str) -> None:
    """Out-of-range, non-finite and wrongly typed values name the field and show the value."""
    mapping = mobilenet()
    node = mapping
    for part in section.split("."):
        node = node[part]
    node[key] = value
    message = error_of(mapping)
    assert f"`{section}.{key}`" in message and shown in message


@pytest.mark.parametrize("source", [[], 42, 3.5, True, None, ["name", "x"]], ids=repr)
def test_top_level_must_be_a_mapping(source: Any) -> None:
    """Anything but a mapping (or a path) at the top is rejected with what was wanted."""
    assert "mapping" in error_of(source)


def test_empty_file_is_an_instance_error(tmp_path: Path) -> None:
    """An empty YAML file is None at the top: rejected, not a TypeError."""
    (tmp_path / "empty.yaml").write_text("")
    assert "mapping" in error_of(tmp_path / "empty.yaml")


# --- properties ---------------------------------------------------------------------------


@FUZZ
@given(arbitrary_mappings())
def test_anything_is_an_instance_or_an_instance_error(source: Any) -> None:
    """Property: whatever mapping, list or scalar is passed, `load_instance` returns an
    Instance or raises InstanceError (which is a LambdaDnnError), never anything else."""
    try:
        instance = load_instance(copy.deepcopy(source))
    except InstanceError as error:
        assert isinstance(error, LambdaDnnError)
        assert len(str(error).splitlines()) == 1, str(error)
    else:
        assert isinstance(instance, Instance)


@FUZZ
@given(st.one_of(st.text(max_size=200), arbitrary_mappings().map(yaml.safe_dump)))
def test_any_file_is_an_instance_or_an_instance_error(text: str) -> None:
    """Property: whatever text an instance file holds (syntax errors, tabs, control
    characters, YAML of the wrong shape), loading it raises nothing but InstanceError."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8")
        with contextlib.suppress(InstanceError):
            assert isinstance(load_instance(path), Instance)


@PROPERTY
@given(instance_mappings())
def test_valid_mappings_load_unchanged(mapping: dict[str, Any]) -> None:
    """Property: every mapping `instance_mappings()` draws is accepted (so the strategy the
    solver's tests rely on is valid) and its numbers reach the Instance unchanged."""
    instance = load_instance(mapping)
    assert_instance_equals(instance, mapping)
    assert_platform_equals(instance, mapping["platform"])
    assert instance.name == mapping["name"]


@FUZZ
@given(wrongly_typed())
def test_wrong_type_names_the_field(case: tuple[dict[str, Any], str]) -> None:
    """Property: a valid instance with one field of the wrong type (string for number,
    bool, list, mapping for a leaf, null for a required field) is rejected with a one-line
    message naming exactly that field in backticks."""
    mapping, path = case
    assert f"`{path}`" in error_of(mapping)


@PROPERTY
@given(with_unknown_key())
def test_unknown_key_names_the_field(case: tuple[dict[str, Any], str]) -> None:
    """Property: one key the schema does not know, anywhere, is rejected by its full path
    (as is when printable; other keys are escaped, see `test_unprintable_key_is_escaped`)."""
    mapping, path = case
    assume(path.isprintable())
    message = error_of(mapping)
    assert f"`{path}`" in message and "not a known field" in message


# --- robustness: regressions, and known bugs in solver/instance.py ----------------------


def test_huge_integer_is_an_instance_error() -> None:
    """An integer too large for a float (YAML reads 400 digits as an int) is an InstanceError,
    not the OverflowError of `float(value)` (a regression test: it once was)."""
    mapping = mobilenet()
    mapping["workload"]["model_size_mb"] = 10**400
    assert "`workload.model_size_mb`" in error_of(mapping)


def test_huge_integer_count_is_rejected_up_front() -> None:
    """`samples` of 10**400 is rejected by validation rather than overflowing every later
    float use of it (a regression test: it once passed validation)."""
    mapping = mobilenet()
    mapping["workload"]["samples"] = 10**400
    assert "`workload.samples`" in error_of(mapping)


def test_overlong_platform_name_is_an_instance_error() -> None:
    """A 300-character platform name must be 'not a known platform', not an OSError."""
    mapping = mobilenet()
    mapping["platform"] = "a" * 300
    assert "`platform`" in error_of(mapping)


def test_nul_in_path_is_an_instance_error() -> None:
    """A path with a NUL byte (possible in-process) must be an InstanceError, not ValueError."""
    with pytest.raises(InstanceError):
        load_instance("instances/mobilenet\x00.yaml")


def test_deeply_nested_yaml_is_an_instance_error(tmp_path: Path) -> None:
    """A 1 kB file of nested brackets must be an InstanceError, not a RecursionError."""
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 1000 + "]" * 1000)
    error_of(path)


def test_empty_key_is_shown_quoted() -> None:
    mapping = mobilenet()
    mapping["workload"][""] = 1
    assert "`workload.''` is not a known field" in error_of(mapping)


def test_key_with_a_newline_gives_a_one_line_message() -> None:
    """An unknown key with a line break is shown with repr(), keeping the message one line."""
    mapping = mobilenet()
    mapping["workload"]["epo\nchs"] = mapping["workload"].pop("epochs")
    message = error_of(mapping)
    assert "`workload.'epo\\nchs'`" in message


@pytest.mark.parametrize("key", ["\x1b[2J", "zero\u200bwidth", "k" * 41, "nul\x00"])
def test_unprintable_key_is_escaped(key: str) -> None:
    """A key with a terminal escape, an invisible character, a NUL, or more than 40 characters
    is quoted with repr() escapes, at most 40 characters of it."""
    mapping = mobilenet()
    mapping["workload"][key] = 1
    message = error_of(mapping)
    assert "not a known field" in message and message.isprintable()
    assert key not in message and "`workload.'" in message
