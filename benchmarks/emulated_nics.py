"""Per-shard emulated NICs: each parameter-server shard's redis-server behind a link of its own.

`emulated_nics(k, rate_mbit=R)` gives each of k shards what a parameter-server VM has on a
cloud, its own network interface: a redis-server in a network namespace of its own
(`ldnn-nic-<pid>-<i>`), reached from this (the root) namespace over a veth pair on a /30 of
10.211.0.0/16, with both ends shaped by `tc tbf` to R Mbit/s (10⁶ bit/s): the host end's
egress is what the functions push into the shard, the namespace end's egress what they pull
from it. The n workers of a local launch all share a shard's link, as λDNN's functions share
the PS's bandwidth B_p, and k shards have k links, which is what the model's k·B_p/n assumes
and what redis-servers on unix sockets (or one loopback) cannot show. It yields one
`redis://<ip>:6379/0` per shard, for `run_local(..., redis_urls=...)`. `rate_mbit=None` makes
the same namespaces and links without shaping (the path's fixed costs, not its bandwidth).

The rate is on the wire: tbf counts each frame's Ethernet, IP and TCP headers too, so at the
veth's MTU of 1,500 bytes a transfer's payload gets about 1448/1514 ≈ 95.6 % of R.

Everything it starts, it stops, on a normal exit, an exception, Ctrl-C, SIGTERM or SIGHUP
(handlers that raise `NicStopped`, deferred while links are being made or removed so that
none is cut in half; the old handlers come back on exit): the redis-servers are terminated
and the namespaces and links deleted. Each redis-server dies with this process if it is
SIGKILLed (PR_SET_PDEATHSIG); the namespaces it then leaves, named by its pid, are removed by
the next call (`sweep_namespaces`), as a local launch sweeps what a SIGKILLed launcher left.
It needs root (network namespaces and qdiscs), `ip` and `tc` (iproute2) and redis-server;
without them, each refusal is one `NicError` line naming the fix.
"""

from __future__ import annotations

import fcntl
import functools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

import redis

from lambdadnn.launcher.local import _STOP_SIGNALS, _die_with, _running

__all__ = ["MAX_SHARDS", "NicError", "NicStopped", "emulated_nics", "nics_unavailable",
           "sweep_namespaces", "tbf_burst_bytes", "tbf_queue_bytes"]

PREFIX = "ldnn-nic-"
PORT = 6379
MAX_SHARDS = 64  # one /30 each out of 10.211.0.0/16's third octet, and short link names
_OWNED_NAMESPACE = re.compile(r"ldnn-nic-([1-9][0-9]{0,9})-([0-9]{1,3})")
# Link names are at most 15 characters: "ldnn" + pid (≤ 7 digits) + h|n + shard (≤ 2 digits).
_OWNED_LINK = re.compile(r"ldnn([1-9][0-9]{0,9})h([0-9]{1,3})")
_LOCK = os.path.join(tempfile.gettempdir(), "ldnn-nic.lock")  # one setup at a time per machine
_ROOT_FIX = ("run it as root with CAP_SYS_ADMIN and CAP_NET_ADMIN (in a container: "
             "--privileged, or --cap-add SYS_ADMIN --cap-add NET_ADMIN)")


class NicError(RuntimeError):
    """Emulated NICs that cannot be made here: one line naming what is missing and the fix."""


class NicStopped(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP while emulated NICs were up, raised after they are removed."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}; the emulated NICs' "
                         "namespaces, links and redis-servers are removed")


def tbf_burst_bytes(rate_mbit: float) -> int:
    """The token bucket's depth: the bytes that may leave at once after the link was idle.

    Large enough for the pacing timer (an hrtimer) not to wake for every packet, and more
    than a frame of the veth's 1,500-byte MTU (a larger non-GSO frame would be dropped; GSO
    ones are cut into frames by tbf); small enough that what leaves at once after an idle
    gap is at most ~2 % of the smallest per-shard phase the parameter channel moves
    (digits-mlp's 1.2 MB over 3 shards, 0.4 MB). So: 1 ms at the rate, at least 16 KiB.
    """
    return max(16 * 1024, round(rate_mbit * 1e6 / 8 * 1e-3))


def tbf_queue_bytes(rate_mbit: float) -> int:
    """The bytes tbf may queue waiting for tokens before it drops (its `limit`).

    A drop at the tail of a transfer costs TCP a retransmission timeout (≥ 200 ms), which
    would swamp the bandwidth being measured, so the queue holds a whole phase of the channel
    (every rank's slice at once, a few MB here) and never drops: TCP's small-queue limit
    (`tcp_limit_output_bytes`, 4 MiB) and the messages' sizes bound what a socket can queue.
    64 MiB, or 2 s at the rate if that is more; a real NIC queues less but paces TCP the same.
    """
    return max(64 * 1024 * 1024, round(rate_mbit * 1e6 / 8 * 2))


def nics_unavailable() -> str | None:
    """Why emulated NICs cannot be made here (None: they can), without changing anything
    but a probe namespace made and removed at once."""
    try:
        tools = _tools()
    except NicError as error:
        return str(error)
    probe = f"ldnn-nic-probe-{os.getpid()}"
    made = _command([tools["ip"], "netns", "add", probe])
    if made.returncode != 0:
        return (f"cannot make a network namespace: {_last_line(made.stderr)}; {_ROOT_FIX}")
    _command([tools["ip"], "netns", "delete", probe])
    return None


@dataclass
class _Nic:
    """One shard's namespace, veth pair and redis-server, as far as they were made."""

    shard: int
    namespace: str
    host_link: str
    ns_link: str
    host_ip: str
    ns_ip: str
    server: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    made: list[str] = field(default_factory=list)  # "namespace", "link": what to remove

    @property
    def url(self) -> str:
        return f"redis://{self.ns_ip}:{PORT}/0"


class _Signals:
    """SIGINT, SIGTERM and SIGHUP raise `NicStopped`, except inside `deferred()`, where they
    are noted and raised when it ends, so no link or server is half made or half removed.

    Outside the main thread (where Python allows no handlers) nothing is installed."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._deferring = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._deferring:
            self.received = self.received or signum
            return
        raise NicStopped(signum)

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for number in _STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    @contextmanager
    def deferred(self, *, raise_after: bool = True) -> Iterator[None]:
        """Signals are only noted in here; with `raise_after`, one noted is raised at the end
        (over whatever failed meanwhile: a Ctrl-C also kills the `ip` being run)."""
        self._deferring = True
        try:
            yield
        except Exception:
            if raise_after and self.received is not None:
                raise NicStopped(self.received) from None
            raise
        finally:
            self._deferring = False
        if raise_after and self.received is not None:
            raise NicStopped(self.received)


@contextmanager
def emulated_nics(
    shards: int, *, rate_mbit: float | None, burst_bytes: int | None = None,
    queue_bytes: int | None = None, startup_timeout_s: float = 10.0,
) -> Iterator[list[str]]:
    """`shards` redis-servers, each behind a veth link of its own shaped to `rate_mbit`
    (None: unshaped); yields their URLs, shard 0's first. `burst_bytes` and `queue_bytes`
    override tbf's `burst` and `limit` (`tbf_burst_bytes`, `tbf_queue_bytes`)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise NicError(f"`shards` must be a whole number from 1 to {MAX_SHARDS}, not "
                       f"{shards!r}")
    if rate_mbit is not None and (isinstance(rate_mbit, bool)
                                  or not isinstance(rate_mbit, (int, float))
                                  or not math.isfinite(rate_mbit) or rate_mbit < 0.01):
        raise NicError(f"`rate_mbit` must be a finite number of Mbit/s, at least 0.01, not "
                       f"{rate_mbit!r}; or None for unshaped links")
    tools = _tools()
    nics: list[_Nic] = []
    finished = False  # the body ended without an exception: a failure to remove is raised
    with _Signals() as signals:
        try:
            with signals.deferred():
                with _locked():
                    sweep_namespaces(tools["ip"])
                    slots = _free_slots(tools["ip"], shards)
                    for shard, slot in enumerate(slots):
                        nic = _nic(shard, slot)
                        nics.append(nic)  # before anything is made: the `finally` removes it
                        _make_link(tools, nic, rate_mbit, burst_bytes, queue_bytes)
                for nic in nics:
                    _start_server(tools, nic)
                for nic in nics:
                    _wait_for_server(nic, startup_timeout_s)
            yield [nic.url for nic in nics]
            finished = True
        finally:
            with signals.deferred(raise_after=finished):
                failures = [failure for nic in reversed(nics)
                            for failure in _remove(tools["ip"], nic)]
                if failures and finished:
                    raise NicError(f"could not remove {failures[0]}; remove it by hand "
                                   f"(`ip netns delete` / `ip link delete`)")


def sweep_namespaces(ip: str | None = None) -> list[str]:
    """Remove the namespaces (and host links) that emulated NICs of a process no longer
    running left behind: `ldnn-nic-<pid>-<i>` whose pid is dead, after killing whatever
    still runs in them (their redis-server normally died with that process). Returns the
    namespaces removed; a running process's, and anything not named so, are never touched."""
    ip = ip or _tools()["ip"]
    removed: list[str] = []
    listed = _command([ip, "netns", "list"])
    for line in listed.stdout.splitlines():
        name = line.split(" ", 1)[0].strip()
        owner = _OWNED_NAMESPACE.fullmatch(name)
        if owner is None or _running(int(owner.group(1))):
            continue
        _kill_inside(ip, name)
        if _command([ip, "netns", "delete", name]).returncode == 0:
            removed.append(name)
    links = _command([ip, "-o", "link", "show"])
    for match in re.finditer(r"^\d+: (ldnn[0-9]+h[0-9]+)[@:]", links.stdout, re.MULTILINE):
        owner = _OWNED_LINK.fullmatch(match.group(1))
        if owner is not None and not _running(int(owner.group(1))):
            _command([ip, "link", "delete", match.group(1)])
    return removed


# -- making --------------------------------------------------------------------------------------


def _tools() -> dict[str, str]:
    """The programs it runs; refused in one line when not root or one is missing."""
    if not sys.platform.startswith("linux"):
        raise NicError("emulated NICs need Linux (network namespaces, veth and tc)")
    if os.geteuid() != 0:
        raise NicError(f"emulated NICs need root: {_ROOT_FIX}")
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found: dict[str, str] = {}
    for name, package in (("ip", "iproute2"), ("tc", "iproute2"),
                          ("redis-server", "redis-server")):
        where = shutil.which(name, path=path)
        if where is None:
            raise NicError(f"`{name}` is not installed; install it (Debian package {package})")
        found[name] = where
    return found


def _command(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one `ip`/`tc` command in a session of its own (a terminal's Ctrl-C reaches only
    this process, which finishes the step first), its output captured."""
    return subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          start_new_session=True, check=False)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[-1].split())[:200] if lines else "no message"


def _must(args: list[str], what: str, fix: str) -> None:
    done = _command(args)
    if done.returncode != 0:
        shown = " ".join([os.path.basename(args[0]), *args[1:4]])
        raise NicError(f"cannot {what}: `{shown} ...` said "
                       f"{_last_line(done.stderr or done.stdout)!r}; {fix}")


@contextmanager
def _locked() -> Iterator[None]:
    """Only one process picks addresses and makes links at a time."""
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_slots(ip: str, shards: int) -> list[int]:
    """Third octets j whose 10.211.j.0/30 no address of this namespace is in."""
    shown = _command([ip, "-4", "-o", "addr", "show"]).stdout
    used = {int(j) for j in re.findall(r"inet 10\.211\.([0-9]{1,3})\.", shown)}
    free = [j for j in range(256) if j not in used][:shards]
    if len(free) < shards:
        raise NicError(f"10.211.0.0/16 has {len(free)} free /30s for {shards} shards; remove "
                       "the links that use it (`ip -4 addr show`)")
    return free


def _nic(shard: int, slot: int) -> _Nic:
    pid = os.getpid()
    return _Nic(shard=shard, namespace=f"{PREFIX}{pid}-{shard}", host_link=f"ldnn{pid}h{shard}",
                ns_link=f"ldnn{pid}n{shard}", host_ip=f"10.211.{slot}.1",
                ns_ip=f"10.211.{slot}.2")


def _shape(tc: list[str], link: str, rate_mbit: float, burst_bytes: int | None,
           queue_bytes: int | None) -> None:
    burst = burst_bytes if burst_bytes is not None else tbf_burst_bytes(rate_mbit)
    limit = queue_bytes if queue_bytes is not None else tbf_queue_bytes(rate_mbit)
    _must([*tc, "qdisc", "add", "dev", link, "root", "tbf", "rate",
           f"{round(rate_mbit * 1e6)}bit", "burst", str(burst), "limit", str(limit)],
          f"shape {link} with tc tbf", "load the kernel module (`modprobe sch_tbf`)")


def _make_link(tools: dict[str, str], nic: _Nic, rate_mbit: float | None,
               burst_bytes: int | None, queue_bytes: int | None) -> None:
    """The namespace, its veth pair with an address at each end, both ends shaped."""
    ip, ns = tools["ip"], nic.namespace
    if _command([ip, "netns", "pids", ns]).returncode == 0:
        raise NicError(f"network namespace {ns} exists already (emulated NICs are one set per "
                       f"process at a time); remove it with `ip netns delete {ns}`")
    nic.made.append("namespace")
    _must([ip, "netns", "add", ns], f"make network namespace {ns}", _ROOT_FIX)
    nic.made.append("link")
    _must([ip, "link", "add", nic.host_link, "type", "veth", "peer", "name", nic.ns_link,
           "netns", ns], f"make veth pair {nic.host_link}", "load the kernel module "
          "(`modprobe veth`)")
    fix = "check `ip addr` for a clash"
    _must([ip, "addr", "add", f"{nic.host_ip}/30", "dev", nic.host_link],
          f"address {nic.host_link}", fix)
    _must([ip, "-n", ns, "addr", "add", f"{nic.ns_ip}/30", "dev", nic.ns_link],
          f"address {nic.ns_link}", fix)
    for args in ([ip, "link", "set", nic.host_link, "up"],
                 [ip, "-n", ns, "link", "set", nic.ns_link, "up"],
                 [ip, "-n", ns, "link", "set", "lo", "up"]):
        _must(args, f"bring up {args[-2]}", fix)
    if rate_mbit is not None:
        _shape([tools["tc"]], nic.host_link, rate_mbit, burst_bytes, queue_bytes)  # pushes
        _shape([tools["tc"], "-n", ns], nic.ns_link, rate_mbit, burst_bytes, queue_bytes)  # pulls


def _start_server(tools: dict[str, str], nic: _Nic) -> None:
    """Its redis-server, in the namespace (`ip netns exec` execs it: the same process), in a
    session of its own, killed by the kernel if this process dies; its log in an unlinked
    file, read only if it fails to start."""
    nic.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by `_remove`
    nic.server = subprocess.Popen(
        [tools["ip"], "netns", "exec", nic.namespace, tools["redis-server"], "--bind", nic.ns_ip,
         "--port", str(PORT), "--save", "", "--appendonly", "no", "--protected-mode", "no",
         "--daemonize", "no"],
        stdin=subprocess.DEVNULL, stdout=nic.log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=functools.partial(_die_with, os.getpid()),
    )


def _wait_for_server(nic: _Nic, timeout_s: float) -> None:
    """Return once the shard's redis-server answers PING over its link."""
    assert nic.server is not None and nic.log is not None
    client = redis.Redis(host=nic.ns_ip, port=PORT, socket_connect_timeout=0.5,
                         socket_timeout=2.0)
    deadline = time.monotonic() + timeout_s
    try:
        while nic.server.poll() is None:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise NicError(f"the redis-server of shard {nic.shard} did not answer on "
                                   f"{nic.url} within {timeout_s:g} s") from None
                time.sleep(0.05)
    finally:
        client.close()
    nic.log.seek(0)
    said = _last_line(nic.log.read().decode(errors="replace"))
    raise NicError(f"the redis-server of shard {nic.shard} exited at start-up with code "
                   f"{nic.server.returncode}: {said!r}")


# -- removing ------------------------------------------------------------------------------------


def _kill_inside(ip: str, namespace: str) -> None:
    """SIGKILL whatever still runs in `namespace` (it would keep the namespace alive)."""
    listed = _command([ip, "netns", "pids", namespace])
    for pid in listed.stdout.split():
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _remove(ip: str, nic: _Nic) -> list[str]:
    """Stop the shard's server, delete its link and namespace; what could not be removed."""
    failures: list[str] = []
    if nic.server is not None:
        nic.server.terminate()
        try:
            nic.server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            nic.server.kill()
            nic.server.wait()
        nic.server = None
    if nic.log is not None:
        nic.log.close()
        nic.log = None
    if "link" in nic.made:  # deleting one end deletes both, at once (a namespace goes lazily)
        gone = _command([ip, "link", "delete", nic.host_link])
        if gone.returncode != 0 and "Cannot find device" not in gone.stderr:
            failures.append(f"link {nic.host_link}: {_last_line(gone.stderr)}")
    if "namespace" in nic.made:
        _kill_inside(ip, nic.namespace)
        gone = _command([ip, "netns", "delete", nic.namespace])
        if gone.returncode != 0 and "No such file" not in gone.stderr:
            failures.append(f"namespace {nic.namespace}: {_last_line(gone.stderr)}")
    nic.made.clear()
    return failures
