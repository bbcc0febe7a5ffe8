"""Every numeric range option of the CLI refuses NaN (click's `FloatRange` lets it through:
`profile --budget-s nan` ran a profile)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from lambdadnn.cli import main

RANGED = [
    (name, option)
    for name, command in sorted(main.commands.items())
    for option in command.params
    if isinstance(option, click.Option) and isinstance(option.type, click.FloatRange)
]


def test_there_are_ranged_options_to_check() -> None:
    assert {"profile", "compare", "launch"} <= {name for name, _ in RANGED}


@pytest.mark.parametrize(("command", "option"), RANGED,
                         ids=[f"{name} {option.opts[0]}" for name, option in RANGED])
@pytest.mark.parametrize("value", ["nan", "-nan", "NaN"])
def test_a_ranged_option_refuses_nan(command: str, option: click.Option, value: str) -> None:
    result = CliRunner().invoke(main, [command, option.opts[0], value])
    assert result.exit_code == 2, result.output
    assert "is not a finite number" in result.output
    assert option.opts[0] in result.output
