"""docs/benchmarks.md holds the current figures, one row each; docs/bench-log/ holds every round and
the narrative. This checks the split keeps its promises:

- the current page stays short (at most ``MAX_LINES`` lines);
- no figure of the single-file document it replaced is lost: every number with a unit of that
  document (frozen in ``FROZEN``) still appears in the current page or the lab log;
- every section title of that document is a heading in the lab-log file the page's index names
  (open issues and code comments cite them by title);
- every link from the page into the lab log lands on a heading there.

``FROZEN`` was made from ``git show 64b7510:docs/benchmarks.md`` with ``python -m
tests.test_benchmarks_doc --freeze 64b7510``; a test re-derives it when git has that commit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

CURRENT = REPO / "docs" / "benchmarks.md"
LOG = REPO / "docs" / "bench-log"
FROZEN = REPO / "tests" / "data" / "benchmarks_figures.json"
MAX_LINES = 300
INDEX_HEADING = "## Where the old sections went"

#: Units a figure may carry, longest first where one is the start of another.
UNITS = ("GMAC/s", "tokens/s", "ms/step", "GB/s", "CPU-s", "core-s", "s/s", "GMAC", "TMAC", "GiB", "MiB",
         "GB", "MB", "KB", "kB", "ms", "min", "dB", "Hz", "cents", "st", "%", "x", "×", "s", "frames",
         "phonemes", "tokens", "characters", "calls", "tests")
_NUMBER = r"\d+(?:[.,]\d+)*(?:e-?\d+)?"
_FIGURE = re.compile(rf"(?<![\w.,/-])({_NUMBER}(?: ?[-–] ?{_NUMBER})?) ?(?:{'|'.join(map(re.escape, UNITS))})(?![\w/])")
_HEADING = re.compile(r"^(#{2,4}) (.+?)\s*$", re.MULTILINE)
_LOG_LINK = re.compile(r"\]\(bench-log/([\w.-]+\.md)(?:#([^)\s]*))?\)")


def normalized(text: str) -> str:
    """Whitespace runs as one space: a figure wrapped over two lines is still the same figure."""
    return re.sub(r"\s+", " ", text)


def figures(text: str) -> set[str]:
    """Every number (or range of numbers) with a unit in ``text``, as written."""
    return {m.group(0) for m in _FIGURE.finditer(normalized(text))}


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, title) of every ``##`` to ``####`` heading, in order."""
    return [(len(m.group(1)), m.group(2)) for m in _HEADING.finditer(markdown)]


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor; a repeated one gets ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, title in headings(markdown):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def freeze(text: str, source: str) -> dict:
    """What ``FROZEN`` keeps of the old document: its section titles and its figures."""
    return {"source": source, "headings": headings(text), "figures": sorted(figures(text))}


def index(current: str) -> dict[str, str]:
    """The page's index: old top-level section title -> lab-log file name."""
    part = current.split(INDEX_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| \[[^]]+\]\(bench-log/([\w.-]+\.md)\) \|$", part, re.MULTILINE)
    return dict(rows)


def _lab_log() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(LOG.glob("*.md"))}


@pytest.fixture(scope="module")
def frozen() -> dict:
    return json.loads(FROZEN.read_text(encoding="utf-8"))


def test_the_current_page_is_short():
    lines = CURRENT.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"docs/benchmarks.md has {lines} lines; move rounds to docs/bench-log/"


def test_no_figure_of_the_old_document_is_lost(frozen):
    assert len(frozen["figures"]) > 1000  # the freeze read the whole document
    now = figures(CURRENT.read_text(encoding="utf-8")) | {f for text in _lab_log().values() for f in figures(text)}
    lost = [f for f in frozen["figures"] if f not in now]
    assert not lost, f"{len(lost)} figures of the old docs/benchmarks.md are gone, e.g. {lost[:10]}"


def test_every_old_section_title_is_a_heading_where_the_index_says(frozen):
    where = index(CURRENT.read_text(encoding="utf-8"))
    log = {name: set(headings(text)) for name, text in _lab_log().items()}
    top = None
    for level, title in map(tuple, frozen["headings"]):
        if level == 2:
            assert title in where, f"the index of docs/benchmarks.md does not name {title!r}"
            top = title
        assert top is not None
        name = where[top]
        assert (level, title) in log.get(name, set()), f"{'#' * level} {title!r} is not a heading of bench-log/{name}"


def test_every_link_into_the_lab_log_lands_on_a_heading():
    log = _lab_log()
    links = _LOG_LINK.findall(CURRENT.read_text(encoding="utf-8"))
    assert links
    for name, anchor in links:
        assert name in log, f"docs/bench-log/{name} does not exist"
        if anchor:
            assert anchor in anchors(log[name]), f"no heading #{anchor} in docs/bench-log/{name}"


def test_the_frozen_list_is_the_old_documents(frozen):
    old = subprocess.run(["git", "show", frozen["source"]], cwd=REPO, capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip(f"git cannot show {frozen['source']} here (a shallow clone?)")
    assert json.loads(json.dumps(freeze(old.stdout, frozen["source"]))) == frozen


def test_figures_reads_numbers_with_units_and_ranges():
    text = "RTF 0.147-0.164, first chunk\n253 ms, 2.14x, 1,417 MB, 5.5e-6 s and 3 threads"
    assert figures(text) == {"253 ms", "2.14x", "1,417 MB", "5.5e-6 s"}
    assert "209-282 ms" in figures("clauses 209-282 ms")


def test_slug_is_githubs():
    assert slug("CosyVoice flow + HiFT") == "cosyvoice-flow--hift"
    assert slug("Round 3: the fused conv-input chains (`fused_runtime`, `kernels`; branch kfuse)") == (
        "round-3-the-fused-conv-input-chains-fused_runtime-kernels-branch-kfuse")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--freeze"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m tests.test_benchmarks_doc --freeze REV")
    source = f"{sys.argv[2]}:docs/benchmarks.md"
    text = subprocess.run(["git", "show", source], cwd=REPO, capture_output=True, text=True, check=True).stdout
    FROZEN.write_text(json.dumps(freeze(text, source), ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {FROZEN.relative_to(REPO)}")
