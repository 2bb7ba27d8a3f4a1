"""The documentation a newcomer reads holds together: every relative link in README.md,
CONTRIBUTING.md and docs/ names a file that exists and, with a #fragment, a heading
of that file; the README stays short; and the code cites only documents the
repository holds (docs/design.md), not the specifications it was first written from."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
CODE_DIRS = ("sql", "plpy", "src", "cron", "tests", "bench")


def anchors(text: str) -> set[str]:
    """GitHub's ids of a Markdown file's headings: lower case, punctuation but - and _
    dropped, spaces as -, a repeated id suffixed -1, -2 ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(doc: pathlib.Path) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", doc.read_text()))
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading #{fragment} in {dest}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    assert broken_links(doc) == []


def test_a_broken_link_is_found(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n\n[ok](#title) [gone](b.md) [no heading](a.md#nowhere)\n"
                   "`[in code](d.md)`\n```\n[in a fence](c.md)\n```\n")
    assert [b.split(":")[0] for b in broken_links(doc)] == ["b.md", "a.md#nowhere"]


def test_anchors_follow_github():
    assert anchors("# The proxy (`mnemo serve`)\n## Settings\n## Settings\n") == {
        "the-proxy-mnemo-serve", "settings", "settings-1"}


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
