"""The container image of the Lambda worker: its Dockerfile, its build context, its build.

torch does not fit in a zip deployment or a layer, so the worker ships as an image built on
Amazon's Lambda Python base image (`launcher/Dockerfile`, package data). The context holds
the very code the zip deployment ships (`aws.package_worker`), so both deploy the same worker,
plus the user's workload folders, which land on the function's import path.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..inputs.files import brief
from . import LaunchError
from .aws import package_worker

__all__ = ["DEFAULT_ARCHITECTURE", "DEFAULT_TAG", "DOCKER_PLATFORMS", "WORKLOADS_FOLDER", "build",
           "build_context", "docker_command", "dockerfile"]

DEFAULT_TAG = "lambdadnn-worker"
DEFAULT_ARCHITECTURE = "x86_64"  # Lambda's default, and aws-lambda-x86_64's
WORKLOADS_FOLDER = "workloads"  # the Dockerfile copies its contents next to `lambdadnn/`
# Lambda's architecture → docker's platform (the base image is multi-arch).
DOCKER_PLATFORMS: dict[str, str] = {"x86_64": "linux/amd64", "arm64": "linux/arm64"}
# A docker image reference without digest: [host[:port]/]name[/name...][:tag], name lowercase.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"{_COMPONENT}(?::[0-9]+)?(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?",
                        re.ASCII)
_ELSEWHERE = ("run `lambdadnn image --context DIR` here, then `docker build` DIR on a machine "
              "that has docker")


def dockerfile() -> str:
    """The shipped Dockerfile's text (package data, so it is there in a wheel install too)."""
    return (files("lambdadnn.launcher") / "Dockerfile").read_text(encoding="utf-8")


def docker_command(tag: str, architecture: str, context: Path) -> list[str]:
    """`docker build --platform P -t TAG CONTEXT`, after checking the architecture and tag."""
    if architecture not in DOCKER_PLATFORMS:
        raise LaunchError(f"`--architecture` {brief(architecture)} is not a Lambda architecture: "
                          f"give one of {', '.join(DOCKER_PLATFORMS)} (the plan's `architecture`)")
    if _REFERENCE.fullmatch(tag) is None:
        raise LaunchError(f"`--tag` {brief(tag)} is not a docker image name: give a lowercase "
                          f"`[registry/]name[:tag]` such as {DEFAULT_TAG}:latest")
    return ["docker", "build", "--platform", DOCKER_PLATFORMS[architecture], "-t", tag,
            str(context)]


def _ignored(context: Path) -> Callable[[str, list[str]], set[str]]:
    """What a workload folder's copy leaves out: hidden files, caches, and the context itself
    (`--workload-dir .` with the context inside the current folder)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {name for name in names
                if name.startswith(".") or name == "__pycache__" or name.endswith(".pyc")
                or Path(folder, name).resolve() == context}

    return ignore


def _workload_entries(workload_dirs: Iterable[Path], context: Path) -> list[Path]:
    """The entries of the workload folders to copy, checked before anything is written: each
    must be a folder, and no two entries (nor one and `lambdadnn`) may share a name."""
    ignore = _ignored(context)
    owners: dict[str, str] = {"lambdadnn": "the worker's own package"}
    entries: list[Path] = []
    for folder in workload_dirs:
        if not folder.is_dir():
            raise LaunchError(f"`--workload-dir` {brief(str(folder), 80)} is not a folder: give "
                              "the folder that holds your workload's module or package")
        names = [entry.name for entry in folder.iterdir()]
        for name in sorted(set(names) - ignore(str(folder), names)):
            if name in owners:
                raise LaunchError(
                    f"`--workload-dir` {brief(str(folder), 80)} holds {brief(name)}, and so does "
                    f"{owners[name]}: rename one, since both land in the function's code folder"
                )
            owners[name] = f"`--workload-dir` {brief(str(folder), 80)}"
            entries.append(folder / name)
    return entries


def build_context(folder: Path, *, workload_dirs: Iterable[Path] = ()) -> Path:
    """Write a docker build context into `folder` (new or empty): the Dockerfile, the worker's
    code as the zip deployment ships it (`lambdadnn/`), and the workload folders' contents
    (`workloads/`, without hidden files and caches). Returns the folder."""
    folder = Path(folder)
    try:
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise LaunchError(f"`--context` {brief(str(folder), 80)} is not an empty folder: "
                              "give a new or empty one, so nothing of yours is overwritten")
        context = folder.resolve()
        entries = _workload_entries(workload_dirs, context)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(dockerfile(), encoding="utf-8")
        with zipfile.ZipFile(io.BytesIO(package_worker())) as code:
            code.extractall(folder)
        workloads = folder / WORKLOADS_FOLDER
        workloads.mkdir()
        for entry in entries:
            if entry.is_dir():
                shutil.copytree(entry, workloads / entry.name, ignore=_ignored(context))
            else:
                shutil.copy2(entry, workloads / entry.name)
    except OSError as error:  # shutil.Error (a broken link, an unreadable file) is one too
        raise LaunchError(
            f"cannot write the build context in {brief(str(folder), 80)}: "
            f"{brief(str(error), 120)[1:-1]}; check the folders and free space"
        ) from None
    return folder


def build(
    tag: str,
    *,
    architecture: str,
    workload_dirs: Iterable[Path] = (),
    context: Path | None = None,
    runner: Callable[..., subprocess.CompletedProcess[Any]] = subprocess.run,
) -> None:
    """Write the build context and run `docker build` on it for `architecture`.

    The context goes to `context` when given (and stays), else to a temporary folder removed
    afterwards. docker's own output goes to the terminal; its failure is one line pointing at it.
    """
    with tempfile.TemporaryDirectory(prefix="lambdadnn-image-") as scratch:
        folder = Path(scratch) / "context" if context is None else context
        command = docker_command(tag, architecture, folder)
        docker = shutil.which("docker")
        if docker is None:
            raise LaunchError(f"`--build` needs `docker` on PATH, and there is none: {_ELSEWHERE}")
        build_context(folder, workload_dirs=workload_dirs)
        try:
            done = runner([docker, *command[1:]], check=False)
        except OSError as error:
            raise LaunchError(f"cannot run {brief(docker, 80)}: {error.strerror or error}; "
                              f"{_ELSEWHERE}") from None
    if done.returncode != 0:
        raise LaunchError(f"`{' '.join(command[:-1])} CONTEXT` failed (exit status "
                          f"{done.returncode}): read docker's output above, fix it (is the "
                          "docker daemon running?) and build again")
