"""The Siren-like allocator (`simulator.siren`): its environment keeps gymnasium's contract and
shows the policy what `run_replanned` shows the re-planner; the shipped policy loads, is small,
picks valid plans and beats chance on held-out jobs and worlds; training never meets them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from benchmarks.train_siren import judge
from lambdadnn.inputs.errors import InputError
from lambdadnn.simulator import siren
from lambdadnn.simulator.replan import Situation, Step, run_replanned
from lambdadnn.simulator.siren import (
    FUNCTION_LADDER,
    POLICY_PATH,
    TRAIN_SEED_FLOOR,
    Episode,
    SirenReplanner,
    TrainingDraws,
    decode,
    held_out,
    make_env,
    observe,
    rollout,
    training_world,
    valid_memory,
)
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.world import World
from lambdadnn.simulator.worlds import load_world
from lambdadnn.solver.shipped import instances_folder

pytestmark = pytest.mark.real  # torch (stable-baselines3)

NAMED_WORLDS = sorted((instances_folder() / "worlds").glob("*.yaml"))
MAX_POLICY_BYTES = 300 * 1024


def _held_out(jobs: int) -> list[Episode]:
    worlds = [load_world(path) for path in NAMED_WORLDS] or [World()]
    return held_out(generate_trace(jobs, seed=1), worlds, seed=1)


def test_importing_siren_loads_neither_torch_nor_gymnasium() -> None:
    code = ("import sys, lambdadnn.simulator.siren; "
            "print(sorted({'torch', 'gymnasium', 'stable_baselines3'} & set(sys.modules)))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout
    assert shown.strip() == "[]"


def test_environment_keeps_gymnasiums_contract() -> None:
    check_env(make_env(TrainingDraws()), skip_render_check=True)


class _Fixed:
    """A re-planner that plays one action every epoch and records what it was shown."""

    def __init__(self, action: tuple[int, int]) -> None:
        self.action, self.seen = action, []

    def first(self, situation: Situation) -> Step | None:
        return self.next(situation)

    def next(self, situation: Situation) -> Step:
        self.seen.append(observe(situation))
        return decode(self.action, situation)


@pytest.mark.parametrize("action", [(0, 9), (8, 4), (12, 0)])
def test_environment_shows_the_policy_what_the_replanner_is_shown(
        action: tuple[int, int]) -> None:
    """Trained on the environment, run by `run_replanned`: both must see the same states and
    end with the same bill, else the policy is judged on a job it never trained on; and the
    rewards add up to the bill and the miss penalty."""
    noisy = World.from_mapping({"measurement": {"cv": 0.1}, "stragglers": {"cv": 0.2},
                                "crashes": {"rate_per_h": 2.0}, "checkpoint_s": 0.5})
    episode = held_out(generate_trace(3, seed=1), [noisy], seed=1)[2]
    seen = []

    def act(state: np.ndarray) -> np.ndarray:
        seen.append(state)
        return np.array(action)

    [(reward, met, cost)] = rollout([episode], act)
    replanner = _Fixed(action)
    ran = run_replanned(episode.world, episode.job, episode.key, replanner,
                        deadline_s=episode.deadline_s, memory_choices=episode.memory_choices,
                        max_functions=episode.max_functions)
    assert ran is not None
    assert len(seen) == len(replanner.seen) > 1
    np.testing.assert_array_equal(np.array(seen), np.array(replanner.seen))
    assert cost == ran.run.cost_usd
    assert met == (ran.run.finished and ran.run.time_s <= episode.deadline_s)
    assert reward == pytest.approx(-cost / siren.reference_cost(episode)
                                   - siren.miss_penalty(ran.run, episode.deadline_s))


def test_shipped_policy_is_small_and_picks_valid_plans() -> None:
    assert POLICY_PATH.stat().st_size < MAX_POLICY_BYTES
    replanner = SirenReplanner()
    space = make_env(TrainingDraws()).action_space
    actions: list[np.ndarray] = []

    def act(state: np.ndarray) -> np.ndarray:
        actions.append(replanner.act(state))
        return actions[-1]

    rollout(_held_out(4), act)
    assert actions and all(space.contains(action) for action in actions)
    for episode in _held_out(8):
        situation = Situation(episode.job, episode.deadline_s, 0.0, 0.0,
                              episode.job.samples * episode.job.epochs,
                              episode.memory_choices, episode.max_functions, None)
        step = replanner.first(situation)
        assert step is not None
        cap = min(episode.max_functions, int(episode.job.max_global_batch), FUNCTION_LADDER[-1])
        assert 1 <= step.functions <= cap
        assert step.memory_mb in valid_memory(episode.job, episode.memory_choices)
        assert step.check_samples == episode.job.samples


def test_trained_policy_beats_chance_and_naive_on_held_out_jobs_and_worlds() -> None:
    """On a held-out trace in every named world: more reward than uniformly random actions
    (by a clear margin), and more deadlines met than `naive` for less money. An undertrained
    policy (a few thousand steps) meets fewer deadlines than `naive` and fails this."""
    rows = judge(POLICY_PATH, jobs=30, seed=1)
    assert len(rows) == max(1, len(NAMED_WORLDS))
    mean = {key: np.mean([row[key] for row in rows]) for key in rows[0] if key != "world"}
    assert mean["reward"] > mean["random_reward"] + 2.0
    assert mean["siren_met"] >= mean["naive_met"] + 0.05
    assert mean["siren_cost_usd"] < mean["naive_cost_usd"]


def test_a_missing_policy_or_library_is_one_line_naming_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"python -m benchmarks\.train_siren") as raised:
        SirenReplanner(tmp_path / "absent.zip")
    assert "\n" not in str(raised.value)
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"python -m benchmarks\.train_siren"):
        SirenReplanner.check(broken)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(InputError, match="pip install stable-baselines3"):
        SirenReplanner(tmp_path / "elsewhere.zip")


def test_training_never_meets_the_evaluations_seeds_worlds_or_luck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="train on seeds"):
        TrainingDraws(TRAIN_SEED_FLOOR - 1)
    with pytest.raises(InputError, match="evaluate on seeds"):
        held_out(generate_trace(1, seed=0), [World()], TRAIN_SEED_FLOOR)

    def no_file(*_args: object, **_kwargs: object) -> World:
        raise AssertionError("training read a world file")

    monkeypatch.setattr(World, "load", no_file)
    draws = TrainingDraws()
    rng = np.random.default_rng(0)
    drawn = [draws(rng) for _ in range(300)]
    rollout(drawn[:20], None)
    monkeypatch.undo()
    assert all(episode.key[0] >= TRAIN_SEED_FLOOR for episode in drawn)
    assert all(episode.key[0] < TRAIN_SEED_FLOOR for episode in _held_out(5))
    named = [_effects(load_world(path)) for path in NAMED_WORLDS]
    sampled = [_effects(training_world(rng)) for _ in range(300)]
    assert len({str(s) for s in sampled}) == len(sampled)
    assert not any(s == n for s in sampled for n in [*named, _effects(World())])


def _effects(world: World) -> dict[str, object]:
    mapping = world.to_mapping()
    return {key: value for key, value in mapping.items() if key not in ("name", "description")}
