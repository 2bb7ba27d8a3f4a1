"""compile_context's decisions, free of database access (unit-testable).

The SQL function fetches the session, its active history and the retrieval
candidates; this module decides the budget split, scores the candidates (seed 003
§6.2), packs history and memories at the fidelities that fit (a multiple-choice
knapsack solved greedily on incremental value per token), and assembles OpenAI chat
messages. DESIGN.md "The read path" is the specification.

Invariants (checked by tests/py/test_context_properties.py):
- the tokens of the returned messages never exceed the budget B;
- the system prompt is present when the session has one; pinned memories are kept;
- nothing with sensitivity `secret` is sent, and channels see only what they may;
- an assistant message with tool_calls is always followed by all its tool results;
- kept history is a contiguous suffix of the session, and its fidelity never rises
  going back in time.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from . import summarize, tokens

FIDELITIES = ("full", "detail", "compact", "stub")

# Seed 003 §6.1: share of B for memories and for history, by task type. The tool-heavy
# row reserves 20 % "for tool results in working memory": here tool results live in
# the history, so that share goes to history.
BUDGET_SPLIT = {
    "continuation": (0.15, 0.85),
    "knowledge": (0.40, 0.60),
    "new_session": (0.50, 0.50),
    "tool_heavy": (0.10, 0.90),
}
TASK_TYPES = tuple(BUDGET_SPLIT)

# Seed 003 §6.2 defaults; a tenant overrides any of them in tenants.config->'scoring'.
DEFAULT_WEIGHTS = {
    "w_relevance": 0.45,
    "w_freshness": 0.20,
    "w_frequency": 0.15,
    "w_authority": 0.20,
    "lambda_per_hour": 0.005,
    # Relevance fuses the retrievers: (1 - lexical) * cosine + lexical * normalised
    # BM25, plus a bonus for tag / entity matches, plus `neighbour` times the best
    # adjacent turn's relevance (a reply means little without the turn it answers).
    # Measured on LoCoMo recall@10: cosine alone 0.45, BM25 alone 0.57, fused 0.63,
    # with neighbours 0.69.
    "lexical": 0.30,
    "tag_bonus": 0.10,
    "neighbour": 0.50,
    # Items in the previous context of the session score this much more (hysteresis:
    # stable contexts keep provider prompt caches warm).
    "stickiness": 0.10,
    # Packing values an item by its score times exp((relevance - best) / temperature).
    "temperature": 0.05,
}
AUTHORITY = {
    "user_stated": 1.0, "correction": 0.95, "instruction": 0.90, "preference": 0.85,
    "fact": 0.80, "tool_output": 0.70, "system_inferred": 0.60,
}
# Which sensitivities each channel may see (seed 004 §6); `secret` never.
CHANNEL_SENSITIVITY = {
    "private": ("none", "low", "high"),
    "team": ("none", "low"),
    "agent": ("none", "low"),
    "public": ("none", "low"),
}
# Which kinds of memory a channel must not see (public: no personal preferences).
CHANNEL_EXCLUDED_KINDS = {"public": ("preference",)}
# Which other sessions' history a channel may recall: private and agent sessions see
# their own agent's private/agent sessions; everyone sees team and public ones as the
# channel allows.
CHANNEL_SOURCES = {
    "private": ("private", "team", "public", "agent"),
    "agent": ("agent", "public"),
    "team": ("team", "public"),
    "public": ("public",),
}
# Share of the history budget for each fidelity zone, newest zone first; what a zone
# leaves unused flows to the next one. Degrade before dropping (DESIGN.md step 2).
HISTORY_ZONES = (("full", 0.60), ("detail", 0.20), ("compact", 0.12), ("stub", 0.08))
# The newest messages (from the last user message on) are always verbatim if they fit.
_QUESTION_RE = re.compile(
    r"(?i)(\?\s*$|^\s*(what|who|whom|whose|when|where|why|which|how|did|does|do|is|are|was|"
    r"were|can|could|should|would|tell me|remind me|explain|describe|summari[sz]e)\b|"
    r"\b(remember|recall|earlier|before|last time|previously|we decided|you said)\b)"
)

MEMORY_HEADER = (
    "Memory: items retrieved from earlier conversations and stored knowledge, most "
    "relevant first within each group. Cite ids like [mem:12]; memory_restore brings "
    "an abbreviated item back in full."
)
SUMMARY_HEADER = "Summary of the earlier part of this session:"

PHANTOM_TOOLS = [
    {"type": "function", "function": {
        "name": "memory_query",
        "description": "Answer a question from stored memory and past conversations "
                       "without restoring them into the context.",
        "parameters": {"type": "object", "properties": {
            "question": {"type": "string"},
            "scope": {"type": "string", "description": "optional topic, tag or id filter"},
            "max_tokens": {"type": "integer", "minimum": 16, "maximum": 2000}},
            "required": ["question"]}}},
    {"type": "function", "function": {
        "name": "memory_restore",
        "description": "Bring an abbreviated memory or message (e.g. mem:12, msg:345) "
                       "back at full fidelity for the next turns.",
        "parameters": {"type": "object", "properties": {
            "id": {"type": "string"}, "reason": {"type": "string"}},
            "required": ["id"]}}},
    {"type": "function", "function": {
        "name": "memory_release",
        "description": "Tell memory that these items are no longer needed in the context.",
        "parameters": {"type": "object", "properties": {
            "ids": {"type": "array", "items": {"type": "string"}},
            "reason": {"type": "string"}},
            "required": ["ids"]}}},
]


def tool_definition_tokens(tools: list[dict]) -> int:
    """Tokens the tool definitions cost in a prompt (their compact JSON)."""
    if not tools:
        return 0
    return tokens.count(json.dumps(tools, separators=(",", ":"), sort_keys=True))


PHANTOM_TOOL_TOKENS = tool_definition_tokens(PHANTOM_TOOLS)


# --------------------------------------------------------------------------- budget
RECENT_TURNS = 12  # the turns classify_task looks at


def classify_task(query: str | None, history: list[dict], has_memories: bool) -> str:
    """Seed 003 §6.1 task type from the query and the recent turns."""
    recent = history[-RECENT_TURNS:]
    if not history:
        return "new_session" if has_memories else "continuation"
    if sum(1 for m in recent if m["role"] == "tool") >= max(3, len(recent) // 3):
        return "tool_heavy"
    if query and _QUESTION_RE.search(query):
        return "knowledge"
    return "continuation"


def split_budget(available: int, task_type: str) -> tuple[int, int]:
    mem_share, hist_share = BUDGET_SPLIT[task_type]
    return int(available * mem_share), int(available * hist_share)


def history_share(available: int, task_type: str, cap_history: int | None) -> int:
    """The history's share of B for a task type, within its cap."""
    b_hist = split_budget(available, task_type)[1]
    return b_hist if cap_history is None else min(b_hist, cap_history)


def memory_room(prepared: PreparedHistory, available: int, opts: dict) -> int:
    """Tokens the memory block can get at most once the history has taken its share
    (memories get B minus what the history uses): what the candidate pool must fill.
    opts["task_type"] must be decided."""
    b_hist = history_share(available, opts["task_type"], opts["cap_history"])
    room = available - pack_history(prepared, b_hist).tokens
    return room if opts["cap_memory"] is None else min(room, opts["cap_memory"])


# --------------------------------------------------------------------------- scoring
def weights_for(config: dict | None) -> dict:
    """The scoring weights: the defaults, with the tenant's numeric overrides (a
    config of another shape, written to the table directly, is ignored)."""
    w = dict(DEFAULT_WEIGHTS)
    for k, v in (config if isinstance(config, dict) else {}).items():
        if k in w and isinstance(v, int | float) and not isinstance(v, bool):
            w[k] = float(v)
    return w


def relevance_of(c: dict, w: dict) -> float:
    return min(max(c.get("relevance") or 0.0, 0.0) / (1 + w["neighbour"]), 1.0)


def score(c: dict, w: dict, now: datetime, max_access: int, relevance: float) -> float:
    """Seed 003 §6.2: relevance, freshness, frequency, authority, each in [0, 1].

    `relevance`: relevance_of(c, w), c's fused relevance (fuse_candidates: cosine,
    BM25, tags, neighbour turns) rescaled to [0, 1]."""
    seen = c.get("last_accessed_at") or c["created_at"]
    hours = max((now - seen).total_seconds() / 3600.0, 0.0)
    freshness = math.exp(-w["lambda_per_hour"] * hours)
    a = c.get("access_count") or 0
    frequency = math.log1p(a) / math.log1p(max_access) if max_access > 0 else 0.0
    authority = (c.get("confidence") or 0.0) * AUTHORITY.get(c.get("provenance_type"), 0.6)
    s = (w["w_relevance"] * relevance + w["w_freshness"] * freshness
         + w["w_frequency"] * frequency + w["w_authority"] * authority)
    # Not rounded: ordering by a rounded score would flip near-ties as the clock moves
    # (freshness) and break "no new data, same context". The report rounds.
    return s


# --------------------------------------------------------------------------- retrieval
# A memory or message this close to the query by trigram word similarity is a
# candidate whatever its fused relevance (a misspelt name or identifier).
TRIGRAM_MATCH = 0.6
FREQUENT_GLOBAL = 20  # the most used global memories that are always candidates
# The most relevant candidates are kept until their cheapest lines (each with its
# label and newline, LINE_OVERHEAD) could fill the memory room OVERFILL times over:
# packing then still has a choice at every fidelity. Within sane bounds.
OVERFILL, LINE_OVERHEAD = 2.0, 8
MIN_CANDIDATES, MAX_CANDIDATES = 60, 2000


@dataclass
class CandidatePool:
    """What a tenant's visible memories and messages offer a query before its
    embedding is known: ids, lexical signals and stored vectors, as aligned arrays,
    memories first, then messages in session and turn order (for the neighbour
    turns). Messages are never pinned, frequent or global."""
    memory_ids: np.ndarray  # int64
    message_ids: np.ndarray  # int64
    message_created: np.ndarray  # epoch seconds (the messages' partition key)
    same_session: np.ndarray  # bool per message: same session as the message before
    floor_tokens: np.ndarray  # memories then messages: tokens of the cheapest text
    bm25: np.ndarray  # 0 without a term match
    tag_match: np.ndarray  # bool
    trigram: np.ndarray
    pinned: np.ndarray  # bool
    access_count: np.ndarray  # int64
    is_global: np.ndarray  # bool
    # The stored vectors: the pool positions that have one (embedded), the matrices
    # that hold them (vectors: the memories' float32, then each message part's int8
    # codes, as read: never copied into one matrix), each position's row in those
    # matrices taken one under the other (vector_rows; None: the k-th embedded
    # position is row k) and its norm.
    embedded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vectors: list[np.ndarray] = field(default_factory=list)
    vector_rows: np.ndarray | None = None
    norms: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def size(self) -> int:
        return len(self.bm25)

    def cosine(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of each member's vector to the query's (NaN: none),
        as pgvector's 1 - (a <=> b) computes it."""
        out = np.full(self.size, np.nan)
        if len(self.embedded):
            q = np.asarray(query, dtype=np.float32)
            # each matrix's products (int8 codes are multiplied in float32), then
            # picked and ordered: the pool's order never moves the vectors themselves
            dots = np.concatenate([(m @ q).astype(np.float64) for m in self.vectors if len(m)])
            if self.vector_rows is not None:
                dots = dots[self.vector_rows]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[self.embedded] = dots / (self.norms * float(np.linalg.norm(q)))
        return out


def bm25(n: int, hit_rows, hit_terms, idf, doc_length, avgdl: float) -> np.ndarray:
    """Okapi BM25 of n documents (k1 = 1.2, b = 0.75, each term counted once): the
    idf of every query lexeme a document contains (hit_rows[i] contains lexeme
    hit_terms[i]), weighted by the document's length against the average."""
    score = np.zeros(n)
    if hit_rows is not None and len(hit_rows):
        np.add.at(score, np.asarray(hit_rows, dtype=np.int64),
                  np.asarray(idf, dtype=np.float64)[np.asarray(hit_terms, dtype=np.int64)])
    return score * 2.2 / (1 + 1.2 * (0.25 + 0.75 * np.asarray(doc_length, dtype=np.float64) / avgdl))


@dataclass
class MessagePart:
    """A run of a tenant's recallable messages as mnemo_internal.message_segment
    gives them (a sealed segment or the tail): aligned arrays in id order, the
    sessions they belong to with whether the reader may see each, the postings of
    the query's lexemes, and the embedded ones' vectors."""
    message_ids: np.ndarray
    session_ids: list[str]
    session_pos: np.ndarray  # 1-based into session_ids
    session_visible: np.ndarray  # bool per session
    turn_index: np.ndarray
    created_epoch: np.ndarray
    token_count: np.ndarray
    stub_tokens: np.ndarray  # -1: no stored levels
    doc_length: np.ndarray
    sensitivities: list[str]  # the part's distinct sensitivities
    sensitivity_pos: np.ndarray  # 1-based into sensitivities
    speakers: list[str]  # its distinct lower-cased names ('' without one)
    speaker_pos: np.ndarray  # 1-based into speakers
    embedded: np.ndarray  # bool
    norms: np.ndarray  # one per embedded message, as vectors
    vectors: np.ndarray  # one row per embedded message
    hit_rows: np.ndarray
    hit_terms: np.ndarray


def message_pool(parts: list[MessagePart], idf, avgdl: float, allowed: tuple[str, ...],
                 as_of: float | None, exclude: list[int], words: list[str]) -> dict:
    """The messages a reader may recall, from segments and the tail, as the message
    half of a CandidatePool (arrays under its field names, plus the embedded ones'
    `embedded` positions, `vectors`: the parts' matrices, `vector_rows`: each one's
    row in them, and `norms`), in session and turn order: only
    sensitivities in `allowed`, visible sessions, written by `as_of` (epoch), not in
    `exclude` (the verbatim window). A long message's floor is its stub level, or
    MESSAGE_SUMMARY_MIN_TOKENS until its levels are stored."""
    parts = [p for p in parts if len(p.message_ids)]
    if not parts:
        empty = np.zeros(0)
        return {"message_ids": np.zeros(0, dtype=np.int64), "message_created": empty,
                "same_session": np.zeros(0, dtype=bool), "floor_tokens": np.zeros(0, dtype=np.int64),
                "bm25": empty, "tag_match": np.zeros(0, dtype=bool), "embedded": np.zeros(0, dtype=np.int64),
                "vectors": [], "vector_rows": np.zeros(0, dtype=np.int64), "norms": empty}
    cat = np.concatenate
    sessions = sorted({sid for p in parts for sid in p.session_ids})
    rank = {sid: i for i, sid in enumerate(sessions)}
    session = cat([np.asarray([rank[sid] for sid in p.session_ids], dtype=np.int64)[p.session_pos - 1]
                   for p in parts])
    visible = cat([p.session_visible[p.session_pos - 1] for p in parts])
    ids = cat([p.message_ids for p in parts])
    created = cat([p.created_epoch for p in parts])
    # per-message flags through each part's dictionary (comparing a few distinct
    # strings, not one per message)
    def flags(values: list[str], pos: np.ndarray, test) -> np.ndarray:
        return np.array([test(v) for v in values], dtype=bool)[pos - 1]

    keep = visible & cat([flags(p.sensitivities, p.sensitivity_pos, allowed.__contains__) for p in parts])
    if exclude:  # (a few dozen ids: a binary search each, not np.isin's sort of all)
        excluded = np.sort(np.asarray(exclude, dtype=np.int64))
        at = np.minimum(np.searchsorted(excluded, ids), len(excluded) - 1)
        keep &= excluded[at] != ids
    if as_of is not None:
        keep &= created <= as_of
    lexical = cat([bm25(len(p.message_ids), p.hit_rows, p.hit_terms, idf, p.doc_length, avgdl)
                   for p in parts])
    named = set(words) - {""}
    tag = cat([flags(p.speakers, p.speaker_pos, named.__contains__) for p in parts])
    tokens_ = cat([p.token_count for p in parts])
    stub = cat([p.stub_tokens for p in parts])
    floor = np.where(tokens_ < MESSAGE_SUMMARY_MIN_TOKENS, tokens_,
                     np.where(stub >= 0, stub, MESSAGE_SUMMARY_MIN_TOKENS))
    embedded = cat([p.embedded for p in parts])
    vector_row = np.cumsum(embedded) - 1  # each embedded message's row in the parts' vectors
    norms = cat([p.norms for p in parts])

    order = np.flatnonzero(keep)
    order = order[np.lexsort((ids[order], cat([p.turn_index for p in parts])[order], session[order]))]
    has_vector = embedded[order]
    return {
        "message_ids": ids[order], "message_created": created[order],
        "same_session": np.concatenate([[False], session[order][1:] == session[order][:-1]])
        if len(order) else np.zeros(0, dtype=bool),
        "floor_tokens": floor[order].astype(np.int64), "bm25": lexical[order], "tag_match": tag[order],
        "embedded": np.flatnonzero(has_vector),
        "vectors": [p.vectors for p in parts], "vector_rows": vector_row[order[has_vector]],
        "norms": norms[vector_row[order[has_vector]]],
    }


def fuse_candidates(pool: CandidatePool, cosine: np.ndarray, w: dict, room: int) -> list[dict]:
    """The candidates worth fetching, with their fused relevance in [0, 1 + neighbour]:
        min(1, (1 - lexical) * cosine + lexical * BM25 / best BM25 + tag bonus)
    plus, for a message, `neighbour` times the better of the turns just before and
    after it in its session (a reply means little without the turn it answers).
    `cosine` is aligned with the pool (NaN: no embedding yet). Kept: the most relevant
    ones whose cheapest lines fill a memory block of `room` tokens OVERFILL times,
    every pinned memory, every trigram match, and the most used global memories.
    Ties go to the memory, then the lower id: the same pool and query give the same
    candidates. Each comes with the retrievers that found it (the report's
    provenance)."""
    n = pool.size
    if n == 0:
        return []
    n_mem = len(pool.memory_ids)
    best_bm25 = pool.bm25.max()
    lexical = pool.bm25 / best_bm25 if best_bm25 > 0 else np.zeros(n)
    # fmax: a member without an embedding (NaN) counts as cosine 0
    rel0 = np.minimum(1.0, (1 - w["lexical"]) * np.fmax(cosine, 0.0) + w["lexical"] * lexical
                      + np.where(pool.tag_match, w["tag_bonus"], 0.0))
    turn = rel0[n_mem:]
    before = np.zeros_like(turn)
    after = np.zeros_like(turn)
    if len(turn) > 1:
        before[1:] = np.where(pool.same_session[1:], turn[:-1], 0.0)
        after[:-1] = np.where(pool.same_session[1:], turn[1:], 0.0)
    relevance = rel0.copy()
    relevance[n_mem:] += w["neighbour"] * np.maximum(before, after)

    ids = np.concatenate([pool.memory_ids, pool.message_ids])
    # one tie-breaking key: memories (0) before messages (1), then the lower id
    tie = np.concatenate([pool.memory_ids, pool.message_ids + (1 << 62)])
    by_relevance = np.lexsort((tie, -relevance))
    lines = np.cumsum(pool.floor_tokens[by_relevance] + LINE_OVERHEAD)
    limit = int(np.searchsorted(lines, OVERFILL * room)) + 1
    limit = min(max(limit, MIN_CANDIDATES), MAX_CANDIDATES)
    keep = set(by_relevance[:limit].tolist())
    keep.update(np.flatnonzero(pool.pinned | (pool.trigram >= TRIGRAM_MATCH)).tolist())
    frequent = np.flatnonzero(pool.is_global & (pool.access_count > 0))
    if len(frequent):
        by_use = np.lexsort((ids[frequent], -pool.access_count[frequent]))
        keep.update(frequent[by_use[:FREQUENT_GLOBAL]].tolist())

    kept = np.array(sorted(keep), dtype=np.int64)
    # the kept ones' vector rank: 1 + how many members are strictly closer to the query
    # (NaN, no embedding: no rank)
    kept_cosine = cosine[kept]
    ranked = np.sort(cosine[~np.isnan(cosine)])
    by_vector = (len(ranked) - np.searchsorted(ranked, kept_cosine, side="right") + 1 <= limit) \
        & ~np.isnan(kept_cosine)
    # which retrievers found each kept one, as a bit set (see RETRIEVER_SETS)
    found_by = (by_vector * 1 + (pool.bm25[kept] > 0) * 2 + pool.tag_match[kept] * 4
                + (pool.trigram[kept] >= TRIGRAM_MATCH) * 8 + (pool.access_count[kept] > 0) * 16)
    is_message = kept >= n_mem
    created = np.where(is_message, pool.message_created[np.maximum(kept - n_mem, 0)], np.nan) \
        if len(pool.message_created) else np.full(len(kept), np.nan)
    # the kept rows' signals as Python values (indexing numpy arrays one element at a
    # time costs more than the rest of this loop)
    out = []
    for message, id_, rel, pinned, access, found, epoch in zip(
            is_message.tolist(), ids[kept].tolist(), relevance[kept].tolist(), pool.pinned[kept].tolist(),
            pool.access_count[kept].tolist(), found_by.tolist(), created.tolist()):
        out.append({
            "source": f"msg:{id_}" if message else f"mem:{id_}", "id": id_, "relevance": rel,
            "is_pinned": pinned, "access_count": access, "retrievers": RETRIEVER_SETS[found],
            "created_epoch": epoch if message else None,
        })
    return out


RETRIEVERS = ("vector", "fulltext", "entity_tag", "trigram", "frequent")
# The retrievers named by each bit set of RETRIEVERS (bit k: RETRIEVERS[k]), built once:
# a list per candidate cost more than the rest of fuse_candidates' loop. Shared: read only.
RETRIEVER_SETS = tuple(tuple(name for k, name in enumerate(RETRIEVERS) if bits >> k & 1)
                       for bits in range(1 << len(RETRIEVERS)))


# --------------------------------------------------------------------------- items
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
        self.day = ts.date().isoformat() if ts else None  # (strftime: 4x slower)


# The extractive levels of a text, memoised per backend: stored messages never change,
# and an agent compiles the same session before every model call, so without this the
# same older turns are summarised again at every compile. The levels are read, never
# modified, by the callers.
summary_levels = functools.lru_cache(maxsize=2048)(summarize.summarize_json)


def _when(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M") if ts else ""


def item_label(c: dict) -> str:
    """An item's line starts with its id and who said it (message) or its kind; its
    date goes on a day line above it (see memory_block), not on every line."""
    if c["source"].startswith("msg:"):
        return f"[{c['source']} {c.get('name') or c.get('role')}]"
    return f"[{c['source']} {c['kind']}]"


LOWER_FIDELITY_MAX_SHARE = 0.6
# Recalled messages shorter than this enter verbatim or not at all.
MESSAGE_SUMMARY_MIN_TOKENS = 200


def line_tokens(text: str) -> int:
    """Tokens a line adds to the memory block: its text and the newline that ends it.
    Exact, not an estimate: see memory_block_tokens."""
    return tokens.count(text + "\n")


def full_line(c: dict) -> str:
    """A candidate's line at full fidelity: its label and its text."""
    return f"{item_label(c)} {c['text']}"


def count_lines(lines: list[str]) -> list[int]:
    """line_tokens of each line (compile_bundle's default line counter)."""
    return [line_tokens(text) for text in lines]


def candidate_item(c: dict, s: float, relevance: float, weights: dict, best_relevance: float,
                   full: Option | None = None, label_tokens: int | None = None) -> Item:
    """The fidelity options of a candidate: its stored levels, else the extractive
    fallback (summarize.py), never plain truncation. A lower level is offered only
    when it saves a good part of the tokens of the level above; short items (and
    recalled turns under MESSAGE_SUMMARY_MIN_TOKENS) are offered verbatim only, so
    nothing is summarised that could not be used. full: its full_line option, when
    the caller has counted it already; label_tokens: its label's tokens, when known
    (a stored level's line then costs that plus the level's c["text_tokens"], the
    tokens of its full, detail, compact and stub texts as line text, None where not
    stored)."""
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
        levels, stored = summary_levels(c["text"], c["kind"], _when(c.get("created_at"))), None
    for k, name in () if short else ((1, "detail"), (2, "compact"), (3, "stub")):
        lv = levels.get(name)
        if lv and lv.get("text"):
            n = stored[k] if stored else None
            o = Option(name, f"{label} {lv['text']}", 0)
            o.tokens = line_tokens(o.text) if n is None else label_tokens + n
            if o.tokens <= LOWER_FIDELITY_MAX_SHARE * out[-1].tokens:
                out.append(o)
    likelihood = math.exp((relevance - best_relevance) / weights["temperature"])
    previous = c.get("previous_fidelity")  # (most candidates were not in the last context)
    sticky = None if previous is None else next((k for k, o in enumerate(out) if o.fidelity == previous), None)
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


def _value(it: Item, k: int) -> float:
    """Value of an item at option k: its score times the share of the full content
    that fidelity keeps (square root of the token share, at least that of 5 %)."""
    value = it.value
    if k > 0:
        share = min(it.options[k].tokens / it.options[0].tokens, 1.0)
        value *= max(share, 0.05) ** 0.5
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
            x, y = it.options[0].tokens, _value(it, 0)
            if y > 0:  # (the hull below drops a step of no value)
                steps.append((-y / max(x, 1), -it.value, it.source, n, 0, x))
            continue
        # options from cheapest to fullest, then the upper convex hull from (0, 0)
        pts = [(it.options[k].tokens, _value(it, k), k) for k in range(len(it.options) - 1, -1, -1)]
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


# --------------------------------------------------------------------------- history
def group_history(history: list[dict]) -> list[list[dict]]:
    """Units that are kept or dropped together: an assistant message with tool_calls
    plus its tool results; every other message alone. Tool calls without a result and
    results without their call are left out (OpenAI rejects either)."""
    by_call: dict[str, dict] = {}
    for m in history:
        if m["role"] == "tool" and m.get("tool_call_id"):
            by_call.setdefault(m["tool_call_id"], m)
    units: list[list[dict]] = []
    consumed: set[int] = set()
    for m in history:
        if m["message_id"] in consumed:
            continue
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [tc for tc in m["tool_calls"] if tc.get("id") in by_call]
            results = [by_call[tc["id"]] for tc in calls]
            for r in results:
                consumed.add(r["message_id"])
            # A call without its result is not sent: the message is altered and its
            # stored token count no longer applies.
            altered = {} if len(calls) == len(m["tool_calls"]) else {"token_count": None}
            if calls:
                unit = [dict(m, tool_calls=calls, **altered)] + results
            elif m.get("content") or m.get("content_parts"):
                unit = [dict(m, tool_calls=None, token_count=None)]
            else:
                continue
            units.append(unit)
        elif m["role"] == "tool":
            continue  # a result without its call (or already placed with it)
        else:
            units.append([m])
    return units


def openai_message(m: dict, content: str | None = None) -> dict:
    """The OpenAI chat message for a history row, verbatim or with new content."""
    out: dict = {"role": m["role"]}
    if content is not None:
        out["content"] = content
    elif m.get("content_parts") is not None:
        out["content"] = m["content_parts"]
    else:
        out["content"] = m.get("content")
    if m.get("name") and m["role"] in ("user", "assistant", "system", "developer"):
        out["name"] = m["name"]
    if m["role"] == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    if m["role"] == "tool":
        out["tool_call_id"] = m["tool_call_id"]
    return out


WITHHELD = "[content withheld: sensitivity {s} is not allowed on this channel]"


def message_levels(m: dict) -> dict | None:
    """A stored message's extractive levels ({level: {text, tokens, losses}}), or None
    when its text is too short to abbreviate. Each message's embed job stores them
    (messages.levels, via mnemo_internal.message_levels) so that compiles read them
    instead of summarising older turns again; this computes them where they are not
    stored yet. m: content, role, token_count, created_at."""
    text = m.get("content") or ""
    # The stored token count (text plus framing, never less than the text alone) rules
    # out most short messages without tokenising them.
    stored = m.get("token_count")
    if ((stored is not None and stored < summarize.MIN_TOKENS_FOR_SUMMARY)
            or tokens.count(text) < summarize.MIN_TOKENS_FOR_SUMMARY):
        return None
    kind = "tool_result" if m["role"] == "tool" else "message"
    return summary_levels(text, kind, _when(m.get("created_at")))


def history_versions(m: dict, allowed: tuple[str, ...]) -> tuple[dict[str, dict], dict[str, int]]:
    """The message at each fidelity, and what each costs (tokens.count_message). A
    level the row does not have (it is too short to abbreviate), or one that would
    not be shorter, is the next higher level's message. A row whose sensitivity the
    channel may not see is a placeholder at every level (its role and tool-call id
    stay, so tool-call pairs stay whole). A row sent as stored costs its stored token
    count (the same count of the same message); each other message is counted once."""
    if m["sensitivity"] not in allowed:
        # Nothing of the row but its shape: no name, and tool calls keep their ids
        # and function names (the results must still pair up) but not their arguments.
        msg = openai_message(dict(m, name=None), WITHHELD.format(s=m["sensitivity"]))
        if msg.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": tc["id"], "type": "function",
                 "function": {"name": tc["function"]["name"], "arguments": "{}"}}
                for tc in msg["tool_calls"]]
        return dict.fromkeys(FIDELITIES, msg), dict.fromkeys(FIDELITIES, tokens.count_message(msg))
    above = openai_message(m)
    above_cost = m["token_count"] if m.get("token_count") is not None else tokens.count_message(above)
    versions, costs = {"full": above}, {"full": above_cost}
    levels = m.get("levels") or message_levels(m)
    ref = f"msg:{m['message_id']}"
    for name in ("detail", "compact", "stub"):
        lv = (levels or {}).get(name)
        if lv:
            where = (f"full output in artifact {m['artifact_id']}" if m.get("artifact_id")
                     else "memory_restore for the full text")
            msg = openai_message(m, f"[{name} of {ref}; {where}] {lv['text']}")
            cost = tokens.count_message(msg)
            if cost < above_cost:
                above, above_cost = msg, cost
        versions[name], costs[name] = above, above_cost
    return versions, costs


@dataclass
class HistoryPick:
    messages: list[dict]
    fidelities: list[tuple[int, str, int]]  # (message_id, fidelity, tokens), oldest first
    tokens: int
    dropped_units: int
    first_kept_turn: int | None


class PreparedHistory:
    """The history made ready once per compile (packing runs up to three times): its
    units, and each message's versions and token costs, computed lazily — a long
    history is mostly never looked at below full fidelity, and summarising or
    counting what packing never reaches is wasted time on the hot path."""

    def __init__(self, history: list[dict], allowed: tuple[str, ...]):
        self.units = group_history(history)
        self.allowed = allowed
        self._versions: dict[int, list[tuple[dict[str, dict], dict[str, int]]]] = {}
        self._picks: dict[int, HistoryPick] = {}  # pack_history by budget (read only)
        # Full-fidelity cost of each unit: the stored token counts unless the unit's
        # messages are sent altered (withheld, or tool calls without results removed).
        self.stored = [self._as_stored(unit) for unit in self.units]
        self.full_costs = [
            sum(m["token_count"] for m in unit) if stored else sum(c["full"] for c in self.costs(u))
            for u, (unit, stored) in enumerate(zip(self.units, self.stored))
        ]

    def _as_stored(self, unit: list[dict]) -> bool:
        return all(m.get("token_count") is not None and m["sensitivity"] in self.allowed
                   for m in unit)

    def _prepared(self, u: int) -> list[tuple[dict[str, dict], dict[str, int]]]:
        if u not in self._versions:
            self._versions[u] = [history_versions(m, self.allowed) for m in self.units[u]]
        return self._versions[u]

    def costs(self, u: int) -> list[dict[str, int]]:
        """Token cost of each message of unit u at every fidelity."""
        return [c for _, c in self._prepared(u)]

    def at(self, u: int, fidelity: str) -> list[tuple[dict, int]]:
        """Each message of unit u at a fidelity, with its cost. A unit sent as stored
        needs no other version (most of a history is: its levels are not counted)."""
        if fidelity == "full" and self.stored[u]:
            return [(openai_message(m), m["token_count"]) for m in self.units[u]]
        return [(v[fidelity], c[fidelity]) for v, c in self._prepared(u)]

    def cost(self, u: int, z: int) -> int:
        """Token cost of unit u at fidelity zone z."""
        if z == 0:
            return self.full_costs[u]
        fidelity = FIDELITIES[z]
        return sum(c[fidelity] for _, c in self._prepared(u))


def pack_history(h: PreparedHistory, budget: int) -> HistoryPick:
    """A contiguous suffix of the history within the budget.

    If everything fits verbatim, everything is kept verbatim. Otherwise, walking back
    from the newest unit, units are placed in fidelity zones (HISTORY_ZONES, with
    cumulative caps): when a unit no longer fits in its zone, it and every older unit
    go one zone down, so older turns degrade before they are dropped and fidelity
    never rises going back in time. The newest unit is verbatim whenever it fits.
    Memoised per budget on h: the candidate pool is sized with the same packing that
    compile_bundle then does.
    """
    if budget in h._picks:
        return h._picks[budget]
    units = h.units
    caps, acc = [], 0.0
    for _, share in HISTORY_ZONES:
        acc += share
        caps.append(int(budget * acc))
    caps[-1] = budget
    if sum(h.full_costs) <= budget:
        zones = [0] * len(units)
    else:
        zones, used, z = [], 0, 0
        for idx in range(len(units) - 1, -1, -1):
            newest = idx == len(units) - 1
            while z < len(FIDELITIES):
                cap = budget if newest and z == 0 else caps[z]
                if used + h.cost(idx, z) <= cap:
                    break
                z += 1
            if z == len(FIDELITIES):
                break
            used += h.cost(idx, z)
            zones.append(z)
        zones.reverse()
    kept = len(zones)
    first = len(units) - kept
    messages, fids, used = [], [], 0
    for u, z in zip(range(first, len(units)), zones):
        fid = FIDELITIES[z]
        for m, (version, cost) in zip(units[u], h.at(u, fid)):
            label = "withheld" if m["sensitivity"] not in h.allowed else fid
            messages.append(version)
            fids.append((m["message_id"], label, cost))
            used += cost
    first_turn = units[first][0]["turn_index"] if kept else None
    pick = h._picks[budget] = HistoryPick(messages, fids, used, first, first_turn)
    return pick


def verbatim_message_ids(history: list[dict], b_hist: int) -> list[int]:
    """Ids of the newest messages that will surely be sent verbatim (they fit in the
    full-fidelity zone of the history share): no need to retrieve them as memories."""
    ids, acc = [], 0
    for m in reversed(history):
        acc += m["token_count"]
        if acc > b_hist * HISTORY_ZONES[0][1]:
            break
        ids.append(m["message_id"])
    return ids


def budget_for(session: dict, opts: dict) -> tuple[list[dict], int, int, int]:
    """(system messages, their tokens, tool definition tokens, B): B = context window
    - system prompt - response reserve - tool definitions, or the budget option when
    smaller; never negative."""
    system_msgs = []
    if session.get("system_prompt"):
        system_msgs.append({"role": "system", "content": session["system_prompt"]})
    # the count stored with the prompt (mnemo.start_session), else counted here
    system_tokens = session.get("system_prompt_tokens")
    if system_tokens is None or not system_msgs:
        system_tokens = sum(tokens.count_message(m) for m in system_msgs)
    tool_tokens = (PHANTOM_TOOL_TOKENS if opts["phantom_tools"] else 0) + opts["tool_tokens"]
    window_budget = session["context_window"] - system_tokens - session["response_reserve"] - tool_tokens
    available = window_budget if opts["budget"] is None else min(opts["budget"], window_budget)
    return system_msgs, system_tokens, tool_tokens, max(available, 0)


# --------------------------------------------------------------------------- options
OPTION_KEYS = {"budget", "task_type", "channel", "caps", "as_of", "phantom_tools",
               "tool_tokens", "max_items", "log"}
CAP_KEYS = {"memory", "history", "items"}


class OptionError(ValueError):
    """A bad p_options value (raised as MN001 by the SQL function)."""


def _int_option(opts: dict, key: str, lo: int, hi: int) -> int | None:
    v = opts.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise OptionError(f"option {key} must be an integer between {lo} and {hi}, got {v!r}")
    return v


def parse_options(opts: dict | None, session_channel: str) -> dict:
    opts = opts or {}
    if not isinstance(opts, dict):
        raise OptionError("options must be a JSON object")
    unknown = sorted(set(opts) - OPTION_KEYS)
    if unknown:
        raise OptionError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(OPTION_KEYS))}")
    task = opts.get("task_type")
    if task is not None and (not isinstance(task, str) or task not in BUDGET_SPLIT):
        raise OptionError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task!r}")
    channel = opts.get("channel") or session_channel
    if not isinstance(channel, str) or channel not in CHANNEL_SENSITIVITY:
        raise OptionError(f"channel must be one of {', '.join(CHANNEL_SENSITIVITY)}, got {channel!r}")
    caps = opts.get("caps") or {}
    if not isinstance(caps, dict) or set(caps) - CAP_KEYS:
        raise OptionError(f"caps must be an object with keys among {', '.join(sorted(CAP_KEYS))}")
    phantom = opts.get("phantom_tools", True)
    if not isinstance(phantom, bool):
        raise OptionError("option phantom_tools must be true or false")
    log = opts.get("log", True)
    if not isinstance(log, bool):
        raise OptionError("option log must be true or false")
    return {
        "budget": _int_option(opts, "budget", 0, 10_000_000),
        "task_type": task,
        "channel": channel,
        "cap_memory": _int_option(caps, "memory", 0, 10_000_000),
        "cap_history": _int_option(caps, "history", 0, 10_000_000),
        "max_items": _int_option(caps, "items", 0, 10_000) if "items" in caps
        else _int_option(opts, "max_items", 0, 10_000),
        "phantom_tools": phantom,
        "tool_tokens": _int_option(opts, "tool_tokens", 0, 10_000_000) or 0,
        "log": log,
    }


# --------------------------------------------------------------------------- compile
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
    (tests/py/test_plpy_units.py checks this on fuzzed blocks)."""
    return tokens.MESSAGE_OVERHEAD + sum(t for _, t in memory_lines(items)) if items else 0


MEMORY_HEADER_LINE_TOKENS = line_tokens(MEMORY_HEADER)
MEMORY_HEADER_TOKENS = tokens.MESSAGE_OVERHEAD + MEMORY_HEADER_LINE_TOKENS
DAY_LINE_TOKENS = line_tokens("(2000-01-01)")  # a day line "(YYYY-MM-DD)" and its newline


def compile_bundle(session: dict, history: list[dict], candidates: list[dict], opts: dict,
                   now: datetime, weights: dict, previous: list[tuple[str, str]],
                   query: str | None, prepared: PreparedHistory | None = None,
                   line_counter: Callable[[list[str]], list[int]] = count_lines) -> dict:
    """The context bundle: messages, phantom tools and the report (without ids).
    `prepared` is the history already made ready by the caller, if it was.
    `line_counter` counts the full lines of candidates without stored text_tokens
    (count_lines, or a caller's equivalent that counts on two threads: tokenising
    releases the GIL)."""
    channel = opts["channel"]
    allowed = CHANNEL_SENSITIVITY[channel]
    omissions: list[dict] = []

    # 1. Budget -------------------------------------------------------------------
    system_msgs, system_tokens, tool_tokens, available = budget_for(session, opts)
    task = opts["task_type"] or classify_task(query, history, bool(candidates))
    b_mem = split_budget(available, task)[0]
    if opts["cap_memory"] is not None:
        b_mem = min(b_mem, opts["cap_memory"])
    b_hist = history_share(available, task, opts["cap_history"])

    # 2. Candidates: privacy, scoring ----------------------------------------------
    excluded_kinds = CHANNEL_EXCLUDED_KINDS.get(channel, ())
    # the previous context's memory items, in their order, with their fidelities
    prev_rank = {src: i for i, (src, _) in enumerate(previous)}
    prev_fidelity = dict(previous)
    visible = []
    for c in candidates:
        if c["sensitivity"] not in allowed:
            omissions.append({"source": c["source"], "reason": f"sensitivity_{c['sensitivity']}"})
        elif c["kind"] in excluded_kinds:
            omissions.append({"source": c["source"], "reason": f"kind_not_on_{channel}_channel"})
        else:
            c["previous_fidelity"] = prev_fidelity.get(c["source"])
            visible.append(c)
    max_access = max((c.get("access_count") or 0 for c in visible), default=0)
    relevance = [relevance_of(c, weights) for c in visible]
    scored = sorted(((score(c, weights, now, max_access, r), r, c) for c, r in zip(visible, relevance)),
                    key=lambda src: (-src[0], src[2]["source"]))

    # Every candidate's fidelity options, once (packing below only chooses).
    best = max(relevance, default=0.0)
    fulls, label_n = full_options([c for _, _, c in scored], line_counter)
    all_items = [candidate_item(c, s, r, weights, best, o, n)
                 for (s, r, c), o, n in zip(scored, fulls, label_n)]

    # 3. History within its share (plus whatever memories leave unused) --------------
    # Pinned memories are kept: their cheapest lines (with the block header and a day
    # line each at most) are reserved before the history takes its share.
    pinned_reserve = 0
    pinned = [i for i in all_items if i.pinned]
    if pinned:
        pinned_reserve = MEMORY_HEADER_TOKENS + sum(i.options[-1].tokens + DAY_LINE_TOKENS
                                                    for i in pinned)
    b_hist = max(min(b_hist, available - pinned_reserve), 0)
    prepared = prepared or PreparedHistory(history, allowed)
    summary_msgs: list[dict] = []

    def with_summary(p: HistoryPick, limit: int) -> tuple[HistoryPick, list[dict]]:
        if p.dropped_units and session.get("summary_text"):
            s = [{"role": "system", "content": SUMMARY_HEADER + "\n" + session["summary_text"]}]
            st = tokens.count_message(s[0])
            if st < limit:
                return pack_history(prepared, limit - st), s
        return p, []

    pick, summary_msgs = with_summary(pack_history(prepared, b_hist), b_hist)
    in_history = {f"msg:{mid}" for mid, _, _ in pick.fidelities}

    # 4. Memories within B - history, greedy knapsack over fidelities -----------------
    items = [i for i in all_items if i.source not in in_history]
    if opts["max_items"] is not None:
        pinned = [i for i in items if i.pinned]
        rest = [i for i in items if not i.pinned][: max(opts["max_items"] - len(pinned), 0)]
        items = pinned + rest
    summary_tokens = sum(tokens.count_message(m) for m in summary_msgs)
    mem_budget = available - pick.tokens - summary_tokens
    if opts["cap_memory"] is not None:
        mem_budget = min(mem_budget, opts["cap_memory"])
    if items and mem_budget > MEMORY_HEADER_TOKENS:
        pack_items(items, mem_budget - MEMORY_HEADER_TOKENS)
    # Stable order: items of the previous context keep their places, new ones follow
    # in time order, so consecutive contexts share the longest possible prefix.
    def order(i: Item) -> tuple:
        ts = i.created_at
        return (prev_rank.get(i.source, len(prev_rank)), ts.timestamp() if ts else 0.0, i.source)

    chosen = sorted((i for i in items if i.chosen is not None), key=order)

    # 5. Unused memory budget flows back to history ------------------------------------
    mem_tokens = memory_block_tokens(chosen)
    degraded = any(f not in ("full", "withheld") for _, f, _ in pick.fidelities)
    if (pick.dropped_units or degraded) and opts["cap_history"] is None:
        wider = available - mem_tokens
        if wider > pick.tokens + summary_tokens:
            pick, summary_msgs = with_summary(pack_history(prepared, wider), wider)
            summary_tokens = sum(tokens.count_message(m) for m in summary_msgs)
            in_history = {f"msg:{mid}" for mid, _, _ in pick.fidelities}
            chosen = [i for i in chosen if i.source not in in_history]
            mem_tokens = memory_block_tokens(chosen)

    # B is a hard limit, and packing did not count the block's day lines.
    mem_limit = opts["cap_memory"] if opts["cap_memory"] is not None else available
    while chosen and (mem_tokens + pick.tokens + summary_tokens > available
                      or mem_tokens > mem_limit):
        # Unpinned items go first; B outranks even a pinned item.
        victim = min(chosen, key=lambda i: (i.pinned, i.value, i.source))
        chosen.remove(victim)
        victim.chosen = None
        mem_tokens = memory_block_tokens(chosen)
    mem_msgs = [memory_block(chosen)] if chosen else []

    # 6. Assemble ------------------------------------------------------------------------
    messages = system_msgs + mem_msgs + summary_msgs + pick.messages
    used = mem_tokens + summary_tokens + pick.tokens
    for it in items:
        if it.chosen is None and it.source not in in_history:
            omissions.append({"source": it.source, "reason": "budget", "score": round(it.score, 6)})
    if pick.dropped_units:
        omissions.append({"source": "history", "reason": "budget",
                          "units_dropped": pick.dropped_units,
                          "covered_by_summary": bool(summary_msgs)})
    for m in history:
        if m.get("artifact_id"):
            omissions.append({"source": f"msg:{m['message_id']}", "reason": "truncated_tool_output",
                              "artifact_id": m["artifact_id"]})
    report_items = (
        [{"section": "memory", "source": i.source, "kind": i.kind,
          "fidelity": i.options[i.chosen].fidelity, "tokens": i.options[i.chosen].tokens,
          "score": round(i.score, 6), "pinned": i.pinned} for i in chosen]
        + [{"section": "history", "source": f"msg:{mid}", "fidelity": fid, "tokens": t}
           for mid, fid, t in pick.fidelities]
    )
    return {
        "messages": messages,
        "tools": PHANTOM_TOOLS if opts["phantom_tools"] else [],
        "report": {
            "task_type": task,
            "channel": channel,
            "budget": {
                "context_window": session["context_window"],
                "system_prompt": system_tokens,
                "response_reserve": session["response_reserve"],
                "tool_definitions": tool_tokens,
                "available": available,
                "memory_share": b_mem,
                "history_share": b_hist,
            },
            "tokens": {
                "system": system_tokens,
                "memory": mem_tokens,
                "summary": summary_tokens,
                "history": pick.tokens,
                "total": used,
                "prompt": system_tokens + used + tool_tokens,
            },
            "items": report_items,
            "omissions": omissions,
            "provenance": {
                "query": query,
                "candidate_pool_size": len(candidates),
                "retrievers": _retriever_counts(candidates),
                "sensitivity_allowed": list(allowed),
                "scoring": {k: weights[k] for k in sorted(weights)},
                "history_first_turn": pick.first_kept_turn,
            },
        },
    }


def _retriever_counts(candidates: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for c in candidates:
        for r in c.get("retrievers") or ():
            counts[r] = counts.get(r, 0) + 1
    return dict(sorted(counts.items()))
