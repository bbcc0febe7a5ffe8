"""What the process table says now (from /proc): the tests that kill launches, profiles and
emulated NICs check with these that nothing they started is left behind."""

from __future__ import annotations

from pathlib import Path


def parents() -> dict[int, int]:
    """pid → parent pid of every process now."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            found[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
    return found


def descendants(root: int) -> set[int]:
    """Every process below `root` now (children, theirs, and so on)."""
    table = parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in table.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs: it exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> bytes:
    """`pid`'s command line (NUL-separated), or b"" once it has ended."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
