"""The discrete-event simulator: it reduces to the model without noise, and departs as it should.

The engine takes its per-iteration figures from the model's compiled program, so its
expectations here come from MODEL.md by hand (`tests.by_hand`), never from the model: a slip
in the model's equations shows up as a disagreement with the simulator too.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lambdadnn import Instance, InstanceError, load_instance, solve
from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.engine import JobRun, push_phase_end, simulate_job
from lambdadnn.solver.instance import StartupProfile
from tests.by_hand import by_hand

SHIPPED = sorted(str(path) for path in Path("instances").glob("*.yaml"))
# Plans beyond the optimal ones: few and many functions, restarts (mobilenet 8 × 512 MB runs
# 2,053 s: two restarts), tiny and large memory.
OTHER_PLANS = [(8, 512), (3, 3000), (40, 2000), (1, 10240), (100, 4000)]
QUIET = NoiseModel.none()
STRAGGLERS_ONLY = NoiseModel(
    compute_cv=0.1, bandwidth_cv=0.0, cold_start_median_s=0.0, cold_start_sigma=0.0
)


@cache
def instance(path: str) -> Instance:
    return load_instance(path)


@cache
def optimal(path: str) -> tuple[int, int]:
    """The solver's plan for a shipped instance: functions, memory."""
    best = solve(path)
    return best.functions, best.memory_mb


def plans(path: str) -> list[tuple[int, int]]:
    """The optimal plan and every valid plan of `OTHER_PLANS` for a shipped instance."""
    others = [(n, m) for n, m in OTHER_PLANS if by_hand(instance(path), n, m).valid]
    return [optimal(path), *others]


CASES = [(path, n, m) for path in SHIPPED for n, m in plans(path)]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def quiet_time(job: Instance, n: int, m: int, restarts: int) -> float:
    """A zero-noise run's time by hand: MODEL.md's T_train plus the restarts it took."""
    return by_hand(job, n, m).t_train + restarts * job.platform.restart_overhead_s


@pytest.mark.parametrize(("path", "n", "m"), CASES)
def test_zero_noise_reproduces_the_model(path: str, n: int, m: int) -> None:
    """Load, k iterations of compute and communication, restarts: MODEL.md to rounding."""
    job = instance(path)
    hand = by_hand(job, n, m)
    run = simulate_job(job, n, m, noise=QUIET, rng=rng())
    assert run.restarts == hand.restarts
    assert run.time_s == pytest.approx(hand.time, rel=1e-9)
    assert run.cost_usd == pytest.approx(hand.cost, rel=1e-9)
    w = job.workload
    assert run.iterations == pytest.approx(w.samples * w.epochs / hand.global_batch, rel=1e-12)
    assert run.invocations == n * (run.restarts + 1)
    assert (run.failures, run.lost_iterations) == (0, 0.0)


def test_the_cases_include_restarts() -> None:
    """The zero-noise cases above are not all single-invocation jobs."""
    restarts = [by_hand(instance(path), n, m).restarts for path, n, m in CASES]
    assert max(restarts) >= 2 and min(restarts) == 0


@pytest.mark.parametrize("n", [1, 4, 32])
def test_zero_noise_loads_the_dataset_in_parallel(n: int) -> None:
    """t_load = d_t/(n·B_f^s): a 5 GB dataset read over n storage links at 3,008 MB, on top
    of the iterations, typed out here from the instance's fields."""
    base = instance("instances/1dcnn-imdb.yaml")
    job = dataclasses.replace(
        base, workload=dataclasses.replace(base.workload, dataset_size_mb=5000.0)
    )
    storage = job.profile.storage_bandwidth
    link = min(storage.slope * 3008 + storage.intercept, storage.max_mbps)
    hand = by_hand(job, n, 3008)
    run = simulate_job(job, n, 3008, noise=QUIET, rng=rng())
    iterations = hand.iterations * (hand.t_comp + hand.t_comm)
    assert run.time_s == pytest.approx(quiet_time(job, n, 3008, run.restarts), rel=1e-9)
    restarts = run.restarts * job.platform.restart_overhead_s
    assert run.time_s - iterations - restarts == pytest.approx(5000.0 / (n * link), rel=1e-9)


@settings(max_examples=40)
@given(
    path=st.sampled_from(SHIPPED),
    n=st.integers(1, 300),
    m=st.integers(128, 10240),
)
def test_zero_noise_matches_the_model_on_any_valid_plan(path: str, n: int, m: int) -> None:
    """Property: with no noise, any valid plan's simulated time is MODEL.md's within 1%, and
    exactly its T_train plus the restarts the run took, which are the model's r or more
    (a round stops before the iteration that would outlast L, and its L includes the
    restart overhead, so long jobs may take a round or more beyond ⌈T_train/L⌉)."""
    job = instance(path)
    hand = by_hand(job, n, m)
    assume(hand.valid)
    run = simulate_job(job, n, m, noise=QUIET, rng=rng())
    assert run.time_s == pytest.approx(hand.time, rel=0.01)
    assert run.restarts >= hand.restarts
    assert run.time_s == pytest.approx(quiet_time(job, n, m, run.restarts), rel=1e-9)


@pytest.mark.parametrize(("path", "n", "m"), CASES)
def test_zero_noise_pays_the_v2_latency_and_start_up(path: str, n: int, m: float) -> None:
    """Model v2 by hand: 2λ more per iteration, and s0 + s1·n more per round, so a run with
    no noise takes T_train (with λ) + r·o + (r + 1)·(s0 + s1·n) for the r restarts it took."""
    base = instance(path)
    startup = StartupProfile(base_s=3.0, per_function_s=0.25)
    job = dataclasses.replace(
        base, profile=dataclasses.replace(base.profile, latency_s=0.002, startup=startup)
    )
    hand = by_hand(job, n, m)
    run = simulate_job(job, n, m, noise=QUIET, rng=rng())
    assert hand.t_comm == pytest.approx(by_hand(base, n, m).t_comm + 0.004, rel=1e-12)
    rounds = run.restarts + 1
    expected = hand.t_train + run.restarts * job.platform.restart_overhead_s + rounds * (
        3.0 + 0.25 * n)
    assert run.time_s == pytest.approx(expected, rel=1e-9)
    assert run.restarts == hand.restarts
    assert run.time_s == pytest.approx(hand.time, rel=1e-9)


COLD_STARTS_ONLY = NoiseModel(
    compute_cv=0.0, bandwidth_cv=0.0, cold_start_median_s=1.0, cold_start_sigma=0.5
)


def test_a_round_waits_for_the_slowest_cold_start() -> None:
    """With cold starts as the only noise, a one-round run takes MODEL.md's time plus the
    slowest of n lognormal cold starts: the mean excess over 400 seeds matches E[max of n]
    sampled here with numpy (200,000 draws), within 5 standard errors of the simulated mean."""
    job = instance("instances/1dcnn-imdb.yaml")
    n, m = 14, 1259
    hand = by_hand(job, n, m)
    assert hand.restarts == 0
    runs = [simulate_job(job, n, m, noise=COLD_STARTS_ONLY, rng=rng(seed)) for seed in range(400)]
    assert all(run.restarts == 0 for run in runs)
    excess = np.array([run.time_s - hand.time for run in runs])
    draws = np.random.default_rng(12345).lognormal(0.0, 0.5, size=(200_000, n)).max(axis=1)
    standard_error = excess.std(ddof=1) / math.sqrt(len(excess))
    assert abs(excess.mean() - draws.mean()) <= 5 * standard_error
    assert excess.min() > 0


def test_stragglers_slow_iterations_as_n_grows() -> None:
    """The barrier waits for the slowest of n workers, so more workers lag the model more.

    ESPCN past 16 functions keeps its global batch (fixed total work); a PS link too wide to
    contend isolates the stragglers from the push phase, which can overlap them.
    """
    base = instance("instances/espcn-bsds500.yaml")
    wide = dataclasses.replace(
        base, parameter_server=dataclasses.replace(base.parameter_server, bandwidth_mbps=1e6)
    )
    ratios = []
    for n in (16, 32, 64, 128, 256):
        model = by_hand(wide, n, 10240).time
        runs = [simulate_job(wide, n, 10240, noise=STRAGGLERS_ONLY, rng=rng(s)) for s in range(10)]
        ratios.append(float(np.mean([run.time_s for run in runs])) / model)
    assert ratios[0] > 1.05, ratios
    assert all(later > earlier for earlier, later in pairwise(ratios))


@settings(max_examples=30)
@given(
    every=st.integers(1, 50),
    rate=st.floats(0.5, 5.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_failures_lose_at_most_the_work_since_the_last_checkpoint(
    every: int, rate: float, seed: int
) -> None:
    """Property: crashes lose fewer than `checkpoint_every` iterations each; all k still run."""
    job = instance("instances/1dcnn-imdb.yaml")
    noise = NoiseModel(failure_rate_per_hour=rate, checkpoint_every=every)
    run = simulate_job(job, 14, 1259, noise=noise, rng=rng(seed))
    assert run.lost_iterations <= run.failures * (every - 1)
    w = job.workload  # 14 × 32 ≤ 512: each function keeps the profiled local batch
    assert run.iterations == pytest.approx(w.samples * w.epochs / (14 * w.local_batch))
    assert run.invocations == 14 * (run.restarts + 1) + run.failures


def test_failures_happen_and_cost_time() -> None:
    job = instance("instances/mobilenet-cifar10.yaml")
    calm = [simulate_job(job, 15, 531, noise=NoiseModel(), rng=rng(s)) for s in range(5)]
    shaky = [
        simulate_job(job, 15, 531, noise=NoiseModel(failure_rate_per_hour=2.0), rng=rng(s))
        for s in range(5)
    ]
    assert all(run.failures == 0 for run in calm)
    assert sum(run.failures for run in shaky) > 0
    assert sum(run.lost_iterations for run in shaky) > 0
    assert np.mean([r.time_s for r in shaky]) > np.mean([r.time_s for r in calm])


@settings(max_examples=25)
@given(path=st.sampled_from(SHIPPED), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_run_other_seed_other_time(path: str, seed: int) -> None:
    """Property: a seed fixes the run; another seed draws another one."""
    job = instance(path)
    n, m = optimal(path)
    noise = NoiseModel(failure_rate_per_hour=0.5)
    first = simulate_job(job, n, m, noise=noise, rng=rng(seed))
    assert simulate_job(job, n, m, noise=noise, rng=rng(seed)) == first
    assert simulate_job(job, n, m, noise=noise, rng=rng(seed + 1)).time_s != first.time_s


@settings(max_examples=40)
@given(
    path=st.sampled_from(SHIPPED),
    n=st.integers(1, 64),
    m=st.integers(128, 10240),
    rate=st.sampled_from([0.0, 0.5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_cost_is_gb_seconds_ps_and_requests(
    path: str, n: int, m: int, rate: float, seed: int
) -> None:
    """Property: cost = GB-seconds × price + PS $/hour × time + requests, recomputed here."""
    job = instance(path)
    assume(by_hand(job, n, m).valid)
    run = simulate_job(job, n, m, noise=NoiseModel(failure_rate_per_hour=rate), rng=rng(seed))
    platform = job.platform
    assert run.gb_seconds == pytest.approx(n * m / 1024 * run.time_s, rel=1e-12)
    expected = (
        run.gb_seconds * platform.price_per_gb_second
        + job.parameter_server.price_per_hour * run.time_s / 3600
        + run.invocations * platform.price_per_request
    )
    assert run.cost_usd == pytest.approx(expected, rel=1e-12)


def fair_share_push_end(finish: list[float], volume: float, cap: float, link: float) -> float:
    """Reference: exact processor sharing, event by event (each active flow at min(cap, link/a))."""
    arrivals = sorted(finish)
    remaining: list[float] = []
    clock, index = arrivals[0], 0
    while index < len(arrivals) or remaining:
        rate = min(cap, link / len(remaining)) if remaining else 0.0
        departure = clock + min(remaining) / rate if remaining else math.inf
        arrival = arrivals[index] if index < len(arrivals) else math.inf
        step = min(arrival, departure)
        remaining = [left - (step - clock) * rate for left in remaining]
        clock = step
        if arrival <= departure:
            remaining.append(volume)
            index += 1
        else:
            remaining.remove(min(remaining))
    return clock


@settings(max_examples=200)
@given(
    finish=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=40),
    volume=st.floats(0.1, 100.0),
    cap=st.floats(1.0, 200.0),
    link=st.floats(1.0, 3000.0),
)
def test_push_phase_is_fair_sharing_within_one_uncontended_push(
    finish: list[float], volume: float, cap: float, link: float
) -> None:
    """Property: the fluid push phase ends no later than fair sharing, and < d_m/B_f^max earlier.

    It is exact when pushes cannot contend or all start together (the zero-noise case).
    """
    fluid = float(push_phase_end(np.array([finish]), np.array([volume]), cap, link)[0])
    fair = fair_share_push_end(finish, volume, cap, link)
    scale = max(finish) + len(finish) * volume / min(cap, link)
    assert fluid <= fair + 1e-9 * scale
    assert fair - fluid <= volume / cap + 1e-9 * scale
    if len(finish) * cap <= link or len(set(finish)) == 1:
        assert fluid == pytest.approx(fair, rel=1e-9, abs=1e-9 * scale)


def test_invalid_plans_are_refused() -> None:
    """ESPCN's rate is negative below 2,300 MB: no time to simulate."""
    with pytest.raises(InstanceError, match="not valid"):
        simulate_job(
            instance("instances/espcn-bsds500.yaml"), 4, 1024, noise=QUIET, rng=rng()
        )


def test_a_run_is_a_frozen_record() -> None:
    run = simulate_job(instance(SHIPPED[0]), 4, 2048, noise=NoiseModel(), rng=rng())
    assert isinstance(run, JobRun)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.time_s = 0.0  # type: ignore[misc]
