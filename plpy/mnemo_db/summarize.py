"""Offline, extractive multi-fidelity summaries with exactly computed declared losses.

Every piece of content can enter a context at four fidelities (DESIGN.md "Data
planes"): full, detail (~30 %), compact (~5 %) and stub (one line). Without a helper
LLM these come from this module: it selects whole units of the source (sentences of
prose, lines of code or logs) and never cuts one in half, so every kept statement is
verbatim. What to keep depends on the structure of the content:

- code keeps imports, signatures and declarations (the names a reader asks about);
- logs keep error/warning lines, the first and the last line, and counts;
- prose keeps its central sentences (term overlap with the whole text), favouring
  sentences with identifiers, paths and numbers.

Declared losses (seed 002 §6.2) are computed, not guessed: `dropped` lists the
identifiers, paths, numbers and error codes present in the source and absent from
the level's text; `key_entities` the ones kept. Each level is selected from the
level above (compact from detail, stub from compact), so losses accumulate down the
ladder (seed 002 §6.3).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from . import tokens

LEVELS = ("detail", "compact", "stub")
TARGET_RATIO = {"detail": 0.30, "compact": 0.05}
# Below this many tokens a lower fidelity saves too little to be worth a separate
# version: the item is offered at full fidelity (and stub) only.
MIN_TOKENS_FOR_SUMMARY = 60
STUB_MAX_CHARS = 160
MAX_DECLARED = 24  # entries listed per loss list; the rest are counted

# Things a later question may need verbatim: paths, dotted/qualified names, calls,
# snake/camel identifiers, error codes, numbers with units, versions, URLs.
_ENTITY_RE = re.compile(
    r"""(?x)
    (?:https?://[^\s)\]>'"]+)                              # URLs
  | (?:\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?)   # dates, timestamps
  | (?:\b\d{1,2}:\d{2}(?::\d{2})?\b)                       # times
  | (?:[\w.-]*/[\w./-]+|[\w-]+\.(?:py|js|ts|tsx|json|md|sql|toml|yaml|yml|go|rs|java|c|h|cpp|sh|txt|lock|cfg|ini))
  | (?:\b[A-Z][A-Z0-9]*[-_][A-Z0-9_-]+\b)                  # ERR_CODE, HTTP-404
  | (?:\b[A-Za-z_][\w]*\(\))                               # call()
  | (?:\b[a-z]+(?:_[a-z0-9]+)+\b)                          # snake_case
  | (?:\b[a-z]+[A-Z][A-Za-z0-9]+\b)                        # camelCase
  | (?:\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\b)              # PascalCase
  | (?:\bv?\d+(?:\.\d+)+\b)                                # versions, decimals
  | (?:\b\d[\d,]*(?:\s?(?:ms|s|kb|mb|gb|tb|%|px|rpm))?\b)  # numbers with units
    """
)
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n{2,}")
_WORD_RE = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "do", "does", "did", "for", "from", "had", "has", "have", "he", "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "too", "us", "was", "we", "were", "what", "when", "where", "which", "who", "will", "with", "you", "your", "yes", "ok", "okay", "just", "also", "very", "really"]
)
_CODE_DECL_RE = re.compile(
    r"^\s*(?:import |from \S+ import |#include|using |package |require\(|const \w+ = require"
    r"|(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|fn|func|interface|type"
    r"|struct|enum|trait|impl|module|public|private|protected|static)\b"
    r"|CREATE |ALTER |@\w+)"
)
_LOG_ALERT_RE = re.compile(r"(?i)\b(error|errno|exception|traceback|fatal|fail(?:ed|ure)?|warn(?:ing)?|panic|denied|refused|timeout|exit code|not found)\b")
_LOG_LINE_RE = re.compile(r"^\s*(?:\[?\d{4}-\d{2}-\d{2}|\[?\d{2}:\d{2}:\d{2}|(?:DEBUG|INFO|WARN|WARNING|ERROR|TRACE|FATAL)\b)")


@dataclass
class Level:
    text: str
    tokens: int
    dropped: list[str] = field(default_factory=list)
    dropped_count: int = 0
    can_answer: list[str] = field(default_factory=list)
    fault_when: list[str] = field(default_factory=list)
    key_entities: list[str] = field(default_factory=list)

    def losses(self) -> dict:
        return {
            "dropped": self.dropped,
            "dropped_count": self.dropped_count,
            "can_answer": self.can_answer,
            "fault_when": self.fault_when,
            "key_entities": self.key_entities,
        }


def entities(text: str) -> list[str]:
    """Identifiers, paths, numbers and codes in order of first appearance (unique)."""
    seen: dict[str, None] = {}
    for m in _ENTITY_RE.finditer(text):
        e = m.group(0).strip().rstrip(".,:;")
        if len(e) > 1 and e not in seen:
            seen[e] = None
    return list(seen)


def detect_structure(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "prose"
    n = len(lines)
    code = sum(1 for ln in lines if _CODE_DECL_RE.match(ln)
               or ln.rstrip().endswith(("{", "}", ";", ":", ")", ",", "("))
               and ln.startswith((" ", "\t", "}")))
    log = sum(1 for ln in lines if _LOG_LINE_RE.match(ln))
    if n >= 3 and log / n >= 0.3:
        return "log"
    if n >= 3 and code / n >= 0.2:
        return "code"
    if any(ln.startswith("#") for ln in lines) or "\n\n" in text and text.count(". ") >= n / 4:
        return "prose"  # markdown and wrapped paragraphs
    if n >= 5 and sum(len(ln) for ln in lines) / n < 60 and text.count(". ") < n / 3:
        return "lines"  # listings: ls, grep, csv ...
    return "prose"


def _units(text: str, structure: str) -> list[str]:
    if structure == "prose":
        units = []
        for para in re.split(r"\n\s*\n", text):
            lines = [ln.strip() for ln in para.splitlines() if ln.strip()]
            # Headings, list items and code lines stay units; wrapped lines are joined.
            buf: list[str] = []
            for ln in lines:
                if ln.startswith(("#", "- ", "* ", "|", "```")) or re.match(r"\d+\. ", ln):
                    if buf:
                        units.extend(_SENTENCE_RE.split(" ".join(buf)))
                        buf = []
                    units.append(ln)
                else:
                    buf.append(ln)
            if buf:
                units.extend(_SENTENCE_RE.split(" ".join(buf)))
        return [u.strip() for u in units if u and u.strip()]
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def _score_units(units: list[str], structure: str) -> list[float]:
    """Centrality in [0, 1] (mean share of units using the unit's words) plus bonuses
    for what the structure says matters: declarations, alerts, first and last lines."""
    words = [{w for w in _WORD_RE.findall(u.lower()) if w not in _STOP} for u in units]
    doc = Counter(w for ws in words for w in ws)
    n = len(units)
    scores = []
    for i, (u, ws) in enumerate(zip(units, words)):
        centrality = sum(doc[w] - 1 for w in ws) / (len(ws) * max(n - 1, 1)) if ws else 0.0
        s = centrality + 0.1 * min(len(_ENTITY_RE.findall(u)), 6)
        if structure == "code":
            s += 2.0 if _CODE_DECL_RE.match(u) else 0.0
        elif structure == "log":
            s += 2.0 if _LOG_ALERT_RE.search(u) else 0.0
            s += 1.5 if i in (0, n - 1) else 0.0
        elif structure == "lines":
            s += 1.0 if i in (0, n - 1) else 0.0
        else:
            s += 0.5 if i == 0 or u.startswith("#") else 0.0  # lead sentence, headings
        scores.append(s)
    return scores


def _select(units: list[str], scores: list[float], unit_tokens: list[int], budget: int) -> list[int]:
    """Indices of the best units (by score, ties to earlier) that fit the budget, in
    order, skipping near-repeats of a unit already kept (word overlap >= 0.6) so
    that a summary is not ten variations of one line."""
    words = [set(_WORD_RE.findall(u.lower())) - _STOP for u in units]
    chosen: list[int] = []
    used = 0
    for i in sorted(range(len(units)), key=lambda i: (-scores[i], i)):
        if used + unit_tokens[i] > budget:
            continue
        if words[i] and any(len(words[i] & words[j]) / len(words[i] | words[j]) >= 0.6
                            for j in chosen if words[j]):
            continue
        chosen.append(i)
        used += unit_tokens[i]
    if not chosen and units:  # always keep the single best unit
        chosen = [max(range(len(units)), key=lambda i: (scores[i], -i))]
    return sorted(chosen)


def _join(units: list[str], chosen: list[int], structure: str, total: int) -> str:
    sep = " " if structure == "prose" else "\n"
    parts: list[str] = []
    prev = -1
    for i in chosen:
        if i != prev + 1:
            parts.append("[…]")
        parts.append(units[i])
        prev = i
    omitted = total - len(chosen)
    if chosen and chosen[-1] != len(units) - 1:
        parts.append("[…]")
    text = sep.join(parts)
    if structure in ("log", "lines") and omitted:
        text += f"{sep}[{omitted} of {total} lines omitted]"
    return text


def _present(entity: str, text: str) -> bool:
    """Whether an entity occurs in a text as a whole token (not inside a longer one)."""
    return re.search(r"(?<![\w.])" + re.escape(entity) + r"(?![\w])", text) is not None


def _declare(source_entities: list[str], text: str, structure: str, what: str) -> Level:
    kept = [e for e in source_entities if _present(e, text)]
    dropped = [e for e in source_entities if not _present(e, text)]
    level = Level(text=text, tokens=tokens.count(text))
    level.key_entities = kept[:MAX_DECLARED]
    level.dropped = dropped[:MAX_DECLARED]
    level.dropped_count = len(dropped)
    level.can_answer = [f"what the {what} is about"] + (
        [f"questions about {', '.join(kept[:6])}"] if kept else []
    )
    level.fault_when = (
        [f"the exact value or text of: {', '.join(dropped[:8])}"] if dropped else []
    ) + ([f"the exact {structure} lines that were omitted"] if structure != "prose" else
         ["the wording of the omitted sentences"])
    return level


def stub_line(kind: str, when: str | None, headline: str, related: int = 0) -> str:
    """One-line stub in the seed 002 §6.1 format: [type | time | description | N related]."""
    headline = " ".join(headline.split())
    if len(headline) > STUB_MAX_CHARS:
        cut = headline[:STUB_MAX_CHARS].rsplit(" ", 1)[0]
        headline = cut + " …"
    parts = [kind] + ([when] if when else []) + [headline]
    if related:
        parts.append(f"{related} related")
    return "[" + " | ".join(parts) + "]"


def summarize(text: str, kind: str = "note", when: str | None = None) -> dict[str, Level]:
    """The detail, compact and stub levels of a text, with declared losses.

    Short texts (< MIN_TOKENS_FOR_SUMMARY tokens) get no detail/compact level.
    """
    text = text or ""
    structure = detect_structure(text)
    units = _units(text, structure)
    source_entities = entities(text)
    full_tokens = tokens.count(text)
    what = {"code": "code", "log": "log", "lines": "listing"}.get(structure, kind.replace("_", " "))
    levels: dict[str, Level] = {}
    chosen = list(range(len(units)))
    if full_tokens >= MIN_TOKENS_FOR_SUMMARY and len(units) > 1:
        unit_tokens = [tokens.count(u) for u in units]
        scores = _score_units(units, structure)
        for name in ("detail", "compact"):
            # Each level selects from the units the level above kept.
            budget = max(int(full_tokens * TARGET_RATIO[name]), 12)
            sub = _select([units[i] for i in chosen], [scores[i] for i in chosen],
                          [unit_tokens[i] for i in chosen], budget)
            chosen = [chosen[i] for i in sub]
            body = _join(units, chosen, structure, len(units))
            levels[name] = _declare(source_entities, body, structure, what)
    # The stub's headline: the first kept unit that says something (not a bare title).
    headline = next((units[i] for i in chosen if len(units[i].split()) >= 4),
                    units[chosen[0]] if units else "")
    stub = stub_line(kind, when, headline)
    levels["stub"] = _declare(source_entities, stub, structure, what)
    # Losses accumulate: a lower level declares at least what the level above dropped.
    above: Level | None = None
    for name in LEVELS:
        lv = levels.get(name)
        if lv is None:
            continue
        if above is not None:
            lv.fault_when = list(dict.fromkeys(above.fault_when + lv.fault_when))
        above = lv
    return levels


def summarize_json(text: str, kind: str = "note", when: str | None = None) -> dict:
    """summarize() as plain JSON: {level: {text, tokens, losses}}."""
    return {
        name: {"text": lv.text, "tokens": lv.tokens, "losses": lv.losses()}
        for name, lv in summarize(text, kind, when).items()
    }
