"""Reading instances: a YAML file parsed safely and within bounds, a shipped instance's name,
a platform named in an instance, and `load_instance`, which checks what it read.

Every problem is one `InstanceError` line, before anything else sees the input.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..inputs.errors import InstanceError
from ..inputs.files import brief, read_text
from .instance import MAX_INTEGER, Instance, Limits, ParameterServer, Platform
from .instance_validation import (
    ServerChoice,
    check_platform,
    fail,
    instance_sections,
    key_shown,
    server_choices,
)
from .shipped import instances_folder, named, names, platforms_folder, servers_folder

try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml: the same loader in pure Python, slower
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

# Bounds on a YAML document before it is turned into Python objects: an instance is about 50
# values, 4 levels deep, with integers of at most 13 digits. Counting through aliases bounds
# an alias bomb (1 KB expanding to gigabytes); the digit limit keeps clear of Python's own
# limit on converting long integers (4,300 digits), which would raise a bare ValueError.
MAX_YAML_VALUES = 10_000
MAX_YAML_DEPTH = 32
MAX_INTEGER_CHARS = 100


class _Loader(_SafeLoader):
    """YAML's safe loader, stopping as soon as a document has more than `MAX_YAML_VALUES` nodes
    (the parser resolves the tag of each new one), so a 4 MB list is refused in milliseconds."""

    def __init__(self, text: str, shown: str) -> None:
        super().__init__(text)
        self.shown, self.nodes = shown, 0

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        self.nodes += 1
        if self.nodes > MAX_YAML_VALUES:
            raise _too_many(self.shown)
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _too_many(shown: str) -> InstanceError:
    return InstanceError(
        f"file {shown} has more than {MAX_YAML_VALUES:,} values, counting each alias as the "
        "values it repeats (an instance has about 50); is it the right file?"
    )


def _check_scalar(loader: _Loader, node: yaml.ScalarNode, where: str, shown: str) -> None:
    """Construct one scalar, where its path is known: an overlong integer, or a value its tag
    does not fit (`!!int abc`, `2001-02-30`), is named instead of raising from PyYAML."""
    line = f"line {node.start_mark.line + 1} of file {shown}"
    if node.tag == _INT_TAG and len(node.value) > MAX_INTEGER_CHARS:
        raise InstanceError(
            f"`{where}` ({line}) is an integer of {len(node.value):,} characters; no field "
            f"takes more than {len(str(MAX_INTEGER))} digits"
        )
    try:
        loader.construct_object(node)
    except yaml.YAMLError:
        raise
    except Exception:  # PyYAML's constructors raise ValueError, KeyError, AttributeError...
        kind = node.tag.rsplit(":", 1)[-1]
        raise InstanceError(
            f"`{where}` ({line}) is not a valid YAML {brief(kind, 20)}; write it plainly"
        ) from None


def _check_tree(loader: _Loader, root: yaml.Node, shown: str) -> None:
    """Walk the document as it will be built, aliases expanded: refuse more than
    `MAX_YAML_VALUES` values or `MAX_YAML_DEPTH` levels (an alias bomb, a cycle) and duplicate
    keys (YAML would keep the last one silently), and construct every scalar on the way."""
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    visited = 0
    while stack:
        node, parts = stack.pop()
        visited += 1
        if visited > MAX_YAML_VALUES:
            raise _too_many(shown)
        if len(parts) > MAX_YAML_DEPTH:
            under = "".join(parts[:2]).removeprefix(".")
            raise InstanceError(
                f"file {shown} nests more than {MAX_YAML_DEPTH} levels deep (under `{under}`); "
                "an instance has 4"
            )
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(loader, node, "".join(parts).removeprefix(".") or "(top)", shown)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, (*parts, f"[{i}]")) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):  # YAML refuses it: unhashable
                    stack.extend([(key, (*parts, ".(key)")), (value, (*parts, ".(key)"))])
                    continue
                if key.tag == _MERGE_TAG:  # `<<: *base`, whose keys explicit ones override
                    stack.append((value, parts))
                    continue
                child = (*parts, f".{key_shown(key.value)}")
                line, first = key.start_mark.line + 1, lines.get((key.tag, key.value))
                if first is not None:
                    on = f"on line {line}" if first == line else f"on lines {first} and {line}"
                    raise InstanceError(
                        f"`{''.join(child).removeprefix('.')}` appears twice in file {shown} "
                        f"({on}); keep one"
                    )
                lines[key.tag, key.value] = line
                stack.extend([(key, child), (value, child)])


def _problem(error: yaml.YAMLError) -> str:
    """PyYAML's description of a syntax error, without the text it quotes (an anchor, a tag:
    content of a file that may be anything)."""
    problem = getattr(error, "problem", None) or getattr(error, "reason", None) or ""
    words = " ".join(problem.split("'")[0].split('"')[0].split())
    return words[:80] or "syntax error"


def read_yaml(path: Path, *, what: str = "an instance YAML") -> Any:
    """A YAML file parsed with the safe loader, bounded at every step, every failure one
    `InstanceError`: a regular file of at most 4 MB (`read_text`), at most `MAX_YAML_VALUES`
    values with aliases expanded, `MAX_YAML_DEPTH` levels, no duplicate keys."""
    text = read_text(path, what=what, error=InstanceError)
    shown = brief(str(path), 80)
    loader = _Loader(text, shown)
    try:
        root = loader.get_single_node()
        if root is None:  # an empty file
            return None
        _check_tree(loader, root, shown)
        return loader.construct_document(root)
    except RecursionError:  # the pure-Python parser nests a call per level
        raise InstanceError(f"file {shown} nests too deeply to be an instance") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InstanceError(f"file {shown} is not valid YAML{where}: {_problem(error)}") from None
    finally:
        loader.dispose()


def _given_path(text: str) -> Path | None:
    """`text` as a path when it is one: something exists there, or it has a folder or a YAML
    suffix. A path that exists wins over a shipped name; anything else is a name. What is at
    the path (a FIFO, a folder, nothing) is `read_yaml`'s to report, in one line."""
    path = Path(text)
    if "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        return path
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):  # EACCES, ELOOP, a NUL byte: not a name either
        pass
    return path


def instance_path(source: str | Path) -> Path:
    """Where an instance given by the caller lives: the path itself, or the shipped instance of
    that name (`mobilenet-cifar10`) when no file is there, so an installed package's examples
    work from any folder."""
    text = str(source)
    path = _given_path(text)
    if path is not None:
        return path
    shipped = named(instances_folder(), text)
    if shipped is None:
        raise InstanceError(
            f"`instance` {brief(text)} is neither a file nor a shipped instance; give the path "
            f"of an instance YAML or one of {', '.join(names(instances_folder()))}"
        )
    return shipped


def platform_path(name: str, search: Path | None = None, *, alternative: str | None = None
                  ) -> Path:
    """Where a platform named in an instance lives: beside the instance first, then shipped.
    `alternative` is what else the message offers (default: an inline mapping)."""
    if "/" in name or "\\" in name or name.startswith("."):
        raise InstanceError(
            f"`platform` must be a platform name such as `aws-lambda-x86_64`, got {brief(name)}"
        )
    folders = ([search / "platforms", search] if search else []) + [platforms_folder()]
    for folder in folders:
        candidate = folder / f"{name}.yaml"
        try:
            if candidate.is_file():
                return candidate
        except (OSError, ValueError):  # a name too long, or with a NUL byte, is no platform
            continue
    known = names(platforms_folder())
    raise InstanceError(
        f"`platform` {brief(name)} is not a known platform; use one of {', '.join(known)} "
        f"or {alternative or 'give the platform inline as a mapping'}"
    )


def _resolve_platform(value: Any, search: Path | None, *, caller: bool = False) -> Platform:
    """The platform an instance names (a name only: a file never points at another file), or
    the one its caller chose (`caller`: `--platform`, `platform=`), which may be a path too."""
    if not isinstance(value, str):
        return check_platform("platform", value)
    source = (_given_path(value) if caller else None) or platform_path(
        value, search, alternative="the path of a platform YAML" if caller else None)
    try:
        raw = read_yaml(source, what="a platform YAML")
    except InstanceError as error:
        raise InstanceError(f"`platform` {brief(value)}: {error}") from None
    try:
        return check_platform("platform", raw, document=f"`platform` {brief(value)} is no platform")
    except InstanceError as error:
        raise InstanceError(f"{error} (in {brief(str(source), 80)})") from None




def _servers(given: ParameterServer | ServerChoice) -> dict[str, Any]:
    """The instance's `parameter_server` and `servers` from its section: a catalogue's name is
    looked up among the shipped ones (a file never points at another file)."""
    if isinstance(given, ParameterServer):
        return {"parameter_server": given}
    where = "parameter_server.catalogue"
    catalogue = given.catalogue
    if isinstance(catalogue, str):
        found = named(servers_folder(), catalogue)
        if found is None:
            raise InstanceError(
                f"`{where}` {brief(catalogue)} is not a shipped catalogue; use one of "
                f"{', '.join(names(servers_folder()))} or give the catalogue inline")
        catalogue = read_yaml(found, what="a parameter-server catalogue")
    choices = server_choices(where, catalogue, given)
    return {"parameter_server": choices[0], "servers": choices if len(choices) > 1 else ()}


def load_instance(
    source: Instance | Mapping[str, Any] | str | Path, *, platform: str | None = None
) -> Instance:
    """An `Instance` from an instance, a mapping, a YAML path or a shipped instance's name
    (`mobilenet-cifar10`; a file at that path wins); `platform` (a name or a platform YAML's
    path) overrides its platform."""
    if isinstance(source, Instance):
        if platform is None:
            return source
        return dataclasses.replace(
            source, platform=_resolve_platform(platform, None, caller=True))
    search: Path | None = None
    default_name = "instance"
    document = "not an instance"
    if isinstance(source, (str, Path)):
        path = instance_path(source)
        raw = read_yaml(path)  # first: it refuses a symlink loop, a FIFO, a device in one line
        document = f"file {brief(str(path), 80)} is not an instance"
        try:
            search, default_name = path.resolve().parent, path.stem
        except (OSError, RuntimeError):  # the file was replaced by a symlink loop since it was read
            raise InstanceError(f"{document}: its path cannot be resolved") from None
    else:
        raw = source
    checked = instance_sections(raw, document=document)
    chosen = platform if platform is not None else checked["platform"]
    if not isinstance(chosen, (str, Mapping)):
        raise fail("platform", chosen, "a platform name or a mapping")
    return Instance(
        name=checked.get("name", default_name),
        platform=_resolve_platform(chosen, search, caller=platform is not None),
        workload=checked["workload"],
        profile=checked["profile"],
        **_servers(checked["parameter_server"]),
        objective=checked["objective"],
        limits=checked.get("limits", Limits()),
        fit=checked.get("fit"),
    )
