"""Hostile input to the instance loader, the Python API and the core CLI commands.

Each case once ended in a traceback, a hang, gigabytes of memory or an echoed secret; each
must now be one `InstanceError` (in-process) or one `error:` line on stderr with exit 1 (CLI).
CLI cases that could hang run as a subprocess with a timeout, which is only a hang guard.
"""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import matplotlib.figure
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambdadnn import evaluate, load_instance, solve
from lambdadnn.cli import main
from lambdadnn.inputs.files import brief
from lambdadnn.models.noise import NoiseModel
from lambdadnn.plot import PlotError, plot_frontier
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance import MAX_MEGABYTES, MAX_PRICE_USD, MAX_RATE, MAX_SECONDS, Instance
from lambdadnn.solver.instance_yaml import MAX_YAML_DEPTH, MAX_YAML_VALUES
from tests.hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = ROOT / "instances" / "mobilenet-cifar10.yaml"
ZERO_RATE = ROOT / "instances" / "espcn-bsds500.yaml"
LAMBDADNN = Path(sys.executable).parent / "lambdadnn"
SECRET = "s3cr3t-Hunter2"


def mobilenet() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(MOBILENET.read_text())
    return loaded


def error_of(source: Any) -> str:
    """The one-line message `load_instance` refuses `source` with."""
    with pytest.raises(InstanceError) as caught:
        load_instance(source)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and len(message) < 400, message
    return message


def cli(*args: str, stdout: Any = subprocess.PIPE) -> tuple[int, str, str]:
    """`lambdadnn ARGS` in a subprocess; the timeout only guards against a hang."""
    done = subprocess.run(
        [str(LAMBDADNN), *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
        timeout=HANG_GUARD_S, cwd=ROOT,
    )
    return done.returncode, done.stdout or "", done.stderr


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 1, (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in out + err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def write(folder: Path, text: str, name: str = "job.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The 'billion laughs': `levels` anchors, each a list of `width` aliases to the last."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


# --- YAML that expands, repeats or overflows ------------------------------------------------


@pytest.mark.real
def test_alias_bomb_is_refused_by_the_cli(tmp_path: Path) -> None:
    """About 500 bytes expanding to 9^9 values: one line, no hang, no gigabytes (it once took
    more than 60 s and 1.6 GB in `repr` of the expanded value)."""
    bomb = write(tmp_path, alias_bomb() + "workload: *a8\n")
    assert bomb.stat().st_size < 1024
    assert_one_line_error(*cli("validate", str(bomb)), f"more than {MAX_YAML_VALUES:,} values")


@pytest.mark.parametrize(
    "text",
    [
        alias_bomb() + "workload: {model_size_mb: *a8}\n",  # under a known field
        "platform: &p [*p]\n",  # a list that contains itself
        "workload: &w {model_size_mb: 18, more: *w}\n",  # a mapping that contains itself
    ],
    ids=["nested", "cyclic-list", "cyclic-mapping"],
)
def test_expanding_yaml_is_one_instance_error(tmp_path: Path, text: str) -> None:
    """A bomb under a known field, and cycles, which end at the depth limit."""
    message = error_of(write(tmp_path, text))
    assert f"more than {MAX_YAML_VALUES:,} values" in message or (
        f"more than {MAX_YAML_DEPTH} levels deep" in message)


def test_wrongly_typed_container_is_never_shown() -> None:
    """A list where a number belongs is refused naming its type, never walked or quoted."""
    mapping = mobilenet()
    mapping["workload"]["model_size_mb"] = [["lol"] * 9] * 9**3
    message = error_of(mapping)
    assert "`workload.model_size_mb`" in message and "a list" in message
    assert "lol" not in message


def test_legitimate_anchors_and_merges_still_load(tmp_path: Path) -> None:
    """An alias, and a merge key whose keys an explicit key overrides, are no duplicates."""
    text = MOBILENET.read_text().replace(
        "storage_bandwidth: {slope: 0.002228, intercept: 16.12, max_mbps: 115}",
        "storage_bandwidth: &line {slope: 0.002228, intercept: 16.12, max_mbps: 115}",
    ).replace(
        "parameter_server: {bandwidth_mbps: 1200, function_bandwidth_mbps: 84,",
        "parameter_server: {bandwidth_mbps: 1200, function_bandwidth_mbps: &bw 84,",
    )
    text = text.replace("limits: {max_functions: 64}", "limits: {max_functions: *bw}")
    loaded = load_instance(write(tmp_path, text))
    assert loaded.limits.max_functions == 84
    merged = mobilenet()
    merged["profile"]["storage_bandwidth"] = {"max_mbps": 115}
    text = yaml.safe_dump(merged).replace(
        "storage_bandwidth:\n", "storage_bandwidth:\n    <<: *line\n    slope: 0.003\n"
    ).replace("  rate:\n", "  rate: &line\n")
    profile = load_instance(write(tmp_path, text)).profile
    assert profile.storage_bandwidth.slope == 0.003
    assert profile.storage_bandwidth.intercept == profile.rate.intercept == 5.6


@pytest.mark.parametrize(
    ("old", "new", "path", "lines"),
    [
        ("epochs: 6,", "epochs: 6, epochs: 60,", "workload.epochs", "on line 4"),
        ("objective: {deadline_s: 1200}", "objective: {deadline_s: 1200}\nobjective: {}",
         "objective", "on lines 10 and 11"),
        ("name: mobilenet-cifar10", "name: mobilenet-cifar10\n'name': other", "name",
         "on lines 2 and 3"),
    ],
    ids=["flow", "top-level", "quoted"],
)
def test_duplicate_keys_are_named(
    tmp_path: Path, old: str, new: str, path: str, lines: str
) -> None:
    """YAML keeps the last of two equal keys silently; the loader names the key path."""
    text = MOBILENET.read_text()
    assert old in text
    message = error_of(write(tmp_path, text.replace(old, new)))
    assert f"`{path}` appears twice" in message and lines in message


@pytest.mark.parametrize("digits", [101, 5000, 50_000])
def test_overlong_integer_names_the_field(tmp_path: Path, digits: int) -> None:
    """5,000 digits exceed Python's int conversion limit (a bare ValueError once)."""
    text = MOBILENET.read_text().replace("samples: 50000", f"samples: {'9' * digits}")
    message = error_of(write(tmp_path, text))
    assert "`workload.samples`" in message and f"{digits:,} characters" in message
    assert "9999" not in message


@pytest.mark.parametrize(
    ("value", "kind"),
    [("!!int abc", "int"), ("!!float x1", "float"), ("2001-02-30", "timestamp"),
     ("!!bool maybe", "bool"), ("!!int ''", "int")],
)
def test_value_its_tag_does_not_fit_names_the_field(
    tmp_path: Path, value: str, kind: str
) -> None:
    """PyYAML raises ValueError, KeyError or IndexError for these; the loader names the field."""
    text = MOBILENET.read_text().replace("epochs: 6", f"epochs: {value}")
    message = error_of(write(tmp_path, text))
    assert "`workload.epochs`" in message and kind in message


# --- files that are not instance files ------------------------------------------------------


def special_files(folder: Path) -> dict[str, Path]:
    fifo = folder / "fifo.yaml"
    os.mkfifo(fifo)
    big = folder / "big.yaml"
    with big.open("wb") as handle:  # 50 MB, sparse
        handle.truncate(50 * 1024 * 1024)
    loop = folder / "loop.yaml"
    loop.symlink_to(folder / "loop2.yaml")
    (folder / "loop2.yaml").symlink_to(loop)
    return {"/dev/zero": Path("/dev/zero"), "/dev/urandom": Path("/dev/urandom"),
            "fifo": fifo, "50 MB": big, "symlink loop": loop}


@pytest.mark.real
@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo", "50 MB", "symlink loop"])
def test_special_file_as_the_instance(tmp_path: Path, kind: str) -> None:
    """Read whole, /dev/zero ran out of memory and a FIFO blocked forever; a symlink loop was
    a RuntimeError traceback."""
    path = special_files(tmp_path)[kind]
    assert_one_line_error(*cli("validate", str(path)))


@pytest.mark.real
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "50 MB", "symlink loop"])
def test_special_file_as_the_platform(tmp_path: Path, kind: str) -> None:
    """A platform named in an instance is read beside it with the same bounds."""
    target = special_files(tmp_path)[kind]
    (tmp_path / "platforms").mkdir()
    link = tmp_path / "platforms" / "evil.yaml"
    link.symlink_to(target)
    job = write(tmp_path, MOBILENET.read_text().replace("aws-lambda-x86_64", "evil"))
    assert "`platform`" in error_of(job)
    assert_one_line_error(*cli("validate", str(job)))


# --- secrets --------------------------------------------------------------------------------

SHADOW = f"root:$6${SECRET}$abcdef:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


@pytest.mark.real
@pytest.mark.parametrize(
    "text",
    [
        SHADOW,  # YAML reads each line as a key
        f"root:$6${SECRET}\n",  # a plain string
        f"API_KEY: {SECRET}\nREGION: us-east-1\n",  # a mapping of other keys
        f"- {SECRET}\n",  # a list
        f"{SECRET}: [\n",  # a syntax error
        f"workload: !{SECRET} x\n",  # an unknown tag, which PyYAML quotes
        f"*{SECRET}\n",  # an undefined alias
        f"a: &{SECRET} 1\nb: &{SECRET} 2\n",  # a duplicate anchor
    ],
    ids=["shadow", "string", "env", "list", "syntax", "tag", "alias", "anchor"],
)
def test_no_content_of_a_non_instance_file_is_echoed(tmp_path: Path, text: str) -> None:
    """`lambdadnn validate /etc/shadow` printed the file's first key in full."""
    code, out, err = cli("validate", str(write(tmp_path, text, "shadow")))
    assert_one_line_error(code, out, err)
    assert SECRET not in err and "$6$" not in err


def test_no_content_of_a_non_platform_file_is_echoed(tmp_path: Path) -> None:
    """`platform: NAME` reads NAME.yaml beside the instance, which may be any YAML file."""
    for name, text in [("keys", f"password: {SECRET}\n"), ("words", f"{SECRET} is here\n")]:
        write(tmp_path, text, f"{name}.yaml")
        job = write(tmp_path, MOBILENET.read_text().replace("aws-lambda-x86_64", name))
        message = error_of(job)
        assert SECRET not in message and "password" not in message


def test_unknown_key_is_quoted_briefly(tmp_path: Path) -> None:
    """A 100,000-character key in an instance is shown in at most 40 escaped characters."""
    text = MOBILENET.read_text() + f"? {'k' * 100_000}\n: 1\n"  # `?`: a key over 1,024
    message = error_of(write(tmp_path, text))
    assert "not a known field" in message and "k" * 41 not in message


# --- magnitudes -----------------------------------------------------------------------------

CAPS = [
    ("workload", "model_size_mb", MAX_MEGABYTES),
    ("workload", "dataset_size_mb", MAX_MEGABYTES),
    ("workload", "min_memory_mb", MAX_MEGABYTES),
    ("profile.rate", "slope", MAX_RATE),
    ("profile.rate", "intercept", MAX_RATE),
    ("profile.rate", "saturates_at_mb", MAX_MEGABYTES),
    ("profile.storage_bandwidth", "slope", MAX_RATE),
    ("profile.storage_bandwidth", "max_mbps", MAX_RATE),
    ("parameter_server", "bandwidth_mbps", MAX_RATE),
    ("parameter_server", "function_bandwidth_mbps", MAX_RATE),
    ("parameter_server", "price_per_hour", MAX_PRICE_USD),
    ("objective", "deadline_s", MAX_SECONDS),
    ("platform", "price_per_gb_second", MAX_PRICE_USD),
    ("platform", "timeout_s", MAX_SECONDS),
    ("platform", "restart_overhead_s", MAX_SECONDS),
    ("platform.memory_mb", "max", MAX_MEGABYTES),
]


def with_value(section: str, key: str, value: Any) -> dict[str, Any]:
    mapping = mobilenet()
    mapping["platform"] = yaml.safe_load(
        (ROOT / "instances" / "platforms" / "aws-lambda-2020.yaml").read_text())
    node = mapping
    for part in section.split("."):
        node = node[part]
    node[key] = value
    return mapping


@pytest.mark.parametrize(("section", "key", "cap"), CAPS, ids=lambda x: str(x))
def test_absurd_magnitudes_name_the_field(section: str, key: str, cap: float) -> None:
    """`model_size_mb: 1e100` passed validation and broke the solver; every physical field
    has a documented cap, which is accepted while anything beyond it names the field."""
    for absurd in (cap * 1.001, 1e100):
        message = error_of(with_value(section, key, absurd))
        assert f"`{section}.{key}`" in message and f"{cap:,.0f}" in message
    assert isinstance(load_instance(with_value(section, key, cap)), Instance)


@pytest.mark.real
def test_absurd_magnitude_in_a_file_is_named_by_the_cli(tmp_path: Path) -> None:
    text = MOBILENET.read_text().replace("model_size_mb: 18", "model_size_mb: 1.0e+100")
    code, out, err = cli("solve", str(write(tmp_path, text)))
    assert_one_line_error(code, out, err, "`workload.model_size_mb`")


@pytest.mark.parametrize("name", ["two\nlines", "\x1b[31mred", "n" * 101, "\u200b"])
def test_names_are_one_printable_line(name: str) -> None:
    """A name appears in every table and message: a line break or a terminal escape in it
    would forge output."""
    mapping = mobilenet() | {"name": name}
    message = error_of(mapping)
    assert "`name`" in message and "\x1b" not in message and "\n" not in message


# --- the Python API -------------------------------------------------------------------------

BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("solve", {"deadline_s": 10**400}, "`deadline_s`"),
    ("solve", {"deadline_s": Fraction(10**5000, 3)}, "`deadline_s`"),
    ("solve", {"deadline_s": math.nan}, "`deadline_s`"),
    ("solve", {"deadline_s": math.inf}, "`deadline_s`"),
    ("solve", {"deadline_s": True}, "`deadline_s`"),
    ("solve", {"deadline_s": "600"}, "`deadline_s`"),
    ("solve", {"deadline_s": MAX_SECONDS * 2}, "`deadline_s`"),
    ("solve", {"guarantee": 0.99, "noise": "x"}, "`noise`"),
    ("solve", {"guarantee": math.nan}, "`guarantee`"),
    ("solve", {"guarantee": "0.9"}, "`guarantee`"),
    ("solve", {"guarantee": 10**400}, "`guarantee`"),
    ("evaluate", {"functions": 10**400, "memory_mb": 512}, "`functions`"),
    ("evaluate", {"functions": 4, "memory_mb": 10**400}, "`memory_mb`"),
    ("evaluate", {"functions": math.inf, "memory_mb": 512}, "`functions`"),
    ("evaluate", {"functions": np.float64("nan"), "memory_mb": 512}, "`functions`"),
    ("evaluate", {"functions": 1.5, "memory_mb": 512}, "`functions`"),
    ("evaluate", {"functions": True, "memory_mb": 512}, "`functions`"),
    ("evaluate", {"functions": 4, "memory_mb": "512"}, "`memory_mb`"),
]


@pytest.mark.parametrize(
    ("function", "arguments", "named"), BAD_ARGUMENTS,
    ids=[f"{function}-{','.join(f'{k}={brief(v, 16)}' for k, v in arguments.items())}"
         for function, arguments, _ in BAD_ARGUMENTS],
)
def test_bad_arguments_name_the_argument(
    function: str, arguments: dict[str, Any], named: str
) -> None:
    """These raised OverflowError, TypeError or AttributeError, or were accepted."""
    call: Callable[..., Any] = solve if function == "solve" else evaluate
    with pytest.raises(InstanceError) as caught:
        call(MOBILENET, **arguments)
    message = str(caught.value)
    assert named in message and len(message.splitlines()) == 1 and len(message) < 200


def test_numpy_numbers_are_numbers() -> None:
    """`np.int64(600)` as a deadline was refused; numpy numbers (and whole floats) are numbers."""
    plain = evaluate(MOBILENET, functions=14, memory_mb=1117)
    assert evaluate(MOBILENET, functions=np.int64(14), memory_mb=np.int32(1117)) == plain
    assert evaluate(MOBILENET, functions=np.float64(14.0), memory_mb=1117.0) == plain
    expected = solve(MOBILENET, deadline_s=600)
    for deadline in (np.int64(600), np.float64(600.0), np.float32(600.0), Fraction(600)):
        found = solve(MOBILENET, deadline_s=deadline)
        assert (found.functions, found.memory_mb, found.deadline_s) == (
            expected.functions, expected.memory_mb, 600.0)
    assert solve(MOBILENET, guarantee=np.float64(0.9), noise=NoiseModel()).status == "optimal"


# --- CLI output -----------------------------------------------------------------------------


def zero_rate_instance(folder: Path) -> Path:
    """An instance whose rate is 0 at every memory: its figures are inf and NaN."""
    text = ZERO_RATE.read_text().replace("rate: {slope: 0.001, intercept: -2.3}",
                                         "rate: {slope: 0, intercept: 0}")
    return write(folder, text)


def test_json_output_is_strict_json(tmp_path: Path) -> None:
    """`evaluate --json` of a plan whose time is not finite printed NaN and Infinity."""
    result = CliRunner().invoke(
        main, ["evaluate", str(zero_rate_instance(tmp_path)), "-n", "2", "-m", "512", "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    payload = json.loads(result.stdout, parse_constant=refuse)
    assert payload["time_s"] is None and payload["valid"] is False
    assert payload["time_breakdown"]["compute_s"] is None  # inf
    assert payload["time_breakdown"]["load_s"] > 0  # finite figures are kept


@pytest.mark.real
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "args",
    [["validate", str(MOBILENET)], ["evaluate", str(MOBILENET), "-n", "4", "-m", "1024"],
     ["evaluate", str(MOBILENET), "-n", "4", "-m", "1024", "--json"],
     ["solve", str(MOBILENET)], ["solve", str(MOBILENET), "--json"]],
    ids=lambda args: " ".join(args[:1] + args[2:]),
)
def test_full_disk_is_one_line(args: list[str]) -> None:
    """Output to a full disk was an OSError traceback."""
    with open("/dev/full", "w") as full:
        code, _, err = cli(*args, stdout=full)
    assert_one_line_error(code, "", err, "No space left on device")


@pytest.mark.real
def test_closed_pipe_exits_quietly() -> None:
    """`lambdadnn ... | head -1`: a reader that went away is no error worth a message."""
    process = subprocess.Popen(
        [str(LAMBDADNN), "evaluate", str(MOBILENET), "-n", "4", "-m", "1024", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the command, which takes a moment to start, writes
    err = process.stderr.read().decode()
    assert process.wait(timeout=HANG_GUARD_S) == 1 and err == ""


# --- frontier --plot ------------------------------------------------------------------------


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("plot_path", "fragment"),
    [("out.txt", "must end in .png"), ("missing/out.png", "existing folder"),
     ("file.yaml/out.png", "existing folder"), ("folder", "cannot write")],
)
def test_bad_plot_path_fails_before_any_work(
    tmp_path: Path, plot_path: str, fragment: str
) -> None:
    """`--plot out.txt` was a traceback after every solve; now it is refused first (the
    instance does not even exist here)."""
    write(tmp_path, "x", "file.yaml")
    (tmp_path / "folder.png").mkdir()
    code, out, err = run("frontier", str(tmp_path / "none.yaml"), "--plot",
                         str(tmp_path / plot_path))
    assert_one_line_error(code, out, err, "`--plot`", fragment)


def test_plot_without_suffix_reports_the_file_written(tmp_path: Path) -> None:
    """`--plot noext` wrote noext.png but reported `noext`."""
    code, out, err = run("frontier", str(MOBILENET), "--points", "2", "--plot",
                         str(tmp_path / "noext"))
    assert code == 0, err
    written = tmp_path / "noext.png"
    assert written.read_bytes()[:4] == b"\x89PNG"
    assert f"plot written to {written}" in out and not (tmp_path / "noext").exists()


def test_plot_into_a_full_disk_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while saving leaves one PlotError and no truncated image."""

    def full(self: matplotlib.figure.Figure, path: Path, **_: Any) -> None:
        Path(path).write_bytes(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    with pytest.raises(PlotError) as caught:
        plot_frontier([], tmp_path / "frontier.svg")
    assert "`--plot`" in str(caught.value) and "No space left" in str(caught.value)
    assert not (tmp_path / "frontier.svg").exists()


@pytest.mark.parametrize(("option", "value"), [("--to", "inf"), ("--from", "nan"),
                                               ("--to", "1e12")])
def test_frontier_range_names_the_option(option: str, value: str) -> None:
    code, out, err = run("frontier", str(MOBILENET), option, value)
    assert_one_line_error(code, out, err, f"`{option}`")


def test_frontier_of_an_instance_slower_than_any_deadline(tmp_path: Path) -> None:
    """Its default range (up to 4x the fastest time) would pass the largest deadline the
    loader accepts, and fail naming `deadline_s`, an argument the user never gave."""
    text = MOBILENET.read_text().replace("samples: 50000, epochs: 6",
                                         "samples: 1000000000000, epochs: 100")
    code, out, err = run("frontier", str(write(tmp_path, text)))
    assert_one_line_error(code, out, err, "fastest plan takes", f"{MAX_SECONDS:,.0f} s")


# --- fuzz -----------------------------------------------------------------------------------

#: Lines of a top-level mapping that YAML parses, each hostile in its own way.
ENTRIES = st.sampled_from([
    "name: x", "platform: aws-lambda-2020", "workload: {samples: 5, samples: 6}",
    "a: &a [1, 2, 3]", "b: &b [*a, *a, *a, *a, *a, *a, *a, *a]",
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]", "workload: {model_size_mb: [*c, *c, *c]}",
    "d: {<<: {x: 1}, x: 2}", "e: &e [*e]", "f: &f {g: *f}", "profile: {rate: *a}",
    f"objective: {{deadline_s: {'9' * 5000}}}", "h: 0x" + "f" * 200, "i: !!int abc",
    "workload: {epochs: 2001-02-30}", "j: !!binary 'not base64!'", "k: !!set {a, a}",
    "l: !!omap [a, b]", "m: !!float 1e999999", "n: !!bool maybe", "o: !!int ''",
    "p: 1:2:3:4:5:6:7:8:9:10", "q: !custom-tag v", "? [1, 2]\n: x", "? {a: 1}\n: x",
    "r: !!timestamp soon", "s: !!str [1]", "t: {<<: [*a]}", "u: {<<: 5}", "v: !!null x",
    "limits: {max_functions: 1.0e+400}", "name: \"\\x1b[31m\"",
])
#: Lines that break the document's syntax or shape.
JUNK = st.sampled_from(["\t", "'", "[", "- 1", "---", "*undefined", "&x", ": :", "{a: 1, a: 1}"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ENTRIES | ENTRIES | ENTRIES | JUNK | st.text(max_size=20), max_size=10))
def test_any_hostile_yaml_is_an_instance_or_one_line(parts: list[str]) -> None:
    """Property: text built from aliases, merges, duplicates, long integers, odd tags and
    junk loads as an Instance or raises one short InstanceError, never anything else."""
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "\n".join(parts) + "\n")
        try:
            loaded = load_instance(path)
        except InstanceError as error:
            assert len(str(error).splitlines()) == 1 and len(str(error)) < 600, str(error)
        else:
            assert isinstance(loaded, Instance)
