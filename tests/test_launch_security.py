"""Another local user cannot reach the launcher's redis-server, and broken numbers fail the run.

The throw-away server listens on a unix socket in a 0700 folder and on no TCP port. Whatever
is read back from Redis is checked: NaN parameters (written into the live state and the
checkpoint mid-run, as an attacker did), a NaN gradient or a NaN loss end the run as failed,
with the reason, never as "done" with no loss.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pytest
import redis
from click.testing import CliRunner

import lambdadnn.launcher.local
from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.channel import ParameterChannel, UnrecoverableError
from lambdadnn.launcher.local import redis_server, run_local
from lambdadnn.launcher.spec import LaunchSpec, RunFailed
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # launches with a redis-server and torch workers

SPEC = LaunchSpec(functions=2, memory_mb=512, local_batch=32, iterations=5, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")


def _listening_tcp_inodes() -> set[str]:
    """The socket inodes of every TCP socket in the LISTEN state (IPv4 and IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    """The socket inodes process `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed while we looked
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def test_the_launchers_redis_has_no_tcp_port_and_a_private_socket_folder() -> None:
    with redis_server() as url:
        assert url.startswith("unix://"), url
        folder = Path(urlparse(url).path).parent
        info = folder.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
        with redis.Redis.from_url(url) as client:
            assert client.config_get("port") == {"port": "0"}
            pid = int(client.info("server")["process_id"])
        assert not _socket_inodes(pid) & _listening_tcp_inodes()  # no TCP port at all
    assert not folder.exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("redis-cli") is None,
                    reason="needs root (to switch to another uid) and redis-cli")
def test_another_user_cannot_connect_to_the_launchers_redis() -> None:
    with redis_server() as url:
        ping = [str(shutil.which("redis-cli")), "-s", urlparse(url).path, "ping"]
        ours = subprocess.run(ping, capture_output=True, text=True, timeout=HANG_GUARD_S)
        theirs = subprocess.run(ping, capture_output=True, text=True, timeout=HANG_GUARD_S,
                                user=65534, group=65534, cwd="/")
    assert ours.stdout.strip() == "PONG", (ours.stdout, ours.stderr)
    assert "PONG" not in theirs.stdout and "Permission denied" in theirs.stdout + theirs.stderr


@pytest.fixture
def spied_server(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The socket folder of every redis-server the launcher starts, checked as it starts."""
    folders: list[Path] = []
    original = lambdadnn.launcher.local.redis_server

    @contextmanager
    def spy(**kwargs: Any) -> Iterator[str]:
        with original(**kwargs) as url:
            folder = Path(urlparse(url).path).parent
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700
            folders.append(folder)
            yield url

    monkeypatch.setattr(lambdadnn.launcher.local, "redis_server", spy)
    return folders


def test_a_launch_runs_on_the_private_socket_and_removes_its_folder(
    spied_server: list[Path],
) -> None:
    report = run_local(SPEC)
    assert report.status == "done" and report.error is None
    assert len(spied_server) == 1 and not spied_server[0].exists()


# -- numbers read back from Redis -------------------------------------------------------------


def _worker_pids() -> list[int]:
    """This process's children that run the worker."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(entry.read_text().rsplit(")", 1)[1].split()[1])
            command = (entry.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if parent == os.getpid() and b"_worker_main" in command:
            pids.append(int(entry.parent.name))
    return pids


def _wait_dead(pid: int) -> None:
    """Until `pid` is a zombie whose every thread has exited (or gone): it writes nothing more
    to Redis after that. (Its main thread turns zombie first, while torch's still exit.)"""
    guard = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < guard:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z" and len(list(Path(f"/proc/{pid}/task").iterdir())) <= 1:
                return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"worker {pid} did not die")


def test_nan_parameters_written_mid_run_fail_the_run_naming_them(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, job_names: list[str]
) -> None:
    """As the other user did: NaN bytes into `state params` and into the checkpoint, while
    no worker can overwrite them (all stopped). The relaunch restores the checkpoint and its
    workers read the NaN: the run fails at once, never "done" with a null loss."""
    corrupted: list[int] = []

    def corrupt_once_trained(iteration: int, _total: int) -> None:
        if corrupted or iteration < 6:
            return
        for pid in _worker_pids():
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid)
        with redis.Redis.from_url(redis_url) as client:
            size = int(client.hget(f"lambdadnn:{job_names[0]}:config", "size") or 0)
            nan = np.full(size, np.nan, dtype=np.float32).tobytes()
            for key in ("state", "checkpoint"):
                client.hset(f"lambdadnn:{job_names[0]}:{key}", "params", nan)
        corrupted.append(iteration)

    spec = replace(SPEC, iterations=100)  # bounded: the unchecked code trained NaN to the end
    try:
        with pytest.raises(RunFailed) as failed:
            run_local(spec, redis_url=redis_url, checkpoint_every=5,
                      progress=corrupt_once_trained)
    finally:
        with redis.Redis.from_url(redis_url) as client:
            ParameterChannel(client, job_names[0], workers=2).cleanup()
    message = str(failed.value)
    assert corrupted and "\n" not in message
    assert message.startswith(f"job {job_names[0]} failed: worker ")
    assert f"`lambdadnn:{job_names[0]}:state` `params` in Redis holds" in message
    assert "non-finite value" in message and "NaN" in message
    report = failed.value.report
    assert report.status == "failed" and report.error == message
    assert report.final_loss is None and report.to_dict()["status"] == "failed"


@pytest.fixture
def channel(redis_url: str) -> Iterator[ParameterChannel]:
    with redis.Redis.from_url(redis_url) as client:
        job = f"test-{uuid.uuid4().hex[:8]}"
        made = ParameterChannel(client, job, workers=1)
        made.initialise(np.zeros(8, dtype=np.float32), lr=0.1, momentum=0.9)
        yield made
        made.cleanup()


def test_a_nan_gradient_read_back_is_refused_naming_its_rank(channel: ParameterChannel) -> None:
    gradient = np.ones(8, dtype=np.float32)
    gradient[3] = np.nan
    with pytest.raises(UnrecoverableError, match=r"rank 0's gradient of iteration 0 .* holds "
                                                 r"1 non-finite value \(NaN or ±inf\) of 8"):
        channel.exchange(0, 0, gradient, 1.0)
    assert channel.parameters()[0] == 0  # nothing was applied


@pytest.mark.parametrize("data", [np.full(8, np.inf, dtype=np.float32).tobytes(), b"\x00" * 7],
                         ids=["infinite", "short"])
def test_broken_parameters_in_redis_are_refused(channel: ParameterChannel, data: bytes) -> None:
    channel.client.hset(channel.prefix + "state", "params", data)
    with pytest.raises(UnrecoverableError, match=f"`{channel.prefix}state` `params` in Redis"):
        channel.parameters()


NAN_LOSS_MODULE = '''
import torch
from lambdadnn.launcher.workloads import Workload, load_workload


def nan_loss(seed: int) -> Workload:
    good = load_workload("digits-cnn", seed)
    return Workload(good.model, good.train, good.test,
                    lambda out, y: torch.nn.functional.cross_entropy(out, y) * float("nan"),
                    lr=0.05)
'''


def test_a_nan_loss_fails_the_launch_with_the_report_and_one_line(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"nanpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "models.py").write_text(NAN_LOSS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = solve("instances/1dcnn-imdb.yaml").to_dict()
    plan.update(functions=2, memory_mb=512, iterations=5)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = CliRunner().invoke(main, ["launch", str(path), "--redis-url", redis_url, "--json",
                                       "--workload", f"{package}.models:nan_loss"])
    error = result.stderr.splitlines()[-1]
    job = error.split()[2]
    with redis.Redis.from_url(redis_url) as client:
        ParameterChannel(client, job, workers=2).cleanup()
    assert result.exit_code == 1, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["status"] == "failed" and report["final_loss"] is None
    assert error.startswith(f"error: job {job} failed: worker ")
    assert "loss at iteration 0 is nan: the training diverged" in error
    assert report["error"] == error.removeprefix("error: ")
    assert "Traceback" not in result.stderr
