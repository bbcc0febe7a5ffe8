"""The truth a simulated job runs under, kept apart from what planners believe.

A planner sees an instance (its belief about the workload, the platform and the parameter
server) and the noise model it is configured with; the engine runs the job under a *truth*
that may differ from both. `Truth()` changes nothing: the job behaves as the instance says,
with the configured noise. Each field perturbs one thing the planners cannot see:

* `rate_scale` multiplies the training rate R(m) (slope and intercept alike);
* `saturates_at_mb` makes R(m) stop growing at that memory (λDNN profiled only up to
  3,008 MB: beyond it the belief is an extrapolation);
* `bandwidth_scale` multiplies every bandwidth: the PS link B_p, the per-function flow
  B_f^max and the storage bandwidth (its slope, intercept and cap);
* `startup_scale` multiplies what each invocation round pays to start: the profile's start-up
  (s_0 + s_1·n, model v2) and the platform's restart overhead;
* `compute_cv`, `comm_cv`, `cold_start_median_s`, `failure_rate_per_h` replace the noise
  model's compute CV, communication (bandwidth) CV, cold-start median and crash rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from ..inputs.errors import InputError
from ..inputs.files import brief
from ..inputs.numbers import number
from ..models.noise import NoiseModel
from ..solver.instance import Instance, ParameterServer

# Keys whose value must be > 0 (scales and a saturation point); the others may be 0.
_POSITIVE = ("rate_scale", "bandwidth_scale", "startup_scale", "saturates_at_mb")
_LIMIT = 1e9
# A world a hundred times faster or slower than the belief is no test of a planner, and
# beyond it the engine's arithmetic breaks (bandwidth_scale=1e-308 overflowed a time to inf,
# rate_scale=1e9 made the truth's own plans invalid): scales stay within this range.
_SCALES = ("rate_scale", "bandwidth_scale", "startup_scale")
_SCALE_RANGE = (1e-2, 1e2)


@dataclass(frozen=True)
class Truth:
    """How the simulated world differs from the planners' belief (module docstring)."""

    rate_scale: float = 1.0
    saturates_at_mb: float | None = None
    bandwidth_scale: float = 1.0
    startup_scale: float = 1.0
    compute_cv: float | None = None
    comm_cv: float | None = None
    cold_start_median_s: float | None = None
    failure_rate_per_h: float | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None and field.default is None:
                continue
            positive = field.name in _POSITIVE
            number(f"truth.{field.name}", value, error=InputError, maximum=_LIMIT,
                   sign="positive" if positive else "non-negative",
                   need=f"a number {'> 0' if positive else '≥ 0'} and ≤ {_LIMIT:g}")
            low_scale, high_scale = _SCALE_RANGE
            if field.name in _SCALES and not low_scale <= value <= high_scale:
                raise InputError(
                    f"`truth.{field.name}` must be in [{low_scale:g}, {high_scale:g}] (a world "
                    f"at most a hundred times slower or faster than the belief), got "
                    f"{brief(value)}"
                )

    @classmethod
    def parse(cls, items: Sequence[str], *, field: str = "--truth") -> Truth:
        """A truth from `KEY=VALUE` strings (the CLI's repeatable `--truth`)."""
        values: dict[str, float] = {}
        for item in items:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or key not in TRUTH_KEYS:
                raise InputError(
                    f"`{field}` takes KEY=VALUE with KEY one of {', '.join(TRUTH_KEYS)}, "
                    f"got {brief(item)}"
                )
            if key in values:
                raise InputError(f"`{field}` sets {key} twice; set each key once")
            try:
                values[key] = float(raw)
            except ValueError:
                raise InputError(
                    f"`{field}` {key} must be a number, got {brief(raw.strip())}"
                ) from None
        return cls(**values)

    @classmethod
    def of(cls, value: Truth | dict[str, float] | Sequence[str] | None) -> Truth:
        """A `Truth` from itself, a mapping of its fields, `KEY=VALUE` strings, or None."""
        if value is None:
            return cls()
        if isinstance(value, Truth):
            return value
        if isinstance(value, dict):
            unknown = [key for key in value if key not in TRUTH_KEYS]
            if unknown:
                raise InputError(
                    f"`truth` has no key {brief(unknown[0])}; use {', '.join(TRUTH_KEYS)}"
                )
            return cls(**value)
        if isinstance(value, (list, tuple)):
            return cls.parse([str(item) for item in value], field="truth")
        raise InputError(
            f"`truth` must be a Truth, a mapping or KEY=VALUE strings, got {brief(value)}"
        )

    def changed(self) -> dict[str, float]:
        """The fields that differ from `Truth()`: what the report states as the truth."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if getattr(self, field.name) != field.default
        }

    def label(self) -> str:
        """`key=value, …` of the changed fields, or `as believed`."""
        changed = self.changed()
        return ", ".join(f"{k}={v:g}" for k, v in changed.items()) or "as believed"

    def noise(self, belief: NoiseModel) -> NoiseModel:
        """The noise the engine draws from: `belief` with this truth's replacements."""
        replaced: dict[str, Any] = {}
        for mine, theirs in (
            ("compute_cv", "compute_cv"), ("comm_cv", "bandwidth_cv"),
            ("cold_start_median_s", "cold_start_median_s"),
            ("failure_rate_per_h", "failure_rate_per_hour"),
        ):
            value = getattr(self, mine)
            if value is not None:
                replaced[theirs] = value
        return dataclasses.replace(belief, **replaced) if replaced else belief

    def instance(self, belief: Instance) -> Instance:
        """The instance the engine runs: `belief` with this truth's perturbations."""
        return belief if self == _AS_BELIEVED else _perturbed(self, belief)


TRUTH_KEYS = tuple(field.name for field in fields(Truth))
_AS_BELIEVED = Truth()


@lru_cache(maxsize=4096)  # a trace has few distinct instances; the engine asks per job
def _perturbed(truth: Truth, belief: Instance) -> Instance:
    profile, ps, platform = belief.profile, belief.parameter_server, belief.platform
    rate = dataclasses.replace(
        profile.rate,
        slope=profile.rate.slope * truth.rate_scale,
        intercept=profile.rate.intercept * truth.rate_scale,
        saturates_at_mb=(
            profile.rate.saturates_at_mb if truth.saturates_at_mb is None
            else truth.saturates_at_mb
        ),
    )
    storage = profile.storage_bandwidth
    bandwidth = truth.bandwidth_scale
    storage = dataclasses.replace(
        storage, slope=storage.slope * bandwidth, intercept=storage.intercept * bandwidth,
        max_mbps=storage.max_mbps * bandwidth,
    )
    startup = dataclasses.replace(
        profile.startup, base_s=profile.startup.base_s * truth.startup_scale,
        per_function_s=profile.startup.per_function_s * truth.startup_scale,
    )
    def scale(server: ParameterServer) -> ParameterServer:
        return dataclasses.replace(
            server, bandwidth_mbps=server.bandwidth_mbps * bandwidth,
            function_bandwidth_mbps=server.function_bandwidth_mbps * bandwidth)

    return dataclasses.replace(
        belief,
        profile=dataclasses.replace(
            profile, rate=rate, storage_bandwidth=storage, startup=startup
        ),
        parameter_server=scale(ps),
        servers=tuple(scale(server) for server in belief.servers),
        platform=dataclasses.replace(
            platform, restart_overhead_s=platform.restart_overhead_s * truth.startup_scale
        ),
    )


def on_server(instance: Instance, ps_type: str | None, shards: int) -> Instance:
    """`instance` pinned to its own server of that type and shard count (as a plan names it,
    `ParameterServer.choice`): a plan chosen on a belief's catalogue runs on the truth's
    machine of that kind, its bandwidth as the truth has it. An instance without choices is
    its own server."""
    if not instance.servers:
        return instance
    for own in instance.servers:
        if (own.type, own.shards) == (ps_type, shards):
            return dataclasses.replace(instance, parameter_server=own, servers=())
    raise InputError(
        f"instance {brief(instance.name)} offers no parameter server {ps_type} × {shards}, "
        "the one its plan chose")
