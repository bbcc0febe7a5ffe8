"""`lambdadnn profile`: the design, the instance it writes (with a fake runner that reports
runs synthesised from known parameters), the CLI's refusals, one short real profile, and a
profile stopped by a signal."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.launcher import LaunchError
from lambdadnn.launcher.fit import Trial
from lambdadnn.launcher.profile import (
    INVOCATION_S,
    TrialPlan,
    _spec,
    _top_memory,
    design,
    profile_workload,
)
from lambdadnn.launcher.spec import LaunchReport, LaunchSpec, Prediction, default_margin
from lambdadnn.launcher.timings import RunTimings
from lambdadnn.solver.instance import MB_PER_VCPU, instance_mapping
from lambdadnn.solver.instance_yaml import load_instance
from lambdadnn.solver.prediction import predict_run
from tests.hang_guard import HANG_GUARD_S
from tests.processes import alive, cmdline, descendants
from tests.test_fit import BATCH, CAPACITY, MODEL_MB, TRUTH, Truth, synthetic

pytestmark = pytest.mark.real  # torch (the profiler loads the workload), real profiles

LAMBDADNN = str(Path(sys.executable).parent / "lambdadnn")
SIZES = {"model_size_mb": MODEL_MB, "dataset_size_mb": 14.0, "samples": 1437}


def pilot(truth: Truth = TRUTH) -> Trial:
    return synthetic(truth, 1, 1769, BATCH, 200, 1, np.random.default_rng(0), 0.0)


def estimated_cost(plan: TrialPlan, startup: float, guess: float) -> float:
    rounds = 3 if plan.timeout_s < INVOCATION_S else 1
    return rounds * startup * (0.6 + 0.4 * plan.functions) + plan.iterations * guess + 1.0


# -- design -----------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [40.0, 60.0, 120.0, 300.0, 3600.0])
def test_the_design_respects_capacity_and_iteration_bounds(budget: float) -> None:
    plans = design(CAPACITY, pilot(), batch=BATCH, budget_s=budget, spent_s=5.0)
    assert plans
    for plan in plans:
        assert plan.functions <= CAPACITY.max_functions
        assert 128 <= plan.memory_mb <= CAPACITY.max_memory_mb
        assert plan.functions * plan.memory_mb <= (CAPACITY.max_vcpu or 0) * MB_PER_VCPU
        assert 20 <= plan.iterations <= 20_000
        assert plan.local_batch in (BATCH, 4 * BATCH)


def test_the_restart_trial_declares_its_rounds() -> None:
    """The restart trial's launch declares the restarts it is designed for (the others none),
    so AWS's bound on re-invocations (3 × the plan's rounds) leaves room for a machine slower
    than the pilot: with 0 declared it gave up after a fourth round under load."""
    plans = design(CAPACITY, pilot(), batch=BATCH, budget_s=300.0, spent_s=5.0)
    declared = {plan.purpose: _spec(plan, CAPACITY).restarts for plan in plans}
    assert declared.pop("restart overhead") == 2
    assert set(declared.values()) == {0}


def test_a_bigger_budget_buys_more_or_longer_trials() -> None:
    small = design(CAPACITY, pilot(), batch=BATCH, budget_s=40.0, spent_s=5.0)
    large = design(CAPACITY, pilot(), batch=BATCH, budget_s=300.0, spent_s=5.0)
    assert len(large) > len(small)
    assert sum(p.iterations for p in large) > sum(p.iterations for p in small)


@pytest.mark.parametrize("budget", [40.0, 60.0, 120.0, 300.0])
def test_the_design_stays_within_the_budget(budget: float) -> None:
    """The seconds the design expects its trials to take, from the pilot's iteration time
    scaled by CPU share and the pilot's start-up, fit in what is left of the budget."""
    first = pilot()
    startup = first.startup_s[0]
    total = 0.0
    for plan in design(CAPACITY, first, batch=BATCH, budget_s=budget, spent_s=10.0):
        share = MB_PER_VCPU / min(plan.memory_mb, MB_PER_VCPU)
        guess = first.iteration_mean_s * share * plan.local_batch / BATCH * (
            1 + 0.1 * (plan.functions - 1))
        total += estimated_cost(plan, startup, guess)
    assert total <= budget - 10.0


@pytest.mark.parametrize("startup_s", [1.0, 8.0, 30.0])
def test_a_small_budget_still_gives_a_design_the_fit_can_use(startup_s: float) -> None:
    """Even when a slow pilot leaves no room for them in a 40 s budget, the trials the fit
    needs at least run: a profile that overruns beats one that cannot be fitted."""
    slow = replace(pilot(), startup_s=(startup_s,))
    plans = design(CAPACITY, slow, batch=BATCH, budget_s=40.0, spent_s=8.0 + startup_s)
    reference = [(1, _top_memory(CAPACITY))] + [
        (p.functions, p.memory_mb) for p in plans if p.local_batch == BATCH]
    assert len(reference) >= 5
    assert len({m for _, m in reference}) >= 2 and len({n for n, _ in reference}) >= 2


def test_the_restart_trial_runs_three_rounds_by_the_model() -> None:
    """If the pilot's estimate holds, the model splits the restart trial into 3 rounds at its
    invocation limit (less the workers' checkpoint margin)."""
    plans = design(CAPACITY, pilot(), batch=BATCH, budget_s=300.0, spent_s=5.0)
    restart = [p for p in plans if p.purpose == "restart overhead"]
    assert len(restart) == 1
    plan = restart[0]
    share = MB_PER_VCPU / plan.memory_mb
    guess = pilot().iteration_mean_s * share * (1 + 0.1 * (plan.functions - 1))
    instance = load_instance({
        "name": "guess", "platform": "aws-lambda-x86_64",
        "workload": {"model_size_mb": 1e-9, "dataset_size_mb": 1e-9, "samples": 10**6,
                     "epochs": 1, "local_batch": BATCH, "max_global_batch": 10**6},
        "profile": {"rate": {"slope": 0.0, "intercept": BATCH / guess},
                    "storage_bandwidth": {"slope": 0.0, "intercept": 1e6, "max_mbps": 1e6}},
        "parameter_server": {"bandwidth_mbps": 1e7, "function_bandwidth_mbps": 1e7,
                             "price_per_hour": 0.0},
        "objective": {"deadline_s": 100.0},
    })
    run = predict_run(instance, functions=plan.functions, memory_mb=plan.memory_mb,
                      local_batch=plan.local_batch, iterations=plan.iterations,
                      timeout_s=plan.timeout_s, timeout_margin_s=default_margin(plan.timeout_s))
    assert run.restarts == 2
    assert all(p.timeout_s == INVOCATION_S for p in plans if p is not plan)


def test_a_capacity_of_few_functions_or_little_memory_is_respected() -> None:
    from dataclasses import replace

    narrow = replace(CAPACITY, max_functions=2, max_vcpu=None, max_memory_mb=600)
    first = pilot()
    plans = design(narrow, first, batch=BATCH, budget_s=300.0, spent_s=0.0)
    assert plans and all(p.functions <= 2 and 128 <= p.memory_mb <= 600 for p in plans)


# -- profile_workload with a fake runner --------------------------------------------------------


def fake_runner(truth: Truth, noise: float, seed: int, ran: list[LaunchSpec]) -> Any:
    """Reports of runs that follow `truth`, rounds split at the invocation limit as the
    launcher splits them."""
    rng = np.random.default_rng(seed)

    def run(spec: LaunchSpec, timeout_s: float) -> LaunchReport:
        ran.append(spec)
        tau = truth.iteration_s(spec.functions, spec.memory_mb, spec.local_batch)
        rounds = max(1, math.ceil(spec.iterations * tau / (timeout_s - default_margin(timeout_s))))
        trial = synthetic(truth, spec.functions, spec.memory_mb, spec.local_batch,
                          spec.iterations, rounds, rng, noise)
        compute = spec.iterations * trial.iteration_mean_s * 0.6
        timings = RunTimings(
            startup_s=trial.startup_s, restart_gap_s=trial.restart_gap_s,
            training_s=trial.measured_time_s, iterations_timed=spec.iterations,
            iteration_median_s=trial.iteration_mean_s, iteration_p90_s=trial.iteration_mean_s,
            compute_median_s=None, exchange_median_s=None, compute_s=compute,
            exchange_s=spec.iterations * trial.iteration_mean_s - compute)
        return LaunchReport.of(
            spec, backend="local", workload="digits-cnn", iterations=spec.iterations,
            restarts=rounds - 1, wall_time_s=trial.measured_time_s + 1, result=None,
            runs_on="fake", prediction=Prediction(None, None, "fake"), timings=timings)

    return run


@pytest.fixture
def idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake runner's workload sizes, and an idle machine (a load average of 0): the load of
    the machine running the tests must not leave the fake trials out."""
    monkeypatch.setattr("lambdadnn.launcher.profile.workload_sizes", lambda *_: dict(SIZES))
    monkeypatch.setattr("lambdadnn.launcher.profile._load_average", lambda: 0.0)


@pytest.fixture
def profiled(idle: None) -> tuple[dict[str, Any], list[LaunchSpec]]:
    ran: list[LaunchSpec] = []
    steps: list[tuple[int, int, str]] = []
    mapping = profile_workload("digits-cnn", CAPACITY, fake_runner(TRUTH, 0.01, 1, ran),
                               budget_s=300.0, progress=lambda *step: steps.append(step))
    assert steps[0] == (0, 1, "pilot") and steps[-1][2] == "fit"
    return mapping, ran


def test_the_profile_round_trips_through_the_loader(
    profiled: tuple[dict[str, Any], list[LaunchSpec]],
) -> None:
    mapping, _ = profiled
    again = yaml.safe_load(yaml.safe_dump(mapping, sort_keys=False))
    assert instance_mapping(load_instance(again)) == mapping


def test_the_profile_recovers_the_known_parameters(
    profiled: tuple[dict[str, Any], list[LaunchSpec]],
) -> None:
    mapping, _ = profiled
    parameters = mapping["fit"]["parameters"]
    for name, value in TRUTH.by_name().items():
        entry = parameters[name]
        assert entry["identified"] and entry["stderr"] is not None, name
        assert abs(entry["value"] - value) <= 4 * entry["stderr"], (name, entry, value)
    profile = mapping["profile"]
    assert profile["latency_s"] == parameters["profile.latency_s"]["value"]
    assert profile["startup"]["base_s"] == parameters["profile.startup.base_s"]["value"]
    assert mapping["platform"]["restart_overhead_s"] == (
        parameters["platform.restart_overhead_s"]["value"])
    assert not parameters["profile.storage_bandwidth.max_mbps"]["identified"]


def test_the_fit_section_lists_every_trial(
    profiled: tuple[dict[str, Any], list[LaunchSpec]],
) -> None:
    mapping, ran = profiled
    fit = mapping["fit"]
    assert (fit["workload"], fit["backend"], fit["cost_usd"]) == ("digits-cnn", "local", 0.0)
    assert 0 <= fit["seconds"] < 60
    assert len(fit["runs"]) == len(ran) >= 6
    for run, spec in zip(fit["runs"], ran, strict=True):
        assert (run["functions"], run["memory_mb"], run["iterations"]) == (
            spec.functions, spec.memory_mb, spec.iterations)
        assert run["error"] == pytest.approx(
            (run["measured_time_s"] - run["predicted_time_s"]) / run["predicted_time_s"],
            abs=1e-3)
        assert abs(run["error"]) < 0.1  # 1% noise: the fitted model predicts its own trials
    assert any(run["restarts"] >= 1 for run in fit["runs"])


def test_a_plan_solved_from_the_profile_fits_the_machine(
    profiled: tuple[dict[str, Any], list[LaunchSpec]],
) -> None:
    from lambdadnn import solve

    mapping, _ = profiled
    instance = load_instance(mapping)
    for deadline in (30.0, 120.0, 600.0):
        plan = solve(load_instance({**mapping, "objective": {"deadline_s": deadline}}))
        if plan.status == "optimal":
            assert plan.functions * plan.memory_mb <= (CAPACITY.max_vcpu or 0) * MB_PER_VCPU
    assert instance.platform.max_vcpu == CAPACITY.max_vcpu


# -- the CLI ----------------------------------------------------------------------------------


def test_out_in_a_missing_folder_is_one_line_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("lambdadnn.launcher.profile.profile_workload",
                        lambda *a, **k: pytest.fail("profiled"))
    result = CliRunner().invoke(main, ["profile", "--out", str(tmp_path / "no" / "x.yaml")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "`--out`" in result.stderr
    assert not (tmp_path / "no").exists()


def test_a_bad_workload_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["profile", "--workload", "no-such-net",
                                       "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "no-such-net" in result.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_short_real_profile(tmp_path: Path) -> None:
    """The digits MLP profiled for real on this machine with a 40 s budget. The machine running
    the tests may be loaded: `--max-load` keeps every trial in (leaving trials out under load
    is tested with the fake runner, tests/test_fit_identified.py); the load is recorded."""
    out = tmp_path / "mlp.yaml"
    done = subprocess.run(
        [LAMBDADNN, "profile", "--workload", "digits-mlp", "--budget-s", "40", "--out", str(out),
         "--max-load", "1000000", "--json"], capture_output=True, text=True,
        timeout=HANG_GUARD_S,
        check=False)
    assert done.returncode == 0, done.stderr
    mapping = yaml.safe_load(out.read_text())
    assert json.loads(done.stdout)["fit"] == mapping["fit"]
    assert load_instance(mapping).fit is not None
    # The budget itself is checked on the design (test_the_design_stays_within_the_budget):
    # the seconds measured here grow with the machine's load, so they are only recorded.
    assert mapping["fit"]["seconds"] > 0
    assert len(mapping["fit"]["runs"]) >= 5
    assert all(math.isfinite(run["error"]) for run in mapping["fit"]["runs"])
    assert all(run["load_before"] >= 0 and run["load_after"] >= 0 and run["left_out"] is None
               for run in mapping["fit"]["runs"])
    solved = subprocess.run([LAMBDADNN, "solve", str(out), "--json"], capture_output=True,
                            text=True, timeout=HANG_GUARD_S, check=False)
    assert solved.returncode in (0, 3), solved.stderr
    plan = json.loads(solved.stdout)
    if plan["status"] == "optimal":
        max_vcpu = mapping["platform"]["max_vcpu"]
        assert plan["functions"] * plan["memory_mb"] <= max_vcpu * MB_PER_VCPU


# -- signals ----------------------------------------------------------------------------------


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        for pid in descendants(process.pid) | {process.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()


def _trial_running(root: int) -> tuple[set[int], list[Path]]:
    """Wait until a trial's worker runs under `root`; the processes and cgroups then."""
    from lambdadnn.launcher.local import CGROUP_ROOT

    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        pids = descendants(root)
        workers = [p for p in pids if b"_worker_main" in cmdline(p)]
        if workers:  # the trial's job cgroups: those its workers are in
            jobs = set()
            for worker in workers:
                with contextlib.suppress(OSError):
                    jobs |= set(re.findall(r"lambdadnn-local-[0-9a-f]+",
                                           Path(f"/proc/{worker}/cgroup").read_text()))
            groups = [base / job for base in (CGROUP_ROOT, CGROUP_ROOT / "cpu") for job in jobs]
            return pids, [g for g in groups if g.exists()]
        time.sleep(0.2)
    raise AssertionError("the profile did not start a trial")


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_profile_cleanly(
    name: str, tmp_path: Path, started: list[subprocess.Popen[str]],
) -> None:
    out = tmp_path / "x.yaml"
    process = subprocess.Popen(
        [LAMBDADNN, "profile", "--workload", "digits-mlp", "--budget-s", "40", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started.append(process)
    pids, groups = _trial_running(process.pid)
    process.send_signal(signal.Signals[name])
    _, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 128 + signal.Signals[name]
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert name in err and "Traceback" not in err
    deadline = time.monotonic() + HANG_GUARD_S
    while any(alive(p) for p in pids - {process.pid}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids - {process.pid} if alive(p)]
    assert not [g for g in groups if g.exists()]
    assert not out.exists()


def test_a_batch_larger_than_a_shard_is_refused_before_any_trial() -> None:
    """digits has 1,347 training samples: a 400-sample batch on each of 4 functions (and 1,600
    on one) would be silently cut to the shard; one line, and nothing runs."""
    def never(spec: LaunchSpec, timeout_s: float) -> LaunchReport:
        raise AssertionError("a trial ran")

    with pytest.raises(LaunchError, match=r"`local_batch` 400 is too large .* at most 336"):
        profile_workload("digits-mlp", CAPACITY, never, local_batch=400)
