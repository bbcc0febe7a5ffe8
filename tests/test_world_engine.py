"""The independent world's engine: the model's time with every effect off, each effect's
mechanism, common random numbers, and the limits that keep any input finite.

This is the one place the world meets the planner's model: with `World()` a static run must
take the model's time (and cost) within 0.5% on the shipped instances. Everything else here
checks a mechanism against its definition in docs/WORLD.md, often by recomputing it from what
the run measured (with measurement noise off, what a segment shows is the truth).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lambdadnn.simulator.world import (
    MAX_WORKER_ITERATIONS,
    ColdStart,
    Cpu,
    Crashes,
    Drift,
    JobSpec,
    Measurement,
    Persistent,
    PlatformRamp,
    Ps,
    Segment,
    Session,
    Startup,
    Stragglers,
    Tail,
    World,
    WorldError,
    WorldRun,
    engine,
    run_plan,
    trial,
)
from lambdadnn.simulator.world.config import Bandwidth
from lambdadnn.simulator.worlds import job_spec
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.pipeline import evaluate, solve

INSTANCES = sorted(Path(__file__).resolve().parent.parent.glob("instances/*.yaml"))
REL = 0.005  # the engine with no effect against the model

# A small job for mechanisms: 1.6 s of compute and 0.25 s of exchange an iteration on 8
# functions (10 MB each way at 80 MB/s), 79 iterations, one round.
SMALL = JobSpec(
    model_mb=10.0, dataset_mb=100.0, samples=20_000.0, epochs=1.0, local_batch=32.0,
    max_global_batch=1e6, rate_slope=0.0, rate_intercept=20.0, rate_saturates_at_mb=math.inf,
    storage_slope=0.0, storage_intercept=50.0, storage_max_mbps=100.0, latency_s=0.0,
    startup_base_s=0.0, startup_per_function_s=0.0, ps_bandwidth_mbps=1000.0,
    function_bandwidth_mbps=80.0, ps_price_per_hour=0.1, price_per_gb_second=1.66667e-5,
    price_per_request=2e-7, timeout_s=900.0, timeout_margin_s=30.0, restart_overhead_s=6.0,
)
COMPUTE_S = 32 / 20  # SMALL's compute per iteration at any memory, no effect


def segment(world: World, job: JobSpec, n: int, m: int, key: tuple[int, ...] = (1,),
            **until: float) -> Segment:
    return Session(world, job, key).advance(n, m, **until)


def plans(path: Path) -> list[tuple[int, int]]:
    """The instance's optimal plan and five others around it and far from it."""
    plan = solve(path)
    n, m = plan.functions, plan.memory_mb
    return [(n, m), (1, 3008), (3, 4000), (2 * n, m), (n, min(2 * m, 10240)),
            (max(1, n // 2), 10240)]


@pytest.mark.parametrize("path", INSTANCES, ids=lambda path: path.stem)
def test_with_no_effect_the_world_takes_the_models_time(path: Path) -> None:
    job = job_spec(load_instance(path))
    for n, m in plans(path):
        model = evaluate(path, functions=n, memory_mb=m)
        assert model.valid
        run = run_plan(World(), job, n, m, (0,))
        assert run.finished and run.reason == ""
        assert run.time_s == pytest.approx(model.time_s, rel=REL), (n, m)
        assert run.cost_usd == pytest.approx(model.cost_usd, rel=REL), (n, m)
        assert run.restarts == model.restarts, (n, m)
        assert run.failures == 0 and run.invocations == n * (run.restarts + 1)


def test_with_no_effect_an_iteration_is_compute_and_two_exchanges() -> None:
    seg = segment(World(), SMALL, 8, 1024)
    assert seg.compute_s.shape == (79, 8)
    assert np.all(seg.compute_s[:-1] == COMPUTE_S)
    assert np.allclose(seg.compute_s[-1], COMPUTE_S * (20_000 / 256 - 78))  # what is left
    assert np.allclose(seg.exchange_s, 2 * 10 / min(80, 1000 / 8))
    assert seg.setup_s == pytest.approx(100 / 8 / 50)  # the data load, nothing else
    assert seg.samples == SMALL.total_samples


def test_cpu_speed_follows_amdahl_in_vcpus_and_stops_at_the_cap() -> None:
    cpu = Cpu(parallel_fraction=0.9, mb_per_vcpu=1769, max_vcpu=6, profiled_mb=1769)
    world = World(cpu=cpu)

    def compute(m: int) -> float:
        return float(segment(world, SMALL, 8, m, until_samples=1).compute_s[0, 0])

    assert compute(1769) == pytest.approx(COMPUTE_S)  # the profile, at the profiled memory
    assert compute(1769) / compute(3538) == pytest.approx(1 / (0.1 + 0.9 / 2))
    assert compute(884) / compute(1769) == pytest.approx(1769 / 884)  # time slices
    times = [run_plan(world, SMALL, 8, m, (1,)).time_s for m in (3538, 7076, 10614, 20000)]
    assert times[0] > times[1] > times[2] == times[3]  # past 6 vCPUs memory buys nothing


def fifo_reference(arrivals: np.ndarray, service: float, own: float) -> float:
    """When the last of `arrivals` is delivered by a one-at-a-time queue, written plainly."""
    free, last = -math.inf, -math.inf
    for arrival in sorted(arrivals):
        free = max(free, arrival) + service
        last = max(last, free, arrival + own)
    return last


def fair_reference(arrivals: np.ndarray, size: float, cap: float, capacity: float) -> float:
    """When the last transfer ends under processor sharing, simulated event by event with each
    transfer's remaining megabytes (not the engine's virtual time)."""
    pending, left, now = sorted(arrivals), [], min(arrivals)
    while pending or left:
        rate = min(cap, capacity / len(left)) if left else 0.0
        arrive = pending[0] if pending else math.inf
        depart = now + min(left) / rate if left else math.inf
        later = min(arrive, depart)
        left = [mb - rate * (later - now) for mb in left]
        now = later
        if arrive <= depart:
            left.append(size)
            pending.pop(0)
        else:
            left.remove(min(left))
    return now


@pytest.mark.parametrize("service", ["fifo", "fair"])
def test_the_ps_nic_queue_is_what_the_run_measured(service: str) -> None:
    ps = Ps(nic_mbps=400, per_message_ms=3, service=service)
    world = World(ps=ps, stragglers=Stragglers(cv=0.3), bandwidth=Bandwidth(scale=0.8))
    seg = segment(world, SMALL, 8, 1024, until_samples=3000)
    nic, delay, size, cap = 400 * 0.8, 0.003, 10.0, 80.0
    for compute, exchange in zip(seg.compute_s, seg.exchange_s, strict=True):
        if service == "fifo":
            barrier = fifo_reference(compute, delay + size / nic, size / cap)
            end = fifo_reference(np.full(8, barrier), delay + size / nic, size / cap)
        else:
            barrier = fair_reference(compute + delay, size, cap, nic)
            end = barrier + delay + size / min(cap, nic / 8)
        assert exchange == pytest.approx(end - compute.max(), rel=1e-9)


def test_fifo_contention_grows_with_n_from_the_queue() -> None:
    world = World(ps=Ps(nic_mbps=500, per_message_ms=2, service="fifo"))
    service = 0.002 + 10 / 500
    exchanges = []
    for n in (2, 8, 32, 64):
        seg = segment(world, SMALL, n, 1024, until_samples=1)
        exchanges.append(float(seg.exchange_s[0]))
        assert exchanges[-1] == pytest.approx(2 * max(n * service, 10 / 80))
    assert exchanges == sorted(exchanges) and exchanges[-1] > 10 * exchanges[0]
    # Staggered pushes are served while slower workers still compute: less waiting after
    # the slowest than when all arrive together.
    staggered = segment(dataclasses.replace(world, stragglers=Stragglers(cv=0.5)), SMALL, 32,
                        1024, until_samples=3000)
    assert staggered.exchange_s.mean() < exchanges[2]


def test_a_heavy_tail_keeps_the_mean_and_raises_the_time() -> None:
    world = World(stragglers=Stragglers(tail=Tail(shape=1.5, share=0.05)))
    seg = segment(world, SMALL, 16, 1024, key=(7,))
    multipliers = seg.compute_s / COMPUTE_S
    assert multipliers.mean() == pytest.approx(1.0, abs=0.1)
    assert multipliers.max() > 3 and np.median(multipliers) < 1
    assert run_plan(world, SMALL, 16, 1024, (7,)).time_s > 1.3 * run_plan(
        World(), SMALL, 16, 1024, (7,)).time_s


def test_persistent_slow_hosts_slow_a_worker_for_its_whole_round() -> None:
    slow = World(stragglers=Stragglers(persistent=Persistent(share=0.5, slowdown=2.0)))
    seg = segment(slow, SMALL, 32, 1024)
    per_worker = seg.compute_s[:-1] / COMPUTE_S  # (the last iteration trains what is left)
    assert np.all(per_worker == per_worker[0])  # constant through the round
    assert set(np.round(per_worker[0], 12)) == {1.0, 2.0}  # not normalised: a real slowdown
    everyone = World(stragglers=Stragglers(persistent=Persistent(share=1.0, slowdown=2.0)))
    assert np.all(segment(everyone, SMALL, 8, 1024).compute_s[:-1] == 2 * COMPUTE_S)


def test_drift_has_mean_one_and_moves_the_time() -> None:
    sd = 0.5
    world = World(bandwidth=Bandwidth(drift=Drift(sd=sd, period_s=60)))
    nominal = 2 * 10 / 80
    first = np.array([
        nominal / segment(world, SMALL, 8, 1024, key=(k,), until_samples=1).exchange_s[0]
        for k in range(400)
    ])  # each job's factor in its first step: z_0 from the stationary N(0, sd²)
    assert first.mean() == pytest.approx(1.0, abs=0.08)  # exp(z − sd²/2) has mean 1
    assert (1 / first).mean() == pytest.approx(math.exp(sd**2), rel=0.08)
    times = {run_plan(world, SMALL, 8, 1024, (k,)).time_s for k in range(5)}
    assert len(times) == 5
    # Piecewise constant over 60 s steps: few distinct exchanges in a 150 s run.
    seg = segment(world, SMALL, 8, 1024, key=(3,))
    assert 2 <= len(set(np.round(seg.exchange_s, 12))) <= 4


def test_cold_starts_and_the_ramp_delay_the_round() -> None:
    big = dataclasses.replace(SMALL, samples=2e6, ps_bandwidth_mbps=1e6)  # one round
    base = run_plan(World(), big, 2000, 1024, (1,))
    ramp = run_plan(World(platform_ramp=PlatformRamp(burst=1000, per_10s=500)), big, 2000,
                    1024, (1,))
    assert base.restarts == ramp.restarts == 0
    assert ramp.time_s == pytest.approx(base.time_s + 20.0)  # the last is invoked at 20 s
    offsets = 10 * np.ceil(np.maximum(np.arange(2000) - 1000 + 1, 0) / 500)
    assert ramp.gb_seconds == pytest.approx(2000 * ramp.time_s - offsets.sum())
    cold = World(cold_start=ColdStart(base_s=2.0, per_gb_s=0.5, per_image_gb_s=0.25,
                                      image_gb=4.0))
    assert run_plan(cold, SMALL, 8, 2048, (1,)).time_s == pytest.approx(
        run_plan(World(), SMALL, 8, 2048, (1,)).time_s + 2.0 + 0.5 * 2 + 0.25 * 4)


def test_startup_replaces_the_profiles_per_round() -> None:
    job = dataclasses.replace(SMALL, startup_base_s=100.0, startup_per_function_s=10.0)
    world = World(startup=Startup(base_s=3.0, per_function_s=0.5))
    assert run_plan(world, job, 8, 1024, (1,)).time_s == pytest.approx(
        run_plan(World(), SMALL, 8, 1024, (1,)).time_s + 3.0 + 0.5 * 8)


def test_crashes_lose_the_work_since_the_last_checkpoint() -> None:
    long = dataclasses.replace(SMALL, samples=200_000.0)
    world = World(crashes=Crashes(rate_per_h=20, checkpoint_every_s=60), checkpoint_s=1.0)
    session = Session(world, long, (5,))
    seg = session.advance(8, 1024)
    run = session.result()
    assert run.finished and run.failures == seg.failures > 0
    assert seg.compute_s.shape[0] > run.iterations  # iterations run, some lost and redone
    assert run.invocations == 8 * (run.restarts + 1) + run.failures
    assert run.time_s > run_plan(World(), long, 8, 1024, (5,)).time_s
    assert seg.exposure_s > 0


def test_checkpoints_that_cost_nothing_change_nothing() -> None:
    never = World(crashes=Crashes(rate_per_h=1e-9, checkpoint_every_s=10))
    run = run_plan(never, SMALL, 8, 1024, (1,))
    assert run.time_s == pytest.approx(run_plan(World(), SMALL, 8, 1024, (1,)).time_s)
    assert run.checkpoints > 5


def test_measurement_noise_changes_what_is_seen_never_the_truth() -> None:
    truth = World(stragglers=Stragglers(cv=0.2))
    noisy = dataclasses.replace(truth, measurement=Measurement(cv=0.1))
    assert run_plan(noisy, SMALL, 8, 1024, (4,)) == run_plan(truth, SMALL, 8, 1024, (4,))
    seen, real = segment(noisy, SMALL, 8, 1024, key=(4,)), segment(truth, SMALL, 8, 1024,
                                                                    key=(4,))
    ratio = seen.compute_s / real.compute_s
    assert ratio.mean() == pytest.approx(1.0, abs=0.02)
    assert ratio.std() == pytest.approx(0.1, rel=0.15)
    assert seen.seconds != real.seconds and seen.samples == real.samples
    checked = []
    for world in (truth, noisy):  # a session's truth too, through checks
        session = Session(world, SMALL, (4,))
        session.advance(8, 1024, until_samples=8000)
        session.advance(8, 1024)
        checked.append(session.result())
    assert checked[0] == checked[1]


def test_common_random_numbers_two_plans_share_worker_zeros_luck() -> None:
    world = World(stragglers=Stragglers(cv=0.3, tail=Tail(shape=2, share=0.1)))
    small = segment(world, SMALL, 4, 1024, key=(9,)).compute_s
    large = segment(world, SMALL, 16, 4096, key=(9,)).compute_s
    rows = min(len(small), len(large)) - 1  # full iterations only
    # Worker i's draw at iteration t is the same whatever n and m (and the compute per
    # iteration scales with the local batch, 4x smaller on 16 functions).
    assert np.allclose(small[:rows, :4] / small[0, 0], large[:rows, :4] / large[0, 0])
    other = segment(world, SMALL, 4, 1024, key=(10,)).compute_s
    assert not np.allclose(small[:rows], other[:rows])
    assert run_plan(world, SMALL, 4, 1024, (9,)) == run_plan(world, SMALL, 4, 1024, (9,))


def test_a_plan_that_cannot_run_is_untrainable_never_an_exception() -> None:
    dead = dataclasses.replace(SMALL, rate_intercept=-1.0)
    run = run_plan(World(), dead, 8, 1024, (1,))
    assert (run.finished, run.reason, run.time_s, run.cost_usd) == (False, "untrainable", 0, 0)
    session = Session(World(), SMALL, (1,))
    seg = session.advance(8, 1024, global_batch=4)  # a local batch of 0.5
    assert session.done and seg.compute_s.shape == (0, 8) and seg.seconds == 0
    assert session.result().reason == "untrainable"
    assert run_plan(World(), dataclasses.replace(SMALL, storage_intercept=0.0), 8, 1024,
                    (1,)).reason == "untrainable"


def test_runs_past_the_limits_are_abandoned() -> None:
    storm = World(crashes=Crashes(rate_per_h=1e4))  # a crash every few ms on 50 functions
    run = run_plan(storm, SMALL, 50, 1024, (1,))
    assert (run.finished, run.reason) == (False, "abandoned") and run.failures >= 100
    huge = dataclasses.replace(SMALL, samples=1e15)
    run = run_plan(World(), huge, 8, 1024, (1,))
    assert (run.reason, run.time_s) == ("abandoned", 0.0)
    assert MAX_WORKER_ITERATIONS < 1e15 / (32 * 8) * 8
    short = dataclasses.replace(SMALL, samples=1e7, timeout_s=2.0, timeout_margin_s=1.0)
    run = run_plan(World(), short, 8, 1024, (1,))  # an iteration per 1 s round
    assert run.reason == "abandoned" and run.restarts + run.failures < 10_000


def test_a_switch_pays_the_setup_again_a_continuation_does_not() -> None:
    world = World(cold_start=ColdStart(base_s=1.0), checkpoint_s=0.5)
    session = Session(world, SMALL, (2,))
    first = session.advance(8, 1024, until_samples=5000)
    same = session.advance(8, 1024, until_samples=10_000)
    moved = session.advance(16, 1024, until_samples=15_000)
    back = session.advance(8, 1024)
    assert first.setup_s == pytest.approx(1.0 + 100 / 8 / 50)
    # 20 iterations reach 5,000 samples (256 each), then the check's checkpoint.
    assert first.seconds == pytest.approx(first.setup_s + 20 * (COMPUTE_S + 0.25) + 0.5)
    assert same.setup_s == 0.0
    load16 = 100 / 16 / 50
    assert moved.setup_s == pytest.approx(1.0 + load16 + SMALL.restart_overhead_s)
    assert back.setup_s == pytest.approx(1.0 + 100 / 8 / 50 + SMALL.restart_overhead_s)
    run = session.result()
    assert run.finished and run.switches == 2 and [n for n, _ in run.stages] == [8, 16, 8]
    assert sum(seconds for _, seconds in run.stages) == pytest.approx(run.time_s)
    assert run.checkpoints == 3  # at each of the three checks
    assert run.invocations == 8 + 16 + 8


def test_a_static_run_stops_early_when_asked() -> None:
    full = run_plan(World(), SMALL, 8, 1024, (1,))
    stopped = run_plan(World(), SMALL, 8, 1024, (1,), stop_after_s=full.time_s / 2)
    assert (stopped.finished, stopped.reason) == (False, "stopped")
    assert full.time_s / 2 <= stopped.time_s < full.time_s / 2 + 2
    cheap = run_plan(World(), SMALL, 8, 1024, (1,), stop_above_usd=full.cost_usd / 3)
    assert cheap.reason == "stopped" and cheap.cost_usd < full.cost_usd / 2
    assert run_plan(World(), SMALL, 8, 1024, (1,), stop_after_s=full.time_s) == full


def test_a_trial_measures_a_few_iterations_and_is_cut_at_its_limit() -> None:
    world = World(cold_start=ColdStart(base_s=2.0))
    measured = trial(world, SMALL, 8, 1024, iterations=10, max_s=math.inf, key=(1,))
    assert measured.setup_s == 2.0 and len(measured.iteration_s) == 10
    assert measured.iteration_s[0] == pytest.approx(COMPUTE_S + 0.25)
    assert measured.load_share == pytest.approx(10 * 256 / 20_000)
    cut = trial(world, SMALL, 8, 1024, iterations=10, max_s=5.0, key=(1,))
    assert len(cut.iteration_s) == 2 and cut.time_s == pytest.approx(7.0)
    with pytest.raises(WorldError, match="`iterations`"):
        trial(world, SMALL, 8, 1024, iterations=0, max_s=5.0, key=(1,))


@pytest.mark.parametrize(
    ("arguments", "field"),
    [((0, 1024), "functions"), ((8, True), "memory_mb"), ((8.5, 1024), "functions")],
)
def test_bad_arguments_are_named(arguments: tuple[object, object], field: str) -> None:
    with pytest.raises(WorldError, match=f"`{field}`"):
        run_plan(World(), SMALL, arguments[0], arguments[1], (1,))  # type: ignore[arg-type]
    with pytest.raises(WorldError, match="`key`"):
        run_plan(World(), SMALL, 8, 1024, "seed")  # type: ignore[arg-type]


finite = st.floats(0.0, 1.0, allow_nan=False)
slowing = st.builds(
    World,
    cold_start=st.none() | st.builds(ColdStart, base_s=st.floats(0, 5), cv=st.floats(0, 1)),
    startup=st.none() | st.builds(Startup, base_s=st.floats(0, 5),
                                  per_function_s=st.floats(0, 0.2)),
    platform_ramp=st.none() | st.builds(PlatformRamp, burst=st.integers(1, 20),
                                        per_10s=st.integers(1, 20)),
    stragglers=st.none() | st.builds(
        Stragglers, persistent=st.builds(Persistent, share=finite, slowdown=st.floats(1, 3))),
    bandwidth=st.none() | st.builds(Bandwidth, scale=st.floats(0.2, 1.0)),
    crashes=st.none() | st.builds(Crashes, rate_per_h=st.floats(0, 30),
                                  checkpoint_every_s=st.floats(5, 200)),
    checkpoint_s=st.floats(0, 2),
)
jobs = st.builds(
    dataclasses.replace, st.just(SMALL), samples=st.floats(500, 50_000),
    timeout_s=st.floats(60, 900), rate_intercept=st.floats(5, 50),
)


@given(slowing, jobs, st.integers(1, 40), st.sampled_from([512, 1024, 4096]),
       st.integers(0, 2**31))
def test_slowing_effects_never_make_a_run_faster(
    world: World, job: JobSpec, n: int, m: int, key: int
) -> None:
    """Property: with only effects that slow a run down (cold starts, start-up, the ramp,
    slow hosts, less bandwidth, crashes, checkpoints that take time), a static run never takes
    less than the same plan with no effect."""
    nominal = run_plan(World(), job, n, m, (key,))
    assume(nominal.finished)
    slowed = run_plan(world, job, n, m, (key,))
    assert slowed.reason in ("", "abandoned")
    if slowed.finished:
        assert slowed.time_s >= nominal.time_s * (1 - 1e-12)


worlds = st.builds(
    World,
    cpu=st.none() | st.builds(Cpu, parallel_fraction=finite),
    ps=st.none() | st.builds(Ps, nic_mbps=st.floats(50, 2000),
                             per_message_ms=st.floats(0, 5),
                             service=st.sampled_from(("fifo", "fair"))),
    stragglers=st.none() | st.builds(
        Stragglers, cv=st.floats(0, 0.5),
        tail=st.none() | st.builds(Tail, shape=st.floats(1.2, 4), share=st.floats(0, 0.2)),
        persistent=st.none() | st.builds(Persistent, share=finite, slowdown=st.floats(1, 3)),
    ),
    bandwidth=st.none() | st.builds(
        Bandwidth, scale=st.floats(0.3, 2),
        drift=st.none() | st.builds(Drift, sd=st.floats(0, 0.6), period_s=st.floats(5, 120)),
    ),
    cold_start=st.none() | st.builds(ColdStart, base_s=st.floats(0, 3), cv=st.floats(0, 0.5)),
    crashes=st.none() | st.builds(Crashes, rate_per_h=st.floats(0, 20),
                                  checkpoint_every_s=st.floats(5, 120)),
    measurement=st.none() | st.builds(Measurement, cv=st.floats(0, 0.3)),
    checkpoint_s=st.floats(0, 2),
)


def recomputed_cost(run: WorldRun, job: JobSpec) -> float:
    return (run.gb_seconds * job.price_per_gb_second + job.ps_price_per_hour * run.time_s / 3600
            + run.invocations * job.price_per_request)


@given(worlds, jobs, st.integers(1, 24), st.sampled_from([256, 1024, 3000]),
       st.integers(0, 2**31))
def test_a_runs_record_adds_up(world: World, job: JobSpec, n: int, m: int, key: int) -> None:
    """Property: cost = billed GB-s × price + the PS's hours + one request per invocation;
    without a ramp every function is billed for the whole run (GB-s = n·m/1024·time, crashes
    included: a replacement is billed from the crash); the stages add up to the time; a run
    is finished with all its samples or says why not."""
    run = run_plan(world, job, n, m, (key,))
    assert run.cost_usd == pytest.approx(recomputed_cost(run, job), rel=1e-9)
    assert run.gb_seconds == pytest.approx(n * m / 1024 * run.time_s, rel=1e-9)
    assert sum(seconds for _, seconds in run.stages) == pytest.approx(run.time_s)
    assert run.finished == (run.reason == "") == (run.samples == job.total_samples)
    assert run.reason in ("", "abandoned", "untrainable")


@given(worlds, st.integers(1, 16), st.integers(0, 2**31), st.floats(0.05, 0.5))
def test_checks_that_cost_nothing_leave_the_run_as_it_was(
    world: World, n: int, key: int, share: float
) -> None:
    """Property: a static plan advanced in pieces (checks every `share` of the job, each free:
    checkpoint_s 0, no crash) runs exactly as one advance: the same iterations, draws and
    time, whatever the effects."""
    world = dataclasses.replace(world, crashes=None, checkpoint_s=0.0)
    whole = run_plan(world, SMALL, n, 1024, (key,))
    session = Session(world, SMALL, (key,))
    while not session.done:
        session.advance(n, 1024, until_samples=session.samples_done + share * SMALL.samples)
    pieces = session.result()
    assert pieces.time_s == pytest.approx(whole.time_s, rel=1e-9)
    assert (pieces.iterations, pieces.invocations, pieces.restarts) == (
        whole.iterations, whole.invocations, whole.restarts)


@given(worlds, st.integers(1, 12), st.integers(0, 2**31), st.integers(1, 5))
def test_the_run_does_not_depend_on_how_the_engine_chunks_it(
    world: World, n: int, key: int, rows: int
) -> None:
    """Property: drawing a few iterations at a time (chunks that end without a checkpoint, so
    a crash must also undo the chunks before it) gives the same run as drawing whole rounds:
    every draw is keyed by its iteration, and a chunk's end is no event of the job."""
    job = dataclasses.replace(SMALL, samples=60_000.0)
    whole = run_plan(world, job, n, 1024, (key,))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "_MAX_DRAW", rows * n)
        cut = run_plan(world, job, n, 1024, (key,))
    assert cut.time_s == pytest.approx(whole.time_s, rel=1e-9)
    assert dataclasses.replace(cut, time_s=whole.time_s, cost_usd=whole.cost_usd,
                               gb_seconds=whole.gb_seconds, stages=whole.stages) == whole
