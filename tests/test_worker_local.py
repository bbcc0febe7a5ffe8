"""The worker handler and the local backend, for real: PyTorch processes around a redis-server.

One uninterrupted 2-worker run is the reference; a run with a worker SIGKILLed mid-way and one
with invocations far shorter than the training both must end at the same iteration with the
same final loss (batches and averaging are deterministic, so a resume that lost or repeated an
iteration would show).
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
import redis

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.channel import ParameterChannel
from lambdadnn.launcher.local import cap_cpu, run_local
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec

pytestmark = pytest.mark.real  # a redis-server and torch workers

PLAN = LaunchSpec(functions=2, memory_mb=1769, local_batch=32, iterations=300, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")


@pytest.fixture(scope="module")
def reference(redis_url: str) -> LaunchReport:
    return run_local(PLAN, redis_url=redis_url)


def _assert_no_keys_left(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match="lambdadnn:local-*"))


def test_two_workers_learn_digits(reference: LaunchReport, redis_url: str) -> None:
    assert reference.status == "done" and reference.backend == "local"
    assert reference.workload == "digits-cnn"  # the default
    assert reference.iterations == 300 and reference.restarts == 0
    assert reference.invocations == 2 and reference.architecture == "x86_64"
    assert reference.test_accuracy is not None and reference.test_accuracy >= 0.9
    assert reference.predicted_time_s is None and "`instance_spec`" in str(
        reference.prediction_note)  # a spec built in code carries no instance
    assert 0 < reference.measured_time_s <= reference.wall_time_s
    assert reference.startup_s and reference.restart_gap_s == ()
    assert reference.runs_on.startswith(("capped", "uncapped"))
    _assert_no_keys_left(redis_url)


def _worker_pids() -> list[int]:
    """This process's children that run the worker (not the redis-server fixture)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if parent == os.getpid() and b"_worker_main" in command:
            pids.append(int(stat.parent.name))
    return pids


def test_a_killed_worker_is_relaunched_from_the_checkpoint(
    reference: LaunchReport, redis_url: str
) -> None:
    killed: list[int] = []

    def kill_one_worker_midway(iteration: int, total: int) -> None:
        if not killed and total // 3 <= iteration < total:
            killed.append(_worker_pids()[0])
            os.kill(killed[0], signal.SIGKILL)

    report = run_local(PLAN, redis_url=redis_url, progress=kill_one_worker_midway)
    assert killed and report.restarts >= 1
    assert report.iterations == reference.iterations
    assert report.final_loss == pytest.approx(reference.final_loss, rel=1e-5)
    _assert_no_keys_left(redis_url)


def test_invocations_shorter_than_training_resume_until_done(
    reference: LaunchReport, redis_url: str
) -> None:
    # The reference run's wall time includes two process start-ups; a third of it leaves each
    # invocation well under the training time on any machine, so it must time out and resume.
    timeout_s = reference.wall_time_s / 3
    seen: list[int] = []
    report = run_local(
        PLAN, redis_url=redis_url, timeout_s=timeout_s, timeout_margin_s=timeout_s / 2,
        progress=lambda iteration, total: seen.append(iteration),
    )
    assert report.restarts >= 1
    assert report.iterations == reference.iterations
    assert report.final_loss == pytest.approx(reference.final_loss, rel=1e-5)
    assert seen == sorted(seen) and seen[-1] == 300
    _assert_no_keys_left(redis_url)


class _Clock:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_handler_checkpoints_and_returns_before_its_deadline(redis_url: str) -> None:
    from lambdadnn.launcher.worker import handler

    job = f"test-{uuid.uuid4().hex[:8]}"
    event = {
        "rank": 0, "workers": 1, "job": job, "redis_url": redis_url, "iterations": 5,
        "local_batch": 16, "checkpoint_every": 100, "timeout_margin_s": 1.0, "seed": 3,
        "workload": "digits-cnn",
    }
    with redis.Redis.from_url(redis_url) as client:
        channel = ParameterChannel(client, job, workers=1)
        try:
            short = handler(event, _Clock(remaining_ms=500))
            assert short["status"] == "timeout" and short["iteration"] == 1
            assert channel.restore() == 1  # checkpointed before returning
            done = handler(event, _Clock(remaining_ms=60_000))
            assert done["status"] == "done" and done["iteration"] == 5
            assert done["trained"] == 4  # resumed at iteration 1: none lost, none repeated
            result = channel.result()
            assert result is not None and result["iterations"] == 5
            assert 0 <= result["test_accuracy"] <= 1
        finally:
            channel.cleanup()


def test_cpu_cap_writes_cpu_max_per_rank_on_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    cap = cap_cpu("job", 2, 150, root=tmp_path)
    group = tmp_path / "lambdadnn-job"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group / "rank-1" / "cpu.max").read_text() == "8479 100000"  # 150/1769 vCPU
    assert cap.procs_files == [str(group / f"rank-{r}" / "cgroup.procs") for r in (0, 1)]
    assert cap.description.startswith("capped at 0.085 vCPU per worker")
    for control in group.rglob("*.*"):  # cgroupfs removes its files itself on rmdir
        control.unlink()
    cap.remove()
    assert not group.exists()


def test_cpu_cap_says_why_it_cannot_cap(tmp_path: Path) -> None:
    missing = cap_cpu("job", 2, 1769, root=tmp_path)
    assert missing.description.startswith("uncapped: no cgroup cpu controller")
    assert missing.procs_files == [None, None]
    (tmp_path / "cgroup.controllers").write_text("memory io\n")
    assert "cpu controller is not available" in cap_cpu("job", 1, 1769, root=tmp_path).description


def test_a_plan_with_a_margin_beyond_its_timeout_is_refused() -> None:
    with pytest.raises(LaunchError, match="timeout_margin_s"):
        run_local(PLAN, timeout_s=10, timeout_margin_s=10)
