"""The fit (`launcher.fit`) on synthetic trials generated from known parameters.

The trials follow the model exactly as the fit assumes it (mean iteration time
b/(α1·m + β1) + 2·(d_m·n/B_p + λ), start-up s0 + s1·n per round, gap o between rounds) plus
seeded Gaussian noise, at the points `design()` picks; numpy draws the noise and is the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.fit import Grid, Trial, _batch_split, fit_trials
from lambdadnn.launcher.profile import Capacity, TrialPlan, design
from lambdadnn.solver.instance import MAX_NOTE_CHARS

MODEL_MB = 0.4
BATCH = 64
BOUNDS = {
    "profile.rate.slope": (0.0, 1e9), "profile.rate.intercept": (-1e9, 1e9),
    "parameter_server.bandwidth_mbps": (1e-9, 1e9), "profile.latency_s": (0.0, 1.0),
}
CAPACITY = Capacity(name="test-1-of-2-cpus", backend="local", max_vcpu=1.0, max_memory_mb=1769,
                    max_functions=8, architecture="x86_64", price_per_gb_second=1.6e-5,
                    price_per_request=2e-7)
RESTART_ROUNDS = 3
# Where CAPACITY's instance is solved: R(m) from the design's lowest memory to one vCPU, and as
# many functions of 442 MB as its one vCPU holds.
GRID = Grid(memory_mb=(442, 1769), functions=4, trial_functions=4)


@dataclass(frozen=True)
class Truth:
    slope: float
    intercept: float
    bandwidth: float
    latency: float
    base: float
    per_function: float
    overhead: float

    def by_name(self) -> dict[str, float]:
        return {
            "profile.rate.slope": self.slope, "profile.rate.intercept": self.intercept,
            "parameter_server.bandwidth_mbps": self.bandwidth, "profile.latency_s": self.latency,
            "profile.startup.base_s": self.base,
            "profile.startup.per_function_s": self.per_function,
            "platform.restart_overhead_s": self.overhead,
        }

    def iteration_s(self, n: int, m: int, b: int) -> float:
        return b / (self.slope * m + self.intercept) + 2 * (MODEL_MB * n / self.bandwidth
                                                            + self.latency)


TRUTH = Truth(slope=20.0, intercept=500.0, bandwidth=300.0, latency=0.002, base=1.5,
              per_function=0.8, overhead=0.5)


def synthetic(
    truth: Truth, n: int, m: int, b: int, iterations: int, rounds: int,
    rng: np.random.Generator, noise: float,
) -> Trial:
    """A trial as the model describes it; `noise` is relative for the iteration time and,
    times 10 s, absolute for start-ups and gaps."""
    tau = truth.iteration_s(n, m, b) * (1 + noise * rng.standard_normal())
    startup = tuple(truth.base + truth.per_function * n + 10 * noise * rng.standard_normal()
                    for _ in range(rounds))
    gaps = tuple(truth.overhead + 10 * noise * rng.standard_normal() for _ in range(rounds - 1))
    return Trial(functions=n, memory_mb=m, local_batch=b, iterations=iterations,
                 restarts=rounds - 1, startup_s=startup, restart_gap_s=gaps,
                 iteration_mean_s=tau, measured_time_s=iterations * tau + sum(startup) + sum(gaps))


def plans(truth: Truth) -> list[TrialPlan]:
    """The design after a noise-free pilot of `truth`, at a generous budget."""
    pilot = synthetic(truth, 1, 1769, BATCH, 200, 1, np.random.default_rng(0), 0.0)
    return design(CAPACITY, pilot, batch=BATCH, budget_s=300.0, spent_s=0.0)


def trials(truth: Truth, seed: int, noise: float, repeats: int = 1) -> list[Trial]:
    """The pilot and the designed trials of `truth`, each measured `repeats` times."""
    rng = np.random.default_rng(seed)
    points = [(1, 1769, BATCH, 200, 1)] + [
        (p.functions, p.memory_mb, p.local_batch, p.iterations,
         RESTART_ROUNDS if p.purpose == "restart overhead" else 1) for p in plans(truth)]
    return [synthetic(truth, *point, rng, noise) for point in points for _ in range(repeats)]


def fit(trials_: list[Trial]) -> dict[str, tuple[float, float | None, bool]]:
    fitted = fit_trials(trials_, model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS,
                        grid=GRID)
    return {name: (e.value, e.stderr, e.identified) for name, e in fitted.estimates.items()}


def test_the_design_has_what_the_fit_needs() -> None:
    """The synthetic trials below cover every parameter: a restart trial, several n and m."""
    designed = plans(TRUTH)
    assert any(p.purpose == "restart overhead" for p in designed)
    reference = [p for p in designed if p.local_batch == BATCH]
    assert len({p.memory_mb for p in reference}) >= 3
    assert len({p.functions for p in reference}) >= 3


def test_noise_free_trials_give_the_parameters_back() -> None:
    found = fit(trials(TRUTH, seed=0, noise=0.0))
    for name, value in TRUTH.by_name().items():
        assert found[name][0] == pytest.approx(value, rel=1e-4, abs=1e-6), name
        assert found[name][2], name


@settings(max_examples=40, derandomize=True)
@given(
    slope=st.floats(5.0, 50.0), intercept=st.floats(0.0, 2000.0),
    bandwidth=st.floats(50.0, 1000.0), latency=st.floats(0.001, 0.01),
    base=st.floats(0.5, 5.0), per_function=st.floats(0.2, 2.0), overhead=st.floats(0.3, 3.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_fit_recovers_known_parameters_within_their_errors(
    slope: float, intercept: float, bandwidth: float, latency: float, base: float,
    per_function: float, overhead: float, seed: int,
) -> None:
    """Property: with 2% noise, every parameter comes back identified, with a standard error,
    within 5 standard errors of the value the trials were generated from (each design point
    measured 4 times, so the errors rest on enough spare trials to be near-normal). Not 4:
    where the exchange dwarfs the compute (bandwidth 50 MB/s, latency 8 ms) R's slope and
    intercept are nearly collinear, the linearised errors understate their spread, and one
    of these 40 × 7 checks once came out at 4.09 (slope 17, intercept 0, seed 2355).
    Except R's two: where the compute is under a tenth of an iteration even at one vCPU, 2%
    noise on the iteration leaves R(m) known to worse than ±25% (it is, below about 7%), and
    they are said not identified instead."""
    truth = Truth(slope, intercept, bandwidth, latency, base, per_function, overhead)
    found = fit(trials(truth, seed=seed, noise=0.02, repeats=4))
    share = BATCH / (slope * 1769 + intercept) / truth.iteration_s(1, 1769, BATCH)
    for name, value in truth.by_name().items():
        estimate, stderr, identified = found[name]
        if not identified:
            assert share < 0.1 and name.startswith("profile.rate."), (name, share)
            continue
        assert stderr is not None and stderr > 0, name
        assert abs(estimate - value) <= 5 * stderr, (name, estimate, value, stderr)


@pytest.mark.slow
def test_the_standard_errors_are_calibrated() -> None:
    """Over 200 noisy repetitions, ±2 standard errors cover the true value about 95% of the
    time (Student's t at the design's spare trials): errors neither too small nor too large."""
    names = list(TRUTH.by_name())
    covered = np.zeros(len(names))
    for seed in range(200):
        found = fit(trials(TRUTH, seed=seed, noise=0.02, repeats=3))
        for index, name in enumerate(names):
            estimate, stderr, _ = found[name]
            assert stderr is not None
            covered[index] += abs(estimate - TRUTH.by_name()[name]) <= 2 * stderr
    share = dict(zip(names, covered / 200, strict=True))
    assert all(0.85 <= s <= 0.995 for s in share.values()), share


def test_standard_errors_shrink_with_the_noise() -> None:
    loud, quiet = fit(trials(TRUTH, 7, 0.02)), fit(trials(TRUTH, 7, 0.002))
    for name in TRUTH.by_name():
        assert quiet[name][1] is not None and loud[name][1] is not None
        assert quiet[name][1] < loud[name][1] / 5, name


def test_a_parameter_the_trials_show_no_effect_of_is_flagged() -> None:
    """No latency at all: λ goes to its bound 0 and is said to be unidentified, not guessed."""
    found = fit(trials(replace(TRUTH, latency=0.0), seed=0, noise=0.0))
    value, stderr, identified = found["profile.latency_s"]
    assert value == pytest.approx(0.0, abs=1e-9)
    assert (stderr, identified) == (None, False)
    assert found["profile.rate.slope"][2]


def test_the_restart_overhead_without_restarts_is_flagged() -> None:
    plain = [replace(t, restarts=0, restart_gap_s=()) for t in trials(TRUTH, 0, 0.02)]
    fitted = fit_trials(plain, model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS,
                        grid=GRID)
    overhead = fitted.estimates["platform.restart_overhead_s"]
    assert (overhead.value, overhead.stderr, overhead.identified) == (0.0, None, False)
    assert "no trial restarted" in overhead.note


def test_the_per_function_bandwidth_is_never_claimed() -> None:
    fitted = fit_trials(trials(TRUTH, 0, 0.02), model_size_mb=MODEL_MB, reference_batch=BATCH,
                        bounds=BOUNDS, grid=GRID)
    limit = fitted.estimates["parameter_server.function_bandwidth_mbps"]
    assert not limit.identified
    assert limit.value == fitted.estimates["parameter_server.bandwidth_mbps"].value


def test_residuals_are_per_trial_and_only_at_the_reference_batch() -> None:
    noisy = trials(TRUTH, 3, 0.02)
    fitted = fit_trials(noisy, model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS,
                        grid=GRID)
    assert len(fitted.iteration_residuals) == len(noisy)
    for trial, residual in zip(noisy, fitted.iteration_residuals, strict=True):
        assert (residual is None) == (trial.local_batch != BATCH)
    assert all(abs(r) < 0.1 for r in fitted.iteration_residuals if r is not None)


def _reference(points: list[tuple[int, int]]) -> list[Trial]:
    rng = np.random.default_rng(0)
    return [synthetic(TRUTH, n, m, BATCH, 100, 1, rng, 0.0) for n, m in points]


@pytest.mark.parametrize("points", [
    [(1, 1769), (1, 884), (2, 884), (1, 294)],  # four trials
    [(1, 1769), (2, 1769), (4, 1769), (2, 1769), (1, 1769)],  # one memory
    [(1, 1769), (1, 884), (1, 294), (1, 589), (1, 1326)],  # one n: no exchange to fit
], ids=["four-trials", "one-memory", "one-n"])
def test_a_design_that_cannot_identify_the_model_is_one_line(
    points: list[tuple[int, int]],
) -> None:
    with pytest.raises(LaunchError) as raised:
        fit_trials(_reference(points), model_size_mb=MODEL_MB, reference_batch=BATCH,
                   bounds=BOUNDS, grid=GRID)
    message = str(raised.value)
    assert "\n" not in message
    assert "at least 5 trial runs at the reference batch 64" in message
    assert "`--budget-s`" in message


def test_trials_at_another_batch_do_not_count_towards_the_minimum() -> None:
    enough = _reference([(1, 1769), (1, 884), (2, 884), (1, 294), (4, 442)])
    fit_trials(enough, model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS, grid=GRID)
    with pytest.raises(LaunchError):
        fit_trials([*enough[:4], replace(enough[4], local_batch=2 * BATCH)],
                   model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS, grid=GRID)


@given(per_sample=st.floats(1e-5, 1e-2), per_iteration=st.floats(0.0, 0.5),
       memory=st.integers(128, 1769))
def test_the_batch_split_recovers_per_sample_and_per_iteration_seconds(
    per_sample: float, per_iteration: float, memory: int,
) -> None:
    """Property: iteration times b·u + v at two batches give u and v back (least squares)."""
    base = _reference([(1, 1769)])[0]
    split_trials = [replace(base, memory_mb=memory, local_batch=b,
                            iteration_mean_s=b * per_sample + per_iteration)
                    for b in (32, 64, 256)]
    split = _batch_split([*split_trials, replace(base, functions=2, local_batch=8)])
    assert set(split) == {f"iteration.per_sample_s@{memory}MB",
                          f"iteration.per_iteration_s@{memory}MB"}
    assert split[f"iteration.per_sample_s@{memory}MB"].value == pytest.approx(
        per_sample, rel=1e-6)
    assert split[f"iteration.per_iteration_s@{memory}MB"].value == pytest.approx(
        per_iteration, rel=1e-6, abs=1e-9)


def test_an_unidentified_split_at_the_largest_numbers_is_a_note_the_loader_takes() -> None:
    """The longest note the split writes (10,240 MB, batches 1024 and 16384, an error in the
    thousands, both trials to repeat named) is one line within `MAX_NOTE_CHARS`: a moto run
    once wrote one of 321 characters and the profile's own instance was refused."""
    base = _reference([(1, 1769)])[0]
    wild = [replace(base, memory_mb=10_240, local_batch=b, iteration_mean_s=s)
            for b, s in ((1024, 0.01), (1024, 9.0), (16384, 0.02), (16384, 0.011))]
    split = _batch_split(wild)
    assert split and not any(e.identified for e in split.values())
    for estimate in split.values():
        assert "add trials at n = 1 near 10,240 MB at batches 1024 and 16384" in estimate.note
        assert len(estimate.note) <= MAX_NOTE_CHARS, (len(estimate.note), estimate.note)


def test_the_batch_split_needs_two_batches_at_one_memory() -> None:
    one_each = [replace(t, local_batch=b) for t, b in
                zip(_reference([(1, 1769), (1, 884)]), (32, 256), strict=True)]
    assert _batch_split(one_each) == {}


def test_a_report_that_timed_nothing_is_refused() -> None:
    from lambdadnn.launcher.profile import _spec
    from lambdadnn.launcher.spec import LaunchReport, Prediction
    from lambdadnn.launcher.timings import RunTimings

    spec = _spec(TrialPlan(1, 1769, BATCH, 10, 900.0, "pilot", 0.0, False), CAPACITY)
    empty = RunTimings(startup_s=(), restart_gap_s=(), training_s=None, iterations_timed=0,
                       iteration_median_s=None, iteration_p90_s=None, compute_median_s=None,
                       exchange_median_s=None, compute_s=0.0, exchange_s=0.0)
    report = LaunchReport.of(spec, backend="local", workload="digits-cnn", iterations=10,
                             restarts=0, wall_time_s=1.0, result=None, runs_on="test",
                             prediction=Prediction(None, None, "test"), timings=empty)
    with pytest.raises(LaunchError, match="timed no iteration"):
        Trial.of(report)


def test_a_bandwidth_the_trials_cannot_see_is_not_identified() -> None:
    """An exchange far too fast to show in 2% noise (B_p = 10⁶ MB/s for a 0.4 MB model): its
    effect is within two standard errors of none, so it is flagged, with no standard error,
    rather than reported as measured (a standard error of 10¹² would not even load)."""
    hidden = replace(TRUTH, bandwidth=1e6)
    for seed in range(5):
        value, stderr, identified = fit(trials(hidden, seed=seed, noise=0.02))[
            "parameter_server.bandwidth_mbps"]
        assert not identified and stderr is None, (seed, value)
    value, stderr, identified = fit(trials(TRUTH, seed=0, noise=0.02))[
        "parameter_server.bandwidth_mbps"]
    assert identified and stderr is not None and stderr < value  # a visible one still is
