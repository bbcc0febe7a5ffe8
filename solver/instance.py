"""Provisioning instances: the frozen schema of one provisioning question, its caps, and the
views the solver derives from it (the model's parameter vector, a copy at another deadline).

Reading a file or a mapping is `solver.instance_yaml.load_instance`, which checks every field
with `solver.instance_validation` against the caps here.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from ..inputs.errors import InstanceError
from ..inputs.numbers import number
from ..models.performance import parameter_index, parameter_values

MAX_GRID_POINTS = 1_000_000
MAX_CONCURRENCY = 1_000_000
MAX_INTEGER = 10**12  # far beyond any real job; models.performance.BATCH_SLACK relies on it
# Caps on physical magnitudes. Each is orders of magnitude beyond any real job or cloud, yet
# keeps the model's products (e.g. epochs x samples x model size / bandwidth) far inside the
# float range, so absurd input is refused here, naming its field, instead of overflowing in
# the solver.
MAX_MEGABYTES = 10**7  # 10 TB: model and dataset sizes, memory sizes (Lambda offers 10 GB)
MAX_RATE = 1e7  # samples/s and MB/s, and their per-MB slopes: beyond any machine or link
MAX_PRICE_USD = 1e6  # per GB-second, request or hour: a million times any cloud price
MAX_SECONDS = 1e9  # about 32 years: deadlines, timeouts, margins and restart overheads
MAX_TEXT_CHARS = 100  # names appear in every table and message
MAX_NOTE_CHARS = 300  # a fitted parameter's note: one sentence on why it is not identified
MB_PER_VCPU = 1769  # AWS Lambda: 1,769 MB of memory buy one vCPU (the local backend copies it)
MAX_VCPU = 1e7  # a platform's total vCPU: beyond any machine or account (Lambda's is 6e6)
MAX_FIT_NUMBER = float(MAX_INTEGER)  # a number in `fit`: a parameter, a run's measurement
ARCHITECTURES = ("x86_64", "arm64")  # AWS Lambda's instruction set architectures
BACKENDS = ("local", "aws")  # where `lambdadnn profile` measures (the launcher's backends)


@dataclass(frozen=True)
class MemoryGrid:
    """The memory sizes a platform offers: min, min + step, ..., up to max."""

    min_mb: int
    max_mb: int
    step_mb: int

    def values(self) -> npt.NDArray[np.float64]:
        return np.arange(self.min_mb, self.max_mb + 1, self.step_mb, dtype=np.float64)

    @property
    def size(self) -> int:
        return (self.max_mb - self.min_mb) // self.step_mb + 1


@dataclass(frozen=True)
class Platform:
    name: str
    memory: MemoryGrid
    price_per_gb_second: float
    price_per_request: float
    timeout_s: float
    timeout_margin_s: float
    restart_overhead_s: float
    max_concurrency: int
    architecture: str = "x86_64"  # the CPU the functions run on, and a plan deploys to
    max_vcpu: float | None = None  # n·m/MB_PER_VCPU may not exceed it (a machine's CPUs)

    @property
    def vcpu_memory_mb(self) -> int | None:
        """The most memory all functions together may have, ⌊max_vcpu·1769⌋ MB, or None.

        n·m/1769 ≤ max_vcpu ⇔ n·m ≤ max_vcpu·1769 ⇔ n·m ≤ this (n·m is an integer), computed
        exactly (no float rounding), so a plan exactly at the limit is allowed.
        """
        if self.max_vcpu is None:
            return None
        return math.floor(Fraction(self.max_vcpu) * MB_PER_VCPU)


@dataclass(frozen=True)
class Workload:
    model_size_mb: float
    dataset_size_mb: float
    samples: int
    epochs: int
    local_batch: int
    max_global_batch: int
    min_memory_mb: float | None = None


@dataclass(frozen=True)
class RateProfile:
    slope: float
    intercept: float
    saturates_at_mb: float | None = None


@dataclass(frozen=True)
class StorageProfile:
    slope: float
    intercept: float
    max_mbps: float


@dataclass(frozen=True)
class StartupProfile:
    """Seconds from invocation to the first iteration, per round: base_s + per_function_s·n."""

    base_s: float = 0.0
    per_function_s: float = 0.0


@dataclass(frozen=True)
class Profile:
    """The measured profile; `latency_s` and `startup` (model v2) are 0 when absent."""

    rate: RateProfile
    storage_bandwidth: StorageProfile
    latency_s: float = 0.0  # per exchange: each iteration pays it on the push and the pull
    startup: StartupProfile = StartupProfile()


@dataclass(frozen=True)
class ParameterServer:
    """The parameter server a plan runs with: `shards` machines of one type, each holding
    1/shards of the parameters behind its own NIC of `bandwidth_mbps` (shared by the n
    functions), each paid `price_per_hour`; a function's own link carries at most
    `function_bandwidth_mbps` over all its shards, and each message to a shard costs
    `message_s` on top of the profile's latency. `type` names the catalogue entry (None: a
    machine given by its figures, as `parameter_server:` always could)."""

    bandwidth_mbps: float
    function_bandwidth_mbps: float
    price_per_hour: float
    shards: int = 1
    type: str | None = None
    message_s: float = 0.0

    @property
    def choice(self) -> dict[str, Any] | None:
        """The type and shard count a plan names (`"ps"`), when this is a catalogue's type or
        more than one machine (None: the one machine `parameter_server:` gave)."""
        if self.type is None and self.shards == 1:
            return None
        return {"type": self.type, "shards": self.shards}


def _server_parameters(server: ParameterServer) -> dict[str, float]:
    """The model's parameters that a parameter server sets, by symbol name."""
    return {
        "B_p": server.bandwidth_mbps,
        "B_fmax": server.function_bandwidth_mbps,
        "p_ps": server.price_per_hour,
        "k_ps": float(server.shards),
        "c_msg": server.message_s,
    }


@dataclass(frozen=True)
class Objective:
    deadline_s: float


@dataclass(frozen=True)
class Limits:
    max_functions: int | None = None


Scalar = int | float | str | None
# A free-form record (a profiling run, the machine) as (key, value) pairs in the file's order:
# tuples rather than dicts so that an `Instance` stays hashable (simulators memoise on it).
Record = tuple[tuple[str, Scalar | tuple[Scalar, ...]], ...]


def _plain(value: Scalar | tuple[Scalar, ...]) -> Scalar | list[Scalar]:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class FitParameter:
    """One fitted parameter: its value, standard error (None: not estimated) and whether the
    profiling design could identify it (`note` says why not, or how it was fixed)."""

    name: str
    value: float
    stderr: float | None
    identified: bool
    note: str | None = None


@dataclass(frozen=True)
class Fit:
    """How the profile was measured (`lambdadnn profile`): for which launcher workload, on
    which backend, at what profiling time and cost. Never read by the solver's model; the
    launcher predicts a run only for the workload and backend the profile was fitted on."""

    workload: str
    backend: str
    seconds: float
    cost_usd: float
    parameters: tuple[FitParameter, ...] = ()
    runs: tuple[Record, ...] = ()
    machine: Record = ()
    # the correlation of the errors of `profile.rate.slope` and `.intercept` (their joint
    # least-squares fit makes it strongly negative); None: not recorded, taken as the worst
    rate_correlation: float | None = None

    def to_mapping(self) -> dict[str, Any]:
        """The `fit:` section as plain YAML types, in the loader's schema."""
        out: dict[str, Any] = {
            "workload": self.workload, "backend": self.backend, "seconds": self.seconds,
            "cost_usd": self.cost_usd,
            "parameters": {
                p.name: {
                    "value": p.value, "stderr": p.stderr, "identified": p.identified,
                    **({} if p.note is None else {"note": p.note}),
                }
                for p in self.parameters
            },
        }
        if self.runs:
            out["runs"] = [{key: _plain(value) for key, value in run} for run in self.runs]
        if self.machine:
            out["machine"] = {key: _plain(value) for key, value in self.machine}
        if self.rate_correlation is not None:
            out["rate_correlation"] = self.rate_correlation
        return out


@dataclass(frozen=True)
class Instance:
    """One provisioning question: a training job, its measured profile, a platform, a deadline."""

    name: str
    platform: Platform
    workload: Workload
    profile: Profile
    parameter_server: ParameterServer
    objective: Objective
    limits: Limits
    fit: Fit | None = None  # how the profile was measured; no part of the model
    # The parameter servers `solve()` chooses among (each a type at a shard count, from a
    # catalogue); () when `parameter_server` is the one given. With choices, `parameter_server`
    # is the first of them, and a plan's `solved_from` holds the one chosen.
    servers: tuple[ParameterServer, ...] = ()

    def __post_init__(self) -> None:
        # A copy given another `parameter_server` but keeping the choices would be solved on
        # the choices, silently: say so instead.
        if self.servers and self.parameter_server != self.servers[0]:
            raise InstanceError(
                f"instance {self.name!r}: `parameter_server` must be the first of `servers` "
                "when there are choices; to run on one machine, replace both "
                "(`servers=()`)")

    @property
    def max_functions(self) -> int:
        """The largest `n` allowed: the platform's concurrency, capped by `limits.max_functions`."""
        cap = self.limits.max_functions
        concurrency = self.platform.max_concurrency
        return concurrency if cap is None else min(cap, concurrency)

    @property
    def min_memory_mb(self) -> float:
        """The smallest memory allowed: the grid's minimum, raised by `workload.min_memory_mb`."""
        floor = self.workload.min_memory_mb
        grid_min = float(self.platform.memory.min_mb)
        return grid_min if floor is None else max(grid_min, floor)

    def parameters(self) -> dict[str, float]:
        """The model's parameters by symbol name (see `models.equations.PARAMETER_SYMBOLS`)."""
        w, rate, storage = self.workload, self.profile.rate, self.profile.storage_bandwidth
        ps, pf = self.parameter_server, self.platform
        return {
            "d_m": w.model_size_mb,
            "d_t": w.dataset_size_mb,
            "n_t": float(w.samples),
            "e": float(w.epochs),
            "b_lf": float(w.local_batch),
            "b_gmax": float(w.max_global_batch),
            "alpha1": rate.slope,
            "beta1": rate.intercept,
            "m_sat": math.inf if rate.saturates_at_mb is None else rate.saturates_at_mb,
            "alpha2": storage.slope,
            "beta2": storage.intercept,
            "B_s": storage.max_mbps,
            **_server_parameters(ps),
            "p_gbs": pf.price_per_gb_second,
            "p_req": pf.price_per_request,
            "L": pf.timeout_s - pf.timeout_margin_s,
            "o": pf.restart_overhead_s,
            "lam": self.profile.latency_s,
            "s_0": self.profile.startup.base_s,
            "s_1": self.profile.startup.per_function_s,
        }

    def values(self) -> tuple[float, ...]:
        """The model's parameter vector (`models.performance.parameter_values` of
        `parameters()`), computed once per instance: what every figure of it is computed from."""
        return self._values

    @functools.cached_property
    def _values(self) -> tuple[float, ...]:  # a frozen dataclass still has a __dict__
        return parameter_values(self.parameters())

    def on_server(self, server: ParameterServer) -> Instance:
        """This instance run on `server` alone. Its parameter vector is this one's with the
        server's entries replaced, not computed again: a choice over a catalogue pins every
        server of it in each `solve()`."""
        pinned = dataclasses.replace(self, parameter_server=server, servers=())
        values = list(self.values())
        for name, value in _server_parameters(server).items():
            values[parameter_index(name)] = np.float64(value)
        pinned.__dict__["_values"] = tuple(values)
        return pinned

    def with_deadline(self, deadline_s: object) -> Instance:
        """This instance due `deadline_s` seconds after it starts, checked as
        `objective.deadline_s` is (a positive number of at most `MAX_SECONDS`)."""
        checked = number("deadline_s", deadline_s, error=InstanceError, maximum=MAX_SECONDS)
        return dataclasses.replace(
            self, objective=dataclasses.replace(self.objective, deadline_s=checked))

    def undated_key(self) -> tuple[object, ...]:
        """Every field but the objective, hashable: what the plans of this instance depend on
        whatever its deadline (a cache of fronts or measurements serves every deadline)."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                     if f.name != "objective")

    def without_data_load(self) -> Instance:
        """This instance with no training data to load: a run carried on from a checkpoint
        already holds its shard, so the model's load time of it is exactly 0."""
        return dataclasses.replace(
            self, workload=dataclasses.replace(self.workload, dataset_size_mb=0.0))


def _present(section: Any) -> dict[str, Any]:
    """A section's fields by YAML key, the absent optional ones (None) left out."""
    values = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    return {key: value for key, value in values.items() if value is not None}


def _server(server: ParameterServer) -> dict[str, Any]:
    """The `parameter_server:` section, one machine's defaults (1 shard, no message cost) left
    out as the loader fills them in."""
    out = _present(server)
    if server.shards == 1:
        del out["shards"]
    if not server.message_s:
        del out["message_s"]
    return out


def _servers(servers: tuple[ParameterServer, ...]) -> dict[str, Any]:
    """The choices of a catalogue instance as `parameter_server:` with its catalogue inline
    (the types it allows only) and the shard counts."""
    types: dict[str, dict[str, Any]] = {}
    for server in servers:
        types.setdefault(str(server.type), {"bandwidth_mbps": server.bandwidth_mbps,
                                            "price_per_hour": server.price_per_hour,
                                            "message_s": server.message_s})
    counts = sorted({server.shards for server in servers})
    out: dict[str, Any] = {"catalogue": {"types": types},
                           "function_bandwidth_mbps": servers[0].function_bandwidth_mbps}
    if counts == list(range(1, counts[-1] + 1)):
        out["max_shards"] = counts[-1]
    else:
        out["shards"] = counts[0]
    return out


def instance_mapping(instance: Instance) -> dict[str, Any]:
    """The inverse of `load_instance`: `instance` in the YAML schema, the platform inline, the
    optional fields absent where the instance does not have them (model v2's terms where they
    are 0), in plain Python types (YAML- and JSON-ready). `load_instance` of it equals it."""
    rest = _present(instance.platform)
    grid = rest.pop("memory")
    memory_mb = {"min": grid.min_mb, "max": grid.max_mb, "step": grid.step_mb}
    profile: dict[str, Any] = {
        "rate": _present(instance.profile.rate),
        "storage_bandwidth": _present(instance.profile.storage_bandwidth),
    }
    if instance.profile.latency_s:
        profile["latency_s"] = instance.profile.latency_s
    if instance.profile.startup != StartupProfile():
        profile["startup"] = _present(instance.profile.startup)
    out: dict[str, Any] = {
        "name": instance.name,
        "platform": {"name": rest.pop("name"), "memory_mb": memory_mb, **rest},
        "workload": _present(instance.workload),
        "profile": profile,
        "parameter_server": _servers(instance.servers) if instance.servers
        else _server(instance.parameter_server),
        "objective": _present(instance.objective),
    }
    if instance.limits != Limits():
        out["limits"] = _present(instance.limits)
    if instance.fit is not None:
        out["fit"] = instance.fit.to_mapping()
    return out

