"""`lambdadnn launch` against hostile plans, URLs, limits, missing extras and signals.

Every refusal is one `error:` line and exit 1, decided before anything starts; a launch stopped
by SIGINT, SIGTERM, SIGHUP (or `timeout`) leaves no process and no cgroup behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import lambdadnn.launcher.local
from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.local import CGROUP_ROOT, MAX_LOCAL_FUNCTIONS, sweep_cgroups
from lambdadnn.launcher.spec import LaunchSpec, read_plan
from lambdadnn.models.errors import LambdaDnnError
from tests.hang_guard import HANG_GUARD_S
from tests.processes import alive, cmdline, descendants

pytestmark = pytest.mark.real  # torch (a launch loads the workload), launches and their processes

ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"
PLAN_KEYS = ("functions", "memory_mb", "local_batch", "iterations", "time_s", "status",
             "platform", "architecture")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 1, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err, err
    assert "Traceback" not in out + err


@pytest.fixture(scope="module")
def solved() -> dict[str, Any]:
    """The 1DCNN plan from `solve --json`, shrunk to 2 workers of 512 MB."""
    plan = solve("instances/1dcnn-imdb.yaml").to_dict()
    plan.update(functions=2, memory_mb=512, iterations=20)
    return plan


def write(tmp_path: Path, plan: Any, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(plan if isinstance(plan, str) else json.dumps(plan))
    return path


# -- plan JSON --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"functions": NaN}', "NaN"),
        ('{"functions": Infinity}', "Infinity"),
        ('{"functions": -Infinity}', "-Infinity"),
        ('{"functions": 2, "functions": 3}', "`functions` appears twice"),
        ("[1, 2]", "must be a JSON object"),
        ("null", "must be a JSON object"),
        ('{"functions": 2', "not valid JSON at line 1"),
        ("[" * 100_000, "nests too deeply"),
        ('{"functions": ' + "9" * 5000 + "}", "not valid JSON"),
        ("", "not valid JSON"),
    ],
)
def test_malformed_plan_json_is_one_line(
    text: str, fragment: str, tmp_path: Path, nothing_starts: None
) -> None:
    assert_one_line(*run("launch", str(write(tmp_path, text))), fragment)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("functions", 1.5, "`functions` in file"),
        ("functions", 0, "`functions` in file"),
        ("functions", True, "`functions` in file"),
        ("functions", "2", "`functions` in file"),
        ("functions", 10**30, "`functions` in file"),
        ("memory_mb", 100, "`memory_mb` in file"),
        ("memory_mb", 20_000, "`memory_mb` in file"),
        ("memory_mb", 1024.5, "`memory_mb` in file"),
        ("iterations", -3, "`iterations` in file"),
        ("local_batch", [32], "`local_batch` in file"),
        ("time_s", 0, "`time_s` in file"),
        ("restarts", -1, "`restarts` in file"),
        ("status", "great", "`status` in file"),
        ("platform", 7, "`platform` in file"),
        ("platform", None, "`platform` is missing"),
        ("architecture", "sparc", "`architecture` in file"),
        ("architecture", None, "`architecture` is missing"),
    ],
)
def test_bad_plan_values_are_one_line_naming_the_key(
    key: str, value: Any, fragment: str, solved: dict[str, Any], tmp_path: Path,
    nothing_starts: None,
) -> None:
    assert_one_line(*run("launch", str(write(tmp_path, {**solved, key: value}))), fragment)


def test_an_overflowing_number_is_named(
    solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    """`1e400` is valid JSON text that parses to infinity (no NaN/Infinity literal to refuse)."""
    plan = json.dumps({k: v for k, v in solved.items() if k != "iterations"})
    text = plan[:-1] + ', "iterations": 1e400}'
    assert_one_line(*run("launch", str(write(tmp_path, text))), "`iterations` in file")


@pytest.mark.parametrize("key", PLAN_KEYS)
def test_each_missing_key_is_named(
    key: str, solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    plan = {k: v for k, v in solved.items() if k != key}
    assert_one_line(*run("launch", str(write(tmp_path, plan))), f"`{key}` is missing")


def test_numpy_numbers_and_whole_floats_are_numbers(solved: dict[str, Any]) -> None:
    import numpy as np

    spec = LaunchSpec.from_mapping({**solved, "functions": np.int64(3), "memory_mb": 1024.0,
                                    "iterations": np.float64(10.2)})
    assert (spec.functions, spec.memory_mb, spec.iterations) == (3, 1024, 11)
    assert type(spec.functions) is int


def test_a_direct_spec_is_checked_too() -> None:
    with pytest.raises(LambdaDnnError, match="`memory_mb`"):
        LaunchSpec(functions=2, memory_mb=20_000, local_batch=32, iterations=10, time_s=1.0,
                   restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")


def test_a_fifo_as_plan_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    assert_one_line(*run("launch", str(fifo)), "not a regular file")


def _json_values() -> st.SearchStrategy[Any]:
    scalars = (st.none() | st.booleans() | st.integers() | st.floats()
               | st.text(max_size=20))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                        max_leaves=12)


def _plan_like() -> st.SearchStrategy[dict[str, Any]]:
    """Plans whose keys are right and whose values are anything: the checks' own corners."""
    numbers = (st.integers(min_value=-5, max_value=20_000) | st.floats()
               | st.sampled_from([1.5, 128, 10_240, 10_241, 2**70, -0.0]))
    values = numbers | _json_values() | st.sampled_from(["optimal", "infeasible", "x86"])
    return st.fixed_dictionaries({}, optional={key: values for key in (*PLAN_KEYS, "restarts")})


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _read_or_one_line(path: Path) -> None:
    try:
        spec = read_plan(path)
    except LambdaDnnError as error:
        assert "\n" not in str(error) and len(str(error)) < 400, str(error)
        return
    assert spec.functions >= 1 and 128 <= spec.memory_mb <= 10_240
    assert spec.iterations >= 1 and spec.local_batch >= 1 and math.isfinite(spec.time_s)
    assert spec.architecture in ("x86_64", "arm64")


@given(payload=_plan_like() | _json_values())
def test_fuzz_plan_values_give_a_spec_or_one_line(payload: Any, fuzz_dir: Path) -> None:
    _read_or_one_line(write(fuzz_dir, json.dumps(payload)))  # NaN/Infinity written as such


@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_fuzz_plan_text_gives_a_spec_or_one_line(text: str, fuzz_dir: Path) -> None:
    _read_or_one_line(write(fuzz_dir, text))


# -- the platform travels with the plan -------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "architecture"),
    [("aws-lambda-arm64", "arm64"), ("aws-lambda-x86_64", "x86_64"),
     ("aws-lambda-2020", "x86_64")],
)
def test_dry_run_deploys_the_plans_architecture(
    platform: str, architecture: str, tmp_path: Path
) -> None:
    plan = solve("instances/1dcnn-imdb.yaml", platform=platform).to_dict()
    code, out, err = run("launch", str(write(tmp_path, plan)), "--backend", "aws",
                         "--role-arn", ROLE, "--dry-run")
    assert code == 0, err
    create = json.loads(out)[0]
    assert create["operation"] == "CreateFunction"
    assert create["params"]["Architectures"] == [architecture]


def test_an_instance_solved_for_arm64_deploys_on_arm64() -> None:
    code, out, err = run("launch", "instances/1dcnn-imdb.yaml", "--platform",
                         "aws-lambda-arm64", "--backend", "aws", "--role-arn", ROLE,
                         "--dry-run")
    assert code == 0, err
    assert json.loads(out)[0]["params"]["Architectures"] == ["arm64"]


def test_platform_option_with_a_plan_json_is_refused(
    solved: dict[str, Any], tmp_path: Path
) -> None:
    assert_one_line(*run("launch", str(write(tmp_path, solved)), "--platform",
                         "aws-lambda-arm64"), "`--platform`")


# -- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fragment"),
    [("redis://127.0.0.1:1/0", "no Redis answers"), ("notaurl", "not a Redis URL"),
     ("redis://:x:y", "not a Redis URL"), ("redis://h:99999/0", "not a Redis URL")],
)
def test_bad_redis_url_is_one_line(
    url: str, fragment: str, solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    code, out, err = run("launch", str(write(tmp_path, solved)), "--redis-url", url)
    assert_one_line(code, out, err, "`--redis-url`")
    assert fragment in err


def test_unparsable_redis_url_is_refused_by_the_dry_run_too(
    solved: dict[str, Any], tmp_path: Path
) -> None:
    assert_one_line(*run("launch", str(write(tmp_path, solved)), "--backend", "aws",
                         "--role-arn", ROLE, "--dry-run", "--redis-url", "notaurl"),
                    "`--redis-url`")


@pytest.mark.parametrize("value", ["inf", "nan", "Infinity"])
def test_non_finite_timeout_is_refused_before_anything_starts(
    value: str, solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    """Like every ranged option's (tests/test_cli_finite.py): a usage error, exit 2."""
    code, out, err = run("launch", str(write(tmp_path, solved)), "--timeout-s", value)
    assert code == 2, (out, err)
    assert "'--timeout-s'" in err and "is not a finite number" in err, err
    assert "Traceback" not in out + err


# -- missing extras ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "backend", "name"),
    [("torch", "local", "torch"), ("sklearn", "local", "scikit-learn"),
     ("redis", "local", "redis"), ("boto3", "aws", "boto3")],
)
def test_missing_extras_say_what_to_install(
    module: str, backend: str, name: str, solved: dict[str, Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails
    code, out, err = run("launch", str(write(tmp_path, solved)), "--backend", backend,
                         "--role-arn", ROLE, "--redis-url", "redis://127.0.0.1:1/0")
    assert_one_line(code, out, err, f"needs {name}")
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in err
    assert "pip install 'lambdadnn[launch]'" in err


def test_missing_torch_in_a_fresh_process_is_one_line(
    solved: dict[str, Any], tmp_path: Path
) -> None:
    """The installed command, not CliRunner: torch made unimportable before the CLI loads."""
    path = write(tmp_path, solved)
    code = ("import sys; sys.modules['torch'] = None; from lambdadnn.cli import main; "
            f"main(['launch', {str(path)!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "needs torch" in done.stderr and "Traceback" not in done.stderr


# -- launch limits ----------------------------------------------------------------------------


def test_more_functions_than_the_local_cap_is_refused(
    solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    for functions in (MAX_LOCAL_FUNCTIONS + 1, 10_000):
        plan = write(tmp_path, {**solved, "functions": functions, "memory_mb": 128})
        assert_one_line(*run("launch", str(plan), "--oversubscribe"), "`functions`")


def test_more_vcpu_than_the_machine_needs_oversubscribe(
    solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    cpus = lambdadnn.launcher.local.available_cpus()
    memory = 10_240
    functions = math.floor(cpus * 1769 / memory) + 1  # just over the machine's CPUs
    plan = write(tmp_path, {**solved, "functions": functions, "memory_mb": memory})
    assert_one_line(*run("launch", str(plan)), "`--oversubscribe`")


def test_oversubscribe_runs_with_a_warning(
    solved: dict[str, Any], tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lambdadnn.launcher.local, "available_cpus", lambda: 0)
    code, out, err = run("launch", str(write(tmp_path, solved)), "--redis-url", redis_url,
                         "--oversubscribe", "--json")
    assert code == 0, err
    assert err.startswith("warning: the plan needs 2 × 512 MB") and "oversubscribed" in err
    assert json.loads(out)["status"] == "done"


def test_an_infeasible_plan_needs_force(
    solved: dict[str, Any], tmp_path: Path, nothing_starts: None
) -> None:
    plan = write(tmp_path, {**solved, "status": "infeasible"})
    assert_one_line(*run("launch", str(plan)), "`--force`")
    code, out, err = run("launch", str(plan), "--force", "--backend", "aws", "--role-arn",
                         ROLE, "--dry-run")
    assert code == 0 and err.startswith("warning: ") and "--force" in err, err
    assert json.loads(out)[0]["operation"] == "CreateFunction"


def test_an_instance_that_misses_its_deadline_needs_force(tmp_path: Path) -> None:
    text = Path("instances/1dcnn-imdb.yaml").read_text()
    instance = tmp_path / "late.yaml"
    instance.write_text(text.replace("deadline_s: 300", "deadline_s: 1"))
    assert_one_line(*run("launch", str(instance)), "`--force`")
    code, out, err = run("launch", str(instance), "--force", "--backend", "aws", "--role-arn",
                         ROLE, "--dry-run")
    assert code == 0 and err.startswith("warning: no plan meets the deadline"), err
    assert json.loads(out)[0]["operation"] == "CreateFunction"


# -- signals ----------------------------------------------------------------------------------


def _training(root: int) -> tuple[set[int], list[Path]]:
    """Wait until the launch under `root` trains; its processes and its job's cgroup dirs."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        pids = descendants(root)
        servers = [p for p in pids if b"redis-server" in cmdline(p)]
        workers = [p for p in pids if b"_worker_main" in cmdline(p)]
        if servers and len(workers) == 2:
            # redis-server retitles itself "redis-server unixsocket:PATH" (it has no TCP port)
            sock = re.findall(rb"unixsocket:([^\s\x00]+)", cmdline(servers[0]))[-1].decode()
            try:
                with redis.Redis(unix_socket_path=sock, socket_connect_timeout=1) as client:
                    for key in client.scan_iter(match="lambdadnn:*:state"):
                        if int(client.hget(key, "iteration") or 0) >= 1:
                            job = key.decode().split(":")[1]
                            groups = [group for base in (CGROUP_ROOT, CGROUP_ROOT / "cpu")
                                      for group in base.glob(f"lambdadnn-{job}.pid*")]
                            return pids, groups
            except redis.RedisError:
                pass
        time.sleep(0.2)
    raise AssertionError("the launch did not start training")


@pytest.fixture
def long_plan(solved: dict[str, Any], tmp_path: Path) -> Path:
    return write(tmp_path, {**solved, "iterations": 10**6})


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[str]]]:
    """The launches a test starts; whatever they leave is killed after the test."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:  # a failed test: the launch's own clean-up first
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=HANG_GUARD_S)
        for pid in descendants(process.pid) | {process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()


def _launch(long_plan: Path, prefix: list[str]) -> subprocess.Popen[str]:
    command = [*prefix, str(Path(sys.executable).parent / "lambdadnn"), "launch",
               str(long_plan), "--json"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _assert_gone(pids: set[int], groups: list[Path]) -> None:
    deadline = time.monotonic() + HANG_GUARD_S  # reparented zombies are reaped at once
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]
    assert not [group for group in groups if group.exists()]


@pytest.mark.parametrize(
    ("name", "prefix"),
    [("SIGTERM", []), ("SIGHUP", []), ("SIGINT", []), ("SIGTERM", ["timeout", "600"])],
    ids=["term", "hup", "int", "timeout-term"],
)
def test_a_signal_cleans_up_every_process_and_cgroup(
    name: str, prefix: list[str], long_plan: Path, launched: list[subprocess.Popen[str]]
) -> None:
    process = _launch(long_plan, prefix)
    launched.append(process)
    pids, groups = _training(process.pid)
    process.send_signal(signal.Signals[name])  # `timeout` passes it on to the launch
    _, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 128 + signal.Signals[name]
    assert err == f"error: launch stopped by {name}; it left no process or cgroup behind\n"
    _assert_gone(pids - {process.pid}, groups)


def test_a_killed_launcher_takes_its_processes_with_it(
    long_plan: Path, launched: list[subprocess.Popen[str]]
) -> None:
    process = _launch(long_plan, [])
    launched.append(process)
    pids, groups = _training(process.pid)
    process.kill()
    process.communicate(timeout=HANG_GUARD_S)
    try:
        _assert_gone(pids - {process.pid}, [])  # SIGKILL runs no clean-up: the kernel does
    finally:  # its empty cgroups remain: the next launch's sweep removes them
        deadline = time.monotonic() + HANG_GUARD_S  # a killed worker's threads exit last
        while any(group.exists() for group in groups) and time.monotonic() < deadline:
            for group in groups:
                sweep_cgroups(group.parent)
            time.sleep(0.1)
        # Its server's folder too (the next launch's sweep would: tests/test_launch_resume.py).
        for folder in Path(tempfile.gettempdir()).glob(f"lambdadnn-redis-{process.pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)
    assert not [group for group in groups if group.exists()]
