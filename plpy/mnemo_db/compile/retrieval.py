"""Retrieval: what a tenant's visible memories and messages offer a query (the
candidate pool, read by the CANDIDATE_POOL and MESSAGE_SEGMENTS statements), and the
candidates worth fetching in full, by fused relevance (fuse_candidates)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .policy import MESSAGE_SUMMARY_MIN_TOKENS
from .temporal import in_date_ranges

_WORD_RE = re.compile(r"[\w.-]+")
# Trigram word similarity finds a misspelt name or identifier in a query of a few
# words; a longer question almost never matches, and each memory costs the compile
# (docs/performance.md).
TRIGRAM_MAX_QUERY_WORDS = 3


def query_words(query: str | None) -> list[str]:
    """The query's lower-cased words, matched against tags, entities and speakers."""
    return sorted({w.lower().strip(".-") for w in _WORD_RE.findall(query or "")} - {""})


# a name and the possessive that may follow it ("Tim's", "Tim’s")
_POSSESSIVE_RE = re.compile(r"['’]s\b")


def without_names(query: str | None, names) -> str | None:
    """The query without the words that name one of `names` (lower-cased speakers),
    or None when it names none of them or is nothing else. A speaker is who said a
    turn, not what it says: the tag bonus counts who, and the name in the query's
    vector only pulls it towards the lines that name the person (mostly said to
    them, "Thanks, Tim!"), away from what the person said."""
    if not query or not names:
        return None
    kept, at, dropped = [], 0, False
    for m in _WORD_RE.finditer(query):
        if m.group().lower().strip(".-") in names:
            kept.append(query[at:m.start()])
            at = m.end()
            possessive = _POSSESSIVE_RE.match(query, at)
            if possessive:
                at = possessive.end()
            dropped = True
    if not dropped:
        return None
    text = " ".join("".join(kept + [query[at:]]).split())
    return text if _WORD_RE.search(text) else None


# A question's grammatical person: the asker (I, me, my...), the one asked (you,
# your...), both together (we, our, lower-case us: "the US" is a country). Words in
# quotes are someone else's.
_FIRST_SINGULAR = re.compile(r"(?i)\b(?:I|I['’](?:m|ve|d|ll)|me|my|mine|myself)\b(?!-)")
_OTHER_PERSONS = re.compile(
    r"(?i)\b(?:you|you['’](?:re|ve|d|ll)|your|yours|yourself|yourselves|we|we['’](?:re|ve|d|ll)|our|ours"
    r"|ourselves|(?-i:us))\b")
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')


def asker_roles(query: str | None) -> frozenset[str]:
    """The roles whose turns a query names as its speaker by its grammatical person.
    A query comes from the user's side of a conversation: one in the first person
    singular alone ("How many doctors did I see?", "What is my favourite rice?") asks
    about what the user said or did, which the user's turns tell (an assistant's turn
    answers what was asked of it), so the user's turns are the speaker it names,
    as a name names one (the tag bonus). With a second person or a first person
    plural in it ("what did you suggest", "in our previous chat") it may ask about
    the assistant's words or the conversation itself, and names no role; nor does a
    query in the third person. Words in quotes are someone else's. The other roles'
    turns then count only by what they borrow (fuse_candidates)."""
    text = _QUOTED.sub(" ", query or "")
    if _FIRST_SINGULAR.search(text) and not _OTHER_PERSONS.search(text):
        return frozenset({"user"})
    return frozenset()


def trigram_query(query: str | None, words: list[str]) -> str | None:
    """The query for trigram word similarity: a short one only."""
    return query if len(words) <= TRIGRAM_MAX_QUERY_WORDS else None


# A memory or message this close to the query by trigram word similarity is a
# candidate whatever its fused relevance (a misspelt name or identifier).
TRIGRAM_MATCH = 0.6
FREQUENT_GLOBAL = 20  # the most used global memories that are always candidates
# The most relevant candidates are kept until their cheapest lines (each with its
# label and newline, LINE_OVERHEAD) could fill the memory room OVERFILL times over:
# packing then still has a choice at every fidelity. Within sane bounds.
OVERFILL, LINE_OVERHEAD = 2.0, 8
MIN_CANDIDATES, MAX_CANDIDATES = 60, 2000
# A line that dates something ("yesterday", "last week", "two weeks ago") may tell of
# a time up to this many days before it was said: it is in a date range the query
# names when that span meets it.
DATED_REACH_DAYS = 14


# A tenant with a recall index (statements.RECALL_HITS, RECALL_KNN): its k nearest
# items and its k best by BM25 are candidates, k enough for fuse_candidates to keep
# as many as the memory room takes (its limit: OVERFILL times the room in cheapest
# lines), with a margin for the lines that are shorter than RECALL_LINE_TOKENS and
# for those the reader may not see.
RECALL_LINE_TOKENS = 16
MAX_RECALL_K = 1000


def recall_k(room: int) -> int:
    """How many nearest (and best lexical) items a recall index is asked for."""
    return min(max(int(OVERFILL * max(room, 0)) // (RECALL_LINE_TOKENS + LINE_OVERHEAD), 2 * MIN_CANDIDATES),
               MAX_RECALL_K)


def recalled(r: dict) -> tuple[list[int], list[int], list[float]]:
    """Items of a RECALL_HITS or RECALL_KNN row: memory ids, message ids and the
    messages' created_at (epoch)."""
    ids = np.asarray(r["item_id"] or [], dtype=np.int64)
    is_memory = np.asarray(r["is_memory"] or [], dtype=bool)
    created = np.asarray(r["created_epoch"] or [], dtype=np.float64)
    return ids[is_memory].tolist(), ids[~is_memory].tolist(), created[~is_memory].tolist()


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
    # messages the reader could have recalled but for belonging to another agent
    # (message_pool's scope_hidden)
    scope_hidden: int = 0
    # the pool's messages' speakers (lower-cased names)
    speakers: frozenset[str] = frozenset()
    # per message: its turn_index in its session (None: the pool holds every turn, in
    # order; a recall index's pool holds the found turns and their neighbours alone)
    message_turn: np.ndarray | None = None
    # per message: said in a role other than the one the query asks about by its
    # grammatical person (asker_roles; None: it names no role)
    other_role: np.ndarray | None = None
    # bool per member: its text holds a word that dates something (temporal.TIME_WORDS,
    # looked up for a question that asks when; else all False)
    dated: np.ndarray | None = None
    # per member: when what it says was said (a memory's valid_from, a message's
    # time), epoch seconds (NaN: unknown)
    event_epoch: np.ndarray | None = None

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

    def unit_vectors(self, positions: np.ndarray) -> np.ndarray:
        """The members' vectors at these pool positions, scaled to length 1, one row
        each (zeros: no vector)."""
        dim = max((m.shape[1] for m in self.vectors if len(m)), default=0)
        out = np.zeros((len(positions), dim), dtype=np.float32)
        if not len(self.embedded) or not len(positions):
            return out
        at = np.searchsorted(self.embedded, positions)
        at = np.minimum(at, len(self.embedded) - 1)
        has = self.embedded[at] == positions
        rows = at[has] if self.vector_rows is None else self.vector_rows[at[has]]
        sizes = np.cumsum([0] + [len(m) for m in self.vectors])
        which = np.searchsorted(sizes, rows, side="right") - 1
        picked = np.stack([self.vectors[w][r - sizes[w]].astype(np.float32) for w, r in zip(which, rows)]) \
            if len(rows) else out[:0]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[has] = np.nan_to_num(picked / self.norms[at[has]][:, None].astype(np.float32))
        return out


# Okapi BM25's usual constants: term frequency saturation (k1) and length
# normalisation (b). Each term is counted once per document (a term frequency of 1).
BM25_K1, BM25_B = 1.2, 0.75


def okapi(idf: float, tf: int, length: float, avgdl: float) -> float:
    """Okapi BM25 of one term in one document that holds it tf times (BM25_K1,
    BM25_B): what paging's memory_query ranks the objects' full texts by, where
    bm25 below counts each term once."""
    return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl))


def bm25(n: int, hit_rows, hit_terms, idf, doc_length, avgdl: float) -> np.ndarray:
    """Okapi BM25 of n documents (BM25_K1, BM25_B, each term counted once): the idf
    of every query lexeme a document contains (hit_rows[i] contains lexeme
    hit_terms[i]), weighted by the document's length against the average."""
    score = np.zeros(n)
    if hit_rows is not None and len(hit_rows):
        np.add.at(score, np.asarray(hit_rows, dtype=np.int64),
                  np.asarray(idf, dtype=np.float64)[np.asarray(hit_terms, dtype=np.int64)])
    length = np.asarray(doc_length, dtype=np.float64) / avgdl
    return score * (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * length))


def holding(n: int, hit_rows, hit_terms, terms: np.ndarray | None) -> np.ndarray:
    """Which of n documents contain one of these terms (hit_rows[i] contains
    hit_terms[i])."""
    out = np.zeros(n, dtype=bool)
    if terms is not None and len(terms) and hit_rows is not None and len(hit_rows):
        rows = np.asarray(hit_rows, dtype=np.int64)
        out[rows[np.isin(np.asarray(hit_terms, dtype=np.int64), terms)]] = True
    return out


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
    roles: list[str]  # its distinct roles (user, assistant, tool)
    role_pos: np.ndarray  # 1-based into roles
    embedded: np.ndarray  # bool
    norms: np.ndarray  # one per embedded message, as vectors
    vectors: np.ndarray  # one row per embedded message
    hit_rows: np.ndarray
    hit_terms: np.ndarray
    # bool per session: hidden for belonging to another agent alone (the recall
    # scope); empty: none is
    session_scoped_out: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def message_pool(parts: list[MessagePart], idf, avgdl: float, allowed: tuple[str, ...],
                 as_of: float | None, exclude: list[int], words: list[str],
                 time_terms: np.ndarray | None = None, roles: frozenset[str] = frozenset()) -> dict:
    """The messages a reader may recall, from segments and the tail, as the message
    half of a CandidatePool (arrays under its field names, plus the embedded ones'
    `embedded` positions, `vectors`: the parts' matrices, `vector_rows`: each one's
    row in them, and `norms`), in session and turn order: only
    sensitivities in `allowed`, visible sessions, written by `as_of` (epoch), not in
    `exclude` (the verbatim window). A long message's floor is its stub level, or
    MESSAGE_SUMMARY_MIN_TOKENS until its levels are stored. `scope_hidden`: how many
    messages the reader could have recalled but for belonging to another agent's
    session (MessagePart.session_scoped_out). `dated`: whether a message holds one of
    the `time_terms` (indexes into idf, which gives them no weight). `tag_match`: said
    by a speaker the query names (`words`), or in one of the `roles` it names by its
    grammatical person (asker_roles); `other_role`: said by another speaker, a tool's
    output not counted (None when it names none)."""
    parts = [p for p in parts if len(p.message_ids)]
    if not parts:
        empty = np.zeros(0)
        return {"scope_hidden": 0, "dated": np.zeros(0, dtype=bool),
                "message_ids": np.zeros(0, dtype=np.int64), "message_created": empty,
                "same_session": np.zeros(0, dtype=bool), "floor_tokens": np.zeros(0, dtype=np.int64),
                "message_turn": np.zeros(0, dtype=np.int64), "other_role": None,
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

    permitted = cat([flags(p.sensitivities, p.sensitivity_pos, allowed.__contains__) for p in parts])
    if as_of is not None:
        permitted &= created <= as_of
    scoped_out = cat([p.session_scoped_out[p.session_pos - 1] if len(p.session_scoped_out)
                      else np.zeros(len(p.message_ids), dtype=bool) for p in parts])
    keep = visible & permitted
    if exclude:  # (a few dozen ids: a binary search each, not np.isin's sort of all)
        excluded = np.sort(np.asarray(exclude, dtype=np.int64))
        at = np.minimum(np.searchsorted(excluded, ids), len(excluded) - 1)
        keep &= excluded[at] != ids
    lexical = cat([bm25(len(p.message_ids), p.hit_rows, p.hit_terms, idf, p.doc_length, avgdl)
                   for p in parts])
    dated = cat([holding(len(p.message_ids), p.hit_rows, p.hit_terms, time_terms) for p in parts])
    named = set(words) - {""}
    tag = cat([flags(p.speakers, p.speaker_pos, named.__contains__) for p in parts])
    other_role = None
    if roles:
        asked = cat([flags(p.roles, p.role_pos, roles.__contains__) for p in parts])
        tag |= asked
        # only another speaker's words: a tool's output is what the world said (the
        # build log behind "why does my build fail?"), evidence whoever asks
        other_role = cat([flags(p.roles, p.role_pos, lambda r: r not in roles and r != "tool") for p in parts])
    tokens_ = cat([p.token_count for p in parts])
    stub = cat([p.stub_tokens for p in parts])
    floor = np.where(tokens_ < MESSAGE_SUMMARY_MIN_TOKENS, tokens_,
                     np.where(stub >= 0, stub, MESSAGE_SUMMARY_MIN_TOKENS))
    embedded = cat([p.embedded for p in parts])
    vector_row = np.cumsum(embedded) - 1  # each embedded message's row in the parts' vectors
    norms = cat([p.norms for p in parts])

    order = np.flatnonzero(keep)
    turns = cat([p.turn_index for p in parts])
    order = order[np.lexsort((ids[order], turns[order], session[order]))]
    has_vector = embedded[order]
    return {
        "scope_hidden": int(np.count_nonzero(scoped_out & permitted)),
        "message_ids": ids[order], "message_created": created[order],
        "same_session": np.concatenate([[False], session[order][1:] == session[order][:-1]])
        if len(order) else np.zeros(0, dtype=bool),
        "message_turn": turns[order].astype(np.int64),
        "floor_tokens": floor[order].astype(np.int64), "bm25": lexical[order], "tag_match": tag[order],
        "other_role": None if other_role is None else other_role[order],
        "dated": dated[order],
        "embedded": np.flatnonzero(has_vector),
        "vectors": [p.vectors for p in parts], "vector_rows": vector_row[order[has_vector]],
        "norms": norms[vector_row[order[has_vector]]],
    }


def fuse_candidates(pool: CandidatePool, cosine: np.ndarray, w: dict, room: int,
                    date_ranges: list | tuple = (), asks_when: bool = True) -> list[dict]:
    """The candidates worth fetching, with their fused relevance:
        min(1, (1 - lexical) * cosine + lexical * BM25 / best BM25 + tag bonus)
            + dated bonus + date range bonus
    plus, for a message, `neighbour` times the better of the turns just before and
    after it in its session, without their tag bonus (a reply means little without
    the turn it answers; who said that turn is not the reply's speaker),
    plus `context` times the best content match among the CONTEXT_TURNS turns either
    side (nearby_best: a turn in the part of a conversation that is about the
    question is likelier to hold its answer than one as close to the question said
    elsewhere; the evidence for a broad question is such turns, each a weak match),
    plus `length` times its length prior (length_prior: a short turn, "Wow, cool!",
    or a question back, says little that could answer anything, while a long one's
    vector is spread over all it says and BM25 discounts its length, so both
    understate its match), less the diversity discount (diversify). A message said
    in a role other than the one the query asks about (pool.other_role: "How many
    doctors did I see?" asks what the user said, asker_roles) is not evidence
    itself: its own match and dates count for nothing, what it borrows from the
    turns beside it stays (the reply that follows what the user said still rises
    with it). With a named role the assistant's long replies on a topic, each as
    close a match as the user's turn that mentions a fact in passing, held most of
    the top 10 (issue 42 §3). The dated bonus goes to a member whose
    text dates something, for a question that asks when (`asks_when`, pool.dated);
    the date range bonus to one said within a date range the query names
    (`date_ranges`, temporal.date_ranges), or said up to DATED_REACH_DAYS after it
    when its text dates something (told "yesterday" or "last week").
    `cosine` is aligned with the pool (NaN: no embedding yet). Kept: the most relevant
    ones whose cheapest lines fill a memory block of `room` tokens OVERFILL times,
    every pinned memory, every trigram match, and the most used global memories.
    Ties go to the memory, then the lower id: the same pool and query give the same
    candidates. Each comes with the retrievers that found it (the report's
    provenance), and its own `match`: the capped content match and tag and date
    bonuses above, before what it borrows from other turns, its length prior, the
    diversity discount and the role rule (bundle.stand_ins compares a memory's with
    its source turns')."""
    n = pool.size
    if n == 0:
        return []
    n_mem = len(pool.memory_ids)
    best_bm25 = pool.bm25.max()
    lexical = pool.bm25 / best_bm25 if best_bm25 > 0 else np.zeros(n)
    # fmax: a member without an embedding (NaN) counts as cosine 0
    content = (1 - w["lexical"]) * np.fmax(cosine, 0.0) + w["lexical"] * lexical
    rel0 = np.minimum(1.0, content + np.where(pool.tag_match, w["tag_bonus"], 0.0))
    # the date signals above the cap: a close match that does not say when must not
    # tie with one that does
    dates = np.zeros(n)
    if pool.dated is not None and asks_when:
        dates += np.where(pool.dated, w["dated_bonus"], 0.0)
    if date_ranges and pool.event_epoch is not None:
        reach = 0.0 if pool.dated is None else np.where(pool.dated, DATED_REACH_DAYS * 86400.0, 0.0)
        dates += np.where(in_date_ranges(pool.event_epoch, list(date_ranges), reach), w["date_range_bonus"], 0.0)
    rel0 += dates
    # A turn lends its neighbours what it says (its content and dates), not who said
    # it: the reply to the person a question names is not that person's; lending the
    # speaker's tag bonus as well lifted every turn around the named person's, and on
    # LoCoMo's adversarial questions (which name the wrong person) it buried the
    # other speaker's evidence.
    turn = (np.minimum(1.0, content) + dates)[n_mem:]
    before = np.zeros_like(turn)
    after = np.zeros_like(turn)
    if len(turn) > 1:
        before[1:] = np.where(pool.same_session[1:], turn[:-1], 0.0)
        after[:-1] = np.where(pool.same_session[1:], turn[1:], 0.0)
    relevance = rel0.copy()
    if pool.other_role is not None:
        relevance[n_mem:][pool.other_role] = 0.0
    relevance[n_mem:] += (w["neighbour"] * np.maximum(before, after)
                          + w["context"] * nearby_best(np.minimum(1.0, content[n_mem:]), pool.same_session,
                                                       pool.message_turn)
                          + w["length"] * length_prior(pool.floor_tokens[n_mem:]))
    ids = np.concatenate([pool.memory_ids, pool.message_ids])
    # one tie-breaking key: memories (0) before messages (1), then the lower id
    tie = np.concatenate([pool.memory_ids, pool.message_ids + (1 << 62)])
    relevance = diversify(pool, relevance, w["diversity"], tie)
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
    for message, id_, rel, own, pinned, access, found, epoch, cos in zip(
            is_message.tolist(), ids[kept].tolist(), relevance[kept].tolist(), rel0[kept].tolist(),
            pool.pinned[kept].tolist(), pool.access_count[kept].tolist(), found_by.tolist(), created.tolist(),
            kept_cosine.tolist()):
        out.append({
            "source": f"msg:{id_}" if message else f"mem:{id_}", "id": id_, "relevance": rel, "match": own,
            "is_pinned": pinned, "access_count": access, "retrievers": RETRIEVER_SETS[found],
            "created_epoch": epoch if message else None, "cosine": cos,
        })
    return out


# The turns either side of a message that tell what its conversation is about there
# (fuse_candidates' `context`): a few, so that a long session's other topics do not.
CONTEXT_TURNS = 3
# The length prior's reach either side of the median turn: e^2, ~7 times longer or shorter.
LENGTH_PRIOR_CLIP = 2.0


def nearby_best(content: np.ndarray, same_session: np.ndarray, turn: np.ndarray | None = None,
                k: int = CONTEXT_TURNS) -> np.ndarray:
    """The best content match among the k turns before and the k after each message,
    within its session (messages in session and turn order; same_session: same
    session as the message before; turn: their turn indexes, where the pool may lack
    turns between them, None where it lacks none)."""
    session = np.cumsum(~same_session)
    n = len(content)
    best = np.zeros(n)
    for d in range(1, min(k, n - 1) + 1):
        same = session[d:] == session[:-d]
        if turn is not None:
            same &= turn[d:] - turn[:-d] <= k
        # (content is >= 0: times the mask, in place, is a third of np.where's cost)
        np.maximum(best[d:], content[:-d] * same, out=best[d:])
        np.maximum(best[:-d], content[d:] * same, out=best[:-d])
    return best


def length_prior(floor_tokens: np.ndarray) -> np.ndarray:
    """Each message's length against the pool's median, as a log ratio within
    +-LENGTH_PRIOR_CLIP (a long message's floor is its stub: bounded anyway)."""
    if not len(floor_tokens):
        return np.zeros(0)
    n = np.asarray(floor_tokens, dtype=np.float64) + 1.0
    return np.clip(np.log(n / np.median(n)), -LENGTH_PRIOR_CLIP, LENGTH_PRIOR_CLIP)


# How many of the most relevant members diversify re-ranks.
DIVERSIFIED = 100


def diversify(pool: CandidatePool, relevance: np.ndarray, discount: float, tie: np.ndarray) -> np.ndarray:
    """Relevance less `discount` times each member's greatest cosine to a member
    ranked above it (maximal marginal relevance over the DIVERSIFIED most relevant,
    picked greedily): the evidence for a question is often spread over sessions, each
    piece a weak match, and a near-copy of a line already ranked adds little, so
    the next distinct one moves up. The others keep theirs. Ties go by `tie`."""
    if discount <= 0 or len(relevance) < 2:
        return relevance
    top = np.lexsort((tie, -relevance))[:DIVERSIFIED]
    vectors = pool.unit_vectors(top)
    base = relevance[top]
    closest = np.zeros(len(top))
    open_ = np.ones(len(top), dtype=bool)
    out = relevance.copy()
    for _ in range(len(top)):
        k = int(np.argmax(np.where(open_, base - discount * closest, -np.inf)))  # equals: the first in tie order
        out[top[k]] = base[k] - discount * closest[k]
        open_[k] = False
        # a row at a time: the whole similarity matrix in one product ran on BLAS's
        # threads, whose start cost more than the rest on a loaded machine
        closest = np.maximum(closest, vectors @ vectors[k])
    return out


# A turn's sentences (sentences): split after a full stop, question or exclamation
# mark (or one closing a quote) followed by a capital or a quote; a fragment of fewer
# than SENTENCE_MIN_WORDS words ("Thanks!", "Hi there.") matches nothing in particular.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’]))\s+(?=[A-Z\"'“])")
SENTENCE_MIN_WORDS = 3
# The roles whose turns have their sentences embedded (the embed job:
# mnemo_internal.message_sentences) and matched: those asker_roles can name.
SENTENCE_ROLES = frozenset({"user"})
# How many of the named role's most relevant turns have their sentences matched
# (match_sentences): their vectors are read with one statement (sentence_vectors).
SENTENCE_MATCHED = 20


def sentences(text: str | None) -> list[str]:
    """The sentences of a turn that say something (SENTENCE_MIN_WORDS words or more);
    none for a turn of one sentence, whose own vector is that sentence's. The one
    split: the embed job embeds these (mnemo_internal.message_sentences) and the
    compile matches their vectors (match_sentences)."""
    found = [s.strip() for s in _SENTENCE_END.split(text or "") if len(s.split()) >= SENTENCE_MIN_WORDS]
    return found if len(found) > 1 else []


def role_sentences(role: str | None, text: str | None) -> list[str]:
    """The sentences the embed job embeds for a message: a turn of SENTENCE_ROLES only."""
    return sentences(text) if role in SENTENCE_ROLES else []


def sentence_turns(candidates: list[dict], query_vector: np.ndarray | None,
                   roles: frozenset[str]) -> list[dict]:
    """The candidate turns whose sentences match_sentences matches: the
    SENTENCE_MATCHED most relevant turns of the roles the query names (asker_roles)
    that have a vector; none without a query vector or a named role."""
    if query_vector is None or not (roles & SENTENCE_ROLES):
        return []
    return sorted((c for c in candidates if c["source"].startswith("msg:") and c.get("role") in roles
                   and c.get("cosine") is not None and not np.isnan(c["cosine"])),
                  key=lambda c: -c["relevance"])[:SENTENCE_MATCHED]


def match_sentences(turns: list[dict], vectors: dict[int, np.ndarray], query_vector: np.ndarray,
                    lexical: float) -> None:
    """A turn of the role a query names (asker_roles) is as close to the query as its
    closest sentence: the content match of each of `turns` (sentence_turns; their
    `relevance`, in place) counts that sentence's cosine where it is above the turn's
    own (the candidates' `cosine`), with the vector's share of the content match,
    1 - lexical. vectors: a turn's id -> its sentences' vectors (float32 rows), as
    its embed job stored them (none yet: the turn keeps its own match); the compile
    encodes nothing for them. A user's turn in a chat with an assistant is mostly a
    request, and what it tells of the user ("By the way, I finally saw my doctor on
    March 3rd") is a sentence said in passing: the whole turn's vector is the
    request's, and the question that asks for the fact ("How many doctor's
    appointments did I go to?") matches the turns about its topic better than the
    one that holds it (issue 42 §3)."""
    if not turns or not vectors:
        return
    q = np.asarray(query_vector, dtype=np.float32)
    q = q / float(np.linalg.norm(q))
    for c in turns:
        said = vectors.get(c["id"])
        if said is not None and len(said):
            norms = np.linalg.norm(said, axis=1)
            best = float(np.max((said @ q) / np.where(norms > 0, norms, 1.0)))
            gain = (1 - lexical) * max(0.0, best - max(c["cosine"], 0.0))  # fused: cosine >= 0
            c["relevance"] += gain
            if c.get("match") is not None:
                c["match"] += gain


RETRIEVERS = ("vector", "fulltext", "entity_tag", "trigram", "frequent")
# The retrievers named by each bit set of RETRIEVERS (bit k: RETRIEVERS[k]), built once:
# a list per candidate cost more than the rest of fuse_candidates' loop. Shared: read only.
RETRIEVER_SETS = tuple(tuple(name for k, name in enumerate(RETRIEVERS) if bits >> k & 1)
                       for bits in range(1 << len(RETRIEVERS)))
