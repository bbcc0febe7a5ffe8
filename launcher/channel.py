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

Shards: with k parameter-server shards (`shard_clients`, k − 1 more Redis clients), the flat
parameter vector (and momentum, gradients) is split by key range as `numpy.array_split` splits
it (`shard_bounds`), and shard s ≥ 1 holds its slice under `lambdadnn:<job>:shard<s>:`, so
shards may even share one Redis: `state` (`iteration`, `params`, `velocity`), `checkpoint`
(the same, plus `prev_iteration`, `prev_params`, `prev_velocity`: see below),
`it:<i>:grads` and `it:<i>:ready`. Everything that is not per slice (`config`, which then
also records `shards`, heartbeats, losses and stop votes, `halt`, `save`, `result`,
`timings`, `restarts`) stays on shard 0, which holds slice 0 under the keys above: with
k = 1 nothing changes. A worker pushes its k slices and pulls its k slices at once (one
thread per shard beyond the first); each shard counts the pushes of its slice and the last
rank to push it averages and applies that slice, with the same arithmetic as one shard
(element-wise, so the parameters are bit-identical whatever k). Every shard goes from
iteration i to i + 1 only once all n ranks pushed i to it, and a rank returns from
`exchange` only when every shard has applied i, so no shard can move past i + 1 before every
rank pulled i + 1 everywhere: the shards never drift apart by more than the iteration being
exchanged. The group's stop decision (votes, `halt`) is taken where shard 0's slice is
applied and reaches every rank through shard 0.

A checkpoint at iteration j writes shards 1..k−1 first, each keeping its previous checkpoint
as `prev_*`, and shard 0 last: shard 0's checkpoint iteration is the one that counts, and
every other shard holds it either as its checkpoint or as its `prev_*`, even when a worker
died half-way. `restore` puts every shard back to shard 0's checkpoint iteration (and drops
the `prev_*`), so all shards resume from the same iteration.

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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from redis.client import Pipeline

from ..inputs.files import brief
from . import LaunchError

__all__ = [
    "DEFAULT_KEY_TTL_S", "REDIS_URLS_ENV", "BarrierTimeoutError", "ChannelError",
    "ParameterChannel", "ShardTraffic", "UnrecoverableError", "channel_failed", "finite",
    "redis_client", "redis_refusal", "shard_bounds",
]

_CONNECT_TIMEOUT_S = 5.0
# The shards' Redis URLs, comma-separated, for a worker whose event lists none
# (`worker.shard_urls`): how a function deployed once learns where every shard is.
REDIS_URLS_ENV = "LAMBDADNN_REDIS_URLS"
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
# Shard 0 of a sharded job records the shard count too: a launch with another count is refused.
_INITIALISE_SHARDED = _INITIALISE.replace("'size', ARGV[5])", "'size', ARGV[5], 'shards', ARGV[7])")

# Shards 1..k-1: the same steps on a slice; what is not per slice lives on shard 0.
_PUSH_SLICE = """
if redis.call('HGET', KEYS[1], 'iteration') ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return redis.call('HLEN', KEYS[2])
"""

_COMMIT_SLICE = """
if redis.call('HGET', KEYS[1], 'iteration') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'iteration', ARGV[2], 'params', ARGV[3], 'velocity', ARGV[4])
redis.call('DEL', KEYS[2])
for _ = 1, tonumber(ARGV[5]) do redis.call('RPUSH', KEYS[3], '0') end
redis.call('EXPIRE', KEYS[3], ARGV[6])
return 1
"""

_INITIALISE_SLICE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'iteration', '0', 'params', ARGV[1], 'velocity', ARGV[2])
redis.call('HSET', KEYS[2], 'iteration', '0', 'params', ARGV[1], 'velocity', ARGV[2])
for i = 1, 2 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return 1
"""

# Copy a slice's live state to its checkpoint, on the server (no traffic), keeping the
# checkpoint it replaces as `prev_*` until shard 0's checkpoint (written last) moves on too.
_CHECKPOINT_SLICE = """
local live = redis.call('HGET', KEYS[1], 'iteration')
if live ~= ARGV[1] then return live or 'none' end
local current = redis.call('HGET', KEYS[2], 'iteration')
if current and current ~= ARGV[1] then
  local old = redis.call('HMGET', KEYS[2], 'params', 'velocity')
  redis.call('HSET', KEYS[2], 'prev_iteration', current, 'prev_params', old[1],
             'prev_velocity', old[2])
end
local state = redis.call('HMGET', KEYS[1], 'params', 'velocity')
redis.call('HSET', KEYS[2], 'iteration', ARGV[1], 'params', state[1], 'velocity', state[2])
for i = 1, 2 do redis.call('EXPIRE', KEYS[i], ARGV[2]) end
return 'ok'
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


def _shown(reply: object) -> str:
    """A short reply (an iteration, or none) as a message shows it."""
    if reply is None:
        return "none"
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


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


def shard_bounds(size: int, shards: int) -> list[int]:
    """The k + 1 boundaries of `numpy.array_split(range(size), shards)`: shard s holds
    [bounds[s], bounds[s + 1]); the first `size % shards` slices are one value longer."""
    if shards < 1:
        raise ChannelError(f"a channel needs at least one shard, got {shards}")
    whole, longer = divmod(size, shards)
    return [s * whole + min(s, longer) for s in range(shards + 1)]


@dataclass(frozen=True)
class ShardTraffic:
    """What one `exchange` moved with one shard, as the worker measured it: the seconds from
    its push to having its slice of the new parameters (the barrier's wait included), and
    the array bytes written to and read from that shard (a rank that applies the update
    also reads every rank's gradient and writes the new parameters and momentum)."""

    seconds: float
    pushed_bytes: int
    pulled_bytes: int


class ParameterChannel:
    """One training job's parameters and synchronisation, shared by all its workers through Redis.

    `halted` tells, after each `exchange`, whether the group stops after that iteration
    because a worker voted `stop=True` (its invocation's deadline is near) or the launcher
    asked it to (`set_halt`): every worker sees the same answer, so they all return at the
    same iteration and none is left at the barrier. `key_ttl_s`: see "Expiry" above.
    `shard_clients`: the Redis of shards 1..k−1 (see "Shards" above; none: one shard, on
    `client`); every rank and the launcher must give the same count. `traffic` holds the
    last `exchange`'s `ShardTraffic` of each shard.
    """

    def __init__(
        self, client: redis.Redis, job: str, *, workers: int, barrier_timeout_s: float = 120.0,
        key_ttl_s: int = DEFAULT_KEY_TTL_S, shard_clients: Sequence[redis.Redis] = (),
    ) -> None:
        if workers < 1:
            raise ChannelError(f"a channel needs at least one worker, got {workers}")
        if key_ttl_s < 1:
            raise ChannelError(f"`key_ttl_s` must be a whole number of seconds ≥ 1, got "
                               f"{key_ttl_s}")
        self.client = client
        self.clients: tuple[redis.Redis, ...] = (client, *shard_clients)
        self.shards = len(self.clients)
        self.job = job
        self.workers = workers
        self.barrier_timeout_s = barrier_timeout_s
        self.key_ttl_s = key_ttl_s
        self.halted = False
        self.traffic: list[ShardTraffic] = []
        self._config_cache: tuple[float, float, int] | None = None
        self.prefix = f"lambdadnn:{job}:"
        self._prefixes = [self.prefix, *(f"{self.prefix}shard{s}:"
                                         for s in range(1, self.shards))]
        self._push = client.register_script(_PUSH)
        self._commit = client.register_script(_COMMIT)
        self._initialise = client.register_script(
            _INITIALISE if self.shards == 1 else _INITIALISE_SHARDED)
        self._slice_scripts = [
            {name: other.register_script(text) for name, text in (
                ("push", _PUSH_SLICE), ("commit", _COMMIT_SLICE),
                ("initialise", _INITIALISE_SLICE), ("checkpoint", _CHECKPOINT_SLICE))}
            for other in self.clients]
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Let the shard threads go (a sharded channel's); the clients are the caller's."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _parallel(self) -> ThreadPoolExecutor:
        """The threads that exchange with shards 1..k−1 while the caller's does shard 0."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.shards - 1, thread_name_prefix="shard")
        return self._pool

    def _key(self, name: str, shard: int = 0) -> str:
        return self._prefixes[shard] + name

    def _of(self, shard: int) -> str:
        """How a message names a shard: nothing when there is one."""
        return "" if self.shards == 1 else f" (shard {shard} of {self.shards})"

    def _expire(self, pipe: Pipeline) -> None:
        """Queue the push-back of every job key's expiry to `key_ttl_s` from now."""
        for name in _JOB_KEYS:
            pipe.expire(self._key(name), self.key_ttl_s)

    def _expire_slices(self) -> None:
        """Push back the expiry of shards 1..k−1's keys (shard 0's: `_expire`)."""
        for shard in range(1, self.shards):
            pipe = self.clients[shard].pipeline(transaction=False)
            for name in ("state", "checkpoint"):
                pipe.expire(self._key(name, shard), self.key_ttl_s)
            pipe.execute()

    def _bounds(self) -> list[int]:
        return shard_bounds(self._config()[2], self.shards)

    def _array(self, reply: object, what: str, cause: str, shard: int = 0) -> np.ndarray:
        """A float32 array read from Redis, refused unless it has the size of the model (of
        `shard`'s slice of it) and is finite (`UnrecoverableError`, naming `what`)."""
        data = self._needed(reply)
        bounds = self._bounds()
        size = bounds[shard + 1] - bounds[shard]
        if len(data) != size * np.dtype(_DTYPE).itemsize:
            whose = "the model" if self.shards == 1 else f"shard {shard}'s slice of the model"
            raise UnrecoverableError(
                f"{what} holds {len(data):,} bytes, not the {size:,} float32 values of "
                f"{whose}: {cause}"
            )
        return finite(_from_bytes(data), what, cause)

    def _tampered(self, name: str, field: str, shard: int = 0) -> tuple[str, str]:
        """`what` and `cause` for `_array` of a model-state field (`state` `params`, …)."""
        return (f"`{self._key(name, shard)}` `{field}` in Redis",
                "it was not written by this run's workers (keep the Redis private: a password, "
                "a private network) or training diverged; the run cannot go on from it")

    def _iteration_keys(self, iteration: int, shard: int = 0) -> list[str]:
        """`grads`, `losses`, `stop`, `ready` of one iteration, in the scripts' order."""
        parts = ("grads", "losses", "stop", "ready")
        return [self._key(f"it:{iteration}:{part}", shard) for part in parts]

    def initialise(self, parameters: np.ndarray, *, lr: float, momentum: float) -> bool:
        """Set the starting parameters and optimizer; True for the first caller, a no-op after.

        With shards, each shard's first caller sets its slice; the ranks of a job build the
        same parameters (one workload, one seed), so that is one vector.
        """
        flat = np.asarray(parameters, dtype=_DTYPE).ravel()
        bounds = shard_bounds(flat.size, self.shards)
        first = flat[bounds[0]:bounds[1]]
        created = self._initialise(
            keys=[self._key("state"), self._key("checkpoint"), self._key("config")],
            args=[_to_bytes(first), _to_bytes(np.zeros_like(first)), lr, momentum, flat.size,
                  self.key_ttl_s, *([self.shards] if self.shards > 1 else [])],
        )
        if not created and self._config()[2] != flat.size:
            raise UnrecoverableError(
                f"job {self.job!r} holds {self._config()[2]} parameters, not {flat.size}: "
                "another model already uses this job name"
            )
        for shard in range(1, self.shards):
            part = flat[bounds[shard]:bounds[shard + 1]]
            self._slice_scripts[shard]["initialise"](
                keys=[self._key("state", shard), self._key("checkpoint", shard)],
                args=[_to_bytes(part), _to_bytes(np.zeros_like(part)), self.key_ttl_s],
            )
        if not created:  # a worker (re)joining: the job lives on
            pipe = self.client.pipeline(transaction=False)
            self._expire(pipe)
            pipe.execute()
            self._expire_slices()
        return bool(created)

    def _config(self) -> tuple[float, float, int]:
        """`lr`, `momentum`, `size`: fixed once initialised, so read once per channel object.
        A job started with another number of shards is refused (`UnrecoverableError`)."""
        if self._config_cache is None:
            lr, momentum, size, shards = self.client.hmget(
                self._key("config"), "lr", "momentum", "size", "shards")
            config = (
                float(self._needed(lr)), float(self._needed(momentum)), int(self._needed(size))
            )
            self._check_shards(shards)
            self._config_cache = config
        return self._config_cache

    def _check_shards(self, stored: object) -> None:
        """Refuse a job whose `config` records another shard count than this channel's."""
        value = _raw(stored)
        started = 1 if value is None else int(value)
        if started != self.shards:
            raise UnrecoverableError(
                f"job {self.job!r} was started with {started} parameter-server shard"
                f"{'s' if started > 1 else ''}, not {self.shards}: its parameters are split "
                f"that way in Redis; resume it with `shards` {started}"
            )

    def _needed(self, reply: object) -> bytes:
        """A reply that must be there: the job exists only once `initialise` has run."""
        value = _raw(reply)
        if value is None:
            raise ChannelError(f"job {self.job!r} is not initialised: call initialise() first")
        return value

    def parameters(self) -> tuple[int, np.ndarray]:
        """The live iteration (updates applied so far) and the parameters after it."""
        iteration, params = self.client.hmget(self._key("state"), "iteration", "params")
        if self.shards == 1:
            return (int(self._needed(iteration)),
                    self._array(params, *self._tampered("state", "params")))
        live, parts = [iteration], [params]
        for shard in range(1, self.shards):
            at, part = self.clients[shard].hmget(self._key("state", shard), "iteration", "params")
            live.append(at)
            parts.append(part)
        iterations = [int(self._needed(at)) for at in live]
        if len(set(iterations)) > 1:
            raise ChannelError(
                f"the shards of job {self.job!r} are at iterations {iterations}: a group is "
                "still exchanging, or a restore was cut short (`restore` aligns them)"
            )
        return iterations[0], np.concatenate([
            self._array(part, *self._tampered("state", "params", shard), shard)
            for shard, part in enumerate(parts)])

    def exchange(
        self, rank: int, iteration: int, gradient: np.ndarray, loss: float, *, stop: bool = False
    ) -> np.ndarray:
        """Push this rank's gradient for `iteration`; return the parameters after its update.

        Blocks until every worker has pushed (BSP), on every shard. `stop=True` votes to end
        the invocation round after this iteration (see `halted`).
        """
        if not 0 <= rank < self.workers:
            raise ChannelError(f"rank {rank} is outside 0..{self.workers - 1}")
        _, _, size = self._config()
        flat = np.asarray(gradient, dtype=_DTYPE).ravel()
        if flat.size != size:
            raise ChannelError(f"rank {rank} pushed {flat.size} gradient values, not {size}")
        self.traffic = [ShardTraffic(0.0, 0, 0)] * self.shards
        if self.shards == 1:
            params, save = self._exchange_shard(0, rank, iteration, flat, loss, stop)
        else:
            bounds = self._bounds()
            others = [self._parallel().submit(self._exchange_shard, shard, rank, iteration,
                                              flat[bounds[shard]:bounds[shard + 1]], loss, stop)
                      for shard in range(1, self.shards)]
            first, save = self._exchange_shard(0, rank, iteration, flat[:bounds[1]], loss, stop)
            params = np.concatenate([first, *(other.result()[0] for other in others)])
        if save:  # every shard is at iteration + 1, and none moves on before we push again
            self.checkpoint(iteration + 1)
        return params

    def _exchange_shard(
        self, shard: int, rank: int, iteration: int, gradient: np.ndarray, loss: float,
        stop: bool,
    ) -> tuple[np.ndarray, bool]:
        """Push `shard`'s slice of the gradient, then apply the slice's update (last rank in)
        or wait for it; the slice of the new parameters, and whether a checkpoint was asked
        for (shard 0 only). Notes its `ShardTraffic`."""
        began = time.perf_counter()
        lr, momentum, _ = self._config()
        state = self._key("state", shard)
        grads, losses, stop_key, _ = self._iteration_keys(iteration, shard)
        data = _to_bytes(gradient)
        if shard == 0:
            arrived = int(self._push(
                keys=[state, grads, losses, stop_key, self._key("heartbeats")],
                args=[iteration, rank, data, repr(float(loss)), int(stop), time.time(),
                      self.key_ttl_s],
            ))
        else:
            arrived = int(self._slice_scripts[shard]["push"](
                keys=[state, grads], args=[iteration, rank, data, self.key_ttl_s]))
        if arrived < 0:
            live = self._needed(self.clients[shard].hget(state, "iteration"))
            raise ChannelError(
                f"rank {rank} pushed iteration {iteration} but job {self.job!r} is at "
                f"{int(live)}{self._of(shard)}"
            )
        if arrived == self.workers:
            params, save, pulled, pushed = self._aggregate(shard, iteration, lr, momentum)
        else:
            params, save = self._wait(shard, rank, iteration), False
            pulled, pushed = params.nbytes, 0
        self.traffic[shard] = ShardTraffic(time.perf_counter() - began, len(data) + pushed,
                                           pulled)
        return params, save

    def _step(
        self, shard: int, iteration: int, grads_key: str, grads: dict[bytes, bytes],
        params: object, velocity: object, lr: float, momentum: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """SGD with momentum on the mean of the pushed gradients (in rank order), element-wise:
        a slice's update is the same slice of the whole vector's update, bit for bit."""
        by_rank = sorted((int(rank), data) for rank, data in grads.items())
        pushed = [self._array(data, f"rank {rank}'s gradient of iteration {iteration} "
                                    f"(`{grads_key}`)",
                              "training diverged, or something other than the workers wrote it",
                              shard)
                  for rank, data in by_rank]
        mean = np.mean(np.stack(pushed), axis=0)
        old_velocity = self._array(velocity, *self._tampered("state", "velocity", shard), shard)
        new_velocity = (momentum * old_velocity + mean).astype(_DTYPE)
        old_params = self._array(params, *self._tampered("state", "params", shard), shard)
        new_params: np.ndarray = (old_params - lr * new_velocity).astype(_DTYPE)
        return new_params, new_velocity

    def _aggregate(
        self, shard: int, iteration: int, lr: float, momentum: float
    ) -> tuple[np.ndarray, bool, int, int]:
        """Average the pushed gradients, apply SGD with momentum, publish; we arrived last.
        The new parameters, whether a checkpoint was asked for, and the bytes read and
        written."""
        client = self.clients[shard]
        state = self._key("state", shard)
        grads_key, losses_key, stop_key, ready = self._iteration_keys(iteration, shard)
        pipe = client.pipeline(transaction=True)
        pipe.hgetall(grads_key)
        if shard == 0:
            pipe.hgetall(losses_key)
            pipe.exists(stop_key, self._key("halt"))
            pipe.hmget(state, "params", "velocity")
            pipe.delete(self._key("save"))
            grads, losses, stop, (params, velocity), save = pipe.execute()
        else:
            pipe.hmget(state, "params", "velocity")
            grads, (params, velocity) = pipe.execute()
        pulled = sum(len(data) for data in grads.values()) + len(params or b"") + len(
            velocity or b"")
        new_params, new_velocity = self._step(shard, iteration, grads_key, grads, params,
                                              velocity, lr, momentum)
        timeout = int(self.barrier_timeout_s) + 60
        if shard == 0:
            mean_loss = float(np.mean([float(value) for value in losses.values()]))
            self.halted = bool(stop)
            committed = self._commit(
                keys=[state, grads_key, losses_key, stop_key, ready],
                args=[
                    iteration, iteration + 1, _to_bytes(new_params), _to_bytes(new_velocity),
                    repr(mean_loss), int(self.halted), self.workers - 1, timeout,
                ],
            )
        else:
            save = 0
            committed = self._slice_scripts[shard]["commit"](
                keys=[state, grads_key, ready],
                args=[iteration, iteration + 1, _to_bytes(new_params), _to_bytes(new_velocity),
                      self.workers - 1, timeout],
            )
        if not committed:
            raise ChannelError(
                f"job {self.job!r} left iteration {iteration} while it was being averaged "
                f"(restored by the launcher?){self._of(shard)}"
            )
        return new_params, bool(save), pulled, new_params.nbytes + new_velocity.nbytes

    def _wait(self, shard: int, rank: int, iteration: int) -> np.ndarray:
        """Block on the iteration's `ready` list until the aggregator publishes the update."""
        client = self.clients[shard]
        grads, _, _, ready = self._iteration_keys(iteration, shard)
        popped = client.blpop([ready], timeout=self.barrier_timeout_s)
        if popped is None:
            arrived = {int(r) for r in client.hkeys(grads)}
            missing = sorted(set(range(self.workers)) - arrived)
            raise BarrierTimeoutError(
                f"rank {rank} waited {self.barrier_timeout_s:g} s at the barrier of iteration "
                f"{iteration} of job {self.job!r}{self._of(shard)}; ranks {missing} never "
                "pushed their gradient"
            )
        if shard == 0:
            self.halted = popped[1] == b"1"
        live, params = client.hmget(self._key("state", shard), "iteration", "params")
        if int(self._needed(live)) != iteration + 1:
            raise ChannelError(
                f"rank {rank} was woken for iteration {iteration} of job {self.job!r} but the "
                f"channel is at {int(self._needed(live))}{self._of(shard)} (restored by the "
                "launcher?)"
            )
        return self._array(params, *self._tampered("state", "params", shard), shard)

    def checkpoint(self, iteration: int) -> None:
        """Copy the live parameters, momentum and iteration to the checkpoint, atomically.

        `iteration` is the caller's view of the live iteration: a mismatch means the caller is
        out of step with the group, and saving would label one iteration's state as another's.
        It pushes the expiry of all the job's keys back (see "Expiry" above). With shards,
        shards 1..k−1 first and shard 0 last (see "Shards" above).
        """
        for shard in range(1, self.shards):
            reply = self._slice_scripts[shard]["checkpoint"](
                keys=[self._key("state", shard), self._key("checkpoint", shard)],
                args=[iteration, self.key_ttl_s],
            )
            if reply != b"ok":
                raise ChannelError(
                    f"cannot checkpoint iteration {iteration} of job {self.job!r}: "
                    f"the live state is at {_shown(reply)}{self._of(shard)}"
                )
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
        is exactly the checkpoint's iteration: none is lost, none applied twice. With shards,
        every shard goes back to shard 0's checkpoint iteration (`ChannelError` if one holds
        no checkpoint of it); a job started with another shard count is refused.
        """
        state, checkpoint = self._key("state"), self._key("checkpoint")
        if self.shards > 1 or self.client.hexists(self._key("config"), "shards"):
            start = _raw(self.client.hget(checkpoint, "iteration"))
            if start is None:
                return None
            self._check_shards(self.client.hget(self._key("config"), "shards"))
            for shard in range(1, self.shards):
                self._restore_slice(shard, int(start))
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

    def _restore_slice(self, shard: int, start: int) -> None:
        """Put shard `shard` (≥ 1) back to its checkpoint of iteration `start`, which it
        holds as its checkpoint or its `prev_*`, and make that its only checkpoint."""
        client = self.clients[shard]
        state, checkpoint = self._key("state", shard), self._key("checkpoint", shard)

        def reset(pipe: Pipeline) -> None:
            current = [_raw(r) for r in pipe.hmget(checkpoint, "iteration", "params", "velocity")]
            previous = [_raw(r) for r in pipe.hmget(checkpoint, "prev_iteration", "prev_params",
                                                    "prev_velocity")]
            found = next((held for held in (current, previous)
                          if held[0] is not None and int(held[0]) == start), None)
            params = None if found is None else found[1]
            velocity = None if found is None else found[2]
            if params is None or velocity is None:
                raise ChannelError(
                    f"job {self.job!r} cannot be restored to iteration {start}: shard {shard} "
                    f"holds no checkpoint of it (its checkpoints: {_shown(current[0])}, "
                    f"{_shown(previous[0])}); its keys expired or were changed by something "
                    "other than the run"
                )
            live = int(_raw(pipe.hget(state, "iteration")) or start)
            stale = [k for i in range(start, live + 1) for k in self._iteration_keys(i, shard)]
            pipe.multi()
            pipe.hset(state, mapping={"iteration": start, "params": params, "velocity": velocity})
            pipe.delete(checkpoint, *stale)
            pipe.hset(checkpoint, mapping={"iteration": start, "params": params,
                                           "velocity": velocity})
            for key in (state, checkpoint):
                pipe.expire(key, self.key_ttl_s)

        client.transaction(reset, state, checkpoint)

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
        """Delete every key of the job, on every shard; returns how many there were."""
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.prefix) + "*"
        deleted = 0
        for client in self.clients:
            keys = list(client.scan_iter(match=pattern, count=1000))
            deleted += int(client.delete(*keys)) if keys else 0
        return deleted
