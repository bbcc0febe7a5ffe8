"""The Redis parameter channel on a real redis-server: BSP averaging, barrier, checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import redis

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.channel import BarrierTimeoutError, ChannelError, ParameterChannel
from tests.hang_guard import HANG_GUARD_S

pytestmark = pytest.mark.real  # a redis-server

SIZE = 50
LR, MOMENTUM = 0.1, 0.9


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's redis-server (see conftest.py)."""
    with redis.Redis.from_url(redis_url) as connected:
        yield connected


def _channels(client: redis.Redis, workers: int, **kwargs: float) -> list[ParameterChannel]:
    """One channel object per worker, as separate processes would have; a fresh job name."""
    job = f"test-{uuid.uuid4().hex[:8]}"
    return [ParameterChannel(client, job, workers=workers, **kwargs) for _ in range(workers)]


def _exchange_all(
    channels: list[ParameterChannel], iteration: int, grads: list[np.ndarray],
    stops: list[bool] | None = None,
) -> list[np.ndarray]:
    """Every rank exchanges at once, each in its own thread (each blocks at the barrier)."""
    stops = stops or [False] * len(channels)
    with ThreadPoolExecutor(len(channels)) as pool:
        futures = [
            pool.submit(c.exchange, rank, iteration, grads[rank], float(rank), stop=stops[rank])
            for rank, c in enumerate(channels)
        ]
        return [f.result(timeout=HANG_GUARD_S) for f in futures]


def test_bsp_update_is_sgd_with_momentum_on_the_mean_gradient(client: redis.Redis) -> None:
    channels = _channels(client, 3)
    rng = np.random.default_rng(1)
    params = rng.normal(size=SIZE).astype(np.float32)
    assert channels[0].initialise(params, lr=LR, momentum=MOMENTUM)
    velocity = np.zeros(SIZE, dtype=np.float32)
    for iteration in range(3):
        grads = [rng.normal(size=SIZE).astype(np.float32) for _ in channels]
        velocity = MOMENTUM * velocity + np.mean(grads, axis=0)
        params = params - LR * velocity
        for returned in _exchange_all(channels, iteration, grads):
            np.testing.assert_allclose(returned, params, rtol=1e-5, atol=1e-6)
    live, stored = channels[1].parameters()
    assert live == 3
    np.testing.assert_allclose(stored, params, rtol=1e-5, atol=1e-6)
    progress = channels[2].progress()
    assert progress["iteration"] == 3
    assert progress["loss"] == pytest.approx(1.0)  # the mean of the ranks' losses 0, 1, 2
    assert sorted(progress["heartbeats"]) == [0, 1, 2]
    # Consumed iterations leave no keys behind: memory stays bounded.
    assert not list(client.scan_iter(match=f"lambdadnn:{channels[0].job}:it:*"))
    channels[0].cleanup()


def test_a_worker_alone_at_the_barrier_times_out_naming_the_missing_ranks(
    client: redis.Redis,
) -> None:
    channel, _ = _channels(client, 2, barrier_timeout_s=0.3)
    channel.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    with pytest.raises(BarrierTimeoutError, match=r"ranks \[1\] never pushed") as caught:
        channel.exchange(0, 0, np.ones(SIZE), 0.5)
    assert isinstance(caught.value, LaunchError)
    channel.cleanup()


def test_restore_continues_from_the_checkpoint_with_its_momentum(client: redis.Redis) -> None:
    (channel,) = _channels(client, 1)
    rng = np.random.default_rng(2)
    grads = [rng.normal(size=SIZE).astype(np.float32) for _ in range(5)]
    channel.initialise(rng.normal(size=SIZE), lr=LR, momentum=MOMENTUM)
    trajectory = [channel.parameters()[1]]
    for iteration in range(3):
        trajectory.append(channel.exchange(0, iteration, grads[iteration], 1.0))
    channel.checkpoint(3)
    for iteration in (3, 4):
        trajectory.append(channel.exchange(0, iteration, grads[iteration], 1.0))
    assert channel.parameters()[0] == 5

    assert channel.restore() == 3
    live, params = channel.parameters()
    assert live == 3
    np.testing.assert_array_equal(params, trajectory[3])
    with pytest.raises(ChannelError, match="is at 3"):
        channel.exchange(0, 5, grads[4], 1.0)
    # Replaying the same gradients gives the same parameters: momentum was restored too.
    for iteration in (3, 4):
        np.testing.assert_array_equal(
            channel.exchange(0, iteration, grads[iteration], 1.0), trajectory[iteration + 1]
        )
    with pytest.raises(ChannelError, match="cannot checkpoint iteration 4"):
        channel.checkpoint(4)
    channel.cleanup()


def test_restore_without_checkpoint_and_first_initialise_wins(client: redis.Redis) -> None:
    first, second = _channels(client, 2)
    assert first.restore() is None
    assert first.initialise(np.ones(SIZE), lr=LR, momentum=MOMENTUM)
    assert not second.initialise(np.zeros(SIZE), lr=1.0, momentum=0.0)
    np.testing.assert_array_equal(second.parameters()[1], np.ones(SIZE))
    with pytest.raises(ChannelError, match=f"holds {SIZE} parameters"):
        second.initialise(np.zeros(SIZE + 1), lr=LR, momentum=MOMENTUM)
    assert first.restore() == 0
    first.cleanup()


def test_a_stop_vote_halts_every_worker_after_the_same_iteration(client: redis.Redis) -> None:
    channels = _channels(client, 2)
    channels[0].initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    grads = [np.ones(SIZE), np.ones(SIZE)]
    _exchange_all(channels, 0, grads, stops=[False, True])
    assert [c.halted for c in channels] == [True, True]
    _exchange_all(channels, 1, grads)
    assert [c.halted for c in channels] == [False, False]
    channels[0].cleanup()


def test_progress_restarts_result_and_cleanup(client: redis.Redis) -> None:
    (channel,) = _channels(client, 1)
    with pytest.raises(ChannelError, match="not initialised"):
        channel.parameters()
    channel.initialise(np.zeros(SIZE), lr=LR, momentum=MOMENTUM)
    assert channel.progress() == {
        "iteration": 0, "loss": None, "restarts": 0, "done": False, "heartbeats": {},
    }
    assert channel.record_restart() == 1
    assert channel.result() is None
    channel.finish({"test_accuracy": 0.9})
    assert channel.result() == {"test_accuracy": 0.9}
    assert channel.progress()["done"] and channel.progress()["restarts"] == 1
    assert channel.cleanup() >= 4
    assert not list(client.scan_iter(match=f"lambdadnn:{channel.job}:*"))


def test_timings_are_kept_per_round_and_rank_and_cleaned_up(client: redis.Redis) -> None:
    """A worker's round is the relaunches so far; each invocation's record comes back with
    its round and rank, a rank's record of one round never overwrites another round's."""
    (channel,) = _channels(client, 1)
    assert channel.round() == 0 and channel.timings() == []
    first = {"first_iteration": 0, "first_at": 1.5, "ended_at": 9.0, "compute_s": [0.25],
             "exchange_s": [0.125]}
    channel.record_timings(0, channel.round(), first)
    channel.record_restart()
    assert channel.round() == 1
    channel.record_timings(0, channel.round(), {**first, "first_iteration": 1})
    channel.record_timings(1, 0, {**first, "first_at": None})
    records = sorted(channel.timings(), key=lambda r: (r["round"], r["rank"]))
    assert records == [{**first, "round": 0, "rank": 0},
                       {**first, "first_at": None, "round": 0, "rank": 1},
                       {**first, "first_iteration": 1, "round": 1, "rank": 0}]
    channel.cleanup()
    assert channel.timings() == []
