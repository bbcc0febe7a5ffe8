"""The adaptive controller's decisions on scripted progress: on track, behind, ahead, crashes,
saturation, slow start-up, hopeless runs and noisy checks; and its posterior against numpy.

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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lambdadnn.models.noise import NoiseModel
from lambdadnn.solver.adaptive import (
    DRIFT_SD,
    HOPELESS,
    KEEP_PRIOR,
    MIN_SAVING,
    MODEL_SD,
    PRIOR_EXPOSURE_H,
    PRIOR_SD,
    Controller,
    Decision,
    Factor,
    Gaussian,
    Observation,
    RatePosterior,
    remaining_instance,
)
from lambdadnn.solver.errors import InstanceError
from lambdadnn.solver.fit_uncertainty import RUN_SPREAD
from lambdadnn.solver.instance import Fit, FitParameter, Instance
from lambdadnn.solver.instance_yaml import load_instance
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
    t_comp, transfer, latency = controller._believed(controller.functions, controller.memory_mb)
    t_comm = transfer + latency
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
    measured = controller.belief.rate_factor(start.memory_mb)[0]  # where it was measured
    assert math.exp(-measured) == pytest.approx(0.8, rel=0.02)
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
    left = controller.iterations - start.next_check_iteration
    remaining = remaining_instance(true, controller.global_batch, left)
    truth = evaluate(remaining, functions=decision.functions, memory_mb=decision.memory_mb,
                     guarantee=GUARANTEE, noise=controller._noise())
    restart = instance.platform.restart_overhead_s
    assert truth.deadline_time_s + restart <= controller.deadline_s - seconds
    # Its predicted time is the posterior's quantile, which covers the truth's mean.
    assert decision.predicted_s >= truth.time_s + restart
    assert decision.p_meet >= GUARANTEE


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
    carry = controller._assess(start.functions, start.memory_mb,
                               controller.iterations - start.next_check_iteration,
                               controller.deadline_s - seconds, fresh=False, restart=False)
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


def test_hopeless_run_is_told_so_and_pays_for_no_switch() -> None:
    """With the deadline nearly spent, no plan has even HOPELESS of a chance: the run is told
    so at once, with the best achievable finish, and carries on rather than pay a switch."""
    controller = _controller()
    decision, seconds = _first_check(controller, lost_s=controller.deadline_s * 0.95)
    assert decision.action == "continue" and decision.reason.startswith("hopeless")
    assert "best achievable finish is about" in decision.reason
    finish = float(decision.reason.split("about ")[1].split(" s")[0])
    assert controller.deadline_s < finish <= seconds + controller.deadline_s * 0.95 + (
        decision.predicted_s)
    assert decision.p_meet < HOPELESS and decision.slack_s < 0


def test_a_behind_run_that_can_still_make_it_switches_to_the_likeliest_cheap_plan() -> None:
    """Half the deadline lost at the first check: a plan that meets at the guarantee may not
    exist, but one that raises P(meet) does, and the run takes it."""
    controller = _controller()
    decision, _ = _first_check(controller, lost_s=controller.deadline_s * 0.5)
    assert decision.changed and decision.reason.startswith("behind")
    assert decision.p_meet > controller.decisions[0].p_meet * 0 + HOPELESS


def test_checks_follow_the_schedule_and_stop_at_the_end() -> None:
    """The first check after 3% of the iterations, then every 10%, never past the last; a
    switch brings the next check to 3% again (the new plan's speed is evidence due)."""
    controller = _controller()
    k = controller.iterations
    assert controller.last.next_check_iteration == max(3, math.ceil(0.03 * k))
    assert controller.next_check(k - 1) == math.ceil(k)
    assert controller.next_check(10) == 10 + max(3, math.ceil(0.1 * k))
    decision, _ = _first_check(controller, slow=1.25)
    assert decision.changed
    assert decision.next_check_iteration == decision.at_iteration + max(3, math.ceil(0.03 * k))


def test_decisions_are_json_ready() -> None:
    controller = _controller()
    _run(controller, slow=1.25)
    for decision in controller.decisions:
        record = decision.to_dict()
        assert set(record) >= {"action", "reason", "functions", "memory_mb", "previous",
                               "slack_s", "rate_ratio", "predicted_s", "p_meet", "posterior"}
        assert {"rate_log_factor", "setup_factor", "transfer_factor", "latency_factor",
                "compute_cv"} <= set(record["posterior"])


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
    if decision.changed and "may miss" not in decision.reason:
        assert decision.predicted_s <= controller.deadline_s - seconds
    if decision.action == "continue" and decision.reason.startswith("on track"):
        assert decision.slack_s >= 0
    measured = controller.belief.rate_factor(controller.decisions[0].memory_mb)[0]
    assert math.exp(-measured) == pytest.approx(1 / slow, rel=0.05)


def test_posterior_shrinks_from_the_prior() -> None:
    controller = _controller()
    assert np.all(controller.belief.rate.sds == PRIOR_SD)
    observation, seconds = _leg(controller, controller.last.next_check_iteration)
    controller.decide(iterations_done=controller.last.next_check_iteration, elapsed_s=seconds,
                      observation=observation)
    assert controller.belief.rate_factor(controller.memory_mb)[1] < PRIOR_SD / 5


@pytest.mark.parametrize(("change", "message"), [
    ({"compute_s": np.ones(3)}, "iterations × workers"),
    ({"communication_s": np.ones(2)}, "iterations × workers"),
    ({"compute_s": np.full((3, 2), np.nan)}, "`compute_s` must hold finite"),
    ({"communication_s": -np.ones(3)}, "`communication_s` must hold finite"),
    ({"failures": -1}, "`failures` must be an integer"),
    ({"failures": True}, "`failures` must be an integer"),
    ({"exposure_s": math.inf}, "`exposure_s` must be seconds"),
    ({"setup_s": -1.0}, "`setup_s` must be seconds"),
    ({"setup_s": "3"}, "`setup_s` must be seconds"),
    ({"rounds": 1.5}, "`rounds` must be an integer"),
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
    catalogue = _instance("resnet50-cifar10")  # a run re-plans on its own server only
    with pytest.raises(InstanceError, match=r"offers 40 parameter servers: .* `solved_from`"):
        Controller(catalogue, 2, 1024, 8, 10, 100)
    assert not Controller.start(catalogue).instance.servers


# --- Controller v2: the posterior against numpy, and the scenarios it was built for ----------


def _oracle_rate(
    prior: RatePosterior, observations: list[tuple[float, float, float]], at_mb: float,
) -> tuple[np.ndarray, float, float]:
    """The saturation mixture's posterior by brute force: for each saturation point s, the
    density of c on a dense grid (prior × the observations' normal likelihoods), integrated
    numerically (in logs) after each observation; the weights follow Bayes' rule observation
    by observation (the evidence ratio Z_k/Z_(k-1)), with KEEP_PRIOR of the prior mixed back in
    after each; returns them, and the log-factor's mean and sd at `at_mb`."""
    c = np.linspace(-8, 8, 160_001)
    dc = c[1] - c[0]

    def log_mass(log_density: np.ndarray) -> float:
        # ∫ exp(log_density) dc, in logs: a sharp posterior far from the prior underflows
        top = float(log_density.max())
        return top + math.log(float(np.exp(log_density - top).sum()) * dc)

    log_evidences, means, second = [], [], []
    for s, m0, sd0 in zip(prior.saturation_mb, prior.means, prior.sds, strict=True):
        log_density = -0.5 * ((c - m0) / sd0) ** 2 - math.log(sd0 * math.sqrt(2 * math.pi))
        log_masses = []
        for memory, y, variance in observations:
            full = prior.slope * memory + prior.intercept
            capped = prior.slope * min(memory, s) + prior.intercept
            g = math.log(full / capped)
            log_density = log_density - 0.5 * (y - c - g) ** 2 / variance - 0.5 * math.log(
                2 * math.pi * variance)
            log_masses.append(log_mass(log_density))
        density = np.exp(log_density - log_density.max())
        log_evidences.append(log_masses)
        g_at = math.log((prior.slope * at_mb + prior.intercept)
                        / (prior.slope * min(at_mb, s) + prior.intercept))
        mass = density.sum() * dc
        means.append((c * density).sum() * dc / mass + g_at)
        second.append(((c + g_at) ** 2 * density).sum() * dc / mass)
    log_z = np.array(log_evidences)  # points × observations
    w = prior.weights.copy()
    for k in range(len(observations)):
        log_ratio = log_z[:, k] - (log_z[:, k - 1] if k else 0.0)
        with np.errstate(divide="ignore"):
            log_w = np.log(w) + log_ratio
        w = np.exp(log_w - log_w.max())
        w = (1 - KEEP_PRIOR) * w / w.sum() + KEEP_PRIOR * prior.weights
    mean = float(w @ np.array(means))
    return w, mean, math.sqrt(float(w @ np.array(second)) - mean**2)


@settings(max_examples=25, deadline=None)
@given(
    legs=st.lists(st.tuples(st.sampled_from([256.0, 1024.0, 1792.0, 3008.0, 7000.0]),
                            st.floats(-0.5, 1.5), st.floats(0.001, 0.3)),
                  min_size=1, max_size=4),
    sd=st.floats(0.1, 1.0), at_mb=st.sampled_from([512.0, 2048.0, 10240.0]),
)
# sharp legs that disagree, far from the prior: the evidence underflows unless kept in logs
@example(legs=[(256.0, 0.0, 0.015625), (256.0, 0.0, 0.015625), (3008.0, -0.5, 0.001953125),
               (256.0, 0.0, 0.25)], sd=0.109375, at_mb=512.0)
def test_rate_posterior_is_the_bayesian_mixture(
    legs: list[tuple[float, float, float]], sd: float, at_mb: float,
) -> None:
    """Property: the rate's posterior after legs at several memories (each a log-factor y and
    its variance) is the Bayesian mixture over saturation points (with KEEP_PRIOR of the
    prior kept), computed here by brute-force integration over c with numpy: its weights,
    and its mean and sd at another memory."""
    posterior = prior = RatePosterior.prior(0.5, 10.0, 128.0, 10240.0, sd)
    for memory, y, variance in legs:
        posterior = posterior.update(memory, y, variance, 10)
    weights, mean, deviation = _oracle_rate(prior, legs, at_mb)
    assert posterior.weights == pytest.approx(weights, abs=1e-6)
    predicted_mean, predicted_sd = posterior.predict(at_mb)
    assert predicted_mean == pytest.approx(mean, abs=1e-5)
    assert predicted_sd == pytest.approx(deviation, abs=1e-4)


@settings(max_examples=25, deadline=None)
@given(legs=st.lists(st.tuples(st.floats(0.01, 5), st.floats(0, 2), st.floats(0.1, 8),
                               st.floats(1e-4, 1)), min_size=1, max_size=6))
def test_exchange_posterior_is_the_batch_normal_posterior(
    legs: list[tuple[float, float, float, float]],
) -> None:
    """Property: the exchange's posterior on (k_bw, k_lat) after rank-one updates equals the
    textbook batch posterior Σ = (Σ₀⁻¹ + Σ xxᵀ/v)⁻¹, μ = Σ(Σ₀⁻¹μ₀ + Σ x·y/v) (numpy)."""
    prior = Gaussian.prior((1.0, 1.0), (1.0, 1.0))
    posterior = prior
    precision = np.linalg.inv(prior.covariance)
    information = precision @ prior.mean
    for transfer, latency, y, variance in legs:
        x = np.array([transfer, latency])
        posterior = posterior.update(x, y, variance, 1)
        precision = precision + np.outer(x, x) / variance
        information = information + x * y / variance
    covariance = np.linalg.inv(precision)
    assert posterior.covariance == pytest.approx(covariance, rel=1e-6, abs=1e-9)
    assert posterior.mean == pytest.approx(covariance @ information, rel=1e-6, abs=1e-7)


def _saturating_leg(
    controller: Controller, iterations: int, saturates_at_mb: float, seed: int = 0,
) -> tuple[Observation, float]:
    """A leg under a truth whose rate stops growing at `saturates_at_mb`: compute at memory m
    takes R(m)/R(min(m, s)) × the believed time; the exchange is as believed."""
    rate = controller.instance.profile.rate
    m = controller.memory_mb
    slow = (rate.slope * m + rate.intercept) / (rate.slope * min(m, saturates_at_mb)
                                                + rate.intercept)
    return _leg(controller, iterations, slow=slow, seed=seed)


def test_saturation_is_learned_per_memory_and_memory_is_not_escalated() -> None:
    """A rate that stops growing at 1 GB, run at 3 GB: the leg shows compute ~2× slow. The
    controller does not buy memory past 3 GB (where the evidence says memory stopped
    helping), and once it has seen a second memory its belief at a third follows the
    saturated truth, not one factor for every memory."""
    plan = Controller.start(_instance("resnet50-cifar10"), guarantee=GUARANTEE, noise=NoiseModel())
    controller = Controller(plan.instance, plan.functions, 3008, plan.global_batch,
                            plan.iterations, plan.deadline_s * 1.5, GUARANTEE, NoiseModel())
    saturates = 1024.0
    done, elapsed = 0, 0.0
    for seed in range(4):
        stop = controller.last.next_check_iteration
        observation, seconds = _saturating_leg(controller, stop - done, saturates, seed)
        done, elapsed = stop, elapsed + seconds
        decision = controller.decide(iterations_done=done, elapsed_s=elapsed,
                                     observation=observation)
        assert decision.memory_mb <= 3008, decision.reason
    rate = plan.instance.profile.rate
    for memory in (512.0, 2048.0, 6000.0):
        truth = math.log((rate.slope * memory + rate.intercept)
                         / (rate.slope * min(memory, saturates) + rate.intercept))
        if len(controller._ran) > 1:
            assert controller.belief.rate_factor(memory)[0] == pytest.approx(truth, abs=0.15)
    assert controller.belief.rate_factor(3008)[0] == pytest.approx(
        math.log((rate.slope * 3008 + rate.intercept) / (rate.slope * saturates
                                                         + rate.intercept)), abs=0.05)


def test_two_memories_tell_saturation_from_a_uniform_slowdown() -> None:
    """Property-like check of the R(m) model: legs at 1 GB (factor 1) and 3 GB (the
    saturated factor) put the posterior's weight on saturation points near 1 GB, and its
    belief at 6 GB within 10% of the truth; one factor for all memories cannot do this."""
    rate = _instance("resnet50-cifar10").profile.rate
    posterior = RatePosterior.prior(rate.slope, rate.intercept, 128.0, 10240.0, PRIOR_SD)
    saturated = math.log((rate.slope * 3008 + rate.intercept)
                         / (rate.slope * 1024 + rate.intercept))
    posterior = posterior.update(1024.0, 0.0, 1e-4, 30).update(3008.0, saturated, 1e-4, 30)
    truth = math.log((rate.slope * 6000 + rate.intercept) / (rate.slope * 1024
                                                             + rate.intercept))
    assert posterior.predict(6000.0)[0] == pytest.approx(truth, rel=0.1)
    assert posterior.predict(512.0)[0] == pytest.approx(0.0, abs=0.1)  # a grid point's error


def test_slow_start_up_is_learned_and_priced() -> None:
    """The first leg's round took 3× the believed set-up: the set-up factor rises toward 3,
    and a new plan's predicted time pays the slower start-up, against a run that measured
    the same leg with the believed set-up."""
    slow, as_believed = _controller("resnet50-cifar10"), _controller("resnet50-cifar10")
    n, m = slow.functions, slow.memory_mb
    believed = slow._believed_setup(n, m, first=True)
    iterations = slow.last.next_check_iteration
    observation, seconds = _leg(slow, iterations)
    for controller, factor in ((slow, 3.0), (as_believed, 1.0)):
        controller.decide(iterations_done=iterations, elapsed_s=seconds + factor * believed,
                          observation=dataclasses.replace(
                              observation, setup_s=factor * believed, rounds=1))
    assert slow.belief.setup.value > 1.5
    assert as_believed.belief.setup.value == pytest.approx(1.0)
    left = slow.iterations - iterations
    priced = [c._assess(n, m, left, c.deadline_s, fresh=True, restart=True).mean_s
              for c in (slow, as_believed)]
    assert priced[0] > priced[1] + 0.4 * believed


def test_a_noisy_first_check_does_not_pay_a_switch() -> None:
    """A first leg a few per cent slow on a noisy machine (every iteration's compute scaled by
    a common 30% scatter): at the posterior mean the plan still makes it, and a plan that
    meets remains after one more leg, so the controller watches rather than switch on one
    noisy reading."""
    controller = _controller()
    at = controller.last.next_check_iteration
    observation, seconds = _leg(controller, at, slow=1.03, cv=0.0)
    common = np.random.default_rng(3).lognormal(-0.045, 0.3, (at, 1))
    noisy = dataclasses.replace(observation, compute_s=observation.compute_s * common)
    decision = controller.decide(iterations_done=at, elapsed_s=seconds, observation=noisy)
    assert not decision.changed, decision.reason
    assert decision.reason.startswith(("watching", "on track"))


def test_the_rest_of_a_run_keeps_its_global_batch() -> None:
    """The rest of a run at any n splits the run's global batch B: b_l = B/n, b_g = B."""
    instance = _instance()
    rest = remaining_instance(instance, 512.0, 100.0)
    for functions in (1, 3, 8):
        found = evaluate(rest, functions=functions, memory_mb=1024)
        assert found.global_batch == pytest.approx(512)
        assert found.local_batch == pytest.approx(512 / functions)


def test_the_prior_comes_from_the_profiles_fit() -> None:
    """A profiled instance's fit sets how far the rate may be off before any evidence: its
    relative error of R(m₀) with DRIFT_SD on top, far tighter than PRIOR_SD; and the
    controller's own re-plans drop the `fit:` section (its posterior covers it)."""
    instance = _instance()
    rate = instance.profile.rate
    fit = Fit("digits-cnn", "local", 60.0, 0.0, parameters=(
        FitParameter("profile.rate.slope", rate.slope, rate.slope * 0.02, True),
        FitParameter("profile.rate.intercept", rate.intercept, abs(rate.intercept) * 0.02 + 1,
                     True),
    ))
    profiled = dataclasses.replace(instance, fit=fit)
    plan = Controller.start(instance, guarantee=GUARANTEE, noise=NoiseModel())
    controller = Controller(profiled, plan.functions, plan.memory_mb, plan.global_batch,
                            plan.iterations, plan.deadline_s, GUARANTEE, NoiseModel())
    at = rate.slope * plan.memory_mb + rate.intercept
    relative = math.hypot(rate.slope * 0.02 * plan.memory_mb, abs(rate.intercept) * 0.02 + 1) / at
    assert controller.belief.rate.sds == pytest.approx(math.hypot(relative, DRIFT_SD))
    assert controller.instance.fit is None
    unprofiled = Controller(instance, plan.functions, plan.memory_mb, plan.global_batch,
                            plan.iterations, plan.deadline_s, GUARANTEE, NoiseModel())
    assert np.all(unprofiled.belief.rate.sds == PRIOR_SD)


@pytest.mark.parametrize("spread", [0.0, 0.13])
def test_a_leg_is_known_no_better_than_the_profiles_trials_land(spread: float) -> None:
    """A leg whose iterations barely scatter still tells the rate only to the profile's run
    spread σ_r (how far its trials land from the fitted model: drift from leg to leg, the
    model's misfit at another memory): the rate's posterior sd after it is the conjugate
    update with that variance, √(1/(1/sd₀² + 1/σ²)), σ = max(σ_r, MODEL_SD) (math)."""
    instance = _instance()
    fit = Fit("digits-cnn", "local", 60.0, 0.0, parameters=(
        FitParameter(RUN_SPREAD, spread, spread / 4, True),))
    plan = Controller.start(instance, guarantee=GUARANTEE, noise=NoiseModel())
    controller = Controller(dataclasses.replace(instance, fit=fit), plan.functions,
                            plan.memory_mb, plan.global_batch, plan.iterations, plan.deadline_s,
                            GUARANTEE, NoiseModel())
    prior_sd = float(controller.belief.rate.sds[-1])
    observation, _ = _leg(controller, 200, cv=1e-4)
    controller.observe(observation)
    floor = max(spread, MODEL_SD)
    assert controller.belief.rate.sds[-1] == pytest.approx(
        math.sqrt(1 / (1 / prior_sd**2 + 1 / floor**2)), rel=1e-6)


def test_a_new_plan_pays_its_restart_from_the_checkpoint() -> None:
    """A switch starts the new plan from a checkpoint: against the same plan carried on, its
    expected time is longer by exactly the platform's restart overhead (× the set-up factor,
    1 before any set-up is measured) and its cost by that time at the plan's price per second
    (n·m/1024 GB × the GB-second price, and the PS's hourly price)."""
    controller = _controller()
    instance = controller.instance
    restart = instance.platform.restart_overhead_s
    assert restart > 0
    n, m, left = controller.functions, controller.memory_mb, controller.iterations / 2
    carried = controller._assess(n, m, left, 1e9, fresh=False, restart=False)
    switched = controller._assess(n, m, left, 1e9, fresh=False, restart=True)
    assert switched.mean_s - carried.mean_s == pytest.approx(restart, rel=1e-9)
    per_s = (n * m / 1024 * instance.platform.price_per_gb_second
             + instance.parameter_server.price_per_hour / 3600)
    assert switched.cost_usd - carried.cost_usd == pytest.approx(restart * per_s, rel=1e-9)
