"""The simulator's `lambdadnn-adaptive`: a run under the controller, leg by leg, under the truth.

Checks the claims of `simulator.adaptive`: a plan the controller never changes runs exactly as
`simulate_job` runs it (a pause is no event of the run); no iteration is lost or repeated
across a change of plan; re-planning meets more deadlines when the belief is optimistic and
costs less when it is pessimistic; bad input is refused in one line.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from lambdadnn import InputError, Instance, InstanceError, load_instance, solve
from lambdadnn.cli import main
from lambdadnn.models.noise import NoiseModel
from lambdadnn.simulator.adaptive import AdaptiveRun, run_adaptive
from lambdadnn.simulator.compare import compare
from lambdadnn.simulator.engine import Crashed, PlanRun, simulate_job
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.simulator.truth import Truth
from lambdadnn.solver.adaptive import Controller

GUARANTEE = 0.999


def _instance(name: str = "mobilenet-cifar10") -> Instance:
    return load_instance(f"instances/{name}.yaml")


def _run(instance: Instance, truth: Truth, noise: NoiseModel, seed: int) -> AdaptiveRun:
    return run_adaptive(
        instance, truth.instance(instance), truth.noise(noise), guarantee=GUARANTEE,
        noise=noise, budget_s=instance.objective.deadline_s, rng=np.random.default_rng(seed),
    )


@pytest.mark.parametrize("name", ["mobilenet-cifar10", "resnet50-cifar10"])
def test_an_unchanged_plan_runs_as_simulate_job_exactly(name: str) -> None:
    """Truth = belief and no noise: the controller carries on at every check, and the legs
    add up to the very run `simulate_job` gives its plan, to the bit."""
    instance, noise = _instance(name), NoiseModel.none()
    run = _run(instance, Truth(), noise, seed=3)
    plan = solve(instance, guarantee=GUARANTEE, noise=noise)
    alone = simulate_job(instance, plan.functions, plan.memory_mb, noise=noise,
                         rng=np.random.default_rng(3))
    assert [d.action for d in run.decisions[1:]] == ["continue"] * (len(run.decisions) - 1)
    assert len(run.legs) == len(run.decisions) > 3  # checked several times on the way
    assert run.stages == ((plan.functions, alone.time_s),)
    assert (run.time_s, run.cost_usd, run.gb_seconds) == (
        alone.time_s, alone.cost_usd, alone.gb_seconds)
    assert (run.invocations, run.restarts, run.iterations) == (
        alone.invocations, alone.restarts, alone.iterations)


def test_pauses_do_not_change_a_noisy_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """With noise and crashes the legs of a plan the controller keeps are still one
    `simulate_job` run (same draws, same round clock): here it is offered no other plan, and
    every iteration is checkpointed anyway, so the checkpoints taken at checks save nothing
    a crash would have lost (`test_a_check_checkpoint_limits_what_a_crash_loses`)."""
    monkeypatch.setattr(Controller, "_best", lambda self, iterations, time_left_s: None)
    instance = _instance()
    noise = NoiseModel(failure_rate_per_hour=2.0, checkpoint_every=1)
    run = _run(instance, Truth(rate_scale=0.9), noise, seed=5)
    plan = solve(instance, guarantee=GUARANTEE, noise=noise)
    alone = simulate_job(Truth(rate_scale=0.9).instance(instance), plan.functions,
                         plan.memory_mb, noise=noise, rng=np.random.default_rng(5))
    assert run.switches == 0 and len(run.legs) > 3 and run.failures == alone.failures > 0
    assert (run.time_s, run.cost_usd, run.lost_iterations, run.restarts) == (
        alone.time_s, alone.cost_usd, alone.lost_iterations, alone.restarts)


def test_a_check_checkpoint_limits_what_a_crash_loses() -> None:
    """A checkpoint taken at a check (`PlanRun.save`) is where the next crash resumes from;
    without it the same run (same draws) resumes from the last periodic checkpoint, here
    the start (no periodic checkpoint within 1,000 iterations)."""
    instance = _instance()
    noise = NoiseModel(failure_rate_per_hour=20.0, checkpoint_every=1000)

    def first_crash(save: bool) -> tuple[int, int]:
        plan = PlanRun(instance, 4, 2048, noise, np.random.default_rng(3))
        done = 0
        for step in plan.steps():
            if isinstance(step, Crashed):
                return done, step.resume_from
            done = step.first + len(step.ends_s)
            if save:
                plan.save(done)
        raise AssertionError("the run never crashed")

    saved_at, resumed = first_crash(save=True)
    assert resumed == saved_at > 0
    assert first_crash(save=False) == (saved_at, 0)


def test_a_crash_is_a_check_and_a_check_a_checkpoint() -> None:
    """Crashes the belief does not know of, and no periodic checkpoint within the run: each
    crash ends its leg (the controller is asked at once), and a crash loses at most the leg
    it ended, since every check before it saved the run — never the work since the start."""
    instance = _instance()
    truth = Truth(failure_rate_per_h=6.0)
    run = _run(instance, truth, NoiseModel(checkpoint_every=10_000), seed=2)
    assert run.finished and run.failures >= 2
    assert all(leg.failures <= 1 for leg in run.legs)
    longest = max(leg.iterations for leg in run.legs)
    assert run.lost_iterations <= run.failures * longest < run.iterations


def test_no_iteration_is_lost_or_repeated_across_changes() -> None:
    """A slower truth with crashes: the plan changes, and the iterations simulated in the legs
    are the run's iterations plus those redone after crashes, no more and no fewer."""
    instance = _instance()
    run = _run(instance, Truth(rate_scale=0.7, failure_rate_per_h=3.0),
               NoiseModel(checkpoint_every=20), seed=1)
    assert run.finished and run.switches >= 1 and run.failures >= 1
    simulated = sum(leg.iterations for leg in run.legs)
    assert simulated == pytest.approx(run.iterations + run.lost_iterations, rel=1e-12)
    plan = solve(instance, guarantee=GUARANTEE, noise=NoiseModel(checkpoint_every=20))
    # Whole samples: each new plan trains ⌈left·B⌉ samples, less than one more than left.
    assert plan.iterations <= run.iterations <= plan.iterations + run.switches / plan.global_batch
    # The legs tile the run's time, and the stages hold the plans in turn.
    assert math.fsum(leg.seconds for leg in run.legs) == pytest.approx(run.time_s, rel=1e-12)
    assert math.fsum(seconds for _, seconds in run.stages) == pytest.approx(run.time_s)
    assert len(run.stages) == run.switches + 1
    changes = [d for d in run.decisions if d.changed]
    assert [n for n, _ in run.stages[1:]] == [d.functions for d in changes]


@pytest.mark.slow
def test_adaptive_meets_more_when_optimistic_and_costs_less_when_pessimistic() -> None:
    jobs = generate_trace(20, seed=0)
    names = ["lambdadnn", "lambdadnn-adaptive"]
    slow = {r.name: r for r in compare(jobs, names, seed=0, noise=NoiseModel(),
                                        pool_size=50_000, truth=Truth(rate_scale=0.8)).reports()}
    assert slow["lambdadnn-adaptive"].deadline_met > slow["lambdadnn"].deadline_met
    fast = {r.name: r for r in compare(jobs, names, seed=0, noise=NoiseModel(),
                                        pool_size=50_000, truth=Truth(rate_scale=1.25)).reports()}
    assert fast["lambdadnn-adaptive"].total_cost_usd < fast["lambdadnn"].total_cost_usd


def test_compare_cli_runs_the_adaptive_strategy() -> None:
    result = CliRunner().invoke(main, [
        "compare", "--jobs", "6", "--seed", "2", "--strategies", "lambdadnn,lambdadnn-adaptive",
        "--truth", "rate_scale=0.8", "--json",
    ])
    assert result.exit_code == 0, result.stderr
    met = {s["name"]: s["deadline_met"] for s in json.loads(result.stdout)["strategies"]}
    assert met["lambdadnn-adaptive"] > met["lambdadnn"]


@pytest.mark.parametrize(("change", "says"), [
    ({"belief": {"name": "x"}}, "`belief` must be a lambdadnn Instance"),
    ({"truth": "instances/mobilenet-cifar10.yaml"}, "`truth` must be a lambdadnn Instance"),
    ({"truth": load_instance("instances/resnet50-cifar10.yaml")}, "`truth` trains another"),
    ({"true_noise": 0.1}, "`true_noise` must be a lambdadnn.models.noise.NoiseModel"),
    ({"noise": None}, "`noise` must be"),
    ({"budget_s": 0}, "`budget_s` must be a positive number"),
    ({"budget_s": -5.0}, "`budget_s`"),
    ({"budget_s": math.nan}, "`budget_s`"),
    ({"budget_s": math.inf}, "`budget_s`"),
    ({"budget_s": True}, "`budget_s`"),
    ({"budget_s": "600"}, "`budget_s`"),
    ({"rng": 7}, "`rng` must be a numpy Generator"),
    ({"max_functions": 0}, "`max_functions` must be a positive integer"),
    ({"max_functions": 2.5}, "`max_functions`"),
    ({"max_functions": True}, "`max_functions`"),
    ({"guarantee": 1.5}, "guarantee"),
])
def test_hostile_input_is_refused_in_one_line(change: dict[str, object], says: str) -> None:
    instance = _instance()
    arguments: dict[str, object] = {
        "belief": instance, "truth": instance, "true_noise": NoiseModel(), "guarantee": GUARANTEE,
        "noise": NoiseModel(), "budget_s": 600.0, "rng": np.random.default_rng(0),
        "max_functions": None, **change,
    }
    with pytest.raises(InputError) as raised:
        run_adaptive(**arguments)  # type: ignore[arg-type]
    # A bad instance (or one the controller plans) is the instance's error, the rest inputs.
    assert isinstance(raised.value, InstanceError) == bool({"belief", "truth", "guarantee"}
                                                           & set(change))
    message = str(raised.value)
    assert says in message and "\n" not in message
