"""A launch that stops is not lost, and leaves nothing behind for good.

- The job's Redis keys expire (`key_ttl_s` after the last checkpoint) instead of never;
- `launch --resume JOB` continues a stopped job from its last checkpoint in Redis, not from 0,
  and ends exactly where an uninterrupted run does;
- the empty cgroups and the redis-server folder a SIGKILLed launcher left are swept by the
  next launch, and only those;
- a worker that fails (a full Redis) is one line each, its traceback only at `-v`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from click.testing import CliRunner

from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.channel import BarrierTimeoutError, ParameterChannel
from lambdadnn.launcher.local import CGROUP_ROOT, Interrupted, cap_cpu, redis_server, run_local
from lambdadnn.launcher.spec import read_plan
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # launches with a redis-server and torch workers

ROLE = "arn:aws:iam::123456789012:role/lambdadnn-worker"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 1, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert all(fragment in err for fragment in fragments), err
    assert "Traceback" not in out + err


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    """The 1DCNN plan from `solve --json`, shrunk to 2 workers of 512 MB and 40 iterations."""
    solved = solve("instances/1dcnn-imdb.yaml").to_dict()
    solved.update(functions=2, memory_mb=512, iterations=40)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(solved))
    return path


# -- expiry -----------------------------------------------------------------------------------


def _ttls(client: redis.Redis, channel: ParameterChannel) -> dict[str, int]:
    return {key.decode(): int(client.ttl(key))
            for key in client.scan_iter(match=f"{channel.prefix}*")}


def test_every_key_of_a_job_expires_and_a_checkpoint_pushes_it_back(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        job = f"test-{uuid.uuid4().hex[:8]}"
        alone = ParameterChannel(client, job, workers=1, key_ttl_s=1000)
        pair = ParameterChannel(client, job, workers=2, key_ttl_s=1000, barrier_timeout_s=1)
        try:
            alone.initialise(np.zeros(4, dtype=np.float32), lr=0.1, momentum=0.9)
            alone.exchange(0, 0, np.ones(4), 1.0)
            alone.checkpoint(1)
            alone.set_halt(True)
            alone.request_checkpoint()
            alone.record_restart()
            alone.record_timings(0, 0, {"returned": True})
            alone.finish({"final_loss": 1.0})
            with pytest.raises(BarrierTimeoutError):  # rank 1 never pushes: its keys stay
                pair.exchange(0, 1, np.ones(4), 1.0, stop=True)
            ttls = _ttls(client, alone)
            assert {f"{alone.prefix}{name}" for name in (
                "state", "checkpoint", "config", "heartbeats", "restarts", "result", "halt",
                "save", "timings", "it:1:grads", "it:1:losses", "it:1:stop",
            )} <= ttls.keys()
            assert all(0 < ttl <= 1000 for ttl in ttls.values()), ttls
            for key in ttls:
                client.expire(key, 5)
            alone.client.delete(f"{alone.prefix}halt")
            alone.checkpoint(1)
            assert _ttls(client, alone)[f"{alone.prefix}state"] > 900
        finally:
            alone.cleanup()


# -- --resume: refusals -----------------------------------------------------------------------


def test_resume_without_a_redis_url_is_one_line(plan: Path, nothing_starts: None) -> None:
    assert_one_line(*run("launch", str(plan), "--resume", "local-0123456789ab"),
                    "`--resume` needs `--redis-url`", "ends with that launch")


def test_resume_on_aws_is_one_line(plan: Path) -> None:
    assert_one_line(*run("launch", str(plan), "--backend", "aws", "--role-arn", ROLE,
                         "--redis-url", "redis://127.0.0.1:1/0", "--resume", "aws-0-2x512"),
                    "`--resume` continues a local launch")


@pytest.mark.parametrize("job", ["../../etc", "a b", "x*", "", "j" * 65])
def test_resume_of_something_not_a_job_name_is_one_line(
    job: str, plan: Path, redis_url: str, nothing_starts: None
) -> None:
    assert_one_line(*run("launch", str(plan), "--redis-url", redis_url, "--resume", job),
                    "`--resume`", "is not a job name")


def test_resume_of_a_job_with_no_checkpoint_is_one_line(
    plan: Path, redis_url: str, nothing_starts: None
) -> None:
    job = f"local-{uuid.uuid4().hex[:12]}"
    assert_one_line(*run("launch", str(plan), "--redis-url", redis_url, "--resume", job),
                    f"`--resume` {job}: job '{job}' has no checkpoint in this Redis")


def test_resume_is_documented_in_help() -> None:
    code, out, _err = run("launch", "--help")
    assert code == 0 and "--resume JOB" in out
    assert "--redis-url" in out and "ends with it" in " ".join(out.split())


# -- --resume: a stopped run continues from its checkpoint ------------------------------------


def test_a_stopped_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(
    plan: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, job_names: list[str]
) -> None:
    """Stopped by SIGTERM past iteration 12, its group halted there too so that it cannot
    finish before the launcher sees the signal; resumed through the CLI, it must start at the
    checkpoint in Redis and end with the very loss of a run that never stopped (the batches
    are a function of the iteration, so a lost or repeated iteration would show)."""
    spec = read_plan(plan)
    reference = run_local(spec, redis_url=redis_url, checkpoint_every=10)
    client = redis.Redis.from_url(redis_url)

    def stop_past_12(iteration: int, _total: int) -> None:
        if iteration >= 12 and not client.exists(f"lambdadnn:{job_names[-1]}:halt"):
            ParameterChannel(client, job_names[-1], workers=2).set_halt(True)
            os.kill(os.getpid(), signal.SIGTERM)  # noted; raised at the launcher's next poll

    try:
        with pytest.raises(Interrupted) as stopped:
            run_local(spec, redis_url=redis_url, checkpoint_every=10, progress=stop_past_12)
        job = job_names[-1]
        assert f"job {job} keeps its checkpoint in Redis: continue it with `--resume {job}`" in (
            str(stopped.value))
        checkpoint = int(client.hget(f"lambdadnn:{job}:checkpoint", "iteration") or -1)
        assert 10 <= checkpoint < spec.iterations  # the periodic one, or the halt's
        ttls = {key: client.ttl(key) for key in client.scan_iter(match=f"lambdadnn:{job}:*")}
        assert ttls and all(0 < ttl <= spec.key_ttl_s for ttl in ttls.values()), ttls
        assert spec.instance is not None
        assert spec.key_ttl_s >= 86_400 + spec.instance.objective.deadline_s

        code, out, err = run("launch", str(plan), "--redis-url", redis_url, "--resume", job,
                             "--checkpoint-every", "10", "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["status"] == "done" and report["iterations"] == spec.iterations
        assert report["rounds"][0]["iterations_from"] == checkpoint
        assert report["restarts"] == 0 and report["invocations"] == 2
        assert report["final_loss"] == pytest.approx(reference.final_loss, rel=1e-5)
        assert not list(client.scan_iter(match=f"lambdadnn:{job}:*"))  # done: deleted
    finally:
        for job in job_names:
            ParameterChannel(client, job, workers=2).cleanup()
        client.close()


# -- stale cgroups ----------------------------------------------------------------------------


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _fake_root(tmp_path: Path, version: str) -> Path:
    """A cgroup root of `version` in `tmp_path`; returns the folder the cgroups go in."""
    if version == "v2":
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
        (tmp_path / "cgroup.subtree_control").write_text("")
        return tmp_path
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path / "cpu"


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_the_next_launch_sweeps_only_the_empty_cgroups_of_dead_launchers_of_its_user(
    version: str, tmp_path: Path
) -> None:
    base = _fake_root(tmp_path, version)
    dead = _dead_pid()
    stale = base / f"lambdadnn-local-stale.pid{dead}"
    for rank in (0, 1):
        (stale / f"rank-{rank}").mkdir(parents=True)
    kept = [base / f"lambdadnn-local-running.pid{os.getpid()}",  # its launcher runs
            base / f"lambdadnn-local-busy.pid{dead}",  # a process is still in it
            base / "lambdadnn-local-unnamed",  # no pid: not ours to judge
            base / f"someone-else.pid{dead}"]  # not a launch's at all
    for group in kept:
        (group / "rank-0").mkdir(parents=True)
    (kept[1] / "rank-0" / "cgroup.procs").write_text("4242\n")
    if os.geteuid() == 0:  # another user's stale cgroup
        kept.append(base / f"lambdadnn-local-theirs.pid{dead}")
        kept[-1].mkdir()
        os.chown(kept[-1], 65534, 65534)
    cap = cap_cpu("new", 1, 1769, root=tmp_path)
    assert cap.description.startswith("capped"), cap.description
    assert not stale.exists()
    assert all(group.exists() for group in kept)
    for control in (base / "lambdadnn-new").rglob("*.*"):  # cgroupfs removes them on rmdir
        control.unlink()
    cap.remove()


def test_the_real_cgroup_root_is_swept_too() -> None:
    probe = cap_cpu(f"probe-{uuid.uuid4().hex[:8]}", 1, 1769)
    probe.remove()
    if not probe.description.startswith("capped"):
        pytest.skip(f"no writable cgroup cpu controller here: {probe.description}")
    base = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "cpu"
    stale = base / f"lambdadnn-test-{uuid.uuid4().hex[:8]}.pid{_dead_pid()}"
    (stale / "rank-0").mkdir(parents=True)  # on cgroupfs, a cgroup with its control files
    cap = cap_cpu(f"test-{uuid.uuid4().hex[:8]}", 1, 1769)
    try:
        assert not stale.exists()
    finally:
        cap.remove()
        for folder in (stale / "rank-0", stale):
            if folder.exists():
                folder.rmdir()


def test_the_next_launch_removes_the_server_folders_of_dead_launchers(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path_factory.mktemp("t")  # short: a unix socket path has at most 107 bytes
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    dead = _dead_pid()
    stale = temp / f"lambdadnn-redis-{dead}-x1y2z3"
    stale.mkdir(mode=0o700)
    (stale / "redis.log").write_text("the log of a server killed with its launcher\n")
    kept = [temp / f"lambdadnn-redis-{os.getpid()}-a1b2c3",  # a running launch's
            temp / "lambdadnn-redis-a1b2c3",  # no pid: not ours to judge
            temp / f"lambdadnn-redis-{dead}-s3rv3s"]  # its server still answers
    for folder in kept:
        folder.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(kept[-1] / "redis.sock"))
        listener.listen()
        with redis_server() as url:
            assert Path(url.removeprefix("unix://")).parent.parent == temp
            assert not stale.exists() and all(folder.exists() for folder in kept)


# -- one line per failed worker ---------------------------------------------------------------


def _state_iteration(client: redis.Redis) -> int:
    return max((int(client.hget(key, "iteration") or 0)
                for key in client.scan_iter(match="lambdadnn:*:state")), default=0)


@pytest.fixture
def full_redis_launch(plan: Path) -> Iterator[Any]:
    """Launch `plan` (made endless) on a Redis of its own that fills up once training runs:
    `launch_until_full(*global_options)` returns the exit code and stderr."""
    endless = plan.with_name("endless.json")
    endless.write_text(json.dumps({**json.loads(plan.read_text()), "iterations": 10**6}))
    lambdadnn = str(Path(sys.executable).parent / "lambdadnn")
    started: list[subprocess.Popen[str]] = []

    def launch_until_full(*options: str) -> tuple[int, str]:
        with redis_server() as url, redis.Redis.from_url(url) as client:
            process = subprocess.Popen(
                [lambdadnn, *options, "launch", str(endless), "--redis-url", url, "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            started.append(process)
            guard = time.monotonic() + HANG_GUARD_S
            while _state_iteration(client) < 1 and process.poll() is None:
                assert time.monotonic() < guard, "the launch did not start training"
                time.sleep(0.1)
            client.config_set("maxmemory", 1)  # below what it uses: every write is refused
            _out, err = process.communicate(timeout=HANG_GUARD_S)
            return process.returncode, err

    yield launch_until_full
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_full_redis_is_one_line_per_worker_and_the_detail_is_at_verbose(
    full_redis_launch: Any,
) -> None:
    with ThreadPoolExecutor(2) as pool:  # both at once: one torch start-up of wall time
        quiet, verbose = pool.map(lambda options: full_redis_launch(*options), [(), ("-v",)])
    code, err = quiet
    lines = err.splitlines()
    assert code == 1, err
    assert "Traceback" not in err
    workers = [line for line in lines if line.startswith("warning: worker ")]
    assert workers and all(re.fullmatch(
        r"warning: worker \d: redis refused a write: OOM, its used memory is over its "
        r"`maxmemory`", line) for line in workers), err
    assert lines == [*workers, lines[-1]], err
    assert lines[-1].startswith("error: the parameter channel at ")
    assert "OOM" in lines[-1] and "raise its `maxmemory`" in lines[-1]
    code, err = verbose
    assert code == 1 and "warning: worker " in err
    assert "debug: worker " in err and "Traceback (most recent call last)" in err
    assert "redis.exceptions.OutOfMemoryError" in err
