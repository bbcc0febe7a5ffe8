"""A job as the plain numbers its instance states: what the world trains, and nothing derived."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import WorldError, shown

# Fields that may be negative (a fitted line's slope or intercept) or infinite (no cap).
_SIGNED = frozenset({"rate_slope", "rate_intercept", "storage_slope", "storage_intercept"})
_UNBOUNDED = frozenset({"rate_saturates_at_mb", "storage_max_mbps"})
_POSITIVE = frozenset({
    "samples", "epochs", "local_batch", "max_global_batch", "ps_bandwidth_mbps",
    "function_bandwidth_mbps", "timeout_s", "ps_shards",
})
MAX_SHARDS = 10**12  # as any whole number an instance states


@dataclass(frozen=True)
class JobSpec:
    """The numbers an instance states (the bridge `simulator.worlds.job_spec` reads them)."""

    model_mb: float  # workload.model_size_mb: pushed and pulled every iteration
    dataset_mb: float  # workload.dataset_size_mb: loaded once per plan, split over n
    samples: float  # workload.samples
    epochs: float  # workload.epochs
    local_batch: float  # workload.local_batch
    max_global_batch: float  # workload.max_global_batch: global batch = min(n·b_l, this)
    rate_slope: float  # profile.rate: samples/s per worker = slope·min(m, sat) + intercept
    rate_intercept: float
    rate_saturates_at_mb: float  # math.inf when none
    storage_slope: float  # profile.storage_bandwidth: MB/s per worker
    storage_intercept: float  # = min(slope·m + intercept, max_mbps)
    storage_max_mbps: float
    latency_s: float  # profile.latency_s (0 if absent): each push and each pull
    startup_base_s: float  # profile.startup (0 if absent): per invocation round,
    startup_per_function_s: float  # base + per_function·n
    ps_bandwidth_mbps: float  # parameter_server.bandwidth_mbps (B_p): one shard's NIC
    function_bandwidth_mbps: float  # parameter_server.function_bandwidth_mbps (B_f)
    ps_price_per_hour: float  # parameter_server.price_per_hour: one shard's
    price_per_gb_second: float
    price_per_request: float
    timeout_s: float
    timeout_margin_s: float  # an invocation may work L = timeout_s - timeout_margin_s
    restart_overhead_s: float  # loading a checkpoint in a new round
    ps_shards: int = 1  # parameter_server.shards (k): PS machines, each its own NIC and price
    ps_message_s: float = 0.0  # parameter_server.message_s: per message to a shard

    def __post_init__(self) -> None:
        """Refuse what no instance can state: the engine then never meets NaN or a negative
        size (the bridge builds a JobSpec from a validated instance; this guards direct use)."""
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WorldError(f"`job.{item.name}` must be a number, got {shown(value)}")
            finite = math.isfinite(value) or (item.name in _UNBOUNDED and value == math.inf)
            low_ok = item.name in _SIGNED or (
                value > 0 if item.name in _POSITIVE else value >= 0
            )
            if not (finite and low_ok):
                need = "positive" if item.name in _POSITIVE else "non-negative"
                need = "finite" if item.name in _SIGNED else f"a finite {need} number"
                raise WorldError(
                    f"`job.{item.name}` must be {need}, got {shown(value)}: give the "
                    "instance's value"
                )
        shards = self.ps_shards
        if not (shards <= MAX_SHARDS and float(shards).is_integer()):
            raise WorldError(
                f"`job.ps_shards` must be a whole number of PS machines in 1..{MAX_SHARDS:,}, "
                f"got {shown(shards)}: give the instance's `parameter_server.shards`"
            )
        if not self.timeout_s > self.timeout_margin_s:
            raise WorldError(
                f"`job.timeout_margin_s` ({self.timeout_margin_s:g}) must be below "
                f"`job.timeout_s` ({self.timeout_s:g}): an invocation needs time to work"
            )

    @property
    def total_samples(self) -> float:
        """Samples to train: samples × epochs."""
        return self.samples * self.epochs

    @property
    def ps_usd_per_hour(self) -> float:
        """What the PS costs an hour: every shard's price."""
        return self.ps_shards * self.ps_price_per_hour

    @property
    def usable_s(self) -> float:
        """L: the seconds an invocation may work."""
        return self.timeout_s - self.timeout_margin_s
