"""The instances and platforms shipped inside the package, found through `importlib.resources`.

They are package data of `lambdadnn` (`instances/*.yaml`, `instances/platforms/*.yaml`,
`instances/worlds/*.yaml`, `instances/servers/*.yaml`), so they are found the same way from a
checkout, an editable install and a wheel.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _folder(*parts: str) -> Path:
    # The package is installed as files on disk (never zipped), so its resources are paths.
    return Path(str(files("lambdadnn").joinpath("instances", *parts)))


def instances_folder() -> Path:
    """The folder of the shipped workload instances (`NAME.yaml`)."""
    return _folder()


def platforms_folder() -> Path:
    """The folder of the shipped platform catalogues (`NAME.yaml`)."""
    return _folder("platforms")


def servers_folder() -> Path:
    """The folder of the shipped parameter-server catalogues (`NAME.yaml`)."""
    return _folder("servers")


def worlds_folder() -> Path:
    """The folder of the shipped worlds of the independent engine (`NAME.yaml`)."""
    return _folder("worlds")


def names(folder: Path) -> list[str]:
    """The names (file stems) of the YAML files in a shipped folder, sorted."""
    return sorted(path.stem for path in folder.glob("*.yaml"))


def named(folder: Path, name: str) -> Path | None:
    """The shipped file called `name` (a stem such as `mobilenet-cifar10`) in `folder`, if any.

    Only an exact stem matches, so no text reaches outside the folder (`../x` is no name).
    """
    return folder / f"{name}.yaml" if name in names(folder) else None
