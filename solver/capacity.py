"""Functions held over time under one concurrency limit: placing runs, and checking a schedule.

The simulator's pool places each job where its functions are free (`Capacity`); `solve_many`
places the jobs its schedule gives up on the same way, and re-checks every schedule with
`peak`, an exact sweep over the real start and finish times.
"""

from __future__ import annotations

import bisect

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
    the last segment runs forever with none held (everything placed ends).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.times: list[float] = [0.0]
        self.used: list[int] = [0]

    def _split(self, at: float) -> int:
        """The index of the segment starting exactly at `at`, made if need be."""
        i = bisect.bisect_right(self.times, at) - 1
        if self.times[i] == at:
            return i
        self.times.insert(i + 1, at)
        self.used.insert(i + 1, self.used[i])
        return i + 1

    def take(self, start: float, functions: int, seconds: float) -> float:
        """Hold `functions` for `seconds` from the earliest time ≥ `start` they are free."""
        at = self.earliest(start, functions, seconds)
        first, last = self._split(at), self._split(at + seconds)
        for k in range(first, last):
            self.used[k] += functions
        return at

    def earliest(self, start: float, functions: int, seconds: float) -> float:
        """The earliest time ≥ `start` from which `functions` are free for `seconds`."""
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        at = start
        while True:
            j = i
            while j < len(self.times) and (j == i or self.times[j] < at + seconds):
                if self.used[j] + functions > self.size:
                    break
                j += 1
            else:
                break
            i, at = j + 1, self.times[j + 1]  # past the segment that is too full
        return at

    def forget(self, before: float) -> None:
        """Drop the segments that end before `before`: no stage starts earlier any more."""
        i = bisect.bisect_right(self.times, before) - 1
        if i > 0:
            del self.times[:i]
            del self.used[:i]
