"""The performance and cost model of MODEL.md, evaluated: every figure of any batch of plans.

The equations are SymPy expressions in `models.equations`, the one source of truth; they are
compiled once into one numpy program (`models.compiled`, cached between processes), and every
caller — the search, the bounds, `evaluate`, the re-check, the simulator — gets its figures
from it. A figure is computed by the same statements whatever else is asked for with it, so
the time a plan is checked against a deadline with is the same number everywhere.
This module imports numpy only.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from .compiled import Program, cache_directory, cache_key, load
from .errors import DerivationError

Array = npt.NDArray[np.float64]

# b_l = b_g^max·(1/n) may round to 1 − 1ulp at n = b_g^max. Both are integers ≤ 10^12 (the
# loader's cap), so a b_l truly below 1 is at most 1 − 10^-12: this slack only absorbs rounding.
BATCH_SLACK = 1e-13


@dataclass(frozen=True)
class Figures:
    """The model's figures for a batch of plans (numpy arrays broadcast from `n` and `m`)."""

    global_batch: Array
    local_batch: Array
    iterations: Array
    rate: Array
    storage_bandwidth: Array
    t_load: Array
    t_comp_total: Array
    t_comm_total: Array
    t_train: Array
    restarts: Array
    t_restart: Array
    t_startup: Array
    t_cold: Array
    time: Array
    deadline_time: Array
    cost_functions: Array
    cost_ps: Array
    cost_requests: Array
    cost: Array

    @property
    def valid(self) -> npt.NDArray[np.bool_]:
        """MODEL.md's validity: a positive rate and storage bandwidth, a local batch of ≥ 1."""
        batch_ok = self.local_batch >= 1 - BATCH_SLACK
        return (self.rate > 0) & (self.storage_bandwidth > 0) & batch_ok


# Every figure a plan's report has (`models.equations.FIGURES`).
FIGURE_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Figures))
# Figures the solver needs beyond a plan's report (`models.equations.AUXILIARY`): the cost
# weight, and the crash loads whose reaching 1 means a run never finishes.
AUXILIARY = ("weight", "crash_load", "crash_load_quantile")

_loaded: list[Program] = []
_lock = threading.Lock()


def program() -> Program:
    """The process's compiled model: loaded or derived on first use, by one thread, and
    checked to compute exactly the figures named here."""
    if not _loaded:
        with _lock:
            if not _loaded:
                loaded = load(cache_directory(), cache_key())
                if set(loaded.figures.outputs) != {*FIGURE_NAMES, *AUXILIARY}:
                    raise DerivationError(
                        f"the model computes {sorted(loaded.figures.outputs)}, not the figures "
                        f"`models.performance` names ({sorted({*FIGURE_NAMES, *AUXILIARY})})"
                    )
                _loaded.append(loaded)
    return _loaded[0]


def parameter_values(params: Mapping[str, float]) -> tuple[float, ...]:
    """The parameters in the program's order, as numpy floats (an overflow gives inf, never an
    exception), so callers can pass them once to `figures`."""
    return tuple(np.float64(params[name]) for name in program().parameters)


def parameter_index(name: str) -> int:
    """Where parameter `name` is in a parameter vector (`parameter_values`)."""
    return _parameter_indices()[name]


@functools.cache
def _parameter_indices() -> dict[str, int]:
    return {name: i for i, name in enumerate(program().parameters)}


def per_server(columns: list[tuple[float, ...]]) -> tuple[float, ...]:
    """One parameter vector for several servers' vectors (`columns`, one each): a parameter
    they share stays a number, one that differs becomes an array with one entry per server,
    which `at` picks rows from. `figures` broadcasts such arrays like n and m."""
    merged = zip(*columns, strict=True)
    return tuple(
        same[0] if len(set(same)) == 1 else cast(float, np.array(same, dtype=np.float64))
        for same in merged
    )


def at(values: tuple[float, ...], which: npt.NDArray[np.int64], *,
       column: bool = False) -> tuple[float, ...]:
    """`values` (from `per_server`) for rows on servers `which` (as a column of a 2-D array
    with `column`): each per-server array indexed, each number as it is."""
    index = which[:, None] if column else which
    return tuple(cast(float, value[index]) if isinstance(value, np.ndarray) else value
                 for value in values)


def deadline_figure(noise: NoiseTerms | None) -> str:
    """The figure checked against the deadline: the model's time, or its quantile under noise."""
    return "time" if noise is None else "deadline_time"


class NoiseTerms(Protocol):
    """Per-plan noise terms (`models.equations.NOISE_SYMBOLS` order) for function counts."""

    def terms(self, functions: Array) -> tuple[Array | float, ...]: ...


def figures(
    values: tuple[float, ...], functions: npt.ArrayLike, memory_mb: npt.ArrayLike,
    names: tuple[str, ...], noise: NoiseTerms | None = None,
) -> dict[str, Array]:
    """Selected figures for plans `functions` × `memory_mb` (broadcast); the hot path.

    Without `noise` the figures are MODEL.md's model exactly.
    """
    compiled = program()
    n_arr = np.asarray(functions, dtype=np.float64)
    m_arr = np.asarray(memory_mb, dtype=np.float64)
    shape = np.broadcast(n_arr, m_arr).shape
    terms = compiled.exact if noise is None else noise.terms(n_arr)
    with np.errstate(all="ignore"):
        results = compiled.function(names)(n_arr, m_arr, *values, *terms)
    out = {}
    for name, result in zip(names, results, strict=True):
        array = np.asarray(result, dtype=np.float64)
        out[name] = array if array.shape == shape else np.broadcast_to(array, shape)
    return out


def evaluate(
    params: Mapping[str, float], functions: npt.ArrayLike, memory_mb: npt.ArrayLike,
    noise: NoiseTerms | None = None,
) -> Figures:
    """Every figure of the model for plans `functions` × `memory_mb` (numpy broadcasting)."""
    found: dict[str, Any] = figures(
        parameter_values(params), functions, memory_mb, FIGURE_NAMES, noise
    )
    return Figures(**found)
