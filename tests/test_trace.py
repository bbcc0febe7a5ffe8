"""Traces: the CSV format round-trips, bad rows are named by line and column, the generator is
a seeded Poisson process over the shipped workloads with the paper's deadlines by default, and
its other arrival processes and job-size mix have the rates and shapes they document."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from lambdadnn import InputError, TraceError, load_instance
from lambdadnn.simulator.defaults import ARRIVALS, MIXES
from lambdadnn.simulator.trace import (
    BURSTY_CV,
    DIURNAL_AMPLITUDE,
    DIURNAL_PERIOD_S,
    HEAVY_ALPHA,
    HEAVY_MAX,
    WORKLOADS,
    generate_trace,
)
from lambdadnn.solver.trace_file import Job, read_trace, write_trace

HEADER = "submit_time_s,instance,epochs,deadline_s\n"


def _write(path: Path, body: str, header: str = HEADER) -> Path:
    path.write_text(header + body, encoding="utf-8")
    return path


def test_generated_trace_round_trips(tmp_path: Path) -> None:
    jobs = generate_trace(40, seed=7)
    write_trace(jobs, tmp_path / "trace.csv")
    assert read_trace(tmp_path / "trace.csv") == jobs


def test_rows_override_epochs_and_deadline_and_accept_paths(tmp_path: Path) -> None:
    profile = tmp_path / "profiles" / "mine.yaml"
    profile.parent.mkdir()
    profile.write_text(Path("instances/1dcnn-imdb.yaml").read_text("utf-8"), encoding="utf-8")
    trace = _write(
        tmp_path / "trace.csv",
        "0,mobilenet-cifar10,3,750.5\n\n2.5,profiles/mine.yaml,1,1200\n",
    )
    first, second = read_trace(trace)
    assert (first.submit_time_s, first.instance_name, first.epochs, first.deadline_s) == (
        0.0, "mobilenet-cifar10", 3, 750.5,
    )
    assert first.instance.workload.epochs == 3
    assert first.instance.objective.deadline_s == 750.5
    shipped = load_instance("instances/mobilenet-cifar10.yaml")
    assert first.instance.profile == shipped.profile
    assert second.instance_name == "profiles/mine.yaml"
    assert second.instance.name == "1dcnn-imdb"
    assert second.instance.workload.epochs == 1
    write_trace([first, second], tmp_path / "again.csv")
    assert read_trace(tmp_path / "again.csv") == [first, second]


def test_columns_may_come_in_any_order(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.csv", "900,6,mobilenet-cifar10,1.5\n",
        header="deadline_s,epochs,instance,submit_time_s\n",
    )
    (job,) = read_trace(trace)
    assert (job.submit_time_s, job.epochs, job.deadline_s) == (1.5, 6, 900.0)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("-1,mobilenet-cifar10,6,900", "submit_time_s"),
        ("soon,mobilenet-cifar10,6,900", "submit_time_s"),
        ("nan,mobilenet-cifar10,6,900", "submit_time_s"),
        ("1,mobilenet-cifar10,0,900", "epochs"),
        ("1,mobilenet-cifar10,2.5,900", "epochs"),
        ("1,mobilenet-cifar10,6,0", "deadline_s"),
        ("1,mobilenet-cifar10,6,inf", "deadline_s"),
        ("1,,6,900", "instance"),
        ("1,no-such-workload,6,900", "instance"),
        ("1,missing/file.yaml,6,900", "instance"),
    ],
)
def test_bad_rows_name_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    trace = _write(tmp_path / "t.csv", f"0,mobilenet-cifar10,6,900\n{row}\n")
    with pytest.raises(TraceError) as caught:
        read_trace(trace)
    message = str(caught.value)
    assert "line 3" in message and f"column `{column}`" in message
    assert "\n" not in message


def test_bad_instance_yaml_is_reported_on_its_row(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("workload: [1, 2\n", encoding="utf-8")
    trace = _write(tmp_path / "t.csv", "0,broken.yaml,1,900\n")
    with pytest.raises(TraceError, match=r"line 2, column `instance`: .*not valid YAML"):
        read_trace(trace)


@pytest.mark.parametrize(
    ("header", "body", "match"),
    [
        ("submit_time_s,instance,epochs\n", "", "line 1"),
        ("when,instance,epochs,deadline_s\n", "", "line 1"),
        (HEADER, "0,mobilenet-cifar10,6\n", "line 2: expected 4 columns"),
        (HEADER, "0,mobilenet-cifar10,6,900,extra\n", "line 2: expected 4 columns"),
    ],
)
def test_bad_shape_is_one_line_error(tmp_path: Path, header: str, body: str, match: str) -> None:
    trace = _write(tmp_path / "t.csv", body, header=header)
    with pytest.raises(TraceError, match=match) as caught:
        read_trace(trace)
    assert "\n" not in str(caught.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "nope.csv")


def test_generator_is_seeded() -> None:
    assert generate_trace(30, seed=1) == generate_trace(30, seed=1)
    assert generate_trace(30, seed=1) != generate_trace(30, seed=2)


def test_generator_is_poisson_over_shipped_workloads_with_paper_deadlines() -> None:
    rate = 0.5
    jobs = generate_trace(4000, seed=11, rate_per_s=rate)
    times = [job.submit_time_s for job in jobs]
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    assert times == sorted(times)
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
    # exponential gaps: standard deviation equal to the mean
    assert statistics.pstdev(gaps) == pytest.approx(1 / rate, rel=0.1)
    deadlines = [job.deadline_s for job in jobs]
    assert all(600 <= d <= 1200 and d == int(d) for d in deadlines)
    assert min(deadlines) < 650 and max(deadlines) > 1150
    shipped = {name: load_instance(f"instances/{name}.yaml") for name in WORKLOADS}
    counts = dict.fromkeys(WORKLOADS, 0)
    for job in jobs:
        counts[job.instance_name] += 1
        epochs = shipped[job.instance_name].workload.epochs
        assert job.epochs == job.instance.workload.epochs == epochs
        assert job.instance.objective.deadline_s == job.deadline_s
    assert all(count > 4000 / len(WORKLOADS) * 0.85 for count in counts.values())


@pytest.mark.parametrize(
    "kwargs",
    [{"jobs": -1}, {"rate_per_s": 0.0}, {"deadlines": (1200, 600)}, {"workloads": ()}],
)
def test_generator_rejects_bad_arguments(kwargs: dict[str, object]) -> None:
    arguments: dict[str, object] = {"jobs": 3, "seed": 0, **kwargs}
    with pytest.raises(InputError):
        generate_trace(**arguments)  # type: ignore[arg-type]


def test_a_spreadsheet_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("\ufeff" + HEADER + "0,espcn-bsds500,20,600\n", encoding="utf-8")
    (job,) = read_trace(trace)
    assert job.instance.name == "espcn-bsds500"


def _rows(jobs: list[Job]) -> list[tuple[float, str, int, float]]:
    return [(job.submit_time_s, job.instance_name, job.epochs, job.deadline_s) for job in jobs]


def test_default_generator_is_unchanged() -> None:
    """Rows the generator gave before it had arrival processes and mixes (computed then)."""
    zero, forty_two = generate_trace(200, seed=0), generate_trace(200, seed=42)
    assert [_rows(zero)[i] for i in (0, 1, 2, 99, 199)] == [
        (3.4, "espcn-bsds500", 20, 1082.0), (8.498, "1dcnn-imdb", 10, 702.0),
        (8.597, "mobilenet-cifar10", 6, 793.0), (590.321, "resnet50-cifar10", 2, 743.0),
        (1129.188, "espcn-bsds500", 20, 952.0),
    ]
    assert [_rows(forty_two)[i] for i in (0, 1, 2, 99, 199)] == [
        (12.021, "espcn-bsds500", 20, 1096.0), (23.702, "mobilenet-cifar10", 6, 922.0),
        (35.626, "espcn-bsds500", 20, 794.0), (449.527, "resnet50-cifar10", 2, 702.0),
        (964.118, "1dcnn-imdb", 10, 1151.0),
    ]
    custom = generate_trace(50, seed=3, rate_per_s=1.5, deadlines=(100, 200),
                            workloads=("mobilenet-cifar10", "1dcnn-imdb"))
    assert [_rows(custom)[i] for i in (0, 49)] == [
        (0.073, "1dcnn-imdb", 10, 154.0), (34.342, "mobilenet-cifar10", 6, 112.0),
    ]
    assert generate_trace(200, seed=0, arrival="poisson", mix="paper") == zero


@pytest.mark.parametrize("arrival", ARRIVALS)
@pytest.mark.parametrize("mix", MIXES)
def test_every_process_and_mix_is_seeded(arrival: str, mix: str) -> None:
    first = generate_trace(60, seed=5, arrival=arrival, mix=mix)
    assert first == generate_trace(60, seed=5, arrival=arrival, mix=mix)
    assert first != generate_trace(60, seed=6, arrival=arrival, mix=mix)
    times = [job.submit_time_s for job in first]
    assert times == sorted(times) and times[0] >= 0


# Counts of arrivals in [0, T]: mean rate·T, variance rate·T·CV² (exactly, for the Poisson and
# the diurnal process over whole days; asymptotically for the gamma renewal process).
_COUNT_CV = {"poisson": 1.0, "bursty": BURSTY_CV, "diurnal": 1.0}
_RATE, _SPAN_S = 0.1, 5 * DIURNAL_PERIOD_S  # 43,200 arrivals expected over five whole days
_Z = 4.0  # standard deviations allowed: a seeded run, and a bug moves the mean by far more


def _long_trace(arrival: str) -> np.ndarray:
    expected = _RATE * _SPAN_S
    jobs = generate_trace(int(expected + 10 * math.sqrt(expected) * BURSTY_CV), seed=2024,
                          rate_per_s=_RATE, arrival=arrival)
    times = np.array([job.submit_time_s for job in jobs])
    assert times[-1] > _SPAN_S  # the trace covers the whole span counted
    return times


@pytest.mark.slow
@pytest.mark.parametrize("arrival", ARRIVALS)
def test_each_arrival_process_has_the_mean_rate_asked_for(arrival: str) -> None:
    count = int(np.sum(_long_trace(arrival) <= _SPAN_S))
    expected = _RATE * _SPAN_S
    assert abs(count - expected) <= _Z * math.sqrt(expected) * _COUNT_CV[arrival]


def _dispersion(times: np.ndarray, window_s: float) -> tuple[float, int]:
    """Index of dispersion (variance/mean) of the counts in consecutive windows over the span,
    and how many windows there were."""
    windows = int(_SPAN_S // window_s)
    counts = np.histogram(times, bins=windows, range=(0, windows * window_s))[0]
    return float(counts.var(ddof=1) / counts.mean()), windows


@pytest.mark.slow
def test_bursty_arrivals_are_over_dispersed_and_poisson_ones_are_not() -> None:
    # Windows of 50 expected arrivals: a Poisson count's index of dispersion is 1 with a
    # sampling standard error of about √(2/(m − 1)) over m windows; the gamma renewal process's
    # tends to CV² = 4.
    window_s = 50 / _RATE
    poisson, windows = _dispersion(_long_trace("poisson"), window_s)
    bursty, _ = _dispersion(_long_trace("bursty"), window_s)
    error = math.sqrt(2 / (windows - 1))
    assert abs(poisson - 1) <= _Z * error
    assert bursty > 1 + _Z * error


def test_diurnal_arrivals_crowd_the_first_half_of_each_day() -> None:
    # ∫ over the first half-period of (1 + a·sin 2πt/P) dt / P = 1/2 + a/π of each day's jobs.
    times = _long_trace("diurnal")
    inside = times[times <= _SPAN_S]
    share = float(np.mean(inside % DIURNAL_PERIOD_S < DIURNAL_PERIOD_S / 2))
    expected = 0.5 + DIURNAL_AMPLITUDE / math.pi
    assert abs(share - expected) <= _Z * math.sqrt(expected * (1 - expected) / len(inside))


def _pareto_survival(x: float) -> float:
    """P(X ≥ x) of the heavy mix's bounded Pareto multiplier, for 1 ≤ x ≤ HEAVY_MAX."""
    return float((x**-HEAVY_ALPHA - HEAVY_MAX**-HEAVY_ALPHA) / (1 - HEAVY_MAX**-HEAVY_ALPHA))


def test_heavy_mix_has_a_heavy_tail_and_deadlines_that_scale_with_size() -> None:
    jobs = generate_trace(20_000, seed=9, mix="heavy")
    paper = generate_trace(20_000, seed=9)
    # Same arrivals and workloads as the paper mix with that seed: only the sizes differ.
    assert [(j.submit_time_s, j.instance_name) for j in jobs] == [
        (j.submit_time_s, j.instance_name) for j in paper
    ]
    base = {name: load_instance(f"instances/{name}.yaml").workload.epochs for name in WORKLOADS}
    ratios = np.array([job.epochs / base[job.instance_name] for job in jobs])
    assert ratios.min() >= 1 and ratios.max() <= HEAVY_MAX
    for job, ratio in zip(jobs, ratios, strict=True):  # round(U · epochs/E), U in 600..1200
        assert job.deadline_s == int(job.deadline_s)
        assert 600 * ratio - 0.5 <= job.deadline_s <= 1200 * ratio + 0.5
        assert job.instance.workload.epochs == job.epochs
    # epochs = round(E·X) is ≥ 10·E exactly when X ≥ 10 − 1/(2E): a sum of Bernoullis.
    chances = np.array([_pareto_survival(10 - 0.5 / base[job.instance_name]) for job in jobs])
    big = int(np.sum(ratios >= 10))
    assert abs(big - chances.sum()) <= _Z * math.sqrt(np.sum(chances * (1 - chances)))
    # Most jobs small, a few 10–50× larger: the median multiplier is 1.77 (≤ 2.5 after
    # rounding), and among 20,000 jobs some X ≥ 30 but for a chance of (1 − 0.0078)^20,000 ≈
    # e^-156, so the largest job is over 12× the median one.
    assert np.median(ratios) <= 2.5
    assert ratios.max() / np.median(ratios) >= 12


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"arrival": "uniform"}, "arrival"), ({"arrival": 3}, "arrival"),
        ({"arrival": "Poisson"}, "arrival"), ({"mix": "huge"}, "mix"), ({"mix": None}, "mix"),
    ],
)
def test_generator_names_a_bad_arrival_or_mix(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError, match=f"^`{field}` must be one of ") as caught:
        generate_trace(3, seed=0, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
