"""The documentation a newcomer reads holds together: every relative link in README.md,
CONTRIBUTING.md and docs/ names a file that exists and, with a #fragment, a heading
of that file; the README stays short; and the code cites only documents the
repository holds (docs/design.md), not the specifications it was first written from."""

from __future__ import annotations

import pathlib
import re
import subprocess

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


def source_files() -> list[pathlib.Path]:
    """The text files of the code directories, as the repository holds them (build
    output such as *.egg-info left out), else as the disk does."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--", *CODE_DIRS],
                                capture_output=True, text=True, check=True).stdout.split()
        files = [ROOT / f for f in listed]
    except (OSError, subprocess.CalledProcessError):
        files = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*")]
    return [p for p in files if p.is_file() and p.suffix in (".py", ".sql", ".sh", ".md", ".txt", "")]


def test_code_cites_only_the_repository():
    """The specifications the code first cited are outside the repository; the
    design is docs/design.md, which the code cites by section."""
    cited = re.compile(r"seed 00[0-4]|DESIGN\.md")
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in source_files()
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if cited.search(line)]
    assert hits == []


def test_cited_design_sections_exist():
    """Every design citation in the code ("docs/design.md" and a section) names a
    heading of docs/design.md."""
    headings = sorted({re.sub(r"^#+\s+", "", line).strip()
                       for line in (ROOT / "docs/design.md").read_text().splitlines() if line.startswith("#")},
                      key=len, reverse=True)
    missing = []
    for p in source_files():
        for rest in re.findall(r"docs/design\.md §(.*)", p.read_text(errors="replace")):
            if not any(re.match(re.escape(h) + r"\b", rest) for h in headings):
                missing.append(f"{p.relative_to(ROOT)}: §{rest[:40]}")
    assert missing == []
