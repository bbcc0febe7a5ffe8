"""The worker's container image: the Dockerfile, the build context it is built from, and
`lambdadnn image` (print, `--context`, `--build` with a fake docker; no docker daemon here).

The context is checked by laying out the image's code folder the way the Dockerfile's own COPY
instructions say, then importing the worker and a user's workload from it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.aws import HANDLER
from lambdadnn.launcher.image import (
    DOCKER_PLATFORMS,
    build,
    build_context,
    docker_command,
    dockerfile,
)
from lambdadnn.solver.instance import ARCHITECTURES
from tests.hang_guard import HANG_GUARD_S
from tests.test_packaging import wheel  # noqa: F401  (the fixture: a wheel of the sources)

LAMBDA_BASE = "public.ecr.aws/lambda/python"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
USER_MODULE = '''"""A user's own workload: the factory contract, in a module of their project."""
from lambdadnn.launcher.workloads import Workload, digits_mlp


def factory(seed: int) -> Workload:
    return digits_mlp(seed)
'''


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each Dockerfile instruction, comments dropped and `\\`
    continuations joined, as docker reads them."""
    parsed: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        parsed.append((keyword.upper(), " ".join(arguments.split())))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return parsed


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 1 and out == "", (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder: their factory module, plus a hidden folder and a cache."""
    folder = tmp_path / "project"
    (folder / ".git").mkdir(parents=True)
    (folder / "__pycache__").mkdir()
    (folder / "mynet.py").write_text(USER_MODULE)
    return folder


def lay_out_image(context: Path, task_root: Path) -> list[str]:
    """Carry out the Dockerfile's COPY instructions into `task_root` (Lambda's /var/task), as
    docker does (a folder's contents into the target); returns the RUN commands after them."""
    after_copy: list[str] = []
    for keyword, arguments in instructions((context / "Dockerfile").read_text()):
        if keyword == "COPY":
            source, target = arguments.split()
            destination = Path(target.replace("${LAMBDA_TASK_ROOT}", str(task_root)))
            shutil.copytree(context / source, destination, dirs_exist_ok=True)
            after_copy = []
        elif keyword == "RUN":
            after_copy.append(arguments)
    return after_copy


# -- the Dockerfile ------------------------------------------------------------------------------

def test_dockerfile_builds_on_the_lambda_base_with_cpu_torch_and_the_handler() -> None:
    parsed = instructions(dockerfile())
    keywords = [keyword for keyword, _ in parsed]
    args = dict(arguments.split("=", 1) for keyword, arguments in parsed if keyword == "ARG")
    (base,) = [arguments for keyword, arguments in parsed if keyword == "FROM"]
    image, _, tag = base.partition(":")
    assert image == LAMBDA_BASE and tag == "${PYTHON_VERSION}"
    assert keywords.index("ARG") < keywords.index("FROM")  # the tag's ARG is seen by FROM
    assert re.fullmatch(r"3\.1[1-9]", args["PYTHON_VERSION"])
    assert args["TORCH_VERSION"] == "2.13.0"
    installs = [arguments for keyword, arguments in parsed
                if keyword == "RUN" and "pip install" in arguments]
    torch = [step for command in installs for step in command.split("&&") if "torch" in step]
    assert len(torch) == 1 and '"torch==${TORCH_VERSION}"' in torch[0]
    assert f"--index-url {CPU_INDEX}" in torch[0]  # never PyPI's CUDA build
    assert parsed[-1] == ("CMD", json.dumps([HANDLER]))


@pytest.mark.real
def test_the_image_installs_every_package_the_worker_imports() -> None:
    """Each third-party module imported by the lambdadnn modules a worker loads (training a
    shipped workload) is installed by the Dockerfile's pip lines."""
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import json, sys\n"
         "import lambdadnn.launcher.worker\n"
         "from lambdadnn.launcher.workloads import load_workload\n"
         "load_workload('digits-cnn', 0)\n"
         "print(json.dumps([m.__file__ for n, m in sys.modules.items()\n"
         "                  if n.split('.')[0] == 'lambdadnn' and getattr(m, '__file__', 0)]))"],
        capture_output=True, text=True, timeout=HANG_GUARD_S, check=True,
    )
    imported: set[str] = set()
    for path in json.loads(loaded.stdout):
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"lambdadnn", "__future__"}
    assert {"torch", "numpy", "redis", "sklearn"} <= third_party
    distributions = packages_distributions()

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    needed = {canonical(distributions[module][0]) for module in third_party}
    installs = " ".join(arguments for keyword, arguments in instructions(dockerfile())
                        if keyword == "RUN" and "pip install" in arguments)
    installed = {canonical(name) for name in re.findall(r'"([A-Za-z0-9_.-]+)[=<>!~]', installs)}
    assert needed <= installed, f"the image lacks {sorted(needed - installed)}"


def test_docker_platforms_cover_lambdas_architectures() -> None:
    assert set(DOCKER_PLATFORMS) == set(ARCHITECTURES)


def test_the_dockerfile_ships_in_the_wheel(wheel: Path) -> None:  # noqa: F811
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read("lambdadnn/launcher/Dockerfile").decode()
    assert shipped == dockerfile()


# -- the build context ---------------------------------------------------------------------------

@pytest.mark.real
def test_context_holds_a_complete_worker_and_the_users_workload(
    project: Path, tmp_path: Path
) -> None:
    context = build_context(tmp_path / "context", workload_dirs=[project])
    assert sorted(path.name for path in (context / "workloads").iterdir()) == ["mynet.py"]
    task_root = tmp_path / "var" / "task"
    smoke_tests = lay_out_image(context, task_root)
    env = {**os.environ, "PYTHONPATH": str(task_root), "LAMBDA_TASK_ROOT": str(task_root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    # The Dockerfile's own check that the worker imports, run as the build would.
    for command in smoke_tests:
        done = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, done.stderr
    loaded = subprocess.run(
        [sys.executable, "-c",
         "import lambdadnn.launcher.worker as worker, mynet\n"
         "from lambdadnn.launcher.workloads import load_workload\n"
         "load_workload('mynet:factory', 0)\n"
         "print(worker.__file__); print(mynet.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )
    assert loaded.returncode == 0, loaded.stderr
    worker_file, module_file = loaded.stdout.split()
    assert Path(worker_file) == task_root / "lambdadnn" / "launcher" / "worker.py"
    assert Path(module_file) == task_root / "mynet.py"


def test_a_context_inside_the_workload_folder_is_not_copied_into_itself(project: Path) -> None:
    (project / "build" / "context").mkdir(parents=True)  # made beforehand: empty is fine
    context = build_context(project / "build" / "context", workload_dirs=[project])
    copied = context / "workloads"
    assert sorted(path.name for path in copied.iterdir()) == ["build", "mynet.py"]
    assert list((copied / "build").iterdir()) == []


def test_context_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(LaunchError, match=r"^`--context` .* is not an empty folder: give a new"):
        build_context(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("clash", ["lambdadnn", "mynet.py"])
def test_context_refuses_workload_entries_that_would_collide(
    project: Path, tmp_path: Path, clash: str
) -> None:
    other = tmp_path / "other"
    (other / clash).mkdir(parents=True)
    folders = [other] if clash == "lambdadnn" else [project, other]
    with pytest.raises(LaunchError, match=rf"^`--workload-dir` .* holds '{clash}', and so does"):
        build_context(tmp_path / "context", workload_dirs=folders)
    assert not (tmp_path / "context").exists()  # checked before anything is written


def test_context_refuses_a_workload_dir_that_is_not_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mynet.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)  # a relative name: a long temporary folder is shortened
    with pytest.raises(LaunchError, match=r"^`--workload-dir` .*mynet\.py' is not a folder"):
        build_context(tmp_path / "context", workload_dirs=[Path("mynet.py")])


def test_an_unreadable_workload_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "data").symlink_to(tmp_path / "missing")  # a dangling link
    with pytest.raises(LaunchError, match=r"^cannot write the build context in .*; check the"):
        build_context(tmp_path / "context", workload_dirs=[folder])


@pytest.mark.parametrize("tag", ["lambdadnn-worker", "my_worker:v1.2",
                                 "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn:latest",
                                 "localhost:5000/team/worker"])
def test_docker_command_accepts_image_names(tag: str, tmp_path: Path) -> None:
    assert docker_command(tag, "arm64", tmp_path) == [
        "docker", "build", "--platform", "linux/arm64", "-t", tag, str(tmp_path)]


@pytest.mark.parametrize("tag", ["", "Worker", "my worker", "-t", "name:", "a//b", "é"])
def test_docker_command_refuses_what_docker_would(tag: str, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"^`--tag` .* is not a docker image name"):
        docker_command(tag, "x86_64", tmp_path)


# -- lambdadnn image -----------------------------------------------------------------------------

@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` alone on PATH that records its argv and the context's entries (shell
    built-ins only), and exits with $FAKE_DOCKER_EXIT."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$@" > "$FAKE_DOCKER_RECORD"\n'
        'for last; do :; done\n'
        'for entry in "$last"/*; do echo "${entry##*/}"; done > "$FAKE_DOCKER_RECORD.ls"\n'
        'exit "${FAKE_DOCKER_EXIT:-0}"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("FAKE_DOCKER_RECORD", str(tmp_path / "argv"))
    return tmp_path / "argv"


def test_image_prints_the_dockerfile() -> None:
    code, out, err = run("image")
    assert (code, err) == (0, "") and out == dockerfile()


def test_image_help_says_how_to_push_and_launch() -> None:
    code, out, _ = run("image", "--help")
    assert code == 0
    for step in ("aws ecr create-repository", "aws ecr get-login-password | docker login",
                 "docker tag", "docker push", "--backend aws --image-uri"):
        assert step in out, step


def test_image_context_writes_the_context_and_says_how_to_build_it(
    project: Path, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    code, out, err = run("image", "--context", str(context), "--workload-dir", str(project),
                         "--architecture", "arm64", "--tag", "worker:v2")
    assert code == 0, err
    assert out.splitlines()[-1].split() == docker_command("worker:v2", "arm64", context)
    assert (context / "Dockerfile").read_text() == dockerfile()
    assert (context / "lambdadnn" / "launcher" / "worker.py").is_file()
    assert (context / "workloads" / "mynet.py").read_text() == USER_MODULE


@pytest.mark.real
def test_image_build_runs_docker_for_the_architecture(fake_docker: Path) -> None:
    tag = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdadnn-worker:v1"
    code, out, err = run("image", "--build", "--tag", tag, "--architecture", "arm64")
    assert code == 0, err
    argv = fake_docker.read_text().splitlines()
    assert argv[:-1] == ["build", "--platform", "linux/arm64", "-t", tag]
    assert not Path(argv[-1]).exists()  # the temporary context is removed afterwards
    entries = Path(f"{fake_docker}.ls").read_text().split()
    assert entries == ["Dockerfile", "lambdadnn", "workloads"]
    assert out.startswith(f"built {tag} for arm64;")


@pytest.mark.real
def test_image_build_defaults_to_x86_64_and_keeps_a_given_context(
    fake_docker: Path, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    code, _, err = run("image", "--build", "--context", str(context))
    assert code == 0, err
    argv = fake_docker.read_text().splitlines()
    assert argv == ["build", "--platform", "linux/amd64", "-t", "lambdadnn-worker", str(context)]
    assert (context / "Dockerfile").read_text() == dockerfile()


@pytest.mark.real
def test_image_build_reports_dockers_failure_in_one_line(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_EXIT", "17")
    err = one_line_error(*run("image", "--build"))
    assert "failed (exit status 17): read docker's output above" in err


def test_image_build_without_docker_says_how_to_build_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no docker
    err = one_line_error(*run("image", "--build", "--tag", "worker"))
    assert err.startswith("error: `--build` needs `docker` on PATH")
    assert "`lambdadnn image --context DIR`" in err


def test_image_build_runs_no_docker_for_a_bad_architecture(fake_docker: Path) -> None:
    err = one_line_error(*run("image", "--build", "--architecture", "amd64"))
    assert err.startswith("error: `--architecture` 'amd64' is not a Lambda architecture")
    assert not fake_docker.exists()


@pytest.mark.parametrize("option", [("--tag", "worker"), ("--architecture", "arm64"),
                                    ("--workload-dir", ".")])
def test_build_options_without_a_build_are_refused(option: tuple[str, str]) -> None:
    err = one_line_error(*run("image", *option))
    assert err.startswith(f"error: `{option[0]}` is for a build: add `--context DIR`")


def test_build_runs_the_injected_runner_with_the_docker_on_path(
    fake_docker: Path, tmp_path: Path
) -> None:
    calls: list[list[str]] = []

    def runner(command: list[str], **_options: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 0)

    build("worker", architecture="x86_64", context=tmp_path / "context", runner=runner)
    assert calls == [[str(fake_docker.parent / "bin" / "docker"), "build", "--platform",
                      "linux/amd64", "-t", "worker", str(tmp_path / "context")]]
    assert not fake_docker.exists()  # the runner, not the real docker, ran
