"""The compiled model's cache between processes, and what a solve imports.

The cache is keyed by the model's own text; a missing, corrupt or foreign cache is ignored
and rewritten, an unwritable one skipped: it can make a start faster, never an answer differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambdadnn.models import compiled
from lambdadnn.models.compiled import Program, load, model_key
from tests.hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
KEY = "0" * 64
# Solve every shipped instance in a fresh process; report where the model came from and what
# was imported.
SCRIPT = """
import json, sys
from pathlib import Path
from lambdadnn import solve
from lambdadnn.models.performance import program
plans = [solve(path) for path in sorted(Path("instances").glob("*.yaml"))]
print(json.dumps({
    "origin": program().origin,
    "sympy": "sympy" in sys.modules,
    "pyomo": "pyomo" in sys.modules,
    "plans": [[p.functions, p.memory_mb, p.cost_usd, p.selected_by] for p in plans],
}))
"""


def fresh_process(cache_home: Path) -> dict[str, Any]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def same_model(a: Program, b: Program) -> None:
    """Both programs give the same figures, to the last bit, on a spread of plans."""
    values = tuple(np.float64(v) for v in range(1, len(a.parameters) + 1))
    n = np.arange(1.0, 41.0)[:, None]
    m = np.linspace(128.0, 10240.0, 7)[None, :]
    names = tuple(a.figures.outputs)
    with np.errstate(all="ignore"):
        for x, y in zip(a.function(names)(n, m, *values, *a.exact),
                        b.function(names)(n, m, *values, *b.exact), strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.real
def test_the_second_process_uses_the_cache_without_sympy_or_pyomo(tmp_path: Path) -> None:
    first = fresh_process(tmp_path)
    assert first["origin"] == "derived" and first["sympy"] and not first["pyomo"]
    assert len(list((tmp_path / "lambdadnn").glob("model-*.json"))) == 1
    second = fresh_process(tmp_path)
    assert second["origin"] == "cache"
    assert not second["sympy"], "a cached start imported SymPy"
    assert not second["pyomo"], "a solve whose choice needed no HiGHS imported Pyomo"
    assert second["plans"] == first["plans"]
    assert {plan[3] for plan in second["plans"]} == {"enumeration"}


@pytest.mark.parametrize(
    "damage",
    [lambda text: text[: len(text) // 2],  # truncated
     lambda text: "\x00garbage",  # not JSON
     lambda text: text.replace("numpy.ceil", "numpy.floor", 1),  # changed, checksum stale
     lambda text: text.replace('"payload"', '"other"', 1)],  # valid JSON, wrong shape
    ids=["truncated", "garbage", "edited", "reshaped"],
)
def test_a_corrupt_cache_is_ignored_and_rewritten(tmp_path: Path, damage: Any) -> None:
    derived = load(tmp_path, KEY)
    (path,) = tmp_path.glob("model-*.json")
    path.write_text(damage(path.read_text()))
    again = load(tmp_path, KEY)
    assert again.origin == "derived"
    same_model(derived, again)
    assert load(tmp_path, KEY).origin == "cache"


def test_a_changed_model_key_rederives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "models" / "equations.py").read_bytes()
    key = model_key([text])
    assert model_key([text.replace(b"p_ps / 3600", b"p_ps / 60")]) != key
    monkeypatch.setattr(compiled, "FORMAT", compiled.FORMAT + 1)
    assert model_key([text]) != key
    monkeypatch.undo()
    assert load(tmp_path, key).origin == "derived"
    assert load(tmp_path, key).origin == "cache"
    other = model_key([text + b"# changed\n"])
    assert load(tmp_path, other).origin == "derived"
    # A cache file renamed to another key's name is refused too: the key is stored inside.
    (tmp_path / f"model-{key[:32]}.json").replace(tmp_path / f"model-{KEY[:32]}.json")
    assert load(tmp_path, KEY).origin == "derived"


def test_a_cache_file_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    """The cache holds code this process runs: only a file no one else can write is used."""
    load(tmp_path, KEY)
    (path,) = tmp_path.glob("model-*.json")
    path.chmod(0o666)
    assert load(tmp_path, KEY).origin == "derived"
    assert load(tmp_path, KEY).origin == "cache"  # rewritten, the user's own again


def test_an_unwritable_cache_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    program = load(blocker / "lambdadnn", KEY)
    assert program.origin == "derived"
    assert load(None, None).origin == "derived"


def test_the_cache_lives_in_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiled.cache_directory() == tmp_path / "lambdadnn"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the spec says: ignore it
    assert compiled.cache_directory() == Path.home() / ".cache" / "lambdadnn"
