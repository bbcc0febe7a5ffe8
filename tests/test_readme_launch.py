"""The README's second walk runs as printed: launching and profiling, from its "Running a plan"
heading on, in a home of its own (tests/test_readme.py says how, and runs the tour)."""

from __future__ import annotations

import pytest

from tests.test_readme import Block, ran_as_printed, shown, walk

pytestmark = pytest.mark.real  # runs the README's launches and profiles


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """The launches' walk: the blocks from LAUNCHING on."""
    return walk(tmp_path_factory.mktemp("home"), launches=True)


@pytest.mark.parametrize("block", shown(launches=True), ids=lambda block: block.name)
def test_readme_block_runs_as_printed(block: Block, walkthrough: dict[str, str | None]) -> None:
    ran_as_printed(block, walkthrough)
