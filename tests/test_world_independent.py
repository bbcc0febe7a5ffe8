"""The independent world imports nothing of lambdadnn outside `lambdadnn.simulator.world`.

The world judges the planner, so it must not share the planner's model: a module of
simulator/world/ that imported `lambdadnn.models`, `lambdadnn.solver` (or any other lambdadnn
module that does) could reuse the closed form it is meant to test. The check reads the source
with `ast`, so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORLD = Path(__file__).resolve().parent.parent / "simulator" / "world"
OWN = "lambdadnn.simulator.world"
# Package depth of simulator/world/ below `lambdadnn`: a relative import of level > 1 leaves it.
LEVELS_INSIDE = 1


def foreign_imports(source: str) -> list[str]:
    """Every import in `source` that reaches a lambdadnn module outside the world package (or
    leaves it by a relative import), and every dynamic import (`__import__`,
    `importlib.import_module`), which could hide one."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > LEVELS_INSIDE:
                found.append(f"from {'.' * node.level}{node.module or ''} import ...")
                continue
            names = [] if node.level else [node.module or ""]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("__import__", "import_module"):
                found.append(f"{name}(...)")
            continue
        else:
            continue
        found.extend(
            name for name in names
            if (name == "lambdadnn" or name.startswith("lambdadnn."))
            and name != OWN and not name.startswith(f"{OWN}.")
        )
    return found


def world_modules() -> list[Path]:
    return sorted(WORLD.glob("*.py"))


def test_the_world_package_has_its_modules() -> None:
    names = {path.name for path in world_modules()}
    assert {"__init__.py", "config.py", "engine.py", "streams.py"} <= names


@pytest.mark.parametrize("path", world_modules(), ids=lambda path: path.name)
def test_no_world_module_imports_lambdadnn_outside_the_world(path: Path) -> None:
    assert foreign_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "from lambdadnn.models.performance import figures",
        "import lambdadnn.solver.pipeline",
        "def f():\n    from lambdadnn.simulator.engine import PlanRun",
        "from lambdadnn import solve",
        "from ...solver import errors",
        "from .. import engine",
        "import importlib\nimportlib.import_module('lambdadnn.models')",
        "__import__('lambdadnn.solver')",
    ],
)
def test_the_check_catches_every_way_out(source: str) -> None:
    assert foreign_imports(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from lambdadnn.simulator.world.streams import Streams",
        "from . import streams",
        "import numpy as np\nimport yaml",
    ],
)
def test_the_check_lets_the_world_import_itself_and_numpy(source: str) -> None:
    assert foreign_imports(source) == []
