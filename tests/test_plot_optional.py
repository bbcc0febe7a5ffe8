"""matplotlib is the optional extra `lambdadnn[plot]`: nothing imports it until a figure is
drawn, and without it every plotting option is one line naming the extra while the rest of
lambdadnn works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lambdadnn.cli import main
from lambdadnn.plot import PLOT_EXTRA, MissingPlotExtraError, plot_folder, plot_path
from tests.hang_guard import HANG_GUARD_S

# What each snippet does before checking that no matplotlib module was loaded.
NO_MATPLOTLIB = {
    "library": "import lambdadnn, lambdadnn.cli, lambdadnn.plot\n"
               "from lambdadnn import solve\n"
               "assert solve('mobilenet-cifar10').status == 'optimal'\n",
    "cli": "from click.testing import CliRunner\n"
           "from lambdadnn.cli import main\n"
           "result = CliRunner().invoke(main, ['solve', 'mobilenet-cifar10'])\n"
           "assert result.exit_code == 0, result.output\n",
}


@pytest.mark.real
@pytest.mark.parametrize("snippet", sorted(NO_MATPLOTLIB))
def test_solving_imports_no_matplotlib(snippet: str, tmp_path: Path) -> None:
    """In a fresh interpreter, as a user without the extra would run it."""
    script = (NO_MATPLOTLIB[snippet] + "import sys\n"
              "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib')\n"
              "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib as if not installed: `import matplotlib` fails and `find_spec` finds none."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.parametrize(("arguments", "option"), [
    (["frontier", "mobilenet-cifar10", "--plot", "out.png"], "--plot"),
    (["solve-many", "jobs.csv", "--concurrency", "20", "--plot", "gantt.png"], "--plot"),
    (["compare", "--jobs", "2", "--plot-dir", "figures"], "--plot-dir"),
    (["sweep", "--jobs", "2", "--seeds", "1", "--plot-dir", "figures"], "--plot-dir"),
])
def test_a_plot_without_matplotlib_is_one_line_naming_the_extra(
    no_matplotlib: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    arguments: list[str], option: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs.csv").write_text("submit_time_s,instance,epochs,deadline_s\n"
                                       "0,mobilenet-cifar10,6,1200\n", encoding="utf-8")
    result = CliRunner().invoke(main, arguments)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: `{option}` needs matplotlib: {PLOT_EXTRA}\n"
    assert not (tmp_path / "figures").exists()


def test_solve_works_without_matplotlib(no_matplotlib: None) -> None:
    result = CliRunner().invoke(main, ["solve", "mobilenet-cifar10"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mobilenet-cifar10")


def test_the_checks_name_the_extra(no_matplotlib: None, tmp_path: Path) -> None:
    """The library's own entry points, for a caller that draws without the CLI."""
    with pytest.raises(MissingPlotExtraError, match=r"^`--plot` needs matplotlib: pip install"):
        plot_path(tmp_path / "out.png")
    with pytest.raises(MissingPlotExtraError, match=r"^`--plot-dir` needs matplotlib"):
        plot_folder(tmp_path / "figures")
