"""Functions held over time under one concurrency limit: placing runs, and checking a schedule.

The simulator's pool places each job where its functions are free (`Capacity`); `solve_many`
places the jobs its schedule gives up on the same way, and re-checks every schedule with
`peak`, an exact sweep over the real start and finish times.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def peak(
    starts: npt.ArrayLike, finishes: npt.ArrayLike, functions: npt.ArrayLike
) -> tuple[int, float]:
    """The most functions held at once by runs holding `functions[i]` over [starts[i],
    finishes[i]), and the first moment it is reached (0 and 0.0 for no runs).

    A run releases its functions at its finish, so one that ends as another starts never
    overlaps it: at equal times releases are counted before acquisitions.
    """
    start = np.asarray(starts, dtype=np.float64)
    finish = np.asarray(finishes, dtype=np.float64)
    held = np.asarray(functions, dtype=np.int64)
    if not start.size:
        return 0, 0.0
    times = np.concatenate((finish, start))
    change = np.concatenate((-held, held))
    order = np.lexsort((change, times))  # by time, releases (negative) first
    usage = np.cumsum(change[order])
    top = int(np.argmax(usage))
    return int(usage[top]), float(times[order][top])


class Capacity:
    """Functions in use over time, as a step function: where each job's stages fit.

    `times[i]` starts a segment in which `used[i]` functions are held, up to `times[i+1]`;
    the last segment runs forever with none held (everything placed ends). Kept as arrays:
    `solve_many` places thousands of missed jobs past tens of thousands of segments, which a
    scan in Python took minutes over.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.times: npt.NDArray[np.float64] = np.zeros(1)
        self.used: npt.NDArray[np.int64] = np.zeros(1, dtype=np.int64)

    def _split(self, at: float) -> int:
        """The index of the segment starting exactly at `at`, made if need be."""
        i = int(np.searchsorted(self.times, at, side="right")) - 1
        if self.times[i] == at:
            return i
        self.times = np.insert(self.times, i + 1, at)
        self.used = np.insert(self.used, i + 1, self.used[i])
        return i + 1

    def take(self, start: float, functions: int, seconds: float) -> float:
        """Hold `functions` for `seconds` from the earliest time ≥ `start` they are free."""
        at = self.earliest(start, functions, seconds)
        first, last = self._split(at), self._split(at + seconds)
        self.used[first:last] += functions
        return at

    def earliest(self, start: float, functions: int, seconds: float) -> float:
        """The earliest time ≥ `start` from which `functions` are free for `seconds`.

        The candidates are `start` and the end of each segment too full from there on; one
        fits when the next full segment lies past its own and starts no earlier than
        `seconds` after it.
        """
        if functions > self.size:
            raise ValueError(f"{functions} functions never fit in a pool of {self.size}")
        i = max(0, int(np.searchsorted(self.times, start, side="right")) - 1)
        full = np.flatnonzero(self.used[i:] + functions > self.size) + i
        opens = np.concatenate(([start], self.times[full + 1]))
        own = np.concatenate(([i], full + 1))  # the segment each candidate starts in
        next_full = np.append(full, len(self.times))
        closes = np.append(self.times[full], np.inf)
        fits = np.flatnonzero((next_full > own) & ~(closes < opens + seconds))
        return float(opens[fits[0]])

    def forget(self, before: float) -> None:
        """Drop the segments that end before `before`: no stage starts earlier any more."""
        i = int(np.searchsorted(self.times, before, side="right")) - 1
        if i > 0:
            self.times, self.used = self.times[i:], self.used[i:]
