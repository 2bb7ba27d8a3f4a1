"""Offline, extractive multi-fidelity summaries with exactly computed declared losses.

Every piece of content can enter a context at four fidelities
(docs/design.md §Fidelity ladder): full, detail (~30 %), compact (~5 %) and stub (one line). Without a helper
LLM these come from this module: it selects whole units of the source (sentences of
prose, lines of code or logs) and never cuts one in half, so every kept statement is
verbatim. What to keep depends on the structure of the content:

- code keeps imports, signatures and declarations (the names a reader asks about);
- logs keep error/warning lines, the first and the last line, and counts;
- prose keeps its central sentences (term overlap with the whole text), favouring
  sentences with identifiers, paths and numbers.

Declared losses (docs/design.md §Fidelity ladder) are computed, not guessed: `dropped` lists the
identifiers, paths, numbers and error codes present in the source and absent from
the level's text; `key_entities` the ones kept. Each level is selected from the
level above (compact from detail, stub from compact), so losses accumulate down the
ladder (docs/design.md §Fidelity ladder).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .. import tokens

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


OMITTED_HINT = {"prose": "the wording of the omitted sentences",
                "transcript": "the wording of the omitted messages and tool outputs"}


def _declare(source_entities: list[str], text: str, structure: str, what: str,
             above: Level | None = None) -> Level:
    """A level's declared losses, computed against the source (docs/design.md §Fidelity ladder):
    `key_entities` are the source's entities present in the text, `dropped` the ones
    absent from it. Losses accumulate down the ladder: `dropped` and
    `fault_when` start with what the level above declared, `can_answer` only narrows."""
    kept = [e for e in source_entities if _present(e, text)]
    absent = [e for e in source_entities if not _present(e, text)]
    inherited = [e for e in (above.dropped if above else []) if not _present(e, text)]
    dropped = list(dict.fromkeys(inherited + absent))
    level = Level(text=text, tokens=tokens.count(text))
    level.key_entities = kept[:MAX_DECLARED]
    level.dropped = dropped[:MAX_DECLARED]
    level.dropped_count = len(dropped)
    own_answer = [f"what the {what} is about"] + (
        [f"questions about {', '.join(kept[:6])}"] if kept else [])
    level.can_answer = own_answer if above is None else [
        a for a in own_answer if a in above.can_answer or a.startswith("what the ")]
    own_fault = ([f"the exact value or text of: {', '.join(dropped[:8])}"] if dropped else []) + [
        OMITTED_HINT.get(structure, f"the exact {structure} lines that were omitted")]
    level.fault_when = list(dict.fromkeys((above.fault_when if above else []) + own_fault))
    return level


def stub_line(kind: str, when: str | None, headline: str, related: int = 0,
              max_tokens: int | None = None) -> str:
    """One-line stub in the format of docs/design.md §Fidelity ladder: [type | time | description | N related].

    With max_tokens the description is shortened (whole words, then dropped, then
    the time) until the line fits, so a stub is never longer than the level above; a
    text too short for even "[kind]" is its own stub."""
    headline = " ".join(headline.split())
    if len(headline) > STUB_MAX_CHARS:
        headline = headline[:STUB_MAX_CHARS].rsplit(" ", 1)[0] + " …"

    def line(head: str | None, with_when: bool = True, with_related: bool = True) -> str:
        parts = [kind] + ([when] if when and with_when else []) + ([head] if head else [])
        if related and with_related:
            parts.append(f"{related} related")
        return "[" + " | ".join(parts) + "]"

    out = line(headline)
    if max_tokens is None or tokens.count(out) <= max_tokens:
        return out
    words = headline.split()
    lo, hi = 0, len(words) - 1  # longest prefix of words that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens.count(line(" ".join(words[:mid]) + " …")) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    if lo > 0:
        return line(" ".join(words[:lo]) + " …")
    for candidate in (line(None), line(None, with_related=False),
                      line(None, with_when=False, with_related=False)):
        if tokens.count(candidate) <= max_tokens:
            return candidate
    return headline  # a text shorter than "[kind]" is its own stub


@dataclass
class _Source:
    """What the ladder is built from: selectable units with scores, and how to join them."""
    units: list[str]
    scores: list[float]
    structure: str
    what: str
    entities: list[str]
    full_tokens: int
    join: object  # (chosen indices) -> text
    headline: object  # (chosen indices) -> str


def _ladder(src: _Source, kind: str, when: str | None, related: int = 0) -> dict[str, Level]:
    """detail (~30 %), compact (~5 %) selected from the level above, then the stub.

    Invariants (tested): each level is strictly shorter than the level above (a level
    that would not be is left out), every key entity occurs in the text, no dropped
    entity does, and losses accumulate downwards."""
    levels: dict[str, Level] = {}
    n = len(src.units)
    chosen = list(range(n))
    above: Level | None = None
    above_tokens = src.full_tokens
    if src.full_tokens >= MIN_TOKENS_FOR_SUMMARY and n > 1:
        unit_tokens = [tokens.count(u) for u in src.units]
        for name in ("detail", "compact"):
            budget = max(int(src.full_tokens * TARGET_RATIO[name]), 12)
            sub = _select([src.units[i] for i in chosen], [src.scores[i] for i in chosen],
                          [unit_tokens[i] for i in chosen], budget)
            picked = [chosen[i] for i in sub]
            lv = _declare(src.entities, src.join(picked), src.structure, src.what, above)
            if lv.tokens >= above_tokens:
                continue  # selection saved nothing: no separate level
            chosen, levels[name], above, above_tokens = picked, lv, lv, lv.tokens
    headline = src.headline(chosen) if n else ""
    stub = stub_line(kind, when, headline, related, max_tokens=above_tokens)
    levels["stub"] = _declare(src.entities, stub, src.structure, src.what, above)
    return levels


def summarize(text: str, kind: str = "note", when: str | None = None) -> dict[str, Level]:
    """The detail, compact and stub levels of a text, with declared losses.

    Short texts (< MIN_TOKENS_FOR_SUMMARY tokens) get a stub only.
    """
    text = text or ""
    structure = detect_structure(text)
    units = _units(text, structure)
    what = {"code": "code", "log": "log", "lines": "listing"}.get(structure, kind.replace("_", " "))
    src = _Source(
        units=units, scores=_score_units(units, structure) if units else [],
        structure=structure, what=what, entities=entities(text), full_tokens=tokens.count(text),
        join=lambda chosen: _join(units, chosen, structure, len(units)),
        headline=lambda chosen: _headline([units[i] for i in chosen]),
    )
    return _ladder(src, kind, when)


def _headline(units: list[str]) -> str:
    """A stub's description: the first unit that says something (not a bare title)."""
    return next((u for u in units if len(u.split()) >= 4), units[0] if units else "")


def stub_json(text: str, kind: str, when: str | None, max_tokens: int) -> dict:
    """The stub level alone, as summarize_json writes levels, made without summarising
    (no scoring or selection of units, no count of the text): the description is the
    text's own first unit that says something, the line no longer than max_tokens (the
    caller's count of the text). What a compile offers below full fidelity of a text
    whose levels its embed job has not stored yet (docs/design.md §Fidelity ladder)."""
    text = text or ""
    return {"stub": {"text": stub_line(kind, when, _headline(_units(text, detect_structure(text))),
                                       max_tokens=max_tokens)}}


# Compacted history (docs/design.md §Lifecycle): a span of messages becomes one summary --------------

ROLE_WEIGHT = {"user": 0.6, "system": 0.8, "developer": 0.6, "assistant": 0.3, "tool": 0.0}
CALL_ARGS_CHARS = 160


def message_label(m: dict) -> str:
    """How a message is introduced in a transcript: `user:`, `assistant:`, `tool shell:`."""
    if m.get("role") == "tool":
        return f"tool {m.get('name') or m.get('tool_name') or m.get('tool_call_id') or ''}".rstrip() + ":"
    return f"{m.get('role', 'message')}:"


def _message_units(m: dict) -> tuple[list[str], list[float], str]:
    text = m.get("content") or ""
    structure = detect_structure(text)
    units = _units(text, structure)
    scores = _score_units(units, structure) if units else []
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        args = " ".join(str(fn.get("arguments") or "").split())
        if len(args) > CALL_ARGS_CHARS:
            args = args[:CALL_ARGS_CHARS].rsplit(" ", 1)[0] + " …"
        units.append(f"calls {fn.get('name', '?')}({args})")
        scores.append(1.0)
    return units, scores, structure


def transcript(messages: list[dict]) -> str:
    """The span as one text, a block per message: what `full` of the summary is."""
    blocks = []
    for m in messages:
        units, _, structure = _message_units(m)
        body = ("\n" if structure in ("code", "log", "lines") else " ").join(units)
        blocks.append(f"{message_label(m)} {body}".rstrip())
    return "\n\n".join(blocks)


def summarize_transcript(messages: list[dict], when: str | None = None,
                         kind: str = "summary") -> tuple[str, dict[str, Level]]:
    """The full transcript of a span of history and its detail / compact / stub levels.

    Structure-aware per message (code keeps declarations, logs their errors and first
    and last lines, prose its central sentences), with user and system turns (an
    earlier summary) weighted up; each kept message keeps its role label and says how
    many of its units were left out. Returns (full text, levels)."""
    full = transcript(messages)
    units: list[str] = []
    scores: list[float] = []
    owner: list[int] = []  # message index of each unit
    per_msg: list[tuple[int, str]] = []  # (unit count, structure)
    for k, m in enumerate(messages):
        mu, ms, structure = _message_units(m)
        weight = ROLE_WEIGHT.get(m.get("role"), 0.0)
        units += mu
        scores += [s + weight for s in ms]
        owner += [k] * len(mu)
        per_msg.append((len(mu), structure))

    def join(chosen: list[int]) -> str:
        by_msg: dict[int, list[int]] = {}
        for i in chosen:
            by_msg.setdefault(owner[i], []).append(i)
        blocks = []
        for k, idx in by_msg.items():
            count, structure = per_msg[k]
            sep = "\n" if structure in ("code", "log", "lines") else " "
            body = sep.join(units[i] for i in idx)
            if len(idx) < count:
                body += f"{sep}[{count - len(idx)} of {count} omitted]"
            blocks.append(f"{message_label(messages[k])} {body}")
        left_out = len(messages) - len(by_msg)
        if left_out:
            blocks.append(f"[{left_out} of {len(messages)} messages omitted]")
        return "\n".join(blocks)

    def headline(chosen: list[int]) -> str:
        firsts = [units[i] for i in chosen if messages[owner[i]].get("role") == "user"
                  and len(units[i].split()) >= 4]
        return firsts[0] if firsts else next(
            (units[i] for i in chosen if len(units[i].split()) >= 4), units[chosen[0]] if chosen else "")

    src = _Source(units=units, scores=scores, structure="transcript", what="conversation",
                  entities=entities(full), full_tokens=tokens.count(full), join=join,
                  headline=headline)
    return full, _ladder(src, kind, when, related=len(messages))


def levels_json(levels: dict[str, Level]) -> dict:
    """Levels as plain JSON: {level: {text, tokens, losses}}."""
    return {name: {"text": lv.text, "tokens": lv.tokens, "losses": lv.losses()}
            for name, lv in levels.items()}


def summarize_json(text: str, kind: str = "note", when: str | None = None) -> dict:
    """summarize() as plain JSON: {level: {text, tokens, losses}}."""
    return levels_json(summarize(text, kind, when))
