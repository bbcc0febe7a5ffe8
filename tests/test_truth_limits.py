"""`--truth` scales the engine cannot simulate are refused by name, up front; the edges of
the allowed range run (`bandwidth_scale=1e-308` and `rate_scale=1e-300` gave tracebacks,
`rate_scale=1e9` "plan … is not valid")."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from lambdadnn.cli import main


@pytest.mark.parametrize("item", ["bandwidth_scale=1e-308", "rate_scale=1e-300",
                                  "rate_scale=1e9", "startup_scale=1e5", "rate_scale=0.003"])
def test_a_scale_out_of_range_is_refused_by_name(item: str) -> None:
    key = item.split("=")[0]
    result = CliRunner().invoke(main, ["compare", "--jobs", "5", "--truth", item])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.stderr.count("\n") == 1
    assert f"`truth.{key}` must be in [0.01, 100]" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("key", ["rate_scale", "bandwidth_scale", "startup_scale"])
@pytest.mark.parametrize("value", ["0.01", "100"])
def test_the_edges_of_the_range_simulate(key: str, value: str) -> None:
    result = CliRunner().invoke(main, ["compare", "--jobs", "30", "--truth", f"{key}={value}"])
    assert result.exit_code == 0, result.output
