"""The digits-mlp exchange benchmark's arithmetic (`benchmarks.ps_exchange`): the model's
exchange per iteration, the fits it makes from the k = 1 and unshaped runs, and its refusal of
a bad `--nic-mbit`. The launches themselves are what the benchmark measures; the emulated
links are tested in tests/test_emulated_nics.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdadnn.benchmarks import ps_exchange

positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)


def test_the_exchange_by_hand() -> None:
    """d_m = 1.2 MB, n = 2, k = 3, B_p = 10 MB/s, B_f^max = 4 MB/s, λ = 5 ms, c_msg = 1 ms:
    each direction at min(4, 3·10/2) = 4 MB/s is 0.3 s, plus 5 ms, plus 3 ms."""
    predicted = ps_exchange.predicted_exchange_s(1.2, 2, 3, 10.0, 4.0, 0.005, 0.001)
    assert predicted == pytest.approx(2 * (0.3 + 0.005 + 0.003), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(model_mb=positive, functions=st.integers(1, 64), exchange=positive,
       share=st.floats(0.0, 0.9))
def test_the_fitted_bandwidth_gives_back_the_k1_run(
    model_mb: float, functions: int, exchange: float, share: float,
) -> None:
    """Property: B_p fitted from a k = 1 exchange x₁ (with a λ below x₁/2) predicts x₁ at
    k = 1 with B_f^max unbounded."""
    latency = share * exchange / 2
    bandwidth = ps_exchange.fit_bandwidth(model_mb, functions, exchange, latency)
    again = ps_exchange.predicted_exchange_s(model_mb, functions, 1, bandwidth, math.inf,
                                             latency)
    assert again == pytest.approx(exchange, rel=1e-9)


def test_a_latency_above_the_exchange_is_refused() -> None:
    with pytest.raises(SystemExit, match="lower --latency-s"):
        ps_exchange.fit_bandwidth(1.2, 2, 0.010, 0.005)


@settings(max_examples=200, deadline=None)
@given(latency=st.floats(0.0, 0.1), message=st.floats(0.0, 0.01),
       ks=st.lists(st.integers(1, 8), min_size=2, max_size=9).filter(lambda k: len(set(k)) > 1))
def test_the_fixed_part_is_recovered_from_exact_runs(
    latency: float, message: float, ks: list[int],
) -> None:
    """Property: runs that lie exactly on u_k = 2·(λ + k·c_msg) give back λ and c_msg."""
    runs = [(k, 2 * (latency + k * message)) for k in ks]
    fitted = ps_exchange.fit_fixed(runs)
    assert fitted == pytest.approx((latency, message), abs=1e-9)


def test_one_shard_count_fits_no_message_cost() -> None:
    assert ps_exchange.fit_fixed([(2, 0.020), (2, 0.024)]) == pytest.approx((0.011, 0.0))


def test_the_channels_bytes_at_the_nominal_rate() -> None:
    """9 slices of 1.2 MB / 3 shards (n = 2: 4 in, 5 out) at 10 MB/s: 0.36 s."""
    assert ps_exchange.channel_bytes_s(9 * 1.2 / 3, 10.0) == pytest.approx(0.36)


@pytest.mark.parametrize("value", ["0", "-80", "nan", "inf", "fast"])
def test_a_bad_nic_rate_is_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        ps_exchange.main(["--nic-mbit", value])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--nic-mbit" in error and "Traceback" not in error


@pytest.mark.parametrize(("flag", "value"), [
    ("--shards", "0"), ("--shards", "a,b"), ("--shards", ","), ("--shards", "17"),
    ("--functions", "0"), ("--functions", "65"), ("--memory-mb", "1"), ("--iterations", "-1"),
    ("--repeats", "0"), ("--seed", "x"), ("--latency-s", "-1"), ("--latency-s", "nan"),
])
def test_a_bad_option_is_one_line_before_anything_runs(
    flag: str, value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each option is checked by the parser, so a wrong value is one line naming it and no
    launch starts."""
    def launched(*args: object, **kwargs: object) -> None:
        raise AssertionError("a launch started")

    monkeypatch.setattr(ps_exchange, "run", launched)
    with pytest.raises(SystemExit) as stopped:
        ps_exchange.main([flag, value])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag in error and "Traceback" not in error
