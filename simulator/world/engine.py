"""The independent world's engine: one job's run, iteration by iteration, from mechanisms.

It shares no code and no closed form with the planner's model (`lambdadnn.models`): it moves a
clock through invocation rounds, cold starts, data loads, each worker's compute, the pushes and
pulls at the parameter server, checkpoints, timeouts and crashes, as docs/WORLD.md describes
effect by effect. With every effect off (`World()`) that walk adds up to the model's time; the
only place the two meet is tests/test_world_engine.py.

Work is vectorised over the iterations of a chunk (a stretch of a round up to its timeout, the
next crash or the advance's stop; periodic checkpoints and drift steps are placed inside it);
Python loops only over rounds, crashes, chunks, the checkpoints of a chunk and, for the
fair-share PS, the events of one exchange. How a round is cut into chunks changes nothing
(tests/test_world_engine.py draws one iteration at a time to check). Every random draw comes
from `streams.Streams`, keyed by (key, stream, worker or slot, index), never by the plan, so
two plans of one job meet the same luck (common random numbers).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from . import streams as st
from .config import World
from .errors import WorldError, shown
from .job import JobSpec
from .streams import FloatArray, IntArray, Key, Streams, check_key

# The limits past which a run is abandoned (finished False, reason "abandoned") rather than
# simulated on: at a 900 s timeout 10,000 rounds are 104 days of training; 100 crashes in a
# row that saved nothing mean the job cannot outlive its crash rate; 50M worker-iterations
# take the engine tens of seconds.
MAX_EVENTS = 10_000  # invocation rounds and crashes
MAX_CRASHES_WITHOUT_CHECKPOINT = 100
MAX_WORKER_ITERATIONS = 50_000_000
MAX_TRIAL_ITERATIONS = 1_000  # a profiling trial is short by definition
MAX_FUNCTIONS = 1_000_000
MAX_MEMORY_MB = 10_000_000
MAX_BATCH = 1e12
# A chunk draws the iterations expected to reach its horizon plus a quarter (so a second draw
# is rare), and at most this many worker-iterations at once (memory stays near 100 MB).
_DRAW_SLACK = 1.25
_MAX_DRAW = 1 << 20
# Passes of the per-iteration bandwidth factor's fixed point before a chunk is cut at the first
# iteration still unsettled (`Session._timeline`).
_FIXED_POINT_PASSES = 6
# Float slack when counting the iterations left (samples / global batch is rarely exact).
_ITERATION_SLACK = 1e-9
_RAMP_STEP_S = 10.0  # platform_ramp: `per_10s` more functions every 10 s
# Relative slack under which two instants count as one (a deadline, a checkpoint's due time, a
# drift step's start): summing a round's durations in one chunk or in many rounds them
# differently, and an exact tie (regular iterations that end on a due time) must not decide
# by the last bit.
_TIME_SLACK = 1e-9


@dataclass(frozen=True)
class Segment:
    """What a strategy may see of one `advance`: timings through measurement noise."""

    functions: int
    memory_mb: int
    seconds: float  # measured wall seconds of the segment (setup, crashes, the check included)
    samples: float  # samples trained in it and kept (exact)
    compute_s: FloatArray  # iterations × workers: each worker's compute, measured
    exchange_s: FloatArray  # per iteration: the exchange after the slowest compute, measured
    setup_s: float  # cold starts, start-up, data and checkpoint loads in it, measured
    rounds: int  # invocation rounds begun in it (a plan's first, and each after a timeout)
    failures: int  # crashes in it
    exposure_s: float  # function-seconds up (after cold start) in it: crash exposure


@dataclass(frozen=True)
class WorldRun:
    """The truth of one job's run (for reports; strategies never see it mid-run)."""

    time_s: float
    cost_usd: float
    gb_seconds: float
    samples: float
    iterations: int  # iterations whose work was kept (redone ones once)
    invocations: int
    restarts: int  # rounds after a plan's first (timeouts, and checks that outlived a round)
    failures: int
    checkpoints: int
    switches: int
    finished: bool  # all samples trained
    reason: str  # "" | "untrainable" | "abandoned" | "stopped"
    stages: tuple[tuple[int, float], ...]  # (functions held, seconds) per plan, in order


@dataclass(frozen=True)
class Trial:
    """A short profiling trial, as `simulator.engine.TrialRun` (timings measured)."""

    functions: int
    memory_mb: int
    time_s: float  # how long it held its functions (true: what it is billed for)
    cost_usd: float
    setup_s: float  # cold starts and start-up, measured
    load_s: float  # loading the data share its iterations train on, measured
    load_share: float  # that share of a full run's load
    iteration_s: tuple[float, ...]  # each completed iteration, barrier to barrier, measured


@dataclass(frozen=True)
class _Plan:
    """The constants of one plan in one world."""

    functions: int
    memory_mb: int
    global_batch: float
    compute_s: float  # one worker's compute of a full local batch, before stragglers
    load_mb: float  # each worker's share of the data set
    storage_mbps: float  # each worker's storage bandwidth, before the bandwidth factor
    nominal_s: float  # an iteration with no randomness: the timeout estimate's start
    offsets: FloatArray  # when each function is invoked after its round starts (ramp)
    cold_s: float  # the cold start before its lognormal factor
    startup_s: float  # per round, after the cold starts

    @property
    def key(self) -> tuple[int, int, float]:
        return self.functions, self.memory_mb, self.global_batch


@dataclass
class _Round:
    """One invocation round under way."""

    deadline: float  # its start + L: no iteration may be expected to end later
    invoked: FloatArray  # each function's invocation (billing starts)
    up: FloatArray  # each function up (after its cold start): crash exposure starts
    crash_at: FloatArray  # each slot's next crash on the job clock (inf: crashes off)
    slow: FloatArray | None  # persistent slowdown per worker (None: effect off)
    longest: float  # the longest iteration of the round so far (the timeout estimate)
    pace: float  # the mean iteration of the last chunk (sizes the next draw)
    iterations: int = 0  # completed in this round (kept or lost to a crash)


@dataclass(frozen=True)
class _Stop:
    """When an advance returns: a sample count, a time, a cost; `check`: with a checkpoint."""

    samples: float = math.inf
    seconds: float = math.inf
    usd: float = math.inf
    check: bool = True


@dataclass(frozen=True)
class _Line:
    """A chunk's iterations laid out in time: the first `valid` are consistent (each at the
    bandwidth factor of its own start); `saves` are those a periodic checkpoint follows."""

    durations: FloatArray
    starts: FloatArray
    ends: FloatArray
    saves: IntArray
    valid: int


@dataclass
class _Recorded:
    """The iterations an advance ran, as the engine drew them (measured at the end)."""

    compute: list[FloatArray] = field(default_factory=list)
    exchange: list[FloatArray] = field(default_factory=list)


class Session:
    """One job's run in one world, advanced plan by plan (`advance`), with its luck `key`."""

    def __init__(self, world: World, job: JobSpec, key: Key) -> None:
        if not isinstance(world, World) or not isinstance(job, JobSpec):
            raise WorldError(
                f"Session needs a World and a JobSpec, got {shown(world)} and {shown(job)}"
            )
        self.world, self.job = world, job
        self._draws = Streams(check_key(key))
        self.elapsed_s = 0.0
        self.samples_done = 0.0
        self.total_samples = job.total_samples
        self.done = False
        self._reason = ""
        self._plan: _Plan | None = None
        self._plan_rounds = 0  # rounds of the current plan so far
        self._round: _Round | None = None
        self._saved = 0.0  # samples at the last checkpoint
        self._kept_iterations = self._saved_iterations = 0
        self._iteration = 0  # iterations drawn so far: the streams' index
        self._worker_iterations = 0
        self._rounds = self._events = self._stuck = 0
        self._invocations = self._restarts = self._failures = 0
        self._checkpoints = self._switches = self._segments = 0
        self._gb_seconds = 0.0  # of rounds that ended
        self._exposed_s = 0.0  # function-seconds up in rounds that ended and crashed functions
        self._setup_s = 0.0
        self._last_checkpoint_s = 0.0
        self._stages: list[tuple[int, float]] = []  # (functions, start)
        self._recorded: _Recorded | None = None
        self._drift = np.zeros(0)  # the bandwidth drift's log-factor path, step by step
        # Per worker slot: work time left to its next crash (while down), crashes so far.
        self._crash_left = np.zeros(0)
        self._slot_crashes = np.zeros(0, dtype=np.int64)

    def advance(
        self, functions: int, memory_mb: int, *, global_batch: float | None = None,
        until_samples: float | None = None, until_s: float | None = None,
    ) -> Segment:
        """Run (functions × memory_mb) from where the job stands until it is done, or the first
        iteration boundary with samples_done ≥ until_samples, or elapsed ≥ until_s.

        The first call starts a fresh plan (cold starts, start-up, data load). A later call
        with the same functions, memory and global batch continues (the previous return was a
        check: it paid checkpoint_s and is a checkpoint). A different one is a switch: the
        round ends and its billing; the new plan pays cold starts, start-up, data load and
        restart_overhead_s. A plan that cannot run makes the session done ("untrainable").
        """
        n, m, batch = _plan_arguments(functions, memory_mb, global_batch)
        stop = _Stop(
            samples=_limit("until_samples", until_samples),
            seconds=_limit("until_s", until_s),
        )
        return self._advance(n, m, batch, stop, record=True)

    def result(self) -> WorldRun:
        """The run's record so far (a session not done counts as "stopped")."""
        finished = self.samples_done >= self.total_samples
        reason = "" if finished else (self._reason or "stopped")
        gb_seconds = self._billed_gb_s(self.elapsed_s)
        starts = [start for _, start in self._stages] + [self.elapsed_s]
        return WorldRun(
            time_s=self.elapsed_s,
            cost_usd=self._cost(self.elapsed_s),
            gb_seconds=gb_seconds,
            samples=self.samples_done,
            iterations=self._kept_iterations,
            invocations=self._invocations,
            restarts=self._restarts,
            failures=self._failures,
            checkpoints=self._checkpoints,
            switches=self._switches,
            finished=finished,
            reason=reason,
            stages=tuple(
                (n, end - start)
                for (n, start), end in zip(self._stages, starts[1:], strict=True)
            ),
        )

    def _rate(self, memory_mb: float) -> float:
        """Samples/s of one worker: the profile's line, or (with `cpu`) Amdahl's law in the
        vCPUs memory buys, equal to the profile at the profiled memory."""
        job, cpu = self.job, self.world.cpu

        def profile(m: float) -> float:
            return job.rate_slope * min(m, job.rate_saturates_at_mb) + job.rate_intercept

        if cpu is None:
            return profile(memory_mb)

        def speedup(m: float) -> float:
            vcpu = min(m / cpu.mb_per_vcpu, cpu.max_vcpu)
            if vcpu < 1:  # time slices of one vCPU
                return vcpu
            return 1.0 / ((1.0 - cpu.parallel_fraction) + cpu.parallel_fraction / vcpu)

        return profile(cpu.profiled_mb) * speedup(memory_mb) / speedup(cpu.profiled_mb)

    def _make_plan(self, n: int, m: int, batch: float | None) -> _Plan | None:
        """The plan's constants, or None when it cannot run (rate or storage bandwidth ≤ 0,
        local batch < 1)."""
        job, world = self.job, self.world
        global_batch = min(n * job.local_batch, job.max_global_batch) if batch is None else batch
        rate = self._rate(m)
        storage = min(job.storage_slope * m + job.storage_intercept, job.storage_max_mbps)
        if not (rate > 0 and storage > 0 and global_batch / n >= 1 - _ITERATION_SLACK):
            return None
        compute = global_batch / n / rate
        link = min(job.function_bandwidth_mbps, job.ps_shards * job.ps_bandwidth_mbps / n)
        index = np.arange(n, dtype=np.float64)
        ramp = world.platform_ramp
        offsets = np.zeros(n) if ramp is None else _RAMP_STEP_S * np.where(
            index < ramp.burst, 0.0, np.ceil((index - ramp.burst + 1) / ramp.per_10s)
        )
        cold = world.cold_start
        cold_s = 0.0 if cold is None else (
            cold.base_s + cold.per_gb_s * m / 1024 + cold.per_image_gb_s * cold.image_gb
        )
        startup = world.startup
        startup_s = (
            job.startup_base_s + job.startup_per_function_s * n if startup is None
            else startup.base_s + startup.per_function_s * n
        )
        return _Plan(
            functions=n, memory_mb=m, global_batch=global_batch, compute_s=compute,
            load_mb=job.dataset_mb / n, storage_mbps=storage,
            nominal_s=compute + 2 * (job.model_mb / link + _wait_s(job)), offsets=offsets,
            cold_s=cold_s, startup_s=startup_s,
        )

    def _iterations_left(self, plan: _Plan) -> tuple[int, float]:
        """Iterations to the end, and the last one's share of a full batch."""
        ratio = (self.total_samples - self.samples_done) / plan.global_batch
        full = math.floor(ratio + _ITERATION_SLACK)
        part = ratio - full
        if part <= _ITERATION_SLACK:
            return full, 1.0
        return full + 1, part

    def _advance(
        self, n: int, m: int, batch: float | None, stop: _Stop, *, record: bool
    ) -> Segment:
        """Enter the plan and run it to the stop; the segment, measured (`record` False: the
        iterations are not kept, as `run_plan` needs only the record)."""
        begin, samples, failures = self.elapsed_s, self.samples_done, self._failures
        rounds = self._rounds
        setup, exposed = self._setup_s, self._exposure(self.elapsed_s)
        self._recorded = _Recorded() if record else None
        if not self.done:
            self._enter(n, m, batch)
        if not self.done:
            self._run(stop)
        recorded, self._recorded = self._recorded, None
        compute = (
            np.concatenate(recorded.compute) if recorded and recorded.compute
            else np.zeros((0, n))
        )
        exchange = (
            np.concatenate(recorded.exchange) if recorded and recorded.exchange else np.zeros(0)
        )
        seconds, setup_s = self.elapsed_s - begin, self._setup_s - setup
        measurement = self.world.measurement
        if record and measurement is not None and measurement.cv > 0:
            values = np.concatenate([compute.ravel(), exchange, [seconds, setup_s]])
            noisy = values * self._draws.lognormal(
                st.MEASURE, self._segments, np.arange(values.size), measurement.cv
            )
            compute = noisy[: compute.size].reshape(compute.shape)
            exchange = noisy[compute.size : -2]
            seconds, setup_s = float(noisy[-2]), float(noisy[-1])
        self._segments += 1
        return Segment(
            functions=n, memory_mb=m, seconds=seconds, samples=self.samples_done - samples,
            compute_s=compute, exchange_s=exchange, setup_s=setup_s,
            rounds=self._rounds - rounds, failures=self._failures - failures,
            exposure_s=self._exposure(self.elapsed_s) - exposed,
        )

    def _enter(self, n: int, m: int, batch: float | None) -> None:
        """Continue the current plan, or switch to (or start) this one."""
        global_batch = (
            min(n * self.job.local_batch, self.job.max_global_batch) if batch is None else batch
        )
        if self._plan is not None and self._plan.key == (n, m, global_batch):
            return
        if self._plan is not None:
            self._switches += 1
            if self._round is not None:
                self._checkpoint(self._round)
                if self.done:
                    return
                self._end_round()
        plan = self._make_plan(n, m, batch)
        if plan is None:
            self._finish("untrainable")
            return
        self._plan, self._plan_rounds = plan, 0
        self._stages.append((n, self.elapsed_s))
        left, _ = self._iterations_left(plan)
        if self._worker_iterations + left * n > MAX_WORKER_ITERATIONS:
            self._finish("abandoned")  # beyond the budget before it starts

    def _run(self, stop: _Stop) -> None:
        """Rounds until the job is done, abandoned, or the stop is met."""
        while not self.done:
            if self._round is None:
                if self._stop_met(stop):
                    return
                self._start_round()
                continue
            if self._train(self._round, stop):
                return

    def _stop_met(self, stop: _Stop) -> bool:
        """Whether the advance's stop is reached at the job's current iteration boundary."""
        return (
            self.samples_done >= stop.samples or self.elapsed_s >= _before(stop.seconds)
            or (stop.usd < math.inf and self._cost(self.elapsed_s) > stop.usd)
        )

    def _finish(self, reason: str) -> None:
        """The session is done: trained (reason ""), untrainable or abandoned."""
        if self._round is not None:
            self._end_round()
        self.done, self._reason = True, reason

    def _start_round(self) -> None:
        """Invoke the plan's functions: ramp, cold starts, start-up, then the data (a plan's
        first round) and/or the checkpoint (any round but the job's first) are loaded."""
        plan, world, now = self._plan, self.world, self.elapsed_s
        assert plan is not None
        n, index = plan.functions, self._rounds
        self._rounds += 1
        self._events += 1
        self._invocations += n
        lanes = np.arange(n)
        invoked = now + plan.offsets
        cold = np.full(n, plan.cold_s)
        if world.cold_start is not None and world.cold_start.cv > 0:
            cold = cold * self._draws.lognormal(st.COLD, lanes, index, world.cold_start.cv)
        up = invoked + cold
        ready = float(up.max())
        prepare = plan.startup_s
        if self._plan_rounds == 0:
            factor = float(self._factors(np.array([ready + prepare]))[0])
            prepare += plan.load_mb / (plan.storage_mbps * factor)
        if self._plan_rounds > 0 or len(self._stages) > 1:
            prepare += self.job.restart_overhead_s
        if self._plan_rounds > 0:
            self._restarts += 1
        self._plan_rounds += 1
        slow = None
        persistent = world.stragglers.persistent if world.stragglers else None
        if persistent is not None and persistent.share > 0:
            hit = self._draws.uniform(st.PERSISTENT, lanes, index) < persistent.share
            slow = np.where(hit, persistent.slowdown, 1.0)
        crash_at = np.full(n, math.inf)
        if world.crashes is not None and world.crashes.rate_per_h > 0:
            crash_at = up + self._crash_clock(n)
        rnd = _Round(
            deadline=now + self.job.usable_s, invoked=invoked, up=up,
            crash_at=crash_at, slow=slow, longest=plan.nominal_s, pace=plan.nominal_s,
        )
        self._round = rnd
        start = self._recover(rnd, ready + prepare)
        if start is None:
            self._finish("abandoned")
            return
        self._setup_s += start - now
        self.elapsed_s = self._last_checkpoint_s = start

    def _end_round(self) -> None:
        """The round ends now: its billing and exposure close; slots keep their crash clocks."""
        rnd, plan, now = self._round, self._plan, self.elapsed_s
        assert rnd is not None and plan is not None
        self._gb_seconds += plan.memory_mb / 1024 * float(np.sum(now - rnd.invoked))
        self._exposed_s += float(np.sum(np.maximum(now - rnd.up, 0.0)))
        if np.isfinite(rnd.crash_at).any():
            self._crash_left[: plan.functions] = rnd.crash_at - now
        self._round = None

    def _crash_clock(self, n: int) -> FloatArray:
        """Work time left to each slot's next crash, slots new to the job drawing their first."""
        known = self._crash_left.size
        if n > known:
            fresh = self._exponential(np.arange(known, n), np.zeros(n - known, dtype=np.int64))
            self._crash_left = np.concatenate([self._crash_left, fresh])
            self._slot_crashes = np.concatenate(
                [self._slot_crashes, np.zeros(n - known, dtype=np.int64)]
            )
        return self._crash_left[:n].copy()

    def _exponential(self, slots: np.ndarray, crashes: np.ndarray) -> FloatArray:
        """Work seconds from a slot's crash number `crashes` to its next."""
        assert self.world.crashes is not None
        mean_s = 3600.0 / self.world.crashes.rate_per_h
        out: FloatArray = -mean_s * np.log(self._draws.uniform(st.CRASH, slots, crashes))
        return out

    def _recover(self, rnd: _Round, resume: float) -> float | None:
        """Crashes before `resume` (each re-invokes its function: cold start, then the
        checkpoint load); when training can resume, or None when a limit abandons the job."""
        while self._events < MAX_EVENTS and self._stuck < MAX_CRASHES_WITHOUT_CHECKPOINT:
            slot = int(np.argmin(rnd.crash_at))
            at = float(rnd.crash_at[slot])
            if at >= resume:
                return resume
            self.elapsed_s = at
            resume = max(resume, self._crash(rnd, slot, at))
        return None

    def _crash(self, rnd: _Round, slot: int, at: float) -> float:
        """Slot `slot` crashes at `at`: the work since the checkpoint is lost; its replacement
        is up after a cold start and ready after loading the checkpoint (returned)."""
        self._failures += 1
        self._events += 1
        self._invocations += 1
        self._stuck += 1
        self.samples_done, self._kept_iterations = self._saved, self._saved_iterations
        self._exposed_s += at - float(rnd.up[slot])
        plan, world = self._plan, self.world
        assert plan is not None and world.crashes is not None
        crashes = int(self._slot_crashes[slot])
        cold = plan.cold_s
        if world.cold_start is not None and world.cold_start.cv > 0:
            cold *= float(self._draws.lognormal(
                st.COLD_REPLACEMENT, slot, crashes, world.cold_start.cv
            )[0])
        self._slot_crashes[slot] = crashes + 1
        rnd.up[slot] = at + cold
        rnd.crash_at[slot] = at + cold + float(
            self._exponential(np.array([slot]), np.array([crashes + 1]))[0]
        )
        return at + cold + self.job.restart_overhead_s

    def _checkpoint(self, rnd: _Round) -> bool:
        """Save the work since the last checkpoint (checkpoint_s); False when a crash struck
        before it was saved (the work is lost, training resumes after recovery)."""
        now = self.elapsed_s
        if self.samples_done == self._saved:
            return True  # nothing new to save
        end = now + self.world.checkpoint_s
        at = float(rnd.crash_at.min())
        if at < end:
            self._crash_during(rnd, at)
            return False
        self.elapsed_s = self._last_checkpoint_s = end
        self._saved, self._saved_iterations = self.samples_done, self._kept_iterations
        self._checkpoints += 1
        self._stuck = 0
        return True

    def _crash_during(self, rnd: _Round, at: float) -> None:
        """A crash at `at` in the middle of training: recover, or abandon at a limit."""
        slot = int(np.argmin(rnd.crash_at))
        self.elapsed_s = at
        resume = self._recover(rnd, self._crash(rnd, slot, at))
        if resume is None:
            self._finish("abandoned")
            return
        self._setup_s += resume - at
        self.elapsed_s = self._last_checkpoint_s = resume

    def _train(self, rnd: _Round, stop: _Stop) -> bool:
        """Train in the round chunk by chunk (a chunk runs to the timeout, the next crash or the
        stop, periodic checkpoints inside it); True when the advance returns (stop met, done,
        abandoned), False when the round ended at its timeout."""
        plan = self._plan
        assert plan is not None
        n = plan.functions
        while True:
            if self.samples_done >= self.total_samples:
                self._finish("")
                return True
            if self._stop_met(stop):
                if not stop.check or self._checkpoint(rnd):
                    return True
                if self.done:
                    return True
                continue
            budget = (MAX_WORKER_ITERATIONS - self._worker_iterations) // n
            if budget < 1:
                self._finish("abandoned")
                return True
            now = self.elapsed_s
            crash = float(rnd.crash_at.min())
            horizon = min(rnd.deadline, crash, stop.seconds)
            left, part = self._iterations_left(plan)
            wanted = left if stop.samples == math.inf else max(
                1, math.ceil((stop.samples - self.samples_done) / plan.global_batch)
            )
            guess = int(max(horizon - now, 0.0) / rnd.pace * _DRAW_SLACK) + 2
            count = max(1, min(left, wanted, guess, _MAX_DRAW // n, budget))
            final = count == left
            compute = self._compute(rnd, count, part if final else 1.0)
            line = self._timeline(compute, now, rnd.pace, self._every(), final)
            # Timeout: an iteration runs when its start plus the longest iteration of the
            # round so far (at first the nominal one) fits in L; a round's first always runs.
            longest = np.maximum.accumulate(
                np.concatenate(([rnd.longest], line.durations[:-1]))
            )
            fits = line.starts + longest <= _after(rnd.deadline)
            if rnd.iterations == 0:
                fits[0] = True
            fitting = count if fits.all() else int(np.argmin(fits))
            cut = int(np.searchsorted(line.ends, _before(stop.seconds))) + 1
            run = min(fitting, line.valid, cut)
            if stop.usd < math.inf:
                over = self._cost_line(line.ends) > stop.usd
                if over.any():
                    run = min(run, int(np.argmax(over)) + 1)
            if run == 0:  # the next iteration would outlast the invocation: a new round
                if self._round_over(rnd):
                    return False
                if self.done:
                    return True
                continue
            saves = line.saves[line.saves < run]
            checkpoint_s = self.world.checkpoint_s
            end = float(line.ends[run - 1])
            if saves.size and saves[-1] == run - 1:
                end += checkpoint_s
            if crash < end:  # lost: everything after the last checkpoint completed before it
                kept = saves[line.ends[saves] + checkpoint_s <= crash]
                self._commit(line, kept, int(kept[-1]) + 1 if kept.size else 0, False)
                completed = int(np.searchsorted(line.ends[:run], crash, side="right"))
                # The iteration under way at the crash was drawn; none was during a checkpoint.
                started = completed + int(
                    completed < line.starts.size and bool(line.starts[completed] <= crash)
                )
                self._consume(rnd, started, line.durations[:completed], compute[:completed])
                self._crash_during(rnd, crash)
                if self.done:
                    return True
                continue
            self._consume(rnd, run, line.durations[:run], compute[:run])
            self._commit(line, saves, run, final and run == count)
            rnd.pace = float(line.durations[:run].mean())
            self.elapsed_s = end
            if run == fitting < count and self.samples_done < self.total_samples:
                if self._round_over(rnd):  # the next iteration would outlast the invocation
                    return False
                if self.done:
                    return True

    def _round_over(self, rnd: _Round) -> bool:
        """The round ends at its timeout with a checkpoint; False when a crash struck first
        (training resumes, from the older checkpoint, within the same round)."""
        if not self._checkpoint(rnd):
            return False
        self._end_round()
        return True

    def _every(self) -> float:
        """Seconds of training between periodic checkpoints (only with crashes)."""
        crashes = self.world.crashes
        return math.inf if crashes is None else crashes.checkpoint_every_s

    def _commit(self, line: _Line, saves: IntArray, upto: int, final: bool) -> None:
        """Keep the chunk's first `upto` iterations and its periodic checkpoints `saves`
        (`final`: the last of them is the job's last)."""
        plan = self._plan
        assert plan is not None
        done = 0
        for save in saves.tolist():
            self._progress(save + 1 - done, plan, False)
            done = save + 1
            self._saved, self._saved_iterations = self.samples_done, self._kept_iterations
            self._last_checkpoint_s = float(line.ends[save]) + self.world.checkpoint_s
            self._checkpoints += 1
            self._stuck = 0
        self._progress(upto - done, plan, final)

    def _consume(
        self, rnd: _Round, drawn: int, durations: FloatArray, compute: FloatArray
    ) -> None:
        """Account for `drawn` iterations drawn from the streams, the completed ones (kept or
        not) in the round (its count, its longest) and in the record."""
        assert self._plan is not None
        n = self._plan.functions
        rnd.iterations += durations.size
        if durations.size:
            rnd.longest = max(rnd.longest, float(durations.max()))
        self._iteration += drawn
        self._worker_iterations += drawn * n
        if self._recorded is not None and durations.size:
            full = np.broadcast_to(compute, (durations.size, n))
            self._recorded.compute.append(full)
            self._recorded.exchange.append(durations - full.max(axis=1))

    def _progress(self, run: int, plan: _Plan, last: bool) -> None:
        """`run` iterations kept (the last of the job trains what is left)."""
        self._kept_iterations += run
        if last:
            self.samples_done = self.total_samples
        else:
            self.samples_done = min(
                self.samples_done + run * plan.global_batch, self.total_samples
            )

    def _compute(self, rnd: _Round, count: int, last_share: float) -> FloatArray:
        """Each worker's compute in the next `count` iterations (count × n, or count × 1 when
        every worker computes alike), the last at `last_share` of a full batch."""
        plan, world = self._plan, self.world
        assert plan is not None
        n = plan.functions
        scale = np.ones(count)
        scale[-1] = last_share
        compute = (plan.compute_s * scale)[:, None]
        stragglers = world.stragglers
        tail = stragglers.tail if stragglers is not None else None
        tailed = tail is not None and tail.share > 0
        if stragglers is not None and (stragglers.cv > 0 or tailed):
            lanes = np.arange(n)[None, :]
            index = (self._iteration + np.arange(count))[:, None]
            spread = np.ones((count, n))
            if stragglers.cv > 0:
                spread = self._draws.lognormal(st.STRAGGLE, lanes, index, stragglers.cv)
            if tail is not None and tailed:
                pick = self._draws.uniform(st.TAIL, lanes, index)
                hit = pick < tail.share
                # Given a hit, pick/share is uniform in (0, 1): its Pareto size, minimum 1.
                size = np.ones_like(pick)
                size[hit] = (pick[hit] / tail.share) ** (-1.0 / tail.shape)
                mean = 1.0 - tail.share + tail.share * tail.shape / (tail.shape - 1.0)
                spread = spread * size / mean
            compute = compute * spread
        if rnd.slow is not None:
            compute = compute * rnd.slow
        return compute

    def _timeline(
        self, compute: FloatArray, now: float, pace: float, every: float, final: bool
    ) -> _Line:
        """The iterations of `compute` laid out from `now`, each exchanging at the bandwidth
        factor of its own start, with a checkpoint after the first iteration ending `every`
        seconds after the previous one (`final`: none after the last iteration, the job's
        last).

        The factors are solved by fixed point from a guess (iterations `pace` seconds apart):
        an iteration's start depends only on earlier ones, so each pass settles at least one
        more, and two settle a round (only starts near a drift step move). Past
        `_FIXED_POINT_PASSES` the chunk is cut before the first unsettled iteration (`valid`).
        """
        count = compute.shape[0]
        drifting = self.world.bandwidth is not None and self.world.bandwidth.drift is not None
        guess = np.asarray(now + pace * np.arange(count if drifting else 1), dtype=np.float64)
        factors = np.broadcast_to(self._factors(guess), (count,)).copy()
        durations = self._exchange(compute, factors)
        for _ in range(_FIXED_POINT_PASSES):
            starts, ends, saves = self._schedule(durations, now, every, final)
            if not drifting:
                return _Line(durations, starts, ends, saves, count)
            needed = self._factors(starts)
            stale = needed != factors
            if not stale.any():
                return _Line(durations, starts, ends, saves, count)
            factors = needed
            durations[stale] = self._exchange(compute[stale], needed[stale])
        starts, ends, saves = self._schedule(durations, now, every, final)
        stale = self._factors(starts) != factors
        valid = int(np.argmax(stale)) if stale.any() else count
        return _Line(durations, starts, ends, saves, valid)

    def _schedule(
        self, durations: FloatArray, now: float, every: float, final: bool
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        """Starts and ends of back-to-back iterations from `now`, each periodic checkpoint
        (after the first iteration ending `every` s after the previous one) pushing the rest
        later by checkpoint_s; and the iterations a checkpoint follows."""
        cumulative = np.cumsum(durations)
        count = durations.size
        saves: list[int] = []
        if every < math.inf:
            pause, due, shift = self.world.checkpoint_s, self._last_checkpoint_s + every, 0.0
            limit = count - 1 if final else count
            while True:
                save = int(np.searchsorted(cumulative, _before(due) - now - shift))
                if save >= limit:
                    break
                saves.append(save)
                shift += pause
                due = now + float(cumulative[save]) + shift + every
        taken = np.array(saves, dtype=np.int64)
        ends = now + cumulative
        if saves:
            ends = ends + self.world.checkpoint_s * np.searchsorted(taken, np.arange(count))
        starts: FloatArray = ends - durations
        return starts, ends, taken

    def _exchange(self, compute: FloatArray, factors: FloatArray) -> FloatArray:
        """Iteration durations at bandwidth `factors` (one per iteration): computes, pushes to
        the PS, the barrier, pulls (docs/WORLD.md: equal shares of B_p without `ps`, the PS
        NIC's queue with it).

        With k shards every worker sends a flow of d_m/k to each shard at once, its own link
        split evenly among them (B_f/k a flow); each shard's NIC serves the n flows to it by
        the one-NIC rule. Every shard sees the same arrivals and sizes, so one shard's timing
        is every shard's, and the exchange ends when that shard's does."""
        plan, job, ps = self._plan, self.job, self.world.ps
        assert plan is not None
        n, k = plan.functions, job.ps_shards
        if ps is None:
            link = min(job.function_bandwidth_mbps, k * job.ps_bandwidth_mbps / n)
            one_way = job.model_mb / (link * factors) + _wait_s(job)
            out: FloatArray = compute.max(axis=1) + 2 * one_way
            return out
        size, cap = job.model_mb / k, job.function_bandwidth_mbps / k  # one flow, one shard
        nic = ps.nic_mbps * factors
        delay = ps.per_message_ms / 1000
        own_link = size / cap
        if ps.service == "fifo":
            service = delay + size / nic
            pull = np.maximum(n * service, own_link)
            if compute.shape[1] == 1:  # all pushes arrive together
                barrier = compute[:, 0] + pull
            else:
                arrivals = np.sort(compute, axis=1)
                queue = (arrivals + service[:, None] * np.arange(n, 0, -1)).max(axis=1)
                barrier = np.maximum(queue, arrivals[:, -1] + own_link)
            fifo: FloatArray = barrier + pull
            return fifo
        pull = delay + size / np.minimum(cap, nic / n)
        if compute.shape[1] == 1:  # all pushes arrive together: equal shares
            fair: FloatArray = compute[:, 0] + 2 * pull
            return fair
        barrier = _processor_sharing(np.sort(compute, axis=1) + delay, size, cap, nic)
        shared: FloatArray = barrier + pull
        return shared

    def _factors(self, times: FloatArray) -> FloatArray:
        """The bandwidth factor at each job time in `times`."""
        bandwidth = self.world.bandwidth
        period = bandwidth.drift.period_s if bandwidth and bandwidth.drift else math.inf
        steps = np.zeros(times.size, dtype=np.int64) if period == math.inf else (
            (times + _TIME_SLACK * np.maximum(1.0, np.abs(times))) // period
        ).astype(np.int64)
        return self._step_factors(steps)

    def _step_factors(self, steps: IntArray) -> FloatArray:
        """The bandwidth factor in each drift step of `steps` (scale × the drift's mean-1
        lognormal factor exp(z_k − sd²/2))."""
        bandwidth = self.world.bandwidth
        if bandwidth is None:
            return np.ones(steps.size)
        drift = bandwidth.drift
        if drift is None:
            return np.full(steps.size, bandwidth.scale)
        top = int(steps.max())
        if top >= self._drift.size:
            self._extend_drift(top + 1)
        out: FloatArray = bandwidth.scale * np.exp(self._drift[steps] - drift.sd**2 / 2)
        return out

    def _extend_drift(self, steps: int) -> None:
        """The log-factor path z_k = ρ·z_{k−1} + sd·√(1−ρ²)·ε_k up to `steps` steps (z_0 from
        the stationary N(0, sd²)), drawn in blocks that at least double it."""
        assert self.world.bandwidth is not None and self.world.bandwidth.drift is not None
        drift = self.world.bandwidth.drift
        have = self._drift.size
        more = max(steps - have, 64, have)
        shocks = self._draws.normal(st.DRIFT, 0, np.arange(have, have + more)) * drift.sd
        if not have:
            first, shocks = float(shocks[0]), shocks[1:]
        else:
            first = float(self._drift[-1])
        rho, scale = drift.rho, math.sqrt(1.0 - drift.rho**2)
        path = itertools.accumulate(
            (float(e) * scale for e in shocks), lambda z, e: rho * z + e, initial=first
        )
        block = np.fromiter(path, dtype=np.float64, count=shocks.size + 1)
        self._drift = np.concatenate([self._drift, block if not have else block[1:]])

    def _live_invoked(self, at: float) -> float:
        """Function-seconds billed in the round under way by `at`."""
        rnd = self._round
        return 0.0 if rnd is None else float(np.sum(np.maximum(at - rnd.invoked, 0.0)))

    def _billed_gb_s(self, at: float) -> float:
        plan = self._plan
        live = 0.0 if plan is None else plan.memory_mb / 1024 * self._live_invoked(at)
        return self._gb_seconds + live

    def _cost(self, at: float) -> float:
        """Dollars by job time `at`: GB-seconds, the PS's hours, one request per invocation."""
        job = self.job
        return (
            self._billed_gb_s(at) * job.price_per_gb_second + job.ps_usd_per_hour * at / 3600
            + self._invocations * job.price_per_request
        )

    def _cost_line(self, ends: FloatArray) -> FloatArray:
        """The cost at each of `ends` in the round under way (every function invoked by then:
        the cost grows linearly)."""
        plan, now = self._plan, self.elapsed_s
        assert plan is not None
        per_s = (
            plan.functions * plan.memory_mb / 1024 * self.job.price_per_gb_second
            + self.job.ps_usd_per_hour / 3600
        )
        out: FloatArray = self._cost(now) + per_s * (ends - now)
        return out

    def _exposure(self, at: float) -> float:
        rnd = self._round
        live = 0.0 if rnd is None else float(np.sum(np.maximum(at - rnd.up, 0.0)))
        return self._exposed_s + live

    def _trial(self, n: int, m: int, iterations: int, max_s: float) -> Trial:
        """One round: cold starts, start-up, the data share `iterations` train on, then those
        iterations, stopped `max_s` seconds after its functions are up. No crash, checkpoint
        or timeout interrupts it; a plan that cannot run measures nothing."""
        plan = self._make_plan(n, m, None)
        if plan is None:
            return Trial(n, m, 0.0, 0.0, 0.0, 0.0, 0.0, ())
        self._plan = plan
        world, cold = self.world, np.full(n, plan.cold_s)
        if world.cold_start is not None and world.cold_start.cv > 0:
            cold = cold * self._draws.lognormal(st.COLD, np.arange(n), 0, world.cold_start.cv)
        setup_s = float((plan.offsets + cold).max()) + plan.startup_s
        share = min(1.0, iterations * plan.global_batch / self.total_samples)
        factor = float(self._factors(np.array([setup_s]))[0])
        load_s = plan.load_mb * share / (plan.storage_mbps * factor)
        persistent = world.stragglers.persistent if world.stragglers else None
        slow = None
        if persistent is not None and persistent.share > 0:
            hit = self._draws.uniform(st.PERSISTENT, np.arange(n), 0) < persistent.share
            slow = np.where(hit, persistent.slowdown, 1.0)
        rnd = _Round(math.inf, plan.offsets, plan.offsets + cold, np.full(n, math.inf), slow,
                     plan.nominal_s, plan.nominal_s)
        line = self._timeline(self._compute(rnd, iterations, 1.0), setup_s + load_s,
                              plan.nominal_s, math.inf, False)
        durations = line.durations[: line.valid]
        ends = load_s + np.cumsum(durations)
        ran = int(np.searchsorted(ends, max_s, side="right"))
        time_s = setup_s + (float(ends[-1]) if ran == iterations else max_s)
        cost = (
            m / 1024 * float(np.sum(time_s - plan.offsets)) * self.job.price_per_gb_second
            + self.job.ps_usd_per_hour * time_s / 3600 + n * self.job.price_per_request
        )
        measured = np.concatenate([[setup_s, min(load_s, max_s)], durations[:ran]])
        if world.measurement is not None and world.measurement.cv > 0:
            measured = measured * self._draws.lognormal(
                st.MEASURE, 0, np.arange(measured.size), world.measurement.cv
            )
        return Trial(
            functions=n, memory_mb=m, time_s=time_s, cost_usd=cost,
            setup_s=float(measured[0]), load_s=float(measured[1]), load_share=share,
            iteration_s=tuple(float(x) for x in measured[2:]),
        )


def _processor_sharing(
    arrivals: FloatArray, size: float, cap: float, capacity: FloatArray
) -> FloatArray:
    """When the last of each row's transfers (sorted `arrivals`, `size` MB each) completes,
    the row's NIC `capacity` (MB/s) shared equally among the transfers under way, each at most
    `cap`.

    Equal sizes under equal shares finish in arrival order, so a row is a sequence of 2n − 1
    events (the other arrivals, every departure), walked for all rows at once on flat indices
    into a row-major table with one spare column (a sentinel arrival at infinity)."""
    rows_count, n = arrivals.shape
    if n * cap <= capacity.min():  # never contended: each transfer at its cap
        alone: FloatArray = arrivals[:, -1] + size / cap
        return alone
    width = n + 1
    first = np.arange(rows_count) * width
    times = np.concatenate([arrivals, np.full((rows_count, 1), math.inf)], axis=1).ravel()
    joined = np.zeros(rows_count * width)  # `served` when each transfer arrived
    served = np.zeros(rows_count)  # service per active transfer, cumulated
    now = arrivals[:, 0].copy()
    arrived, departed = first + 1, first.copy()  # flat index of the next arrival, departure
    for _ in range(2 * n - 1):
        active = arrived - departed
        rate = np.minimum(cap, capacity / np.maximum(active, 1))
        departure = np.where(
            active > 0, now + (joined[departed] + size - served) / rate, math.inf
        )
        arrival = times[arrived]
        arrive = arrival <= departure
        later = np.where(arrive, arrival, departure)
        served += rate * (later - now)
        now = later
        # Written for every row: where no transfer arrived, the slot is the next arrival's,
        # overwritten when it arrives and never read before (it is not under way).
        joined[arrived] = served
        arrived += arrive
        departed += ~arrive
    return now


def _wait_s(job: JobSpec) -> float:
    """The wait of one push or pull besides its transfer, without `ps`: the profile's λ and
    the instance's per-message cost once per shard (a message to each)."""
    return job.latency_s + job.ps_shards * job.ps_message_s


def _before(at: float) -> float:
    """An instant a hair earlier (`_TIME_SLACK`): what ends then has reached `at`."""
    return at - _TIME_SLACK * max(1.0, abs(at)) if math.isfinite(at) else at


def _after(at: float) -> float:
    """An instant a hair later (`_TIME_SLACK`): what ends then still fits before `at`."""
    return at + _TIME_SLACK * max(1.0, abs(at)) if math.isfinite(at) else at


def _integer(name: str, value: object, high: int) -> int:
    """An integer argument in 1..high, or `WorldError` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
        1 <= value <= high
    ):
        raise WorldError(f"`{name}` must be an integer in 1..{high:,}, got {shown(value)}")
    return int(value)


def _plan_arguments(
    functions: object, memory_mb: object, global_batch: object
) -> tuple[int, int, float | None]:
    """The plan's arguments checked, or `WorldError` naming the bad one."""
    n = _integer("functions", functions, MAX_FUNCTIONS)
    m = _integer("memory_mb", memory_mb, MAX_MEMORY_MB)
    if global_batch is None:
        return n, m, None
    if isinstance(global_batch, bool) or not isinstance(global_batch, (int, float)) or not (
        0 < global_batch <= MAX_BATCH
    ):
        raise WorldError(
            f"`global_batch` must be a number in (0, {MAX_BATCH:g}] or None, got "
            f"{shown(global_batch)}"
        )
    return n, m, float(global_batch)


def _limit(name: str, value: object) -> float:
    """An `until_*` argument as a float (None: no limit)."""
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise WorldError(f"`{name}` must be a number or None, got {shown(value)}")
    return float(value)


def run_plan(
    world: World, job: JobSpec, functions: int, memory_mb: int, key: Key, *,
    stop_after_s: float | None = None, stop_above_usd: float | None = None,
) -> WorldRun:
    """A static plan run to its end: one `advance` without checks. Stops early (finished
    False, reason "stopped") once elapsed ≥ stop_after_s or cost > stop_above_usd at an
    iteration boundary, with the job not done (the hindsight oracle skips losers so)."""
    n, m, _ = _plan_arguments(functions, memory_mb, None)
    session = Session(world, job, key)
    stop = _Stop(
        seconds=_limit("stop_after_s", stop_after_s), usd=_limit("stop_above_usd", stop_above_usd),
        check=False,
    )
    session._advance(n, m, None, stop, record=False)
    return session.result()


def trial(
    world: World, job: JobSpec, functions: int, memory_mb: int, *, iterations: int,
    max_s: float, key: Key,
) -> Trial:
    """A short profiling trial of the plan (`Session._trial`), timings measured."""
    n, m, _ = _plan_arguments(functions, memory_mb, None)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not (
        1 <= iterations <= MAX_TRIAL_ITERATIONS
    ):
        raise WorldError(
            f"`iterations` must be an integer in 1..{MAX_TRIAL_ITERATIONS:,}, got "
            f"{shown(iterations)}"
        )
    if isinstance(max_s, bool) or not isinstance(max_s, (int, float)) or not max_s > 0:
        raise WorldError(f"`max_s` must be a positive number, got {shown(max_s)}")
    return Session(world, job, key)._trial(n, m, iterations, float(max_s))
