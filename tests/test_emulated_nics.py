"""Per-shard emulated NICs (`benchmarks.emulated_nics`): the rate holds, nothing outlives them.

A shaped link moves X bytes no faster than X at its rate in either direction (less the one
bucket of tokens it may start with), and an unshaped one has no shaper; each shard's traffic goes
through its own link; the namespaces, links and redis-servers are gone after a normal exit,
an exception, a SIGTERM and a SIGINT; a namespace that a SIGKILLed holder left is removed by
the next call, and a running process's is not. Skipped, with the reason, where network
namespaces cannot be made (not root, no iproute2, a container without CAP_NET_ADMIN).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from lambdadnn.benchmarks.emulated_nics import (
    NicError,
    emulated_nics,
    nics_unavailable,
    tbf_burst_bytes,
)
from tests.hang_guard import HANG_GUARD_S
from tests.processes import alive

pytestmark = pytest.mark.real  # network namespaces, links and redis-servers


@pytest.fixture(scope="module", autouse=True)
def _nics_possible() -> None:
    why = nics_unavailable()
    if why is not None:
        pytest.skip(f"emulated NICs cannot be made here: {why}")


def _namespaces(pid: int) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return sorted(name for line in listed.stdout.splitlines()
                  if (name := line.split(" ", 1)[0]).startswith(f"ldnn-nic-{pid}-"))


def _links(pid: int) -> list[str]:
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                            check=True)
    return [line.split(": ")[1].split("@")[0] for line in listed.stdout.splitlines()
            if line.split(": ")[1].startswith(f"ldnn{pid}h")]


def _inside(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in listed.stdout.split()]


def _timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _push_and_pull(url: str, size: int) -> tuple[float, float]:
    """Seconds to SET then GET `size` bytes on the Redis at `url` (a fresh connection)."""
    data = os.urandom(size)
    with redis.Redis.from_url(url) as client:
        client.ping()  # the connection is made before the clock starts
        push = _timed(lambda: client.set("payload", data))
        got: list[bytes | None] = []
        pull = _timed(lambda: got.append(client.get("payload")))
    assert got == [data]
    return push, pull


RATE_MBIT = 40.0  # 5 MB/s: 4 MB take at least 0.8 s each way
SIZE = 4_000_000


def test_the_rate_is_enforced_both_ways_and_unshaped_links_have_no_shaper() -> None:
    """Each direction takes at least (X − burst) / (R/8): the bucket starts full, then
    tokens come at the rate, headers included (so the payload is slower still). A lower bound
    on time, so a busy machine cannot break it. The same links unshaped carry the bytes with
    no tbf qdisc at either end (what they measure is the path's fixed cost, not a rate)."""
    floor_s = (SIZE - tbf_burst_bytes(RATE_MBIT)) / (RATE_MBIT * 1e6 / 8)
    with emulated_nics(2, rate_mbit=RATE_MBIT) as urls:
        assert [url.split(":")[-1] for url in urls] == ["6379/0", "6379/0"]
        assert len(set(urls)) == 2
        for url in urls:  # every shard's link is shaped, not just the first
            push, pull = _push_and_pull(url, SIZE)
            assert push >= floor_s and pull >= floor_s, (push, pull, floor_s)
    pid = os.getpid()
    with emulated_nics(1, rate_mbit=None) as (url,):
        _push_and_pull(url, SIZE)
        (name,) = _namespaces(pid)
        shown = [subprocess.run(["tc", *where, "qdisc", "show", "dev", link], capture_output=True,
                                text=True, check=True).stdout
                 for where, link in (([], f"ldnn{pid}h0"), (["-n", name], f"ldnn{pid}n0"))]
    assert all(text and "tbf" not in text for text in shown), shown


def _sent_bytes(namespace: str | None, link: str) -> tuple[str, int]:
    """The qdisc on `link` and the bytes it has sent (`tc -s`)."""
    where = [] if namespace is None else ["-n", namespace]
    shown = subprocess.run(["tc", *where, "-s", "qdisc", "show", "dev", link],
                           capture_output=True, text=True, check=True).stdout
    words = shown.split()
    return words[1], int(words[words.index("Sent") + 1])


def test_each_shard_has_a_shaped_link_of_its_own() -> None:
    """X bytes pushed to and pulled from shard i only: shard i's two tbf qdiscs (host end:
    pushes, namespace end: pulls) each sent at least X, the other shard's hardly anything."""
    pid, size = os.getpid(), 1_000_000
    with emulated_nics(2, rate_mbit=RATE_MBIT) as urls:
        names = _namespaces(pid)
        for shard, url in enumerate(urls):
            _push_and_pull(url, size)
            for other in range(2):
                host = _sent_bytes(None, f"ldnn{pid}h{other}")
                inside = _sent_bytes(names[other], f"ldnn{pid}n{other}")
                assert host[0] == inside[0] == "tbf"
                if other <= shard:  # this shard's, or the one done before it
                    assert host[1] >= size and inside[1] >= size, (shard, other, host, inside)
                else:
                    assert host[1] < size // 10 and inside[1] < size // 10


def test_everything_is_removed_on_exit_and_on_an_exception() -> None:
    pid, handler = os.getpid(), signal.getsignal(signal.SIGTERM)
    with emulated_nics(2, rate_mbit=RATE_MBIT):
        names = _namespaces(pid)
        servers = [p for name in names for p in _inside(name)]
        assert len(names) == 2 and len(_links(pid)) == 2 and len(servers) == 2
    assert _namespaces(pid) == [] and _links(pid) == []
    assert not any(alive(server) for server in servers)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), emulated_nics(3, rate_mbit=None):
        servers = [p for name in _namespaces(pid) for p in _inside(name)]
        assert len(servers) == 3
        raise Boom
    assert _namespaces(pid) == [] and _links(pid) == []
    assert not any(alive(server) for server in servers)
    assert signal.getsignal(signal.SIGTERM) is handler  # the old handler is back


HOLDER = """
import json, sys, time
from lambdadnn.benchmarks.emulated_nics import NicStopped, emulated_nics
try:
    with emulated_nics(2, rate_mbit=20) as urls:
        print(json.dumps(urls), flush=True)
        time.sleep(float(sys.argv[1]))
except NicStopped as stopped:
    print(stopped, file=sys.stderr)
    sys.exit(128 + stopped.signum)
"""


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    """A process holding two emulated NICs until it is signalled; killed after the test."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(HANG_GUARD_S)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.communicate()
    subprocess.run([sys.executable, "-c", "from lambdadnn.benchmarks.emulated_nics import "
                    "sweep_namespaces; sweep_namespaces()"], check=False)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_signal_to_a_holder_leaves_no_namespace_link_or_server(
    how: str, holder: subprocess.Popen[str],
) -> None:
    """SIGTERM, or SIGINT as a terminal's Ctrl-C: the holder removes everything, says so in
    one line and exits 128 + the signal's number."""
    assert holder.stdout is not None
    urls = json.loads(holder.stdout.readline())
    assert len(urls) == 2
    names = _namespaces(holder.pid)
    servers = [p for name in names for p in _inside(name)]
    assert len(names) == 2 and len(servers) == 2
    holder.send_signal(signal.Signals[how])
    _, err = holder.communicate(timeout=HANG_GUARD_S)
    assert holder.returncode == 128 + signal.Signals[how], err
    assert err.strip() == (f"stopped by {how}; the emulated NICs' namespaces, links and "
                           "redis-servers are removed")
    assert _namespaces(holder.pid) == [] and _links(holder.pid) == []
    assert not any(alive(server) for server in servers)


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_dead_holders_namespace_is_removed_by_the_next_call_and_a_live_ones_is_not() -> None:
    """As a SIGKILLed holder leaves them: a namespace with its veth pair. Pid 1 always runs."""
    dead = _dead_pid()
    stale, live = f"ldnn-nic-{dead}-0", "ldnn-nic-1-0"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "link", "add", f"ldnn{dead}h0", "type", "veth", "peer", "name",
                    f"ldnn{dead}n0", "netns", stale], check=True)
    try:
        with emulated_nics(1, rate_mbit=None):
            assert _namespaces(dead) == [] and _links(dead) == []
            assert _namespaces(1) == [live]
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


@pytest.mark.parametrize(
    ("shards", "rate", "fragment"),
    [(0, 10.0, "`shards` must be a whole number"), (True, 10.0, "`shards`"),
     (65, 10.0, "`shards`"), (1, float("nan"), "`rate_mbit` must be a finite number"),
     (1, -5.0, "`rate_mbit`"), (1, 0.0, "`rate_mbit`")],
)
def test_bad_arguments_are_one_line_before_anything_is_made(
    shards: int, rate: float, fragment: str,
) -> None:
    before = _namespaces(os.getpid())
    with pytest.raises(NicError) as caught, emulated_nics(shards, rate_mbit=rate):
        pass
    assert fragment in str(caught.value) and "\n" not in str(caught.value)
    assert _namespaces(os.getpid()) == before == []


def test_not_root_is_one_line_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NicError) as caught, emulated_nics(1, rate_mbit=10.0):
        pass
    message = str(caught.value)
    assert message.startswith("emulated NICs need root: run it as root") and "\n" not in message
    assert nics_unavailable() == message


def test_a_missing_tool_is_one_line_naming_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, **kw: None if name == "tc"
                        else real(name, **kw))
    with pytest.raises(NicError, match=r"^`tc` is not installed; install it \(Debian package "
                                       r"iproute2\)$"), emulated_nics(1, rate_mbit=10.0):
        pass
