"""The local backend: a plan's `n` workers as processes on this machine, each capped at m/1769 vCPU.

Each worker process (a fresh Python, as a fresh Lambda sandbox) is one "invocation": it imports
torch (the init phase, not on the clock), joins its CPU cgroup, then runs
`launcher.worker.handler` with a deadline of `timeout_s`, and is killed if it overruns it.
A round ends when every worker has returned; if any of them timed out, crashed or was killed,
the survivors are stopped (they would wait at the barrier for it), the channel is restored to
its last checkpoint and all `n` are launched again, until the last iteration is done.

A worker's failure is one line on the `lambdadnn.launcher.local` logger (`worker 3: redis
refused a write: OOM ...`), its traceback at debug level only. A failure no relaunch can mend
(`UnrecoverableError`: NaN parameters, gradients or loss) ends the run at once as failed
(`RunFailed`), as does a run that stops progressing; a run is never "done" without a finite loss.

A plan with k parameter-server shards (`LaunchSpec.shards`) gets k redis-servers, one per
shard (`channel.ParameterChannel`); on a caller's Redis (`redis_url`) all k shards share it,
and on a caller's Redis per shard (`redis_urls`, shard i on the i-th) each has its own.

Nothing outlives a run: while it runs, SIGINT, SIGTERM and SIGHUP all become a
KeyboardInterrupt at the next poll (never in the middle of starting or stopping a process), so
the same clean-up stops the workers, every redis-server it started and removes the cgroups.
Workers and redis-server run in sessions of their own (a terminal's Ctrl-C reaches only the
launcher, which stops them in order) and are killed by the kernel if the launcher dies first;
the empty cgroups a SIGKILLed launcher leaves are removed by the next launch
(`sweep_cgroups`). On a caller's Redis (`redis_url` or `redis_urls`), a run that did not
finish keeps its job's keys on every shard, which expire on their own
(`LaunchSpec.key_ttl_s`), so that `resume` can continue it from its last checkpoint; a
finished run deletes them.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import logging
import math
import os
import platform
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import redis

from ..inputs.files import brief
from ..models.errors import LambdaDnnError
from ..solver.instance import MB_PER_VCPU
from ..solver.instance_yaml import platform_path, read_yaml
from . import LaunchError
from .adaptive import Planner
from .backend import Observed
from .channel import (
    REDIS_URLS_ENV,
    ChannelError,
    ParameterChannel,
    UnrecoverableError,
    redis_client,
    redis_refusal,
)
from .orchestrator import Hooks, RunOptions, orchestrate
from .profile import Capacity, Runner
from .spec import LAMBDA_MEMORY_MB, LaunchReport, LaunchSpec, check_shards
from .workloads import DEFAULT_WORKLOAD, module_root

__all__ = ["MAX_LOCAL_FUNCTIONS", "Interrupted", "LocalBackend", "available_cpus",
           "check_capacity", "check_resume", "local_capacity", "local_runner", "redis_server",
           "run_local", "sweep_cgroups"]

_log = logging.getLogger(__name__)

MAX_LOCAL_FUNCTIONS = 64  # one torch process each: more would exhaust a machine's processes
CGROUP_ROOT = Path("/sys/fs/cgroup")
_CPU_PERIOD_US = 100_000
_INIT_TIMEOUT_S = 120.0  # a worker that cannot even import torch in this long is hung
_POLL_S = 0.1
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Looked up before any fork: a child between fork and exec must not load libraries.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A job name: a Redis key part and a cgroup folder name, so no `/`, `*` or spaces.
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# A launch's cgroups and its redis-server's folder name the launcher's pid, so the next launch
# can tell what a SIGKILLed launcher left from what a running launch uses.
_OWNED_CGROUP = re.compile(r"lambdadnn-.+\.pid([1-9][0-9]{0,9})")
_OWNED_SERVER_FOLDER = re.compile(r"lambdadnn-redis-([1-9][0-9]{0,9})-.+")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_capacity(
    spec: LaunchSpec, *, oversubscribe: bool = False, adaptive: bool = False
) -> str | None:
    """Refuse a plan this machine cannot hold; the warning to show if it is oversubscribed.

    At most `MAX_LOCAL_FUNCTIONS` workers, and n·m/1769 vCPU within `available_cpus()`
    unless `oversubscribe` (then the workers get less CPU than on Lambda, and the returned
    line says so). `adaptive`: every plan the controller may switch to must fit too, so the
    plan's instance must cap the vCPU (`platform.max_vcpu`, which `solve` respects) and the
    functions within this machine, as a platform from `lambdadnn profile` does.
    """
    if adaptive and spec.instance is not None:
        instance = spec.instance
        vcpu_cap, cpus = instance.platform.max_vcpu, available_cpus()
        fix = "solve for the platform `lambdadnn profile` measured here"
        why = None
        if instance.max_functions > MAX_LOCAL_FUNCTIONS:
            why = (f"allows up to {instance.max_functions:,} functions, more than the "
                   f"{MAX_LOCAL_FUNCTIONS} workers the local backend runs")
        elif not oversubscribe and vcpu_cap is None:
            why = "sets no `max_vcpu`, so its plans may need any number of CPUs"
            fix += ", or pass `--oversubscribe`"
        elif not oversubscribe and vcpu_cap is not None and vcpu_cap > cpus:
            why = f"allows {vcpu_cap:g} vCPU, more than this machine's {cpus} CPUs"
            fix += ", or pass `--oversubscribe`"
        if why is not None:
            raise LaunchError(f"`--adaptive` may switch to any plan of platform "
                              f"{brief(instance.platform.name, 60)}, which {why}; {fix}")
    return _check_plan(spec.functions, spec.memory_mb, oversubscribe)


def _check_plan(functions: int, memory_mb: int, oversubscribe: bool) -> str | None:
    """`check_capacity` of one plan n × m."""
    if functions > MAX_LOCAL_FUNCTIONS:
        raise LaunchError(
            f"`functions` {functions:,} is more than the local backend runs (at most "
            f"{MAX_LOCAL_FUNCTIONS} worker processes); run it with `--backend aws`, or re-solve "
            f"with `limits.max_functions: {MAX_LOCAL_FUNCTIONS}`"
        )
    vcpu = functions * memory_mb / MB_PER_VCPU
    cpus = available_cpus()
    if vcpu <= cpus:
        return None
    need = (f"the plan needs {functions} × {memory_mb:,} MB / {MB_PER_VCPU} = "
            f"{vcpu:.2f} vCPU, more than the {cpus} CPUs this process may use")
    if not oversubscribe:
        raise LaunchError(
            f"{need}; pass `--oversubscribe` (oversubscribe=True) to run it with less CPU than "
            "Lambda would give, or run it with `--backend aws`"
        )
    return f"{need}: running oversubscribed, so slower than on Lambda"


def _die_with(parent: int) -> None:
    """In a child: have the kernel SIGKILL it when `parent` dies (even by SIGKILL)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(1)


class Interrupted(KeyboardInterrupt):
    """A launch stopped by SIGINT, SIGTERM or SIGHUP, raised once everything is cleaned up;
    `resumable`: the job whose checkpoint stays on the caller's Redis, named by `given`."""

    def __init__(self, signum: int, resumable: str | None = None, *,
                 given: str = "`--redis-url`") -> None:
        self.signum = signum
        hint = ("" if resumable is None else
                f"; job {resumable} keeps its checkpoint in Redis: continue it with "
                f"`--resume {resumable}` and the same {given}")
        super().__init__(
            f"launch stopped by {signal.Signals(signum).name}; it left no process or cgroup "
            f"behind{hint}"
        )


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP as one KeyboardInterrupt, raised only where `check` is called.

    The handlers just note the signal, so no start or stop of a process, cgroup or cloud
    resource is ever cut in half; the old handlers come back on exit. Outside the main thread
    (where Python allows no handlers) it only checks, and the signals keep their own
    behaviour. `raised(signum)` is what `check` raises (default: `Interrupted` naming
    `resumable` as the job whose checkpoint stays); with `insist`, a second signal raises at
    once (a call hangs and the user insists).
    """

    def __init__(self, resumable: str | None = None, *,
                 raised: Callable[[int], KeyboardInterrupt] | None = None,
                 insist: bool = False) -> None:
        self.received: int | None = None
        self.resumable = resumable
        self._raised = raised or (lambda signum: Interrupted(signum, resumable))
        self._insist = insist
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        elif self._insist:
            raise self._raised(signum)

    def check(self) -> None:
        if self.received is not None:
            raise self._raised(self.received)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in _STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._note)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


@contextmanager
def redis_server(*, startup_timeout_s: float = 10.0) -> Iterator[str]:
    """A throw-away redis-server that only this user can reach; yields its URL (`unix://`).

    It listens on no TCP port (`port 0`), only on a unix socket in a fresh folder of mode 0700
    (`mkdtemp`): the kernel keeps every other local user out at the folder, and there is no
    secret that a URL, an error line or `ps` could show. A `requirepass` would add nothing
    against them, and against this user nothing helps (they can read the launcher's memory).
    No persistence; the folder (socket, log) is removed with the server, or by the next
    launch if the launcher was SIGKILLed (the folder names its pid).
    """
    executable = shutil.which("redis-server")
    if executable is None:
        raise LaunchError(
            "redis-server is not installed (Debian package redis-server); "
            "install it or pass the URL of a running Redis"
        )
    for stale in _left_behind(Path(tempfile.gettempdir()), _OWNED_SERVER_FOLDER):
        if not _serving(stale / "redis.sock"):  # a SIGKILLed launcher's: its server died too
            shutil.rmtree(stale, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"lambdadnn-redis-{os.getpid()}-"))
    try:
        sock, log = folder / "redis.sock", folder / "redis.log"
        process = subprocess.Popen(
            [executable, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
             "--dir", str(folder), "--logfile", str(log), "--save", "", "--appendonly", "no",
             "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=functools.partial(_die_with, os.getpid()),
        )
        try:
            _wait_for_redis(process, sock, log, startup_timeout_s)
            yield f"unix://{sock}?db=0"
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _serving(sock: Path) -> bool:
    """Whether a server still accepts connections on unix socket `sock` (one started from
    another pid namespace sharing this folder would look like a dead launcher's)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(sock))
        except OSError:
            return False
    return True


def _wait_for_redis(
    process: subprocess.Popen[bytes], sock: Path, log: Path, timeout_s: float
) -> None:
    """Return once the server answers PING on `sock`; its log's last line if it exited."""
    client = redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=0.5)
    deadline = time.monotonic() + timeout_s
    try:
        while process.poll() is None:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"redis-server did not answer on {sock} within {timeout_s:g} s"
                    ) from None
                time.sleep(0.05)
    finally:
        client.close()
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    raise LaunchError(f"redis-server exited at start-up with code {process.returncode}: "
                      f"{_one_line(lines[-1] if lines else 'it wrote no log')}")


def _one_line(text: str, limit: int = 300) -> str:
    """`text` on one line (whitespace runs as one space), cut to about `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass
class CpuCap:
    """Per-rank cgroups that hold each worker at m/1769 vCPU, or why there are none."""

    description: str
    procs_files: list[str | None]
    created: list[Path] = field(default_factory=list)

    def throttled_share(self) -> float | None:
        """The share of the workers' CPU periods in which their quota ran out (None: uncapped).

        Near 1 means the cap bound them all along, as it does for a CPU-bound worker below
        1,769 MB; well below 1, they waited on something else (the channel, each other).
        """
        periods = throttled = 0
        for procs in self.procs_files:
            if procs is None:
                return None
            try:
                stat = dict(line.split() for line in
                            (Path(procs).parent / "cpu.stat").read_text().splitlines())
            except (OSError, ValueError):
                return None
            periods += int(stat.get("nr_periods", 0))
            throttled += int(stat.get("nr_throttled", 0))
        return throttled / periods if periods else None

    def remove(self) -> None:
        """Remove the cgroups, deepest first; a killed worker may take a moment to leave."""
        for path in reversed(self.created):
            for attempt in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or attempt == 49:
                        raise LaunchError(f"cannot remove cgroup {path}: {exc.strerror}") from exc
                    time.sleep(0.1)
        self.created.clear()


def _cgroup_name(job: str) -> str:
    """The cgroup name of this launcher's `job`: it carries our pid (see `sweep_cgroups`)."""
    return f"{job}.pid{os.getpid()}"


def _running(pid: int) -> bool:
    """Whether process `pid` exists (a zombie counts: its parent has not seen it end)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _left_behind(base: Path, owned: re.Pattern[str]) -> list[Path]:
    """The folders in `base` whose name matches `owned` (its group 1: a launcher's pid), that
    this user owns and whose launcher is no longer running: what SIGKILLed launches left."""
    found: list[Path] = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return found
    for entry in entries:
        owner = owned.fullmatch(entry.name)
        try:
            if (owner is not None and not _running(int(owner.group(1)))
                    and not entry.is_symlink() and entry.is_dir()
                    and entry.stat().st_uid == os.geteuid()):
                found.append(entry)
        except OSError:  # it went away meanwhile
            continue
    return found


def sweep_cgroups(base: Path) -> list[Path]:
    """Remove the empty cgroups that SIGKILLed launchers of this user left under `base`.

    Only `lambdadnn-<job>.pid<N>` folders (`_cgroup_name`) that this user owns, whose
    launcher N is no longer running and that no process is in: a running launch's cgroups,
    another user's and anything else are never touched. Returns what it removed; a folder it
    cannot remove (a process joined it meanwhile) is left as it is.
    """
    removed: list[Path] = []
    for group in _left_behind(base, _OWNED_CGROUP):
        try:
            folders = [*sorted(group.glob("rank-*")), group]
            if any((folder / "cgroup.procs").exists()
                   and (folder / "cgroup.procs").read_text().strip() for folder in folders):
                continue
            for folder in folders:
                folder.rmdir()
        except OSError as error:
            _log.debug("left cgroup %s: %s", group, error)
            continue
        removed.append(group)
    if removed:
        _log.info("removed %d empty cgroup(s) of stopped launches under %s", len(removed), base)
    return removed


def cap_cpu(job: str, workers: int, memory_mb: int, root: Path = CGROUP_ROOT) -> CpuCap:
    """Make one cgroup per rank with a CPU quota of `memory_mb / 1769` vCPU.

    cgroup v2 (`cpu.max` under `root`) first; on a hybrid machine whose cpu controller is still
    on cgroup v1 (`root/cpu`), `cpu.cfs_quota_us` does the same. Anything else, or a failed
    write, leaves the workers uncapped and says why in `description`. The stale cgroups of
    SIGKILLed launches are swept first (`sweep_cgroups`).
    """
    vcpu = memory_mb / MB_PER_VCPU
    quota = max(1000, round(_CPU_PERIOD_US * vcpu))  # the kernel's smallest quota is 1 ms
    uncapped: list[str | None] = [None] * workers
    if (root / "cgroup.controllers").exists():
        version, base = "v2", root
        if "cpu" not in (root / "cgroup.controllers").read_text().split():
            return CpuCap(f"uncapped: the cgroup v2 cpu controller is not available at {root}",
                          uncapped)
    elif (root / "cpu" / "cpu.cfs_quota_us").exists():
        version, base = "v1", root / "cpu"
    else:
        return CpuCap(f"uncapped: no cgroup cpu controller is mounted at {root}", uncapped)
    sweep_cgroups(base)
    cap = CpuCap("", uncapped)
    try:
        if version == "v2" and "cpu" not in (root / "cgroup.subtree_control").read_text().split():
            (root / "cgroup.subtree_control").write_text("+cpu")
        group = base / f"lambdadnn-{job}"
        group.mkdir()
        cap.created.append(group)
        if version == "v2":
            (group / "cgroup.subtree_control").write_text("+cpu")
        procs: list[str | None] = []
        for rank in range(workers):
            leaf = group / f"rank-{rank}"
            leaf.mkdir()
            cap.created.append(leaf)
            if version == "v2":
                (leaf / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
            else:
                (leaf / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
                (leaf / "cpu.cfs_quota_us").write_text(str(quota))
            procs.append(str(leaf / "cgroup.procs"))
    except OSError as exc:
        cap.remove()
        return CpuCap(
            f"uncapped: cannot set up cgroup {version} CPU limits under {base} "
            f"({exc.strerror or exc}: {exc.filename})", uncapped,
        )
    setting = (f"cpu.max '{quota} {_CPU_PERIOD_US}'" if version == "v2"
               else f"cpu.cfs_quota_us {quota} per {_CPU_PERIOD_US} µs")
    cap.description = (
        f"capped at {quota / _CPU_PERIOD_US:.3f} vCPU per worker ({memory_mb} MB / "
        f"{MB_PER_VCPU} MB) by cgroup {version} {setting} under {group}"
    )
    cap.procs_files = procs
    return cap


class _Deadline:
    """The local stand-in for Lambda's context: the time left before the invocation is killed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def _worker_main() -> None:
    """A worker process's body: init (uncapped, off the clock), join the cgroup, run the handler.

    Reads `{"event", "timeout_s", "procs_file"}` as JSON on stdin and reports JSON lines
    (`started` with its deadline, then `result` or `error`) on the file descriptor in argv[1],
    so whatever the libraries print on stdout cannot garble them; argv[2] is the launcher's
    pid, whose death kills the worker. An error is reported with its traceback, its one-line
    `summary` and whether it is `fatal` (`UnrecoverableError`), and exits 1 without printing
    the traceback: the launcher logs one line per worker, the traceback at debug level.
    """
    _die_with(int(sys.argv[2]))
    report = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    job = json.load(sys.stdin)
    # torch: only ever imported in worker processes
    from .worker import handler, prepare

    try:
        prepare(job["event"])  # the workload is built in the init phase too, at full CPU
        if job["procs_file"] is not None:
            Path(job["procs_file"]).write_text(str(os.getpid()))
        context = _Deadline(time.monotonic() + job["timeout_s"])
        report.write(json.dumps({"started": context.deadline}) + "\n")
        report.write(json.dumps({"result": handler(job["event"], context)}) + "\n")
    except Exception as error:
        report.write(json.dumps({
            "error": traceback.format_exc(), "summary": _summary(error),
            "fatal": isinstance(error, UnrecoverableError),
        }) + "\n")
        raise SystemExit(1) from None


def _summary(error: Exception) -> str:
    """A worker's exception as one line: what went wrong, not where."""
    if isinstance(error, redis.OutOfMemoryError):
        gist = redis_refusal(error)
    elif isinstance(error, (redis.ConnectionError, redis.TimeoutError)):
        gist = f"lost the Redis channel: {redis_refusal(error)}"
    elif isinstance(error, LambdaDnnError):
        gist = str(error)
    else:
        gist = f"{type(error).__name__}: {error}"
    return _one_line(gist)


@dataclass
class _Invocation:
    """One worker process of one round, as the launcher sees it."""

    rank: int
    process: subprocess.Popen[bytes]
    reports: int  # the read end of the worker's report pipe (non-blocking)
    launched: float
    deadline: float | None = None
    result: dict[str, Any] | None = None
    failure: str | None = None  # one line, "worker <rank>: ..."
    fatal: bool = False  # the failure is one no relaunch can mend
    trace: str | None = None  # the worker's traceback, when it raised
    buffer: bytes = b""

    @classmethod
    def start(
        cls, event: dict[str, Any], timeout_s: float, procs_file: str | None, env: dict[str, str]
    ) -> _Invocation:
        """Start one worker in a session of its own, so that `close` can kill all of it."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        try:
            process = subprocess.Popen(  # -P: not the current folder first on the path
                [sys.executable, "-P", "-c",
                 "from lambdadnn.launcher.local import _worker_main; _worker_main()",
                 str(write), str(os.getpid())],
                stdin=subprocess.PIPE, pass_fds=(write,), env=env,
                start_new_session=True,
            )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        invocation = cls(int(event["rank"]), process, read, time.monotonic())
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(
                {"event": event, "timeout_s": timeout_s, "procs_file": procs_file}
            ).encode())
            process.stdin.close()
        except OSError:  # it died at once: `settle` reports its exit
            pass
        return invocation

    def drain(self) -> None:
        """Read whatever the worker has reported so far."""
        while True:
            try:
                chunk = os.read(self.reports, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "started" in message:
                self.deadline = float(message["started"])
            elif "result" in message:
                self.result = message["result"]
            else:
                self.failure = f"worker {self.rank}: {message['summary']}"
                self.fatal, self.trace = bool(message["fatal"]), str(message["error"])

    def settle(self, now: float, timeout_s: float) -> bool:
        """Note a result, an exit or an overrun (killing it, as Lambda would); True once it
        is over. An invocation is over when its handler has returned, as on Lambda: the
        process's own exit (torch's teardown) is `close`'s business, not the run's."""
        if self.result is not None:
            return True
        code = self.process.poll()
        if code is not None:
            self.drain()
            if self.result is None and self.failure is None:
                cause = (f"was killed by {signal.Signals(-code).name}" if code < 0
                         else f"exited with code {code}")
                self.failure = f"worker {self.rank}: {cause} without a result"
            return True
        if self.deadline is not None and now > self.deadline:
            self.failure = f"worker {self.rank}: overran its {timeout_s:g} s timeout and was killed"
        elif self.deadline is None and now - self.launched > _INIT_TIMEOUT_S:
            self.failure = f"worker {self.rank}: did not finish its init in {_INIT_TIMEOUT_S:g} s"
        else:
            return False
        self.process.kill()
        return True

    def close(self) -> None:
        """Kill the worker's session if it still runs, reap it, close its pipe (idempotent)."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if self.reports >= 0:
            os.close(self.reports)
            self.reports = -1


def _worker_environment(workload: str) -> dict[str, str]:
    """The launcher's environment, with the folders `lambdadnn` and the workload came from on
    the path.

    A worker is a fresh interpreter: a `lambdadnn` or a user's factory module found through
    the launcher's own `sys.path` must be found by the worker too. An editable install (whose
    package folder has another name) is found by the same interpreter's import hook, which
    needs nothing. The current folder is not on a worker's path (`-P`): only the folder of the
    factory the user named (`resolve_workload`) is.
    """
    env = dict(os.environ)
    env.pop(REDIS_URLS_ENV, None)  # the event lists the shards' servers
    package = Path(__file__).resolve().parents[1]
    folders = [str(package.parent)] if package.name == "lambdadnn" else []
    root = module_root(workload)
    if root is not None:
        folders.append(str(root))
    if folders:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*folders, env.get("PYTHONPATH")]))
    return env


def _forget(channel: ParameterChannel) -> None:
    """Delete the job's keys from a caller's Redis; if it is gone, there is nothing to delete."""
    with suppress(redis.RedisError):
        channel.cleanup()


def check_resume(
    job: str, redis_url: str | None, redis_urls: Sequence[str] | None = None
) -> None:
    """Refuse, in one line, a `resume` of `job` that cannot be: neither `redis_url` nor
    `redis_urls` (the launcher's own redis-servers end with its run, checkpoints and all), or
    not a job name."""
    if redis_url is None and redis_urls is None:
        raise LaunchError(
            "`--resume` needs `--redis-url`, the Redis that holds the job's checkpoint: the "
            "redis-server a launch starts itself ends with that launch, checkpoints and all"
        )
    if not _JOB_NAME.fullmatch(job):
        raise LaunchError(
            f"`--resume` {brief(job, 80)} is not a job name (letters, digits, `-` and `_`, "
            "at most 64); give the job that a stopped or failed launch named"
        )


def _given_urls(
    spec: LaunchSpec, redis_url: str | None, redis_urls: Sequence[str] | None
) -> tuple[str, ...] | None:
    """The caller's Redis of each shard (`redis_url` for all of them, or `redis_urls[i]` for
    shard i), or None when the launcher starts its own; a wrong `redis_urls` is one line."""
    if redis_urls is None:
        return None if redis_url is None else (redis_url,) * spec.shards
    if redis_url is not None:
        raise LaunchError(
            "`redis_url` and `redis_urls` are both given; give `redis_url` to put every shard "
            "on one Redis, or `redis_urls` to give each shard its own, not both"
        )
    urls: tuple[object, ...] | None = None
    if not isinstance(redis_urls, (str, bytes)):
        with suppress(TypeError):
            urls = tuple(redis_urls)
    if urls is None or not all(isinstance(url, str) for url in urls):
        raise LaunchError(
            f"`redis_urls` must be a list of URLs, one per shard, not {brief(redis_urls, 60)}; "
            "give e.g. ['redis://HOST-A:6379/0', 'redis://HOST-B:6379/0']"
        )
    if len(urls) != spec.shards:
        raise LaunchError(
            f"`redis_urls` lists {len(urls)} URL(s) but the plan has {spec.shards} "
            f"parameter-server shard(s) (`shards`); give exactly one URL per shard"
        )
    return tuple(str(url) for url in urls)


class LocalBackend:
    """A plan's ranks as worker processes here, each in a cgroup of m/1769 vCPU (a `Backend`).

    Everything is checked when it is built (`check_resume`, `check_capacity`, whose warning
    it keeps, and the caller's Redis URLs); `setup` starts a redis-server per
    parameter-server shard unless the caller gives its own: `redis_url` (one Redis, which
    then holds every shard) or `redis_urls` (shard i on `redis_urls[i]`), which are the
    same to the run but for where each shard lives. `resume` (a stopped job's name) starts
    from that job's last checkpoint, on every shard. A round ends when every rank
    has returned, or at the first failure (the survivors would wait at the barrier for it).
    """

    name = "local"

    def __init__(
        self, spec: LaunchSpec, *, timeout_s: float, workload: str = DEFAULT_WORKLOAD,
        redis_url: str | None = None, redis_urls: Sequence[str] | None = None,
        oversubscribe: bool = False, adaptive: bool = False, resume: str | None = None,
    ) -> None:
        if resume is not None:
            check_resume(resume, redis_url, redis_urls)
        check_shards(spec.shards)
        given = _given_urls(spec, redis_url, redis_urls)
        warning = check_capacity(spec, oversubscribe=oversubscribe, adaptive=adaptive)
        warnings = [] if warning is None else [warning]
        if redis_url is not None and spec.shards > 1:
            warnings.append(f"all {spec.shards} parameter-server shards are on the one Redis "
                            f"of `--redis-url`, so they share its bandwidth; leave "
                            f"`--redis-url` out to start a redis-server per shard")
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.job = resume if resume is not None else f"local-{uuid.uuid4().hex[:12]}"
        self._spec, self._timeout_s, self._workload = spec, timeout_s, workload
        # `_given`: the caller's Redis of each shard (None: the launcher starts its own), and
        # the name it came by, for the messages that tell how to resume or what was refused.
        self._given, self._oversubscribe, self._resume = given, oversubscribe, resume
        self._option = "redis_url" if redis_urls is None else "redis_urls"
        self._named = "`--redis-url`" if redis_urls is None else "`redis_urls`"
        self._url = given[0] if given is not None else ""
        self._urls: list[str] = []  # one per shard, shard 0's first (`_url`)
        resumable = self.job if given is not None else None
        self._signals = StopSignals(resumable, raised=lambda signum: Interrupted(
            signum, resumable, given=self._named))
        self._stack = ExitStack()
        self._env: dict[str, str] = {}
        self._client: redis.Redis | None = None
        self._shard_clients: list[redis.Redis] = []
        self._channel: ParameterChannel | None = None
        self._cap = CpuCap("uncapped: no worker started", [])
        self._invocations: list[_Invocation] = []
        self._pending: list[_Invocation] = []

    @property
    def redis_url(self) -> str:
        return self._url

    @property
    def channel(self) -> ParameterChannel:
        if self._channel is None:
            raise LaunchError("the local backend has no channel before its `setup`")
        return self._channel

    @property
    def runs_on(self) -> str:
        return self._cap.description  # the last round's cap

    def setup(self) -> int:
        if self._given is not None:  # a bad URL is refused before anything starts
            for shard, url in enumerate(self._given):
                if url not in self._given[:shard]:
                    option = (self._option if self._option == "redis_url"
                              else f"{self._option}[{shard}]")
                    redis_client(url, option=option).close()
        self._env = _worker_environment(self._workload)
        self._stack.enter_context(self._signals)  # entered first, so it is left last
        if self._given is None:  # one server per shard, each stopped by the stack on any exit
            self._urls = []
            for _ in range(self._spec.shards):
                self._signals.check()
                self._urls.append(self._stack.enter_context(redis_server()))
        else:
            self._urls = list(self._given)
        self._url = self._urls[0]
        self._client, *self._shard_clients = (
            self._stack.enter_context(redis_client(url)) for url in self._urls)
        self._channel = self._channel_for(self._spec.functions)
        first = 0 if self._resume is None else _resume(self._channel, self._named)
        if self._given is not None:
            _log.info("job %s: its keys expire %d s after its last checkpoint; after a stop, "
                      "continue it with `--resume %s`", self.job, self._spec.key_ttl_s, self.job)
        self._cap = cap_cpu(_cgroup_name(self.job), self._spec.functions, self._spec.memory_mb)
        self._stack.callback(lambda: self._cap.remove())  # the last round's: `_cap` is re-bound
        return first

    def _channel_for(self, functions: int) -> ParameterChannel:
        assert self._client is not None
        if self._channel is not None:
            self._channel.close()
        return ParameterChannel(self._client, self.job, workers=functions,
                                key_ttl_s=self._spec.key_ttl_s,
                                shard_clients=self._shard_clients)

    def start(self, event: Mapping[str, Any]) -> None:
        shards = {"redis_urls": self._urls} if len(self._urls) > 1 else {}
        for rank in range(int(event["workers"])):
            self._signals.check()
            self._invocations.append(_Invocation.start(
                {**event, **shards, "rank": rank}, self._timeout_s,
                self._cap.procs_files[rank], self._env))
        self._pending = list(self._invocations)

    def observe(self, *, halting: bool) -> Observed:
        if self._pending:
            select.select([i.reports for i in self._pending], [], [], _POLL_S)
        self._signals.check()
        now = time.monotonic()
        for invocation in self._pending:
            invocation.drain()
        self._pending = [i for i in self._pending if not i.settle(now, self._timeout_s)]
        iteration = int(self.channel.progress()["iteration"])
        ranks = self._invocations
        failures = [i.failure for i in ranks if i.failure is not None]
        if self._pending and not failures:
            return Observed(iteration)
        seen = Observed(
            iteration, over=True, crashes=len(failures),
            done=all(i.result is not None and i.result["status"] == "done" for i in ranks),
            fatal=next((i.failure for i in ranks if i.fatal), None),
            failure=failures[-1] if failures else None,
        )
        self._close_round()
        return seen

    def _close_round(self) -> None:
        """Stop the round's survivors, reap every rank and log its failure once."""
        for invocation in self._invocations:
            invocation.close()
            if invocation.failure is not None:
                _log.warning("%s", invocation.failure)
            if invocation.trace is not None:
                _log.debug("worker %d's traceback:\n%s", invocation.rank, invocation.trace)
        self._invocations, self._pending = [], []

    def rewind(self, iteration: int) -> int:
        return self.channel.restore() or 0

    def reconfigure(self, functions: int, memory_mb: int) -> None:
        _check_plan(functions, memory_mb, self._oversubscribe)
        self._cap.remove()
        self._cap = cap_cpu(_cgroup_name(self.job), functions, memory_mb)
        self._channel = self._channel_for(functions)

    def throttled_share(self) -> float | None:
        return self._cap.throttled_share()

    def verdict(self, result: Mapping[str, Any] | None) -> str | None:
        return _no_result(self.job, result)

    def stop(self, *, finished: bool) -> None:
        try:
            self._close_round()
            if finished and self._given is not None and self._channel is not None:
                _forget(self._channel)
        finally:
            self._stack.close()

    def capacity(self) -> Capacity:
        return local_capacity()


def run_local(
    spec: LaunchSpec,
    *,
    redis_url: str | None = None,
    redis_urls: Sequence[str] | None = None,
    timeout_s: float = 900,
    timeout_margin_s: float | None = None,
    checkpoint_every: int = 20,
    seed: int = 0,
    workload: str = DEFAULT_WORKLOAD,
    oversubscribe: bool = False,
    warn: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    controller: Planner | None = None,
    resume: str | None = None,
) -> LaunchReport:
    """Train the spec's `functions` workers at `memory_mb` each for its `iterations`, for real:
    the orchestrator (`launcher.orchestrator`) over a `LocalBackend`.

    The options are `RunOptions`' and `Hooks`' (`warn` receives the capacity warning); with a
    `controller` (`Controller.of(spec)`) a change of plan re-makes the cgroups for the new n
    at m/1769 vCPU and the new ranks resume from the checkpoint (`launcher.adaptive`).
    `redis_urls` puts shard i of the plan's `spec.shards` on the caller's Redis
    `redis_urls[i]` (exactly one URL per shard; not with `redis_url`, which puts every shard
    on one Redis): on a caller's Redis, either way, a finished run deletes its job's keys on
    every shard; one that failed or was stopped keeps them until they expire (`spec.key_ttl_s`
    after the last checkpoint). `resume` names such a job (its stop message does): the
    workers start from its last checkpoint in Redis instead of iteration 0, with the same
    plan, workload and seed as before. It needs `redis_url` or `redis_urls` (the same ones),
    since the launcher's own redis-servers end with its run.

    Raises `LaunchError` when the plan cannot run; `RunFailed` (a `LaunchError` carrying the
    report, status "failed") when the run fails: a worker's `UnrecoverableError` (NaN or
    infinite parameters, gradients or loss), relaunches that stop making progress, or no
    finite final loss. SIGINT, SIGTERM and SIGHUP raise `Interrupted` (a KeyboardInterrupt)
    after the clean-up.
    """
    options = RunOptions(timeout_s=timeout_s, timeout_margin_s=timeout_margin_s,
                         checkpoint_every=checkpoint_every, seed=seed, workload=workload)
    backend = LocalBackend(spec, timeout_s=options.timeout_s, workload=workload,
                           redis_url=redis_url, redis_urls=redis_urls,
                           oversubscribe=oversubscribe,
                           adaptive=controller is not None, resume=resume)
    return orchestrate(spec, backend, options=options, hooks=Hooks(progress=progress, warn=warn),
                       controller=controller)


def _resume(channel: ParameterChannel, given: str) -> int:
    """`channel.resume()`, its refusal as one line naming `--resume` and where the job's
    checkpoint should have been (`given`: the option the caller's Redis came by)."""
    try:
        return channel.resume()
    except ChannelError as error:
        raise LaunchError(f"`--resume` {channel.job}: {error}; launch it again without "
                          f"`--resume`, or give the {given} it ran on") from None


def _no_result(job: str, result: Mapping[str, Any] | None) -> str | None:
    """Why the metrics the workers published do not make a finished run (None: they do)."""
    if result is None:
        return f"job {job}: every worker returned done but no result was published"
    loss = result.get("final_loss")
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not math.isfinite(loss):
        return (f"job {job} failed: its final loss is {brief(loss, 40)}, not a finite number; "
                "the training diverged, or the result in Redis was not the workers'")
    return None


def local_capacity(*, reserve_cpus: int = 1) -> Capacity:
    """This machine as a platform: m/1769 vCPU per function, as on Lambda, and at most the
    CPUs it may use less `reserve_cpus` (at least one) for all functions together, since
    redis-server and the launcher run here too. Priced as Lambda on this architecture, so a
    local plan costs what the same plan would on Lambda.
    """
    cpus = available_cpus()
    vcpu = max(1, cpus - reserve_cpus)
    architecture = "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
    lambda_prices = read_yaml(platform_path(f"aws-lambda-{architecture}"))
    return Capacity(
        name=f"local-{vcpu}-of-{cpus}-cpus", backend="local", max_vcpu=float(vcpu),
        max_memory_mb=min(LAMBDA_MEMORY_MB[1], vcpu * MB_PER_VCPU),
        max_functions=MAX_LOCAL_FUNCTIONS, architecture=architecture,
        price_per_gb_second=float(lambda_prices["price_per_gb_second"]),
        price_per_request=float(lambda_prices["price_per_request"]),
    )


def local_runner(*, workload: str, seed: int) -> Runner:
    """Run profiling trials as `lambdadnn launch` runs plans, at each trial's limit."""
    def run(spec: LaunchSpec, timeout_s: float) -> LaunchReport:
        return run_local(spec, timeout_s=timeout_s, workload=workload, seed=seed)

    return run
