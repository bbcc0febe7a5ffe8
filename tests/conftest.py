"""Test-wide settings: hypothesis profiles, and the repository root as the working directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# `ci` (default) keeps `make test` within minutes; HYPOTHESIS_PROFILE=thorough digs deeper.
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
