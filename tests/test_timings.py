"""`launcher.timings.summarise` on synthetic channel records, numpy's statistics as the oracle."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdadnn.launcher.timings import summarise


def record(round_: int, rank: int, first_iteration: int, compute: np.ndarray,
           exchange: np.ndarray, first_at: float | None, ended_at: float | None) -> dict[str, Any]:
    """One invocation's record as `ParameterChannel.timings()` returns it."""
    return {"round": round_, "rank": rank, "first_iteration": first_iteration,
            "first_at": first_at, "ended_at": ended_at, "compute_s": compute.tolist(),
            "exchange_s": exchange.tolist()}


def test_one_round_bsp_figures_match_numpy() -> None:
    """Per iteration the period is the shortest compute + exchange of any rank (the others
    waited in their exchange), the compute the slowest rank's, the exchange the rest."""
    rng = np.random.default_rng(7)
    ranks, steps = 3, 41
    compute = rng.uniform(0.01, 0.05, (ranks, steps))
    # BSP: a rank's exchange waits for the slowest gradient, then transfers.
    exchange = compute.max(axis=0) - compute + rng.uniform(0.001, 0.03, (ranks, steps))
    exchange[:2, 0] += 1.5  # ranks 0 and 1 also waited, in iteration 0, for rank 2's start-up
    launch = 1_000.0
    records = [record(0, r, 0, compute[r], exchange[r], launch + 2.0 + r, launch + 9.0 + r / 10)
               for r in range(ranks)]
    timings = summarise(records, [launch])

    period = (compute + exchange).min(axis=0)
    slowest = compute.max(axis=0)
    split = np.clip(period - slowest, 0, None)
    assert timings.iterations_timed == steps
    assert timings.iteration_median_s == pytest.approx(np.median(period))
    assert timings.iteration_p90_s == pytest.approx(np.percentile(period, 90))
    assert timings.compute_median_s == pytest.approx(np.median(slowest))
    assert timings.exchange_median_s == pytest.approx(np.median(split))
    assert timings.compute_s == pytest.approx(slowest.sum())
    assert timings.exchange_s == pytest.approx(split.sum())
    assert timings.compute_s + timings.exchange_s == pytest.approx(period.sum())
    assert timings.startup_s == pytest.approx((4.0,))  # the last rank began 4 s after launch
    assert timings.time_to_first_iteration_s == pytest.approx(4.0)
    assert timings.restart_gap_s == ()
    assert timings.training_s == pytest.approx(9.2)  # to the last rank's last update


def test_rounds_restart_gaps_replays_and_unlaunched_rounds() -> None:
    """Two rounds: round 1 replays iterations 8-9 of round 0 (a crash after the checkpoint
    at 8) and its figures win; a stale record of a round never launched counts nowhere."""
    launched = [100.0, 160.0]
    old = np.full(10, 0.5)  # round 0's times, iterations 0-9
    new_c, new_x = np.linspace(0.1, 0.2, 12), np.linspace(0.01, 0.02, 12)  # round 1: 8-19
    records = [
        record(0, 0, 0, old, old, 103.0, 150.0),
        record(0, 1, 0, old + 0.1, old, 105.0, 151.0),
        record(1, 0, 8, new_c, new_x, 161.0, 190.0),
        record(1, 1, 8, new_c + 0.05, new_x, 162.5, 191.5),
        record(2, 0, 0, np.full(30, 9.0), np.full(30, 9.0), 500.0, 900.0),  # never launched
    ]
    timings = summarise(records, launched)

    period = np.concatenate([np.full(8, 1.0), new_c + new_x])  # min over ranks
    slowest = np.concatenate([np.full(8, 0.6), new_c + 0.05])
    assert timings.iterations_timed == 20
    assert timings.iteration_median_s == pytest.approx(np.median(period))
    assert timings.iteration_p90_s == pytest.approx(np.percentile(period, 90))
    assert timings.compute_s == pytest.approx(slowest.sum())
    assert timings.exchange_s == pytest.approx(np.clip(period - slowest, 0, None).sum())
    assert timings.startup_s == pytest.approx((5.0, 2.5))
    assert timings.time_to_first_iteration_s == pytest.approx(5.0)
    assert timings.restart_gap_s == pytest.approx((160.0 - 151.0,))
    assert timings.training_s == pytest.approx(191.5 - 100.0)


def test_a_later_round_wins_whatever_the_order_of_the_records() -> None:
    replayed = [record(1, 0, 0, np.array([0.2]), np.array([0.1]), 12.0, 13.0),
                record(0, 0, 0, np.array([5.0]), np.array([5.0]), 1.0, 11.0)]
    for records in (replayed, replayed[::-1]):
        assert summarise(records, [0.0, 11.5]).iteration_median_s == pytest.approx(0.3)


def test_nothing_timed_gives_none_not_zero() -> None:
    """A dry run, or workers that resumed at the last iteration: no figure is made up."""
    idle = record(0, 0, 5, np.array([]), np.array([]), None, None)
    for records in ([], [idle]):
        timings = summarise(records, [10.0])
        assert timings.iterations_timed == 0
        assert timings.startup_s == () and timings.restart_gap_s == ()
        assert timings.time_to_first_iteration_s is None and timings.training_s is None
        assert timings.iteration_median_s is None and timings.iteration_p90_s is None
        assert timings.compute_median_s is None and timings.exchange_median_s is None
        assert timings.compute_s == 0.0 and timings.exchange_s == 0.0
