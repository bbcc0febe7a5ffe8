"""Discrete-event simulation of one synchronous parameter-server (BSP) training job on functions.

The analytical model (`models.performance`) gives every step its mean; this simulator draws each
worker's and each iteration's time around it (`models.noise.NoiseModel`), so it shows what the
model leaves out: stragglers, cold starts, jitter, wasted time before timeouts and failures.
With `NoiseModel.none()` it reproduces the model's `time` (within 1%: restarts are discrete).

Semantics, for a plan of n functions of m MB (k = the model's iterations, real-valued):

* Rounds. Training runs in invocation rounds. A round invokes n functions at once, each with a
  cold start (lognormal: median `cold_start_median_s`, σ `cold_start_sigma`; none at median 0);
  the round proceeds when the slowest is up. The first round then loads the data:
  t_load = d_t/(n·B_f^s) per worker × a mean-1 lognormal factor (`bandwidth_cv`), the slowest
  worker setting the pace; later rounds load the last checkpoint in `restart_overhead_s`.
* Iterations. Worker i computes in t_comp·X_i (t_comp = the model's per-iteration compute,
  X_i mean-1 lognormal with `compute_cv`, independent per worker and iteration), then pushes
  d_m MB of gradients; when the PS has every gradient, all n workers pull d_m MB of parameters
  and the next iteration starts (the barrier waits for the slowest worker: stragglers).
  The PS is k shards (`parameter_server.shards`, 1 unless set), each holding 1/k of the
  parameters behind its own link of B_p MB/s: a worker's push (and pull) is k flows of d_m/k
  MB, one to each shard, in parallel; its own link carries at most B_f^max in all, so each
  flow at most B_f^max/k (the shards are alike, so an equal split is what a fluid schedule
  gives). Every shard sees the same n flows, so the rules below, stated for one shard's link,
  give every shard's timing and the exchange's. The pulls start together and share a shard's
  link equally: each takes (d_m/k)/min(B_f^max/k, B_p/n) = d_m/min(B_f^max, k·B_p/n). The
  pushes start as workers finish computing, at sorted times c_(1) ≤ … ≤ c_(n); the push phase
  ends at the larger of the two lower bounds on delivering them all, c_(n) + d_m/B_f^max (no
  flow beats its cap) and max_j c_(j) + (n−j+1)·(d_m/k)/B_p (what arrives at a shard from
  c_(j) on needs that much of its link): the fluid water-filling schedule that never idles the
  link while a push could use it. It is exact when pushes cannot contend (n·B_f^max ≤ k·B_p)
  and when they start together (zero noise: the model's d_m/min(B_f^max, k·B_p/n)); strict
  per-flow equal sharing of staggered pushes ends later by less than d_m/B_f^max
  (tests/test_engine.py checks it against an event-driven reference) — the price of a closed
  form over all iterations of a round at once.
  Per iteration, the communication is scaled by one mean-1 lognormal factor (`bandwidth_cv`).
  Each exchange also waits the profile's latency λ (`profile.latency_s`, model v2) and the
  PS's per-message cost c_msg (`parameter_server.message_s`) once per shard: 2(λ + k·c_msg)
  per iteration, the push's and the pull's.
  The model's k is real-valued: ⌊k⌋ full iterations run, then one of fraction k − ⌊k⌋ whose
  compute and communication are scaled by that fraction.
* Start-up (model v2). Every round also pays the profile's start-up, s0 + s1·n seconds
  (`profile.startup`: process start, imports, first pull), after its cold start; as in the
  model, it does not use up the invocation's L. A crashed function relaunched within a round
  pays its cold start only.
* Timeouts. An invocation may work L = timeout_s − timeout_margin_s seconds, counted from the
  round's invocation (cold start included, conservatively). Before each iteration the job
  estimates it by the longest iteration seen so far (at first the model's mean, so zero noise
  estimates exactly); if it would end after L, the job checkpoints (at no cost: the margin is
  for that) and a new round starts: a restart. The first iteration of a round always runs, so
  a plan whose iterations outlast L still progresses, one iteration per round.
* Checkpoints, also every `checkpoint_every` iterations since the last one (at no cost).
* Failures. Each running function crashes at rate `failure_rate_per_hour`/3600 per second of
  work after its cold start (so the job at n times that). The job loses the iterations
  completed since the last checkpoint (redone later: `lost_iterations`), the failed worker is
  re-invoked (a cold start, then `restart_overhead_s` to load the checkpoint) while the others
  wait in their invocation, whose timeout clock keeps running; each crash adds an invocation.
* Billing. Every worker is billed from its invocation to its round's end (cold starts and
  barrier waits included; a crashed worker's replacement starts the moment it crashes), so
  gb_seconds = n·m/1024·time_s; the PS's k shards are paid for time_s (k × its
  `price_per_hour`); each invocation is one request.
* Limits. A run is abandoned (`finished` false: its time and cost are what it ran until then,
  its `iterations` those completed) when it would take the simulator unbounded work, so any
  input ends within seconds: after `MAX_EVENTS` invocation rounds and crashes (at Lambda's
  900 s timeout, 10,000 rounds are 104 days of training; the shipped workloads need at most
  about a hundred, even on one function); after `MAX_CRASHES_WITHOUT_CHECKPOINT` crashes in a
  row that saved no checkpoint (a job whose checkpoint intervals each survive with
  probability p is abandoned wrongly with probability (1−p)^100 an interval, below 3·10⁻⁵ for
  p ≥ 0.1; below p = 0.05 it loses its work twenty times over and is stuck — a failure rate
  of 100 per function-hour on 14 functions crashes every 2.6 s); and when it would draw more
  than `MAX_WORKER_ITERATIONS` worker-iterations (iterations × functions, redone ones
  included: ≈ 4 s of draws; ImageNet for 90 epochs at a local batch of 32 is 3.6·10⁶). A plan
  whose model k·n is already beyond that budget is abandoned before it starts (time 0).

Randomness comes only from `rng`: a seed gives one `JobRun`. Work is vectorised over the
iterations of a round; Python loops only over rounds and failures.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ..inputs.errors import InputError, InstanceError, PlanError
from ..inputs.files import brief
from ..inputs.numbers import integer, number
from ..models import prices
from ..models.noise import NoiseModel, draw_factors
from ..models.performance import BATCH_SLACK, Array, figures
from ..solver.instance import MAX_INTEGER, Instance

_FIGURES = ("iterations", "local_batch", "t_load", "t_comp_total", "t_comm_total")
# Iterations are drawn a segment at a time: enough to reach the timeout or the next crash plus
# a quarter (so a second draw is rare), with at most this many worker-iterations at once.
_DRAW_SLACK = 1.25
_MAX_DRAW = 1 << 20
# The limits of the module docstring, past which a run is abandoned.
MAX_EVENTS = 10_000
MAX_CRASHES_WITHOUT_CHECKPOINT = 100
MAX_WORKER_ITERATIONS = 50_000_000
MAX_TRIAL_ITERATIONS = 1_000  # a profiling trial is short by definition


class UntrainablePlan(InstanceError):
    """The plan cannot train on the instance run (R ≤ 0, B_f^s ≤ 0 or b_l < 1). A replay
    records the job as missed (status 'untrainable'): the truth may make a workload
    untrainable that the belief says trains."""


@dataclass(frozen=True)
class JobRun:
    """What one simulated run of a plan took and cost."""

    time_s: float  # wall time from the first invocation's start to the end of training
    cost_usd: float  # functions' GB-seconds billed + k shards × PS $/hour × time_s + requests
    gb_seconds: float  # n × m/1024 × billed seconds, over all invocations of all functions
    iterations: float  # iterations completed (the model's k, real-valued: the last is partial)
    invocations: int  # function invocations, all workers (n × (restarts+1) without failures)
    restarts: int  # timeout restarts (new invocation round from a checkpoint)
    failures: int  # function crashes
    lost_iterations: float  # iterations redone after failures (work since the last checkpoint)
    checkpoints: int
    finished: bool = True  # False: abandoned at one of the simulator's limits (see above)


@dataclass(frozen=True)
class TrialRun:
    """What a short profiling trial of a plan measured, and what it held and cost."""

    functions: int
    memory_mb: int
    time_s: float  # how long it held its functions: setup, load and iterations
    cost_usd: float
    setup_s: float  # cold start and start-up, until the slowest function is ready
    load_s: float  # loading the share of the data the trial trains on (cut at the limit)
    load_share: float  # that share of a full run's load
    iteration_s: tuple[float, ...]  # each completed iteration's duration, barrier to barrier


def shard_count(instance: Instance) -> int:
    """The instance's `parameter_server.shards` (k), checked: a whole number ≥ 1."""
    return integer("parameter_server.shards", instance.parameter_server.shards,
                   error=InstanceError, maximum=MAX_INTEGER,
                   need=f"a whole number of PS machines in 1..{MAX_INTEGER:,}")


def message_cost(instance: Instance) -> float:
    """The instance's `parameter_server.message_s` (c_msg), checked: finite and ≥ 0."""
    return number("parameter_server.message_s", instance.parameter_server.message_s,
                  error=InstanceError, sign="non-negative")


def push_phase_end(finish: Array, volume: Array, flow_cap: float, link: float) -> Array:
    """When the PS (one shard) has every push, per iteration (row): the fluid bound of the
    module docstring.

    `finish`: iterations × workers compute finish times; `volume`: MB per flow, per iteration;
    `flow_cap`: one flow's cap (B_f^max/k) and `link` = B_p (one shard's), in MB/s.
    """
    n = finish.shape[1]
    if n * flow_cap <= link:  # pushes never contend: each runs at its cap
        alone: Array = finish.max(axis=1) + volume / flow_cap
        return alone
    ordered = np.sort(finish, axis=1)
    behind = np.arange(n, 0, -1, dtype=np.float64)  # pushes from the j-th finish on
    backlog = (ordered + behind * (volume / link)[:, None]).max(axis=1)
    end: Array = np.maximum(ordered[:, -1] + volume / flow_cap, backlog)
    return end


@dataclass(frozen=True)
class Ran:
    """Iterations a run completed one after another within a round, as it drew them.

    The iterations `first + 1` … `first + len(ends_s)` of the plan (counted from its start,
    redone ones again); `ends_s` are their ends in seconds since the round's first iteration
    could start, which is `offset_s` seconds into the run; `compute_s` is iterations × workers
    (each worker's gradient), `durations_s` barrier to barrier, `scales` 1 or the final
    partial iteration's fraction.
    """

    first: int
    offset_s: float
    ends_s: Array
    durations_s: Array
    compute_s: Array
    scales: Array


@dataclass(frozen=True)
class Crashed:
    """A worker crashed `at_s` seconds into the run; the run resumes from the checkpoint at
    iteration `resume_from`."""

    at_s: float
    resume_from: int


Step = Ran | Crashed


@dataclass
class _Tally:
    """What a run has counted so far (its record at the end, or at a halt)."""

    invocations: int = 0
    restarts: int = 0
    failures: int = 0
    lost: int = 0
    checkpoints: int = 0
    segment_from: int = 0  # the checkpoint the current segment started from


@dataclass(frozen=True)
class _Segment:
    """Work from a checkpoint until the round ends, the job ends or a worker crashes."""

    end_s: float  # seconds since the round's invocation
    completed: int  # iterations completed in the segment
    failed: bool
    abandoned: bool = False  # stopped at `MAX_WORKER_ITERATIONS`


class PlanRun:
    """One run of a plan: its constants and the state carried between rounds (the iteration
    estimate, the tally). `run()` simulates it to the end; `steps()` yields what it does as it
    goes (`Ran`, `Crashed`), so a caller can watch it and `halt` it at a checkpoint."""

    def __init__(
        self, instance: Instance, functions: int, memory_mb: int, noise: NoiseModel,
        rng: np.random.Generator,
    ) -> None:
        functions, memory_mb = (
            integer(name, value, error=PlanError, maximum=MAX_INTEGER, floats=False,
                    need=f"an integer in 1..{MAX_INTEGER:,}")
            for name, value in (("functions", functions), ("memory_mb", memory_mb))
        )
        self.shards = shard_count(instance)  # before the model reads them
        message_s = message_cost(instance)
        values = instance.values()
        f = {name: float(v) for name, v in figures(values, functions, memory_mb, _FIGURES).items()}
        k = f["iterations"]
        self.t_comp = f["t_comp_total"] / k
        self.t_load = f["t_load"]
        usable = [k, self.t_comp, self.t_load]
        if not all(math.isfinite(x) and x > 0 for x in usable) or (
            f["local_batch"] < 1 - BATCH_SLACK
        ):
            raise UntrainablePlan(
                f"plan ({functions} functions, {memory_mb} MB) is not valid for "
                f"{brief(instance.name)}: it needs a positive rate and storage bandwidth and a "
                "local batch of at least 1; check it with `lambdadnn evaluate`"
            )
        self.n = functions
        self.memory_mb = memory_mb
        self.full = math.floor(k)
        self.fraction = k - self.full
        self.total = self.full + (1 if self.fraction > 0 else 0)
        self.k = k
        ps = instance.parameter_server
        self.model_mb = instance.workload.model_size_mb
        self.flow_cap = ps.function_bandwidth_mbps
        self.link = ps.bandwidth_mbps  # one shard's
        # A pull of d_m is k flows of d_m/k, each at min(B_f^max/k, B_p/n): together the
        # shard's equal share k times over (k = 1: exactly the one PS's expression).
        self.pull_s_per_mb = 1 / min(self.flow_cap, self.shards * self.link / functions)
        profile = instance.profile
        # The wait of one exchange besides its transfer: λ, and c_msg for each shard's message.
        self.latency_s = profile.latency_s + self.shards * message_s
        self.startup_s = profile.startup.base_s + profile.startup.per_function_s * functions
        platform = instance.platform
        self.usable_s = platform.timeout_s - platform.timeout_margin_s
        self.restart_s = platform.restart_overhead_s
        self.price_gb_s = platform.price_per_gb_second
        self.price_request = platform.price_per_request
        self.price_ps_h = self.shards * ps.price_per_hour  # every shard, by the hour
        self.noise = noise
        self.rng = rng
        self.failure_rate = functions * noise.failure_rate_per_hour / 3600
        self.drawn = 0  # worker-iterations drawn so far, against `MAX_WORKER_ITERATIONS`
        self.tally = _Tally()
        self.saved = 0  # the latest checkpoint taken on request (`save`), in iterations
        # The timeout estimate: the longest iteration so far, at first the model's mean.
        self.estimate = (f["t_comp_total"] + f["t_comm_total"]) / k

    def cold_start(self, count: int) -> float:
        """Seconds until the slowest of `count` freshly invoked functions is up."""
        median = self.noise.cold_start_median_s
        if median == 0:
            return 0.0
        return float(self.rng.lognormal(math.log(median), self.noise.cold_start_sigma, count).max())

    def load_time(self) -> float:
        """The first round's data load: the slowest worker's share from storage."""
        return self.t_load * float(draw_factors(self.rng, self.noise.bandwidth_cv, self.n).max())

    def iteration_times(self, scales: Array) -> tuple[Array, Array]:
        """Durations of iterations scaled by `scales` (1, or the final partial fraction), and
        each worker's compute in them (iterations × workers)."""
        self.drawn += len(scales) * self.n
        compute = draw_factors(self.rng, self.noise.compute_cv, (len(scales), self.n))
        jitter = draw_factors(self.rng, self.noise.bandwidth_cv, len(scales))
        volume = self.model_mb * scales * jitter  # MB per flow, jitter folded into the volume
        finish = compute * (self.t_comp * scales)[:, None]
        # Every shard sees the n workers' flows of volume/k at the same finish times, each
        # flow at most B_f^max/k: one shard's push phase is every shard's.
        k = self.shards
        push_end = push_phase_end(finish, volume / k, self.flow_cap / k, self.link)
        times: Array = push_end + volume * self.pull_s_per_mb + 2 * self.latency_s * scales
        return times, finish

    def segment(
        self, start_s: float, setup_s: float, done: int, fresh: bool, offset_s: float,
    ) -> Generator[Ran, None, _Segment]:
        """Run from the checkpoint at iteration `done`, the setup starting `start_s` into the round
        (which starts `offset_s` into the run), yielding the iterations as they complete.

        `fresh`: the segment opens a round, whose first iteration always runs.
        """
        self.tally.segment_from = done
        crash = math.inf
        if self.failure_rate > 0:
            crash = start_s + float(self.rng.exponential(1 / self.failure_rate))
        clock = start_s + setup_s
        if crash < clock:
            return _Segment(crash, 0, True)
        completed = 0
        while True:
            budget = (MAX_WORKER_ITERATIONS - self.drawn) // self.n
            if budget < 1:
                return _Segment(clock, completed, False, abandoned=True)
            left = self.total - done - completed
            room = (min(self.usable_s, crash) - clock) / self.estimate
            count = max(1, min(left, int(room * _DRAW_SLACK) + 2, _MAX_DRAW // self.n, budget))
            scales = np.ones(count)
            if count == left and self.fraction > 0:
                scales[-1] = self.fraction
            durations, compute = self.iteration_times(scales)
            ends = clock + np.cumsum(durations)
            full = durations / scales
            seen = np.maximum.accumulate(np.concatenate(([self.estimate], full[:-1])))
            fits = ends - durations + seen * scales <= self.usable_s
            if fresh and completed == 0:
                fits[0] = True
            run = count if fits.all() else int(np.argmin(fits))
            if run and crash < ends[run - 1]:
                survived = int(np.searchsorted(ends[:run], crash, side="right"))
                if survived:
                    self.estimate = max(self.estimate, float(full[:survived].max()))
                    yield Ran(done + completed, offset_s, ends[:survived], durations[:survived],
                              compute[:survived], scales[:survived])
                return _Segment(crash, completed + survived, True)
            if run:
                self.estimate = max(self.estimate, float(full[:run].max()))
                clock = float(ends[run - 1])
                yield Ran(done + completed, offset_s, ends[:run], durations[:run], compute[:run],
                          scales[:run])
            completed += run
            if run < count or completed == self.total - done:
                return _Segment(clock, completed, False)

    def run(self) -> JobRun:
        """The whole run (`steps` to the end)."""
        steps = self.steps()
        while True:
            try:
                next(steps)
            except StopIteration as end:
                record: JobRun = end.value
                return record

    def steps(self, *, resumed: bool = False) -> Generator[Step, None, JobRun]:
        """Rounds until all iterations are done, with crashes handled inside each round,
        yielding what happens (`Ran`, `Crashed`) and returning the run's record.

        `resumed`: the run starts from another plan's checkpoint, so its first round also pays
        `restart_overhead_s` to load it, after the data load (`simulator.adaptive`).
        """
        n, every, tally = self.n, self.noise.checkpoint_every, self.tally
        done = 0
        events = stuck = 0  # rounds and crashes; crashes since the last checkpoint
        time_s, finished = 0.0, False
        if self.total * n > MAX_WORKER_ITERATIONS:  # beyond the budget from the start
            return self._record(0.0, 0.0, finished)
        setup = self.load_time()
        if resumed:
            setup += self.restart_s
        while True:
            events += 1
            tally.invocations += n
            start, fresh = self.cold_start(n), True
            offset = time_s + self.startup_s
            while True:
                seg = yield from self.segment(start, setup, done, fresh, offset)
                setup = self.restart_s
                if not seg.failed:
                    break
                events += 1
                tally.failures += 1
                tally.invocations += 1
                kept = max(seg.completed - seg.completed % every, self.saved - done)
                tally.lost += seg.completed - kept
                tally.checkpoints += seg.completed // every
                done += kept
                stuck = 0 if kept else stuck + 1
                yield Crashed(offset + seg.end_s, done)
                if stuck >= MAX_CRASHES_WITHOUT_CHECKPOINT or events >= MAX_EVENTS:
                    break
                start, fresh = seg.end_s + self.cold_start(1), False
            time_s += seg.end_s + self.startup_s
            if seg.failed:  # abandoned after a crash: its lost work is counted above
                break
            done += seg.completed
            if done == self.total:
                tally.checkpoints += max(seg.completed - 1, 0) // every
                finished = True
                break
            if seg.abandoned or events >= MAX_EVENTS:
                break
            # The periodic checkpoints, then the one before the timeout (none if nothing ran).
            tally.checkpoints += (seg.completed - 1) // every + 1
            stuck = 0 if seg.completed else stuck
            tally.restarts += 1
        return self._record(time_s, self.k if finished else float(done), finished)

    def save(self, iterations: int) -> None:
        """A checkpoint now, at the end of its iteration `iterations` (at no cost, as the
        periodic ones): a later crash loses only the work after it (`simulator.adaptive`)."""
        self.saved = iterations

    def halt(self, at_s: float, iterations: int) -> JobRun:
        """Stop the run `at_s` seconds in, at the end of its iteration `iterations` (of the
        round under way): the round ends there with a checkpoint, so nothing is lost, and the
        functions are billed until then. The record counts as finished: it did what was asked.
        """
        tally, every = self.tally, self.noise.checkpoint_every
        tally.checkpoints += (iterations - tally.segment_from - 1) // every + 1
        return self._record(at_s, float(iterations), True)

    def bill(self, time_s: float, invocations: int) -> tuple[float, float]:
        """GB-seconds and dollars of `time_s` on all n functions, as the module docstring says."""
        gb_seconds = self.n * self.memory_mb / 1024 * time_s
        cost = prices.bill(time_s, self.n, self.memory_mb, requests=invocations,
                           price_per_gb_second=self.price_gb_s,
                           price_per_request=self.price_request,
                           ps_price_per_hour=self.price_ps_h)
        return gb_seconds, cost

    def trial(self, iterations: int, max_s: float) -> TrialRun:
        """A profiling trial: one round that loads the share of the data `iterations`
        iterations train on, then trains them, stopped once its functions are up for `max_s`
        seconds (the tuner's limit): what it completed by then is what it measured.
        No failure, checkpoint or timeout interrupts it.
        """
        setup_s = self.cold_start(self.n) + self.startup_s
        share = min(1.0, iterations / self.k)
        load_s = self.load_time() * share
        ends = load_s + np.cumsum(self.iteration_times(np.ones(iterations))[0])
        ran = int(np.searchsorted(ends, max_s, side="right"))
        durations = np.diff(ends[:ran], prepend=load_s)
        time_s = setup_s + (float(ends[-1]) if ran == iterations else max_s)
        _, cost = self.bill(time_s, self.n)
        return TrialRun(
            functions=self.n, memory_mb=self.memory_mb, time_s=time_s, cost_usd=cost,
            setup_s=setup_s, load_s=min(load_s, max_s), load_share=share,
            iteration_s=tuple(float(d) for d in durations),
        )

    def _record(self, time_s: float, iterations: float, finished: bool) -> JobRun:
        """The run's record from its tally, billed as the module docstring says."""
        tally = self.tally
        gb_seconds, cost = self.bill(time_s, tally.invocations)
        return JobRun(
            time_s=time_s, cost_usd=cost, gb_seconds=gb_seconds, iterations=iterations,
            invocations=tally.invocations, restarts=tally.restarts, failures=tally.failures,
            lost_iterations=float(tally.lost), checkpoints=tally.checkpoints, finished=finished,
        )


def simulate_job(
    instance: Instance, functions: int, memory_mb: int, *, noise: NoiseModel,
    rng: np.random.Generator,
) -> JobRun:
    """Simulate training `instance` on `functions` functions of `memory_mb` MB (see above).

    Raises `InstanceError` for a plan the model calls invalid (it cannot train at all); a run
    past the simulator's limits comes back abandoned (`finished` false), never a hang.
    """
    return PlanRun(instance, functions, memory_mb, noise, rng).run()


def simulate_trial(
    instance: Instance, functions: int, memory_mb: int, *, iterations: int,
    max_s: float = math.inf, noise: NoiseModel, rng: np.random.Generator,
) -> TrialRun:
    """A profiling trial of the plan, as a tuner runs one: `iterations` iterations, stopped
    after `max_s` seconds from the moment its functions are up (the tuner's limit), with what
    it completed by then. A trial that completed no iteration measured nothing."""
    count = integer("iterations", iterations, error=InputError, maximum=MAX_TRIAL_ITERATIONS,
                    floats=False, need=f"an integer in 1..{MAX_TRIAL_ITERATIONS:,}")
    if not max_s > 0:
        raise InputError(f"`max_s` must be a positive number, got {brief(max_s)}")
    return PlanRun(instance, functions, memory_mb, noise, rng).trial(count, max_s)
