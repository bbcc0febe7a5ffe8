"""Hostile input to the simulator and its commands: one line or a finished report, quickly;
never a traceback, a hang or a file's content on the screen.

Commands that hung before run in a subprocess whose timeout is only a hang guard.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from lambdadnn import InputError, InstanceError, NoiseModel, PlanError, TraceError, load_instance
from lambdadnn.cli import main
from lambdadnn.models.performance import evaluate
from lambdadnn.simulator import engine
from lambdadnn.simulator.baselines import NO_PLAN
from lambdadnn.simulator.compare import compare, summarise
from lambdadnn.simulator.engine import simulate_job, simulate_trial
from lambdadnn.simulator.pool import run_trace
from lambdadnn.simulator.strategies import strategy
from lambdadnn.simulator.trace import generate_trace
from lambdadnn.solver import trace_file
from lambdadnn.solver.trace_file import COLUMNS, Job, read_trace
from tests.hang_guard import HANG_GUARD_S

HEADER = "submit_time_s,instance,epochs,deadline_s\n"
MOBILENET = load_instance("instances/mobilenet-cifar10.yaml")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`lambdadnn ARGS` in a fresh process (a hang fails the test instead of stalling it)."""
    return subprocess.run(
        [sys.executable, "-m", "lambdadnn.cli", *args], capture_output=True, text=True,
        timeout=HANG_GUARD_S, cwd=cwd, check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, body: str) -> Path:
    path.write_text(HEADER + body, encoding="utf-8")
    return path


def with_epochs(epochs: int) -> object:
    return dataclasses.replace(
        MOBILENET, workload=dataclasses.replace(MOBILENET.workload, epochs=epochs)
    )


# 1. Livelocks: a failure rate no job survives, and epochs no simulation can finish.


@pytest.mark.real
@pytest.mark.parametrize("rate", ["100", "1e6"])
def test_a_hopeless_failure_rate_ends_with_a_report(tmp_path: Path, rate: str) -> None:
    """A planner that ignores crashes runs plans the simulator must abandon; lambdadnn, told
    the rate, runs only plans that finish (at 100/h it finds them: few functions, whose
    checkpoints come more often than their crashes), and none at 10⁶/h."""
    trace_file = write(tmp_path / "t.csv", "0,mobilenet-cifar10,6,900\n5,1dcnn-imdb,10,900\n")
    statuses = {}
    for strategy_name in ("ldnn-alg1", "lambdadnn"):
        result = cli("simulate", str(trace_file), "--strategy", strategy_name,
                     "--failure-rate", rate, "--json")
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        statuses[strategy_name] = [job["status"] for job in payload["jobs"]]
        assert payload["strategy"]["abandoned"] == statuses[strategy_name].count("abandoned")
    assert statuses["ldnn-alg1"] == ["abandoned", "ok" if rate == "100" else "abandoned"]
    # lambdadnn runs only plans that finish: at 100/h some do, at 10⁶/h none
    assert statuses["lambdadnn"] == (["ok", "ok"] if rate == "100" else ["no-plan"] * 2)


@pytest.mark.real
def test_a_trillion_epochs_end_with_a_report_or_one_line(tmp_path: Path) -> None:
    """λDNN's Algorithm 1 plans it and the simulator abandons it; our solver may plan it
    too, or refuse it in one line."""
    trace_file = write(tmp_path / "t.csv", f"0,mobilenet-cifar10,{10**12},900\n")
    result = cli("simulate", str(trace_file), "--strategy", "ldnn-alg1")
    assert result.returncode == 0, result.stderr
    assert "1 job(s) abandoned" in result.stdout and "0.00%" in result.stdout
    result = cli("simulate", str(trace_file))
    if result.returncode == 0:
        assert "1 job(s) abandoned" in result.stdout
    else:
        one_line_error(result)


def test_a_stuck_job_is_abandoned_after_crashes_without_a_checkpoint() -> None:
    noise = NoiseModel(failure_rate_per_hour=100)
    run = simulate_job(MOBILENET, 14, 10240, noise=noise, rng=np.random.default_rng(0))
    assert not run.finished
    assert run.failures == engine.MAX_CRASHES_WITHOUT_CHECKPOINT and run.checkpoints == 0
    assert run.time_s > 0 and run.cost_usd > 0 and run.iterations == 0


def test_a_job_that_crashes_but_progresses_still_finishes() -> None:
    """At 100 crashes per function-hour one function still saves checkpoints: it finishes."""
    noise = NoiseModel(failure_rate_per_hour=100)
    run = simulate_job(MOBILENET, 1, 10240, noise=noise, rng=np.random.default_rng(0))
    assert run.finished and run.failures > engine.MAX_CRASHES_WITHOUT_CHECKPOINT
    assert run.iterations == pytest.approx(float(evaluate(MOBILENET.parameters(), 1, 10240)
                                                 .iterations))


def test_rounds_and_crashes_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """One function at 128 MB needs 39 rounds: with a cap of 20 events it stops at 20."""
    quiet = NoiseModel.none()
    full = simulate_job(MOBILENET, 1, 128, noise=quiet, rng=np.random.default_rng(0))
    assert full.finished and full.restarts + 1 > 20
    monkeypatch.setattr(engine, "MAX_EVENTS", 20)
    cut = simulate_job(MOBILENET, 1, 128, noise=quiet, rng=np.random.default_rng(0))
    assert not cut.finished and cut.restarts + 1 + cut.failures == 20
    assert 0 < cut.time_s < full.time_s and 0 < cut.iterations < full.iterations


def test_work_beyond_the_budget_is_abandoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """k·n above the budget: abandoned before it starts; redone work past it: mid-run."""
    k_n = float(evaluate(MOBILENET.parameters(), 14, 10240).iterations) * 14
    monkeypatch.setattr(engine, "MAX_WORKER_ITERATIONS", int(k_n) - 1)
    early = simulate_job(MOBILENET, 14, 10240, noise=NoiseModel(), rng=np.random.default_rng(0))
    assert not early.finished and early.time_s == early.cost_usd == early.invocations == 0
    monkeypatch.setattr(engine, "MAX_WORKER_ITERATIONS", int(k_n * 1.5))
    shaky = NoiseModel(failure_rate_per_hour=20, checkpoint_every=200)
    late = simulate_job(MOBILENET, 14, 10240, noise=shaky, rng=np.random.default_rng(1))
    assert not late.finished and late.failures > 0 and late.time_s > 0


def test_an_abandoned_job_misses_its_deadline_and_pays_what_it_ran() -> None:
    huge = with_epochs(10**12)
    jobs = [
        Job(0.0, "huge", 10**12, 10**30, huge),  # type: ignore[arg-type]
        Job(1.0, "small", 6, 5000.0, MOBILENET),
    ]
    outcomes = run_trace(jobs, strategy("ldnn-alg1"), pool_size=14, noise=NoiseModel(),
                         seed=0)
    assert [o.status for o in outcomes] == ["abandoned", "ok"]
    assert not outcomes[0].met_deadline and outcomes[1].met_deadline
    assert outcomes[1].start_time_s == 1.0  # the abandoned job holds the pool no longer
    stuck = run_trace(jobs[1:], strategy("ldnn-alg1"), noise=NoiseModel(
        failure_rate_per_hour=1e6), seed=0)
    assert stuck[0].status == "abandoned" and not stuck[0].met_deadline
    assert stuck[0].time_s > 0 and stuck[0].cost_usd > 0
    report = summarise("ldnn-alg1", outcomes)
    assert report.abandoned == 1 and report.no_plan == 0
    assert report.mean_abs_prediction_error_s == pytest.approx(
        abs(outcomes[1].predicted_time_s - outcomes[1].time_s))


def test_a_trial_of_an_endless_job_is_seconds_long() -> None:
    """A profiling trial stops at its iteration count or its time limit, whatever the job: a
    trillion epochs, or a memory size where the rate is a rounding error above zero, cost a
    tuner no more than the limit."""
    huge = with_epochs(10**12)
    run = simulate_trial(huge, 1, 10240, iterations=20, max_s=60.0, noise=NoiseModel(),
                         rng=np.random.default_rng(0))
    assert len(run.iteration_s) == 20 and run.time_s < run.setup_s + 60.0
    slow = simulate_trial(huge, 1, 448, iterations=1000, max_s=5.0, noise=NoiseModel(),
                          rng=np.random.default_rng(0))
    assert 0 < len(slow.iteration_s) < 1000
    assert slow.load_s + sum(slow.iteration_s) <= 5.0 == slow.time_s - slow.setup_s
    espcn = load_instance("instances/espcn-bsds500.yaml")  # R(m) = 0.001·m − 2.3
    crawl = simulate_trial(espcn, 8, 2301, iterations=20, max_s=60.0, noise=NoiseModel(),
                           rng=np.random.default_rng(0))
    assert crawl.iteration_s == () and crawl.time_s == crawl.setup_s + 60.0
    assert crawl.cost_usd < 0.05  # a minute of 8 functions of 2.25 GB, not 10¹³ dollars
    for bad in (0, 1001, 2.5, True):
        with pytest.raises(InputError, match="`iterations`"):
            simulate_trial(huge, 1, 448, iterations=bad, noise=NoiseModel(),  # type: ignore[arg-type]
                           rng=np.random.default_rng(0))


# 2. Errors raised on purpose are LambdaDnnErrors in one line.


@pytest.mark.parametrize(("functions", "memory", "error"), [
    (0, 1024, PlanError), (2.5, 1024, PlanError), (4, -1, PlanError),
    (4, 1024, InstanceError),  # a plan the instance cannot train
])
def test_bad_plans_are_input_errors(functions: object, memory: int,
                                    error: type[InputError]) -> None:
    espcn = load_instance("instances/espcn-bsds500.yaml")  # not valid below 2,300 MB
    with pytest.raises(error) as caught:
        simulate_job(espcn, functions, memory, noise=NoiseModel(),  # type: ignore[arg-type]
                     rng=np.random.default_rng(0))
    assert "\n" not in str(caught.value)


def test_unknown_or_repeated_strategies_fail_before_any_simulation() -> None:
    with pytest.raises(InputError, match="`name` names 'cheapest'"):
        strategy("cheapest")
    ran: list[str] = []

    def progress(name: str) -> object:
        ran.append(name)
        return lambda done, total: None

    jobs = generate_trace(2, seed=0)
    for names in (["naive", "cheapest"], ["naive", "naive"], []):
        with pytest.raises(InputError, match="`strategies`"):
            compare(jobs, names, seed=0, noise=NoiseModel(), pool_size=10,
                    progress=progress)  # type: ignore[arg-type]
    assert ran == []


@pytest.mark.parametrize("seed", [-1, 2.5, True, "1"])
def test_bad_seeds_are_input_errors(seed: object) -> None:
    with pytest.raises(InputError, match="`seed`"):
        run_trace([], strategy("naive"), noise=NoiseModel(), seed=seed)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="`seed`"):
        generate_trace(1, seed=seed)  # type: ignore[arg-type]


def test_numpy_integers_are_integers() -> None:
    jobs = generate_trace(np.int64(2), seed=np.int64(3))  # type: ignore[arg-type]
    assert jobs == generate_trace(2, seed=3)
    outcomes = run_trace(jobs, strategy("naive"), pool_size=np.int64(50),  # type: ignore[arg-type]
                         noise=NoiseModel(), seed=np.int64(3))  # type: ignore[arg-type]
    assert outcomes == run_trace(jobs, strategy("naive"), pool_size=50, noise=NoiseModel(),
                                 seed=3)


def test_too_many_jobs_are_refused() -> None:
    with pytest.raises(InputError, match=r"`jobs` must be an integer in 0\.\.100,000"):
        generate_trace(10**12, seed=0)
    code, _, err = invoke("compare", "--jobs", str(10**12))
    assert code == 2 and "--jobs" in err


def test_json_has_no_infinity() -> None:
    """A job without a plan has infinite times: JSON says null, not Infinity."""
    (outcome,) = run_trace(generate_trace(1, seed=0), lambda *_: NO_PLAN, noise=NoiseModel(),
                           seed=0)
    payload = json.dumps(outcome.to_dict(), allow_nan=False)
    assert json.loads(payload)["start_time_s"] is None
    json.dumps(summarise("none", [outcome]).to_dict(), allow_nan=False)


# 3. compare: the seed and the plots folder are checked before anything runs.


@pytest.mark.parametrize("command", [["compare", "--jobs", "2"], ["simulate", "t.csv"]])
def test_a_negative_seed_is_a_usage_error(command: list[str]) -> None:
    code, _, err = invoke(*command, "--seed", "-1")
    assert code == 2 and "'--seed'" in err and "Traceback" not in err


def test_plots_inside_a_file_fail_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("not a folder", encoding="utf-8")

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the comparison ran before --plots was checked")

    monkeypatch.setattr("lambdadnn.simulator.compare.compare", no_simulation)
    code, _, err = invoke("compare", "--jobs", "2", "--plots", str(tmp_path / "file" / "in"))
    assert code == 1 and err.startswith("error: `--plot-dir`") and err.count("\n") == 1


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_plots_folder_fails_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.setattr("lambdadnn.simulator.compare.compare", None)
    for target in (locked, locked / "sub"):
        code, _, err = invoke("compare", "--jobs", "2", "--plots", str(target))
        assert code == 1 and err.startswith("error: `--plot-dir`") and err.count("\n") == 1


# 4. Trace files: read like every user file, cells quoted briefly, no file content shown.


@pytest.mark.real
def test_a_fifo_as_the_trace_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line_error(cli("simulate", str(fifo)))


@pytest.mark.parametrize(
    ("kind", "says"),
    [("/dev/zero", "not a regular file"), ("directory", "not a regular file"),
     ("too big", "more than the 4,194,304 allowed"), ("latin-1", "not UTF-8")],
)
def test_unreadable_traces_are_one_line(tmp_path: Path, kind: str, says: str) -> None:
    path = {"/dev/zero": Path("/dev/zero"), "directory": tmp_path}.get(kind, tmp_path / "t.csv")
    if kind == "too big":
        with path.open("wb") as handle:
            handle.truncate(5 * 1024 * 1024)
    elif kind == "latin-1":
        path.write_bytes((HEADER + "0,caf\xe9,1,1\n").encode("latin-1"))
    with pytest.raises(TraceError, match=says) as caught:
        read_trace(path)
    assert "\n" not in str(caught.value)


SECRET = "hunter2-s3cr3t-token-9f8e7d"


@pytest.mark.real
@pytest.mark.parametrize(
    "content", [f"password={SECRET}\n", f"# {SECRET}\n- {SECRET}\n", f"{SECRET}: [1, 2\n"]
)
def test_a_row_pointing_to_any_file_shows_none_of_it(tmp_path: Path, content: str) -> None:
    secret = tmp_path / "credentials"
    secret.write_text(content, encoding="utf-8")
    rows = f"0,{secret},6,900\n1,/etc/passwd,6,900\n"
    for row in rows.splitlines():
        trace_file = write(tmp_path / "t.csv", row + "\n")
        err = one_line_error(cli("simulate", str(trace_file)))
        assert SECRET not in err and "root:" not in err and "line 2" in err


@pytest.mark.real
def test_a_row_pointing_to_a_device_or_a_fifo_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "instance.yaml"
    os.mkfifo(fifo)
    for target in ("/dev/zero", str(fifo)):
        trace_file = write(tmp_path / "t.csv", f"0,{target},6,900\n")
        assert "not a regular file" in one_line_error(cli("simulate", str(trace_file)))


def test_long_cells_are_quoted_briefly(tmp_path: Path) -> None:
    cell = "9" * 5000
    for row in (f"{cell},mobilenet-cifar10,6,900", f"0,mobilenet-cifar10,{cell},900",
                f"0,{'x' * 5000},6,900", f"0,{'a/' * 3000},6,900"):
        with pytest.raises(TraceError) as caught:
            read_trace(write(tmp_path / "t.csv", row + "\n"))
        message = str(caught.value)
        assert len(message) < 400 and "\n" not in message and "line 2" in message


def test_a_long_header_is_quoted_briefly(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match="line 1") as caught:
        read_trace(path)
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("-inf,mobilenet-cifar10,6,900", "submit_time_s"),
        ("1e400,mobilenet-cifar10,6,900", "submit_time_s"),
        ("1,mobilenet-cifar10,6,-5", "deadline_s"),
        ("1,mobilenet-cifar10,6,nan", "deadline_s"),
        ("1,mobilenet-cifar10,6,1e999", "deadline_s"),
        ("1,mobilenet-cifar10,-1,900", "epochs"),
        ("1,mobilenet-cifar10,nan,900", "epochs"),
        ("1,mobilenet-cifar10,1e3,900", "epochs"),
        (f"1,mobilenet-cifar10,{10**12 + 1},900", "epochs"),
    ],
)
def test_non_finite_and_negative_cells_name_row_and_column(
    tmp_path: Path, row: str, column: str
) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path / "t.csv", row + "\n"))
    assert f"line 2, column `{column}`" in str(caught.value)


def test_a_cell_beyond_the_csv_field_limit_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="line 2: not valid CSV") as caught:
        read_trace(write(tmp_path / "t.csv", f"0,{'a' * 200_000},6,900\n"))
    assert len(str(caught.value)) < 400


def test_a_trace_holds_at_most_max_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_file, "MAX_TRACE_JOBS", 3)
    path = write(tmp_path / "t.csv", "0,espcn-bsds500,1,900\n" * 3)
    assert len(read_trace(path)) == 3
    path = write(tmp_path / "t.csv", "0,espcn-bsds500,1,900\n" * 4)
    with pytest.raises(TraceError, match="line 5: more than 3 jobs"):
        read_trace(path)


# 5. Fuzz: any text is a list of jobs or one line.

CELLS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["mobilenet-cifar10", "espcn-bsds500", "no-such", "/etc/passwd", "/dev/null",
                     ".", "..", "a/b.yaml", "", " 6 ", "nan", "-inf", "inf", "1e400", "-0",
                     "0x10", "1_000", "٣", '"', '"a,b"', "\x00", "\r", "\n", "\ufeff"]),
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(1, 3000).map(lambda n: "9" * n),
)
HEADERS = st.one_of(
    st.just(",".join(COLUMNS)),
    st.permutations(COLUMNS).map(",".join),
    st.lists(st.sampled_from([*COLUMNS, "extra", "", " instance "]), max_size=6).map(",".join),
    st.text(max_size=40),
)


@given(
    header=HEADERS,
    rows=st.lists(st.lists(CELLS, min_size=0, max_size=6).map(",".join), max_size=6),
    bom=st.booleans(),
    ending=st.sampled_from(["\n", "\r\n", "\r", ""]),
)
def test_any_text_is_jobs_or_one_line(header: str, rows: list[str], bom: bool,
                                      ending: str) -> None:
    text = ("\ufeff" if bom else "") + ending.join([header, *rows]) + ending
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            jobs = read_trace(path)
        except TraceError as error:
            message = str(error)
            assert message.count("\n") == 0 and len(message) < 600, message
            return
    assert all(isinstance(job, Job) and math.isfinite(job.submit_time_s) and job.epochs >= 1
               and math.isfinite(job.deadline_s) and job.deadline_s > 0 for job in jobs)
