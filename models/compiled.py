"""The model as one compiled numpy program, derived once and cached between processes.

`models.derivation` proves the bounds' facts on the SymPy model and prints every figure as
numpy statements after one common-subexpression elimination (a `Code`). That takes about a
second (importing SymPy, proving, printing), so the result is cached as JSON in the user's
cache directory (`$XDG_CACHE_HOME/lambdadnn`, else `~/.cache/lambdadnn`), under a key made of
the text of the modules that define the model and derive it, and the lambdadnn version: any
change to the model re-derives and re-proves it. A cache that is missing, unreadable, corrupt
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
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

FORMAT = 1
# Figures the solver needs beyond a plan's report (`models.equations.AUXILIARY`): the cost
# weight, and the crash loads whose reaching 1 means a run never finishes.
AUXILIARY = ("weight", "crash_load", "crash_load_quantile")
# The modules whose text defines the model, its proofs and its printing (beside this one).
MODEL_SOURCES = ("equations.py", "derivation.py", "compiled.py")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
logger = logging.getLogger(__name__)

Statement = tuple[str, str, tuple[str, ...]]  # target, numpy expression, temporaries it uses
Output = tuple[str, tuple[str, ...]]  # numpy expression, temporaries it uses


@dataclass(frozen=True)
class Code:
    """Numpy statements computing named outputs from `arguments`, in dependency order."""

    arguments: tuple[str, ...]
    statements: tuple[Statement, ...]
    outputs: dict[str, Output]

    def to_json(self) -> dict[str, Any]:
        outputs = {name: [text, list(uses)] for name, (text, uses) in self.outputs.items()}
        return {"arguments": list(self.arguments),
                "statements": [[t, text, list(uses)] for t, text, uses in self.statements],
                "outputs": outputs}

    @classmethod
    def from_json(cls, data: Any) -> Code:
        """Rebuild from `to_json`, checking every part's type (a cache file is untrusted)."""
        def names(value: Any) -> tuple[str, ...]:
            if not isinstance(value, list) or not all(
                isinstance(v, str) and _IDENTIFIER.fullmatch(v) for v in value
            ):
                raise ValueError("expected a list of identifiers")
            return tuple(value)

        def text(value: Any) -> str:
            if not isinstance(value, str) or "\n" in value:
                raise ValueError("expected an expression")
            return value

        statements = tuple((names([t])[0], text(e), names(u)) for t, e, u in data["statements"])
        outputs = {name: (text(e), names(u)) for name, (e, u) in data["outputs"].items()}
        return cls(names(data["arguments"]), statements, outputs)

    def function(self, names: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
        """A numpy function returning the outputs `names`, with only the statements they need."""
        needed = {use for name in names for use in self.outputs[name][1]}
        for target, _, uses in reversed(self.statements):
            if target in needed:
                needed.update(uses)
        lines = [f"def compiled({', '.join(self.arguments)}):"]
        lines += [f"    {t} = {text}" for t, text, _ in self.statements if t in needed]
        lines.append(f"    return ({''.join(self.outputs[name][0] + ', ' for name in names)})")
        namespace: dict[str, Any] = {"numpy": np}
        exec(compile("\n".join(lines), f"<lambdadnn model {','.join(names)}>", "exec"), namespace)
        function: Callable[..., tuple[Any, ...]] = namespace["compiled"]
        return function


@dataclass(frozen=True)
class Program:
    """The compiled model: its signature, what was proved, and its two pieces of code.

    `figures` maps (n, m, *parameters, *noise) to every figure of `models.performance.Figures`
    and the `AUXILIARY` ones; `thresholds` maps the parameters to the memory where the rate and
    the storage bandwidth reach 0, where the storage is capped, and the largest n with b_l ≥ 1.
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


def model_key(sources: Iterable[bytes], version: str) -> str:
    """The cache key: the model's own text (its defining modules), the format and version."""
    digest = hashlib.sha256(f"lambdadnn {version} format {FORMAT}\n".encode())
    for text in sources:
        digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()


def _checksum(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _program(payload: dict[str, Any], origin: Literal["cache", "derived"]) -> Program:
    """A `Program` from a payload, checked to be complete: any flaw raises."""
    from lambdadnn.models.performance import FIGURE_NAMES

    figures = Code.from_json(payload["figures"])
    thresholds = Code.from_json(payload["thresholds"])
    parameters = tuple(payload["parameters"])
    noise = tuple(payload["noise"])
    exact = tuple(float(value) for value in payload["exact"])
    regimes = payload["regimes_proved"]
    if (
        figures.arguments != ("n", "m", *parameters, *noise)
        or set(figures.outputs) != {*FIGURE_NAMES, *AUXILIARY}
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
    from lambdadnn.models.derivation import derive

    payload = derive()
    program = _program(payload, "derived")
    if path is not None and key is not None:
        _write(path, key, payload)
    return program


def _sources() -> list[bytes] | None:
    here = Path(__file__).parent
    try:
        return [(here / name).read_bytes() for name in MODEL_SOURCES]
    except OSError:  # no source files to key a cache by: derive every time
        return None


_loaded: list[Program] = []
_lock = threading.Lock()


def program() -> Program:
    """The process's compiled model: loaded or derived on first use, by one thread."""
    if not _loaded:
        with _lock:
            if not _loaded:
                from lambdadnn import __version__

                sources = _sources()
                key = None if sources is None else model_key(sources, __version__)
                _loaded.append(load(cache_directory(), key))
    return _loaded[0]
