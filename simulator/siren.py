"""Siren-like: a deep-RL allocator trained in the independent world, run as a re-planner.

Siren (H. Wang, D. Niu, B. Li, "Distributed Machine Learning with a Serverless Architecture",
INFOCOM 2019) schedules a training job with a policy learned by deep reinforcement learning:
before every epoch it picks how many functions train the next epoch and how much memory each
has, from what the training has shown so far. λDNN compares itself with it. This module is
Siren-LIKE, not Siren:

* **The same:** one decision per epoch, of (functions, memory); the policy is a small neural
  network trained by deep RL in a simulator of the job; its reward is money, penalised when
  the deadline is missed. (Siren minimised time within a budget; λDNN's comparison, and this
  one, ask it for the least cost within a deadline.)
* **Not the same:** Siren trains asynchronous workers and learns with its own policy-gradient
  code; here the world (`simulator.world`) runs synchronous data-parallel SGD through a
  parameter server, and the learner is stable-baselines3's PPO with a 64×64 MLP. Siren's state
  holds the training loss; the world trains no network, so ours has none. Ours adds two
  static figures of the job from its instance (its compute and its exchange against the
  deadline), so that the first decision, made before anything is measured, can differ from
  job to job.

**State** (`observe`, what a `Situation` shows, each figure scaled to about [−1, 4]): the share
of samples done; the time left ÷ the deadline; the last epoch's measured seconds ÷ the
deadline; its measured compute (the slowest worker of each iteration) and exchange, scaled to
a whole epoch, ÷ the deadline; the functions held ÷ the most allowed; their memory ÷ the
largest choice; one epoch's share of the job; and the two static figures (log10 of one
function's compute at the largest memory, and of the exchanges at full function bandwidth,
each ÷ the deadline, ÷ 3). Timings are the world's measurements, through its noise.

**Action** (`decode`): a pair of indices, into `FUNCTION_LADDER` (capped at the most
functions allowed, and at the largest global batch so that a local batch stays ≥ 1) and into
`MEMORY_SLOTS` slots spread over the memory choices the job's profile can run on (rate and
storage bandwidth > 0). The step runs one epoch (`check_samples` = the samples of an epoch)
with `Session.advance`; a changed plan is a switch and pays its restart in the world, so the
policy learns what thrashing costs.

**Reward** (`SirenEnv.step`): −(the true cost of the epoch) ÷ `reference_cost` (one function
training the whole job at the largest memory, plus the parameter server for the deadline), and
at the end −`MISS_PENALTY` × (1 + the lateness as a share of the deadline, at most 1) when
the job missed its deadline or did not finish.

**Training is disjoint from evaluation** (`TrainingDraws`): jobs come from traces of
`simulator.trace.generate_trace` (the paper's mix, deadlines U[600, 1,200] s, and the heavy
mix up to `HEAVY_CAP`× the epochs with deadlines scaled to the size) seeded at
`TRAIN_SEED_FLOOR` or above, the shipped instances being their workloads; every world is
drawn at random by `training_world` from effect ranges, never read from a file (so never one
of instances/worlds/), and every run's randomness key starts with a number ≥
`TRAIN_SEED_FLOOR`. Evaluations (`compare`, `benchmarks/paper.py`, `held_out`) run the named
worlds with seeds below it (`held_out` refuses any other). The workloads are shared (the
shipped instances, as in the paper), so a training job can ask the same question as an
evaluation job; its world and its luck are never the same.

The policy is shipped as `data/siren_policy.zip` (163 KB), trained by `python -m
benchmarks.train_siren` with its defaults (PPO, 151,552 steps = 14,943 jobs, seed 10,000):
362 s on this 2-core machine while other work ran, the mean episode reward rising from −12.0
in the first tenth of training to −5.8 in the last (its worlds are harsher than the named
ones). Held out (200 paper-mix jobs of seed 0 in each named world) it met 64–100% of the
deadlines where `naive` met 40–89%, at 52–86% of `naive`'s mean cost.
Importing this module loads neither torch nor gymnasium: `SirenReplanner` and `make_env` do.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..inputs.errors import InputError
from ..solver.trace_file import Job, Loader
from .replan import Situation, Step
from .trace import generate_trace
from .world import JobSpec, Session, World, WorldRun
from .worlds import WorldRunner, job_spec, memory_choices

if TYPE_CHECKING:
    import gymnasium
    from stable_baselines3 import PPO

__all__ = [
    "FUNCTION_LADDER", "MEMORY_SLOTS", "POLICY_PATH", "TRAIN_SEED_FLOOR", "Episode",
    "SirenReplanner", "TrainingDraws", "decode", "held_out", "make_env", "observe",
    "rollout", "training_world",
]

Observation = npt.NDArray[np.float32]
Action = npt.NDArray[np.int64]
Key = tuple[int, ...]
Draw = Callable[[np.random.Generator], "Episode"]  # an environment's next job, from its rng

POLICY_PATH = Path(__file__).resolve().parent / "data" / "siren_policy.zip"
TRAIN_COMMAND = "python -m benchmarks.train_siren"
FUNCTION_LADDER = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32)
# Memory slots of the action, spread over the valid choices (as many as `worlds` gives a
# re-planner; fixed here, as the shipped policy's action space is).
MEMORY_SLOTS = 10
TRAIN_SEED_FLOOR = 10_000  # every training trace seed and run key is at least this
HEAVY_CAP = 3  # training's heavy-mix jobs have at most this many times their workload's epochs
MISS_PENALTY = 5.0  # in units of `reference_cost`
SIZE_DECADES = 3.0  # the static figures' log10 is divided by this, then clipped to [-1, 1]
# Bounds of each state figure (`observe`), in its order.
LOW = np.array([0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0], dtype=np.float32)
HIGH = np.array([1.0, 1.0, 4.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0], dtype=np.float32)


@dataclass(frozen=True)
class Episode:
    """One job for the environment: the world it runs in, and what a re-planner is told."""

    world: World
    job: JobSpec  # the world runs it, and the policy is told it (training's belief is true)
    deadline_s: float
    memory_choices: tuple[int, ...]
    max_functions: int
    key: Key


def valid_memory(job: JobSpec, choices: Sequence[int]) -> tuple[int, ...]:
    """The memory choices the job's profile can train on: rate and storage bandwidth > 0."""
    return tuple(m for m in choices if _rate(job, m) > 0
                 and min(job.storage_slope * m + job.storage_intercept, job.storage_max_mbps) > 0)


def _rate(job: JobSpec, memory_mb: float) -> float:
    return job.rate_slope * min(memory_mb, job.rate_saturates_at_mb) + job.rate_intercept


def function_cap(situation: Situation) -> int:
    """The most functions the policy may pick: the limit, and the largest global batch."""
    return max(1, min(situation.max_functions, int(situation.job.max_global_batch)))


def _size(seconds: float, deadline_s: float) -> float:
    return float(np.clip(math.log10(max(seconds, 1e-9) / deadline_s) / SIZE_DECADES, -1, 1))


def observe(situation: Situation) -> Observation:
    """The state the policy sees (module docstring), from a `Situation` only."""
    job, deadline = situation.job, situation.deadline_s
    top = valid_memory(job, situation.memory_choices)[-1]
    state = np.zeros(LOW.shape, dtype=np.float64)
    state[0] = situation.samples_done / situation.total_samples
    state[1] = (deadline - situation.elapsed_s) / deadline
    last = situation.last
    if last is not None:
        state[2] = last.seconds / deadline
        if last.samples > 0 and last.compute_s.size > 0:
            per_epoch = job.samples / last.samples / deadline
            state[3] = float(last.compute_s.max(axis=1).sum()) * per_epoch
            state[4] = float(last.exchange_s.sum()) * per_epoch
        state[5] = last.functions / function_cap(situation)
        state[6] = last.memory_mb / situation.memory_choices[-1]
    state[7] = job.samples / situation.total_samples
    state[8] = _size(situation.total_samples / _rate(job, top), deadline)
    iterations = situation.total_samples / job.max_global_batch
    exchange = 2 * (job.model_mb / job.function_bandwidth_mbps + job.latency_s)
    state[9] = _size(iterations * exchange, deadline)
    return np.clip(state, LOW, HIGH).astype(np.float32)


def decode(action: npt.ArrayLike, situation: Situation) -> Step:
    """The plan of the next epoch that `action` (function index, memory slot) names."""
    functions, slot = (int(a) for a in np.asarray(action).reshape(-1))
    valid = valid_memory(situation.job, situation.memory_choices)
    memory = valid[round(slot * (len(valid) - 1) / (MEMORY_SLOTS - 1))]
    return Step(min(FUNCTION_LADDER[functions], function_cap(situation)), memory,
                situation.job.samples)


def reference_cost(episode: Episode) -> float:
    """The reward's unit: one function training the whole job at the largest memory it can
    run on, plus the parameter server for the deadline (the job's scale, not a plan)."""
    job = episode.job
    top = valid_memory(job, episode.memory_choices)[-1]
    seconds = job.samples * job.epochs / _rate(job, top)
    return (seconds * top / 1024 * job.price_per_gb_second
            + episode.deadline_s * job.ps_usd_per_hour / 3600)


def miss_penalty(run: WorldRun, deadline_s: float) -> float:
    """The end's penalty (module docstring): 0 when the job finished by its deadline."""
    if run.finished and run.time_s <= deadline_s:
        return 0.0
    late = min(1.0, (run.time_s - deadline_s) / deadline_s) if run.finished else 1.0
    return MISS_PENALTY * (1.0 + late)


# --- where training draws its jobs and worlds -----------------------------------------------

def training_world(rng: np.random.Generator) -> World:
    """A world for training: each effect on with probability 1/2, its figures drawn from a
    wide range around the published ones (docs/WORLD.md), four significant digits."""
    def u(low: float, high: float) -> float:
        return float(f"{rng.uniform(low, high):.4g}")

    def on() -> bool:
        return bool(rng.random() < 0.5)

    effects: dict[str, Any] = {
        "cpu": {"mb_per_vcpu": 1769, "max_vcpu": 6, "parallel_fraction": u(0.3, 0.98),
                "profiled_mb": u(1024, 4096)},
        "ps": {"nic_mbps": u(300, 2500), "per_message_ms": u(0.2, 10),
               "service": "fifo" if on() else "fair"},
        "stragglers": {"cv": u(0.01, 0.4),
                       **({"tail": {"kind": "pareto", "shape": u(1.2, 3.0),
                                    "share": u(0.002, 0.05)}} if on() else {}),
                       **({"persistent": {"share": u(0.01, 0.15), "slowdown": u(1.2, 4.0)}}
                          if on() else {})},
        "bandwidth": {"scale": u(0.4, 1.3),
                      **({"drift": {"kind": "ar1", "sd": u(0.02, 0.5), "period_s": u(10, 300),
                                    "rho": u(0.3, 0.97)}} if on() else {})},
        "cold_start": {"base_s": u(0.05, 3), "per_gb_s": u(0, 0.5), "per_image_gb_s": u(0, 1),
                       "image_gb": u(0.1, 4), "cv": u(0, 0.5)},
        "startup": {"base_s": u(0, 8), "per_function_s": u(0, 0.15)},
        "platform_ramp": {"burst": int(rng.integers(2, 65)), "per_10s": int(rng.integers(1, 51))},
        "crashes": {"rate_per_h": u(0.01, 3), "checkpoint_every_s": u(15, 300)},
        "measurement": {"cv": u(0.005, 0.2)},
        "checkpoint_s": u(0.05, 3),
    }
    kept = {key: value for key, value in effects.items() if on()}
    return World.from_mapping({"name": "training", **kept}, source="siren training")


class TrainingDraws:
    """Training's episodes: a job of a trace seeded ≥ `TRAIN_SEED_FLOOR`, a `training_world`,
    and a run key ≥ it (module docstring). Called with the environment's generator."""

    def __init__(self, seed: int = TRAIN_SEED_FLOOR, jobs: int = 500) -> None:
        if seed < TRAIN_SEED_FLOOR:
            raise InputError(
                f"`seed` {seed} is below {TRAIN_SEED_FLOOR:,}, where evaluation draws; "
                f"train on seeds ≥ {TRAIN_SEED_FLOOR:,}"
            )
        loader = Loader(None)
        heavy = [job for job in generate_trace(jobs, seed=seed + 1, mix="heavy")
                 if job.epochs <= HEAVY_CAP * loader.instance(job.instance_name).workload.epochs]
        cases = (
            Episode(World(), job_spec(job.instance), job.deadline_s, memory_choices(job.instance),
                    job.instance.max_functions, ())
            for job in (*generate_trace(jobs, seed=seed, mix="paper"), *heavy)
        )
        self.cases = [case for case in cases if valid_memory(case.job, case.memory_choices)]

    def __call__(self, rng: np.random.Generator) -> Episode:
        case = self.cases[int(rng.integers(len(self.cases)))]
        key = (int(rng.integers(TRAIN_SEED_FLOOR, 2**31)), int(rng.integers(2**31)))
        return dataclasses.replace(case, world=training_world(rng), key=key)


def held_out(jobs: Sequence[Job], worlds: Sequence[World], seed: int) -> list[Episode]:
    """Evaluation's episodes: every job of `jobs` in every world of `worlds`, keyed as
    `WorldRunner` keys a comparison's runs; `seed` must be below `TRAIN_SEED_FLOOR`."""
    if seed >= TRAIN_SEED_FLOOR:
        raise InputError(
            f"`seed` {seed} is at or above {TRAIN_SEED_FLOOR:,}, where training draws; "
            f"evaluate on seeds below {TRAIN_SEED_FLOOR:,}"
        )
    return [
        Episode(world, job_spec(job.instance), job.deadline_s, memory_choices(job.instance),
                job.instance.max_functions, WorldRunner(world, seed).key(index))
        for world in worlds for index, job in enumerate(jobs)
        if valid_memory(job_spec(job.instance), memory_choices(job.instance))
    ]


def _in_order(episodes: Sequence[Episode]) -> Draw:
    """A draw that hands out `episodes` in order, whatever the generator (evaluation)."""
    listed = iter(episodes)
    return lambda _rng: next(listed)


def rollout(episodes: Sequence[Episode], act: Callable[[Observation], Action] | None, *,
            seed: int = 0) -> list[tuple[float, bool, float]]:
    """(total reward, deadline met, cost in USD) of each episode, in order, under `act`, or
    under uniformly random actions drawn from `seed` when `act` is None."""
    env = make_env(_in_order(episodes))
    env.action_space.seed(seed)
    results = []
    for _ in episodes:
        state, _info = env.reset()
        total, done, info = 0.0, False, dict[str, Any]()
        while not done:
            action = env.action_space.sample() if act is None else act(state)
            state, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            done = terminated or truncated
        results.append((total, bool(info["met"]), float(info["cost_usd"])))
    return results


# --- the environment ------------------------------------------------------------------------

def make_env(draw: Draw) -> gymnasium.Env[Observation, Action]:
    """A gymnasium environment whose episodes are `draw`'s jobs, one step an epoch."""
    return _env_type()(draw)


@lru_cache(maxsize=1)
def _env_type() -> Callable[[Draw], gymnasium.Env[Observation, Action]]:
    """The environment's class, defined on first use so that importing this module does not
    import gymnasium."""
    import gymnasium
    from gymnasium import spaces

    class SirenEnv(gymnasium.Env[Observation, Action]):
        """One job an episode (`draw`), one epoch a step; the reward is in the module docstring."""

        def __init__(self, draw: Draw) -> None:
            self.draw = draw
            self.observation_space = spaces.Box(LOW, HIGH, dtype=np.float32)
            self.action_space = spaces.MultiDiscrete([len(FUNCTION_LADDER), MEMORY_SLOTS])
            self.episode: Episode | None = None
            self.session: Session | None = None
            self.situation: Situation | None = None
            self.cost_usd = 0.0

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
                  ) -> tuple[Observation, dict[str, Any]]:
            super().reset(seed=seed)
            episode = self.episode = self.draw(self.np_random)
            self.session = Session(episode.world, episode.job, episode.key)
            self.situation = Situation(
                episode.job, episode.deadline_s, 0.0, 0.0, self.session.total_samples,
                episode.memory_choices, episode.max_functions, None,
            )
            self.cost_usd = 0.0
            return observe(self.situation), {}

        def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
            episode, session, situation = self.episode, self.session, self.situation
            assert episode is not None and session is not None and situation is not None, (
                "reset() runs before step()")
            plan = decode(action, situation)
            assert plan.check_samples is not None
            segment = session.advance(plan.functions, plan.memory_mb,
                                      until_samples=session.samples_done + plan.check_samples)
            run = session.result()
            reward = -(run.cost_usd - self.cost_usd) / reference_cost(episode)
            self.cost_usd = run.cost_usd
            info: dict[str, Any] = {}
            if session.done:
                reward -= miss_penalty(run, episode.deadline_s)
                info = {"cost_usd": run.cost_usd,
                        "met": run.finished and run.time_s <= episode.deadline_s}
            self.situation = dataclasses.replace(
                situation, elapsed_s=situation.elapsed_s + segment.seconds,
                samples_done=session.samples_done, last=segment,
            )
            return observe(self.situation), reward, session.done, False, info

    return SirenEnv


# --- the re-planner -------------------------------------------------------------------------

@lru_cache(maxsize=4)
def _policy(path: Path) -> PPO:
    """The trained policy at `path`, loaded once per process (on the CPU)."""
    try:
        from stable_baselines3 import PPO
    except ImportError:
        raise InputError(
            "strategy `siren` needs stable-baselines3 and gymnasium; install them with "
            "`pip install stable-baselines3==2.9.2 gymnasium==1.4.0`"
        ) from None
    if not path.is_file():
        raise InputError(
            f"strategy `siren` has no trained policy at {path}; train it with `{TRAIN_COMMAND}`"
        )
    try:
        return PPO.load(path, device="cpu")
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise InputError(
            f"strategy `siren`'s policy {path} does not load ({type(error).__name__}); "
            f"train it again with `{TRAIN_COMMAND}`"
        ) from None


class SirenReplanner:
    """`siren` (module docstring): the shipped policy's choice at every epoch, deterministic."""

    def __init__(self, path: Path = POLICY_PATH) -> None:
        self.policy = _policy(path)

    @staticmethod
    def check(path: Path = POLICY_PATH) -> None:
        """`InputError` (one line, naming the fix) unless the policy at `path` loads."""
        _policy(path)

    def first(self, situation: Situation) -> Step | None:
        if not valid_memory(situation.job, situation.memory_choices):
            return None
        return self.next(situation)

    def next(self, situation: Situation) -> Step:
        return decode(self.act(observe(situation)), situation)

    def act(self, state: Observation) -> Action:
        """The policy's action in `state`, deterministic (its most likely one)."""
        action, _ = self.policy.predict(state, deterministic=True)
        return np.asarray(action, dtype=np.int64)
