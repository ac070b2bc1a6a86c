"""Every relative link in the docs and the README resolves: the file exists and, where the
link names a section (``page.md#anchor``), the page has a heading with that anchor as
GitHub spells it. Pages move sections around (issue 44); a link left behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    to hyphens, a repeated heading numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    """Relative links outside code blocks (``http:``, ``mailto:`` and the like are not)."""
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with that anchor")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_anchors_follow_githubs_spelling(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Use\n## 2026-12-01 14:07 · sketches · the `XML`, timed\n"
                    "```\n# not a heading\n```\n## Use\n")
    assert anchors(page) == {"use", "use-1",
                             "2026-12-01-1407--sketches--the-xml-timed"}
