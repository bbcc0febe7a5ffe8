"""What a run's invocations measured, summed up: start-up per round, iteration times, the split.

Every invocation records, in the channel, when its first iteration began and how long each of
its iterations spent computing and exchanging, in all and with each parameter-server shard,
and the bytes it moved with each shard (`launcher.worker`); the launcher knows when it
launched each round. Both backends summarise them here, so their reports mean the same thing
and `lambdadnn profile` fits the model to exactly the figures a launch reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["RunTimings", "per_iteration", "per_iteration_shards", "round_starts", "summarise"]


@dataclass(frozen=True)
class RunTimings:
    """A run's timings. Per iteration, the compute is the slowest rank's (BSP waits for it)
    and the exchange is the rest of the iteration: the shortest compute + exchange of any
    rank, since a rank that started early also waited, in its first exchange, for the others'
    start-up, which `startup_s` counts already.

    `startup_s` holds one entry per round that trained: from the round's launch to the
    moment its last rank began its first iteration (process start, imports, workload, first
    pull); `restart_gap_s` one per relaunch: from the end of a round's last update to the
    next round's launch (checkpoint, exit, restore). `training_s` runs from the first launch
    to the last update: the time the model predicts, without the final evaluation. Sums are
    over the iterations timed; None where nothing was timed.
    """

    startup_s: tuple[float, ...]
    restart_gap_s: tuple[float, ...]
    training_s: float | None
    iterations_timed: int
    iteration_median_s: float | None
    iteration_p90_s: float | None
    compute_median_s: float | None
    exchange_median_s: float | None
    compute_s: float
    exchange_s: float
    # Per parameter-server shard (empty when the workers recorded none): the exchange
    # seconds, summed over the iterations and their median, each the iteration's as above
    # with that shard's push and pull for the rank's exchange; and the array bytes the ranks
    # pushed to it and pulled from it, over every invocation (a replayed iteration moved
    # its bytes again).
    shard_exchange_s: tuple[float, ...] = ()
    shard_exchange_median_s: tuple[float | None, ...] = ()
    shard_pushed_bytes: tuple[int, ...] = ()
    shard_pulled_bytes: tuple[int, ...] = ()

    @property
    def time_to_first_iteration_s(self) -> float | None:
        """The first round's start-up: what a user waits before training shows progress."""
        return self.startup_s[0] if self.startup_s else None


def _latest(records: Iterable[Mapping[str, Any]], key: str) -> dict[int, float]:
    """Per round: the latest `key` time of its ranks."""
    latest: dict[int, float] = {}
    for record in records:
        moment, round_ = record.get(key), int(record["round"])
        if moment is not None:
            latest[round_] = max(latest.get(round_, -np.inf), float(moment))
    return latest


def round_starts(records: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """Per round: when its last rank began its first iteration (wall clock)."""
    return _latest(records, "first_at")


def per_iteration(records: Iterable[Mapping[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """Iteration → (compute, exchange) of every rank; a later round's replay wins."""
    by_iteration: dict[int, dict[int, tuple[int, float, float]]] = {}
    for record in records:
        round_, rank, first = int(record["round"]), int(record["rank"]), record["first_iteration"]
        for offset, (compute, exchange) in enumerate(
            zip(record["compute_s"], record["exchange_s"], strict=True)
        ):
            ranks = by_iteration.setdefault(int(first) + offset, {})
            if rank not in ranks or ranks[rank][0] <= round_:
                ranks[rank] = (round_, float(compute), float(exchange))
    return {i: [(c, x) for _r, c, x in ranks.values()] for i, ranks in by_iteration.items()}


def per_iteration_shards(
    records: Iterable[Mapping[str, Any]],
) -> dict[int, list[tuple[float, tuple[float, ...]]]]:
    """Iteration → (compute, per-shard exchange) of every rank that recorded its shards; a
    later round's replay wins, as in `per_iteration`."""
    by_iteration: dict[int, dict[int, tuple[int, float, tuple[float, ...]]]] = {}
    for record in records:
        shards = record.get("shard_exchange_s")
        if not shards:
            continue
        round_, rank, first = int(record["round"]), int(record["rank"]), record["first_iteration"]
        for offset, (compute, exchange) in enumerate(
            zip(record["compute_s"], shards, strict=True)
        ):
            ranks = by_iteration.setdefault(int(first) + offset, {})
            if rank not in ranks or ranks[rank][0] <= round_:
                ranks[rank] = (round_, float(compute), tuple(float(x) for x in exchange))
    return {i: [(c, x) for _r, c, x in ranks.values()] for i, ranks in by_iteration.items()}


def _shard_figures(
    records: Sequence[Mapping[str, Any]],
) -> tuple[tuple[float, ...], tuple[float | None, ...], tuple[int, ...], tuple[int, ...]]:
    """Per shard: the exchange summed and its median (each iteration's: the shortest
    compute + that shard's exchange of any rank, less the slowest compute), and the bytes
    pushed and pulled."""
    iterations = per_iteration_shards(records)
    shards = max((len(x) for ranks in iterations.values() for _c, x in ranks), default=0)
    sums: list[float] = []
    medians: list[float | None] = []
    for shard in range(shards):
        seconds = np.array([
            max(0.0, min(c + x[shard] for c, x in ranks if shard < len(x))
                - max(c for c, _x in ranks))
            for ranks in iterations.values() if any(shard < len(x) for _c, x in ranks)])
        sums.append(float(seconds.sum()))
        medians.append(float(np.median(seconds)) if seconds.size else None)

    def total(key: str) -> tuple[int, ...]:
        counts: list[int] = []
        for record in records:
            for shard, value in enumerate(record.get(key) or ()):
                counts.extend([0] * (shard + 1 - len(counts)))
                counts[shard] += int(value)
        return tuple(counts)

    return tuple(sums), tuple(medians), total("shard_pushed_bytes"), total("shard_pulled_bytes")


def summarise(records: Sequence[Mapping[str, Any]], launched: Sequence[float]) -> RunTimings:
    """The `RunTimings` of the channel's `timings()` records, rounds launched at `launched`
    (wall-clock times, index = round). Records of a round never launched (a stale key of
    an earlier job of the same name) are no part of this run and are ignored."""
    records = [record for record in records if int(record["round"]) < len(launched)]
    iterations = per_iteration(records)
    period = np.array([min(c + x for c, x in ranks) for ranks in iterations.values()])
    compute = np.array([max(c for c, _x in ranks) for ranks in iterations.values()])
    exchange = np.maximum(period - compute, 0.0)

    def statistic(values: np.ndarray, q: float) -> float | None:
        return float(np.quantile(values, q)) if values.size else None

    firsts = round_starts(records)
    ends = _latest(records, "ended_at")
    shard_sums, shard_medians, pushed, pulled = _shard_figures(records)
    return RunTimings(
        startup_s=tuple(max(0.0, firsts[r] - launched[r]) for r in sorted(firsts)),
        restart_gap_s=tuple(max(0.0, launched[r + 1] - ends[r]) for r in sorted(ends)
                            if r + 1 < len(launched)),
        training_s=max(ends.values()) - launched[0] if ends else None,
        iterations_timed=int(period.size),
        iteration_median_s=statistic(period, 0.5),
        iteration_p90_s=statistic(period, 0.9),
        compute_median_s=statistic(compute, 0.5),
        exchange_median_s=statistic(exchange, 0.5),
        compute_s=float(compute.sum()),
        exchange_s=float(exchange.sum()),
        shard_exchange_s=shard_sums,
        shard_exchange_median_s=shard_medians,
        shard_pushed_bytes=pushed,
        shard_pulled_bytes=pulled,
    )
