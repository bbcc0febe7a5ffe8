"""What the worker trains: the workload contract, the shipped workloads and `--workload` lookup.

A workload is named `digits-cnn` / `digits-mlp` (shipped) or `package.module:factory`. Only
the user names code to run (`--workload`, or in Python): a file (a plan JSON, an instance
YAML) may name a shipped workload only, so receiving one never runs its sender's code
(`resolve_workload`). The factory takes the launch's seed (every rank calls it with the same
one, so every rank builds the same initial model and the same train/test split) and returns a
`Workload`: the model, the train and test data, the loss and the SGD settings. Sharding,
batching, the channel and checkpoints stay the launcher's. Whatever the user's code raises
(`sys.exit()` included; Ctrl-C excepted) is one line naming the workload, and the launching
process's check can be given a time limit (`load_workload`).

This module imports no torch at module level: the AWS launcher resolves a workload without it.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Union

from ..inputs.files import brief
from ..inputs.numbers import finite
from . import LaunchError

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

__all__ = ["DEFAULT_WORKLOAD", "SHIPPED", "Workload", "check_workload", "digits_cnn",
           "digits_mlp", "length", "load_workload", "module_root", "resolve_workload", "sample"]

DEFAULT_WORKLOAD = "digits-cnn"
SHIPPED: dict[str, str] = {
    "digits-cnn": "lambdadnn.launcher.workloads:digits_cnn",
    "digits-mlp": "lambdadnn.launcher.workloads:digits_mlp",
}
_TEST_FRACTION = 0.25
# What the user's code may raise and be refused for in one line: an error, or an exit
# (`sys.exit()`). Ctrl-C, the time limit's `_Expired` and other control flow (asyncio's
# CancelledError, GeneratorExit) propagate.
_RAISED = (Exception, SystemExit)
_FIX = (f"give one of {', '.join(SHIPPED)} or `package.module:factory` (a function of the seed "
        "returning a `lambdadnn.launcher.workloads.Workload`)")

# Train or test data: two tensors (inputs, labels) of the same length, or a map-style torch
# Dataset whose items are (input, label) pairs.
Data = Union["tuple[torch.Tensor, torch.Tensor]", "Dataset[tuple[torch.Tensor, torch.Tensor]]"]


@dataclass(frozen=True)
class Workload:
    """What a factory returns: the launcher trains `model` by SGD with momentum on `train`.

    `loss(outputs, labels)` must return the batch's mean loss as a scalar tensor; the report's
    `final_loss` is it over `train`, and `test_accuracy` is measured on `test` when the model
    outputs one score per class (2-D) for integer labels (else it is null).
    """

    model: torch.nn.Module
    train: Data
    test: Data
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    lr: float
    momentum: float = 0.9


def _digits(seed: int, *, flat: bool) -> tuple[Data, Data]:
    """A fixed stratified split of scikit-learn's digits by seed, pixels scaled to [0, 1]."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    images = images.reshape(len(images), -1) if flat else images[:, None, :, :]
    train_x, test_x, train_y, test_y = train_test_split(
        images, digits.target, test_size=_TEST_FRACTION, random_state=seed,
        stratify=digits.target,
    )
    return ((torch.from_numpy(train_x), torch.from_numpy(train_y).long()),
            (torch.from_numpy(test_x), torch.from_numpy(test_y).long()))


def digits_cnn(seed: int) -> Workload:
    """Two conv layers and a linear classifier: ~10k parameters for ~0.3 M MACs per sample."""
    import torch
    from torch import nn

    train, test = _digits(seed, flat=False)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
    )
    return Workload(model, train, test, nn.functional.cross_entropy, lr=0.05)


def digits_mlp(seed: int) -> Workload:
    """64→512→512→10: ~300k parameters for about the CNN's compute, so ~30× more to exchange."""
    import torch
    from torch import nn

    train, test = _digits(seed, flat=True)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10),
    )
    return Workload(model, train, test, nn.functional.cross_entropy, lr=0.05)


class _Expired(BaseException):
    """Raised into the user's code when its time is up: not an `Exception`, so that the code's
    own `except Exception` does not swallow it."""


def _refuse(reference: str, problem: str) -> NoReturn:
    raise LaunchError(f"`--workload` {brief(reference, 80)}: {problem}; {_FIX}")


def _raised(error: BaseException) -> str:
    """What the user's code raised, for one line: `SystemExit(7)`, `ValueError: message`."""
    if isinstance(error, SystemExit):
        return f"SystemExit({brief(error.code, 40)})"
    text = brief(str(error), 80)[1:-1]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def _deadline(reference: str, seconds: float | None) -> Iterator[None]:
    """Refuse `reference` if the code inside is still running after `seconds` (None: no limit).

    SIGALRM raises `_Expired` in the main thread, which interrupts Python code and the waits
    Python makes (sleeping, sockets, locks, a child process it waits for) but not native code
    that never returns to the interpreter, nor code that catches BaseException. Elsewhere than
    the main thread, without SIGALRM (Windows), or while another timer is set, there is no
    limit (a thread cannot be stopped; a child process would build the model twice).
    """
    if (seconds is None or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            yield
        finally:  # disarmed first: an alarm due meanwhile still lands in the `except` below
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:
        _refuse(reference, f"its import, factory and model check did not finish within "
                           f"{seconds:g} s: make them return sooner, or allow more with "
                           "`--factory-timeout-s`")
    finally:
        signal.signal(signal.SIGALRM, previous)


def _split(reference: str) -> tuple[str, str]:
    """(module, attribute) of a shipped name or `package.module:factory`, checked in form."""
    target = SHIPPED.get(reference, reference)
    module, colon, attribute = target.partition(":")
    if not colon:
        _refuse(reference, "is not a shipped workload")
    if not (all(part.isidentifier() for part in module.split("."))
            and attribute.isidentifier()):
        _refuse(reference, "is not of the form `package.module:factory`")
    return module, attribute


def _factory(reference: str) -> Callable[[int], object]:
    module_name, attribute = _split(reference)
    try:
        module = importlib.import_module(module_name)
    except _RAISED as error:  # a missing module, or one that fails (or exits) while importing
        _refuse(reference, f"cannot import module {module_name!r} ({_raised(error)})")
    factory = getattr(module, attribute, None)
    if factory is None:
        _refuse(reference, f"module {module_name!r} has no attribute {attribute!r}")
    if not callable(factory):
        _refuse(reference, f"{attribute!r} is a {type(factory).__name__}, not a function")
    return factory  # type: ignore[no-any-return]


def _size(reference: str, data: object, name: str) -> int:
    """The sample count of train or test data, refusing anything but the two forms."""
    import torch
    from torch.utils.data import Dataset

    pair = (isinstance(data, tuple) and len(data) == 2
            and all(isinstance(part, torch.Tensor) and part.dim() >= 1 for part in data))
    if not pair and not (isinstance(data, Dataset) and hasattr(data, "__len__")):
        _refuse(reference, f"its `{name}` is a {type(data).__name__}, not a pair of tensors "
                           "(inputs, labels) nor a map-style torch Dataset")
    size = length(data)  # type: ignore[arg-type]
    if pair and len(data[1]) != size:  # type: ignore[index]
        _refuse(reference, f"its `{name}` inputs and labels differ in length "
                           f"({size} and {len(data[1])})")  # type: ignore[index]
    if size < 1:
        _refuse(reference, f"its `{name}` data is empty")
    return size


def length(data: Data) -> int:
    """The sample count of either form of data."""
    return len(data[0]) if isinstance(data, tuple) else len(data)  # type: ignore[arg-type]


def sample(data: Data, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (inputs, labels) batch of `index` from either form of data."""
    from torch.utils.data import default_collate

    if isinstance(data, tuple):
        return data[0][index], data[1][index]
    x, y = default_collate([data[int(i)] for i in index])
    return x, y


def load_workload(reference: str, seed: int, *, timeout_s: float | None = None) -> Workload:
    """Import the factory, call it with `seed` and check what it returns, or one line why not.

    The check runs the model and loss on two training samples, so a model that does not fit
    its data fails here, in the launching process, not in every worker. With `timeout_s`,
    the import, the call and the check are refused when not done by then (`_deadline`).
    """
    import torch

    with _deadline(reference, timeout_s):
        try:
            workload = _factory(reference)(seed)
        except LaunchError:
            raise
        except _RAISED as error:
            _refuse(reference, f"its factory raised {_raised(error)}")
        if not isinstance(workload, Workload):
            _refuse(reference,
                    f"its factory returned a {type(workload).__name__}, not a Workload")
        if not isinstance(workload.model, torch.nn.Module) or not any(
                p.requires_grad for p in workload.model.parameters()):
            _refuse(reference, "its `model` is not a torch.nn.Module with trainable parameters")
        train = _size(reference, workload.train, "train")
        _size(reference, workload.test, "test")
        for key, value, high in (("lr", workload.lr, math.inf),
                                 ("momentum", workload.momentum, 1)):
            checked = finite(value)
            if checked is None or not 0 <= checked < high or (key == "lr" and checked <= 0):
                _refuse(reference, f"its `{key}` must be a number in "
                                   f"{'(0, ∞)' if key == 'lr' else '[0, 1)'}, "
                                   f"got {brief(value)}")
        try:
            inputs, labels = sample(workload.train, torch.arange(min(2, train)))
            loss = workload.loss(workload.model(inputs), labels)
        except _RAISED as error:
            _refuse(reference,
                    f"its model and loss fail on two training samples ({_raised(error)})")
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            _refuse(reference,
                    "its `loss` does not return a scalar tensor (the batch's mean loss)")
    return workload


def check_workload(reference: str, seed: int, *, timeout_s: float | None = None) -> None:
    """Refuse a bad `--workload` in the launching process, before anything starts.

    With torch here, the factory is called once and its result checked (`load_workload`,
    within `timeout_s`); without (an AWS launch from a light client), the factory's module
    must at least exist.
    """
    if find_spec("torch") is not None:
        load_workload(reference, seed, timeout_s=timeout_s)
        return
    module, _attribute = _split(reference)
    try:
        found = find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        _refuse(reference, f"module {module!r} is not importable here")


def resolve_workload(
    option: str | None, *, recorded: str | None = None, field: str = "fit.workload",
    source: str = "the plan",
) -> str:
    """The workload a command runs; the one place the current folder joins the import path.

    `option` is what the user named (`--workload`): naming a `package.module:factory` is
    their choice of code, so it is looked up in the current folder first, as `python -m`
    does (and the workers get the folder it was imported from, `module_root`). Without it,
    `recorded` (what `field` in `source` names, a profiled instance's `fit.workload`) runs
    only if it is shipped, and the path is left alone: a received file never chooses code.
    Neither: `DEFAULT_WORKLOAD`.
    """
    if option is None:
        if recorded is None:
            return DEFAULT_WORKLOAD
        if recorded in SHIPPED:
            return recorded
        try:
            _split(recorded)
            fix = f"--workload {shlex.quote(recorded)}" if len(recorded) <= 200 else ""
        except LaunchError:  # not even of the form: suggest the form, not the text
            fix = ""
        raise LaunchError(
            f"`{field}` in {source} names {brief(recorded, 80)}, which is not a shipped "
            f"workload ({', '.join(SHIPPED)}); a file may name only those: name your own code "
            f"on the command line: {fix or '--workload package.module:factory'}"
        )
    if option not in SHIPPED:
        _split(option)  # a malformed name is refused before the path changes
        folder = os.getcwd()
        if folder not in sys.path:
            sys.path.insert(0, folder)
    return option


def module_root(reference: str) -> Path | None:
    """The `sys.path` folder a user's factory module was imported from, for the workers' path.

    None for shipped workloads and for modules not imported from a file.
    """
    if reference in SHIPPED:
        return None
    module = sys.modules.get(_split(reference)[0])
    origin = getattr(module, "__file__", None)
    if origin is None:
        return None
    path = Path(origin).resolve().parent
    depth = reference.partition(":")[0].count(".") + (Path(origin).name == "__init__.py")
    for _level in range(depth):
        path = path.parent
    return path
