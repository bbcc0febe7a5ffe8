"""The worker: one function invocation's share of synchronous SGD, for AWS Lambda and locally alike.

`handler(event, context)` is the Lambda entry point (`launcher.worker.handler`) and what the
local backend runs in each worker process. It trains a small CNN on scikit-learn's digits
(shipped inside the package: nothing to download) on the shard of its rank, and keeps no state of
its own between iterations: batches are a function of (seed, rank, iteration) and the model and
momentum live in the channel, so a relaunched worker continues exactly where the channel is.

torch and scikit-learn are imported here, at module level, so that on Lambda (and in the local
backend) their import is part of the init phase, not of the invocation's timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import redis
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from lambdadnn.launcher.channel import ParameterChannel

__all__ = ["DEFAULT_MOMENTUM", "handler"]

DEFAULT_MOMENTUM = 0.9
_TEST_FRACTION = 0.25


class LambdaContext(Protocol):
    """The one method of AWS Lambda's context object the worker uses."""

    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True)
class _Digits:
    """The digits split: float32 images (N, 1, 8, 8) in [0, 1] and int64 labels."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def _load(seed: int) -> _Digits:
    """A fixed stratified train/test split by seed: every rank sees the same one."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    train_x, test_x, train_y, test_y = train_test_split(
        images, digits.target, test_size=_TEST_FRACTION, random_state=seed,
        stratify=digits.target,
    )
    return _Digits(
        torch.from_numpy(train_x), torch.from_numpy(train_y).long(),
        torch.from_numpy(test_x), torch.from_numpy(test_y).long(),
    )


def _model(seed: int) -> nn.Module:
    """Two conv layers and a linear classifier: ~10k parameters, milliseconds per batch."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
    )


def _flat(model: nn.Module) -> np.ndarray:
    return nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()


def _load_flat(model: nn.Module, flat: np.ndarray) -> None:
    nn.utils.vector_to_parameters(torch.from_numpy(flat), model.parameters())


def _batch(shard: np.ndarray, size: int, seed: int, rank: int, iteration: int) -> np.ndarray:
    """The sample indices of one iteration: a pure function, so a resumed run draws the same."""
    rng = np.random.default_rng((seed, rank, iteration))
    return rng.choice(shard, size=min(size, shard.size), replace=False)


def _gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[np.ndarray, float]:
    model.zero_grad(set_to_none=False)
    loss = nn.functional.cross_entropy(model(x), y)
    torch.autograd.backward(loss)
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    return torch.cat(grads).numpy().copy(), loss.item()


def _evaluate(model: nn.Module, data: _Digits) -> dict[str, float]:
    with torch.no_grad():
        train_loss = nn.functional.cross_entropy(model(data.train_x), data.train_y)
        logits = model(data.test_x)
        test_loss = nn.functional.cross_entropy(logits, data.test_y)
        accuracy = (logits.argmax(dim=1) == data.test_y).float().mean()
    return {
        "final_loss": float(train_loss), "test_loss": float(test_loss),
        "test_accuracy": float(accuracy),
    }


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Train from the channel's live iteration until done or the invocation's deadline nears.

    Event: `rank`, `workers`, `job`, `redis_url`, `iterations` (total), `local_batch`,
    `checkpoint_every` (K), `timeout_margin_s`, `seed`, `lr`; optional `momentum` and
    `barrier_timeout_s`. Returns `{"status": "done" | "timeout", "rank", "iteration", ...}`;
    on "timeout" the launcher invokes every rank again and they resume from the checkpoint.
    """
    torch.set_num_threads(1)
    with redis.Redis.from_url(event["redis_url"]) as client:
        channel = ParameterChannel(
            client, event["job"], workers=int(event["workers"]),
            barrier_timeout_s=float(event.get("barrier_timeout_s", 120.0)),
        )
        return _train(event, context, channel)


def _train(
    event: dict[str, Any], context: LambdaContext, channel: ParameterChannel
) -> dict[str, Any]:
    rank, workers, seed = int(event["rank"]), int(event["workers"]), int(event["seed"])
    total, every = int(event["iterations"]), int(event["checkpoint_every"])
    margin_ms = float(event["timeout_margin_s"]) * 1000
    reply: dict[str, Any] = {"rank": rank, "job": event["job"]}
    data = _load(seed)
    shard = np.random.default_rng(seed).permutation(len(data.train_y))[rank::workers]
    model = _model(seed)
    channel.initialise(
        _flat(model), lr=float(event["lr"]),
        momentum=float(event.get("momentum", DEFAULT_MOMENTUM)),
    )
    iteration, flat = channel.parameters()
    _load_flat(model, flat)
    started = time.monotonic()
    first = iteration
    while iteration < total:
        stop = context.get_remaining_time_in_millis() < margin_ms
        index = torch.from_numpy(
            _batch(shard, int(event["local_batch"]), seed, rank, iteration)
        )
        gradient, loss = _gradient(model, data.train_x[index], data.train_y[index])
        _load_flat(model, channel.exchange(rank, iteration, gradient, loss, stop=stop))
        iteration += 1
        if channel.halted and iteration < total:
            channel.checkpoint(iteration)
            return {**reply, "status": "timeout", "iteration": iteration,
                    "trained": iteration - first, "seconds": time.monotonic() - started}
        if rank == 0 and (iteration % every == 0 or iteration == total):
            channel.checkpoint(iteration)
    reply.update(status="done", iteration=iteration, trained=iteration - first,
                 seconds=time.monotonic() - started)
    if rank == 0 and channel.result() is None:
        metrics = {**_evaluate(model, data), "iterations": iteration}
        channel.finish(metrics)
        reply.update(metrics)
    return reply
