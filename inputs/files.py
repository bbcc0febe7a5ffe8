"""Reading untrusted input: regular files of bounded size, and values quoted briefly.

Every reader of a user's file (instances, platforms, plan JSON, traces) goes through
`read_text`, so a FIFO, a device, a symlink loop or a huge file is refused with one line
before anything is read; `brief` is how any value from such a file is shown in a message,
so no message echoes more than a few escaped characters of it.
"""

from __future__ import annotations

import numbers
import os
import stat
from pathlib import Path

from .errors import InputError

MAX_INPUT_BYTES = 4 * 1024 * 1024  # far above any instance, plan or 10,000-job trace
MAX_TRACE_JOBS = 100_000  # per trace, read or generated: ten times the paper's 10,000 jobs
BRIEF_CHARS = 40


def brief(value: object, limit: int = BRIEF_CHARS) -> str:
    """`repr`-escaped text of at most about `limit` characters; no line breaks, no control
    characters, and never the full expansion of a large value."""
    if isinstance(value, (str, bytes)):
        return _cut(repr(value[: limit + 1]), limit)
    if isinstance(value, numbers.Integral) and int(value).bit_length() > 4 * limit:
        return f"an integer of about {int(int(value).bit_length() * 0.30103):,} digits"
    if value is None or isinstance(value, numbers.Number):  # numpy's numbers too
        try:
            return _cut(repr(value), limit)
        except ValueError:  # a Fraction of more digits than Python converts to text
            pass
    # A container (an alias bomb expands to gigabytes) or an object: named, never walked.
    return f"a {type(value).__name__}"


def _cut(shown: str, limit: int) -> str:
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def read_text(
    path: Path, *, what: str, error: type[InputError], max_bytes: int = MAX_INPUT_BYTES,
) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`, or `error` in one line.

    `what` names the expected content in messages ("an instance YAML", "a plan JSON"); `error`
    is the reading domain's (`InstanceError`, `TraceError`, `PlanError`).
    """
    shown = brief(str(path), 80)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"file {shown} does not exist; check the path") from None
    except (OSError, ValueError) as cause:  # ELOOP, ENAMETOOLONG, EACCES, NUL in the path
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else "unusable"
        raise error(f"file {shown} cannot be read ({reason}); give the path of {what}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{shown} is not a regular file; give the path of {what}")
    if info.st_size > max_bytes:
        raise error(
            f"file {shown} has {info.st_size:,} bytes, more than the {max_bytes:,} allowed for "
            f"{what}; is it the right file?"
        )
    try:
        with open(path, "rb") as handle:  # the size may have changed since the stat
            data = handle.read(max_bytes + 1)
    except OSError as cause:
        raise error(f"file {shown} cannot be read ({cause.strerror or 'I/O error'})") from None
    if len(data) > max_bytes:
        raise error(f"file {shown} has more than the {max_bytes:,} bytes allowed for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"file {shown} is not UTF-8 text; give the path of {what}") from None
