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

Expiry: every key expires `key_ttl_s` after it was last written, and each checkpoint (and each
worker joining, each restore) pushes the expiry of all the job's keys back by as much. So a job
whose launcher died (kill -9) leaves nothing in Redis for good, yet stays resumable (`resume`)
for `key_ttl_s` after its last checkpoint: the launch sets it to the plan's deadline plus a day
(`LaunchSpec.key_ttl_s`).

Trust: whatever is read back from Redis is checked before it is trained from. Parameters,
momentum and gradients must be the model's size and finite; a NaN or an infinity there (written
by something other than the workers, or a diverged step) is an `UnrecoverableError`, which ends
the run as failed: a relaunch from the checkpoint would read it again, or train on garbage.

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

from ..inputs.files import brief
from . import LaunchError

__all__ = [
    "DEFAULT_KEY_TTL_S", "BarrierTimeoutError", "ChannelError", "ParameterChannel",
    "UnrecoverableError", "channel_failed", "finite", "redis_client", "redis_refusal",
]

_CONNECT_TIMEOUT_S = 5.0
DEFAULT_KEY_TTL_S = 2 * 86_400  # a channel's keys outlive their last write by two days
# The job's keys that live as long as it does (the per-iteration ones come and go).
_JOB_KEYS = ("state", "checkpoint", "config", "heartbeats", "restarts", "result", "halt", "save",
             "timings")

_DTYPE = np.float32

# Push a gradient for the live iteration; the reply (the number of ranks in) picks the aggregator.
# Pushing twice from one rank overwrites: a count can never reach `workers` twice by accident.
_PUSH = """
if redis.call('HGET', KEYS[1], 'iteration') ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
if ARGV[5] == '1' then redis.call('SET', KEYS[4], '1', 'EX', ARGV[7]) end
redis.call('HSET', KEYS[5], ARGV[2], ARGV[6])
for i = 2, 5 do redis.call('EXPIRE', KEYS[i], ARGV[7]) end
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
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[6]) end
return 1
"""


class ChannelError(LaunchError):
    """The channel's state does not allow the call (not initialised, wrong iteration, sizes)."""


class BarrierTimeoutError(ChannelError, TimeoutError):
    """A worker waited longer than the barrier allows for the others to push their gradients."""


class UnrecoverableError(ChannelError):
    """What the run would train from is broken (non-finite values, another model's
    parameters): a relaunch from the checkpoint would meet it again, so the launcher ends the
    run as failed at once instead of relaunching."""


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


def finite(values: np.ndarray, what: str, cause: str) -> np.ndarray:
    """`values` if they are all finite, else an `UnrecoverableError` naming `what` and why."""
    bad = int(values.size - np.count_nonzero(np.isfinite(values)))
    if bad:
        raise UnrecoverableError(
            f"{what} holds {bad:,} non-finite value{'s' if bad > 1 else ''} (NaN or ±inf) of "
            f"{values.size:,}: {cause}"
        )
    return values


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


def redis_refusal(error: redis.RedisError) -> str:
    """A Redis error in one line: an OOM says so, never the refused command and its bytes."""
    if isinstance(error, redis.OutOfMemoryError):
        return "redis refused a write: OOM, its used memory is over its `maxmemory`"
    return brief(str(error), 80)


def channel_failed(url: str, error: redis.RedisError) -> LaunchError:
    """The one line for a Redis that fails while a launch depends on it."""
    fix = ("raise its `maxmemory` or free memory" if isinstance(error, redis.OutOfMemoryError)
           else "check that Redis stays up during the run")
    return LaunchError(
        f"the parameter channel at {brief(url)} failed ({redis_refusal(error)}); {fix}"
    )


class ParameterChannel:
    """One training job's parameters and synchronisation, shared by all its workers through Redis.

    `halted` tells, after each `exchange`, whether the group stops after that iteration
    because a worker voted `stop=True` (its invocation's deadline is near) or the launcher
    asked it to (`set_halt`): every worker sees the same answer, so they all return at the
    same iteration and none is left at the barrier. `key_ttl_s`: see "Expiry" above.
    """

    def __init__(
        self, client: redis.Redis, job: str, *, workers: int, barrier_timeout_s: float = 120.0,
        key_ttl_s: int = DEFAULT_KEY_TTL_S,
    ) -> None:
        if workers < 1:
            raise ChannelError(f"a channel needs at least one worker, got {workers}")
        if key_ttl_s < 1:
            raise ChannelError(f"`key_ttl_s` must be a whole number of seconds ≥ 1, got "
                               f"{key_ttl_s}")
        self.client = client
        self.job = job
        self.workers = workers
        self.barrier_timeout_s = barrier_timeout_s
        self.key_ttl_s = key_ttl_s
        self.halted = False
        self._config_cache: tuple[float, float, int] | None = None
        self.prefix = f"lambdadnn:{job}:"
        self._push = client.register_script(_PUSH)
        self._commit = client.register_script(_COMMIT)
        self._initialise = client.register_script(_INITIALISE)

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _expire(self, pipe: Pipeline) -> None:
        """Queue the push-back of every job key's expiry to `key_ttl_s` from now."""
        for name in _JOB_KEYS:
            pipe.expire(self._key(name), self.key_ttl_s)

    def _array(self, reply: object, what: str, cause: str) -> np.ndarray:
        """A float32 array read from Redis, refused unless it has the model's size and is
        finite (`UnrecoverableError`, naming `what`)."""
        data = self._needed(reply)
        size = self._config()[2]
        if len(data) != size * np.dtype(_DTYPE).itemsize:
            raise UnrecoverableError(
                f"{what} holds {len(data):,} bytes, not the {size:,} float32 values of the "
                f"model: {cause}"
            )
        return finite(_from_bytes(data), what, cause)

    def _tampered(self, name: str, field: str) -> tuple[str, str]:
        """`what` and `cause` for `_array` of a model-state field (`state` `params`, …)."""
        return (f"`{self._key(name)}` `{field}` in Redis",
                "it was not written by this run's workers (keep the Redis private: a password, "
                "a private network) or training diverged; the run cannot go on from it")

    def _iteration_keys(self, iteration: int) -> list[str]:
        """`grads`, `losses`, `stop`, `ready` of one iteration, in the scripts' order."""
        parts = ("grads", "losses", "stop", "ready")
        return [self._key(f"it:{iteration}:{part}") for part in parts]

    def initialise(self, parameters: np.ndarray, *, lr: float, momentum: float) -> bool:
        """Set the starting parameters and optimizer; True for the first caller, a no-op after."""
        flat = np.asarray(parameters, dtype=_DTYPE).ravel()
        created = self._initialise(
            keys=[self._key("state"), self._key("checkpoint"), self._key("config")],
            args=[_to_bytes(flat), _to_bytes(np.zeros_like(flat)), lr, momentum, flat.size,
                  self.key_ttl_s],
        )
        if not created and self._config()[2] != flat.size:
            raise UnrecoverableError(
                f"job {self.job!r} holds {self._config()[2]} parameters, not {flat.size}: "
                "another model already uses this job name"
            )
        if not created:  # a worker (re)joining: the job lives on
            pipe = self.client.pipeline(transaction=False)
            self._expire(pipe)
            pipe.execute()
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
        return int(self._needed(iteration)), self._array(params, *self._tampered("state", "params"))

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
            args=[iteration, rank, _to_bytes(flat), repr(float(loss)), int(stop), time.time(),
                  self.key_ttl_s],
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
        pushed = [self._array(data, f"rank {rank}'s gradient of iteration {iteration} "
                                    f"(`{grads_key}`)",
                              "training diverged, or something other than the workers wrote it")
                  for rank, data in by_rank]
        mean = np.mean(np.stack(pushed), axis=0)
        old_velocity = self._array(velocity, *self._tampered("state", "velocity"))
        new_velocity = (momentum * old_velocity + mean).astype(_DTYPE)
        old_params = self._array(params, *self._tampered("state", "params"))
        new_params: np.ndarray = (old_params - lr * new_velocity).astype(_DTYPE)
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
        return self._array(params, *self._tampered("state", "params"))

    def checkpoint(self, iteration: int) -> None:
        """Copy the live parameters, momentum and iteration to the checkpoint, atomically.

        `iteration` is the caller's view of the live iteration: a mismatch means the caller is
        out of step with the group, and saving would label one iteration's state as another's.
        It pushes the expiry of all the job's keys back (see "Expiry" above).
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
            self._expire(pipe)

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
            self._expire(pipe)
            restored.append(int(start))

        self.client.transaction(reset, state, checkpoint)
        return restored[0] if restored else None

    def resume(self) -> int:
        """Make a stopped job's channel ready for a new launch; returns its checkpoint's
        iteration, where the new launch's workers start.

        `restore`, then drop what belonged to the launch that stopped (its relaunch count,
        timings, heartbeats, halt and checkpoint requests, a result), so the new launch counts
        its rounds from 0. A job with no checkpoint here (never launched on this Redis, or
        finished, or expired) is a `ChannelError`.
        """
        start = self.restore()
        if start is None:
            raise ChannelError(
                f"job {self.job!r} has no checkpoint in this Redis: it never ran here, finished "
                f"(its keys are deleted then), or its keys expired ({self.key_ttl_s:,} s after "
                "its last checkpoint)"
            )
        self.client.delete(*(self._key(name) for name in (
            "restarts", "timings", "heartbeats", "halt", "save", "result")))
        return start

    def set_halt(self, on: bool) -> None:
        """Ask the running group to stop after the iteration it is at (`on`), or let the next
        group run (`on=False`). The stop is decided where an update is applied, once for all
        ranks, so they all checkpoint at the same iteration: none is lost or repeated."""
        if on:
            self.client.set(self._key("halt"), "1", ex=self.key_ttl_s)
        else:
            self.client.delete(self._key("halt"))

    def request_checkpoint(self) -> None:
        """Have the next update applied checkpointed (by the worker that applies it), so
        that a crash loses no work from before this call."""
        self.client.set(self._key("save"), "1", ex=self.key_ttl_s)

    def record_restart(self) -> int:
        """Count one relaunch of the workers; returns the count so far."""
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(self._key("restarts"))
        pipe.expire(self._key("restarts"), self.key_ttl_s)
        return int(pipe.execute()[0])

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
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self._key("timings"), f"{round_}:{rank}", json.dumps(timings))
        pipe.expire(self._key("timings"), self.key_ttl_s)
        pipe.execute()

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
        self.client.set(self._key("result"), json.dumps(metrics), ex=self.key_ttl_s)

    def result(self) -> dict[str, Any] | None:
        """The metrics given to `finish`, or None while training goes on."""
        raw = _raw(self.client.get(self._key("result")))
        return None if raw is None else dict(json.loads(raw))

    def cleanup(self) -> int:
        """Delete every key of the job; returns how many there were."""
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix) + "*"
        keys = list(self.client.scan_iter(match=pattern, count=1000))
        return int(self.client.delete(*keys)) if keys else 0
