"""The documentation a user reads: every relative link and image in README.md and docs/*.md
opens a file a commit carries (tracked, or new and not ignored; never one .gitignore drops),
every anchor names a heading of its target, every `X.md` named in prose exists, and no page
cites an issue number the user cannot see."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMG_SRC = re.compile(r"<img\b[^>]*\bsrc=[\"']([^\"']+)[\"']", re.I)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
MD_NAMED = re.compile(r"(?<![\w./-])([\w./-]*[\w-]\.md)\b")
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+|(?<![\w/&(])#\d+\b", re.I)


def _git(*args: str) -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: which files a commit carries is unknown")
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def _carried() -> set[Path]:
    """Files a commit of this tree carries: tracked, or untracked and not ignored; less any
    that a .gitignore pattern matches (a tracked file force-added past it would be lost by a
    fresh `git add`)."""
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    names = [name for name in listed if name]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-z"],
                             cwd=ROOT, input="\0".join(names), capture_output=True,
                             text=True).stdout.split("\0")
    return {ROOT / name for name in set(names) - set(ignored) if (ROOT / name).is_file()}


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(text: str) -> str:
    """The text with fenced code blocks and inline code removed: links there are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, punctuation but `-` and
    `_` dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"[`*]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, repeated headings suffixed -1, -2, … as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, text: str, carried: set[Path]) -> list[str]:
    """What is wrong with each relative link of `text`, the page at `page`, one line each."""
    prose = _prose(text)
    problems = []
    for target in LINK.findall(prose) + IMG_SRC.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, …
            continue
        path_part, _, anchor = target.partition("#")
        where = f"{page.relative_to(ROOT)}: ({target})"
        if not path_part:
            if anchor not in anchors(text):
                problems.append(f"{where}: no heading of this page has the anchor #{anchor}")
            continue
        resolved = (page.parent / path_part).resolve()
        if resolved not in carried:
            exists = "is ignored or untracked" if resolved.exists() else "does not exist"
            problems.append(f"{where}: {path_part} {exists}")
        elif (anchor and resolved.suffix == ".md"
              and anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            problems.append(f"{where}: no heading of {resolved.name} has the anchor #{anchor}")
    return problems


def test_slug_matches_githubs_anchors() -> None:
    assert slug("Re-planning a run as it goes (`Controller`, `launch --adaptive`)") == (
        "re-planning-a-run-as-it-goes-controller-launch---adaptive")
    assert slug("Many jobs, one account: `solve_many`") == "many-jobs-one-account-solve_many"
    assert slug("See [MODEL.md](docs/MODEL.md) **now**") == "see-modelmd-now"


@pytest.mark.real
def test_broken_links_finds_a_missing_file_an_ignored_image_and_a_bad_anchor(
    tmp_path: Path,
) -> None:
    """The checker itself can fail: each kind of breakage is reported."""
    text = ("[a](DESIGN.md) ![b](img/x.png) [c](MODEL.md#no-such-heading) [d](../.venv/pyvenv.cfg)"
            "\n[e](https://example.com/DESIGN.md) [f](#no-anchor) `[g](code.md)`\n```sh\n"
            "[h](fenced.md)\n```\n")
    problems = broken_links(ROOT / "docs" / "page.md", text, _carried())
    assert problems == [
        "docs/page.md: (DESIGN.md): DESIGN.md does not exist",
        "docs/page.md: (img/x.png): img/x.png does not exist",
        "docs/page.md: (MODEL.md#no-such-heading): no heading of MODEL.md has the anchor "
        "#no-such-heading",
        "docs/page.md: (../.venv/pyvenv.cfg): ../.venv/pyvenv.cfg is ignored or untracked",
        "docs/page.md: (#no-anchor): no heading of this page has the anchor #no-anchor",
    ]


@pytest.mark.real
@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_every_relative_link_and_image_resolves(page: Path) -> None:
    assert broken_links(page, page.read_text(encoding="utf-8"), _carried()) == []


@pytest.mark.real
@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_every_page_named_in_prose_exists(page: Path) -> None:
    """`DESIGN.md` written as plain text is as broken as a link to it: a `X.md` a page names
    must exist beside the page or from the repository's root (links are checked above)."""
    carried = _carried()
    text = LINK.sub("", page.read_text(encoding="utf-8"))
    missing = sorted({name for name in MD_NAMED.findall(text)
                      if (page.parent / name).resolve() not in carried
                      and (ROOT / name).resolve() not in carried})
    assert missing == [], f"{page.relative_to(ROOT)} names pages that are not shipped: {missing}"


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.name)
def test_no_page_cites_an_issue_number(page: Path) -> None:
    """Issue numbers mean nothing to a user of the package: a page names the feature."""
    cited = [match.group(0) for match in ISSUE.finditer(page.read_text(encoding="utf-8"))]
    assert cited == [], f"{page.relative_to(ROOT)} cites {cited}"
