"""The adaptive controller's decisions on scripted progress: on track, behind, ahead, crashes.

Each script feeds the controller what a run under a known truth would measure (compute and
exchange times scaled from the belief's), and checks what it decides and why. The checks
against the truth use the model itself on the true instance, never the controller's belief.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.models.noise import NoiseModel
from lambdadnn.solver.adaptive import (
    MIN_SAVING,
    MODEL_SD,
    PRIOR_EXPOSURE_H,
    PRIOR_SD,
    Controller,
    Decision,
    Factor,
    Observation,
)
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.instance import Instance, load_instance
from lambdadnn.solver.pipeline import evaluate
from lambdadnn.solver.shipped import instances_folder

GUARANTEE = 0.999


def _instance(name: str = "mobilenet-cifar10") -> Instance:
    return load_instance(instances_folder() / f"{name}.yaml")


def _controller(name: str = "mobilenet-cifar10", **kwargs: object) -> Controller:
    return Controller.start(_instance(name), guarantee=GUARANTEE, noise=NoiseModel(), **kwargs)


def _leg(
    controller: Controller, iterations: int, *, slow: float = 1.0, cv: float = 0.05,
    seed: int = 0, failures: int = 0, exposure_s: float = 0.0,
) -> tuple[Observation, float]:
    """What a leg at the current plan measures when the truth is `slow` × the belief's times,
    and the seconds it took (the slowest worker, then the exchange, per iteration)."""
    t_comp, t_comm = controller._believed_times(controller.functions, controller.memory_mb)
    rng = np.random.default_rng(seed)
    compute = t_comp * slow * rng.lognormal(-cv * cv / 2, cv, (iterations, controller.functions))
    communication = np.full(iterations, t_comm * slow)
    seconds = float((compute.max(axis=1) + communication).sum())
    observation = Observation(
        controller.functions, controller.memory_mb, compute, communication,
        failures=failures, exposure_s=exposure_s,
    )
    return observation, seconds


def _first_check(
    controller: Controller, *, lost_s: float = 0.0, **leg: Any
) -> tuple[Decision, float]:
    """The first check after a leg measured as `_leg(**leg)` says, `lost_s` more seconds
    gone (a crash's); the decision and the leg's seconds."""
    at = controller.last.next_check_iteration
    observation, seconds = _leg(controller, at, **leg)
    decision = controller.decide(iterations_done=at, elapsed_s=seconds + lost_s,
                                 observation=observation)
    return decision, seconds


def _run(controller: Controller, *, slow: float, lost_s: float = 0.0) -> float:
    """Drive the controller to the end of its run under a truth `slow` × the belief; the
    run's seconds. A switch costs the restart overhead; `lost_s` is lost at the first check."""
    done, elapsed = 0, 0.0
    restart = controller.instance.platform.restart_overhead_s
    while done < controller.iterations:
        stop = controller.last.next_check_iteration
        observation, seconds = _leg(controller, stop - done, slow=slow, seed=stop)
        elapsed += seconds + (restart if controller.last.changed else 0.0)
        if done == 0:
            elapsed += lost_s
        done = stop
        controller.decide(iterations_done=done, elapsed_s=elapsed, observation=observation)
    return elapsed


def test_on_track_carries_on_to_the_end() -> None:
    """A run whose every leg measures exactly the believed speeds is never re-provisioned."""
    controller = _controller()
    first = controller.last
    _run(controller, slow=1.0)
    actions = [d.action for d in controller.decisions]
    assert actions[0] == "start" and set(actions[1:]) == {"continue"}
    assert all("on track" in d.reason or "done" in d.reason for d in controller.decisions[1:])
    assert (controller.functions, controller.memory_mb) == (first.functions, first.memory_mb)
    assert controller.decisions[-1].rate_ratio == pytest.approx(1.0, abs=0.02)


def test_behind_scales_up_and_the_new_plan_meets_the_truth() -> None:
    """R 20% slower than believed: at the first check it scales up, to a plan that the
    model of the TRUE instance says meets the time left at the guarantee."""
    instance = _instance()
    controller = _controller()
    start = controller.last
    decision, seconds = _first_check(controller, slow=1.25)
    assert decision.action == "scale-up" and decision.reason.startswith("behind")
    assert decision.previous == (start.functions, start.memory_mb)
    assert decision.rate_ratio == pytest.approx(0.8, rel=0.02)
    assert decision.functions * decision.local_batch == pytest.approx(controller.global_batch)
    rate = instance.profile.rate
    true = dataclasses.replace(instance, profile=dataclasses.replace(
        instance.profile, rate=dataclasses.replace(rate, slope=rate.slope * 0.8,
                                                   intercept=rate.intercept * 0.8),
        latency_s=instance.profile.latency_s * 1.25,
    ), parameter_server=dataclasses.replace(
        instance.parameter_server,
        bandwidth_mbps=instance.parameter_server.bandwidth_mbps * 0.8,
        function_bandwidth_mbps=instance.parameter_server.function_bandwidth_mbps * 0.8,
    ))
    remaining = dataclasses.replace(controller, instance=true)._remaining(
        controller.iterations - start.next_check_iteration, fresh=True, z=None
    )
    truth = evaluate(remaining, functions=decision.functions, memory_mb=decision.memory_mb,
                     guarantee=GUARANTEE, noise=controller._noise())
    restart = instance.platform.restart_overhead_s
    assert truth.deadline_time_s + restart <= controller.deadline_s - seconds
    # Its predicted time is the model's for the rest at the planned speeds plus the restart.
    left = controller.iterations - start.next_check_iteration
    planned = evaluate(controller._remaining(left, fresh=True, z=controller._z),
                       functions=decision.functions, memory_mb=decision.memory_mb,
                       guarantee=GUARANTEE, noise=controller._noise())
    assert decision.predicted_s == pytest.approx(planned.deadline_time_s + restart, rel=1e-12)


def test_behind_whole_run_finishes_in_time() -> None:
    """Under the same slower truth the whole scripted run ends before its deadline, while
    the static plan alone would take longer than the deadline."""
    controller = _controller()
    static_s = controller.last.predicted_s * 1.25
    elapsed = _run(controller, slow=1.25)
    assert static_s > controller.deadline_s >= elapsed


def test_ahead_scales_down_and_costs_less() -> None:
    """R two-thirds faster than believed: it scales down to a plan that is cheaper than
    carrying on (as now believed) by at least MIN_SAVING of the remaining cost, and still
    meets the deadline."""
    controller = _controller()
    start = controller.last
    decision, seconds = _first_check(controller, slow=0.6)
    assert decision.action == "scale-down" and decision.reason.startswith("ahead")
    carry = controller._option(start.functions, start.memory_mb,
                               controller.iterations - start.next_check_iteration,
                               controller.deadline_s - seconds, fresh=False, z=0.0,
                               restart=False)
    assert decision.cost_usd <= carry.cost_usd * (1 - MIN_SAVING)
    assert decision.slack_s >= 0


def test_crash_updates_the_rate_and_a_lost_leg_is_caught_up() -> None:
    """A crash that loses a fifth of the deadline at the first check: the crash rate's
    posterior rises to f/(PRIOR_EXPOSURE_H + exposure), and the run scales up to catch up."""
    controller = _controller()
    decision, _ = _first_check(controller, lost_s=controller.deadline_s / 5, failures=1,
                               exposure_s=3600.0)
    assert decision.failure_rate_per_hour == pytest.approx(1 / (PRIOR_EXPOSURE_H + 1))
    assert decision.action == "scale-up" and decision.slack_s >= 0


def test_hopeless_run_takes_the_fastest_plan_and_says_it_misses() -> None:
    """With the deadline nearly spent, no plan meets it: the fastest one is taken, and the
    reason says it still misses."""
    controller = _controller()
    decision, _ = _first_check(controller, lost_s=controller.deadline_s * 0.95)
    assert decision.action in ("scale-up", "switch") and "still misses" in decision.reason
    assert decision.slack_s < 0


def test_checks_follow_the_schedule_and_stop_at_the_end() -> None:
    """The first check after 3% of the iterations, then every 10%, never past the last."""
    controller = _controller()
    k = controller.iterations
    assert controller.last.next_check_iteration == max(3, math.ceil(0.03 * k))
    assert controller.next_check(k - 1) == math.ceil(k)
    assert controller.next_check(10) == 10 + max(3, math.ceil(0.1 * k))


def test_decisions_are_json_ready() -> None:
    controller = _controller()
    _run(controller, slow=1.25)
    for decision in controller.decisions:
        record = decision.to_dict()
        assert set(record) >= {"action", "reason", "functions", "memory_mb", "previous",
                               "slack_s", "rate_ratio", "predicted_s"}


@settings(max_examples=40, deadline=None)
@given(
    prior=st.floats(-1, 1), sd=st.floats(0.01, 1),
    logs=st.lists(st.floats(-2, 2), min_size=2, max_size=30),
)
def test_factor_is_the_normal_posterior(prior: float, sd: float, logs: list[float]) -> None:
    """Property: a factor's update is the conjugate normal posterior of its log, observing
    the log of the leg's mean ratio at the delta method's variance var(r)/(N·mean²) (at
    least MODEL_SD²), computed here with numpy from the textbook formula."""
    ratios = np.exp(np.array(logs))
    updated = Factor(prior, sd).observe(ratios)
    mean = ratios.mean()
    variance = max(np.var(ratios, ddof=1) / (len(ratios) * mean**2), MODEL_SD**2)
    precision = 1 / sd**2 + 1 / variance
    assert updated.sd == pytest.approx(np.sqrt(1 / precision))
    assert updated.mean == pytest.approx(
        (prior / sd**2 + np.log(mean) / variance) / precision, abs=1e-12)
    assert updated.sd <= sd and updated.evidence == len(logs)


def test_a_heavy_tailed_leg_is_judged_by_its_mean() -> None:
    """Iterations that mostly run at the believed speed but a fifth of the time wait 10×
    (a throttled CPU quota) take 2.8× the believed time in all: the factor says about that,
    not the geometric mean's 1.6×."""
    ratios = np.tile([1.0, 1.0, 1.0, 1.0, 10.0], 40)
    assert Factor().observe(ratios).value == pytest.approx(2.8, rel=0.05)


@settings(max_examples=15, deadline=None)
@given(slow=st.floats(0.7, 1.4), seed=st.integers(0, 10_000))
def test_a_switch_that_meets_meets_at_the_guarantee(slow: float, seed: int) -> None:
    """Property: whatever the truth's speed, a switch that says it meets the deadline
    predicts (at the guarantee, restart included) no more than the time left, and a
    continue while on track leaves a non-negative slack."""
    controller = _controller()
    decision, seconds = _first_check(controller, slow=slow, seed=seed)
    if decision.changed and "still misses" not in decision.reason:
        assert decision.predicted_s <= controller.deadline_s - seconds
    if decision.action == "continue" and decision.reason.startswith("on track"):
        assert decision.slack_s >= 0
    assert decision.rate_ratio == pytest.approx(1 / slow, rel=0.05)


def test_posterior_shrinks_from_the_prior() -> None:
    controller = _controller()
    assert controller.belief.compute.sd == PRIOR_SD
    observation, seconds = _leg(controller, controller.last.next_check_iteration)
    controller.decide(iterations_done=controller.last.next_check_iteration, elapsed_s=seconds,
                      observation=observation)
    assert controller.belief.compute.sd < PRIOR_SD / 5


@pytest.mark.parametrize(("change", "message"), [
    ({"compute_s": np.ones(3)}, "iterations × workers"),
    ({"communication_s": np.ones(2)}, "iterations × workers"),
    ({"compute_s": np.full((3, 2), np.nan)}, "`compute_s` must hold finite"),
    ({"communication_s": -np.ones(3)}, "`communication_s` must hold finite"),
    ({"failures": -1}, "`failures` must be an integer"),
    ({"failures": True}, "`failures` must be an integer"),
    ({"exposure_s": math.inf}, "`exposure_s` must be seconds"),
])
def test_hostile_observations_are_refused(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "functions": 2, "memory_mb": 1024, "compute_s": np.ones((3, 2)),
        "communication_s": np.ones(3), **change,
    }
    with pytest.raises(InstanceError, match=message):
        Observation(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [
    ("iterations_done", -1), ("elapsed_s", math.nan), ("elapsed_s", "3"),
])
def test_hostile_progress_is_refused(field: str, value: object) -> None:
    controller = _controller()
    progress = {"iterations_done": 1, "elapsed_s": 1.0, field: value}
    with pytest.raises(InstanceError, match=f"`{field}` must be a number"):
        controller.decide(**progress)  # type: ignore[arg-type]


def test_hostile_controllers_are_refused() -> None:
    instance = _instance()
    with pytest.raises(InstanceError, match="`global_batch` 1 is smaller than `functions` 4"):
        Controller(instance, 4, 1024, 1, 10, 100)
    with pytest.raises(InstanceError, match="`functions` must be a positive integer"):
        Controller(instance, 0, 1024, 8, 10, 100)
    with pytest.raises(InstanceError, match="`deadline_s` must be a positive number"):
        Controller(instance, 2, 1024, 8, 10, math.inf)
    with pytest.raises(InstanceError, match="`observation` must be"):
        Controller(instance, 2, 1024, 8, 10, 100).observe("leg")  # type: ignore[arg-type]
