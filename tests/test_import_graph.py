"""The package's import graph has no cycle and no arrow from a lower layer to a higher one.

Every module of `lambdadnn` is read with `ast` (not imported), so a lazy import inside a
function, or one under `if TYPE_CHECKING:`, counts as much as one at the top; relative
imports are resolved. Importing a submodule also runs its parents' `__init__`, which is not
counted: the root's re-exports are lazy. Dynamic imports (`importlib.import_module`) cannot be
resolved and are left out. A layer may import its own layer and the ones below; the two areas
of layer 3 may not import each other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "lambdadnn"
SKIPPED = {"tests", "benchmarks", "deploy", "docs", "instances"}  # and hidden folders

# Bottom to top. A module's layer is that of the longest name here that it starts with.
LAYERS: dict[str, int] = {
    "lambdadnn.inputs": 0,  # bad-input errors, validators, file readers
    "lambdadnn.models": 1,  # the SymPy model, its compiled program and bounds
    "lambdadnn.solver": 2,  # from an instance to a plan or a schedule
    "lambdadnn.simulator": 3,  # trace-driven evaluation
    "lambdadnn.launcher": 3,  # running a plan
    "lambdadnn.plot": 4,  # every figure
    "lambdadnn.cli": 5,  # the command line
    "lambdadnn": 5,  # the root: the public API, re-exported
}
# Areas on one layer that must not import each other.
APART = (("lambdadnn.simulator", "lambdadnn.launcher"),)

Graph = Mapping[str, frozenset[str]]


def module_name(path: Path, root: Path = ROOT) -> str:
    """`lambdadnn.solver.highs` for solver/highs.py; `lambdadnn.models` for its `__init__`."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: its name and file."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        top = path.relative_to(root).parts[0]
        if len(path.relative_to(root).parts) > 1 and (top in SKIPPED or top.startswith(".")
                                                       or top.endswith(".egg-info")):
            continue
        found[module_name(path, root)] = path
    return found


def _resolve(name: str, known: frozenset[str]) -> str | None:
    """The module `name` reaches: itself, else its longest known prefix (`a.b.f` → `a.b`);
    None outside the package."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(source: str, module: str, *, is_package: bool, known: frozenset[str]) -> set[str]:
    """The package's modules that `source` (the text of `module`) imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from a.b import c`: the submodule a.b.c when there is one, else a.b itself.
            names = [f"{origin}.{alias.name}" for alias in node.names] or [origin]
        for name in names:
            target = _resolve(name, known)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, frozenset[str]]:
    modules = package_modules(root)
    known = frozenset(modules)
    return {
        name: frozenset(imports(path.read_text(encoding="utf-8"), name,
                                is_package=path.name == "__init__.py", known=known))
        for name, path in modules.items()
    }


def _area(module: str, areas: Iterable[str]) -> str | None:
    """The longest of `areas` that `module` is or lies under (the root only as itself)."""
    under = [area for area in areas
             if module == area or (area != PACKAGE and module.startswith(f"{area}."))]
    return max(under, key=len, default=None)


def layer(module: str) -> int | None:
    area = _area(module, tuple(LAYERS))
    return None if area is None else LAYERS[area]


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, frozenset())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _arrows(graph: Graph) -> Iterator[tuple[str, str]]:
    for source in sorted(graph):
        for target in sorted(graph[source]):
            yield source, target


def unlayered(graph: Graph) -> list[str]:
    return [module for module in sorted(graph) if layer(module) is None]


def upward(graph: Graph) -> list[str]:
    """Every arrow to a higher layer, or between two areas kept apart, as `a → b`."""
    found = []
    for source, target in _arrows(graph):
        low, high = layer(source), layer(target)
        areas = [(_area(source, pair), _area(target, pair)) for pair in APART]
        apart = any(a is not None and b is not None and a != b for a, b in areas)
        if (low is not None and high is not None and high > low) or apart:
            found.append(f"{source} → {target}")
    return found


# --- the package ------------------------------------------------------------------------------

GRAPH = import_graph()


def test_the_graph_reads_the_package() -> None:
    assert {"lambdadnn", "lambdadnn.cli", "lambdadnn.models.compiled",
            "lambdadnn.solver.highs"} <= set(GRAPH)
    assert "lambdadnn.solver.highs" in GRAPH["lambdadnn.solver.selection"]
    assert not any(name.startswith("lambdadnn.tests") for name in GRAPH)


def test_every_module_has_a_layer() -> None:
    assert unlayered(GRAPH) == []


def test_no_import_cycle() -> None:
    assert cycles(GRAPH) == [], "modules that import one another, directly or around a loop"


def test_no_upward_import() -> None:
    assert upward(GRAPH) == []


# --- the checker itself -----------------------------------------------------------------------

KNOWN = frozenset({"lambdadnn", "lambdadnn.models", "lambdadnn.models.compiled",
                   "lambdadnn.models.derivation", "lambdadnn.solver", "lambdadnn.solver.plan",
                   "lambdadnn.solver.highs"})


@pytest.mark.parametrize(("source", "expected"), [
    ("import lambdadnn.models.compiled", {"lambdadnn.models.compiled"}),
    ("from lambdadnn.models.compiled import Code", {"lambdadnn.models.compiled"}),
    ("from lambdadnn.models import compiled", {"lambdadnn.models.compiled"}),
    ("def f():\n    from lambdadnn.models.derivation import derive",
     {"lambdadnn.models.derivation"}),
    ("if TYPE_CHECKING:\n    from lambdadnn.solver.plan import Plan", {"lambdadnn.solver.plan"}),
    ("from . import highs", {"lambdadnn.solver.highs"}),
    ("from .highs import Status", {"lambdadnn.solver.highs"}),
    ("from ..models.compiled import Code", {"lambdadnn.models.compiled"}),
    ("from lambdadnn import __version__", {"lambdadnn"}),
    ("import numpy as np\nfrom lambdadnn.solver.plan import Plan", {"lambdadnn.solver.plan"}),
])
def test_imports_are_read_wherever_they_are(source: str, expected: set[str]) -> None:
    assert imports(source, "lambdadnn.solver.selection", is_package=False, known=KNOWN) == expected


def test_a_relative_import_in_a_package_starts_from_the_package() -> None:
    assert imports("from . import highs", "lambdadnn.solver", is_package=True,
                   known=KNOWN) == {"lambdadnn.solver.highs"}


def test_a_cycle_is_found_with_its_modules() -> None:
    graph = {"a.x": frozenset({"a.y"}), "a.y": frozenset({"a.z"}), "a.z": frozenset({"a.x"}),
             "a.w": frozenset({"a.x"})}
    assert cycles(graph) == [["a.x", "a.y", "a.z"]]
    assert cycles({"a.x": frozenset({"a.y"}), "a.y": frozenset()}) == []


def test_an_upward_arrow_is_found() -> None:
    graph = {"lambdadnn.models.compiled": frozenset({"lambdadnn"}),
             "lambdadnn.solver.plan": frozenset({"lambdadnn.models.compiled"}),
             "lambdadnn.inputs.files": frozenset({"lambdadnn.solver.plan"})}
    assert upward(graph) == ["lambdadnn.inputs.files → lambdadnn.solver.plan",
                             "lambdadnn.models.compiled → lambdadnn"]


def test_the_areas_kept_apart_may_not_import_each_other() -> None:
    graph = {"lambdadnn.simulator.engine": frozenset({"lambdadnn.launcher.spec",
                                                      "lambdadnn.simulator.trace"}),
             "lambdadnn.launcher.local": frozenset({"lambdadnn.solver.plan"})}
    assert upward(graph) == ["lambdadnn.simulator.engine → lambdadnn.launcher.spec"]


def test_a_module_outside_every_layer_is_named() -> None:
    names = ("lambdadnn.extra", "lambdadnn.cli", "lambdadnn", "lambdadnn.solver.plan")
    assert unlayered(dict.fromkeys(names, frozenset())) == ["lambdadnn.extra"]
