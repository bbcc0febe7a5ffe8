"""The worker: one function invocation's share of synchronous SGD, for AWS Lambda and locally alike.

`handler(event, context)` is the Lambda entry point (`launcher.worker.handler`) and what the
local backend runs in each worker process. It trains the event's `workload` (see
`launcher.workloads`: `digits-cnn` by default, on scikit-learn's digits, nothing to download)
on its slice of each iteration's global batch, and keeps no state of its own between
iterations: the global batch of iteration i is a function of (seed, i, its size) over the
whole training set, rank r of n takes the r-th of n near-equal slices of it, and the model and
momentum live in the channel. So a relaunched worker continues exactly where the channel is,
and a group relaunched with another n trains on the very same batches. Given `action`
"restore", it puts a sharded job's PS shards back to its checkpoint instead: the AWS launcher
asks the function for that, since only the function reaches shards 1..k-1.

torch and scikit-learn are imported here, at module level, so that on Lambda (and in the local
backend) their import is part of the init phase, not of the invocation's timeout.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Protocol

import numpy as np
import redis
import sklearn.datasets  # the shipped workloads' data and split: imported at init, off the clock
import sklearn.model_selection  # noqa: F401
import torch
from torch import nn

from ..inputs.files import brief
from .channel import (
    DEFAULT_KEY_TTL_S,
    REDIS_URLS_ENV,
    ParameterChannel,
    ShardTraffic,
    UnrecoverableError,
    finite,
)
from .workloads import Data, Workload, length, load_workload, sample

__all__ = ["handler", "shard_urls"]

_EVALUATION_BATCH = 4096  # samples per forward pass when measuring the final loss


class LambdaContext(Protocol):
    """The one method of AWS Lambda's context object the worker uses."""

    def get_remaining_time_in_millis(self) -> int: ...


def _flat(model: nn.Module) -> np.ndarray:
    return nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()


def _load_flat(model: nn.Module, flat: np.ndarray) -> None:
    nn.utils.vector_to_parameters(torch.from_numpy(flat), model.parameters())


def _batch(
    samples: int, size: int, seed: int, iteration: int, rank: int, workers: int
) -> tuple[np.ndarray, float]:
    """Rank `rank`'s sample indices of iteration `iteration`, and the weight of its gradient.

    The global batch (`size` samples, at most the training set's) is a pure function of
    (seed, iteration, size), whatever the number of workers; rank r takes the r-th of
    `workers` slices whose sizes differ by at most one. Its mean gradient × b_r·n/B, averaged
    over the n ranks, is the mean gradient over the global batch: the weight is exactly 1.0
    when n divides B.
    """
    rng = np.random.default_rng((seed, iteration, size))
    batch = rng.choice(samples, size=min(size, samples), replace=False)
    mine = np.array_split(batch, workers)[rank]
    return mine, mine.size * workers / batch.size


def _gradient(workload: Workload, x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, float]:
    model = workload.model
    model.zero_grad(set_to_none=False)
    loss = workload.loss(model(x), y)
    torch.autograd.backward(loss)
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    return torch.cat(grads).numpy().copy(), loss.item()


_DIVERGED = "the training diverged (lower the workload's `lr`) or its data holds NaN"


def _check_step(rank: int, iteration: int, gradient: np.ndarray, loss: float) -> None:
    """Refuse to push a non-finite loss or gradient: averaged in, it would turn every rank's
    parameters into NaN, and the run would end "done" with no loss to show."""
    if not math.isfinite(loss):
        raise UnrecoverableError(f"rank {rank}'s loss at iteration {iteration} is {loss}: "
                                 f"{_DIVERGED}")
    finite(gradient, f"rank {rank}'s gradient at iteration {iteration}", _DIVERGED)


def _measure(workload: Workload, data: Data) -> tuple[float, float | None]:
    """Mean loss over `data` and accuracy (None unless class scores for integer labels)."""
    size = length(data)
    total, correct, classified = 0.0, 0, True
    with torch.no_grad():
        for start in range(0, size, _EVALUATION_BATCH):
            x, y = sample(data, torch.arange(start, min(size, start + _EVALUATION_BATCH)))
            outputs = workload.model(x)
            total += float(workload.loss(outputs, y)) * len(y)
            classified &= outputs.dim() == 2 and y.dim() == 1 and not y.is_floating_point()
            if classified:
                correct += int((outputs.argmax(dim=1) == y).sum())
    return total / size, correct / size if classified else None


def _evaluate(workload: Workload) -> dict[str, float | None]:
    train_loss, _ = _measure(workload, workload.train)
    if not math.isfinite(train_loss):  # never a result that says "done" with no loss
        raise UnrecoverableError(f"the final loss over the training set is {train_loss}: "
                                 f"{_DIVERGED}")
    test_loss, accuracy = _measure(workload, workload.test)
    return {"final_loss": train_loss, "test_loss": test_loss, "test_accuracy": accuracy}


# Workloads built before the invocation (`prepare`), each used by exactly one handler call:
# a warm Lambda sandbox must not start a new job from a model an earlier job trained.
_PREPARED: dict[tuple[str, int, str], Workload] = {}


def prepare(event: dict[str, Any]) -> None:
    """Build the event's workload now, in the init phase at full CPU, for the next `handler`.

    The local backend calls it before a worker joins its CPU cgroup, as Lambda's init phase
    runs before the invocation's clock starts; the handler builds it itself otherwise.
    """
    key = (str(event["workload"]), int(event["seed"]), str(event["job"]))
    _PREPARED[key] = load_workload(key[0], key[1])


def shard_urls(event: dict[str, Any]) -> list[str]:
    """The Redis URL of each of the event's `shards` (1 unless given).

    One shard: the event's `redis_url`, as ever. k > 1: the event's `redis_urls` list, else
    $LAMBDADNN_REDIS_URLS (comma-separated), else `redis_url`; a single URL holds all k
    shards (their keys differ, so they share one server's bandwidth). Any other count is
    an `UnrecoverableError`: every relaunch would meet it again.
    """
    shards = int(event.get("shards", 1))
    if shards == 1:
        return [str(event["redis_url"])]
    listed = event.get("redis_urls") or [
        url.strip() for url in os.environ.get(REDIS_URLS_ENV, "").split(",") if url.strip()]
    urls = [str(url) for url in listed] or [str(event["redis_url"])]
    if len(urls) == 1:
        return urls * shards
    if len(urls) != shards:
        raise UnrecoverableError(
            f"the worker was given {len(urls)} Redis URLs for {shards} parameter-server "
            f"shards; give one per shard (`redis_urls`, or ${REDIS_URLS_ENV}), or one for all"
        )
    return urls


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Train from the channel's live iteration until done or the invocation's deadline nears;
    or, given `action` "restore", put every PS shard back to the job's checkpoint.

    Event: `rank`, `workers`, `job`, `redis_url`, `iterations` (total), `global_batch` (B,
    split over the ranks; default `local_batch` × `workers`), `checkpoint_every` (K),
    `timeout_margin_s`, `seed`, `workload` (a name or `package.module:factory`, which also
    sets `lr` and `momentum`); optional `barrier_timeout_s`, `key_ttl_s` (the channel's
    key expiry), and `shards` with their `redis_urls` (see `shard_urls`). Returns
    `{"status": "done" | "timeout", "rank", "iteration", ...}`; on "timeout" (the
    invocation's deadline is near, or the launcher asked the group to halt) the launcher
    invokes the ranks again, maybe another number of them, and they resume from the
    checkpoint. Every K iterations and
    before returning, it records its timings in the channel
    (`ParameterChannel.record_timings`; the last record says `returned`), so the launcher
    reads a round's timings while it runs. A loss or gradient that is NaN or infinite (the
    training diverged), or parameters read back that are, raise `UnrecoverableError`: the
    launcher then ends the run as failed, never as done.

    `action` "restore" (the AWS launcher, between two rounds of a sharded launch: shards
    1..k-1 are at VPC addresses that only the function reaches) needs only the channel's
    fields (`job`, `workers`, `redis_url`, `shards`, `redis_urls`, `key_ttl_s`) and returns
    `_restore`'s answer. Any other `action` is an `UnrecoverableError`, raised before
    anything connects: no event selects code beyond these two.
    """
    restoring = _action(event)
    torch.set_num_threads(1)
    with _channel(event) as channel:
        if restoring:
            return _restore(event, channel)
        return _train(event, context, channel)


def _action(event: dict[str, Any]) -> bool:
    """Whether the event asks for a restore (`action` "restore") rather than training (no
    `action`); any other `action` is refused."""
    if "action" not in event:
        return False
    if event["action"] != "restore":
        raise UnrecoverableError(
            f"the event's `action` is {brief(event['action'])}; the worker runs only "
            '"restore" (or, without an `action`, trains)'
        )
    return True


@contextmanager
def _channel(event: dict[str, Any]) -> Iterator[ParameterChannel]:
    """The event's channel over every shard (`shard_urls`), as a rank trains on it; its
    clients and shard threads end with the block."""
    with ExitStack() as stack:
        client, *others = (stack.enter_context(redis.Redis.from_url(url))
                           for url in shard_urls(event))
        channel = ParameterChannel(
            client, event["job"], workers=int(event["workers"]),
            barrier_timeout_s=float(event.get("barrier_timeout_s", 120.0)),
            key_ttl_s=int(event.get("key_ttl_s", DEFAULT_KEY_TTL_S)), shard_clients=others,
        )
        stack.callback(channel.close)
        yield channel


def _restore(event: dict[str, Any], channel: ParameterChannel) -> dict[str, Any]:
    """`ParameterChannel.restore` on every shard: `{"status": "restored", "iteration"}`, the
    checkpoint's iteration, or `{"status": "no-checkpoint", "iteration": None}` when the
    job holds none (never initialised here, or its keys expired). No rank runs meanwhile
    (the launcher restores between rounds), so nothing races it."""
    iteration = channel.restore()
    status = "no-checkpoint" if iteration is None else "restored"
    return {"status": status, "job": event["job"], "iteration": iteration}


class _Clock:
    """Per iteration, the seconds spent computing the gradient and exchanging it, and per
    shard the seconds of its push and pull and the bytes they moved (`ShardTraffic`).

    `first_at` (the first iteration began) and `ended_at` (the last update was applied) are
    wall-clock times, since the launcher compares them with the times it launched the rounds
    at, on another machine on AWS; the durations use the monotonic clock.
    """

    def __init__(self, first_iteration: int) -> None:
        self.first_iteration = first_iteration
        self.first_at: float | None = None
        self.ended_at: float | None = None
        self.compute: list[float] = []
        self.exchange: list[float] = []
        self.shard_exchange: list[list[float]] = []
        self.pushed: list[int] = []
        self.pulled: list[int] = []

    def lap(self, began: float, computed: float, traffic: list[ShardTraffic]) -> None:
        """An iteration that began and finished its gradient at these `perf_counter` times has
        just applied its update, moving `traffic`. Noted now, not at `record`: the checkpoint
        that follows is restart overhead (or past the end of training), not iteration time."""
        self.compute.append(computed - began)
        self.exchange.append(time.perf_counter() - computed)
        self.ended_at = time.time()
        self.shard_exchange.append([shard.seconds for shard in traffic])
        if not self.pushed:
            self.pushed, self.pulled = [0] * len(traffic), [0] * len(traffic)
        for index, shard in enumerate(traffic):
            self.pushed[index] += shard.pushed_bytes
            self.pulled[index] += shard.pulled_bytes

    def record(
        self, channel: ParameterChannel, rank: int, round_: int, *, returned: bool = False
    ) -> None:
        """Store them in the channel (`ParameterChannel.record_timings`); `returned`: the
        invocation's last record, so the launcher knows it has left the group."""
        channel.record_timings(rank, round_, {
            "first_iteration": self.first_iteration, "first_at": self.first_at,
            "ended_at": self.ended_at, "returned": returned,
            "compute_s": [round(value, 6) for value in self.compute],
            "exchange_s": [round(value, 6) for value in self.exchange],
            "shard_exchange_s": [[round(value, 6) for value in shards]
                                 for shards in self.shard_exchange],
            "shard_pushed_bytes": self.pushed, "shard_pulled_bytes": self.pulled,
        })


def _train(
    event: dict[str, Any], context: LambdaContext, channel: ParameterChannel
) -> dict[str, Any]:
    rank, workers, seed = int(event["rank"]), int(event["workers"]), int(event["seed"])
    total, every = int(event["iterations"]), int(event["checkpoint_every"])
    margin_ms = float(event["timeout_margin_s"]) * 1000
    reply: dict[str, Any] = {"rank": rank, "job": event["job"]}
    reference = str(event["workload"])
    workload = (_PREPARED.pop((reference, seed, str(event["job"])), None)
                or load_workload(reference, seed))
    samples = length(workload.train)
    global_batch = int(event.get("global_batch") or int(event["local_batch"]) * workers)
    model = workload.model
    round_ = channel.round()
    channel.initialise(_flat(model), lr=float(workload.lr), momentum=float(workload.momentum))
    iteration, flat = channel.parameters()
    _load_flat(model, flat)
    started = time.monotonic()
    first = iteration
    clock = _Clock(first)
    while iteration < total:
        if clock.first_at is None:
            clock.first_at = time.time()
        began = time.perf_counter()
        stop = context.get_remaining_time_in_millis() < margin_ms
        index, weight = _batch(samples, global_batch, seed, iteration, rank, workers)
        gradient, loss = _gradient(workload, *sample(workload.train, torch.from_numpy(index)))
        _check_step(rank, iteration, gradient, loss)
        computed = time.perf_counter()
        _load_flat(model, channel.exchange(rank, iteration, gradient * weight, loss, stop=stop))
        clock.lap(began, computed, channel.traffic)
        iteration += 1
        if channel.halted and iteration < total:
            channel.checkpoint(iteration)
            clock.record(channel, rank, round_, returned=True)
            return {**reply, "status": "timeout", "iteration": iteration,
                    "trained": iteration - first, "seconds": time.monotonic() - started}
        if rank == 0 and (iteration % every == 0 or iteration == total):
            channel.checkpoint(iteration)
        if iteration % every == 0 and iteration < total:  # read while the round runs
            clock.record(channel, rank, round_)
    clock.record(channel, rank, round_, returned=True)
    reply.update(status="done", iteration=iteration, trained=iteration - first,
                 seconds=time.monotonic() - started)
    if rank == 0 and channel.result() is None:
        metrics = {**_evaluate(workload), "iterations": iteration}
        channel.finish(metrics)
        reply.update(metrics)
    return reply
