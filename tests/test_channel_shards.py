"""The parameter channel split over k Redis shards, and the local launcher that runs them.

The flat vector is split as `numpy.array_split` splits it; each shard averages and applies
its slice; every rank proceeds only once every shard applied the iteration. Sharding changes
nothing a run computes: the averaging and the SGD step are element-wise, so a k-shard run's
parameters are bit-identical to a 1-shard run's (asserted exactly, not within a tolerance).
Checkpoints cover every shard, a restore puts all of them back to one iteration (also after a
checkpoint torn half-way), per-shard traffic is reported, and no redis-server outlives a
launch.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
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
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn import solve
from lambdadnn.cli import main
from lambdadnn.launcher.channel import (
    REDIS_URLS_ENV,
    ChannelError,
    ParameterChannel,
    UnrecoverableError,
    shard_bounds,
)
from lambdadnn.launcher.local import redis_server, run_local
from lambdadnn.launcher.spec import MAX_SHARDS, LaunchReport, LaunchSpec, check_shards
from lambdadnn.launcher.timings import summarise
from lambdadnn.solver.errors import InstanceError
from tests.hang_guard import HANG_GUARD_S
from tests.processes import alive, cmdline, descendants

SIZE = 53  # prime: no shard count above 1 divides it, so the slices differ in length
LR, MOMENTUM = 0.1, 0.9
BYTES = 4  # float32


# -- the split ----------------------------------------------------------------------------------


@given(st.integers(0, 10_000), st.integers(1, 40))
def test_bounds_are_numpy_array_splits(size: int, shards: int) -> None:
    """Property: shard s holds exactly `numpy.array_split(range(size), k)[s]`."""
    bounds = shard_bounds(size, shards)
    values = np.arange(size)
    pieces = np.array_split(values, shards)
    assert len(bounds) == shards + 1 and bounds[0] == 0 and bounds[-1] == size
    for shard, piece in enumerate(pieces):
        assert values[bounds[shard]:bounds[shard + 1]].tolist() == piece.tolist()


def test_no_shard_at_all_is_refused() -> None:
    with pytest.raises(ChannelError, match="at least one shard"):
        shard_bounds(10, 0)


# -- the channel, on real redis-servers ---------------------------------------------------------


@pytest.fixture(scope="module")
def servers() -> Iterator[list[str]]:
    """Three throw-away redis-servers, one per shard (as a local launch starts them)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(redis_server()) for _ in range(3)]


def _clients(urls: list[str]) -> list[redis.Redis]:
    return [redis.Redis.from_url(url) for url in urls]


def _channels(
    urls: list[str], workers: int, *, job: str | None = None, **kwargs: Any
) -> list[ParameterChannel]:
    """One channel per rank (as separate processes would have), over the shards at `urls`."""
    job = job or f"test-{uuid.uuid4().hex[:8]}"
    channels = []
    for _ in range(workers):
        client, *others = _clients(urls)
        channels.append(ParameterChannel(client, job, workers=workers, shard_clients=others,
                                         **kwargs))
    return channels


def _exchange_all(
    channels: list[ParameterChannel], iteration: int, grads: list[np.ndarray],
    stops: list[bool] | None = None,
) -> list[np.ndarray]:
    """Every rank exchanges at once, each in its own thread (each blocks at the barrier)."""
    stops = stops or [False] * len(channels)
    with ThreadPoolExecutor(len(channels)) as pool:
        futures = [pool.submit(c.exchange, rank, iteration, grads[rank], float(rank),
                               stop=stops[rank]) for rank, c in enumerate(channels)]
        return [f.result(timeout=HANG_GUARD_S) for f in futures]


def _trajectory(
    urls: list[str], workers: int, start: np.ndarray, grads: list[list[np.ndarray]]
) -> list[list[np.ndarray]]:
    """Each iteration's parameters as each rank got them back, on the shards at `urls`."""
    channels = _channels(urls, workers)
    channels[0].initialise(start, lr=LR, momentum=MOMENTUM)
    try:
        return [_exchange_all(channels, i, step) for i, step in enumerate(grads)]
    finally:
        channels[0].cleanup()
        for channel in channels:
            channel.close()


@pytest.mark.real
@pytest.mark.parametrize("shards", [2, 3])
def test_sharded_sgd_is_bit_identical_to_one_shard(servers: list[str], shards: int) -> None:
    """Slices of a prime-length vector, 3 ranks, 4 iterations of momentum: every rank gets
    back exactly the 1-shard parameters, and both are SGD on the mean gradient."""
    rng = np.random.default_rng(shards)
    start = rng.normal(size=SIZE).astype(np.float32)
    grads = [[rng.normal(size=SIZE).astype(np.float32) for _ in range(3)] for _ in range(4)]
    one = _trajectory(servers[:1], 3, start, grads)
    many = _trajectory(servers[:shards], 3, start, grads)
    params, velocity = start.copy(), np.zeros(SIZE, dtype=np.float32)
    for step, (ones, manys) in enumerate(zip(one, many, strict=True)):
        velocity = MOMENTUM * velocity + np.mean(grads[step], axis=0)
        params = params - LR * velocity
        for got_one, got_many in zip(ones, manys, strict=True):
            assert got_many.tobytes() == got_one.tobytes()
            np.testing.assert_allclose(got_many, params, rtol=1e-5, atol=1e-6)


@pytest.mark.real
def test_slices_reassemble_and_each_shard_holds_its_own(servers: list[str]) -> None:
    (channel,) = _channels(servers, 1)
    start = np.arange(SIZE, dtype=np.float32)
    assert channel.initialise(start, lr=LR, momentum=MOMENTUM)
    try:
        iteration, params = channel.parameters()
        assert iteration == 0 and params.tobytes() == start.tobytes()
        pieces = np.array_split(start, 3)
        for shard, (client, piece) in enumerate(zip(channel.clients, pieces, strict=True)):
            prefix = channel.prefix if shard == 0 else f"{channel.prefix}shard{shard}:"
            stored = client.hget(f"{prefix}state", "params")
            assert np.frombuffer(stored, dtype=np.float32).tobytes() == piece.tobytes()
        # What is not per slice lives on shard 0 only.
        assert channel.clients[0].hget(f"{channel.prefix}config", "shards") == b"3"
        for client in channel.clients[1:]:
            names = {key.decode().removeprefix(channel.prefix)
                     for key in client.scan_iter(match=f"{channel.prefix}*")}
            assert names <= {f"shard{s}:{name}" for s in (1, 2)
                             for name in ("state", "checkpoint")}
        assert channel.cleanup() >= 2 + 2 * 2
        for client in channel.clients:
            assert not list(client.scan_iter(match=f"{channel.prefix}*"))
    finally:
        channel.close()


@pytest.mark.real
def test_one_shard_keeps_todays_keys_and_config(servers: list[str]) -> None:
    """k = 1 writes exactly the keys and `config` fields it always did."""
    channels = _channels(servers[:1], 2)
    channels[0].initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    client = channels[0].client
    try:
        _exchange_all(channels, 0, [np.ones(SIZE), np.ones(SIZE)], stops=[True, False])
        channels[0].checkpoint(1)
        channels[0].record_restart()
        assert channels[0].restore() == 1
        names = {key.decode().removeprefix(channels[0].prefix)
                 for key in client.scan_iter(match=f"{channels[0].prefix}*")}
        assert names <= {"state", "checkpoint", "config", "heartbeats", "restarts"}
        assert set(client.hgetall(channels[0]._key("config"))) == {b"lr", b"momentum", b"size"}
        assert set(client.hgetall(channels[0]._key("checkpoint"))) == {
            b"iteration", b"params", b"velocity"}
    finally:
        channels[0].cleanup()


@pytest.mark.real
def test_all_shards_may_share_one_redis(redis_url: str) -> None:
    """Their keys differ (`shard<s>:`), so one server can hold all k: the same parameters."""
    rng = np.random.default_rng(5)
    start = rng.normal(size=SIZE).astype(np.float32)
    grads = [[rng.normal(size=SIZE).astype(np.float32) for _ in range(2)] for _ in range(3)]
    one = _trajectory([redis_url], 2, start, grads)
    shared = _trajectory([redis_url] * 3, 2, start, grads)
    assert [p.tobytes() for step in one for p in step] == [
        p.tobytes() for step in shared for p in step]


@pytest.mark.real
def test_traffic_per_shard_is_its_slice_and_sums_to_one_shards(servers: list[str]) -> None:
    """A rank that waits pushes its gradient slice and pulls the parameters' slice; the one
    that applies a shard's update reads every gradient, the parameters and the momentum and
    writes them back: per shard (n + 2)·S_s pushed and (2n + 1)·S_s pulled in all, which
    sums over the shards to the 1-shard figures whoever applies which shard."""
    n, start = 3, np.zeros(SIZE, dtype=np.float32)
    totals = {}
    for shards in (1, 3):
        channels = _channels(servers[:shards], n)
        channels[0].initialise(start, lr=LR, momentum=MOMENTUM)
        try:
            _exchange_all(channels, 0, [np.ones(SIZE, dtype=np.float32)] * n)
            pushed = [sum(c.traffic[s].pushed_bytes for c in channels) for s in range(shards)]
            pulled = [sum(c.traffic[s].pulled_bytes for c in channels) for s in range(shards)]
            sizes = [piece.size for piece in np.array_split(start, shards)]
            assert pushed == [(n + 2) * size * BYTES for size in sizes]
            assert pulled == [(2 * n + 1) * size * BYTES for size in sizes]
            assert all(c.traffic[s].seconds > 0 for c in channels for s in range(shards))
            totals[shards] = (sum(pushed), sum(pulled))
        finally:
            channels[0].cleanup()
    assert totals[3] == totals[1]


@pytest.mark.real
def test_a_stop_vote_halts_every_rank_after_the_same_iteration(servers: list[str]) -> None:
    channels = _channels(servers, 2)
    channels[0].initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    grads = [np.ones(SIZE), np.ones(SIZE)]
    try:
        _exchange_all(channels, 0, grads, stops=[False, True])
        assert [c.halted for c in channels] == [True, True]
        _exchange_all(channels, 1, grads)
        assert [c.halted for c in channels] == [False, False]
        channels[0].set_halt(True)
        _exchange_all(channels, 2, grads)
        assert [c.halted for c in channels] == [True, True]
    finally:
        channels[0].cleanup()


@pytest.mark.real
def test_a_requested_checkpoint_covers_every_shard(servers: list[str]) -> None:
    (channel,) = _channels(servers, 1)
    rng = np.random.default_rng(3)
    channel.initialise(rng.normal(size=SIZE), lr=LR, momentum=MOMENTUM)
    try:
        channel.exchange(0, 0, rng.normal(size=SIZE), 1.0)
        channel.request_checkpoint()
        saved = channel.exchange(0, 1, rng.normal(size=SIZE), 1.0)  # applies 1 → 2, saved
        channel.exchange(0, 2, rng.normal(size=SIZE), 1.0)
        assert channel.restore() == 2
        assert channel.parameters()[1].tobytes() == saved.tobytes()
    finally:
        channel.cleanup()


@pytest.mark.real
def test_restore_puts_every_shard_back_to_one_iteration_with_its_momentum(
    servers: list[str],
) -> None:
    (channel,) = _channels(servers, 1)
    rng = np.random.default_rng(2)
    grads = [rng.normal(size=SIZE).astype(np.float32) for _ in range(5)]
    channel.initialise(rng.normal(size=SIZE), lr=LR, momentum=MOMENTUM)
    try:
        trajectory = [channel.parameters()[1]]
        for iteration in range(3):
            trajectory.append(channel.exchange(0, iteration, grads[iteration], 1.0))
        channel.checkpoint(3)
        for iteration in (3, 4):
            trajectory.append(channel.exchange(0, iteration, grads[iteration], 1.0))
        assert channel.restore() == 3
        live, params = channel.parameters()
        assert live == 3 and params.tobytes() == trajectory[3].tobytes()
        with pytest.raises(ChannelError, match="is at 3"):
            channel.exchange(0, 5, grads[4], 1.0)
        for iteration in (3, 4):  # momentum was restored on every shard too
            assert channel.exchange(0, iteration, grads[iteration], 1.0).tobytes() == \
                trajectory[iteration + 1].tobytes()
        with pytest.raises(ChannelError, match="cannot checkpoint iteration 4"):
            channel.checkpoint(4)
    finally:
        channel.cleanup()


def _torn_checkpoint(channel: ParameterChannel, iteration: int) -> None:
    """A checkpoint cut short by a crash: shards 1..k−1 saved `iteration`, shard 0 did not."""
    for shard in range(1, channel.shards):
        channel._slice_scripts[shard]["checkpoint"](
            keys=[channel._key("state", shard), channel._key("checkpoint", shard)],
            args=[iteration, channel.key_ttl_s])


@pytest.mark.real
def test_a_checkpoint_torn_half_way_restores_every_shard_to_shard_0s(servers: list[str]) -> None:
    """Shard 0's checkpoint is written last and counts; the others keep the one before until
    it moves on. Torn twice in a row (a restore between), all shards still go back to it."""
    (channel,) = _channels(servers, 1)
    rng = np.random.default_rng(4)
    channel.initialise(rng.normal(size=SIZE), lr=LR, momentum=MOMENTUM)
    try:
        for iteration in range(2):
            channel.exchange(0, iteration, rng.normal(size=SIZE), 1.0)
        channel.checkpoint(2)
        at_two = channel.parameters()[1]
        for torn in (4, 6):
            for iteration in range(2, torn):
                channel.exchange(0, iteration, rng.normal(size=SIZE), 1.0)
            _torn_checkpoint(channel, torn)
            assert channel.restore() == 2
            live, params = channel.parameters()
            assert live == 2 and params.tobytes() == at_two.tobytes()
        # A whole checkpoint moves every shard on.
        channel.exchange(0, 2, rng.normal(size=SIZE), 1.0)
        channel.checkpoint(3)
        at_three = channel.parameters()[1]
        channel.exchange(0, 3, rng.normal(size=SIZE), 1.0)
        assert channel.restore() == 3
        assert channel.parameters()[1].tobytes() == at_three.tobytes()
    finally:
        channel.cleanup()


@pytest.mark.real
def test_a_shard_without_the_checkpoint_is_one_line_not_a_silent_mix(servers: list[str]) -> None:
    (channel,) = _channels(servers, 1)
    channel.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    try:
        channel.clients[2].delete(channel._key("checkpoint", 2))
        with pytest.raises(ChannelError, match="shard 2 holds no checkpoint of it"):
            channel.restore()
    finally:
        channel.cleanup()


@pytest.mark.real
def test_a_job_is_only_ever_opened_with_its_own_shard_count(servers: list[str]) -> None:
    job = f"test-{uuid.uuid4().hex[:8]}"
    (three,) = _channels(servers, 1, job=job)
    three.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    try:
        for urls in (servers[:1], servers[:2]):
            (other,) = _channels(urls, 1, job=job)
            with pytest.raises(UnrecoverableError, match="started with 3 parameter-server "
                                                         "shards, not"):
                other.restore()
            with pytest.raises(UnrecoverableError, match="resume it with `shards` 3"):
                other.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    finally:
        three.cleanup()
    one_job = f"test-{uuid.uuid4().hex[:8]}"
    (one,) = _channels(servers[:1], 1, job=one_job)
    one.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    try:
        (two,) = _channels(servers[:2], 1, job=one_job)
        with pytest.raises(UnrecoverableError, match="started with 1 parameter-server shard,"):
            two.restore()
    finally:
        one.cleanup()


@pytest.mark.real
def test_shards_at_different_iterations_are_not_read_as_one_vector(servers: list[str]) -> None:
    (channel,) = _channels(servers[:2], 1)
    channel.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    try:
        channel.clients[1].hset(channel._key("state", 1), "iteration", 7)
        with pytest.raises(ChannelError, match=r"at iterations \[0, 7\]"):
            channel.parameters()
    finally:
        channel.cleanup()


# -- the worker's shard URLs -------------------------------------------------------------------


EVENT = {"redis_url": "redis://a:6379/0"}


@pytest.mark.real  # the worker module imports torch
def test_the_worker_finds_one_url_per_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    from lambdadnn.launcher.worker import shard_urls

    monkeypatch.setenv(REDIS_URLS_ENV, "redis://x:1/0, redis://y:1/0")
    assert shard_urls(EVENT) == ["redis://a:6379/0"]  # one shard: as ever, the env unread
    assert shard_urls({**EVENT, "shards": 2}) == ["redis://x:1/0", "redis://y:1/0"]
    listed = {**EVENT, "shards": 2, "redis_urls": ["redis://p:1/0", "redis://q:1/0"]}
    assert shard_urls(listed) == ["redis://p:1/0", "redis://q:1/0"]  # the event wins
    monkeypatch.delenv(REDIS_URLS_ENV)
    assert shard_urls({**EVENT, "shards": 3}) == ["redis://a:6379/0"] * 3
    with pytest.raises(UnrecoverableError, match="2 Redis URLs for 3 parameter-server shards"):
        shard_urls({**EVENT, "shards": 3, "redis_urls": ["redis://p:1/0", "redis://q:1/0"]})


# -- the shard count: hostile values ----------------------------------------------------------


BASE = LaunchSpec(functions=2, memory_mb=884, local_batch=32, iterations=40, time_s=60.0,
                  restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")


@pytest.mark.parametrize(
    "value", [0, -1, MAX_SHARDS + 1, 10**30, 1.5, float("nan"), float("inf"), True, "2",
              [2], "1; rm -rf /", None],
)
def test_a_bad_shard_count_is_one_line_naming_field_value_and_fix(value: object) -> None:
    refusals = [("`--shards` in the launch", lambda: BASE.with_shards(value))]
    if value is not None:  # in a plan, a null `shards` means "the instance's"
        refusals.append(("`shards` in the plan", lambda: LaunchSpec.from_mapping(
            {**BASE.to_dict(), "shards": value})))
    for named, refuse in refusals:
        with pytest.raises(InstanceError) as caught:
            refuse()
        message = str(caught.value)
        assert "\n" not in message and message.startswith(named), message
        assert f"from 1 to {MAX_SHARDS}, got " in message and "`--shards K`" in message


def test_a_shard_count_is_a_whole_number_from_1_to_16() -> None:
    assert [check_shards(v) for v in (1, 2.0, np.int64(16))] == [1, 2, 16]
    assert BASE.shards == 1 and BASE.with_shards(3).shards == 3
    assert LaunchSpec.from_mapping(BASE.with_shards(4).to_dict()).shards == 4
    assert "shards" not in BASE.worker_event(job="j", redis_url="u")  # k = 1: as ever
    assert BASE.with_shards(2).worker_event(job="j", redis_url="u")["shards"] == 2


def test_the_shards_come_from_the_plans_parameter_server() -> None:
    plan = solve("instances/1dcnn-imdb.yaml")
    assert LaunchSpec.from_plan(plan).shards == plan.solved_from.parameter_server.shards
    payload = plan.to_dict()
    payload["instance_spec"]["parameter_server"]["shards"] = 2
    assert LaunchSpec.from_mapping(payload).shards == 2
    assert LaunchSpec.from_mapping({**payload, "shards": 3}).shards == 3  # the spec's own wins
    payload["instance_spec"]["parameter_server"]["shards"] = MAX_SHARDS + 4
    with pytest.raises(InstanceError, match=r"`instance_spec.parameter_server.shards` in the "
                                            r"plan must be a whole number"):
        LaunchSpec.from_mapping(payload)


def test_the_prediction_is_for_the_shards_launched() -> None:
    """`--shards K` over a plan's own count: the model's figure is for K shards."""
    import dataclasses

    import yaml

    from lambdadnn.launcher.spec import Prediction
    from lambdadnn.solver.instance_yaml import load_instance
    from lambdadnn.solver.prediction import predict_run

    mapping = yaml.safe_load(Path("instances/1dcnn-imdb.yaml").read_text())
    mapping["fit"] = {"workload": "digits-cnn", "backend": "local", "seconds": 60.0,
                      "cost_usd": 0.0, "parameters": {}}
    spec = LaunchSpec.from_mapping(solve(mapping).to_dict()).with_shards(3)
    instance = load_instance(mapping)
    sharded = dataclasses.replace(instance, parameter_server=dataclasses.replace(
        instance.parameter_server, shards=3))
    expected = predict_run(sharded, functions=spec.functions, memory_mb=spec.memory_mb,
                           local_batch=spec.local_batch, iterations=spec.iterations,
                           timeout_s=900.0, timeout_margin_s=30.0)
    got = Prediction.of(spec, backend="local", workload="digits-cnn", timeout_s=900.0,
                        timeout_margin_s=30.0)
    assert got.note is None and got.time_s == pytest.approx(expected.time_s)


def test_a_plan_with_too_many_shards_is_refused_before_anything_starts(
    tmp_path: Path, nothing_starts: None,
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**_plan(), "shards": 17}))
    result = CliRunner().invoke(main, ["launch", str(path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: `shards` in file") and result.stderr.count("\n") == 1
    assert "got 17" in result.stderr and "Traceback" not in result.output


# -- real launches -----------------------------------------------------------------------------


def _plan(**edits: Any) -> dict[str, Any]:
    """`solve --json`'s 1D CNN plan, shrunk to 2 functions × 884 MB for 40 iterations."""
    plan = solve("instances/1dcnn-imdb.yaml").to_dict()
    plan.update({"functions": 2, "memory_mb": 884, "iterations": 40, **edits})
    return plan


def _run(shards: int, **kwargs: Any) -> LaunchReport:
    return run_local(BASE.with_shards(shards), workload="digits-mlp", seed=7, **kwargs)


@pytest.fixture(scope="module")
def one_shard() -> LaunchReport:
    return _run(1)


@pytest.fixture(scope="module")
def two_shards() -> LaunchReport:
    return _run(2)


def _digits_mlp_size() -> int:
    from lambdadnn.launcher.workloads import load_workload

    return sum(p.numel() for p in load_workload("digits-mlp", 0).model.parameters())


@pytest.mark.real
def test_two_shards_train_to_the_same_loss_bit_for_bit(
    one_shard: LaunchReport, two_shards: LaunchReport,
) -> None:
    assert one_shard.status == two_shards.status == "done"
    assert (one_shard.shards, two_shards.shards) == (1, 2)
    assert one_shard.iterations == two_shards.iterations == 40
    assert two_shards.final_loss == one_shard.final_loss  # exactly: element-wise updates
    assert two_shards.test_accuracy == one_shard.test_accuracy


@pytest.mark.real
def test_per_shard_traffic_is_reported_and_sums_to_the_total(
    one_shard: LaunchReport, two_shards: LaunchReport,
) -> None:
    size, n, iterations = _digits_mlp_size(), 2, 40
    sizes = [piece.size for piece in np.array_split(np.empty(size), 2)]
    assert one_shard.shard_pushed_bytes == ((n + 2) * size * BYTES * iterations,)
    assert one_shard.shard_pulled_bytes == ((2 * n + 1) * size * BYTES * iterations,)
    assert two_shards.shard_pushed_bytes == tuple(
        (n + 2) * s * BYTES * iterations for s in sizes)
    assert two_shards.shard_pulled_bytes == tuple(
        (2 * n + 1) * s * BYTES * iterations for s in sizes)
    assert sum(two_shards.shard_pushed_bytes) == sum(one_shard.shard_pushed_bytes)
    assert sum(two_shards.shard_pulled_bytes) == sum(one_shard.shard_pulled_bytes)
    for report in (one_shard, two_shards):
        assert len(report.shard_exchange_s) == len(report.shard_exchange_median_s) \
            == report.shards
        # A shard's push and pull lie within the rank's exchange: never more than all of it.
        assert all(0 <= s <= report.exchange_s + 1e-6 for s in report.shard_exchange_s)
        out = report.to_dict()
        assert json.loads(json.dumps(out, allow_nan=False))["shard_pushed_bytes"] == list(
            report.shard_pushed_bytes)
    lines = two_shards.shard_lines()
    assert lines[0].startswith("  PS shards      2:") and len(lines) == 3
    assert lines[1].startswith("    shard 0  ") and lines[2].startswith("    shard 1  ")


def test_shard_figures_summarise_the_workers_records() -> None:
    """Per iteration and shard: the shortest compute + that shard's exchange of any rank,
    less the slowest compute (as the whole exchange is); bytes summed over invocations."""
    records = [{"round": 0, "rank": rank, "first_iteration": 0, "first_at": 1.0,
                "ended_at": 2.0, "compute_s": [0.1 * (rank + 1), 0.2],
                "exchange_s": [0.5, 0.5], "shard_exchange_s": [[0.3, 0.4 - rank / 10],
                                                               [0.25, 0.5]],
                "shard_pushed_bytes": [10, 20], "shard_pulled_bytes": [1, 2]}
               for rank in range(2)]
    timings = summarise(records, [0.0])
    assert timings.shard_pushed_bytes == (20, 40) and timings.shard_pulled_bytes == (2, 4)
    # iteration 0 (computes 0.1, 0.2): shard 0 min(0.4, 0.5) − 0.2, shard 1 min(0.5, 0.5) − 0.2
    # iteration 1 (computes 0.2, 0.2): shard 0 0.45 − 0.2, shard 1 0.7 − 0.2
    assert timings.shard_exchange_s == pytest.approx((0.2 + 0.25, 0.3 + 0.5))
    assert timings.shard_exchange_median_s == pytest.approx((0.225, 0.4))
    old = [{k: v for k, v in r.items() if not k.startswith("shard")} for r in records]
    assert summarise(old, [0.0]).shard_pushed_bytes == ()  # a worker that records none


def _worker_pids() -> list[int]:
    """This process's children that run the worker."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if parent == os.getpid() and b"_worker_main" in command:
            pids.append(int(stat.parent.name))
    return pids


@pytest.mark.real
def test_a_killed_worker_resumes_every_shard_from_one_checkpoint(
    one_shard: LaunchReport, redis_url: str,
) -> None:
    """All shards on the caller's Redis; a worker SIGKILLed mid-way: the relaunch restores
    every shard to the same checkpoint and ends exactly where the 1-shard run did."""
    killed: list[int] = []

    def kill_one_worker_midway(iteration: int, total: int) -> None:
        if not killed and total // 3 <= iteration < total and _worker_pids():
            killed.append(_worker_pids()[0])
            os.kill(killed[0], signal.SIGKILL)

    warned: list[str] = []
    report = _run(2, redis_url=redis_url, progress=kill_one_worker_midway,
                  checkpoint_every=5, warn=warned.append)
    assert killed and report.restarts >= 1
    assert report.iterations == one_shard.iterations
    assert report.final_loss == one_shard.final_loss
    assert any("share its bandwidth" in line for line in warned)
    with redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match="lambdadnn:local-*"))


@pytest.mark.real
def test_resuming_with_another_shard_count_is_one_line(redis_url: str) -> None:
    from lambdadnn.launcher import LaunchError

    job = f"local-{uuid.uuid4().hex[:12]}"
    (stopped,) = _channels([redis_url] * 2, 1, job=job)
    stopped.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    try:
        with pytest.raises(LaunchError) as caught:
            _run(3, redis_url=redis_url, resume=job)
        message = str(caught.value)
        assert message.startswith(f"`--resume` {job}: job {job!r} was started with 2 "
                                  "parameter-server shards, not 3") and "\n" not in message
    finally:
        stopped.cleanup()


# -- no redis-server outlives a launch ---------------------------------------------------------


def _servers_while_training(root: int, shards: int) -> set[int]:
    """Wait until the launch under `root` trains on its `shards` redis-servers with its 2
    workers (the channel is past iteration 0); its processes."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        pids = descendants(root)
        servers = [p for p in pids if b"redis-server" in cmdline(p)]
        workers = [p for p in pids if b"_worker_main" in cmdline(p)]
        if len(servers) == shards and len(workers) == 2:
            for server in servers:  # retitled "redis-server unixsocket:PATH"
                found = re.findall(rb"unixsocket:([^\s\x00]+)", cmdline(server))
                if not found:
                    continue
                with contextlib.suppress(redis.RedisError), redis.Redis(
                    unix_socket_path=found[-1].decode(), socket_connect_timeout=1
                ) as client:
                    for key in client.scan_iter(match="lambdadnn:*:state"):
                        if int(client.hget(key, "iteration") or 0) >= 1:
                            return pids
        time.sleep(0.2)
    raise AssertionError("the launch did not start training on its servers")


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[str]]]:
    """The launches a test starts; whatever they leave is killed after the test."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=HANG_GUARD_S)
        for pid in descendants(process.pid) | {process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()


@pytest.mark.real
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_stopping_a_sharded_launch_leaves_no_redis_server(
    how: str, tmp_path: Path, launched: list[subprocess.Popen[str]],
) -> None:
    """SIGTERM and SIGINT: the launcher's clean-up stops all 3 servers and removes their
    folders (a server the kernel killed would leave its folder); SIGKILL: the kernel stops
    them (each dies with its parent)."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_plan(iterations=10**6, shards=3)))
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "lambdadnn"), "launch", str(path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    launched.append(process)
    pids = _servers_while_training(process.pid, 3)
    process.send_signal(signal.Signals[how])
    _, err = process.communicate(timeout=HANG_GUARD_S)
    if how != "SIGKILL":
        assert process.returncode == 128 + signal.Signals[how]
        assert err.endswith(f"error: launch stopped by {how}; it left no process or cgroup "
                            "behind\n"), err
    deadline = time.monotonic() + HANG_GUARD_S
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]
    folders = list(Path(tempfile.gettempdir()).glob(f"lambdadnn-redis-{process.pid}-*"))
    if how != "SIGKILL":
        assert folders == []
    for folder in folders:  # SIGKILL's: the next launch's sweep would remove them
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.real
def test_a_server_that_fails_to_start_stops_the_ones_already_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The third of three servers fails: the launch is one error, and the first two are
    stopped and their folders removed."""
    import lambdadnn.launcher.local as local
    from lambdadnn.launcher import LaunchError

    started: list[str] = []
    real = local.redis_server

    @contextlib.contextmanager
    def failing_third(**kwargs: Any) -> Iterator[str]:
        if len(started) == 2:
            raise LaunchError("redis-server exited at start-up with code 1: test")
        with real(**kwargs) as url:
            started.append(url)
            yield url

    monkeypatch.setattr(local, "redis_server", failing_third)
    with pytest.raises(LaunchError, match="exited at start-up"):
        _run(3)
    assert len(started) == 2
    for url in started:
        socket_path = Path(url.removeprefix("unix://").split("?")[0])
        assert not socket_path.parent.exists()
