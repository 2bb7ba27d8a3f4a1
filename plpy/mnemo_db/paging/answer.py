"""memory_query's answers (docs/design.md §Phantom tools): the best lines of the full content of a
session's objects for a question, within a token budget (offline), or the helper
LLM's answer over the full content of the top objects. Either way nothing is
restored: the objects stay at their fidelity."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from .. import tokens

WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*[A-Za-z0-9_]|\d+(?:\.\d+)?")
STOP = frozenset(["a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "out", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "up", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your", "there", "here", "about", "after", "before", "just", "any", "some", "all", "been", "being", "also"])
# The helper sees at most this many tokens of the top objects' full content.
HELPER_CONTEXT_TOKENS = 12000
HELPER_SYSTEM = (
    "You answer a coding agent's question from the content of its own earlier context, "
    "which was evicted to save space. Use only the content given; quote exact identifiers, "
    "numbers, paths and error messages. If the content does not answer it, say so. Return only "
    "a JSON object {\"answer\": \"...\", \"sources\": [ids of the objects used, as given]}."
)


@dataclass(frozen=True)
class Source:
    """An object whose full content may answer: its id (obj:N) and text."""
    ref: str
    text: str


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD_RE.findall(text or "") if w.lower() not in STOP]


def _pieces(text: str) -> list[str]:
    """Lines, and the sentences of long lines."""
    out = []
    for line in (text or "").splitlines():
        line = line.rstrip()
        if not line.strip():
            continue
        if len(line) > 400:
            out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip())
        else:
            out.append(line)
    return out


def rank_sources(question: str, sources: list[Source]) -> list[tuple[float, Source]]:
    """Sources by BM25 of the question's words over their full text, best first (a
    source without any of the words is left out)."""
    from ..compile.retrieval import okapi  # here: record_message's backends need no numpy

    q = set(words(question))
    if not q or not sources:
        return []
    docs = [Counter(words(s.text)) for s in sources]
    n, avg = len(docs), (sum(sum(d.values()) for d in docs) / len(docs)) or 1.0
    df = Counter(w for d in docs for w in q if w in d)
    scored = []
    for s, d in zip(sources, docs):
        length = sum(d.values())
        score = sum(okapi(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)), d[w], length, avg) for w in q if w in d)
        if score > 0:
            scored.append((score, s))
    scored.sort(key=lambda x: -x[0])
    return scored


def extractive(question: str, sources: list[Source], max_tokens: int) -> tuple[str, list[str]]:
    """The lines of the sources that share the most of the question's words (weighted
    by how rare each word is among the lines), within max_tokens, in their sources'
    order and their own, each group under its source id. Returns (answer, ids)."""
    q = set(words(question))
    lines = [(k, i, piece) for k, s in enumerate(sources) for i, piece in enumerate(_pieces(s.text))]
    if not q or not lines:
        return "", []
    line_words = [set(words(p)) for _, _, p in lines]
    df = Counter(w for ws in line_words for w in q if w in ws)
    n = len(lines)
    scored = []
    for (k, i, piece), ws in zip(lines, line_words):
        hits = q & ws
        if not hits:
            continue
        score = sum(math.log(1 + n / df[w]) for w in hits) / math.sqrt(1 + len(ws) / 12)
        scored.append((score, k, i, piece))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]))
    chosen, used, headed = [], 0, set()
    for _, k, i, piece in scored:
        head = 0 if k in headed else tokens.count(f"[{sources[k].ref}]") + 1
        cost = tokens.count(piece) + 1 + head
        if cost > max_tokens - used and not chosen:
            piece = window(piece, q, max_tokens - head)  # one long line: the part around its first match
            cost = tokens.count(piece) + 1 + head
        if used + cost > max_tokens:
            continue
        chosen.append((k, i, piece))
        headed.add(k)
        used += cost
    chosen.sort()
    out, refs, last = [], [], None
    for k, _, piece in chosen:
        if k != last:
            refs.append(sources[k].ref)
            out.append(f"[{sources[k].ref}]")
            last = k
        out.append(piece)
    return "\n".join(out), refs


def window(piece: str, q: set[str], max_tokens: int) -> str:
    """The part of a long line around its first word of q, within max_tokens."""
    low = piece.lower()
    at = min((low.find(w) for w in q if low.find(w) >= 0), default=0)
    width = max_tokens * 3
    while width > 8:
        start = max(at - width // 3, 0)
        out = ("… " if start else "") + piece[start:start + width] + (" …" if start + width < len(piece) else "")
        if tokens.count(out) + 1 <= max_tokens:
            return out
        width = int(width * 0.8)
    return piece[:8]


def helper_prompt(question: str, sources: list[Source], max_tokens: int) -> list[dict]:
    """The helper LLM's messages: the question over the sources' full content, as much
    of it as HELPER_CONTEXT_TOKENS allows, best first."""
    parts, used = [], 0
    for s in sources:
        n = tokens.count(s.text)
        if used + n > HELPER_CONTEXT_TOKENS:
            if parts:
                break
            s = Source(s.ref, s.text[: HELPER_CONTEXT_TOKENS * 3])
        parts.append(f"=== {s.ref} ===\n{s.text}")
        used += n
    return [{"role": "system", "content": HELPER_SYSTEM},
            {"role": "user", "content": f"Question: {question}\nAnswer in at most {max_tokens} tokens.\n\n"
                                        + "\n\n".join(parts)}]


def helper_reply(reply: dict | None, sources: list[Source], max_tokens: int) -> tuple[str, list[str]] | None:
    """The helper's {answer, sources} checked: a non-empty answer (cut to max_tokens)
    and only ids it was given (the top source when it named none); None if unusable."""
    if not isinstance(reply, dict) or not isinstance(reply.get("answer"), str) or not reply["answer"].strip():
        return None
    answer = reply["answer"].strip()
    while tokens.count(answer) > max_tokens and len(answer) > 20:
        answer = answer[: int(len(answer) * 0.8)].rstrip() + " …"
    given = {s.ref for s in sources}
    named = [r for r in reply.get("sources") or [] if isinstance(r, str) and r in given]
    return answer, list(dict.fromkeys(named)) or [sources[0].ref]
