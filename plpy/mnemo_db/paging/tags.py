"""Cleanup tags (docs/design.md §Semantic objects and paging; the model's side of cooperative eviction): directives
an assistant writes in its text, parsed by record_message, applied to the objects
they name, and stripped from the stored text (so compile_context never sends them
back). The forms, with ids as the context shows them (obj:N, msg:N):

    <mnemo:drop ids="obj:3 msg:40"/>                        evict them
    <mnemo:summarize id="obj:3">what mattered</mnemo:summarize>   compact, with this summary
    <mnemo:anchor id="obj:3"/>                              keep it at full fidelity
    <mnemo:collapse ids="obj:3 obj:4">one summary</mnemo:collapse>  the first carries the
                                                            summary, the others are evicted
    <mnemo:declare_losses id="obj:3">exact numbers</mnemo:declare_losses>
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIONS = ("drop", "summarize", "anchor", "collapse", "declare_losses")
TAG_RE = re.compile(
    r"<mnemo:(?P<action>[a-z_]+)(?P<attrs>(?:\s+[a-z_]+\s*=\s*\"[^\"]*\")*)\s*"
    r"(?:/>|>(?P<body>.*?)</mnemo:(?P=action)\s*>)", re.DOTALL)
ATTR_RE = re.compile(r"([a-z_]+)\s*=\s*\"([^\"]*)\"")
ID_RE = re.compile(r"\b(?:obj|msg|mem):\d+\b")
MAX_BODY_CHARS = 4000


@dataclass(frozen=True)
class Tag:
    action: str
    ids: tuple[str, ...]
    body: str | None


def parse(text: str | None) -> tuple[list[Tag], str | None]:
    """The cleanup tags of an assistant text, and the text without them (None when
    it had none: the text is then stored as it came). Tags of an unknown action,
    or naming no id, are stripped and ignored."""
    if not text or "<mnemo:" not in text:
        return [], None
    tags = []
    for m in TAG_RE.finditer(text):
        attrs = dict(ATTR_RE.findall(m.group("attrs") or ""))
        ids = tuple(dict.fromkeys(ID_RE.findall(" ".join(attrs.get(k, "") for k in ("id", "ids")))))
        body = (m.group("body") or "").strip()[:MAX_BODY_CHARS] or None
        if m.group("action") in ACTIONS and ids:
            tags.append(Tag(m.group("action"), ids, body))
    stripped = TAG_RE.sub("", text)
    stripped = re.sub(r"[ \t]+\n", "\n", re.sub(r"\n{3,}", "\n\n", stripped)).strip()
    return tags, stripped
