"""Workloads as plug-ins: the shipped two, a user's own factory module, and bad `--workload`s.

The training runs are real (2 worker processes around the session's redis-server) but short.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import lambdadnn.launcher.local
import lambdadnn.launcher.workloads
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.local import run_local
from lambdadnn.launcher.spec import LaunchSpec
from lambdadnn.launcher.workloads import SHIPPED, check_workload, load_workload

SHORT = LaunchSpec(functions=2, memory_mb=1769, local_batch=32, iterations=60, time_s=10.0,
                   restarts=0, platform="aws-lambda-x86_64", architecture="x86_64")

# A user's own model, as the README's example: a package on the launcher's sys.path only (not
# on PYTHONPATH), data as a torch Dataset rather than tensors.
USER_MODULE = '''
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from lambdadnn.launcher.workloads import Workload


def make_workload(seed: int) -> Workload:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    train, test = order[:1400], order[1400:]
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))
    return Workload(model, TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test]),
                    nn.functional.cross_entropy, lr=0.1, momentum=0.5)


def raises(seed: int) -> Workload:
    raise ValueError("no data here")


def wrong_type(seed: int) -> object:
    return (nn.Linear(64, 10), None)


def misfit(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(nn.Linear(10, 10), good.train, good.test, good.loss, lr=0.1)


def no_parameters(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(nn.ReLU(), good.train, good.test, good.loss, lr=0.1)


def listed_data(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(good.model, [1, 2, 3], good.test, good.loss, lr=0.1)


def uneven(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(good.model, good.train, (torch.zeros(5, 64), torch.zeros(4)), good.loss,
                    lr=0.1)


def negative_lr(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(good.model, good.train, good.test, good.loss, lr=-0.1)


def vector_loss(seed: int) -> Workload:
    good = make_workload(seed)
    return Workload(good.model, good.train, good.test,
                    lambda out, y: nn.functional.cross_entropy(out, y, reduction="none"), lr=0.1)


not_a_function = 3
'''


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh package `userpkg_<hex>` with `models` (the factories) and `broken` (raises)."""
    name = f"userpkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "models.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / name / "broken.py").write_text("raise RuntimeError('half-written module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_mlp_has_thirty_times_the_cnns_parameters_for_the_same_compute() -> None:
    """Same FLOPs per sample within 10%, ~30× the weights to exchange per iteration."""
    cnn, mlp = load_workload("digits-cnn", 0), load_workload("digits-mlp", 0)
    flops = []
    for workload in (cnn, mlp):
        assert isinstance(workload.train, tuple)
        with FlopCounterMode(display=False) as counter:
            workload.model(workload.train[0][:1])
        flops.append(counter.get_total_flops())
    assert 25 <= _parameters(mlp.model) / _parameters(cnn.model) <= 35
    assert flops[1] / flops[0] == pytest.approx(1, abs=0.1)


@pytest.mark.real
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_shipped_workload_trains_with_two_workers(name: str, redis_url: str) -> None:
    report = run_local(SHORT, redis_url=redis_url, workload=name)
    assert report.workload == name and report.iterations == SHORT.iterations
    # Untrained, the loss is ln 10 ≈ 2.3 and the accuracy 10%.
    assert report.final_loss is not None and report.final_loss < 1.0
    assert report.test_accuracy is not None and report.test_accuracy > 0.7


@pytest.mark.real
def test_a_users_factory_module_trains_in_the_workers(user_package: str, redis_url: str) -> None:
    """Found through the launcher's sys.path alone: the workers get its folder too."""
    reference = f"{user_package}.models:make_workload"
    report = run_local(SHORT, redis_url=redis_url, workload=reference)
    assert report.workload == reference
    assert report.final_loss is not None and report.final_loss < 1.5
    assert report.test_accuracy is not None and report.test_accuracy > 0.5


@pytest.mark.parametrize(
    ("reference", "fragment"),
    [
        ("resnet", "is not a shipped workload"),
        ("", "is not a shipped workload"),
        ("my pkg:make", "is not of the form `package.module:factory`"),
        ("{pkg}.missing:make_workload", "cannot import module"),
        ("{pkg}.broken:make_workload", "RuntimeError: half-written module"),
        ("{pkg}.models:nothing", "has no attribute 'nothing'"),
        ("{pkg}.models:not_a_function", "is a int, not a function"),
        ("{pkg}.models:raises", "its factory raised ValueError: no data here"),
        ("{pkg}.models:wrong_type", "returned a tuple, not a Workload"),
        ("{pkg}.models:misfit", "model and loss fail on two training samples"),
        ("{pkg}.models:no_parameters", "not a torch.nn.Module with trainable parameters"),
        ("{pkg}.models:listed_data", "its `train` is a list"),
        ("{pkg}.models:uneven", "its `test` inputs and labels differ in length (5 and 4)"),
        ("{pkg}.models:negative_lr", "its `lr` must be a number in (0, ∞), got -0.1"),
        ("{pkg}.models:vector_loss", "does not return a scalar tensor"),
    ],
)
def test_a_bad_workload_is_one_line_before_anything_starts(
    reference: str, fragment: str, user_package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def started(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a process started before the workload was checked")

    monkeypatch.setattr(lambdadnn.launcher.local, "redis_server", started)
    monkeypatch.setattr(lambdadnn.launcher.local._Invocation, "start", started)
    with pytest.raises(LaunchError) as caught:
        run_local(SHORT, workload=reference.format(pkg=user_package))
    message = str(caught.value)
    assert fragment in message and "`--workload`" in message, message
    assert "\n" not in message and "package.module:factory" in message


def test_without_torch_the_launcher_resolves_the_module_without_importing_it(
    user_package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AWS launch from a client without torch: the module must exist, it is not run."""
    monkeypatch.setattr(lambdadnn.launcher.workloads, "find_spec",
                        lambda name: None if name == "torch" else find_spec(name))
    check_workload("digits-mlp", 0)
    check_workload(f"{user_package}.broken:anything", 0)  # importing it would raise
    assert f"{user_package}.broken" not in sys.modules
    with pytest.raises(LaunchError, match=r"`--workload` .*is not importable here"):
        check_workload(f"{user_package}.missing:make_workload", 0)
    with pytest.raises(LaunchError, match="is not a shipped workload"):
        check_workload("resnet", 0)
