"""The compiled model's cache is code this process runs: it is read and written only as a
private regular file in a private folder, never through a symlink, and a swap of the cache
file while it is read never makes the process run another user's program.

Run as root, "private" is checked against uid 0: a folder or file chowned to another uid
(`NOBODY`) stands for another user's, as it would for any user (root reads it all the same,
so only the owner check can refuse it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from lambdadnn.models import compiled
from lambdadnn.models.compiled import Program, load

KEY = "0" * 64
NOBODY = 65534
READS = 3_000  # the audit's attacker won 1 in 3,000 against a check by name
MARK = -7  # `regimes_proved` of the attacker's program: no derived program has it


def cache_file(folder: Path) -> Path:
    (path,) = folder.glob("model-*.json")
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A private cache folder holding an intact cache file."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    load(folder, KEY)
    assert load(folder, KEY).origin == "cache"
    return folder


def as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another uid")


def test_a_symlinked_cache_file_is_not_followed(cache: Path, tmp_path: Path) -> None:
    """Even to an intact file of the user's own: whoever placed the link may re-point it."""
    path = cache_file(cache)
    target = tmp_path / "elsewhere.json"
    path.replace(target)
    path.symlink_to(target)
    assert compiled._read(path, KEY) is None
    assert load(cache, KEY).origin == "derived"
    assert not path.is_symlink(), "the link was not replaced by the user's own file"
    assert load(cache, KEY).origin == "cache"


def test_a_symlinked_cache_folder_is_neither_read_nor_written(
    cache: Path, tmp_path: Path
) -> None:
    target = tmp_path / "theirs"
    cache.replace(target)
    cache.symlink_to(target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    assert load(cache, KEY).origin == "derived"
    assert load(cache, KEY).origin == "derived"
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


def give_away(path: Path) -> None:
    as_root()
    os.chown(path, NOBODY, NOBODY)


@pytest.mark.parametrize(
    "damage",
    [give_away, lambda path: path.chmod(0o770), lambda path: path.chmod(0o777),
     lambda path: path.chmod(0o1777)],
    ids=["another-owner", "group-writable", "world-writable", "sticky-world-writable"],
)
def test_a_cache_folder_others_may_write_is_neither_read_nor_written(
    cache: Path, damage: Callable[[Path], None]
) -> None:
    path = cache_file(cache)
    before = path.read_bytes(), path.stat().st_ino
    damage(cache)
    assert load(cache, KEY).origin == "derived"
    assert (path.read_bytes(), path.stat().st_ino) == before, "the cache was rewritten"
    assert [p.name for p in cache.iterdir()] == [path.name], "a temporary file was left"


def test_a_cache_file_of_another_owner_is_not_used(cache: Path) -> None:
    path = cache_file(cache)
    give_away(path)
    assert load(cache, KEY).origin == "derived"
    assert path.stat().st_uid == os.geteuid(), "rewritten as the user's own"
    assert load(cache, KEY).origin == "cache"


@dataclass
class Scene:
    """The user's private cache folder and file, their intact copy, and an attacker's program
    (`MARK`) as a world-writable file (another uid's under root) and in a folder of its own."""

    folder: Path
    path: Path
    good: Path
    theirs: Path
    their_folder: Path

    def stage(self, make: Callable[[Path], None]) -> None:
        """Whatever `make` puts at a staging name, renamed over the cache file at once."""
        staged = self.folder / ".staged"
        make(staged)
        staged.replace(self.path)

    def attacks(self) -> list[tuple[Callable[[], None], Callable[[], None]]]:
        """(swap, undo) pairs: the cache file for a symlink to the attacker's program, for the
        attacker's file itself, and the folder for a symlink to the attacker's folder."""
        real = self.folder.with_name("real")

        def restore_file() -> None:
            self.stage(lambda staged: os.link(self.good, staged))

        def swap_folder() -> None:
            self.folder.replace(real)
            self.folder.symlink_to(self.their_folder)

        def restore_folder() -> None:
            self.folder.unlink()
            real.replace(self.folder)

        return [
            (lambda: self.stage(lambda staged: staged.symlink_to(self.theirs)), restore_file),
            (lambda: self.stage(lambda staged: os.link(self.theirs, staged)), restore_file),
            (swap_folder, restore_folder),
        ]


@pytest.fixture
def scene(cache: Path, tmp_path: Path) -> Scene:
    path = cache_file(cache)
    good = tmp_path / "good.json"
    good.write_bytes(path.read_bytes())  # a copy: a rename between links of one file is a no-op
    good.chmod(0o600)
    stored = json.loads(path.read_text())
    stored["payload"]["regimes_proved"] = MARK
    stored["checksum"] = compiled._checksum(stored["payload"])
    theirs = tmp_path / "theirs.json"
    theirs.write_text(json.dumps(stored))
    theirs.chmod(0o666)
    their_folder = tmp_path / "their-folder"
    their_folder.mkdir(mode=0o700)
    os.link(theirs, their_folder / path.name)
    if os.geteuid() == 0:
        for theirs_too in (theirs, their_folder):
            os.chown(theirs_too, NOBODY, NOBODY)
    return Scene(cache, path, good, theirs, their_folder)


def attackers_program(read: list[Program | None]) -> int:
    return sum(program is not None and program.regimes_proved == MARK for program in read)


# An audit hook sees every open, before it happens: the paced attacker below swaps the cache
# there, the last moment before `_read` opens it. (A hook stays for the process: it is inert
# whenever `_before_open` is empty.)
_before_open: list[Callable[[str], None]] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _before_open and isinstance(args[0], (str, bytes, os.PathLike)):
        _before_open[0](os.path.basename(os.fsdecode(args[0])))


sys.addaudithook(_audit)


def test_a_cache_swapped_just_before_every_open_never_runs_the_attackers_program(
    scene: Scene,
) -> None:
    """Each read, the attacker swaps the file (or the folder) at the first open of either:
    after any check made by name, before the open. A check on the descriptor refuses it."""
    attacks = scene.attacks()
    pending: list[Callable[[], None]] = []

    def before_open(name: str) -> None:
        if pending and name in (scene.folder.name, scene.path.name):
            pending.pop()()

    read = []
    _before_open.append(before_open)
    try:
        for index in range(len(attacks) * 100):
            swap, undo = attacks[index % len(attacks)]
            pending.append(swap)
            read.append(compiled._read(scene.path, KEY))
            assert not pending, "the read opened neither the cache folder nor its file"
            undo()
    finally:
        _before_open.clear()
    assert attackers_program(read) == 0, f"{attackers_program(read)} of {len(read)} reads"
    assert compiled._read(scene.path, KEY) is not None  # the undone scene is the user's own


@pytest.mark.slow
def test_a_cache_swapped_by_a_racing_thread_never_runs_the_attackers_program(
    scene: Scene,
) -> None:
    """A thread keeps swapping the cache file, by rename, between the user's intact file, a
    symlink to the attacker's program and the attacker's file, while `_read` runs."""
    (to_link, _), (to_theirs, _), _ = scene.attacks()
    states = [lambda: scene.stage(lambda staged: os.link(scene.good, staged)), to_link,
              lambda: scene.stage(lambda staged: os.link(scene.good, staged)), to_theirs]
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for state in states:
                state()

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        read = [compiled._read(scene.path, KEY) for _ in range(READS)]
    finally:
        stop.set()
        thread.join()
    assert attackers_program(read) == 0, f"{attackers_program(read)} of {READS} reads"
