"""The tuners: what they measure, what they learn across jobs, how they extrapolate.

Trials are real simulator trials (`simulate_trial`) under a truth the tuner does not see;
the extrapolation is checked against numpy and against full simulated runs of the truth.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from lambdadnn import Instance, NoiseModel, evaluate, load_instance
from lambdadnn.models import performance
from lambdadnn.models.noise import normal_quantile, planning_noise
from lambdadnn.simulator.baselines import Measure, memory_range
from lambdadnn.simulator.engine import TrialRun, simulate_job, simulate_trial
from lambdadnn.simulator.truth import Truth
from lambdadnn.simulator.tuners import (
    POWER_TUNING_MEMORIES,
    SAMPLE_SEARCH_LIMIT,
    TRIAL_ITERATIONS,
    TRIAL_MAX_S,
    Measured,
    PowerTuning,
    SampleSearch,
    power_tuning_functions,
)

ROOT = Path(__file__).resolve().parent.parent
NOISE = NoiseModel()
GUARANTEE = 0.999


def _instance(name: str, deadline_s: float = 1200.0, epochs: int | None = None) -> Instance:
    base = load_instance(ROOT / "instances" / f"{name}.yaml")
    workload = dataclasses.replace(base.workload, epochs=epochs or base.workload.epochs)
    return dataclasses.replace(base, workload=workload).with_deadline(deadline_s)


class Recorder:
    """`measure` as the pool gives it, under a truth, recording every trial."""

    def __init__(self, truth: Truth | None = None) -> None:
        self.truth = truth or Truth()
        self.runs: list[TrialRun] = []

    def __call__(
        self, functions: int, memory_mb: int, iterations: int, max_s: float,
        rng: np.random.Generator,
    ) -> TrialRun:
        return self.measure(self.instance, functions, memory_mb, iterations, max_s, rng)

    def on(self, instance: Instance) -> Measure:
        self.instance = self.truth.instance(instance)
        return self

    def measure(self, instance: Instance, functions: int, memory_mb: int, iterations: int,
                max_s: float, rng: np.random.Generator) -> TrialRun:
        run = simulate_trial(instance, functions, memory_mb, iterations=iterations,
                             max_s=max_s, noise=self.truth.noise(NOISE), rng=rng)
        self.runs.append(run)
        return run


def test_power_tuning_sweeps_memory_side_by_side_at_a_fixed_n_and_pays_for_it() -> None:
    instance = _instance("mobilenet-cifar10")
    tuner, trials = PowerTuning(GUARANTEE), Recorder()
    plan = tuner(instance, np.random.default_rng(2), NOISE, trials.on(instance))
    assert [run.memory_mb for run in trials.runs] == list(POWER_TUNING_MEMORIES)
    (n,) = {run.functions for run in trials.runs}
    assert n == plan.functions == power_tuning_functions(instance, 10240, NOISE, GUARANTEE)
    # One stage: every size at once, as Power Tuning invokes them in parallel.
    assert plan.trials == ((n * len(trials.runs), max(run.time_s for run in trials.runs)),)
    assert plan.exploration_runs == len(trials.runs)
    assert plan.exploration_cost_usd == pytest.approx(sum(run.cost_usd for run in trials.runs))
    assert all(len(run.iteration_s) <= TRIAL_ITERATIONS for run in trials.runs)


def test_power_tuning_learns_across_the_jobs_of_a_workload() -> None:
    """The second job of the workload with the same n runs no trial; another epochs count
    (same n) neither; a job of another workload does."""
    tuner, trials = PowerTuning(GUARANTEE), Recorder()
    first = _instance("mobilenet-cifar10")
    tuner(first, np.random.default_rng(0), NOISE, trials.on(first))
    measured = len(trials.runs)
    again = tuner(first, np.random.default_rng(1), NOISE, trials.on(first))
    assert len(trials.runs) == measured and again.trials == () and again.exploration_runs == 0
    other = _instance("1dcnn-imdb")
    tuner(other, np.random.default_rng(2), NOISE, trials.on(other))
    assert len(trials.runs) > measured


def test_power_tuning_n_is_the_smallest_meeting_the_quantile_at_the_largest_size() -> None:
    instance = _instance("resnet50-cifar10", deadline_s=900.0)
    n = power_tuning_functions(instance, 10240, NOISE, GUARANTEE)
    terms = planning_noise(NOISE, GUARANTEE, instance.max_functions)
    values = instance.values()

    def quantile(functions: int) -> float:
        return float(performance.figures(values, functions, 10240.0, ("deadline_time",),
                                         terms)["deadline_time"])

    assert quantile(n) <= 900.0 and (n == 1 or quantile(n - 1) > 900.0)


def test_power_tuning_skips_sizes_that_cannot_train() -> None:
    espcn = _instance("espcn-bsds500")
    trials = Recorder()
    plan = PowerTuning(GUARANTEE)(espcn, np.random.default_rng(3), NOISE, trials.on(espcn))
    low = memory_range(espcn)  # R = 0.001·m − 2.3 turns positive at ≈ 2,300 MB
    assert low is not None
    assert [run.memory_mb for run in trials.runs] == [3008, 4096, 6144, 8192, 10240]
    assert evaluate(espcn, functions=plan.functions, memory_mb=plan.memory_mb).valid


def test_sample_search_explores_then_refines_then_exploits() -> None:
    instance = _instance("1dcnn-imdb", deadline_s=600.0)
    tuner, trials = SampleSearch(GUARANTEE, budget=8), Recorder()
    first = tuner(instance, np.random.default_rng(4), NOISE, trials.on(instance))
    # 6 random plans side by side, then 2 refinements one after another
    assert len(first.trials) == 3 and first.exploration_runs == len(trials.runs) == 8
    assert first.trials[0] == (sum(run.functions for run in trials.runs[:6]),
                               max(run.time_s for run in trials.runs[:6]))
    second = tuner(instance, np.random.default_rng(5), NOISE, trials.on(instance))
    assert second.exploration_runs == 1 and len(trials.runs) == 9
    for seed in range(6, 6 + 2 * SAMPLE_SEARCH_LIMIT):
        tuner(instance, np.random.default_rng(seed), NOISE, trials.on(instance))
    assert len(tuner.points(instance)) == SAMPLE_SEARCH_LIMIT
    last = tuner(instance, np.random.default_rng(999), NOISE, trials.on(instance))
    assert last.trials == () and last.exploration_cost_usd == 0.0


def test_sample_search_is_seeded() -> None:
    instance = _instance("mobilenet-cifar10")
    plans = [SampleSearch(GUARANTEE)(instance, np.random.default_rng(9), NOISE,
                                     Recorder().on(instance)) for _ in range(2)]
    assert plans[0] == plans[1]


def test_the_extrapolation_is_the_documented_formula() -> None:
    """numpy as the oracle: load + k·μ + z·σ·√(k + k²/N), per round the slowest start-up
    and the restart overhead."""
    instance = _instance("mobilenet-cifar10", epochs=200)
    runs = [simulate_trial(instance, 4, 3008, iterations=20, noise=NOISE,
                           rng=np.random.default_rng(seed)) for seed in range(3)]
    measured = Measured()
    for run in runs:
        measured.add(run)
    samples = np.concatenate([run.iteration_s for run in runs])
    k = float(performance.figures(instance.values(), 4,
                                  3008, ("iterations",))["iterations"])
    z = normal_quantile(GUARANTEE)
    load = np.mean([run.load_s / run.load_share for run in runs])
    train = load + k * samples.mean() + z * samples.std(ddof=1) * math.sqrt(k + k * k / 60)
    usable = instance.platform.timeout_s - instance.platform.timeout_margin_s
    rounds = math.ceil(train / usable)
    assert rounds > 1  # the case exercises restarts
    expected = (train + (rounds - 1) * instance.platform.restart_overhead_s
                + rounds * max(run.setup_s for run in runs))
    assert measured.predict(instance, 4, 3008, z) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("truth", [Truth(), Truth(rate_scale=0.7), Truth(bandwidth_scale=0.5)])
def test_trials_measure_the_truth_not_the_belief(truth: Truth) -> None:
    """A tuner's expected time, from trials under the truth, is within 3% of the mean of
    full simulated runs of the truth — whatever the belief says."""
    belief = _instance("mobilenet-cifar10")
    measured = Measured()
    recorder = Recorder(truth).on(belief)
    for seed in range(5):
        measured.add(recorder(6, 3008, TRIAL_ITERATIONS, TRIAL_MAX_S,
                              np.random.default_rng(seed)))
    predicted = measured.predict(belief, 6, 3008, 0.0)
    actual = np.mean([simulate_job(truth.instance(belief), 6, 3008, noise=truth.noise(NOISE),
                                   rng=np.random.default_rng(100 + seed)).time_s
                      for seed in range(20)])
    assert predicted == pytest.approx(actual, rel=0.03)
    believed = evaluate(belief, functions=6, memory_mb=3008).time_s
    if truth != Truth():
        assert abs(believed - actual) / actual > 0.1  # the belief alone would be off


def test_a_plan_too_slow_for_one_iteration_in_a_trial_is_never_chosen_to_meet() -> None:
    """ESPCN at 2,301 MB trains at 0.001 samples/s: its trial completes no iteration, so it
    predicts an endless run, and a tuner never picks it when a measured plan meets."""
    espcn = _instance("espcn-bsds500")
    crawl = simulate_trial(espcn, 8, 2301, iterations=TRIAL_ITERATIONS, max_s=TRIAL_MAX_S,
                           noise=NOISE, rng=np.random.default_rng(0))
    measured = Measured()
    measured.add(crawl)
    assert measured.predict(espcn, 8, 2301, 0.0) == math.inf
    tuner = PowerTuning(GUARANTEE, memories=(2301, 10240))
    plan = tuner(espcn, np.random.default_rng(1), NOISE, Recorder().on(espcn))
    assert plan.memory_mb == 10240 and math.isfinite(plan.predicted_time_s)
