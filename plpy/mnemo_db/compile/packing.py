"""Packing the memory block: each candidate's fidelity options (memory-block lines
and their exact token costs), the greedy multiple-choice knapsack that picks one per
item within a budget, and the block's text and cost."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime

from .. import tokens
from ..lifecycle import summarize
from .levels import when
from .policy import LOWER_FIDELITY_MAX_SHARE, MEMORY_HEADER, MESSAGE_SUMMARY_MIN_TOKENS

# Fewer candidate lines than this are counted on one thread: handing half to another
# thread costs a thread wake-up, more than counting a few short lines.
PARALLEL_COUNT_MIN_LINES = 16


@dataclass(slots=True)
class Option:
    fidelity: str
    text: str
    tokens: int


# eq=False: an item is itself (removing one from a list compares identities); slots:
# ~90 are made per compile and packing reads their attributes in its inner loops
@dataclass(eq=False, slots=True)
class Item:
    """A memory or recalled message that may enter the memory block."""
    source: str  # mem:12 | msg:345
    kind: str
    score: float
    options: list[Option]  # highest fidelity first
    pinned: bool = False
    # What packing maximises: the score times how likely the item is to be what the
    # question needs, a softmax of relevance, exp((relevance - best) / temperature).
    # With the score alone its constant part (freshness, authority) turns the
    # knapsack into "as many short items as possible", and the items a question needs
    # are often the long ones.
    value: float = 0.0
    created_at: datetime | None = None
    # YYYY-MM-DD of created_at (the block's day lines), once: the block's lines are
    # laid out again for every item B makes packing drop
    day: str | None = field(init=False, default=None)
    chosen: int | None = None  # index into options
    # Stickiness: an item of the previous context is worth (1 + stickiness) times more
    # at its previous fidelity and below, not above. Boosting its fuller options too
    # would let the next compile upgrade it and push others out: no new data must
    # give the same context again (provider prompt caches).
    sticky_from: int | None = None
    stickiness: float = 0.0

    def __post_init__(self):
        ts = self.created_at
        self.day = ts.date().isoformat() if ts else None  # (faster than strftime)


def item_label(c: dict) -> str:
    """An item's line starts with its id and who said it (message) or its kind; its
    date goes on a day line above it (see memory_block), not on every line."""
    if c["source"].startswith("msg:"):
        return f"[{c['source']} {c.get('name') or c.get('role')}]"
    return f"[{c['source']} {c['kind']}]"


def line_tokens(text: str) -> int:
    """Tokens a line adds to the memory block: its text and the newline that ends it.
    Exact, not an estimate: see memory_block_tokens."""
    return tokens.count(text + "\n")


def full_line(c: dict) -> str:
    """A candidate's line at full fidelity: its label and its text."""
    return f"{item_label(c)} {c['text']}"


def count_lines(lines: list[str]) -> list[int]:
    """line_tokens of each line (the default line counter)."""
    return [line_tokens(text) for text in lines]


def count_lines_split(lines: list[str], executor: Executor) -> list[int]:
    """count_lines on two threads: the executor's (the embedding thread, idle once the
    query is embedded) counts the second half while this one counts the first; the
    tokenizer releases the GIL (see docs/performance.md)."""
    if len(lines) < PARALLEL_COUNT_MIN_LINES:
        return count_lines(lines)
    # split where half of the text is on either side
    half, total, acc = 0, sum(map(len, lines)), 0
    while acc * 2 < total:
        acc += len(lines[half])
        half += 1
    second = executor.submit(count_lines, lines[half:])
    return count_lines(lines[:half]) + second.result()


def candidate_item(c: dict, s: float, relevance: float, weights: dict, best_relevance: float,
                   full: Option | None = None, label_tokens: int | None = None,
                   previous_fidelity: str | None = None) -> Item:
    """The fidelity options of a candidate: its stored levels, else (a message whose
    embed job has not run) its stub alone (summarize.stub_json): a compile never
    summarises, and never truncates. A lower level is offered only when it saves a
    good part of the tokens of the level above; short items (and recalled turns under
    MESSAGE_SUMMARY_MIN_TOKENS) are offered verbatim only. full: its full_line option, when
    the caller has counted it already; label_tokens: its label's tokens, when known
    (a stored level's line then costs that plus the level's c["text_tokens"], the
    tokens of its full, detail, compact and stub texts as line text, None where not
    stored); previous_fidelity: its fidelity in the session's previous context, if
    it was there (stickiness)."""
    label = item_label(c)
    if full is None:
        text = full_line(c)
        full = Option("full", text, line_tokens(text))
    out = [full]
    is_message = c["source"].startswith("msg:")
    short = full.tokens < (MESSAGE_SUMMARY_MIN_TOKENS if is_message else summarize.MIN_TOKENS_FOR_SUMMARY)
    levels = c.get("levels") or {}
    # the stored counts are of the stored levels' texts only
    stored = c.get("text_tokens") if label_tokens is not None else None
    if not short and not levels.get("stub"):
        levels, stored = summarize.stub_json(c["text"], c["kind"], when(c.get("created_at")), full.tokens), None
    for k, name in () if short else ((1, "detail"), (2, "compact"), (3, "stub")):
        lv = levels.get(name)
        if lv and lv.get("text"):
            n = stored[k] if stored else None
            o = Option(name, f"{label} {lv['text']}", 0)
            o.tokens = line_tokens(o.text) if n is None else label_tokens + n
            if o.tokens <= LOWER_FIDELITY_MAX_SHARE * out[-1].tokens:
                out.append(o)
    likelihood = math.exp((relevance - best_relevance) / weights["temperature"])
    sticky = None if previous_fidelity is None else next(
        (k for k, o in enumerate(out) if o.fidelity == previous_fidelity), None)
    return Item(source=c["source"], kind=c["kind"], score=s, options=out, value=s * likelihood,
                pinned=bool(c.get("is_pinned")), created_at=c.get("created_at"),
                sticky_from=sticky, stickiness=weights["stickiness"])


def full_options(candidates: list[dict], line_counter: Callable[[list[str]], list[int]] = count_lines
                 ) -> tuple[list[Option], list[int]]:
    """Each candidate's full_line Option and its label's tokens. A line costs its
    label's tokens plus its text part's (tokens.count_line_text), which is stored with
    the row (text_tokens, migration 0012): only the lines of rows without it (written
    before 0012) are counted, by line_counter (count_lines or an equivalent)."""
    labels = [item_label(c) for c in candidates]
    label_n = [tokens.count(label) for label in labels]
    lines = [f"{label} {c['text']}" for label, c in zip(labels, candidates)]
    stored = [(c.get("text_tokens") or (None,))[0] for c in candidates]
    missing = [k for k, n in enumerate(stored) if n is None]
    counted = dict(zip(missing, line_counter([lines[k] for k in missing])))
    return ([Option("full", line, counted[k] if n is None else label_n[k] + n)
             for k, (line, n) in enumerate(zip(lines, stored))], label_n)


# An abbreviated option keeps part of an item's value: the share of the full text's
# tokens it keeps, to this power (a square root: an abbreviation keeps the gist, so
# its value falls slower than its length), counting a share below MIN_VALUED_SHARE as
# that share (a stub still names the item and can bring it back: memory_restore).
FIDELITY_VALUE_EXPONENT = 0.5
MIN_VALUED_SHARE = 0.05


def option_value(it: Item, k: int) -> float:
    """Value of an item at option k: its value at full fidelity scaled by the share of
    the full text that option keeps (FIDELITY_VALUE_EXPONENT, MIN_VALUED_SHARE), and by
    stickiness at its previous fidelity and below."""
    value = it.value
    if k > 0:
        share = min(it.options[k].tokens / it.options[0].tokens, 1.0)
        value *= max(share, MIN_VALUED_SHARE) ** FIDELITY_VALUE_EXPONENT
    if it.sticky_from is not None and k >= it.sticky_from:
        value *= 1 + it.stickiness
    return value


def pack_items(items: list[Item], budget: int) -> int:
    """Multiple-choice knapsack, greedy on incremental value per token.

    Pinned items enter first, at the highest fidelity that fits. For every other
    item the options form steps from nothing up to full fidelity along the upper
    convex hull of (tokens, value); all steps of all items are taken in order of
    value per token while they fit, and an item's later steps are skipped once one
    does not fit (they build on it). O(n log n). Returns the tokens used.
    """
    used = 0
    for it in items:
        it.chosen = None
    for it in sorted((i for i in items if i.pinned), key=lambda i: (-i.score, i.source)):
        for k, o in enumerate(it.options):
            if used + o.tokens <= budget:
                it.chosen, used = k, used + o.tokens
                break
    steps = []
    for n, it in enumerate(items):
        if it.pinned or it.value <= 0:
            continue
        if len(it.options) == 1:  # (most items) one step: nothing to full fidelity
            x, y = it.options[0].tokens, option_value(it, 0)
            if y > 0:  # (the hull below drops a step of no value)
                steps.append((-y / max(x, 1), -it.value, it.source, n, 0, x))
            continue
        # options from cheapest to fullest, then the upper convex hull from (0, 0)
        pts = [(it.options[k].tokens, option_value(it, k), k) for k in range(len(it.options) - 1, -1, -1)]
        hull = [(0, 0.0, None)]
        for p in pts:
            if p[1] <= hull[-1][1]:
                continue
            while len(hull) >= 2:
                (x1, y1, _), (x2, y2, _) = hull[-2], hull[-1]
                if (y2 - y1) * (p[0] - x1) <= (p[1] - y1) * (x2 - x1):
                    hull.pop()
                else:
                    break
            hull.append(p)
        for (x1, y1, _), (x2, y2, k) in itertools.pairwise(hull):
            eff = (y2 - y1) / max(x2 - x1, 1)
            steps.append((-eff, -it.value, it.source, n, k, x2 - x1))
    steps.sort()
    blocked: set[int] = set()
    for _, _, _, n, k, dt in steps:
        if n in blocked:
            continue
        if used + dt > budget:
            blocked.add(n)
            continue
        items[n].chosen = k
        used += dt
    return used


# --------------------------------------------------------------------------- the block
def memory_lines(items: list[Item]) -> list[tuple[str, int]]:
    """The memory block's lines with their tokens (line_tokens): the header, then each
    chosen item's line, with a day line whenever the day changes from the line above."""
    lines, day = [(MEMORY_HEADER, MEMORY_HEADER_LINE_TOKENS)], None
    for it in items:
        d = it.day
        if d and d != day:
            lines.append((f"({d})", day_line_tokens(d)))
            day = d
        option = it.options[it.chosen]
        lines.append((option.text, option.tokens))
    return lines


@functools.lru_cache(maxsize=4096)
def day_line_tokens(day: str) -> int:
    return line_tokens(f"({day})")


def memory_block(items: list[Item]) -> dict:
    """The memory system message: memory_lines, each ending with a newline."""
    return {"role": "system", "content": "".join(text + "\n" for text, _ in memory_lines(items))}


def memory_block_tokens(items: list[Item]) -> int:
    """tokens.count_message(memory_block(items)), without tokenising the block again.
    Exact: every line ends with a newline and the next starts with '[' or '(', where
    o200k's pre-tokenizer always starts a new piece (a piece ending in punctuation or
    whitespace takes the newlines that follow it, never what comes after them), and
    BPE never merges across pieces, so the block costs the sum of its lines
    (tests/py/unit/test_plpy_units.py checks this on fuzzed blocks)."""
    return tokens.MESSAGE_OVERHEAD + sum(t for _, t in memory_lines(items)) if items else 0


MEMORY_HEADER_LINE_TOKENS = line_tokens(MEMORY_HEADER)
MEMORY_HEADER_TOKENS = tokens.MESSAGE_OVERHEAD + MEMORY_HEADER_LINE_TOKENS
DAY_LINE_TOKENS = line_tokens("(2000-01-01)")  # a day line "(YYYY-MM-DD)" and its newline
