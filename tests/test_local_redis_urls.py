"""`run_local(..., redis_urls=[...])`: each parameter-server shard on a Redis of the caller's.

It is the caller's `redis_url` but for where each shard lives: a wrong list (length, type,
both given) or a URL where no Redis answers is one line before anything starts; a finished
run deletes its job's keys on every shard, a stopped one keeps them on every shard (for
`resume`, which works with `redis_urls` as with `redis_url`) and leaves no worker or cgroup.
Each shard's traffic reaches its own server, in the share the split gives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.local import CGROUP_ROOT, check_resume, redis_server, run_local
from lambdadnn.launcher.spec import LaunchSpec
from tests.hang_guard import HANG_GUARD_S

BASE = LaunchSpec(functions=2, memory_mb=884, local_batch=32, iterations=40, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")
TWO = BASE.with_shards(2)
BYTES = 4  # float32


def _one_line(error: BaseException) -> str:
    """The error's message, checked to be one line that chains no other traceback."""
    message = str(error)
    assert "\n" not in message and error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    return message


# -- refusals before anything starts ----------------------------------------------------------


@pytest.mark.parametrize("urls", [["redis://a:6379/0"], ["redis://a:6379/0"] * 3, []])
def test_a_list_of_the_wrong_length_is_one_line(urls: list[str], nothing_starts: None) -> None:
    with pytest.raises(LaunchError) as caught:
        run_local(TWO, redis_urls=urls)
    assert _one_line(caught.value) == (
        f"`redis_urls` lists {len(urls)} URL(s) but the plan has 2 parameter-server shard(s) "
        "(`shards`); give exactly one URL per shard")


def test_both_redis_url_and_redis_urls_is_one_line(nothing_starts: None) -> None:
    with pytest.raises(LaunchError) as caught:
        run_local(TWO, redis_url="redis://a:6379/0",
                  redis_urls=["redis://a:6379/0", "redis://b:6379/0"])
    message = _one_line(caught.value)
    assert message.startswith("`redis_url` and `redis_urls` are both given;")
    assert "not both" in message


@pytest.mark.parametrize("urls", ["redis://a:6379/0", ["redis://a:6379/0", 7], 7])
def test_not_a_list_of_urls_is_one_line(urls: object, nothing_starts: None) -> None:
    with pytest.raises(LaunchError) as caught:
        run_local(TWO, redis_urls=urls)  # type: ignore[arg-type]
    assert _one_line(caught.value).startswith("`redis_urls` must be a list of URLs, one per "
                                              "shard, not ")


def test_resume_accepts_redis_urls_in_place_of_redis_url() -> None:
    check_resume("local-0123456789ab", None, ["redis://a:6379/0", "redis://b:6379/0"])
    with pytest.raises(LaunchError, match="`--resume` needs `--redis-url`"):
        check_resume("local-0123456789ab", None, None)


# -- on real redis-servers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    """Two throw-away redis-servers of the caller's, one per shard."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(redis_server()) for _ in range(2)]


def _keys(url: str, pattern: str = "lambdadnn:*") -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return list(client.scan_iter(match=pattern))


def _received(url: str) -> int:
    """The bytes the server has read from its clients so far."""
    with redis.Redis.from_url(url) as client:
        return int(client.info("stats")["total_net_input_bytes"])


@pytest.mark.real
@pytest.mark.parametrize("bad", ["redis://127.0.0.1:1/0", "notaurl"])
def test_a_bad_url_is_one_line_naming_its_shard(
    bad: str, servers: list[str], nothing_starts: None,
) -> None:
    with pytest.raises(LaunchError) as caught:
        run_local(TWO, redis_urls=[servers[0], bad], workload="digits-mlp")
    message = _one_line(caught.value)
    assert message.startswith(f"`redis_urls[1]` {bad!r}"), message
    assert "no Redis answers there" in message or "is not a Redis URL" in message


@pytest.mark.real
def test_resume_on_redis_urls_of_a_job_with_no_checkpoint_is_one_line(
    servers: list[str], nothing_starts: None,
) -> None:
    job = f"local-{uuid.uuid4().hex[:12]}"
    with pytest.raises(LaunchError) as caught:
        run_local(TWO, redis_urls=servers, workload="digits-mlp", resume=job)
    message = _one_line(caught.value)
    assert message.startswith(f"`--resume` {job}: job '{job}' has no checkpoint"), message
    assert message.endswith("or give the `redis_urls` it ran on")


@pytest.mark.real
def test_two_shards_on_two_servers_each_get_their_share_and_finish_clean(
    servers: list[str],
) -> None:
    """The report's per-shard bytes are the split's shares, each server received at least
    its shard's pushes, no warning about a shared Redis, the loss is that of the same run
    with both shards on one Redis, and the finished job's keys are gone from both."""
    from lambdadnn.launcher.workloads import load_workload

    size = sum(p.numel() for p in load_workload("digits-mlp", 0).model.parameters())
    before = [_received(url) for url in servers]
    warned: list[str] = []
    report = run_local(TWO, redis_urls=servers, workload="digits-mlp", seed=7,
                       warn=warned.append)
    received = [_received(url) - was for url, was in zip(servers, before, strict=True)]
    assert report.status == "done" and report.shards == 2 and report.iterations == 40
    n, iterations = 2, 40
    shares = [piece.size for piece in np.array_split(np.empty(size), 2)]
    assert report.shard_pushed_bytes == tuple((n + 2) * s * BYTES * iterations for s in shares)
    assert report.shard_pulled_bytes == tuple(
        (2 * n + 1) * s * BYTES * iterations for s in shares)
    assert all(got >= pushed for got, pushed in zip(received, report.shard_pushed_bytes,
                                                    strict=True)), received
    assert not any("share" in line for line in warned), warned
    for url in servers:
        assert _keys(url) == []
    shared = run_local(TWO, redis_url=servers[0], workload="digits-mlp", seed=7)
    assert shared.final_loss == report.final_loss  # exactly: where a shard lives is no matter


STOPPED = """
import json, sys
from lambdadnn.launcher.local import Interrupted, run_local
from lambdadnn.launcher.spec import LaunchSpec
spec = LaunchSpec(functions=2, memory_mb=884, local_batch=32, iterations=10**6, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64", shards=2)
try:
    run_local(spec, redis_urls=json.loads(sys.argv[1]), workload="digits-mlp",
              checkpoint_every=5)
except Interrupted as stopped:
    print(stopped, file=sys.stderr)
    sys.exit(128 + stopped.signum)
"""


def _workers_of(launcher: int) -> list[int]:
    """The live worker processes that `launcher` started (their argv names its pid)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if any(b"_worker_main" in a for a in argv) and str(launcher).encode() in argv \
                and state != "Z":
            found.append(int(cmdline.parent.name))
    return found


def _training_job(url: str) -> str:
    """Wait until a job trains on shard 0's server (past iteration 0); its name."""
    deadline = time.monotonic() + HANG_GUARD_S
    with redis.Redis.from_url(url) as client:
        while time.monotonic() < deadline:
            for key in client.scan_iter(match="lambdadnn:*:state"):
                if int(client.hget(key, "iteration") or 0) >= 1:
                    return key.decode().split(":")[1]
            time.sleep(0.2)
    raise AssertionError("the launch did not start training")


@pytest.mark.real
def test_sigterm_mid_run_leaves_no_worker_or_cgroup_and_keeps_the_keys_on_every_shard(
    servers: list[str],
) -> None:
    process = subprocess.Popen([sys.executable, "-c", STOPPED, json.dumps(servers)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = None
    try:
        job = _training_job(servers[0])
        assert len(_workers_of(process.pid)) == 2
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=HANG_GUARD_S)
        assert process.returncode == 128 + signal.SIGTERM, err
        assert err.strip() == (
            f"launch stopped by SIGTERM; it left no process or cgroup behind; job {job} keeps "
            f"its checkpoint in Redis: continue it with `--resume {job}` and the same "
            "`redis_urls`")
        assert _workers_of(process.pid) == []
        assert not list(CGROUP_ROOT.glob(f"lambdadnn-{job}.pid{process.pid}"))
        assert _keys(servers[0], f"lambdadnn:{job}:checkpoint")
        assert _keys(servers[1], f"lambdadnn:{job}:shard1:checkpoint")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        for pid in _workers_of(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for url in servers:
            with redis.Redis.from_url(url) as client:
                for key in client.scan_iter(match=f"lambdadnn:{job or '*'}:*"):
                    client.delete(key)
