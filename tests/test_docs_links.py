"""Every relative link of the project's Markdown (README.md, docs/, benchmarks/README.md, examples/)
points at a file of the repository, and every ``#anchor`` at a heading of the page it names.

Links are read with markdown-it (the CommonMark parser), so links inside code blocks are not links,
and anchors are GitHub's heading slugs: lower case, punctuation other than ``-`` and ``_`` dropped,
spaces turned into ``-``, a repeated slug numbered ``-1``, ``-2``, ...
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        ROOT / "benchmarks" / "README.md",
        *ROOT.glob("examples/**/README.md"),
    ]
)
PARSER = MarkdownIt("commonmark").enable("table")


def links(path: Path) -> list[str]:
    found = []
    for token in PARSER.parse(path.read_text()):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(child.attrGet("href"))
            elif child.type == "image":
                found.append(child.attrGet("src"))
    return found


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    tokens = PARSER.parse(path.read_text())
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type != "heading_open":
            continue
        text = "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def relative_links(path: Path) -> list[tuple[str, Path, str]]:
    """(link as written, the file it names, its anchor) for every link that is not a URL."""
    out = []
    for href in links(path):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue
        target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        out.append((href, target, parts.fragment))
    return out


def test_the_pages_hold_links_to_check():
    assert sum(len(relative_links(page)) for page in PAGES) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_heading(page):
    broken = []
    for href, target, anchor in relative_links(page):
        if not target.is_relative_to(ROOT) or not target.exists():
            broken.append(f"{href}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{href}: {target.relative_to(ROOT)} has no heading #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links (fix the link or the heading):\n" + "\n".join(broken)
