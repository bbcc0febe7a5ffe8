"""The model as one compiled numpy program, derived once and cached between processes.

`models.derivation` proves the bounds' facts on the SymPy model and prints every figure as
numpy statements after one common-subexpression elimination (a `models.code.Code`). That takes
about a second (importing SymPy, proving, printing), so the result is cached as JSON in the
user's cache directory (`$XDG_CACHE_HOME/lambdadnn`, else `~/.cache/lambdadnn`), under a key
made of the text of the modules that define the model, derive it and store it: any change to
the model re-derives and re-proves it. A cache that is missing, unreadable, corrupt
(its checksum is stored with it) or written for another key is ignored and rewritten; one
that cannot be written is skipped. It is code this process runs, so it is read and written
only in a folder of the user's own that no one else may write, as a regular file of the
user's own that no one else may write, never through a symlink; both are checked on the open
descriptors, so a swap between the check and the read cannot win. The cache never changes
an answer and never fails a solve. On the cached path SymPy is not imported at all.

A figure is always computed by the same statements, whichever figures are asked for with it
(`Program.function` takes the statements each needs, in the one order), so figures agree to
the last bit wherever they are computed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .code import Code

FORMAT = 1
# The modules whose text defines the model, its proofs, its printing and this cache.
MODEL_SOURCES = ("equations.py", "derivation.py", "code.py", "compiled.py")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Program:
    """The compiled model: its signature, what was proved, and its two pieces of code.

    `figures` maps (n, m, *parameters, *noise) to every figure of the model (checked against
    `models.performance`'s names when loaded); `thresholds` maps the parameters to the memory
    where the rate and the storage bandwidth reach 0, where the storage is capped, and the
    largest n with b_l ≥ 1.
    """

    parameters: tuple[str, ...]
    noise: tuple[str, ...]
    exact: tuple[float, ...]
    regimes_proved: int
    figures: Code
    thresholds: Callable[..., tuple[Any, ...]]
    origin: Literal["cache", "derived"]
    _functions: dict[tuple[str, ...], Callable[..., tuple[Any, ...]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def function(self, names: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
        """The figures `names` as one numpy function, built on first use."""
        found = self._functions.get(names)
        if found is None:
            found = self._functions[names] = self.figures.function(names)
        return found


def cache_directory() -> Path | None:
    """`$XDG_CACHE_HOME/lambdadnn` (an absolute XDG_CACHE_HOME only), else ~/.cache/lambdadnn;
    None when there is no home directory either."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except RuntimeError:
        return None
    return root / "lambdadnn"


def model_key(sources: Iterable[bytes]) -> str:
    """The cache key: the model's own text (its defining modules) and the cache's format."""
    digest = hashlib.sha256(f"lambdadnn model format {FORMAT}\n".encode())
    for text in sources:
        digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()


def _checksum(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _program(payload: dict[str, Any], origin: Literal["cache", "derived"]) -> Program:
    """A `Program` from a payload, checked to be complete: any flaw raises."""
    figures = Code.from_json(payload["figures"])
    thresholds = Code.from_json(payload["thresholds"])
    parameters = tuple(payload["parameters"])
    noise = tuple(payload["noise"])
    exact = tuple(float(value) for value in payload["exact"])
    regimes = payload["regimes_proved"]
    if (
        figures.arguments != ("n", "m", *parameters, *noise)
        or thresholds.arguments != parameters
        or set(thresholds.outputs) != {"rate_root", "storage_root", "storage_cap", "batch_limit"}
        or len(exact) != len(noise)
        or not isinstance(regimes, int)
    ):
        raise ValueError("the payload does not describe this model's program")
    program = Program(
        parameters, noise, exact, regimes, figures,
        thresholds.function(("rate_root", "storage_root", "storage_cap", "batch_limit")),
        origin,
    )
    program.function(tuple(figures.outputs))  # every statement compiles
    return program


def _private(descriptor: int, kind: int) -> bool:
    """Whether the open `descriptor` is of `kind` (`stat.S_IFDIR`, `stat.S_IFREG`), owned by
    this user and writable by no one else: checked on the descriptor, not the name, so that a
    swap after the check cannot change what is read."""
    info = os.fstat(descriptor)
    return (
        stat.S_IFMT(info.st_mode) == kind
        and info.st_uid == os.geteuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


@contextlib.contextmanager
def _folder(directory: Path) -> Iterator[int]:
    """A descriptor of the cache folder, opened without following a symlink; `OSError` unless
    it is private (`_private`). Files are then opened relative to it (`dir_fd`), so the folder
    cannot be swapped between the check and their use."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if not _private(descriptor, stat.S_IFDIR):
            raise PermissionError(f"{directory} is not a folder of this user's alone")
        yield descriptor
    finally:
        os.close(descriptor)


def _read(path: Path, key: str) -> Program | None:
    """The cached program at `path` if it is intact, made for `key`, and a regular file of the
    user's own in a folder of the user's own, neither writable by others nor reached through a
    symlink (it is code this process will run); else None."""
    try:
        with _folder(path.parent) as folder:
            descriptor = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
            with os.fdopen(descriptor, encoding="utf-8") as stream:
                if not _private(descriptor, stat.S_IFREG):
                    raise PermissionError("not a regular file of this user's alone")
                stored = json.load(stream)
        payload = stored["payload"]
        if stored["key"] != key or stored["checksum"] != _checksum(payload):
            return None
        return _program(payload, "cache")
    except Exception as error:  # whatever is wrong with a cache file, derive instead
        logger.debug("model cache %s not used: %s: %s", path, type(error).__name__, error)
        return None


def _write(path: Path, key: str, payload: dict[str, Any]) -> None:
    """Store atomically (a temporary file renamed over the cache file), or not at all: only
    in a private folder (`_folder`), never through a symlink."""
    stored = {"key": key, "checksum": _checksum(payload), "payload": payload}
    temporary = f".model-{secrets.token_hex(8)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _folder(path.parent) as folder:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            descriptor = os.open(temporary, flags, 0o600, dir_fd=folder)
            try:
                with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
                    json.dump(stored, stream)
                os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:  # an error or Ctrl-C: leave no temporary file behind
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=folder)
                raise
    except OSError as error:
        logger.debug("model cache %s not written: %s: %s", path, type(error).__name__, error)


def load(directory: Path | None, key: str | None) -> Program:
    """The program from `directory`'s cache for `key`, else derived (and cached if possible).

    `None` for either disables the cache.
    """
    path = None if directory is None or key is None else directory / f"model-{key[:32]}.json"
    if path is not None and key is not None:
        cached = _read(path, key)
        if cached is not None:
            return cached
    from .derivation import derive

    payload = derive()
    program = _program(payload, "derived")
    if path is not None and key is not None:
        _write(path, key, payload)
    return program


def cache_key() -> str | None:
    """The key of this installation's model (`model_key` of `MODEL_SOURCES`); None when the
    source files cannot be read (then the model is derived every time)."""
    here = Path(__file__).parent
    try:
        return model_key([(here / name).read_bytes() for name in MODEL_SOURCES])
    except OSError:
        return None
