"""k parameter-server shards in both simulator engines.

A PS of k shards is k machines, each with its own link (NIC) of B_p shared by the n functions;
a function sends d_m/k to each at once, its own link carrying B_f^max in all. So, per
direction, an exchange takes d_m/min(B_f^max, k·B_p/n) + λ + k·c_msg and the PS costs k times
its hourly price. One shard must be the single PS the engines always simulated.

Expectations come from that formula and from `tests.by_hand` applied to the one PS the
formula says k shards are worth (k·B_p at k times the price, λ + k·c_msg of latency), never
from the compiled model.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn import Instance, InstanceError, load_instance
from lambdadnn.models.noise import NoiseModel, draw_factors
from lambdadnn.simulator.engine import (
    PlanRun,
    push_phase_end,
    simulate_job,
    simulate_trial,
)
from lambdadnn.simulator.world import (
    JobSpec,
    Ps,
    Session,
    Stragglers,
    World,
    WorldError,
    WorldRun,
    run_plan,
    trial,
)
from lambdadnn.simulator.worlds import job_spec, load_world
from tests.by_hand import by_hand

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(str(path) for path in ROOT.glob("instances/*.yaml"))
# B_p = 1,200 MB/s, B_f^max = 84 MB/s: 40 functions (40·84 > 2·1,200) stay PS-bound at k = 2.
MOBILENET = str(ROOT / "instances" / "mobilenet-cifar10.yaml")
PS_BOUND = (40, 2048)
REL = 0.005  # the world with no effect against the model (tests/test_world_engine.py)
QUIET = NoiseModel.none()
NOISY = NoiseModel(compute_cv=0.2, bandwidth_cv=0.1, cold_start_median_s=1.0,
                   cold_start_sigma=0.3, failure_rate_per_hour=0.5, checkpoint_every=20)


@cache
def instance(path: str) -> Instance:
    return load_instance(path)


def sharded(job: Instance, shards: object, message_s: object = 0.0, **ps: float) -> Instance:
    """`job` with its PS in `shards` shards (and other PS fields replaced)."""
    server = dataclasses.replace(job.parameter_server, shards=shards, message_s=message_s,
                                 **ps)
    return dataclasses.replace(job, parameter_server=server)


def one_ps_worth(job: Instance) -> Instance:
    """The single PS the model says `job`'s k shards are worth: k·B_p, k times the price, and
    the k messages of each exchange folded into the latency."""
    ps = job.parameter_server
    k = ps.shards
    server = dataclasses.replace(ps, bandwidth_mbps=k * ps.bandwidth_mbps,
                                 price_per_hour=k * ps.price_per_hour, shards=1, message_s=0.0)
    profile = dataclasses.replace(job.profile, latency_s=job.profile.latency_s + k * ps.message_s)
    return dataclasses.replace(job, parameter_server=server, profile=profile)


def formula_exchange(job: Instance, n: int) -> float:
    """One iteration's exchange, push and pull: 2(d_m/min(B_f, k·B_p/n) + λ + k·c_msg)."""
    ps = job.parameter_server
    share = min(ps.function_bandwidth_mbps, ps.shards * ps.bandwidth_mbps / n)
    one_way = job.workload.model_size_mb / share + job.profile.latency_s
    return 2 * (one_way + ps.shards * ps.message_s)


def exchanges(job: Instance, n: int, m: int, noise: NoiseModel, seed: int,
              count: int = 4) -> np.ndarray:
    """The planner-side engine's exchange (barrier to barrier less the slowest compute) in
    `count` iterations drawn from `seed`."""
    run = PlanRun(job, n, m, noise, np.random.default_rng(seed))
    times, finish = run.iteration_times(np.ones(count))
    out: np.ndarray = times - finish.max(axis=1)
    return out


def world_exchanges(world: World, job: JobSpec, n: int, samples: float = 3000.0,
                    key: int = 1) -> np.ndarray:
    """The world's measured exchanges (no measurement noise: the truth) up to `samples`."""
    segment = Session(world, job, (key,)).advance(n, 1024, until_samples=samples)
    return segment.exchange_s


# --- One shard is the single PS. -------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: Path(path).stem)
@pytest.mark.parametrize("noise", [QUIET, NOISY], ids=["quiet", "noisy"])
def test_one_shard_is_the_default_ps_bit_for_bit(path: str, noise: NoiseModel) -> None:
    """An explicit `shards=1, message_s=0` runs exactly as the instance's default PS does, in
    both engines, runs and trials alike."""
    job = instance(path)
    one = sharded(job, 1, 0.0)
    for n, m in [plan for plan in ((8, 512), PS_BOUND, (3, 3000)) if by_hand(job, *plan).valid]:
        for seed in range(3):
            runs = [simulate_job(j, n, m, noise=noise, rng=np.random.default_rng(seed))
                    for j in (job, one)]
            assert runs[0] == runs[1]
            trials = [simulate_trial(j, n, m, iterations=5, noise=noise,
                                     rng=np.random.default_rng(seed)) for j in (job, one)]
            assert trials[0] == trials[1]
        assert job_spec(one) == job_spec(job)
        assert job_spec(job).ps_shards == 1 and job_spec(job).ps_message_s == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_one_shard_computes_the_single_ps_expression_exactly(seed: int) -> None:
    """With one shard the engine's iteration is the single PS's, as it computed it before
    shards existed (the same draws, the same operations): equal to the last bit."""
    job = instance(MOBILENET)
    noise = NoiseModel(compute_cv=0.3, bandwidth_cv=0.2, cold_start_median_s=0.0,
                       cold_start_sigma=0.0)
    for n in (1, 8, 40):
        run = PlanRun(job, n, 2048, noise, np.random.default_rng(seed))
        scales = np.array([1.0, 1.0, 1.0, 0.4])
        times, finish = run.iteration_times(scales)
        rng = np.random.default_rng(seed)
        compute = draw_factors(rng, noise.compute_cv, (len(scales), n))
        jitter = draw_factors(rng, noise.bandwidth_cv, len(scales))
        ps = job.parameter_server
        volume = job.workload.model_size_mb * scales * jitter
        ends = compute * (run.t_comp * scales)[:, None]
        pull = 1 / min(ps.function_bandwidth_mbps, ps.bandwidth_mbps / n)
        single = (push_phase_end(ends, volume, ps.function_bandwidth_mbps, ps.bandwidth_mbps)
                  + volume * pull + 2 * job.profile.latency_s * scales)
        assert np.array_equal(finish, ends)
        assert np.array_equal(times, single)


@pytest.mark.parametrize("world", ["nominal", "degraded", "lambda-2024", "crashy"])
def test_one_shard_in_the_world_is_the_default(world: str) -> None:
    """The bridge's job says one shard and no message cost, and the world runs an explicit
    one exactly as it runs the default."""
    job = job_spec(instance(MOBILENET))
    explicit = dataclasses.replace(job, ps_shards=1, ps_message_s=0.0)
    truth = load_world(world)
    for n, m in ((8, 512), PS_BOUND):
        assert run_plan(truth, job, n, m, (3,)) == run_plan(truth, explicit, n, m, (3,))


@pytest.mark.parametrize("n", [1, 8, 40])
def test_one_shard_in_the_world_is_the_single_nic_exactly(n: int) -> None:
    """With one shard the world's exchange is the single PS's as it computed it before shards
    existed (equal shares without `ps`, the FIFO queue with it), from what the run measured:
    equal to the last bit."""
    job = job_spec(instance(MOBILENET))
    size, cap, link = job.model_mb, job.function_bandwidth_mbps, job.ps_bandwidth_mbps
    stragglers = Stragglers(cv=0.3)
    shared = Session(World(stragglers=stragglers), job, (5,)).advance(n, 1024, until_samples=4e3)
    one_way = size / (min(cap, link / n) * 1.0) + job.latency_s
    durations = shared.compute_s.max(axis=1) + 2 * one_way
    assert np.array_equal(shared.exchange_s, durations - shared.compute_s.max(axis=1))
    ps = Ps(nic_mbps=700.0, per_message_ms=2.0)
    queued = Session(World(ps=ps, stragglers=stragglers), job, (5,)).advance(
        n, 1024, until_samples=4e3)
    service = ps.per_message_ms / 1000 + size / (ps.nic_mbps * 1.0)
    pull = max(n * service, size / cap)
    arrivals = np.sort(queued.compute_s, axis=1)
    if n > 1:
        queue = (arrivals + service * np.arange(n, 0, -1)).max(axis=1)
        barrier = np.maximum(queue, arrivals[:, -1] + size / cap)
    else:
        barrier = arrivals[:, 0] + pull
    durations = barrier + pull
    assert np.array_equal(queued.exchange_s, durations - queued.compute_s.max(axis=1))


# --- k shards: the formula, in both engines. -------------------------------------------------


def test_two_shards_halve_a_ps_bound_exchange() -> None:
    """Zero noise, n·B_f > 2·B_p: each shard's link gives a function B_p/n, so two shards
    give it twice that and the exchange takes half as long (λ = 0, c_msg = 0)."""
    job = instance(MOBILENET)
    n, m = PS_BOUND
    ps = job.parameter_server
    assert n * ps.function_bandwidth_mbps > 2 * ps.bandwidth_mbps
    assert job.profile.latency_s == 0.0
    one, two = (exchanges(sharded(job, k), n, m, QUIET, 0) for k in (1, 2))
    d_m = job.workload.model_size_mb
    assert one == pytest.approx(np.full(4, 2 * d_m / (ps.bandwidth_mbps / n)), rel=1e-12)
    assert two == pytest.approx(one / 2, rel=1e-12)
    # The world, with no effect and with a NIC queue of B_p (all pushes arrive together).
    spec = job_spec(job)
    nic = Ps(nic_mbps=ps.bandwidth_mbps)
    for world in (World(), World(ps=nic), World(ps=dataclasses.replace(nic, service="fair"))):
        base, half = (world_exchanges(world, dataclasses.replace(spec, ps_shards=k), n)
                      for k in (1, 2))
        assert base == pytest.approx(np.full(base.size, one[0]), rel=1e-9)
        assert half == pytest.approx(base / 2, rel=1e-9)


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 16])
@pytest.mark.parametrize(("latency_s", "message_s"), [(0.0, 0.0), (0.01, 0.002)])
def test_an_exchange_is_the_sharded_formula(shards: int, latency_s: float,
                                            message_s: float) -> None:
    """d_m/min(B_f, k·B_p/n) + λ + k·c_msg each way, in both engines: a PS-bound share at
    k ≤ 2, the function's own link from k = 3 on (40 functions × 84 MB/s)."""
    base = instance(MOBILENET)
    job = sharded(dataclasses.replace(
        base, profile=dataclasses.replace(base.profile, latency_s=latency_s)), shards, message_s)
    n, m = PS_BOUND
    expected = formula_exchange(job, n)
    assert exchanges(job, n, m, QUIET, 0) == pytest.approx(np.full(4, expected), rel=1e-12)
    assert world_exchanges(World(), job_spec(job), n) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("shards", [2, 3, 5])
@pytest.mark.parametrize("message_s", [0.0, 0.003])
def test_zero_noise_runs_take_the_time_of_the_ps_the_shards_are_worth(
    shards: int, message_s: float
) -> None:
    """A whole quiet run with k shards is MODEL.md's run on one PS of k·B_p at k times the
    price (to rounding), in the planner's engine; the world agrees within its tolerance."""
    job = sharded(instance(MOBILENET), shards, message_s)
    worth = one_ps_worth(job)
    for n, m in (PS_BOUND, (8, 512), (100, 4000)):
        hand = by_hand(worth, n, m)
        run = simulate_job(job, n, m, noise=QUIET, rng=np.random.default_rng(0))
        assert run.restarts == hand.restarts
        assert run.time_s == pytest.approx(hand.time, rel=1e-9)
        assert run.cost_usd == pytest.approx(hand.cost, rel=1e-9)
        world = run_plan(World(), job_spec(job), n, m, (0,))
        assert world.finished
        assert world.time_s == pytest.approx(hand.time, rel=REL)
        assert world.cost_usd == pytest.approx(hand.cost, rel=REL)


# --- Cost: k × the PS price. -----------------------------------------------------------------


def engine_bill(job: Instance, run_time_s: float, gb_seconds: float, invocations: int) -> float:
    platform, ps = job.platform, job.parameter_server
    return (gb_seconds * platform.price_per_gb_second
            + ps.shards * ps.price_per_hour * run_time_s / 3600
            + invocations * platform.price_per_request)


def world_bill(run: WorldRun, job: JobSpec) -> float:
    return (run.gb_seconds * job.price_per_gb_second
            + job.ps_shards * job.ps_price_per_hour * run.time_s / 3600
            + run.invocations * job.price_per_request)


@pytest.mark.parametrize("shards", [1, 2, 3, 8])
def test_k_shards_cost_k_times_the_ps_price(shards: int) -> None:
    """Every cost either engine reports pays every shard by the hour: runs (noisy, with
    crashes and restarts) and trials."""
    job = sharded(instance(MOBILENET), shards)
    for n, m in (PS_BOUND, (8, 512)):
        for seed in range(3):
            run = simulate_job(job, n, m, noise=NOISY, rng=np.random.default_rng(seed))
            assert run.cost_usd == pytest.approx(
                engine_bill(job, run.time_s, run.gb_seconds, run.invocations), rel=1e-12)
            probe = simulate_trial(job, n, m, iterations=5, noise=NOISY,
                                   rng=np.random.default_rng(seed))
            assert probe.cost_usd == pytest.approx(
                engine_bill(job, probe.time_s, n * m / 1024 * probe.time_s, n), rel=1e-12)
        spec = job_spec(job)
        assert spec.ps_usd_per_hour == shards * job.parameter_server.price_per_hour
        for world in ("nominal", "crashy", "lambda-2024"):
            truth = load_world(world)
            ran = run_plan(truth, spec, n, m, (1,))
            assert ran.cost_usd == pytest.approx(world_bill(ran, spec), rel=1e-9)
            probe_w = trial(truth, spec, n, m, iterations=5, max_s=1e5, key=(2,))
            functions_s = probe_w.time_s * n  # no ramp in these worlds
            assert probe_w.cost_usd == pytest.approx(
                m / 1024 * functions_s * spec.price_per_gb_second
                + shards * spec.ps_price_per_hour * probe_w.time_s / 3600
                + n * spec.price_per_request, rel=1e-9)


def test_shards_that_do_not_speed_a_run_only_add_their_price() -> None:
    """Not PS-bound (n·B_f ≤ B_p): a second shard changes no second of the run, and the run
    costs one more PS-hour per hour."""
    job = instance(MOBILENET)
    n, m = 8, 2048
    one, two = (simulate_job(sharded(job, k), n, m, noise=QUIET, rng=np.random.default_rng(0))
                for k in (1, 2))
    assert two.time_s == pytest.approx(one.time_s, rel=1e-12)
    extra = job.parameter_server.price_per_hour * one.time_s / 3600
    assert two.cost_usd - one.cost_usd == pytest.approx(extra, rel=1e-9)


# --- More shards never slow an exchange. -----------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    shards=st.integers(1, 16),
    more=st.integers(1, 8),
    n=st.integers(1, 64),
    model_mb=st.floats(0.1, 500.0),
    link=st.floats(10.0, 5000.0),
    flow_cap=st.floats(1.0, 500.0),
    cv=st.floats(0.0, 0.6),
    seed=st.integers(0, 2**32 - 1),
)
def test_more_shards_never_slow_an_exchange(
    shards: int, more: int, n: int, model_mb: float, link: float, flow_cap: float, cv: float,
    seed: int,
) -> None:
    """Property: with messages free, adding shards never lengthens any iteration's exchange,
    whatever the functions, sizes, links and stragglers: in the planner's engine (the same
    draws for both) and in the world, without `ps` and with a `fifo` or `fair` NIC queue
    (which charges `per_message_ms` per flow at its shard, so it may be on)."""
    base = instance(MOBILENET)
    job = dataclasses.replace(
        base, workload=dataclasses.replace(base.workload, model_size_mb=model_mb))
    noise = NoiseModel(compute_cv=cv, bandwidth_cv=cv / 2, cold_start_median_s=0.0,
                       cold_start_sigma=0.0)
    few, many = (
        exchanges(sharded(job, k, bandwidth_mbps=link, function_bandwidth_mbps=flow_cap),
                  n, 2048, noise, seed)
        for k in (shards, shards + more)
    )
    assert np.all(many <= few * (1 + 1e-12))
    spec = dataclasses.replace(job_spec(instance(MOBILENET)), model_mb=model_mb,
                               ps_bandwidth_mbps=link, function_bandwidth_mbps=flow_cap)
    stragglers = Stragglers(cv=cv)
    for ps in (None, Ps(nic_mbps=link, per_message_ms=1.0),
               Ps(nic_mbps=link, per_message_ms=1.0, service="fair")):
        world = World(ps=ps, stragglers=stragglers)
        slow, fast = (
            world_exchanges(world, dataclasses.replace(spec, ps_shards=k), n,
                            samples=4096.0, key=seed)
            for k in (shards, shards + more)
        )
        # The same compute draws (keyed by worker and iteration), so iteration by iteration.
        assert fast.shape == slow.shape
        assert np.all(fast <= slow * (1 + 1e-9) + 1e-12)


# --- A bad shard count is refused. -----------------------------------------------------------

BAD_SHARDS = [0, -1, 2.5, "x", True, math.nan, math.inf]


@pytest.mark.parametrize("shards", BAD_SHARDS, ids=repr)
def test_a_bad_shard_count_is_refused_naming_the_field(shards: object) -> None:
    job = sharded(instance(MOBILENET), shards)
    with pytest.raises(InstanceError, match=r"`parameter_server\.shards`"):
        simulate_job(job, 8, 512, noise=QUIET, rng=np.random.default_rng(0))
    with pytest.raises(InstanceError, match=r"`parameter_server\.shards`"):
        simulate_trial(job, 8, 512, iterations=3, noise=QUIET, rng=np.random.default_rng(0))
    with pytest.raises(InstanceError, match=r"`parameter_server\.shards`"):
        job_spec(job)
    with pytest.raises(WorldError, match=r"`job\.ps_shards`"):
        dataclasses.replace(job_spec(instance(MOBILENET)), ps_shards=shards)


@pytest.mark.parametrize("message_s", [-0.1, math.nan, "x"], ids=repr)
def test_a_bad_message_cost_is_refused_naming_the_field(message_s: object) -> None:
    job = sharded(instance(MOBILENET), 2, message_s)
    with pytest.raises(InstanceError, match=r"`parameter_server\.message_s`"):
        simulate_job(job, 8, 512, noise=QUIET, rng=np.random.default_rng(0))
    with pytest.raises(InstanceError, match=r"`parameter_server\.message_s`"):
        job_spec(job)
    with pytest.raises(WorldError, match=r"`job\.ps_message_s`"):
        dataclasses.replace(job_spec(instance(MOBILENET)), ps_message_s=message_s)


def test_a_whole_float_shard_count_is_that_many_shards() -> None:
    job = instance(MOBILENET)
    n, m = PS_BOUND
    assert exchanges(sharded(job, 2.0), n, m, QUIET, 0) == pytest.approx(
        exchanges(sharded(job, 2), n, m, QUIET, 0), rel=0)
    assert job_spec(sharded(job, 2.0)).ps_shards == 2
