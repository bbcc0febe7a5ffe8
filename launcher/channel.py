"""The parameter channel: BSP gradient averaging, optimizer state and checkpoints in Redis.

λDNN's parameter server is a VM; here it is a Redis server and the workers themselves: the last
worker to push an iteration's gradient averages them and applies the SGD step, so no process
besides redis-server has to stay up. Everything a worker needs to (re)join lives in Redis —
parameters, momentum, iteration — so a worker holds nothing that a crash or a timeout can lose.

Keys (all under `lambdadnn:<job>:`):

| key | type | what |
|---|---|---|
| `state` | hash | the live model: `iteration` (updates applied), `params`, `velocity`, `loss` |
| `checkpoint` | hash | a copy of `state` (iteration, params, velocity) taken at a known iteration |
| `config` | hash | `lr`, `momentum`, `size` (parameters), fixed by the first `initialise` |
| `heartbeats` | hash | rank → wall-clock time of its last push |
| `restarts` | string | how often the launcher relaunched the workers |
| `result` | string | the final metrics (JSON), once training is done |
| `halt` | string | set by the launcher: the group stops after the iteration being averaged |
| `save` | string | set by the launcher: the update being applied is checkpointed, once |
| `timings` | hash | `<round>:<rank>` → what that invocation measured (JSON, see `record_timings`) |
| `it:<i>:grads`, `it:<i>:losses` | hash | rank → gradient (float32 bytes) / loss for iteration i |
| `it:<i>:stop` | string | set when a worker voted to stop after iteration i (deadline near) |
| `it:<i>:ready` | list | one token per waiting worker once iteration i's update is applied |

The per-iteration keys are deleted when the update is applied (the `ready` list empties as the
waiters pop it, and expires in case one of them died).

Recovery: the live state is always consistent (an update is applied by one Lua script, exactly
once), so a worker that (re)starts simply joins at the live iteration. When a whole group is
relaunched after a failure, the launcher first calls `restore()`, which puts the live state
back to the last checkpoint and drops the gradients of the iterations being undone.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import redis
from redis.client import Pipeline

from lambdadnn.launcher import LaunchError
from lambdadnn.solver.inputs import brief

__all__ = [
    "BarrierTimeoutError", "ChannelError", "ParameterChannel", "channel_failed", "redis_client",
]

_CONNECT_TIMEOUT_S = 5.0

_DTYPE = np.float32

# Push a gradient for the live iteration; the reply (the number of ranks in) picks the aggregator.
# Pushing twice from one rank overwrites: a count can never reach `workers` twice by accident.
_PUSH = """
if redis.call('HGET', KEYS[1], 'iteration') ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
if ARGV[5] == '1' then redis.call('SET', KEYS[4], '1') end
redis.call('HSET', KEYS[5], ARGV[2], ARGV[6])
return redis.call('HLEN', KEYS[2])
"""

# Apply an iteration's update exactly once (compare-and-set on the iteration), drop its
# gradients and wake the waiters; each token says whether the group stops after it.
_COMMIT = """
if redis.call('HGET', KEYS[1], 'iteration') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'iteration', ARGV[2], 'params', ARGV[3], 'velocity', ARGV[4],
           'loss', ARGV[5])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
for _ = 1, tonumber(ARGV[7]) do redis.call('RPUSH', KEYS[5], ARGV[6]) end
redis.call('EXPIRE', KEYS[5], ARGV[8])
return 1
"""

# The first caller's parameters win; the checkpoint at iteration 0 makes `restore` total.
_INITIALISE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'iteration', '0', 'params', ARGV[1], 'velocity', ARGV[2])
redis.call('HSET', KEYS[2], 'iteration', '0', 'params', ARGV[1], 'velocity', ARGV[2])
redis.call('HSET', KEYS[3], 'lr', ARGV[3], 'momentum', ARGV[4], 'size', ARGV[5])
return 1
"""


class ChannelError(LaunchError):
    """The channel's state does not allow the call (not initialised, wrong iteration, sizes)."""


class BarrierTimeoutError(ChannelError, TimeoutError):
    """A worker waited longer than the barrier allows for the others to push their gradients."""


def _to_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype=_DTYPE).tobytes()


def _from_bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=_DTYPE).copy()


def _raw(reply: object) -> bytes | None:
    """A reply as bytes: the channel stores binary arrays, which a decoding client would mangle."""
    if reply is None or isinstance(reply, bytes):
        return reply
    raise ChannelError(
        f"the Redis client returned {type(reply).__name__}, not bytes: "
        "create it without decode_responses"
    )


def redis_client(url: str, *, option: str = "redis_url", ping: bool = True) -> redis.Redis:
    """A client for the channel at `url`, checked before any launch step depends on it.

    An unparsable URL, or (with `ping`) one where no Redis answers within a few seconds, is
    one `LaunchError` line naming `option` (the CLI passes `--redis-url`).
    """
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=_CONNECT_TIMEOUT_S)
    except ValueError as error:
        raise LaunchError(
            f"`{option}` {brief(url)} is not a Redis URL ({brief(str(error), 80)}); "
            "give one like redis://HOST:6379/0"
        ) from None
    if ping:
        try:
            client.ping()
        except redis.RedisError as error:
            client.close()
            raise LaunchError(
                f"`{option}` {brief(url)}: no Redis answers there ({brief(str(error), 80)}); "
                "start one or fix the URL"
            ) from None
    return client


def channel_failed(url: str, error: redis.RedisError) -> LaunchError:
    """The one line for a Redis that fails while a launch depends on it."""
    return LaunchError(
        f"the parameter channel at {brief(url)} failed ({brief(str(error), 80)}); check that "
        "Redis stays up during the run"
    )


class ParameterChannel:
    """One training job's parameters and synchronisation, shared by all its workers through Redis.

    `halted` tells, after each `exchange`, whether the group stops after that iteration
    because a worker voted `stop=True` (its invocation's deadline is near) or the launcher
    asked it to (`set_halt`): every worker sees the same answer, so they all return at the
    same iteration and none is left at the barrier.
    """

    def __init__(
        self, client: redis.Redis, job: str, *, workers: int, barrier_timeout_s: float = 120.0
    ) -> None:
        if workers < 1:
            raise ChannelError(f"a channel needs at least one worker, got {workers}")
        self.client = client
        self.job = job
        self.workers = workers
        self.barrier_timeout_s = barrier_timeout_s
        self.halted = False
        self._config_cache: tuple[float, float, int] | None = None
        self.prefix = f"lambdadnn:{job}:"
        self._push = client.register_script(_PUSH)
        self._commit = client.register_script(_COMMIT)
        self._initialise = client.register_script(_INITIALISE)

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _iteration_keys(self, iteration: int) -> list[str]:
        """`grads`, `losses`, `stop`, `ready` of one iteration, in the scripts' order."""
        parts = ("grads", "losses", "stop", "ready")
        return [self._key(f"it:{iteration}:{part}") for part in parts]

    def initialise(self, parameters: np.ndarray, *, lr: float, momentum: float) -> bool:
        """Set the starting parameters and optimizer; True for the first caller, a no-op after."""
        flat = np.asarray(parameters, dtype=_DTYPE).ravel()
        created = self._initialise(
            keys=[self._key("state"), self._key("checkpoint"), self._key("config")],
            args=[_to_bytes(flat), _to_bytes(np.zeros_like(flat)), lr, momentum, flat.size],
        )
        if not created and self._config()[2] != flat.size:
            raise ChannelError(
                f"job {self.job!r} holds {self._config()[2]} parameters, not {flat.size}: "
                "another model already uses this job name"
            )
        return bool(created)

    def _config(self) -> tuple[float, float, int]:
        """`lr`, `momentum`, `size`: fixed once initialised, so read once per channel object."""
        if self._config_cache is None:
            lr, momentum, size = self.client.hmget(self._key("config"), "lr", "momentum", "size")
            self._config_cache = (
                float(self._needed(lr)), float(self._needed(momentum)), int(self._needed(size))
            )
        return self._config_cache

    def _needed(self, reply: object) -> bytes:
        """A reply that must be there: the job exists only once `initialise` has run."""
        value = _raw(reply)
        if value is None:
            raise ChannelError(f"job {self.job!r} is not initialised: call initialise() first")
        return value

    def parameters(self) -> tuple[int, np.ndarray]:
        """The live iteration (updates applied so far) and the parameters after it."""
        iteration, params = self.client.hmget(self._key("state"), "iteration", "params")
        return int(self._needed(iteration)), _from_bytes(self._needed(params))

    def exchange(
        self, rank: int, iteration: int, gradient: np.ndarray, loss: float, *, stop: bool = False
    ) -> np.ndarray:
        """Push this rank's gradient for `iteration`; return the parameters after its update.

        Blocks until every worker has pushed (BSP). `stop=True` votes to end the invocation
        round after this iteration (see `halted`).
        """
        if not 0 <= rank < self.workers:
            raise ChannelError(f"rank {rank} is outside 0..{self.workers - 1}")
        lr, momentum, size = self._config()
        flat = np.asarray(gradient, dtype=_DTYPE).ravel()
        if flat.size != size:
            raise ChannelError(f"rank {rank} pushed {flat.size} gradient values, not {size}")
        state = self._key("state")
        grads, losses, stop_key, _ = self._iteration_keys(iteration)
        arrived = int(self._push(
            keys=[state, grads, losses, stop_key, self._key("heartbeats")],
            args=[iteration, rank, _to_bytes(flat), repr(float(loss)), int(stop), time.time()],
        ))
        if arrived < 0:
            raise ChannelError(
                f"rank {rank} pushed iteration {iteration} but job {self.job!r} is at "
                f"{int(self._needed(self.client.hget(state, 'iteration')))}"
            )
        if arrived == self.workers:
            return self._aggregate(iteration, lr, momentum)
        return self._wait(rank, iteration)

    def _aggregate(self, iteration: int, lr: float, momentum: float) -> np.ndarray:
        """Average the pushed gradients, apply SGD with momentum, publish; we arrived last."""
        state = self._key("state")
        grads_key, losses_key, stop_key, ready = self._iteration_keys(iteration)
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(grads_key)
        pipe.hgetall(losses_key)
        pipe.exists(stop_key, self._key("halt"))
        pipe.hmget(state, "params", "velocity")
        pipe.delete(self._key("save"))
        grads, losses, stop, (params, velocity), save = pipe.execute()
        by_rank = sorted((int(rank), data) for rank, data in grads.items())
        mean = np.mean(np.stack([_from_bytes(data) for _, data in by_rank]), axis=0)
        new_velocity = (momentum * _from_bytes(velocity) + mean).astype(_DTYPE)
        new_params: np.ndarray = (_from_bytes(params) - lr * new_velocity).astype(_DTYPE)
        mean_loss = float(np.mean([float(value) for value in losses.values()]))
        self.halted = bool(stop)
        committed = self._commit(
            keys=[state, grads_key, losses_key, stop_key, ready],
            args=[
                iteration, iteration + 1, _to_bytes(new_params), _to_bytes(new_velocity),
                repr(mean_loss), int(self.halted), self.workers - 1,
                int(self.barrier_timeout_s) + 60,
            ],
        )
        if not committed:
            raise ChannelError(
                f"job {self.job!r} left iteration {iteration} while it was being averaged "
                "(restored by the launcher?)"
            )
        if save:  # no other rank can move the live state on before we push again
            self.checkpoint(iteration + 1)
        return new_params

    def _wait(self, rank: int, iteration: int) -> np.ndarray:
        """Block on the iteration's `ready` list until the aggregator publishes the update."""
        grads, _, _, ready = self._iteration_keys(iteration)
        popped = self.client.blpop([ready], timeout=self.barrier_timeout_s)
        if popped is None:
            arrived = {int(r) for r in self.client.hkeys(grads)}
            missing = sorted(set(range(self.workers)) - arrived)
            raise BarrierTimeoutError(
                f"rank {rank} waited {self.barrier_timeout_s:g} s at the barrier of iteration "
                f"{iteration} of job {self.job!r}; ranks {missing} never pushed their gradient"
            )
        self.halted = popped[1] == b"1"
        live, params = self.client.hmget(self._key("state"), "iteration", "params")
        if int(self._needed(live)) != iteration + 1:
            raise ChannelError(
                f"rank {rank} was woken for iteration {iteration} of job {self.job!r} but the "
                f"channel is at {int(self._needed(live))} (restored by the launcher?)"
            )
        return _from_bytes(self._needed(params))

    def checkpoint(self, iteration: int) -> None:
        """Copy the live parameters, momentum and iteration to the checkpoint, atomically.

        `iteration` is the caller's view of the live iteration: a mismatch means the caller is
        out of step with the group, and saving would label one iteration's state as another's.
        """
        state = self._key("state")

        def copy(pipe: Pipeline) -> None:
            replies = pipe.hmget(state, "iteration", "params", "velocity")
            live, params, velocity = (self._needed(reply) for reply in replies)
            if int(live) != iteration:
                raise ChannelError(
                    f"cannot checkpoint iteration {iteration} of job {self.job!r}: "
                    f"the live state is at {int(live)}"
                )
            pipe.multi()
            pipe.hset(self._key("checkpoint"), mapping={
                "iteration": iteration, "params": params, "velocity": velocity,
            })

        self.client.transaction(copy, state)

    def restore(self) -> int | None:
        """Reset the live state to the checkpoint; return its iteration (None: no checkpoint).

        Gradients pushed for the iterations being undone are dropped, so the next `exchange`
        is exactly the checkpoint's iteration: none is lost, none applied twice.
        """
        state, checkpoint = self._key("state"), self._key("checkpoint")
        restored: list[int] = []

        def reset(pipe: Pipeline) -> None:
            restored.clear()  # a retry after a concurrent change starts over
            replies = pipe.hmget(checkpoint, "iteration", "params", "velocity")
            start, params, velocity = (_raw(reply) for reply in replies)
            if start is None or params is None or velocity is None:
                return
            live = int(_raw(pipe.hget(state, "iteration")) or start)
            stale = [k for i in range(int(start), live + 1) for k in self._iteration_keys(i)]
            pipe.multi()
            pipe.hset(state, mapping={"iteration": start, "params": params, "velocity": velocity})
            pipe.delete(*stale)
            restored.append(int(start))

        self.client.transaction(reset, state, checkpoint)
        return restored[0] if restored else None

    def set_halt(self, on: bool) -> None:
        """Ask the running group to stop after the iteration it is at (`on`), or let the next
        group run (`on=False`). The stop is decided where an update is applied, once for all
        ranks, so they all checkpoint at the same iteration: none is lost or repeated."""
        if on:
            self.client.set(self._key("halt"), "1")
        else:
            self.client.delete(self._key("halt"))

    def request_checkpoint(self) -> None:
        """Have the next update applied checkpointed (by the worker that applies it), so
        that a crash loses no work from before this call."""
        self.client.set(self._key("save"), "1")

    def record_restart(self) -> int:
        """Count one relaunch of the workers; returns the count so far."""
        return int(self.client.incr(self._key("restarts")))

    def progress(self) -> dict[str, Any]:
        """Where the job is: iteration, last mean loss, restarts, done, heartbeat time per rank."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key("state"), "iteration", "loss")
        pipe.get(self._key("restarts"))
        pipe.exists(self._key("result"))
        pipe.hgetall(self._key("heartbeats"))
        (iteration, loss), restarts, done, beats = pipe.execute()
        return {
            "iteration": int(iteration or 0),
            "loss": None if loss is None else float(loss),
            "restarts": int(restarts or 0),
            "done": bool(done),
            "heartbeats": {int(rank): float(t) for rank, t in beats.items()},
        }

    def round(self) -> int:
        """The invocation round a worker starting now belongs to: the relaunches so far."""
        return int(self.client.get(self._key("restarts")) or 0)

    def record_timings(self, rank: int, round_: int, timings: dict[str, Any]) -> None:
        """Keep what one invocation measured (`launcher.timings` reads it back).

        Through the channel rather than the invocation's reply, because an asynchronous
        Lambda invocation has no reply the launcher sees.
        """
        self.client.hset(self._key("timings"), f"{round_}:{rank}", json.dumps(timings))

    def timings(self) -> list[dict[str, Any]]:
        """Every invocation's timings, each with its `round` and `rank`."""
        records = []
        for key, raw in self.client.hgetall(self._key("timings")).items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            round_, _, rank = name.partition(":")
            records.append({**json.loads(raw), "round": int(round_), "rank": int(rank)})
        return records

    def finish(self, metrics: dict[str, Any]) -> None:
        """Publish the final metrics; `progress()['done']` turns true."""
        self.client.set(self._key("result"), json.dumps(metrics))

    def result(self) -> dict[str, Any] | None:
        """The metrics given to `finish`, or None while training goes on."""
        raw = _raw(self.client.get(self._key("result")))
        return None if raw is None else dict(json.loads(raw))

    def cleanup(self) -> int:
        """Delete every key of the job; returns how many there were."""
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix) + "*"
        keys = list(self.client.scan_iter(match=pattern, count=1000))
        return int(self.client.delete(*keys)) if keys else 0
