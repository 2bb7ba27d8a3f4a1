"""compile_context's policy: the tables that say what a context may hold and how it
is split, and the small rules over them (task type, budget, score). docs/design.md §Compile
is the specification."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime

from .. import tokens
from ..vocabulary import provenance_authority

FIDELITIES = ("full", "detail", "compact", "stub")

# docs/design.md §Budget: share of B for memories and for history, by task type. The tool-heavy
# row reserves 20 % "for tool results in working memory": here tool results live in
# the history, so that share goes to history.
BUDGET_SPLIT = {
    "continuation": (0.15, 0.85),
    "knowledge": (0.40, 0.60),
    "new_session": (0.50, 0.50),
    "tool_heavy": (0.10, 0.90),
}
TASK_TYPES = tuple(BUDGET_SPLIT)

# docs/design.md §Scoring defaults; a tenant overrides any of them in tenants.config->'scoring'.
DEFAULT_WEIGHTS = {
    "w_relevance": 0.45,
    "w_freshness": 0.20,
    "w_frequency": 0.15,
    "w_authority": 0.20,
    "lambda_per_hour": 0.005,
    # Relevance fuses the retrievers: (1 - lexical) * cosine + lexical * normalised
    # BM25, plus a bonus for tag / entity matches, plus `neighbour` times the best
    # adjacent turn's relevance (a reply means little without the turn it answers).
    "lexical": 0.30,
    # A speaker or entity the query names is a tie-breaker, not a topic: larger, a
    # named person's unrelated turns outranked another speaker's close match.
    "tag_bonus": 0.10,
    "neighbour": 0.50,
    # A message gains `context` times the best content match among the few turns
    # either side (retrieval.nearby_best), and `length` times its length against the
    # median turn's, a log ratio (retrieval.length_prior): a short turn says little.
    "context": 0.20,
    "length": 0.10,
    # For a question that asks when, a line that dates something ("yesterday", "last
    # week", "in May": temporal.TIME_WORDS) earns this; a line said within a date
    # range the query names ("in June", "two weeks ago"), or a line that dates
    # something said up to retrieval.DATED_REACH_DAYS after it, earns date_range_bonus.
    "dated_bonus": 0.20,
    "date_range_bonus": 0.20,
    # Each candidate's relevance less this much times its greatest cosine to a more
    # relevant one (retrieval.diversify).
    "diversity": 0.10,
    # Items in the previous context of the session score this much more (hysteresis:
    # stable contexts keep provider prompt caches warm).
    "stickiness": 0.10,
    # Packing values an item by its score times exp((relevance - best) / temperature).
    "temperature": 0.05,
    # Above 0, a memory may stand in for its source turns in the memory block
    # (bundle.stand_ins). Off by default: measured on LoCoMo, the offline extractor's
    # notes match a question as well as their turns yet often drop the clause that
    # answers it ("Maria really enjoys the upside-down poses." for "...They make me
    # feel free and light."): on LoCoMo the gold answers in the context fell by 3
    # points (docs/design.md §Packing, issue 42 §1).
    "stand_in": 0.0,
}
# Which sensitivities each channel may see (docs/design.md §Channels); `secret` never.
CHANNEL_SENSITIVITY = {
    "private": ("none", "low", "high"),
    "team": ("none", "low"),
    "agent": ("none", "low"),
    "public": ("none", "low"),
}
# Which kinds of memory a channel must not see (public: no personal preferences).
CHANNEL_EXCLUDED_KINDS = {"public": ("preference",)}
# Which other sessions' history a channel may recall (the sessions of other agents
# within them: RECALL_SCOPES).
CHANNEL_SOURCES = {
    "private": ("private", "team", "public", "agent"),
    "agent": ("agent", "public"),
    "team": ("team", "public"),
    "public": ("public",),
}
# Whose sessions a session recalls messages from, within what its channel may recall
# (CHANNEL_SOURCES): the tenant's, or its own agent's alone. Team and public sessions
# are everyone's, and an `agent` session is its own agent's alone, either way; the
# scope decides the other agents' private sessions. A tenant sets it in
# tenants.config->'recall_scope', a compile in its recall_scope option.
# The default is the tenant: the tenant is the isolation boundary (a user or a
# workspace, row-level security), the memories formed from any of its sessions are
# seen by all its agents already, and one person using two agents (two MCP clients,
# a planner and a coder) expects the second to recall what the first was told. An
# agent that must keep its history to itself uses the `agent` channel, or the tenant
# the `agent` scope.
RECALL_SCOPES = ("tenant", "agent")
DEFAULT_RECALL_SCOPE = "tenant"
# Share of the history budget for each fidelity zone, newest zone first; what a zone
# leaves unused flows to the next one. Degrade before dropping (docs/design.md §Budget).
HISTORY_ZONES = (("full", 0.60), ("detail", 0.20), ("compact", 0.12), ("stub", 0.08))
# The memory block's tokens at most when a compile names no budget (no `budget`
# option, no caps.memory), whatever the window (memory_limit). Without it the block
# took whatever the history left of the window: in a 128k window a question and a
# 16-character "Any suggestions?" alike carried a LongMemEval user's whole haystack
# (~104k tokens), LoCoMo's whole conversation (~17k). Evidence in context levels off
# by 2k tokens (LongMemEval: every evidence turn in by 2k; LoCoMo: 0.94 at 2k, 0.95
# at 4k for twice the tokens). A relevance price or floor did not tell a pointed
# question from an idle one (the idle one matches the users' own "Any suggestions?"
# turns), so the cap is a fixed size. A tenant sets its own in config->'memory_cap'
# (null: none), a call in caps.memory; a budget the caller names is theirs to fill.
DEFAULT_MEMORY_CAP = 2048
# Recalled messages shorter than this enter the memory block verbatim or not at all.
MESSAGE_SUMMARY_MIN_TOKENS = 200
# A lower fidelity of a memory-block item is offered only when its line costs at most
# this share of the one above (else it saves too little to be worth its losses).
LOWER_FIDELITY_MAX_SHARE = 0.6

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


# --------------------------------------------------------------------------- task type
RECENT_TURNS = 12  # the turns classify_task looks at
# A query that asks something, or asks about the past: the knowledge task type.
_QUESTION_RE = re.compile(
    r"(?i)(\?\s*$|^\s*(what|who|whom|whose|when|where|why|which|how|did|does|do|is|are|was|"
    r"were|can|could|should|would|tell me|remind me|explain|describe|summari[sz]e)\b|"
    r"\b(remember|recall|earlier|before|last time|previously|we decided|you said)\b)"
)


def classify_task(query: str | None, history: list[dict], has_memories: bool) -> str:
    """The task type (docs/design.md §Budget) from the query and the recent turns."""
    recent = history[-RECENT_TURNS:]
    if not history:
        return "new_session" if has_memories else "continuation"
    if sum(1 for m in recent if m["role"] == "tool") >= max(3, len(recent) // 3):
        return "tool_heavy"
    if query and _QUESTION_RE.search(query):
        return "knowledge"
    return "continuation"


# --------------------------------------------------------------------------- budget
@dataclass(frozen=True)
class Budget:
    """B and what it is taken from: B = context window - system prompt - response
    reserve - tool definitions, or the budget option when smaller; never negative."""
    system_messages: tuple[dict, ...]
    system_tokens: int
    tool_tokens: int
    available: int  # B


def budget_for(session: dict, opts: dict) -> Budget:
    """The Budget of a session (context_window, response_reserve, system_prompt,
    system_prompt_tokens) under the parsed options."""
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
    return Budget(tuple(system_msgs), system_tokens, tool_tokens, max(available, 0))


def split_budget(available: int, task_type: str) -> tuple[int, int]:
    mem_share, hist_share = BUDGET_SPLIT[task_type]
    return int(available * mem_share), int(available * hist_share)


def memory_share(available: int, task_type: str, cap_memory: int | None) -> int:
    """The memories' share of B for a task type, within its cap."""
    b_mem = split_budget(available, task_type)[0]
    return b_mem if cap_memory is None else min(b_mem, cap_memory)


def memory_limit(available: int, opts: dict) -> tuple[int, bool]:
    """The memory block's tokens at most, and whether that is the tenant's default
    cap: caps.memory when the call gives it; else, when the call names no budget, the
    tenant's default cap (DEFAULT_MEMORY_CAP, options.tenant_memory_cap; None: none)
    within B; else B. A budget the caller names is theirs to fill; a window is not a
    request for memory."""
    if opts["cap_memory"] is not None:
        return opts["cap_memory"], False
    if opts["budget"] is None and opts["default_memory_cap"] is not None:
        return min(available, opts["default_memory_cap"]), True
    return available, False


def history_share(available: int, task_type: str, cap_history: int | None) -> int:
    """The history's share of B for a task type, within its cap."""
    b_hist = split_budget(available, task_type)[1]
    return b_hist if cap_history is None else min(b_hist, cap_history)


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
    """docs/design.md §Scoring: relevance, freshness, frequency, authority, each in [0, 1].

    `relevance`: relevance_of(c, w), c's fused relevance (retrieval.fuse_candidates:
    cosine, BM25, tags, neighbour turns) rescaled to [0, 1]."""
    seen = c.get("last_accessed_at") or c["created_at"]
    hours = max((now - seen).total_seconds() / 3600.0, 0.0)
    freshness = math.exp(-w["lambda_per_hour"] * hours)
    a = c.get("access_count") or 0
    frequency = math.log1p(a) / math.log1p(max_access) if max_access > 0 else 0.0
    authority = (c.get("confidence") or 0.0) * provenance_authority(c.get("provenance_type"))
    s = (w["w_relevance"] * relevance + w["w_freshness"] * freshness
         + w["w_frequency"] * frequency + w["w_authority"] * authority)
    # Not rounded: ordering by a rounded score would flip near-ties as the clock moves
    # (freshness) and break "no new data, same context". The report rounds.
    return s
