"""The README runs as printed: every shell, console and Python block, in the README's order,
in a fresh folder of a fresh home (as a user who installed lambdadnn and reads along would),
with this venv's `bin` first on PATH; and its YAML example solves to the plan its tour prints.

A block is skipped only when it is listed in SKIPPED, with the reason; a block that may run
only after a later one (it says so) is listed in AFTER. The README is read in two walks, each
in a home of its own: the tour up to LAUNCHING (here) and the launches and profiles from it on
(tests/test_readme_launch.py), which use nothing the tour wrote; two files, so that two
pytest-xdist workers run them side by side."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lambdadnn import load_instance, solve
from tests.hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOUR_COMMAND = "$ lambdadnn solve mobilenet-cifar10\n"
RUN = ("sh", "bash", "console", "python")
NOT_RUN = ("yaml", "text")  # data and abridged output: the YAML is checked below

# A block containing the key is not run, for the reason given.
SKIPPED = {
    "make run    #": "`make run` and `make test` set up this checkout: `make test` is what runs "
                    "this test",
    "pip install .": "tests/test_packaging.py installs the wheel into a fresh venv and uses it "
                     "from a folder outside the checkout (the dependencies need the network)",
    "pip install torch --index-url": "downloads torch from PyTorch's index: the network",
    "REGISTRY=ACCOUNT.dkr.ecr": "needs docker, the aws CLI and an AWS account with ECR; "
                                "tests/test_image.py checks the image's build folder",
    "lambdadnn deploy --print > stack.yaml": "needs the aws CLI, docker and an AWS account; "
                                             "tests/test_deploy.py creates, reads and deletes "
                                             "the stack on a moto server",
}
# The heading from which the README's blocks are the second walk's (launching and profiling).
LAUNCHING = "\n## Running a plan"
# A block containing the key runs right after the block containing the value (the README says
# it needs that block's output).
AFTER = {
    "lambdadnn launch plan.json --adaptive": "lambdadnn profile --workload digits-cnn",
}
# The exit code the README documents for a console command, when it is not 0.
EXIT_CODES = {"lambdadnn solve mobilenet-cifar10 --deadline-s 300 --json > fastest.json": 3}
# Console lines whose figures are timings: only the timing may differ from the README's.
TIMING = re.compile(r"\d[\d,]*(?:\.\d+)? m?s\b")
TIMED_LINES = ("  search ", "  solve ")


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    body: str

    @property
    def name(self) -> str:
        return f"line-{self.line}-{self.language}"


def blocks(text: str = README) -> list[Block]:
    """Every fenced block of `text`, with the line its fence opens on."""
    found = []
    for match in re.finditer(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", text, re.S | re.M):
        found.append(Block(text.count("\n", 0, match.start()) + 1, match.group(1),
                           match.group(2)))
    return found


def _key(table: dict[str, str], block: Block) -> str | None:
    keys = [key for key in table if key in block.body]
    assert len(keys) <= 1, f"{block.name} matches several keys: {keys}"
    return keys[0] if keys else None


def launching(block: Block) -> bool:
    """Whether `block` is in the second walk: at or after the LAUNCHING heading."""
    return block.line > README.count("\n", 0, README.index(LAUNCHING)) + 1


def shown(*, launches: bool) -> list[Block]:
    """The blocks of one walk that a reader runs (SKIPPED ones included), in the README's
    order."""
    return [block for block in blocks() if block.language in RUN
            and launching(block) == launches]


def runnable(*, launches: bool) -> list[Block]:
    """The blocks to run in one walk, in the order a reader runs them (AFTER moves a block
    later)."""
    order = [block for block in shown(launches=launches) if _key(SKIPPED, block) is None]
    for block in [block for block in order if _key(AFTER, block) is not None]:
        order.remove(block)
        (anchor,) = [other for other in order if AFTER[_key(AFTER, block) or ""] in other.body]
        order.insert(order.index(anchor) + 1, block)
    return order


def _environment(home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV") and not key.startswith("XDG_")}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    return env


def _shown(lines: list[str]) -> list[str]:
    return [TIMING.sub("…", line.rstrip()) if line.startswith(TIMED_LINES) else line.rstrip()
            for line in lines]


def _run_console(block: Block, cwd: Path, env: dict[str, str]) -> str | None:
    """Each `$ command`; `$ cat FILE` writes FILE with the text shown (the reader's file). The
    output must be the one shown, timings aside, with the documented exit code."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    for command, shown in steps:
        if command.startswith("cat "):
            (cwd / command.split()[1]).write_text("\n".join(shown) + "\n", encoding="utf-8")
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=HANG_GUARD_S)
        expected = EXIT_CODES.get(command, 0)
        if done.returncode != expected:
            return f"`{command}` exited {done.returncode}, not {expected}:\n{done.stdout}"
        if _shown(done.stdout.splitlines()) != _shown(shown):
            return f"`{command}` printed\n{done.stdout}\nnot what the README shows"
    return None


def _run(block: Block, cwd: Path, env: dict[str, str]) -> str | None:
    """What went wrong running `block` (None: it ran as printed)."""
    if block.language == "console":
        return _run_console(block, cwd, env)
    first = block.body.splitlines()[0]
    written = re.fullmatch(r"# ([\w/.-]+\.py)", first)
    if block.language == "python" and written:  # a file the reader is told to create
        path = cwd / written.group(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body, encoding="utf-8")
        return None
    command = (["python", "-c", block.body] if block.language == "python"
               else ["bash", "-e", "-o", "pipefail", "-c", block.body])
    done = subprocess.run(command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=HANG_GUARD_S)
    if done.returncode != 0:
        return f"exit {done.returncode}:\n{done.stdout[-4000:]}"
    return None


def walk(home: Path, *, launches: bool) -> dict[str, str | None]:
    """Run one walk's blocks in a reader's order in ~/project of the new `home`; a block's
    result is None when it ran as printed, else what went wrong."""
    project = home / "project"
    project.mkdir()
    # The Philly trace is downloaded from GitHub by the reader: a small one of ours stands in.
    (project / "cluster_job_log").write_bytes(
        (ROOT / "tests" / "data" / "philly" / "cluster_job_log").read_bytes())
    env = _environment(home)
    return {block.name: _run(block, project, env) for block in runnable(launches=launches)}


def ran_as_printed(block: Block, walked: dict[str, str | None]) -> None:
    """The test of one block of a walk: skipped with SKIPPED's reason, or run as printed."""
    skipped = _key(SKIPPED, block)
    if skipped is not None:
        pytest.skip(SKIPPED[skipped])
    problem = walked[block.name]
    assert problem is None, f"README {block.name}:\n{block.body}\n{problem}"


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    """The tour's walk: the blocks before LAUNCHING."""
    return walk(tmp_path_factory.mktemp("home"), launches=False)


@pytest.mark.real
@pytest.mark.parametrize("block", shown(launches=False), ids=lambda block: block.name)
def test_readme_block_runs_as_printed(block: Block, walkthrough: dict[str, str | None]) -> None:
    ran_as_printed(block, walkthrough)


def test_every_block_is_run_or_data() -> None:
    """A new block needs a language the reader can tell and this test runs (or one of data);
    every SKIPPED and AFTER key still names a block."""
    unknown = [b.name for b in blocks() if b.language not in RUN + NOT_RUN]
    assert unknown == [], f"blocks of no known language: {unknown}"
    for key in [*SKIPPED, *AFTER, *AFTER.values()]:
        assert sum(key in b.body for b in blocks()) == 1, f"{key!r} names no single block"
    for key, anchor in AFTER.items():  # a block and the one it needs are in one walk
        (block,) = [b for b in blocks() if key in b.body]
        (needed,) = [b for b in blocks() if anchor in b.body]
        assert launching(block) == launching(needed), f"{key!r} and {anchor!r} are split"


def test_the_walks_split_the_readme_at_launching() -> None:
    """Every run block is in exactly one walk; every block that writes or reads a plan file or
    profiles is in the second, so the walks share no file."""
    tour, launches = shown(launches=False), shown(launches=True)
    assert sorted(tour + launches, key=lambda b: b.line) == [
        b for b in blocks() if b.language in RUN]
    assert tour and launches and max(b.line for b in tour) < min(b.line for b in launches)
    assert all(launching(b) for b in blocks()
               if "plan.json" in b.body or "lambdadnn profile" in b.body)


def test_blocks_parses_languages_and_lines() -> None:
    text = "intro\n```sh\necho a\n```\n\n```console\n$ x\ny\n```\n"
    assert blocks(text) == [Block(2, "sh", "echo a\n"), Block(6, "console", "$ x\ny\n")]


def _block(language: str, after: str = "") -> str:
    start = README.index(after) if after else 0
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(README, start)
    assert match is not None, f"no ```{language} block after {after!r}"
    return match.group(1)


def _tour_output() -> list[str]:
    start = README.index(TOUR_COMMAND) + len(TOUR_COMMAND)
    return README[start:README.index("```", start)].splitlines()


def test_yaml_example_is_the_tours_instance_and_solves_to_the_tours_plan() -> None:
    example = yaml.safe_load(_block("yaml", after="## YAML schema"))
    shipped = yaml.safe_load(Path("instances/mobilenet-cifar10.yaml").read_text())
    assert example == shipped
    plan = solve(load_instance(example))
    shown = "\n".join(_tour_output())
    assert f"plan       {plan.functions} functions × {plan.memory_mb:,} MB" in shown
    assert f"cost       ${plan.cost_usd:.6f}" in shown


def test_solve_many_example_runs_and_meets_its_deadlines() -> None:
    """The README's `solve_many` example is code that runs, and its three jobs fit."""
    namespace: dict[str, object] = {}
    exec(_block("python", after="## Many jobs, one account"), namespace)
    schedule = namespace["schedule"]
    assert schedule.status == "optimal"  # type: ignore[attr-defined]
    assert [job.met for job in schedule.jobs] == [True, True, True]  # type: ignore[attr-defined]
