"""compile_context as named phases, each reading what the one before produced:

    read_session -> resolve_query -> read_history -> plan -> read_pool
        -> read_candidates -> decide -> log

run() is that list, the one the Compiler (PL/Python) and bench/context.py (psycopg,
EXPLAIN) both run:

- read_session: the tenant, the options (checked once, options.py), the session and
  its budget B (policy.Budget, decided once: it bounds what the history read fetches);
- resolve_query: the query as searched for and logged (stripped, redacted where the
  tenant redacts; the last user message when the caller gave none), decided once; the
  one embedding of it starts here and runs while the next phases read;
- read_history: the active history within reach of B;
- plan: the task type, the memory and history shares of B, the memory block's limit,
  the messages that will surely be verbatim (not candidates) and the memory room the
  pool must fill, each decided once, here;
- read_pool: what the tenant's memories and messages offer the query (lexical signals,
  stored vectors), read while the query is embedded; cosines once it is;
- read_candidates: the fused candidates, fetched in full;
- decide: the bundle (bundle.py), free of database access;
- log: the context_log row, and paging's residency changes.

The phases reach the database through a Database (run a statement of
statements.STATEMENTS by name): the Compiler's is PL/Python's prepared plans, and
bench/context.py's EXPLAINs each statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, NoReturn, Protocol

import numpy as np

from .. import embedding, redact
from ..paging import residency
from . import rows, statements
from .bundle import decide
from .history import PreparedHistory, pack_history, verbatim_message_ids
from .options import OptionError, as_of_text, options_object, parse_options, tenant_memory_cap
from .packing import count_lines
from .policy import (
    CHANNEL_SENSITIVITY,
    Budget,
    budget_for,
    classify_task,
    history_share,
    memory_limit,
    memory_share,
    weights_for,
)
from .retrieval import (
    CandidatePool,
    asker_roles,
    fuse_candidates,
    match_sentences,
    query_words,
    recall_k,
    recalled,
    sentence_turns,
    without_names,
)
from .temporal import TIME_WORDS, date_ranges, temporal_intent


class Database(Protocol):
    """Runs compile_context's statements (statements.STATEMENTS, by name)."""

    Error: type[Exception]  # what a failed statement raises

    def run(self, statement: str, args: list) -> list[dict[str, Any]]: ...

    def run_for_tenant(self, statement: str, tenant_id: str, args: list) -> list[dict[str, Any]]:
        """Runs a statement of statements.TENANT_STATEMENTS, written for the tenant."""
        ...


def fail(db: Database, message: str, code: str = "MN001", hint: str | None = None) -> NoReturn:
    """Raises the project error (mnemo_internal.raise_error: its SQLSTATE reaches the caller)."""
    db.run("raise_error", [code, message, hint])
    raise AssertionError("mnemo_internal.raise_error returned")


@dataclass(frozen=True)
class Session:
    """What read_session produced: the session, its options and its budget."""
    tenant_id: str
    session_id: str
    agent_id: str | None
    context_window: int
    response_reserve: int
    summary_text: str | None
    options: dict  # options.parse_options: checked, with defaults (task_type: the caller's)
    as_of: Any  # the as_of option as the database read it, or None
    now: datetime  # as_of, else the session's own time (statements.SESSION)
    now_epoch: float
    redacting: bool  # the tenant redacts secrets (the query is logged)
    weights: dict
    budget: Budget
    # the tenant's recall index (a large tenant's, migration 0017): the last message
    # id it holds and when its memories were synced; None: it has none
    recall_up_to: int | None = None
    recall_synced_at: Any = None

    @property
    def channel(self) -> str:
        return self.options["channel"]

    @property
    def allowed(self) -> tuple[str, ...]:
        return CHANNEL_SENSITIVITY[self.options["channel"]]


@dataclass(frozen=True)
class Plan:
    """What plan decided, once, for the rest of the compile."""
    task: str
    memory_share: int
    history_share: int  # before the pinned items' reserve (decide)
    memory_limit: int  # the memory block's tokens at most: policy.memory_limit
    # memory_limit is the tenant's default cap, not one the call named: it bounds what
    # ranking adds, never the pinned items (bundle.decide)
    default_cap: bool
    exclude: list[int]  # messages surely in the verbatim history: not candidates
    prepared: PreparedHistory
    room: int  # tokens the memory block can get at most: what the pool must fill
    # residency of the session's semantic objects (None: no paging; see mnemo_db.paging)
    paging: residency.PagingPlan | None = None
    asks_when: bool = False  # the query asks when (temporal.temporal_intent)
    date_ranges: tuple = ()  # the date ranges it names, against the session's time


# What a compile searches on: a query's first QUERY_MAX_CHARS characters (~2,000
# tokens; the embedding reads its first 256 tokens). Any caller may send a query of
# megabytes, and redaction, the lexemes and the log grow with its length; a longer
# query is cut, and the report says so (provenance.query_cut).
QUERY_MAX_CHARS = 8192


def search_query(query: str | None, redacting: bool) -> str | None:
    """The query as searched for and logged: stripped (empty: none), cut to its first
    QUERY_MAX_CHARS characters and, where the tenant redacts, redacted (no secret may
    reach a table)."""
    query = query.strip()[:QUERY_MAX_CHARS] if query and query.strip() else None
    if query and redacting:
        query = redact.redact(query)[0]
    return query


def query_cut(query: str | None) -> dict | None:
    """What the report says of a query longer than QUERY_MAX_CHARS (None: not cut)."""
    n = len(query.strip()) if query else 0
    return {"chars": n, "searched_chars": QUERY_MAX_CHARS} if n > QUERY_MAX_CHARS else None


class Query(NamedTuple):
    """The query the compile searches for (None: none), query_cut's report of it, and
    the id of the message whose queued embed job embeds exactly this text (the last
    user message, taken as the query unchanged: share_query_vector), else None."""
    text: str | None
    cut: dict | None
    awaiting_message: int | None = None


def resolve_query(db: Database, session: Session, query: str | None) -> Query:
    """The query the compile searches for, embeds and logs: the caller's, else the
    last user message the channel may see (search_query: cut, stripped, redacted),
    and query_cut's report of it."""
    searched = search_query(query, session.redacting)
    return Query(searched, query_cut(query)) if searched else default_query(db, session)


def read_session(db: Database, tenant_id: str, session_id: str, options_json: str | None) -> Session:
    db.run("enter", [tenant_id])
    try:
        raw = options_object(options_json)
        as_of = as_of_text(raw)
    except OptionError as e:
        fail(db, str(e), hint=e.hint)
    if as_of is not None:
        as_of = db.run("check_as_of", [as_of])[0]["ts"]
    found = db.run("session", [tenant_id, session_id, as_of])
    if not found:
        fail(db, f"unknown session {session_id}", "MN003")
    s = found[0]
    try:
        opts = parse_options(raw, s["channel"], s["recall_scope"], tenant_memory_cap(s["memory_cap"]))
    except OptionError as e:
        fail(db, str(e), hint=e.hint)
    window = {"context_window": s["context_window"], "response_reserve": s["response_reserve"],
              "system_prompt": s["system_prompt"], "system_prompt_tokens": s["system_prompt_tokens"]}
    return Session(
        tenant_id=tenant_id, session_id=session_id, agent_id=s["agent_id"],
        context_window=s["context_window"], response_reserve=s["response_reserve"],
        summary_text=s["summary_text"], options=opts, as_of=as_of,
        now=rows.utc_datetime(s["now_epoch"]), now_epoch=s["now_epoch"], redacting=s["redact"],
        weights=weights_for(json.loads(s["scoring"]) if s["scoring"] else None),
        budget=budget_for(window, opts), recall_up_to=s["recall_up_to"], recall_synced_at=s["recall_synced_at"])


def read_history(db: Database, session: Session) -> list[dict]:
    """The active history within reach of B, oldest first: the newest
    HISTORY_FIRST_ROWS rows, and only if those cost no more than B at their cheapest
    (an older row may still be within reach) the rows up to B's floor."""
    args = statements.history_args(session.tenant_id, session.session_id, session.as_of,
                                   session.budget.available, session.channel)
    limit = args[3]
    args[3] = min(limit, statements.HISTORY_FIRST_ROWS)
    r = db.run("history", args)[0]
    if r["rows_read"] == args[3] < limit and r["floor_read"] <= session.budget.available:
        args[3] = limit
        r = db.run("history", args)[0]
    return rows.history_messages(r)


def default_query(db: Database, session: Session) -> Query:
    """The query when the caller gave none: the last user message the channel may see
    (and query_cut's report of it)."""
    last = db.run("last_user", [session.tenant_id, session.session_id, session.as_of, list(session.allowed)])
    text = last[0]["content"] if last else None
    searched = search_query(text, session.redacting)
    awaiting = last[0]["message_id"] if last and last[0]["awaits_embedding"] and searched == text else None
    return Query(searched, query_cut(text), awaiting)


def share_query_vector(db: Database, session: Session, query: Query, vector: np.ndarray | None) -> None:
    """Hands the query's vector to the embed job of the message it is (Query's
    awaiting_message), so that the one text is encoded once: the proxy compiles for
    the user message it has just recorded, and the job runner would encode it again
    (~1.5-5 ms of CPU a call: docs/performance.md, "Floors"). The job stores it as it
    stores its own (embedding.to_pgvector of the same model's vector: the same
    bytes). Not for a compile that is not logged: looking changes nothing."""
    if query.awaiting_message is None or vector is None or not session.options["log"]:
        return
    for job in db.run("query_job", [session.tenant_id, f"message:{query.awaiting_message}"]):
        db.run("share_query_vector", [session.tenant_id, job["job_id"], embedding.to_pgvector(vector), query.text])


def window_budget(session: Session) -> int:
    """B at the session's window, whatever the budget option: what paging's pressure
    zones are ratios of (a small budget asked for once evicts nothing for good)."""
    b = session.budget
    return max(session.context_window - b.system_tokens - session.response_reserve - b.tool_tokens, 0)


def plan(session: Session, history: list[dict], query: str | None, db: Database | None = None) -> Plan:
    """What the rest of the compile goes by. With db, the session's semantic objects
    set each history unit's fidelity floor, after this compile's pressure changes
    (paging.residency; not for an as_of compile, which looks at the past)."""
    opts, available = session.options, session.budget.available
    task = opts["task_type"] or classify_task(query, history, True)
    b_hist = history_share(available, task, opts["cap_history"])
    prepared = PreparedHistory(history, session.allowed)
    paging = None
    if db is not None and session.as_of is None:
        paging = residency.read(db, session.tenant_id, session.session_id, prepared, window_budget(session))
        if paging is not None:
            prepared.floors = paging.floors
            if opts["budget"] is None and opts["cap_history"] is None:
                # the resident history is what paging kept within the window: the
                # history share must not degrade it again by age (prefix stability)
                b_hist = min(max(b_hist, paging.tokens), available)
    # memories get B minus what the history uses, within their limit
    limit, default_cap = memory_limit(available, opts)
    room = min(available - pack_history(prepared, b_hist).tokens, limit)
    return Plan(task=task, memory_share=memory_share(available, task, opts["cap_memory"]),
                history_share=b_hist, memory_limit=limit, default_cap=default_cap,
                exclude=verbatim_message_ids(history, b_hist),
                prepared=prepared, room=room, paging=paging, asks_when=temporal_intent(query),
                date_ranges=tuple(date_ranges(query, session.now)))


def write_paging(db: Database, session: Session, plan: Plan) -> None:
    """The compile's residency changes, unless the compile is not logged (looking,
    as `mnemo show` does, must not change the session)."""
    if plan.paging is not None and session.options["log"]:
        residency.write(db, session.tenant_id, session.session_id, plan.paging)


def read_pool(db: Database, session: Session, plan: Plan, query: str | None,
              query_vector: Callable[[], np.ndarray | None] = lambda: None
              ) -> tuple[CandidatePool, list[tuple[str, str]]]:
    """The candidate pool, and the session's previous context's memory items (source,
    fidelity) in their order. query_vector: waits for the query's embedding (a tenant
    with a recall index needs it to find the nearest items)."""
    if session.recall_up_to is not None and session.as_of is None:
        return read_recalled_pool(db, session, plan, query, query_vector)
    words = query_words(query)
    lexical = db.run("candidate_pool", statements.pool_args(
        session.tenant_id, session.session_id, query, words, session.as_of, session.channel,
        TIME_WORDS if plan.asks_when or plan.date_ranges else None))[0]
    segments = db.run("message_segments", statements.segments_args(
        session.tenant_id, session.session_id, lexical["lexemes"], session.channel, session.agent_id,
        session.options["recall_scope"]))
    pool = rows.candidate_pool(lexical, segments, session.channel,
                               session.now_epoch if session.as_of else None, plan.exclude, words, asker_roles(query))
    return pool, rows.previous_items(lexical)


def read_recalled_pool(db: Database, session: Session, plan: Plan, query: str | None,
                       query_vector: Callable[[], np.ndarray | None]
                       ) -> tuple[CandidatePool, list[tuple[str, str]]]:
    """read_pool for a tenant with a recall index (statements.RECALL_HITS and after):
    the pool holds what the index finds nearest and best by BM25, with what it may
    lack, instead of everything the tenant has. (as_of reads the whole history: the
    index holds the memories active now.)"""
    words = query_words(query)
    k = recall_k(plan.room)
    memories, messages, created = recalled(
        db.run_for_tenant("recall_hits", session.tenant_id, [session.tenant_id, query, k])[0])
    # (with the most used memories: candidates whatever the question)
    memories += db.run_for_tenant("frequent_memories", session.tenant_id, [])[0]["memory_id"] or []
    vector = query_vector() if query else None
    if vector is not None:
        near = recalled(db.run_for_tenant("recall_knn", session.tenant_id, [vector_text(vector), k])[0])
        memories, messages, created = memories + near[0], messages + near[1], created + near[2]
    lexical = db.run("candidate_pool_recalled", statements.pool_args(
        session.tenant_id, session.session_id, query, words, None, session.channel,
        TIME_WORDS if plan.asks_when or plan.date_ranges else None) + [memories, session.recall_synced_at])[0]
    segments = db.run("recalled_messages", statements.segments_args(
        session.tenant_id, session.session_id, lexical["lexemes"], session.channel, session.agent_id,
        session.options["recall_scope"]) + [messages, created, session.recall_up_to])
    pool = rows.candidate_pool(lexical, segments, session.channel, None, plan.exclude, words, asker_roles(query))
    return pool, rows.previous_items(lexical)


def vector_text(vector: np.ndarray) -> str:
    """A vector as pgvector's text input."""
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"


def cosines(pool: CandidatePool, query_vector: np.ndarray | None,
            nameless_vector: np.ndarray | None = None) -> np.ndarray:
    """Each pool member's cosine to the query (NaN: no vector, or no query); with the
    vector of the query without the speakers it names (retrieval.without_names), the
    mean of the two cosines. (Both vectors have length 1: that mean is the cosine to
    their sum times half its length, one pass over the pool's vectors.)"""
    if query_vector is None:
        return np.full(pool.size, np.nan)
    if nameless_vector is None:
        return pool.cosine(query_vector)
    both = np.asarray(query_vector, dtype=np.float64) + np.asarray(nameless_vector, dtype=np.float64)
    return pool.cosine(both) * (float(np.linalg.norm(both)) / 2.0)


def nameless_vector(query: str | None, pool: CandidatePool, query_vector: np.ndarray | None,
                    embed: Callable[[list[str]], np.ndarray]) -> np.ndarray | None:
    """The vector of the query without the speakers it names (nameless_query), as the
    query's vector less its component along each name's own vector, length 1. The
    names' vectors are a backend's after their first compile (embedding.Embedder.recall),
    where embedding the nameless text costs an encoder run per compile."""
    if query_vector is None or nameless_query(query, pool) is None:
        return None
    v = np.asarray(query_vector, dtype=np.float64)
    for u in embed([w for w in query_words(query) if w in pool.speakers]).astype(np.float64):
        v = v - (v @ u) * u
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def nameless_query(query: str | None, pool: CandidatePool) -> str | None:
    """The query without the speakers it names, when it names some and says more
    (retrieval.without_names). Half of the content match is to this text: the full
    query's vector alone leans to the lines that name the person, mostly said to
    them ("Thanks, Tim!"), over what the person said. Half, not all of it: a name can
    be what a line is about."""
    return without_names(query, pool.speakers)


def recall_scope(session: Session, pool: CandidatePool) -> dict:
    """The report's account of the recall scope: whose sessions were recalled, and how
    many messages it hid (other agents' sessions the channel would otherwise recall)."""
    return {"scope": session.options["recall_scope"], "hidden_messages": pool.scope_hidden}


def read_candidates(db: Database, session: Session, plan: Plan, pool: CandidatePool,
                    cosine: np.ndarray) -> list[dict]:
    """The fused candidates with their rows, as decide takes them."""
    fused = fuse_candidates(pool, cosine, session.weights, plan.room, plan.date_ranges, plan.asks_when)
    if not fused:
        return []
    return rows.candidates(db.run("candidate_rows", statements.rows_args(
        session.tenant_id, fused, session.channel, session.as_of))[0], fused)


def match_turn_sentences(db: Database, tenant_id: str, candidates: list[dict], query_vector: np.ndarray | None,
                         roles: frozenset[str], lexical: float) -> None:
    """retrieval.match_sentences over the sentence vectors the turns' embed jobs
    stored (one statement for the 20 turns at most; nothing encoded here)."""
    turns = sentence_turns(candidates, query_vector, roles)
    if not turns:
        return
    r = db.run("sentence_vectors", [tenant_id, [c["id"] for c in turns], [c["created_epoch"] for c in turns]])
    vectors = {row["message_id"]: embedding.from_pgvector_bytes(row["vectors"], row["n"]) for row in r if row["vectors"]}
    match_sentences(turns, vectors, query_vector, lexical)


def log(db: Database, session: Session, query: str | None, report: dict, latency_ms: float) -> int | None:
    """The context_log row's id (None: the log option is off)."""
    if not session.options["log"]:
        return None
    return db.run("log", [
        session.tenant_id, session.session_id, query, report["task_type"], report["budget"]["available"],
        report["tokens"]["total"], rows.dumps(report["tokens"]), rows.dumps(report["items"]),
        rows.dumps(report["omissions"]), rows.dumps(report["provenance"]), latency_ms,
    ])[0]["context_id"]


class QueryEmbedder(Protocol):
    """What run() embeds with: the query, once, on the side (start: a pending result
    whose result()[0] is the vector), and the few names a query holds (embed)."""

    def start(self, query: str) -> Any: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


class Compiled(NamedTuple):
    """What run() produced: the bundle (without ids, timings and latency: the
    caller's), the context_log row's id, the latency it records, and what it was
    made from."""
    bundle: dict
    context_id: int | None
    latency_ms: float
    session: Session
    plan: Plan
    query: str | None


def run(db: Database, tenant_id: str, session_id: str | None, query: str | None, options_json: str | None,
        embedder: QueryEmbedder, line_counter: Callable[[list[str]], list[int]] = count_lines,
        lap: Callable[[str], None] = lambda phase: None,
        elapsed_ms: Callable[[], float] = lambda: 0.0) -> Compiled:
    """The compile: every phase in its order. lap(name) marks the end of each timed
    step (the report's timings_ms); elapsed_ms is the latency the log row records."""
    if session_id is None:
        fail(db, "session_id is required")
    session = read_session(db, tenant_id, session_id, options_json)
    resolved = resolve_query(db, session, query)
    query, cut = resolved.text, resolved.cut
    pending = embedder.start(query) if query else None  # runs while the phases below read
    lap("session")
    history = read_history(db, session)
    planned = plan(session, history, query, db)
    lap("history")
    pool, previous = read_pool(db, session, planned, query, lambda: pending.result()[0] if pending else None)
    lap("lexical")
    query_vector = pending.result()[0] if pending else None
    nameless = nameless_vector(query, pool, query_vector, embedder.embed)
    lap("embedding_wait")
    cosine = cosines(pool, query_vector, nameless)
    lap("vector")
    candidates = read_candidates(db, session, planned, pool, cosine)
    match_turn_sentences(db, session.tenant_id, candidates, query_vector, asker_roles(query),
                         session.weights["lexical"])
    lap("candidates")
    bundle = decide(session, history, planned, candidates, previous, query, recall_scope(session, pool), line_counter)
    if cut:
        bundle["report"]["provenance"]["query_cut"] = cut
    lap("pack")
    latency = elapsed_ms()
    context_id = log(db, session, query, bundle["report"], latency)
    write_paging(db, session, planned)
    share_query_vector(db, session, resolved, query_vector)
    lap("log")
    return Compiled(bundle, context_id, latency, session, planned, query)
