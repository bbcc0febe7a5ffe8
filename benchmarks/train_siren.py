"""Train the Siren-like policy (`simulator.siren`) in the independent world, and judge it.

Run as ``.venv/bin/python -m benchmarks.train_siren [--timesteps N] [--out PATH] [--seed S]
[--jobs J]``. It trains stable-baselines3's PPO (a 64×64 MLP) for `N` steps (one step is one
epoch of one job) on `simulator.siren.TrainingDraws(S)`: trace jobs and random worlds, all
seeded at or above `TRAIN_SEED_FLOOR`, never a named world. It prints the training's wall
time and its mean episode reward in each tenth of the training, writes the policy to `PATH`
(the shipped `simulator/data/siren_policy.zip` by default) and its size. Then, held out, on a
paper-mix trace of `J` jobs seeded 0 in the no-effect world and in every named world of
instances/worlds/: the mean episode reward of the trained policy against a uniformly random
one, and the share of deadlines met and the mean cost of `siren` (the policy as
`SirenReplanner`, through `simulator.replan.run_replanned`) against `naive` (the paper's
static plan: the largest memory, n uniform in 1..⌊B_p/B_f^max⌋), job by job under the same
randomness.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from lambdadnn.simulator.baselines import naive
from lambdadnn.simulator.pool import job_rng
from lambdadnn.simulator.siren import (
    POLICY_PATH,
    TRAIN_SEED_FLOOR,
    SirenReplanner,
    TrainingDraws,
    held_out,
    make_env,
    rollout,
)
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.world import World, WorldRun
from lambdadnn.simulator.worlds import WorldRunner, load_world
from lambdadnn.solver.shipped import instances_folder

ENVS = 4  # environments stepped side by side: one rollout is ENVS × N_STEPS steps
N_STEPS = 512
BATCH_SIZE = 256
TENTHS = 10
HELD_OUT_SEED = 0
PLAN_STREAM = 3  # the stream of `naive`'s draw of n (`simulator.pool.job_rng`)


def train(timesteps: int, seed: int, out: Path) -> dict[str, Any]:
    """Train, save the policy to `out`; the wall time and the rewards' curve."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)  # a 64×64 MLP: more threads only contend with the world
    draws = TrainingDraws(seed)
    env = make_vec_env(lambda: make_env(draws), n_envs=ENVS, seed=seed)
    rewards: list[tuple[int, float]] = []

    class Episodes(BaseCallback):
        """Records (timestep, total reward) of every finished training episode."""

        def _on_step(self) -> bool:
            rewards.extend((self.num_timesteps, float(info["episode"]["r"]))
                           for info in self.locals["infos"] if "episode" in info)
            return True

    model = PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=BATCH_SIZE, ent_coef=0.01,
                policy_kwargs={"net_arch": [64, 64]}, seed=seed, device="cpu", verbose=0)
    started = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=Episodes())
    seconds = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    steps = np.array([step for step, _ in rewards])
    totals = np.array([reward for _, reward in rewards])
    edges = np.linspace(0, model.num_timesteps, TENTHS + 1)
    curve = [float(totals[(steps > low) & (steps <= high)].mean())
             for low, high in itertools.pairwise(edges)]
    return {"seconds": seconds, "timesteps": model.num_timesteps, "episodes": len(rewards),
            "curve": curve, "bytes": out.stat().st_size}


def judge(policy: Path, jobs: int, seed: int) -> list[dict[str, Any]]:
    """The held-out figures of the module docstring, one row per world."""
    folder = instances_folder() / "worlds"
    worlds = [load_world(path) for path in sorted(folder.glob("*.yaml"))] or [World()]
    trace = generate_trace(jobs, seed=HELD_OUT_SEED)
    replanner = SirenReplanner(policy)
    rows = []
    for world in worlds:
        episodes = held_out(trace, [world], HELD_OUT_SEED)
        trained = rollout(episodes, replanner.act)
        chance = rollout(episodes, None, seed=seed)
        runner = WorldRunner(world, HELD_OUT_SEED)
        outcomes = []  # per job: (siren met, siren cost, naive met, naive cost)
        for index, job in enumerate(trace):
            ran = runner.replanned(index, job.instance, replanner, job.deadline_s,
                                   job.instance.max_functions)
            plan = naive(job.instance, job_rng(HELD_OUT_SEED, index, PLAN_STREAM))
            if ran is None or not plan.found:
                continue
            static = runner.run(index, job.instance, plan.functions, plan.memory_mb)
            outcomes.append([_met(ran.run, job.deadline_s), ran.run.cost_usd,
                             _met(static, job.deadline_s), static.cost_usd])
        means = np.mean(outcomes, axis=0)
        rows.append({
            "world": world.label(), "jobs": len(outcomes),
            "reward": float(np.mean([r for r, _, _ in trained])),
            "random_reward": float(np.mean([r for r, _, _ in chance])),
            "siren_met": means[0], "siren_cost_usd": means[1],
            "naive_met": means[2], "naive_cost_usd": means[3],
        })
    return rows


def _met(run: WorldRun, deadline_s: float) -> bool:
    return run.finished and run.time_s <= deadline_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=150_000)
    parser.add_argument("--out", type=Path, default=POLICY_PATH)
    parser.add_argument("--seed", type=int, default=TRAIN_SEED_FLOOR)
    parser.add_argument("--jobs", type=int, default=200, help="held-out jobs per world")
    args = parser.parse_args(argv)
    trained = train(args.timesteps, args.seed, args.out)
    print(f"trained {trained['timesteps']:,} steps ({trained['episodes']:,} episodes) in "
          f"{trained['seconds']:.0f} s; policy {args.out} ({trained['bytes'] / 1024:.0f} KB)")
    print("mean episode reward by tenth of training: "
          + " ".join(f"{value:.2f}" for value in trained["curve"]))
    print(f"{'held-out world':<40}{'jobs':>6}{'reward':>8}{'random':>8}{'siren met':>10}"
          f"{'naive met':>10}{'siren $':>9}{'naive $':>9}")
    for row in judge(args.out, args.jobs, args.seed):
        print(f"{row['world'][:39]:<40}{row['jobs']:>6}{row['reward']:>8.2f}"
              f"{row['random_reward']:>8.2f}{row['siren_met']:>10.1%}{row['naive_met']:>10.1%}"
              f"{row['siren_cost_usd']:>9.3f}{row['naive_cost_usd']:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
