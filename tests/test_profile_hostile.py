"""`lambdadnn profile` against a hostile `--out` and a hostile factory.

`--out` is checked before the workload's factory runs (so before any trial): a device such as
/dev/full, a folder, a named pipe or a folder that takes no file is one line, exit 1. The
instance is written whole or not at all: a full disk or an I/O error (simulated by making
`os.fsync` or `os.replace` fail) leaves no temporary file, no empty file, and a file already
there as it was. A factory that exits (`SystemExit(7)`, `sys.exit()`, also while importing its
module or in its loss) is one line naming it, exit 1; one that hangs is stopped after
`--factory-timeout-s`, and Ctrl-C during it exits 130. The trials themselves never run here:
`profile_workload` is replaced by a stub that records its calls.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import lambdadnn.launcher.profile
import lambdadnn.launcher.workloads
from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.profile import profile_workload
from lambdadnn.launcher.workloads import resolve_workload
from tests.hang_guard import HANG_GUARD_S
from tests.processes import alive, descendants
from tests.test_fit import CAPACITY

pytestmark = pytest.mark.real  # torch (the profiler loads the workload) and profiles in processes

LAMBDADNN = str(Path(sys.executable).parent / "lambdadnn")
MAPPING = {"name": "stub", "fit": {"workload": "digits-cnn"}}  # what the stub profile returns
HOSTILE = '''
import subprocess
import sys
import time
from pathlib import Path

from lambdadnn.launcher.workloads import Workload, digits_mlp


def exits(seed):
    raise SystemExit(7)


def exits_quietly(seed):
    sys.exit()


def exits_in_its_loss(seed):
    good = digits_mlp(seed)
    return Workload(good.model, good.train, good.test, lambda out, y: sys.exit(5), lr=0.1)


def sleeps(seed):
    time.sleep(10**6)


def waits_for_a_child(seed):
    subprocess.run(["sleep", "1000000"], check=False)


def sleeps_once_started(seed):
    Path("started").write_text("")
    time.sleep(10**6)
'''


@pytest.fixture
def stub_profile(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No trial runs: `profile_workload` returns `MAPPING`, and the workloads it was asked
    for are recorded; so are the workloads the CLI checked."""
    called: list[str] = []

    def profile(workload: str, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
        called.append(f"profile {workload}")
        return dict(MAPPING)

    def check(workload: str, *args: Any, **kwargs: Any) -> None:
        called.append(f"check {workload}")
        real(workload, *args, **kwargs)

    real = lambdadnn.launcher.workloads.check_workload
    monkeypatch.setattr(lambdadnn.launcher.profile, "profile_workload", profile)
    monkeypatch.setattr(lambdadnn.launcher.workloads, "check_workload", check)
    return called


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh module of hostile factories, `hostile_<hex>`, and a sibling `<it>_exits` that
    exits while imported, in the working folder; `sys.path` and `sys.modules` restored."""
    name = f"hostile_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(HOSTILE))
    (tmp_path / f"{name}_exits.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    for module in (name, f"{name}_exits"):
        sys.modules.pop(module, None)


def _never(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a trial ran")


def profile(*args: str) -> Result:
    return CliRunner().invoke(main, ["profile", *args])


def assert_one_line(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output)
    error = result.stderr
    assert error.startswith("error: ") and error.count("\n") == 1, error
    assert "Traceback" not in error
    for fragment in fragments:
        assert fragment in error, (fragment, error)


# -- --out, before anything runs ---------------------------------------------------------------


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "pipe")
    return folder / "pipe"


def _link_to_dev_full(folder: Path) -> Path:
    (folder / "link.yaml").symlink_to("/dev/full")
    return folder / "link.yaml"


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda _folder: Path("/dev/full"), "is a device, not a regular file"),
    (_link_to_dev_full, "is a device, not a regular file"),
    (lambda folder: folder, "is a folder, not a regular file"),
    (_fifo, "is a named pipe, not a regular file"),
    (lambda _folder: Path("/proc/lambdadnn-profile.yaml"), "cannot create a file in '/proc'"),
], ids=["dev-full", "link-to-dev-full", "folder", "fifo", "no-new-file-in-proc"])
def test_an_out_that_cannot_be_written_is_refused_before_the_factory_runs(
    make: Callable[[Path], Path], fragment: str, tmp_path: Path, stub_profile: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, /dev/full and a pipe were found only after the trials (a traceback and a
    0-byte file, or a write blocked forever), and a folder was a usage error (exit 2)."""
    monkeypatch.setattr(lambdadnn.launcher.profile, "profile_workload", _never)
    out = make(tmp_path)
    result = profile("--out", str(out))
    assert_one_line(result, "`--out`", repr(str(out)), fragment, "give ")
    assert stub_profile == []
    assert not Path("/proc/lambdadnn-profile.yaml").exists()


# -- writing: whole or not at all --------------------------------------------------------------


def _fails(code: int) -> Callable[..., None]:
    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("before", [None, "previous instance\n"], ids=["new", "existing"])
@pytest.mark.parametrize(("step", "code"), [("fsync", errno.ENOSPC), ("replace", errno.EIO)],
                         ids=["disk-full-at-fsync", "io-error-at-rename"])
def test_a_failed_write_leaves_no_partial_file_and_the_old_one_intact(
    step: str, code: int, before: str | None, tmp_path: Path, stub_profile: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The text is in the temporary file when the disk reports it full (as delayed allocation
    does, at fsync) or the rename fails: one line, the temporary file gone, `--out` as it was
    (absent, or the previous instance)."""
    out = tmp_path / "x.yaml"
    if before is not None:
        out.write_text(before)
    monkeypatch.setattr(os, step, _fails(code))
    result = profile("--out", str(out), "--json")
    assert_one_line(result, "cannot write `--out`", repr(str(out)), os.strerror(code),
                    "left as it was")
    assert stub_profile == ["check digits-cnn", "profile digits-cnn"]
    assert [p.name for p in tmp_path.iterdir()] == ([] if before is None else ["x.yaml"])
    assert (out.read_text() if before is not None else None) == before


def test_the_instance_replaces_the_old_file_instead_of_overwriting_it(
    tmp_path: Path, stub_profile: list[str],
) -> None:
    """A reader of the previous file (a solve started from it) keeps reading it whole: the new
    instance is renamed over it, not written into it (truncated, then filled)."""
    out = tmp_path / "x.yaml"
    out.write_text("previous instance\n")
    with out.open(encoding="utf-8") as reader:
        result = profile("--out", str(out), "--json")
        assert result.exit_code == 0, result.output
        assert reader.read() == "previous instance\n"
    assert out.read_text().startswith("# Written by `lambdadnn profile --workload digits-cnn")
    assert json.loads(result.stdout)["instance"] == str(out)
    assert [p.name for p in tmp_path.iterdir()] == ["x.yaml"]


# -- the factory -------------------------------------------------------------------------------


@pytest.mark.parametrize(("factory", "fragment"), [
    ("{m}:exits", "its factory raised SystemExit(7)"),
    ("{m}:exits_quietly", "its factory raised SystemExit(None)"),
    ("{m}:exits_in_its_loss", "its model and loss fail on two training samples (SystemExit(5))"),
    ("{m}_exits:anything", "cannot import module '{m}_exits' (SystemExit(3))"),
])
def test_a_factory_that_exits_is_one_line_naming_it(
    factory: str, fragment: str, hostile: str, tmp_path: Path, stub_profile: list[str],
) -> None:
    """Before, `SystemExit(7)` ended the profile silently with exit code 7 (`sys.exit()`: 0)."""
    workload = factory.format(m=hostile)
    result = profile("--workload", workload, "--out", str(tmp_path / "x.yaml"))
    assert_one_line(result, f"`--workload` {workload!r}", fragment.format(m=hostile))
    assert stub_profile == [f"check {workload}"]
    assert not (tmp_path / "x.yaml").exists()


def test_the_library_profile_refuses_an_exiting_factory_before_any_trial(hostile: str) -> None:
    """`profile_workload` (which sizes the workload by calling its factory) gets the same
    refusal from the same check: a LaunchError, never the factory's SystemExit."""
    workload = resolve_workload(f"{hostile}:exits")  # as the CLI does: the folder on the path
    with pytest.raises(LaunchError, match=rf"`--workload` '{workload}': its factory "
                                          r"raised SystemExit\(7\)"):
        profile_workload(workload, CAPACITY, _never)


@pytest.mark.parametrize("factory", ["sleeps", "waits_for_a_child"])
def test_a_factory_that_hangs_is_stopped_after_the_timeout(
    factory: str, hostile: str, tmp_path: Path, stub_profile: list[str],
) -> None:
    """Before, it waited forever. A child the factory waits for is killed with it; the alarm
    and its handler are as they were afterwards."""
    handler = signal.getsignal(signal.SIGALRM)
    before = descendants(os.getpid())
    workload = f"{hostile}:{factory}"
    result = profile("--workload", workload, "--factory-timeout-s", "1",
                     "--out", str(tmp_path / "x.yaml"))
    assert_one_line(result, f"`--workload` {workload!r}", "did not finish within 1 s",
                    "`--factory-timeout-s`")
    assert stub_profile == [f"check {workload}"]
    assert not [pid for pid in descendants(os.getpid()) - before if alive(pid)]
    assert signal.getsignal(signal.SIGALRM) == handler
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_ctrl_c_during_the_factory_exits_130_in_one_line(hostile: str, tmp_path: Path) -> None:
    """Ctrl-C is not the factory's error: it stops the profile as between trials (before, it
    was click's `Aborted!`, exit 1)."""
    process = subprocess.Popen(
        [LAMBDADNN, "profile", "--workload", f"{hostile}:sleeps_once_started",
         "--out", str(tmp_path / "x.yaml")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C's default, even when this test runs where SIGINT is ignored (a background job)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=HANG_GUARD_S)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "SIGINT" in err, err
    assert not (tmp_path / "x.yaml").exists()


# -- --max-load --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "inf", "-inf", "nan", "1e7", "abc", "", "0x10"])
def test_a_max_load_out_of_range_is_a_usage_error_before_anything_runs(
    value: str, tmp_path: Path, stub_profile: list[str],
) -> None:
    """`--max-load` is a positive finite number up to 10⁶: anything else is click's usage
    error (exit 2) naming the option, and neither the factory nor a trial runs."""
    result = profile("--max-load", value, "--out", str(tmp_path / "x.yaml"))
    assert result.exit_code == 2, result.output
    assert "--max-load" in result.output and "Traceback" not in result.output
    assert stub_profile == []
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize(("given", "passed"), [([], None), (["--max-load", "3.5"], 3.5)])
def test_max_load_reaches_the_profile(
    given: list[str], passed: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The option, or None for the default (the machine's CPUs), is what `profile_workload`
    gets."""
    got: dict[str, Any] = {}

    def stub(workload: str, *_args: Any, **kwargs: Any) -> dict[str, Any]:
        got.update(kwargs)
        return dict(MAPPING)

    monkeypatch.setattr(lambdadnn.launcher.profile, "profile_workload", stub)
    result = profile(*given, "--json", "--out", str(tmp_path / "x.yaml"))
    assert result.exit_code == 0, result.output
    assert got["max_load"] == passed
