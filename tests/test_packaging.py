"""The package as users install it: a wheel in a fresh venv, used from a folder with decoys.

Most ML repositories have their own `models/` package; lambdadnn must install only the
`lambdadnn` namespace, ship its instances and platforms as package data, and work from such a
folder both as a library and as a command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import lambdadnn
from lambdadnn.solver.pipeline import solve
from tests.hang_guard import HANG_GUARD_S
from tests.test_readme import Block, blocks

pytestmark = pytest.mark.real  # builds a wheel and installs it into a fresh venv

ROOT = Path(__file__).resolve().parent.parent
USER_INSTANCE = {  # a user's own workload on a platform given by name
    "name": "my-net",
    "platform": "aws-lambda-arm64",
    "workload": {"model_size_mb": 18, "dataset_size_mb": 148, "samples": 50000, "epochs": 6,
                 "local_batch": 64, "max_global_batch": 512},
    "profile": {"rate": {"slope": 0.03, "intercept": 5.6},
                "storage_bandwidth": {"slope": 0.002228, "intercept": 16.12, "max_mbps": 115}},
    "parameter_server": {"bandwidth_mbps": 1200, "function_bandwidth_mbps": 84,
                         "price_per_hour": 0.096},
    "objective": {"deadline_s": 1200},
}


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the sources (the checkout is left untouched)."""
    source = tmp_path_factory.mktemp("source") / "lambdadnn"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", ".mypy_cache",
        ".ruff_cache"))
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(out), str(source)], cwd=out)
    (built,) = out.glob("lambdadnn-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv with the wheel installed (no editable finder); its dependencies are those of
    the test venv, reached through a path file, since installing them again needs the network."""
    venv = tmp_path_factory.mktemp("venv") / "fresh"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv.parent)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
         cwd=venv.parent)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", where], cwd=venv.parent).strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield venv


@pytest.fixture()
def decoy_folder(tmp_path: Path) -> Path:
    """A user's project with its own `models/`, `solver/` and `cli.py`, and an instance."""
    for package in ("models", "solver"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise ImportError('decoy imported')\n")
    (tmp_path / "cli.py").write_text("raise ImportError('decoy imported')\n")
    (tmp_path / "my-net.yaml").write_text(yaml.safe_dump(USER_INSTANCE))
    return tmp_path


def test_wheel_holds_only_the_lambdadnn_namespace_and_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"lambdadnn", "lambdadnn-0.1.0.dist-info"}
    for data in ("lambdadnn/py.typed", "lambdadnn/instances/mobilenet-cifar10.yaml",
                 "lambdadnn/instances/platforms/aws-lambda-arm64.yaml",
                 "lambdadnn/instances/worlds/nominal.yaml",
                 "lambdadnn/simulator/world/engine.py",
                 "lambdadnn/cli.py", "lambdadnn/solver/pipeline.py"):
        assert data in names
    assert not any(name.startswith(("lambdadnn/tests/", "lambdadnn/benchmarks/"))
                   for name in names)
    assert any(name.endswith("licenses/LICENSE") for name in names)


def _outside_env() -> dict[str, str]:
    """This environment without what would point Python back at the checkout or its venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_wheel_solves_a_users_instance_from_a_folder_with_decoys(
    fresh_venv: Path, decoy_folder: Path
) -> None:
    expected = solve(USER_INSTANCE).to_dict()
    env = _outside_env()
    script = ("import json, lambdadnn; from lambdadnn import solve, Plan, LambdaDnnError; "
              "p = solve('my-net.yaml'); assert isinstance(p, Plan); "
              "print(json.dumps([lambdadnn.__file__, p.functions, p.memory_mb, p.cost_usd, "
              "p.platform]))")
    where, functions, memory_mb, cost_usd, platform = json.loads(
        _run([str(fresh_venv / "bin" / "python"), "-c", script], cwd=decoy_folder, env=env))
    assert Path(where).is_relative_to(fresh_venv)  # the installed copy, not the checkout
    assert (functions, memory_mb, platform) == (
        expected["functions"], expected["memory_mb"], "aws-lambda-arm64")
    assert cost_usd == pytest.approx(expected["cost_usd"], rel=1e-12)
    shown = json.loads(_run([str(fresh_venv / "bin" / "lambdadnn"), "solve", "my-net.yaml",
                             "--json"], cwd=decoy_folder, env=env))
    assert (shown["functions"], shown["memory_mb"]) == (functions, memory_mb)


def test_installed_package_takes_shipped_instances_by_name(
    fresh_venv: Path, tmp_path: Path
) -> None:
    """A user who installed the wheel names a shipped instance, from a folder that has none."""
    expected = solve(ROOT / "instances" / "mobilenet-cifar10.yaml")
    env = _outside_env()
    script = ("import json; from lambdadnn import Submission, load_instance, solve, solve_many; "
              "i = load_instance('mobilenet-cifar10'); p = solve('mobilenet-cifar10'); "
              "s = solve_many([Submission('resnet50-cifar10')], concurrency=1000); "
              "print(json.dumps([i.name, p.functions, p.memory_mb, p.cost_usd, s.jobs[0].met]))")
    name, functions, memory_mb, cost_usd, met = json.loads(
        _run([str(fresh_venv / "bin" / "python"), "-c", script], cwd=tmp_path, env=env))
    assert (name, functions, memory_mb, met) == (
        "mobilenet-cifar10", expected.functions, expected.memory_mb, True)
    assert cost_usd == pytest.approx(expected.cost_usd, rel=1e-12)
    shown = json.loads(_run([str(fresh_venv / "bin" / "lambdadnn"), "solve", "mobilenet-cifar10",
                             "--json"], cwd=tmp_path, env=env))
    assert (shown["functions"], shown["memory_mb"]) == (functions, memory_mb)


@pytest.mark.parametrize("block", [b for b in blocks() if b.language == "python"
                                   and not b.body.startswith("# ")], ids=lambda b: b.name)
def test_readmes_python_runs_for_an_installed_user(
    fresh_venv: Path, tmp_path: Path, block: Block
) -> None:
    """The README's Python, run by the wheel's venv from an empty folder (no repository paths;
    its `# file.py` blocks are files to write, run by tests/test_readme.py)."""
    env = _outside_env()
    _run([str(fresh_venv / "bin" / "python"), "-c", block.body], cwd=tmp_path, env=env)


def test_installed_compare_finds_its_shipped_workloads(
    fresh_venv: Path, decoy_folder: Path
) -> None:
    env = _outside_env()
    report = json.loads(_run([str(fresh_venv / "bin" / "lambdadnn"), "compare", "--jobs", "3",
                              "--strategies", "lambdadnn", "--json"], cwd=decoy_folder, env=env))
    assert report["jobs"] == 3


def test_editable_install_ignores_decoys_in_the_working_folder(decoy_folder: Path) -> None:
    script = "from lambdadnn import solve; print(solve('my-net.yaml').functions)"
    shown = _run([sys.executable, "-c", script], cwd=decoy_folder)
    assert int(shown) == solve(USER_INSTANCE).functions


def test_public_api_names_resolve() -> None:
    for name in lambdadnn.__all__:
        assert getattr(lambdadnn, name) is not None
    assert set(lambdadnn.__all__) == set(lambdadnn._EXPORTS)
    with pytest.raises(AttributeError):
        _ = lambdadnn.no_such_name  # type: ignore[attr-defined]
