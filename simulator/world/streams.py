"""Common random numbers: every draw a pure function of (key, stream, lane, index).

Each (key, stream, lane) is a SplitMix64 sequence (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014) whose index-th output is computed directly, so a
draw never depends on which other draws were made before it: worker i's straggler draw at
iteration t is the same whatever the plan's functions or memory, and a whole block of
iterations × workers is drawn in a few vectorised numpy operations, without a generator per
worker.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import numpy.typing as npt

from .errors import WorldError, shown

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Key = tuple[int, ...]

# The streams: one per random quantity, so turning one effect on never moves another's draws.
STRAGGLE = 1  # per (worker, iteration): the mean-1 lognormal variation
TAIL = 2  # per (worker, iteration): whether the heavy tail strikes, and its Pareto size
PERSISTENT = 3  # per (worker, round): whether the function landed on a slow host
COLD = 4  # per (worker, round): the cold start's lognormal factor
COLD_REPLACEMENT = 5  # per (worker slot, crash): the replacement's cold start
CRASH = 6  # per (worker slot, crash): the work time to its next crash
DRIFT = 7  # per drift step (lane 0): the AR(1) innovation
MEASURE = 8  # per (segment, value): measurement noise

_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (the golden ratio in 64 bits)
_LANE = 0xD1B54A32D192ED03  # an odd constant spreading lanes before mixing


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser, in place on a fresh array (arrays only: numpy wraps array
    arithmetic modulo 2**64 silently, scalars warn)."""
    x = x.copy()
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def check_key(key: object) -> Key:
    """`key` as a tuple of ints, or `WorldError`."""
    if not isinstance(key, (tuple, list)) or not all(
        isinstance(part, int) and not isinstance(part, bool) and part.bit_length() <= 256
        for part in key
    ):
        raise WorldError(
            f"`key` must be a tuple of integers of at most 256 bits (the job's realised "
            f"randomness), got "
            f"{shown(key)}: pass e.g. (seed, job_index)"
        )
    return tuple(key)


class Streams:
    """The draws of one key."""

    def __init__(self, key: Key) -> None:
        digest = hashlib.blake2b(",".join(map(str, key)).encode(), digest_size=8).digest()
        seed = np.uint64(int.from_bytes(digest, "little"))
        ids = np.arange(MEASURE + 1, dtype=np.uint64)
        # One mixed seed per stream, so streams are unrelated sequences.
        self._streams = _mix(seed ^ (ids * np.uint64(_GAMMA)))

    def uniform(
        self, stream: int, lanes: npt.ArrayLike, index: npt.ArrayLike
    ) -> FloatArray:
        """Uniform draws in (0, 1), one per broadcast (lane, index) pair."""
        lane = np.atleast_1d(np.asarray(lanes, dtype=np.uint64))
        seeds = _mix(self._streams[stream] + lane * np.uint64(_LANE))
        count = np.atleast_1d(np.asarray(index, dtype=np.uint64)) + np.uint64(1)
        bits = _mix(seeds + count * np.uint64(_GAMMA))
        # The top 53 bits, through int64 (numpy converts it to float faster than uint64).
        top = (bits >> np.uint64(11)).view(np.int64)
        out: FloatArray = (top.astype(np.float64) + 0.5) * 2.0**-53
        return out

    def normal(self, stream: int, lanes: npt.ArrayLike, index: npt.ArrayLike) -> FloatArray:
        """Standard normal draws (Box–Muller on the index's two uniforms 2t and 2t+1)."""
        twice = np.atleast_1d(np.asarray(index, dtype=np.uint64)) * np.uint64(2)
        radius = np.sqrt(-2.0 * np.log(self.uniform(stream, lanes, twice)))
        # The cosine in single precision: numpy's vectorised float32 cosine is ten times
        # faster, and 1e-7 of a noise draw is nothing.
        angle = (2.0 * math.pi * self.uniform(stream, lanes, twice + np.uint64(1)))
        out: FloatArray = radius * np.cos(angle.astype(np.float32))
        return out

    def lognormal(
        self, stream: int, lanes: npt.ArrayLike, index: npt.ArrayLike, cv: float
    ) -> FloatArray:
        """Mean-1 lognormal factors with coefficient of variation `cv`."""
        sigma = math.sqrt(math.log1p(cv * cv))
        out: FloatArray = np.exp(sigma * self.normal(stream, lanes, index) - sigma * sigma / 2)
        return out
