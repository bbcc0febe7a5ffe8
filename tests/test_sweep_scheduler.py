"""`sweep --scheduler` against what may answer at an address: a Dask scheduler (used), and a
peer that is not one — an HTTP server (it made the client ask for 3 EiB), a listener that
never answers (it held the sweep for 13 minutes, deaf to Ctrl-C), a Redis-like server
answering garbage, a Dask worker — each refused in one line within the connect timeout."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambdadnn.inputs.errors import InputError
from lambdadnn.simulator.sweep import Setup, grid, run_dask, run_serial
from lambdadnn.simulator.truth import Truth
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # Dask and sweeps in fresh processes

LAMBDADNN = Path(sys.executable).with_name("lambdadnn")
CELLS = grid(["naive"], [0], [Truth()], [0.2])


@pytest.fixture
def http_server() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def garbage_server() -> Iterator[str]:
    """Answers every connection as Redis answers an unknown command."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            with peer:
                peer.sendall(b"-ERR unknown command '\\x08\\x00\\x00\\x00'\r\n" * 4)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(10)


def _figures(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in result.items() if key != "wall_s"}
            for result in results]


def _refused(address: str) -> str:
    with pytest.raises(InputError) as caught:
        run_dask(CELLS, Setup(5), scheduler=address, connect_timeout_s=2)
    message = str(caught.value)
    assert "`--scheduler`" in message and address in message and "\n" not in message
    return message


def test_an_http_server_is_refused(http_server: str) -> None:
    _refused(http_server)


def test_a_listener_that_never_answers_is_refused(silent_listener: str) -> None:
    assert "nothing answered as Dask does within 2 s" in _refused(silent_listener)


def test_a_server_answering_garbage_is_refused(garbage_server: str) -> None:
    assert "not as a Dask scheduler" in _refused(garbage_server)


def test_a_real_scheduler_is_used_and_a_worker_is_refused() -> None:
    import distributed

    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None, silence_logs=logging.ERROR) as cluster:
        results, workers = run_dask(CELLS, Setup(5), scheduler=cluster.scheduler_address)
        assert workers == 1 and _figures(results) == _figures(run_serial(CELLS, Setup(5)))
        worker = next(iter(cluster.scheduler_info["workers"]))
        assert "not as a Dask scheduler ('Worker')" in _refused(worker)


def test_ctrl_c_while_connecting_stops_the_sweep(silent_listener: str) -> None:
    """The probe of the address listens to Ctrl-C (the old client ignored it for minutes)."""
    sweep = subprocess.Popen(
        [str(LAMBDADNN), "sweep", "--jobs", "5", "--scheduler", silent_listener],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        # Wait until the sweep has connected to the listener, then interrupt it.
        port = int(silent_listener.rsplit(":", 1)[1])
        guard = time.monotonic() + HANG_GUARD_S
        while not _connected_to(sweep.pid, port) and sweep.poll() is None:
            assert time.monotonic() < guard, "the sweep never connected to the listener"
            threading.Event().wait(0.1)
        os.killpg(sweep.pid, signal.SIGINT)
        _, stderr = sweep.communicate(timeout=HANG_GUARD_S)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("error: sweep stopped by SIGINT")


def _connected_to(pid: int, port: int) -> bool:
    import psutil

    try:
        return any(c.raddr and c.raddr.port == port
                   for c in psutil.Process(pid).net_connections(kind="tcp"))
    except psutil.Error:
        return False
