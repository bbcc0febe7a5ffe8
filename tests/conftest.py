"""Test-wide settings: hypothesis profiles, the repository root as the working directory, and
the `real` marker kept honest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# `ci` (default) keeps `make test` within minutes; HYPOTHESIS_PROFILE=thorough digs deeper;
# `make test-fast` runs `fast`: a property that sets no `max_examples` of its own gets 25, a
# check for gross breakage, not the evidence docs/TESTING.md counts on (that is `make test`).
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fast", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# What makes a test `real` (setup.cfg registers the marker; `make test-fast` leaves them out):
# the fixtures that reach a redis-server or a moto server, and the modules of torch, Dask and moto.
SERVER_FIXTURES = ("redis_url", "moto_endpoint")
HEAVY_MODULES = ("torch", "distributed", "moto")


# The longest files, longest first: `make test` hands a pytest-xdist worker a whole file at a
# time in collection order (`--no-loadscope-reorder`), so these start at once and the short
# files fill in around them, instead of one of them starting last and running on alone.
LONGEST_FIRST = (
    "test_readme_launch.py", "test_readme.py", "test_profile.py", "test_launch_resume.py",
    "test_launch_hostile.py", "test_worker_local.py", "test_sweep.py", "test_adaptive_launch.py",
    "test_threads.py", "test_compare_world.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; each file's tests keep their order."""
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _real_is_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                    ) -> Iterator[None]:
    """A test not marked `real` fails if it starts a process (subprocess, multiprocessing, a
    fork), uses a server fixture, or is the first to import torch, Dask or moto in its worker;
    so `-m "not real"` runs exactly the tests that need none of them. A start is recorded,
    not refused: refused, it could leave a test waiting for what never starts (a Dask
    cluster retries its workers for ever)."""
    if request.node.get_closest_marker("real") is not None:
        yield
        return
    fix = "mark it `@pytest.mark.real` (or the file: `pytestmark = pytest.mark.real`)"
    servers = [name for name in SERVER_FIXTURES if name in request.fixturenames]
    if servers:
        pytest.fail(f"{request.node.nodeid} uses the `{servers[0]}` fixture: {fix}")
    started: list[str] = []

    def recorded(what: str, start: Callable[..., Any]) -> Callable[..., Any]:
        def starts(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            return start(*args, **kwargs)
        return starts

    import _posixsubprocess

    monkeypatch.setattr(subprocess, "_fork_exec", recorded("subprocess", subprocess._fork_exec))
    monkeypatch.setattr(_posixsubprocess, "fork_exec",
                        recorded("multiprocessing", _posixsubprocess.fork_exec))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, recorded(f"os.{name}", getattr(os, name)))
    before = {name for name in HEAVY_MODULES if name in sys.modules}
    yield
    imported = [name for name in HEAVY_MODULES if name in sys.modules and name not in before]
    if started or imported:
        what = f"starts a process ({started[0]})" if started else f"imports {imported[0]}"
        pytest.fail(f"{request.node.nodeid} is not marked `real` but {what}: {fix}")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """$REDIS_URL (`make test` starts one), or a redis-server of the session's own on a free
    loopback port; skipped with the reason when redis-server is not installed."""
    url = os.environ.get("REDIS_URL")
    if url is not None:
        # Each pytest-xdist worker (gw0, gw1, …) gets a database of its own, so that a test
        # that checks no job keys are left sees only its own worker's.
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        database = 0 if worker is None else int(worker.removeprefix("gw")) + 1
        yield f"{url.rsplit('/', 1)[0]}/{database}"
        return
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server); "
                    "install it or set REDIS_URL")
    from lambdadnn.launcher.local import redis_server

    with redis_server() as started:
        yield started


@pytest.fixture(autouse=True)
def _repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instance paths in tests are relative to the repository root, wherever pytest starts."""
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any start of redis-server, a cgroup or a worker fails the test loudly."""
    import lambdadnn.launcher.local

    def started(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the launch started something before refusing")

    monkeypatch.setattr(lambdadnn.launcher.local, "redis_server", started)
    monkeypatch.setattr(lambdadnn.launcher.local, "cap_cpu", started)


@pytest.fixture
def job_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job names of the parameter channels local launches open, in order."""
    import redis

    import lambdadnn.launcher.local
    from lambdadnn.launcher.channel import ParameterChannel

    names: list[str] = []

    class Recording(ParameterChannel):
        def __init__(self, client: redis.Redis, job: str, **kwargs: Any) -> None:
            names.append(job)
            super().__init__(client, job, **kwargs)

    monkeypatch.setattr(lambdadnn.launcher.local, "ParameterChannel", Recording)
    return names
