"""What the profile claims to know, and what it does about the rest.

`launcher.fit`: a parameter is identified only when what it feeds (R(m) for R's slope and
intercept) is positive and known to within the documented limit over the grid the instance is
solved on, and a parameter that is not names the trials that would identify it; Huber's loss
against a trial that a burst of load slowed. `launcher.profile`: trials under load are left
out (and too few left is one line), `--budget-s` buys the missing trials until the fit is
identified, and the console lists what is missing. Synthetic trials of tests/test_fit.py, the
fake runner of tests/test_profile.py; numpy is the oracle.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.optimize import least_squares
from scipy.stats import norm as normal
from scipy.stats import t as student_t

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.fit import (
    _HUBER_SCALE,
    _MAX_RELATIVE_SE,
    Grid,
    Point,
    Trial,
    _covariance,
    _huber_scale,
    _judged,
    _no_error,
    _robust_covariance,
    fit_trials,
)
from lambdadnn.launcher.profile import _top_memory, profile_workload
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec
from lambdadnn.solver.fit_uncertainty import RUN_SPREAD
from lambdadnn.solver.instance import MAX_FIT_NUMBER, MAX_NOTE_CHARS
from lambdadnn.solver.instance_yaml import load_instance
from tests.test_fit import BATCH, BOUNDS, CAPACITY, GRID, MODEL_MB, TRUTH, Truth, trials
from tests.test_profile import SIZES, fake_runner

RATE = ("profile.rate.slope", "profile.rate.intercept")
GRID_MB = np.arange(GRID.memory_mb[0], GRID.memory_mb[1] + 1, dtype=float)
# The exchange dwarfs the compute (7% of an iteration at one vCPU): at 2% noise the first pass
# leaves R(m) known to worse than ±25%, more trials at the points the fit names do not.
DWARFED = replace(TRUTH, bandwidth=40.0)


def fitted(trials_: list[Trial], grid: Grid = GRID) -> Any:
    return fit_trials(trials_, model_size_mb=MODEL_MB, reference_batch=BATCH, bounds=BOUNDS,
                      grid=grid)


def assert_sensible(estimates: dict[str, Any]) -> None:
    """What a planner may rely on: an identified parameter has a finite standard error, one
    that is not has none; every note is one line the loader takes."""
    for name, estimate in estimates.items():
        assert (estimate.stderr is not None) == estimate.identified, name
        assert estimate.stderr is None or math.isfinite(estimate.stderr), name
        assert len(estimate.note) <= MAX_NOTE_CHARS and "\n" not in estimate.note, name


# -- identification ---------------------------------------------------------------------------


def test_a_loaded_machines_degenerate_fit_is_not_identified() -> None:
    """On a loaded machine every trial is as slow whatever its memory: the iteration time
    shows no R(m). The old fit called R's intercept identified at 2.17e3 ± 3.18e6 samples/s
    from these very trials (the issue's −9.99998e6 ± 3.2e9 had the same cause); now neither
    of R's parameters is, they carry no standard error, and the notes name the trials that
    would tell R(m): one function at both ends of the grid and between."""
    rng = np.random.default_rng(0)
    loaded = [replace(t, iteration_mean_s=(0.03 + 0.004 * t.functions) * t.local_batch / BATCH
                      * (1 + 0.03 * rng.standard_normal()))
              for t in trials(TRUTH, seed=0, noise=0.0)]
    fit = fitted(loaded)
    for name in RATE:
        estimate = fit.estimates[name]
        assert not estimate.identified and estimate.stderr is None, (name, estimate)
        assert estimate.note.endswith("add trials at n = 1 near 442, 884 and 1,769 MB"), \
            estimate.note
    assert fit.missing[:3] == (Point(1, 442), Point(1, 884), Point(1, 1769))
    assert_sensible(fit.estimates)


@pytest.mark.parametrize(("lowest", "identified", "reason"), [
    (442, True, None),
    (128, False, "R(m) has a relative standard error of 41.2% at 128 MB (the limit is 25%)"),
    (20, False, "R(m) is not positive at 20 MB"),
], ids=["measured-grid", "extrapolated-too-far", "negative-below"])
def test_r_is_judged_over_the_whole_grid(
    lowest: int, identified: bool, reason: str | None,
) -> None:
    """The same trials (442–1,769 MB, 2% noise): R(m) known to ±14% where they ran, but not
    extrapolated to 128 MB (±41%), and not positive at 20 MB. The verdict follows the grid the
    instance is solved on, not only the trial memories; numpy recomputes R(m)'s error."""
    fit = fitted(trials(TRUTH, seed=0, noise=0.02), replace(GRID, memory_mb=(lowest, 1769)))
    for name in RATE:
        estimate = fit.estimates[name]
        assert estimate.identified == identified, (name, estimate.note)
        if reason is not None:
            assert f"not identified: {reason}; add trials at n = 1 near {lowest}, " \
                in estimate.note
    assert_sensible(fit.estimates)
    if identified:  # the oracle: R(m)'s relative error from the two errors and ρ in the note
        slope, intercept = (fit.estimates[name] for name in RATE)
        rho = float(slope.note.rsplit("ρ = ", 1)[1])
        memory = np.arange(lowest, 1770, dtype=float)
        spread = np.sqrt((memory * slope.stderr) ** 2 + intercept.stderr**2
                         + 2 * rho * memory * slope.stderr * intercept.stderr)
        worst = float(np.max(spread / (slope.value * memory + intercept.value)))
        assert worst <= _MAX_RELATIVE_SE
        assert f"R(m) known to ±{worst:.1%} at worst" in slope.note


def test_r_not_positive_below_the_trials_is_not_identified() -> None:
    """R(m) = 20·m − 8,000 is positive at every trial memory (≥ 442 MB, noise-free) but not
    below 400 MB: on a grid from 442 MB it is identified, on one from 300 MB it is not, and
    the note asks for a trial at 300 MB."""
    negative = replace(TRUTH, intercept=-8000.0)
    measured = trials(negative, seed=0, noise=0.0)
    assert fitted(measured).estimates[RATE[0]].identified
    fit = fitted(measured, replace(GRID, memory_mb=(300, 1769)))
    for name in RATE:
        estimate = fit.estimates[name]
        assert not estimate.identified
        assert "R(m) is not positive at 300 MB; add trials at n = 1 near 300, " in estimate.note
    assert Point(1, 300) in fit.missing


def test_an_identified_fit_claims_every_parameter_with_a_finite_error() -> None:
    """The other side: the design's trials at 2% noise identify all the model's parameters
    (none missing), each with a finite standard error."""
    fit = fitted(trials(TRUTH, seed=0, noise=0.02))
    assert fit.missing == ()
    assert all(fit.estimates[name].identified for name in TRUTH.by_name())
    assert_sensible(fit.estimates)


# -- Huber's loss -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_a_wild_trial_moves_the_huber_fit_little_and_least_squares_far(seed: int) -> None:
    """A burst of load triples the pilot's iteration time (1% noise elsewhere). With Huber's
    loss R(m) stays within 20% of the truth everywhere on the grid and B_p within 5%; plain
    least squares on the same relative residuals (scipy's default loss, started at the truth)
    is off by more than 100% somewhere. Numpy computes R(m) and the misses."""
    measured = trials(TRUTH, seed=seed, noise=0.01)
    assert (measured[0].functions, measured[0].memory_mb) == (1, 1769)  # the pilot
    measured[0] = replace(measured[0], iteration_mean_s=3 * measured[0].iteration_mean_s)
    truth_rate = TRUTH.slope * GRID_MB + TRUTH.intercept

    estimates = fitted(measured).estimates
    huber = estimates[RATE[0]].value * GRID_MB + estimates[RATE[1]].value
    assert np.max(np.abs(huber / truth_rate - 1)) < 0.2
    assert estimates["parameter_server.bandwidth_mbps"].value == pytest.approx(
        TRUTH.bandwidth, rel=0.05)

    reference = [t for t in measured if t.local_batch == BATCH]
    n, m, b, tau = (np.array([getattr(t, f) for t in reference], dtype=float) for f in
                    ("functions", "memory_mb", "local_batch", "iteration_mean_s"))

    def misses(p: np.ndarray) -> np.ndarray:
        return (b / (p[0] * m + p[1]) + 2 * (MODEL_MB * n / p[2] + p[3]) - tau) / tau

    plain = least_squares(misses, [TRUTH.slope, TRUTH.intercept, TRUTH.bandwidth,
                                   TRUTH.latency],
                          bounds=([0, -1e9, 1e-9, 0], [1e9, 1e9, 1e9, 1]), x_scale="jac").x
    assert np.max(np.abs((plain[0] * GRID_MB + plain[1]) / truth_rate - 1)) > 1.0


def test_the_robust_covariance_is_least_squares_inside_the_scale() -> None:
    """With every residual inside Huber's scale, ψ(r) = r and mean ψ' = 1: the covariance is
    least squares' σ²·(JᵀJ)⁻¹ with σ² = Σr²/(n − p), widened by (t/z)² at 97.5% for the 9
    spare trials. One residual beyond the scale counts as the scale itself, with its Huber
    correction: numpy computes both."""
    rng = np.random.default_rng(3)
    jacobian = rng.standard_normal((12, 3))
    inside = rng.uniform(-0.8, 0.8, 12) * _HUBER_SCALE
    widening = (student_t.ppf(0.975, 9) / normal.ppf(0.975)) ** 2
    assert widening == pytest.approx((2.262157 / 1.959964) ** 2)
    expected = _covariance(jacobian, float(inside @ inside) / 9 * widening)
    np.testing.assert_allclose(_robust_covariance(inside, jacobian, _HUBER_SCALE), expected,
                               rtol=1e-12)

    outside = inside.copy()
    outside[0] = 10 * _HUBER_SCALE
    psi = np.clip(outside, -_HUBER_SCALE, _HUBER_SCALE)
    share = 11 / 12
    correction = 1 + 3 / 12 * (1 - share) / share
    np.testing.assert_allclose(
        _robust_covariance(outside, jacobian, _HUBER_SCALE),
        _covariance(jacobian, correction**2 * float(psi @ psi) / 9 / share**2 * widening),
        rtol=1e-12)


def test_too_few_residuals_inside_the_scale_give_no_error() -> None:
    """Four parameters and four trials inside the scale: their spread cannot be told, and the
    note says so (not "too few spare trials": there are four)."""
    jacobian = np.random.default_rng(0).standard_normal((8, 4))
    residuals = np.array([0.01, -0.01, 0.02, 0.0, 1.0, -1.0, 2.0, 3.0])
    assert _robust_covariance(residuals, jacobian, _HUBER_SCALE) is None
    assert _no_error(residuals, 4, _HUBER_SCALE) == (
        "only 4 of 8 trials are within 5% of the fit, too few to estimate its error from")


@pytest.mark.parametrize("spread", [0.02, 0.05, 0.15, 0.3])
def test_huber_turns_at_the_trials_own_spread(spread: float) -> None:
    """Property: on normal relative misses of sd `spread` (2,000 of them, numpy), the loss turns
    at 1.345 σ, never below `_HUBER_SCALE`; a machine whose runs repeat to ±15% keeps most
    trials inside the scale, so the error of the fit can be estimated."""
    residuals = np.random.default_rng(7).normal(0.0, spread, 2000)
    scale = _huber_scale(residuals)
    assert scale == pytest.approx(max(_HUBER_SCALE, 1.345 * spread), rel=0.1)
    assert np.mean(np.abs(residuals) <= scale) > 0.75


@pytest.mark.parametrize(("seed", "repeats"), [(s, r) for s in range(3) for r in (1, 2)])
def test_a_noisy_machines_fit_has_an_error_to_judge_by(seed: int, repeats: int) -> None:
    """At 20% noise a fixed 5% scale left too few trials inside it to estimate any error (2 of
    these 6); scaled to the trials' spread, R(m)'s error is estimated, and judged: not within
    ±25% over the grid, so the note names the trials, and says why in numbers."""
    fit = fitted(trials(TRUTH, seed=seed, noise=0.2, repeats=repeats))
    slope = fit.estimates[RATE[0]]
    assert "R(m) has a relative standard error of" in slope.note, slope.note
    assert_sensible(fit.estimates)


# -- the profile: load, and the budget spent on what is missing --------------------------------


def profile(
    monkeypatch: pytest.MonkeyPatch, truth: Truth, *, noise: float, budget_s: float,
    loads: Any = None, max_load: float | None = None, seed: int = 1,
) -> tuple[dict[str, Any], list[LaunchSpec]]:
    """A profile with the fake runner; `loads(call)` gives the load average at each call
    (two per trial: before and after), by default an idle 0."""
    calls = iter(range(10**6))
    monkeypatch.setattr("lambdadnn.launcher.profile.workload_sizes", lambda *_: dict(SIZES))
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average",
                        lambda: 0.0 if loads is None else loads(next(calls)))
    ran: list[LaunchSpec] = []
    mapping = profile_workload("digits-cnn", CAPACITY, fake_runner(truth, noise, seed, ran),
                               budget_s=budget_s, max_load=max_load)
    return mapping, ran


def test_a_trial_under_load_is_recorded_flagged_and_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fourth trial ends with the load average at 5 (`max_load` 2) and took 4× as long:
    its run records the load before and after it and why it is left out, it has no residual,
    and the fit recovers the truth as if it had not run. The others record an idle 0."""
    runner = fake_runner(TRUTH, 0.01, 1, [])

    def slowed(spec: LaunchSpec, timeout_s: float) -> LaunchReport:
        report = runner(spec, timeout_s)
        slowed.count += 1  # type: ignore[attr-defined]
        if slowed.count == 4:  # type: ignore[attr-defined]
            return replace(report, compute_s=4 * report.compute_s,
                           exchange_s=4 * report.exchange_s)
        return report

    slowed.count = 0  # type: ignore[attr-defined]
    monkeypatch.setattr("lambdadnn.launcher.profile.workload_sizes", lambda *_: dict(SIZES))
    calls = iter(range(10**6))
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average",
                        lambda: 5.0 if next(calls) == 7 else 0.0)  # after trial 4
    mapping = profile_workload("digits-cnn", CAPACITY, slowed, budget_s=300.0, max_load=2.0)
    runs = mapping["fit"]["runs"]
    assert (runs[3]["load_before"], runs[3]["load_after"]) == (0.0, 5.0)
    assert runs[3]["left_out"] == "1-minute load average 5.00 above 2"
    assert runs[3]["iteration_residual"] is None
    assert all(run["left_out"] is None and run["load_after"] == 0.0
               for index, run in enumerate(runs) if index != 3)
    parameters = mapping["fit"]["parameters"]
    for name, value in TRUTH.by_name().items():
        entry = parameters[name]
        assert entry["identified"] and abs(entry["value"] - value) <= 4 * entry["stderr"], name
    load_instance(mapping)


def test_without_the_load_check_the_slowed_trial_would_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check is what leaves it out: under a `max_load` above the load, the same trial
    stays in the fit, with its residual."""
    mapping, _ = profile(monkeypatch, TRUTH, noise=0.01, budget_s=300.0, max_load=6.0,
                         loads=lambda call: 5.0 if call == 7 else 0.0)
    assert mapping["fit"]["runs"][3]["left_out"] is None
    assert mapping["fit"]["runs"][3]["iteration_residual"] is not None


def test_too_few_trials_left_by_the_load_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial under load: the ones left out are run again while the budget lasts, then
    the profile fails in one line naming the load, the limit and the fix."""
    with pytest.raises(LaunchError) as raised:
        profile(monkeypatch, TRUTH, noise=0.01, budget_s=60.0, max_load=2.0,
                loads=lambda _call: 3.5)
    message = str(raised.value)
    assert "\n" not in message
    assert "above `--max-load` 2 (up to 3.50) and were left out of the fit" in message
    assert message.endswith("profile on an idle machine")


def test_an_aws_profile_leaves_no_trial_out_for_the_local_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load of the machine the launcher runs on says nothing of Lambda's functions: it is
    recorded, and no trial is left out for it."""
    monkeypatch.setattr("lambdadnn.launcher.profile.workload_sizes", lambda *_: dict(SIZES))
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average", lambda: 50.0)
    mapping = profile_workload("digits-cnn", replace(CAPACITY, backend="aws"),
                               fake_runner(TRUTH, 0.01, 1, []), budget_s=120.0, max_load=2.0)
    assert all(run["left_out"] is None and run["load_before"] == 50.0
               for run in mapping["fit"]["runs"])


def test_nothing_missing_adds_no_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the first pass identifies everything, the budget buys the design's repeats, as
    before, and no trial to identify anything."""
    mapping, ran = profile(monkeypatch, TRUTH, noise=0.01, budget_s=300.0)
    purposes = [run["purpose"] for run in mapping["fit"]["runs"]]
    assert "identification" not in purposes and len(ran) == 20


def test_the_budget_buys_the_missing_trials_until_the_fit_is_identified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exchange dwarfs the compute: after the first pass R(m) is not identified. A budget
    of 1 hour adds the trials its note names (one function at 442, 884 and 1,769 MB), round
    after round, until it is, and then stops, far inside the budget; 200 s add some and run out
    with R still not identified; every trial stays within the budget's estimate."""
    top = _top_memory(CAPACITY)
    wanted = {(1, top // 4), (1, round(math.sqrt(top // 4 * top))), (1, top)}

    def extension(mapping: dict[str, Any]) -> list[tuple[int, int]]:
        return [(run["functions"], run["memory_mb"]) for run in mapping["fit"]["runs"]
                if run["purpose"] == "identification"]

    long, _ = profile(monkeypatch, DWARFED, noise=0.02, budget_s=3600.0)
    added = extension(long)
    assert added and set(added) == wanted
    assert all(long["fit"]["parameters"][name]["identified"] for name in RATE)
    trained = sum(run["measured_time_s"] for run in long["fit"]["runs"])
    assert trained < 3600 / 3  # stopped when identified, not when the budget ran out

    short, _ = profile(monkeypatch, DWARFED, noise=0.02, budget_s=200.0)
    assert 0 < len(extension(short)) < len(added)
    assert not any(short["fit"]["parameters"][name]["identified"] for name in RATE)
    assert "add trials at n = 1 near 442, 884 and 1,769 MB" in (
        short["fit"]["parameters"][RATE[0]]["note"])


def test_the_first_pass_alone_would_leave_r_unidentified(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the extension is for: the same profile at a budget that only buys the first pass
    (and its essential trials) ends with R not identified and no trial added."""
    mapping, _ = profile(monkeypatch, DWARFED, noise=0.02, budget_s=30.0)
    assert not any(mapping["fit"]["parameters"][name]["identified"] for name in RATE)
    assert all(run["purpose"] != "identification" for run in mapping["fit"]["runs"])


# -- the console -------------------------------------------------------------------------------


@pytest.fixture
def fake_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --backend local` on the fake runner and capacity, at an idle load (the
    workload's factory still runs once, as it does before every profile)."""
    monkeypatch.setattr("lambdadnn.launcher.profile.workload_sizes", lambda *_: dict(SIZES))
    monkeypatch.setattr("lambdadnn.launcher.local.local_capacity", lambda **_: CAPACITY)
    monkeypatch.setattr("lambdadnn.launcher.local.local_runner",
                        lambda **_: fake_runner(DWARFED, 0.02, 1, []))


@pytest.mark.real
def test_the_console_lists_what_would_identify_the_rest(
    fake_local: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average", lambda: 0.0)
    result = CliRunner().invoke(main, ["profile", "--budget-s", "30",
                                       "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 0, result.output
    listed = result.stdout.split("Not identified, and what would identify it", 1)[1]
    assert "profile.rate.slope: R(m) = slope·m + intercept" in listed
    assert "add trials at n = 1 near 442, 884 and 1,769 MB" in listed


@pytest.mark.real
def test_the_console_marks_a_trial_left_out(
    fake_local: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    calls = iter(range(10**6))
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average",
                        lambda: 9.0 if next(calls) == 3 else 0.0)  # after the second trial
    result = CliRunner().invoke(main, ["profile", "--budget-s", "120", "--max-load", "4",
                                       "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 0, result.output
    marked = [line for line in result.stdout.splitlines() if "left out:" in line]
    assert len(marked) == 1 and marked[0].endswith("left out: 1-minute load average 9.00 above 4")


@pytest.mark.real
def test_the_cli_refuses_a_profile_under_load_in_one_line(
    fake_local: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average", lambda: 7.25)
    result = CliRunner().invoke(main, ["profile", "--budget-s", "30", "--max-load", "3",
                                       "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "`--max-load` 3 (up to 7.25)" in result.stderr
    assert "profile on an idle machine" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_wholly_loaded_machine_is_flagged_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trial under load and no `--max-load` given (a CI runner): the trials are kept,
    each flagged `under_load` with its load, and the fit is made; a given `--max-load` refuses
    the same trials (the test above)."""
    mapping, _ran = profile(monkeypatch, TRUTH, noise=0.01, budget_s=60.0,
                            loads=lambda _call: 3.5)
    runs = mapping["fit"]["runs"]
    assert runs and all(run["left_out"] is None for run in runs)
    assert all(run["under_load"].startswith("1-minute load average 3.50 above") for run in runs)


# -- the trials' spread about the fit -----------------------------------------------------------


@pytest.mark.parametrize("noise", [0.05, 0.1, 0.2])
def test_the_run_spread_is_the_trials_own_noise(noise: float) -> None:
    """Property: trials whose iteration times carry relative noise of sd `noise` give the
    fit's `iteration.run_spread` (σ of ln(measured / fitted)) about that noise: over 8 seeds
    its mean within 15%, every seed within a factor of 2. It is what a guaranteed plan of the
    profile stretches its iteration time by (tests/test_fit_guarantee.py)."""
    found = [fitted(trials(TRUTH, seed=seed, noise=noise, repeats=2)).estimates[RUN_SPREAD]
             for seed in range(8)]
    values = np.array([e.value for e in found])
    assert all(e.identified and e.stderr is not None and e.stderr > 0 for e in found)
    assert values.mean() == pytest.approx(noise, rel=0.15)
    assert np.all((values > noise / 2) & (values < noise * 2)), values
    assert_sensible({RUN_SPREAD: found[0]})


def test_noise_free_trials_have_no_spread_and_an_unreplicated_design_none_known() -> None:
    """Noise-free trials land on the fit: σ = 0, a guaranteed plan unchanged by it. With no
    more trials than the fit's parameters and two, the spread is not identified."""
    assert fitted(trials(TRUTH, seed=0, noise=0.0)).estimates[RUN_SPREAD].value == pytest.approx(
        0.0, abs=1e-9)
    few = [t for t in trials(TRUTH, seed=0, noise=0.05) if t.local_batch == BATCH][:5]
    spread = fitted(few).estimates[RUN_SPREAD]
    assert not spread.identified and "fewer than 2 spare trials" in spread.note


def test_the_fit_records_the_correlation_of_rs_errors_only_when_both_are_identified() -> None:
    """`rate_correlation` is the ρ the notes give (slope and intercept trade off: negative),
    and None when R is not identified: a plan then takes the worst correlation."""
    fit = fitted(trials(TRUTH, seed=0, noise=0.02))
    assert fit.rate_correlation is not None and -1 <= fit.rate_correlation < 0
    note = fit.estimates[RATE[0]].note
    assert float(note.rsplit("ρ = ", 1)[1]) == pytest.approx(fit.rate_correlation, abs=5e-5)
    rng = np.random.default_rng(0)
    loaded = [replace(t, iteration_mean_s=(0.03 + 0.004 * t.functions) * t.local_batch / BATCH
                      * (1 + 0.03 * rng.standard_normal()))
              for t in trials(TRUTH, seed=0, noise=0.0)]
    assert fitted(loaded).rate_correlation is None


@pytest.mark.parametrize("stderr", [3.4e13, math.inf, math.nan])
def test_a_parameter_known_only_with_another_is_not_identified(stderr: float) -> None:
    """What two parameters feed may be known while each alone is not (they trade off): an AWS
    profile on a loaded machine gave one a standard error of 3.4e13, which the loader refuses,
    so the profile it had just measured would not load. Such a parameter is not identified,
    its note says why and names the trials, and it is written with no standard error; its
    partner, known alone, stays identified; an error the loader takes is kept."""
    needs = (Point(1, 442),)
    estimates = _judged(("a", "b"), np.array([0.002, 300.0]), [stderr, 10.0], "the exchange",
                        (0.1, "n = 1"), needs, "per exchange")
    alone, partner = estimates["a"], estimates["b"]
    assert not alone.identified and alone.to_dict()["stderr"] is None
    why = ("is not finite" if not math.isfinite(stderr)
           else "its own standard error, 3.4e+13, is beyond 1e+12")
    assert why in alone.note and alone.note.endswith("add a trial at n = 1 near 442 MB")
    assert alone.needs == needs
    assert partner.identified and partner.stderr == 10.0
    kept = _judged(("a",), np.array([0.002]), [MAX_FIT_NUMBER], "the exchange",
                   (0.1, "n = 1"), needs, "per exchange")["a"]
    assert kept.identified and kept.stderr == MAX_FIT_NUMBER
    assert_sensible(estimates)
