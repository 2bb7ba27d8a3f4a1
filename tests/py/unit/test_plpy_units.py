"""Unit tests of the in-database package plpy/mnemo_db, outside the server."""

from __future__ import annotations

import re
from concurrent.futures import Future
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mnemo_db import embedding, excerpt, tokens
from mnemo_db.compile import packing, phases, policy, retrieval, statements
from mnemo_db.compile.retrieval import CandidatePool
from mnemo_db.formation.formation import Former
from mnemo_db.timestamps import utc_datetime


def test_count_known_strings():
    # o200k_base ids for these strings are fixed by the encoding
    assert tokens.count("hello world") == 2
    assert tokens.count("") == 0 and tokens.count(None) == 0


def test_count_message_parts_and_tool_calls():
    plain = tokens.count_message({"role": "user", "content": "hello world"})
    assert plain == tokens.MESSAGE_OVERHEAD + 2
    parts = tokens.count_message({"role": "user", "content": [
        {"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}]})
    assert parts == plain + tokens.NON_TEXT_PART_TOKENS
    call = tokens.count_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
    assert call > tokens.MESSAGE_OVERHEAD + 5


def test_excerpt_small_text_is_unchanged():
    assert excerpt.make_excerpt("short", 100, 1) == "short"


def test_excerpt_keeps_whole_lines_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(10000))
    out = excerpt.make_excerpt(text, 1000, 7)
    head, _, rest = out.partition("\n[... ")
    marker, _, tail = rest.partition("]\n")
    assert head.startswith("line 0\n") and all(ln.startswith("line ") for ln in head.splitlines())
    assert all(ln.startswith("line ") for ln in tail.splitlines()) and out.endswith("line 9999\n")
    assert "artifact 7" in marker
    assert len(out.encode()) < 1000 + 200


def test_excerpt_never_splits_multibyte_characters():
    text = "é" * 100000
    out = excerpt.make_excerpt(text, 1001, 1)
    out.encode("utf-8")  # valid UTF-8
    assert "omitted" in out


def test_stickiness_boosts_an_item_at_its_previous_fidelity_and_below_only():
    """The next compile must not upgrade an item of the previous context (it would push
    others out): only its previous fidelity and lower ones are worth more."""
    from mnemo_db.compile.packing import Item, Option, pack_items
    from mnemo_db.compile.packing import option_value as _value

    def item(source, value, sticky=None):
        opts = [Option("full", source, 100), Option("detail", source, 40), Option("stub", source, 10)]
        return Item(source=source, kind="fact", score=value, options=opts, value=value,
                    sticky_from=sticky, stickiness=0.10)

    x = item("mem:1", 1.0, sticky=1)  # was sent at detail
    assert _value(x, 1) == _value(item("mem:1", 1.0), 1) * 1.10
    assert _value(x, 2) == _value(item("mem:1", 1.0), 2) * 1.10
    assert _value(x, 0) == _value(item("mem:1", 1.0), 0)  # full: no boost
    # a previous context packed again with its fidelities marked: the same choice
    first = [item("mem:1", 1.0), item("mem:2", 0.9), item("mem:3", 0.5)]
    pack_items(first, 120)
    chosen = {i.source: i.chosen for i in first}
    again = [item(i.source, i.value, sticky=i.chosen) for i in first]
    pack_items(again, 120)
    assert {i.source: i.chosen for i in again} == chosen


def _pool(memories=(), messages=()):
    """A CandidatePool from dicts: memories {id, bm25, tag, trgm, pinned, access, glob,
    floor}; messages {id, session, bm25, tag, floor} in session and turn order."""
    mem, msg = list(memories), list(messages)
    col = lambda rows, k, d=0: [r.get(k, d) for r in rows]
    sessions = col(msg, "session", "s")
    return CandidatePool(
        memory_ids=np.array(col(mem, "id"), dtype=np.int64),
        message_ids=np.array(col(msg, "id"), dtype=np.int64),
        message_created=np.arange(len(msg), dtype=np.float64) + 1.7e9,
        same_session=np.array([i > 0 and sessions[i] == sessions[i - 1] for i in range(len(msg))],
                              dtype=bool),
        floor_tokens=np.array(col(mem, "floor", 10) + col(msg, "floor", 10), dtype=np.int64),
        bm25=np.array(col(mem, "bm25") + col(msg, "bm25"), dtype=np.float64),
        tag_match=np.array(col(mem, "tag", False) + col(msg, "tag", False), dtype=bool),
        trigram=np.array(col(mem, "trgm") + [0] * len(msg), dtype=np.float64),
        pinned=np.array(col(mem, "pinned", False) + [False] * len(msg), dtype=bool),
        access_count=np.array(col(mem, "access") + [0] * len(msg), dtype=np.int64),
        is_global=np.array(col(mem, "glob", False) + [False] * len(msg), dtype=bool))


def test_fusion_follows_the_formula_and_lends_relevance_to_neighbour_turns_only():
    w = policy.weights_for(None)
    pool = _pool(memories=[{"id": 1, "bm25": 2.0}],
                 messages=[{"id": 10, "session": "a"}, {"id": 11, "session": "a", "bm25": 4.0},
                           {"id": 12, "session": "b"}])
    cosine = np.array([0.5, 0.2, np.nan, -0.3])
    got = {c["source"]: c for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    rel = lambda cos, bm: (1 - w["lexical"]) * max(cos, 0) + w["lexical"] * bm / 4.0
    assert got["mem:1"]["relevance"] == rel(0.5, 2.0)
    # msg:10's neighbour in its session is msg:11 (no embedding: cosine counts as 0),
    # the best turn near it as well (context)
    lent = w["neighbour"] + w["context"]
    assert got["msg:10"]["relevance"] == pytest.approx(rel(0.2, 0) + lent * rel(0, 4.0))
    assert got["msg:11"]["relevance"] == pytest.approx(rel(0, 4.0) + lent * rel(0.2, 0))
    # msg:12 is in another session: no neighbour, and a negative cosine counts as 0
    assert got["msg:12"]["relevance"] == 0.0
    assert "vector" in got["mem:1"]["retrievers"] and "fulltext" in got["msg:11"]["retrievers"]
    assert "vector" not in got["msg:11"]["retrievers"]  # it has no embedding yet
    assert got["msg:11"]["created_epoch"] == 1.7e9 + 1 and got["mem:1"]["created_epoch"] is None


def test_a_turn_lends_its_neighbours_what_it_says_not_who_said_it():
    """The neighbour term carries a turn's content relevance, not its tag bonus (the
    speaker the query names): the reply to that person is not that person's line."""
    w = policy.weights_for(None)
    pool = _pool(messages=[{"id": 20, "session": "a", "tag": True}, {"id": 21, "session": "a"}])
    cosine = np.array([0.4, 0.3])
    got = {c["source"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    content = lambda cos: (1 - w["lexical"]) * cos
    lent = w["neighbour"] + w["context"]
    assert got["msg:20"] == pytest.approx(content(0.4) + w["tag_bonus"] + lent * content(0.3))
    assert got["msg:21"] == pytest.approx(content(0.3) + lent * content(0.4))


def test_the_turns_around_a_match_share_its_context_within_their_session():
    """A turn up to CONTEXT_TURNS from a close match gains `context` times that match
    (its neighbours `neighbour` as well); a turn further away or in another session
    gains nothing."""
    w = policy.weights_for(None)
    k = retrieval.CONTEXT_TURNS
    pool = _pool(messages=[{"id": 40 + i, "session": "a"} for i in range(k + 2)] + [{"id": 60, "session": "b"}])
    cosine = np.array([0.8] + [0.0] * (k + 1) + [0.0])
    got = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    match = (1 - w["lexical"]) * 0.8
    assert got[41] == pytest.approx((w["neighbour"] + w["context"]) * match)
    assert all(got[40 + i] == pytest.approx(w["context"] * match) for i in range(2, k + 1))
    assert got[40 + k + 1] == 0.0 and got[60] == 0.0
    assert retrieval.nearby_best(np.array([0.5, 0.1, 0.9]), np.array([False, True, False]), k=3).tolist() == \
        [0.1, 0.5, 0.0]
    # a pool that lacks the turns between (a recall index's): turns 0, 1 and 9 of one
    # session; the ninth is too far from the others to lend or borrow
    assert retrieval.nearby_best(np.array([0.5, 0.1, 0.9]), np.array([False, True, True]),
                                 np.array([0, 1, 9]), k=3).tolist() == [0.1, 0.5, 0.0]


def test_a_long_turn_outranks_a_short_one_that_matches_as_well():
    """"Wow, cool!" says little that could answer anything; a long turn's vector is
    spread over all it says: as close a match, the longer turn ranks first, by
    `length` times its log length ratio to the median turn, within the clip."""
    w = policy.weights_for(None)
    pool = _pool(messages=[{"id": 70, "session": "a", "floor": 4}, {"id": 71, "session": "b", "floor": 9},
                           {"id": 72, "session": "c", "floor": 39}, {"id": 73, "session": "d", "floor": 9999}])
    got = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, np.full(4, 0.5), w, room=1000)}
    assert got[73] > got[72] > got[71] > got[70]
    prior = retrieval.length_prior(pool.floor_tokens)
    assert prior[2] - prior[1] == pytest.approx(np.log(40 / 10))
    assert prior[3] == pytest.approx(retrieval.LENGTH_PRIOR_CLIP)
    assert got[72] - got[71] == pytest.approx(w["length"] * np.log(4))
    assert retrieval.length_prior(np.zeros(0, dtype=np.int64)).size == 0


def test_a_turn_in_another_role_than_the_one_asked_about_counts_by_what_it_borrows():
    """"How many doctors did I see?" asks what the user said: an assistant's reply, as
    close a match as the user's turn, is not evidence itself; it keeps what it
    borrows from the turn beside it, and the memories are not touched."""
    w = policy.weights_for(None)
    pool = _pool(memories=[{"id": 1}],
                 messages=[{"id": 20, "session": "a", "tag": True}, {"id": 21, "session": "a"},
                           {"id": 22, "session": "b"}])
    cosine = np.array([0.4, 0.3, 0.5, 0.8])
    before = {c["source"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    pool.other_role = np.array([False, True, True])  # 20: the user's; 21, 22: the assistant's
    got = {c["source"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    assert got["mem:1"] == before["mem:1"] and got["msg:20"] == before["msg:20"]
    own = (1 - w["lexical"]) * 0.5  # msg:21's own match, gone
    assert got["msg:21"] == pytest.approx(before["msg:21"] - own)
    assert got["msg:21"] == pytest.approx((w["neighbour"] + w["context"]) * (1 - w["lexical"]) * 0.3)
    assert got["msg:22"] == 0.0  # alone in its session: nothing to borrow
    assert max(got, key=got.get) == "msg:20"
    assert max(before, key=before.get) == "msg:22"


def test_a_named_speaker_is_a_tie_breaker_not_a_topic():
    """A question that names the wrong person ("What did Caroline make for the church?"
    when Melanie made it): the named person's unrelated turn, and the turn beside
    it, stay below the other speaker's clear match."""
    w = policy.weights_for(None)
    pool = _pool(messages=[{"id": 30, "session": "a", "tag": True}, {"id": 31, "session": "a"},
                           {"id": 32, "session": "b"}])
    cosine = np.array([0.30, 0.10, 0.55])  # 32: the other speaker, on the question's topic
    got = {c["source"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cosine, w, room=1000)}
    assert got["msg:32"] > got["msg:30"] and got["msg:32"] > got["msg:31"]


def test_the_query_without_the_speakers_it_names():
    named = {"tim", "joanna"}
    assert retrieval.without_names("What books has Tim read?", named) == "What books has read?"
    assert retrieval.without_names("What is Tim's favourite book?", named) == "What is favourite book?"
    assert retrieval.without_names("When did Tim’s dog die?", named) == "When did dog die?"
    assert retrieval.without_names("Did Joanna and Tim meet?", named) == "Did and meet?"
    # a word that only starts like a name, no name, nothing but the name, no names
    assert retrieval.without_names("Where is the timber?", named) is None
    assert retrieval.without_names("Tim?", named) is None
    assert retrieval.without_names("What books has Tim read?", set()) is None
    assert retrieval.without_names(None, named) is None


def test_the_nameless_query_is_half_of_the_content_match():
    """cosines with the nameless query's vector: the mean of the two cosines, as one
    pass over the pool's vectors; the pool knows which of the query's words name a
    speaker (rows.candidate_pool)."""
    pool = _pool(memories=[{"id": 1}, {"id": 2}, {"id": 3}])
    v = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 2.0]], dtype=np.float32)
    pool.embedded, pool.vectors, pool.norms = np.arange(3), [v], np.linalg.norm(v, axis=1)
    q, nameless = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    got = phases.cosines(pool, q, nameless)
    assert got == pytest.approx((pool.cosine(q) + pool.cosine(nameless)) / 2)
    assert phases.cosines(pool, q, None).tolist() == pool.cosine(q).tolist()
    assert np.isnan(phases.cosines(pool, None, nameless)).all()
    pool.speakers = frozenset({"tim", "maria"})
    assert phases.nameless_query("What did Tim read?", pool) == "What did read?"
    assert phases.nameless_query("What did Sam read?", pool) is None
    # its vector: the query's less its component along the name's, length 1
    names = {"tim": [0.0, 1.0], "maria": [1.0, 0.0]}
    embed = lambda texts: np.array([names[t] for t in texts], dtype=np.float32)
    got = phases.nameless_vector("What did Tim read?", pool, np.array([0.6, 0.8]), embed)
    assert got == pytest.approx([1.0, 0.0])
    assert phases.nameless_vector("What did Sam read?", pool, np.array([0.6, 0.8]), embed) is None
    assert phases.nameless_vector("What did Tim read?", pool, None, embed) is None


def test_fusion_keeps_what_fills_the_room_twice_plus_pinned_trigram_and_frequent():
    w = policy.weights_for(None)
    n = 500
    memories = [{"id": i, "bm25": float(i), "floor": 12} for i in range(1, n + 1)]
    memories[0].update(pinned=True)  # the least relevant, but pinned
    memories[1].update(trgm=0.8)  # a misspelt name
    memories[2].update(glob=True, access=9)  # used often
    pool = _pool(memories=memories)
    room = 2000
    kept = {c["id"] for c in retrieval.fuse_candidates(pool, np.full(n, np.nan), w, room)}
    per_line = 12 + retrieval.LINE_OVERHEAD
    top = int(np.ceil(retrieval.OVERFILL * room / per_line))
    assert set(range(n - top + 1, n + 1)) <= kept  # the most relevant, by BM25 here
    assert {1, 2, 3} <= kept and len(kept) == top + 3
    # a tiny room still gets MIN_CANDIDATES; ties go to the lower id
    flat = _pool(memories=[{"id": i} for i in range(1, n + 1)])
    kept = [c["id"] for c in retrieval.fuse_candidates(flat, np.zeros(n), w, 1)]
    assert kept == list(range(1, retrieval.MIN_CANDIDATES + 1))


def test_fusion_ties_go_to_the_memory_then_the_lower_id_and_name_every_retriever():
    w = policy.weights_for(None)
    # all equally (ir)relevant: MIN_CANDIDATES are kept, memories first whatever their
    # ids, then the messages with the lowest ids
    n_mem, n_msg = 30, 60
    pool = _pool(memories=[{"id": 100 + i} for i in range(n_mem)],
                 messages=[{"id": n_msg - i, "session": str(i)} for i in range(n_msg)])
    kept = {c["source"] for c in retrieval.fuse_candidates(pool, np.zeros(n_mem + n_msg), w, 1)}
    want = {f"mem:{100 + i}" for i in range(n_mem)}
    want |= {f"msg:{i}" for i in range(1, retrieval.MIN_CANDIDATES - n_mem + 1)}
    assert kept == want
    # a memory found by every retriever, one found by none but pinned
    pool = _pool(memories=[{"id": 1, "bm25": 1.0, "tag": True, "trgm": 0.9, "access": 3, "glob": True},
                           {"id": 2, "pinned": True}])
    got = {c["source"]: c["retrievers"] for c in
           retrieval.fuse_candidates(pool, np.array([0.9, np.nan]), w, room=100)}
    assert got == {"mem:1": retrieval.RETRIEVERS, "mem:2": ()}


@settings(max_examples=400, deadline=None)
@given(text=st.text(), name=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
       ident=st.integers(min_value=0, max_value=10**12), kind=st.sampled_from(["fact", "decision", "message"]))
def test_a_line_costs_its_label_plus_its_stored_text_part(text, name, ident, kind):
    """The stored line_tokens (migration 0012) are exact: whatever the text and label,
    a memory-block line costs its label's tokens plus tokens.count_line_text(text)."""
    for c in ({"source": f"mem:{ident}", "kind": kind, "text": text},
              {"source": f"msg:{ident}", "kind": "message", "name": name, "role": "user", "text": text}):
        label = packing.item_label(c)
        assert packing.line_tokens(packing.full_line(c)) == tokens.count(label) + tokens.count_line_text(text)


def test_full_options_count_only_the_lines_without_stored_counts():
    cands = [{"source": f"msg:{i}", "kind": "message", "role": "user", "name": None,
              "text": f"turn {i}: the exporter writes reports/{i}.csv"} for i in range(5)]
    for i in (0, 3):
        cands[i]["text_tokens"] = (tokens.count_line_text(cands[i]["text"]), None, None, None)
    asked = []

    def counter(lines):
        asked.extend(lines)
        return packing.count_lines(lines)

    options, label_n = packing.full_options(cands, counter)
    assert [o.text for o in options] == [packing.full_line(c) for c in cands]
    assert [o.tokens for o in options] == packing.count_lines([packing.full_line(c) for c in cands])
    assert label_n == [tokens.count(packing.item_label(c)) for c in cands]
    assert asked == [packing.full_line(cands[i]) for i in (1, 2, 4)]


def test_count_lines_split_counts_as_count_lines():
    from concurrent.futures import ThreadPoolExecutor

    words = ["memory", " block", "[msg:12 Ana]", "café", "2024-05-01", "\n", "x" * 300, "🙂"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        for n in (0, 1, packing.PARALLEL_COUNT_MIN_LINES - 1, packing.PARALLEL_COUNT_MIN_LINES, 97):
            lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(i % 13 + 1)) for i in range(n)]
            if n > 1:
                lines[0] = "long line " * 400  # most of the text in one line
            assert packing.count_lines_split(lines, pool) == packing.count_lines(lines)


def test_pool_cosine_reads_each_vector_in_its_matrix_through_vector_rows():
    # memories' float32 vectors, an empty part, a part's int8 codes: the pool's order
    # (vector_rows) picks rows across them without stacking them
    pool = _pool(memories=[{"id": 1}], messages=[{"id": 5}, {"id": 6}, {"id": 7}])
    pool.embedded = np.array([0, 1, 3])
    pool.vectors = [np.array([[0.0, 3.0]], dtype=np.float32), np.zeros((0, 0), dtype=np.int8),
                    np.array([[1, 0], [2, 2]], dtype=np.int8)]
    pool.vector_rows = np.array([0, 2, 1])  # message 5 is the codes' second row, 7 the first
    pool.norms = np.array([3.0, 8 ** 0.5, 1.0])
    got = pool.cosine(np.array([1.0, 0.0]))
    assert np.isnan(got[2]) and np.allclose(got[[0, 1, 3]], [0.0, 2 / 8 ** 0.5, 1.0])


def test_bm25_counts_each_contained_lexeme_once_and_weighs_by_length():
    idf = [2.0, 0.5]
    # document 0 holds both lexemes, 1 only the second, 2 none
    got = retrieval.bm25(3, [0, 0, 1], [0, 1, 1], idf, [10, 20, 5], avgdl=10.0)
    norm = lambda dl: 2.2 / (1 + 1.2 * (0.25 + 0.75 * dl / 10.0))
    assert np.allclose(got, [2.5 * norm(10), 0.5 * norm(20), 0.0], rtol=0, atol=1e-12)
    assert retrieval.bm25(2, None, None, idf, [3, 4], 8.0).tolist() == [0.0, 0.0]


def _coded(values):
    """A per-message string column as (its distinct values, 1-based positions into them)."""
    names = sorted(set(values))
    return names, np.array([names.index(v) + 1 for v in values])


def _part(ids, sessions, turns, visible=None, sensitivity=None, embedded=None, speaker=None,
          hits=((), ()), tokens_=None, stub=None, created=None, role=None):
    """A MessagePart from lists (session names in their own order)."""
    n = len(ids)
    names = sorted(set(sessions))
    embedded = np.array(embedded if embedded is not None else [True] * n)
    vectors = np.eye(n, 4, dtype=np.float32)[embedded]
    sensitivities, sensitivity_pos = _coded(sensitivity or ["none"] * n)
    speakers, speaker_pos = _coded(speaker or [""] * n)
    roles, role_pos = _coded(role or ["user", "assistant"] * (n // 2) + ["user"] * (n % 2))
    return retrieval.MessagePart(
        message_ids=np.array(ids), session_ids=names,
        session_pos=np.array([names.index(s) + 1 for s in sessions]),
        session_visible=np.array([True if visible is None else visible.get(s, True) for s in names]),
        turn_index=np.array(turns), created_epoch=np.array(created or [1.7e9 + i for i in ids], dtype=float),
        token_count=np.array(tokens_ or [10] * n), stub_tokens=np.array(stub or [-1] * n),
        doc_length=np.array([4] * n), sensitivities=sensitivities, sensitivity_pos=sensitivity_pos,
        speakers=speakers, speaker_pos=speaker_pos, roles=roles, role_pos=role_pos,
        embedded=embedded, norms=np.ones(int(embedded.sum())), vectors=vectors,
        hit_rows=np.array(hits[0], dtype=np.int64), hit_terms=np.array(hits[1], dtype=np.int64))


def test_message_pool_merges_segments_and_tail_in_session_and_turn_order():
    # a session split between a sealed segment and the tail; another one hidden
    seg = _part([1, 2, 3, 4], ["b", "a", "b", "c"], [0, 0, 1, 0], visible={"c": False},
                hits=([2], [0]), speaker=["", "ann", "", ""])
    tail = _part([7, 9], ["a", "b"], [1, 2], embedded=[False, True], tokens_=[500, 10], stub=[-1, -1])
    got = retrieval.message_pool([seg, tail], [1.5], 4.0, ("none",), None, [], ["ann"])
    assert got["message_ids"].tolist() == [2, 7, 1, 3, 9]  # a: 2, 7; b: 1, 3, 9; c hidden
    assert got["same_session"].tolist() == [False, True, False, True, True]
    assert got["bm25"][3] > 0 and np.count_nonzero(got["bm25"]) == 1  # message 3 holds lexeme 0
    assert got["tag_match"].tolist() == [True, False, False, False, False]
    # long without stored levels: the summary threshold is its floor
    assert got["floor_tokens"].tolist() == [10, policy.MESSAGE_SUMMARY_MIN_TOKENS, 10, 10, 10]
    # message 7 has no vector; the others keep theirs, aligned
    assert got["embedded"].tolist() == [0, 2, 3, 4]
    vectors = np.concatenate(got["vectors"])[got["vector_rows"]]
    assert vectors.shape == (4, 4) and vectors[0].tolist() == [0, 1, 0, 0]


@pytest.mark.parametrize(("query", "roles"), [
    # the first person singular alone: the asker's own turns
    ("How many doctors did I see in March?", {"user"}),
    ("What is my favourite type of rice?", {"user"}),
    ("How much older am I than the average age of employees in my department?", {"user"}),
    ("I’m planning a trip to Denver soon. Any suggestions?", {"user"}),
    ("Which US states did I visit?", {"user"}),  # "US": a country, not "us"
    # the one asked, or both together: the assistant's words or the conversation
    ("Can you remind me what you suggested?", set()),
    ("What was the Jamaican dish you recommended I try?", set()),
    ("In our previous chat, how many times did the Chiefs play?", set()),
    ("What did we decide about the deploy?", set()),
    ("Can you tell us more?", set()),
    # the third person, or a first person that is someone else's, quoted
    ("When did Caroline go to the LGBTQ support group?", set()),
    ('Which book did Melanie mean by "I loved it"?', set()),
    ("What is the I-95 speed limit?", set()),
    ("", set()), (None, set()),
])
def test_a_query_names_the_askers_turns_by_its_grammatical_person(query, roles):
    assert retrieval.asker_roles(query) == frozenset(roles)


def test_message_pool_tags_the_turns_of_the_role_the_query_names():
    """A first-person question names the user as the speaker: the user's turns get the
    tag match a named speaker's get (and the speaker the query names keeps it); the
    assistant's turns are another speaker's, a tool's output is no one's words."""
    part = _part([1, 2, 3, 4], ["a"] * 4, [0, 1, 2, 3], speaker=["", "", "", "bo"],
                 role=["user", "assistant", "tool", "assistant"])
    got = retrieval.message_pool([part], [], 4.0, ("none",), None, [], ["bo"], roles=frozenset({"user"}))
    assert got["tag_match"].tolist() == [True, False, False, True]
    assert got["other_role"].tolist() == [False, True, False, True]
    got = retrieval.message_pool([part], [], 4.0, ("none",), None, [], [])
    assert got["tag_match"].tolist() == [False, False, False, False] and got["other_role"] is None


def test_message_pool_filters_what_the_reader_may_not_recall():
    part = _part([1, 2, 3, 4], ["a"] * 4, [0, 1, 2, 3], sensitivity=["none", "high", "low", "none"],
                 created=[100.0, 200.0, 300.0, 400.0])
    got = retrieval.message_pool([part], [], 4.0, ("none", "low"), 350.0, [1], [])
    assert got["message_ids"].tolist() == [3]  # 1 excluded, 2 too sensitive, 4 after as_of
    # excluded ids in any order, some of them not in the part
    got = retrieval.message_pool([part], [], 4.0, ("none", "low", "high"), None, [99, 4, 2, 0], [])
    assert got["message_ids"].tolist() == [1, 3]
    empty = retrieval.message_pool([], [], 4.0, ("none",), None, [], [])
    assert len(empty["message_ids"]) == 0 and empty["vectors"] == [] and len(empty["vector_rows"]) == 0


def test_pool_cosine_is_pgvectors_and_nan_without_a_vector():
    pool = _pool(memories=[{"id": 1}], messages=[{"id": 5}, {"id": 6}])
    pool.embedded = np.array([0, 2])
    pool.vectors = [np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float32)]
    pool.norms = np.array([5.0, 2.0])
    got = pool.cosine(np.array([0.0, 1.0]))
    assert np.isnan(got[1]) and np.allclose(got[[0, 2]], [0.8, 1.0])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=80), st.sampled_from(["full", "detail", "stub"]),
                          st.none() | st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1))),
                min_size=1, max_size=8))
def test_memory_block_tokens_is_the_block_tokenized(lines):
    # Any text, weird endings included (punctuation, spaces, newlines, '/', emoji):
    # the sum of the lines' tokens is what the whole block tokenises to.
    items = []
    for n, (text, fidelity, ts) in enumerate(lines):
        line = f"[mem:{n} fact] {text}"
        items.append(packing.Item(source=f"mem:{n}", kind="fact", score=1.0,
                                  options=[packing.Option(fidelity, line, packing.line_tokens(line))],
                                  created_at=ts and ts.replace(tzinfo=UTC), chosen=0))
    block = packing.memory_block(items)
    assert block["content"].endswith("\n")
    assert packing.memory_block_tokens(items) == tokens.count_message(block)
    assert packing.memory_block_tokens([]) == 0


def test_int8_segment_vectors_keep_the_cosine():
    # sealed segments keep vectors as int8 codes and a scale each: the cosine the
    # compile computes on the codes (norm / scale) stays within 0.01 of the exact one
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, embedding.DIMENSIONS)).astype(np.float32)
    x[7] = 0.0  # no direction at all
    x[3] *= 1e-6  # tiny values are scaled, not flushed to zero
    codes, scales = embedding.quantize_int8(x.astype(">f4").tobytes())
    assert len(codes) == 50 * embedding.DIMENSIONS and len(scales) == 50 * 4
    q = rng.standard_normal(embedding.DIMENSIONS).astype(np.float32)
    norms = np.linalg.norm(x, axis=1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = (x @ q) / (norms * np.linalg.norm(q))
        pool = _pool(memories=[], messages=[{"id": i} for i in range(50)])
        pool.embedded = np.arange(50)
        pool.vectors = [embedding.from_int8_codes(codes, 50)]
        pool.norms = norms / np.frombuffer(scales, dtype=">f4")
    got = pool.cosine(q)
    keep = np.arange(50) != 7
    assert np.abs(got[keep] - exact[keep]).max() < 0.01
    assert np.isnan(got[7])  # like pgvector: a zero vector has no cosine
    assert pool.vectors[0].dtype == np.int8 and np.abs(pool.vectors[0]).max() == 127


def test_pending_embedding_pools_the_encoders_output_or_raises_its_error():
    # what the encoder hands back: its hidden states per token (the third is padding)
    mask = np.array([[1, 1, 0]], dtype=np.int64)
    hidden = np.array([[[3.0, 0.0], [1.0, 2.0], [50.0, 50.0]]], dtype=np.float32)
    done = Future()
    done.set_result([hidden])
    assert np.allclose(embedding.PendingEmbedding(done, mask).result(),
                       [[2.0 / 5 ** 0.5, 1.0 / 5 ** 0.5]])  # mean of 2 tokens, normalised
    failed = Future()
    failed.set_exception(RuntimeError("input too long"))
    with pytest.raises(RuntimeError, match="input too long"):
        embedding.PendingEmbedding(failed, mask).result()


def test_utc_datetime_clamps_what_a_datetime_cannot_hold():
    """Issue 20, defect 1: a stored timestamp outside years 1-9999 (294276 AD, 4713 BC,
    +-infinity) failed every compile of its tenant; it is clamped instead."""
    assert utc_datetime(None) is None
    assert utc_datetime(0.0) == datetime(1970, 1, 1, tzinfo=UTC)
    for epoch, year in ((float("inf"), 9999), (9224286393600.0, 9999), (-210866803200.0 * 2, 1),
                        (float("-inf"), 1)):
        assert utc_datetime(epoch).year == year


def test_conflicts_rank_provenance_as_the_seed_does():
    """docs/design.md §Tiers (conflicts): user_stated > correction > system_inferred, one authority table
    for formation and compile_context (formation ranked the first two alike)."""
    at = datetime(2025, 1, 1, tzinfo=UTC)
    old = {"valid_epoch": at.timestamp(), "provenance_type": "correction", "confidence": 0.95}
    assert Former.newer_wins({"valid_from": at, "provenance_type": "user_stated", "confidence": 0.5}, old)
    assert not Former.newer_wins({"valid_from": at, "provenance_type": "system_inferred", "confidence": 1.0}, old)


def test_a_tool_call_below_detail_keeps_its_id_name_and_short_arguments():
    import json

    from mnemo_db.compile.history import history_versions
    written = "import os\n" + "".join(f"value_{i} = os.environ.get('V{i}')\n" for i in range(300))
    calls = [{"id": "c1", "type": "function", "function": {"name": "Write", "arguments": json.dumps(
                 {"file_path": "src/settings.py", "content": written})}},
             {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "ls -la " + "x" * 400}}]
    m = {"message_id": 7, "role": "assistant", "content": None, "tool_calls": calls, "sensitivity": "none",
         "token_count": None, "levels": None}
    versions, costs = history_versions(m, ("none",))
    assert versions["full"]["tool_calls"] == versions["detail"]["tool_calls"] == calls
    for name in ("compact", "stub"):
        write, shell = versions[name]["tool_calls"]
        assert (write["id"], write["function"]["name"], shell) == ("c1", "Write", calls[1])  # not JSON: as written
        args = json.loads(write["function"]["arguments"])
        assert args["file_path"] == "src/settings.py"
        assert args["content"] == f"import os [... {len(written)} chars; memory_restore msg:7]"
    assert costs["compact"] < costs["full"] / 10
    # a long first line: cut once, its length the argument's (the stub is not the compact cut again)
    long_first = "x = " + "1 + " * 60 + "1\n" + written
    m2 = dict(m, message_id=8, tool_calls=[{"id": "c1", "type": "function", "function": {
        "name": "Write", "arguments": json.dumps({"file_path": "src/settings.py", "content": long_first})}}])
    versions, _ = history_versions(m2, ("none",))
    for name in ("compact", "stub"):
        args = json.loads(versions[name]["tool_calls"][0]["function"]["arguments"])
        assert args["content"] == long_first[:120] + f" [... {len(long_first)} chars; memory_restore msg:8]"


def test_the_models_short_turn_keeps_its_words_below_full_and_a_long_one_does_not():
    """history_versions: an assistant message of at most ASSISTANT_KEEP_TOKENS keeps its
    text at every level (its long arguments are still cut); a longer one, or a tool's
    output, takes its levels' text."""
    import json

    from mnemo_db.compile.history import ASSISTANT_KEEP_TOKENS, history_versions
    from mnemo_db.lifecycle import summarize
    said = "It looks like `FUN_00401260` is the main function; I will decompile FUN_004016ba next."
    long_said = " ".join(f"Step {i}: check value_{i} against limit_{i} before the write." for i in range(60))
    assert tokens.count(said) <= ASSISTANT_KEEP_TOKENS < tokens.count(long_said)
    body = "x = 1\n" * 400
    call = [{"id": "c1", "type": "function", "function": {"name": "Write", "arguments": json.dumps(
        {"file_path": "a.py", "content": body})}}]
    for text, keeps in ((said, True), (long_said, False)):
        m = {"message_id": 9, "role": "assistant", "content": text, "tool_calls": call, "sensitivity": "none",
             "token_count": None, "levels": summarize.summarize_json(text, "message", None)}
        versions, _ = history_versions(m, ("none",))
        for name in ("detail", "compact", "stub"):
            assert (versions[name]["content"] == text) is keeps
        assert "[... " in versions["stub"]["tool_calls"][0]["function"]["arguments"]
    out = {"message_id": 10, "role": "tool", "tool_call_id": "c1", "content": long_said, "sensitivity": "none",
           "token_count": None, "levels": summarize.summarize_json(long_said, "tool_result", None)}
    assert history_versions(out, ("none",))[0]["stub"]["content"].startswith("[stub of msg:10; memory_restore]")


def test_a_text_counted_lately_is_not_tokenized_again(monkeypatch):
    text = "def retry(n):\n    return min(2 ** n, 60)  # seconds\n" * 20
    expected = tokens.count(text)
    inner = tokens._count

    def refuse(t):
        raise AssertionError(f"tokenized again: {t[:40]!r}")

    monkeypatch.setattr(tokens, "_count", refuse)
    assert tokens.count(text) == expected  # by its digest
    with pytest.raises(AssertionError):
        tokens.count(text + "x")  # another text is counted
    monkeypatch.setattr(tokens, "_count", inner)
    for k in range(tokens.RECENT_TEXTS):  # the oldest is forgotten
        tokens.count(f"{k:08d} " + "z" * tokens.RECENT_TEXT_CHARS)
    monkeypatch.setattr(tokens, "_count", refuse)
    with pytest.raises(AssertionError):
        tokens.count(text)


def test_a_note_is_as_relevant_as_the_turn_it_was_written_from():
    """A memory whose source turn is a candidate is valued at least as that turn: the
    turn's relevance also holds where it was said (neighbours, nearby turns), which
    the note read alone cannot show. Packing then takes the cheaper one per token."""
    from mnemo_db.compile import bundle
    now = datetime(2026, 3, 2, tzinfo=UTC)

    def cand(source, kind, text, relevance, derived=()):
        return {"source": source, "kind": kind, "text": text, "relevance": relevance, "created_at": now,
                "confidence": 1.0, "provenance_type": "fact", "access_count": 0, "last_accessed_at": None,
                "is_pinned": False, "levels": None, "role": "user" if kind == "message" else None,
                "name": "Ana" if kind == "message" else None, "text_tokens": None,
                "derived_from": frozenset(derived)}

    visible = [
        cand("msg:1", "message", "Hey! Since we last talked I ran a charity race for mental health, so rewarding.", 0.9),
        cand("msg:2", "message", "The weather was nice at the lake all week.", 0.5),
        cand("mem:1", "fact", "Ana ran a charity race for mental health.", 0.3, derived=["msg:1"]),
    ]
    items = {i.source: i for i in bundle.candidate_items(visible, policy.DEFAULT_WEIGHTS, now, {}, packing.count_lines)}
    assert items["mem:1"].value > items["msg:2"].value
    # the note, cheaper than its turn, is what a budget too small for the turn takes
    assert items["mem:1"].options[0].tokens < items["msg:1"].options[0].tokens
    packing.pack_items(list(items.values()), items["mem:1"].options[0].tokens + 2)
    assert items["mem:1"].chosen == 0 and items["msg:1"].chosen is None


@pytest.mark.parametrize("created, kept", [(datetime(2026, 3, 2, 18, tzinfo=UTC), False),
                                           (datetime(2026, 3, 9, tzinfo=UTC), True)])
def test_a_notes_said_day_is_written_once_on_its_day_line(created, kept):
    """A memory's closing "(said 2 March 2026)" goes under the block's day line of that
    day: the line leaves it out (and costs that much less); another day stays."""
    from mnemo_db.compile import bundle
    text = "Ana ran a charity race for mental health. (said 2 March 2026)"
    c = {"source": "mem:1", "kind": "fact", "text": text, "relevance": 0.5, "created_at": created,
         "confidence": 1.0, "provenance_type": "fact", "access_count": 0, "last_accessed_at": None,
         "is_pinned": False, "levels": None, "role": None, "name": None, "text_tokens": (99, None, None, None),
         "derived_from": frozenset()}
    [item] = bundle.candidate_items([c], policy.DEFAULT_WEIGHTS, created, {}, packing.count_lines)
    line = item.options[0]
    assert ("(said 2 March 2026)" in line.text) is kept
    if not kept:  # counted again, not the stored count of the text with the day
        assert line.tokens == packing.line_tokens(line.text)


def _planned(raw: dict, tenant_cap=policy.DEFAULT_MEMORY_CAP, window: int = 128_000) -> phases.Plan:
    """plan() of a new session (no history) in a window, under options raw and a
    tenant's memory cap (options.tenant_memory_cap)."""
    from mnemo_db.compile import options
    opts = options.parse_options(raw, "private", None, tenant_cap)
    budget = policy.budget_for({"context_window": window, "response_reserve": 4096}, opts)
    session = phases.Session(
        tenant_id="t", session_id="s", agent_id=None, context_window=window, response_reserve=4096,
        summary_text=None, options=opts, as_of=None, now=datetime(2026, 1, 1, tzinfo=UTC), now_epoch=0.0,
        redacting=False, weights=dict(policy.DEFAULT_WEIGHTS), budget=budget)
    return phases.plan(session, [], "Any suggestions?")


def test_the_memory_block_is_capped_when_the_call_names_no_budget():
    """Issue 42: with no budget the memory block took whatever the window left (a
    LongMemEval user's whole haystack, ~104k tokens, for "Any suggestions?"). Without
    a budget it gets the tenant's cap, whatever the window; a budget or caps.memory the
    caller names is theirs; a tenant's null cap restores the window."""
    cap = policy.DEFAULT_MEMORY_CAP
    for window in (32_000, 128_000, 1_000_000):
        p = _planned({}, window=window)
        assert p.memory_limit == cap and p.room <= cap
    assert _planned({}, window=cap + 4096).memory_limit < cap  # within B: a small window's
    assert _planned({}, tenant_cap=1000).memory_limit == 1000
    assert _planned({}, tenant_cap=None).memory_limit > 100_000  # the tenant chose no cap
    assert _planned({"budget": 8000}).memory_limit == 8000  # an explicit budget is filled
    assert _planned({"caps": {"memory": 20_000}}).memory_limit == 20_000
    assert _planned({"budget": 8000, "caps": {"memory": 300}}).memory_limit == 300


def test_a_tenant_memory_cap_is_read_from_its_config_text():
    from mnemo_db.compile.options import tenant_memory_cap
    assert tenant_memory_cap(None) == policy.DEFAULT_MEMORY_CAP  # not set
    assert tenant_memory_cap("null") is None  # set to none
    assert tenant_memory_cap("1500") == 1500 and tenant_memory_cap("0") == 0
    for bad in ("-1", "2.5", '"4k"', "true", "{", "[]"):  # written by hand: ignored
        assert tenant_memory_cap(bad) == policy.DEFAULT_MEMORY_CAP


def test_the_default_memory_cap_bounds_what_ranking_adds_not_what_is_pinned():
    """decide under the default cap: a block of unpinned candidates stays within it;
    pinned memories worth more than the cap are all sent (a user pinned them), and
    caps.memory, which the caller names, still bounds them."""
    from mnemo_db.compile import bundle
    now = datetime(2026, 3, 2, tzinfo=UTC)

    def cand(n, pinned):
        text = f"Note {n}: " + " ".join(f"the {w} of project {n}" for w in ("scope", "plan", "budget", "risk") * 6)
        return {"source": f"mem:{n}", "kind": "fact", "text": text, "relevance": 0.9 - n / 1000, "created_at": now,
                "confidence": 1.0, "provenance_type": "fact", "access_count": 0, "last_accessed_at": None,
                "is_pinned": pinned, "levels": None, "role": None, "name": None, "text_tokens": None,
                "derived_from": frozenset(), "sensitivity": "none"}

    def block(raw, candidates):
        p = _planned(raw)
        opts = phases.parse_options(raw, "private", None, policy.DEFAULT_MEMORY_CAP)
        session = phases.Session(
            tenant_id="t", session_id="s", agent_id=None, context_window=128_000, response_reserve=4096,
            summary_text=None, options=opts, as_of=None, now=now, now_epoch=0.0, redacting=False,
            weights=dict(policy.DEFAULT_WEIGHTS),
            budget=policy.budget_for({"context_window": 128_000, "response_reserve": 4096}, opts))
        report = bundle.decide(session, [], p, candidates, [], "Any suggestions?")["report"]
        return report["tokens"]["memory"], {i["source"] for i in report["items"] if i["section"] == "memory"}

    cap = policy.DEFAULT_MEMORY_CAP
    loose = [cand(n, False) for n in range(200)]
    used, _ = block({}, loose)
    assert cap - 200 < used <= cap
    pinned = [cand(n, True) for n in range(200, 240)]
    used, sent = block({}, loose + pinned)
    assert used > cap and {c["source"] for c in pinned} <= sent
    used, _ = block({"caps": {"memory": 1000}}, loose + pinned)
    assert used <= 1000


def test_a_tool_outputs_stub_is_its_pointer_alone():
    """history_versions(output=True): a tool's output (paging's objects say which
    messages are, a text agent's environment answers too) is stubbed by its pointer
    alone, the call before it saying what it was; its detail and compact keep their
    text, and any other message's stub its description."""
    from mnemo_db.compile.history import history_versions
    from mnemo_db.lifecycle import summarize
    text = "".join(f"[File: src/fields.py (1997 lines total)] line {i}: value_{i} = field_{i}\n" for i in range(80))
    m = {"message_id": 11, "role": "user", "content": text, "sensitivity": "none", "token_count": None,
         "levels": summarize.summarize_json(text, "message", "2026-11-29 10:00")}
    plain, plain_costs = history_versions(m, ("none",))
    out, out_costs = history_versions(m, ("none",), output=True)
    assert out["stub"]["content"] == "[stub of msg:11; memory_restore]"
    assert plain["stub"]["content"].startswith("[stub of msg:11; memory_restore] [message | 2026-11-29 10:00 |")
    assert out_costs["stub"] < plain_costs["stub"]
    assert out["detail"] == plain["detail"] and out["compact"] == plain["compact"]


def test_on_shards_names_the_shards_of_every_table_a_read_names():
    """On Citus the compile's reads name the tenant's shards (compiler.PlpyDatabase):
    every table each one names is replaced whole, routines and columns are kept."""
    text = ("SELECT m.* FROM mnemo.messages AS m JOIN mnemo.message_segments AS s ON true, "
            "mnemo_internal.message_segment($1, 0) AS t WHERE mnemo_internal.recall_tenants.x AND m.mnemo = 1")
    shards = {"mnemo.messages": "mnemo.messages_102297", "mnemo.message_segments": "mnemo.message_segments_102285",
              "mnemo_internal.recall_tenants": "mnemo_internal.recall_tenants_102405"}
    assert statements.on_shards(text, shards) == (
        "SELECT m.* FROM mnemo.messages_102297 AS m JOIN mnemo.message_segments_102285 AS s ON true, "
        "mnemo_internal.message_segment($1, 0) AS t WHERE mnemo_internal.recall_tenants_102405.x AND m.mnemo = 1")
    # only reads: the writes go through Citus
    texts = {**statements.STATEMENTS, **statements.TENANT_STATEMENTS}
    for name in statements.SHARD_READS:
        assert statements._RELATION.search(texts[name][0]), name
        assert not re.search(r"\b(INSERT|UPDATE|DELETE|MERGE)\b|FOR (UPDATE|SHARE)", texts[name][0]), name


def _line_item(source: str, text: str, value: float) -> packing.Item:
    line = f"[{source} {'user' if source.startswith('msg:') else 'fact'}] {text}"
    return packing.Item(source=source, kind="message" if source.startswith("msg:") else "fact", score=value,
                        options=[packing.Option("full", line, packing.line_tokens(line))], value=value,
                        created_at=datetime(2024, 5, 1, tzinfo=UTC))


def test_a_memory_stands_in_for_its_turn_only_when_it_matches_as_well_and_costs_less():
    """bundle.stand_ins: a note stands in for a chosen source turn when its own match
    to the query is at least the turn's and its line, the turn's id added, is
    cheaper; its line then ends with that id, at the cost line_tokens counts. The
    best matching note takes the turn; a note that matches less, or costs more, does
    not stand in."""
    from mnemo_db.compile import bundle
    long_turn = "Our staging database moved to db-stg-4.internal last week." + " We also planned the offsite." * 20
    turn = _line_item("msg:7", long_turn, 1.0)
    note = _line_item("mem:1", "Staging database host: db-stg-4.internal", 0.9)
    other = _line_item("mem:2", "The staging database host is db-stg-4.internal, moved last week", 0.9)
    for it in (turn, note, other):
        it.chosen = 0
    derived = {"mem:1": frozenset({"msg:7"}), "mem:2": frozenset({"msg:7"})}
    got = bundle.stand_ins([turn, note, other], [turn, note, other], derived,
                           {"msg:7": 0.5, "mem:1": 0.6, "mem:2": 0.55})
    assert list(got) == ["mem:1"] and got["mem:1"][0] == ["msg:7"]
    line = got["mem:1"][1][0]
    assert line.text.endswith("db-stg-4.internal (msg:7)") and line.tokens == packing.line_tokens(line.text)
    # matched less than the turn: the turn stays
    assert bundle.stand_ins([turn, note], [turn, note], derived, {"msg:7": 0.7, "mem:1": 0.6}) == {}
    # no match known (a candidate from elsewhere): nothing stands in
    assert bundle.stand_ins([turn, note], [turn, note], derived, {"msg:7": 0.5}) == {}
    # a note no cheaper than the turn's line
    short = _line_item("msg:7", "Host: db-stg-4.internal", 1.0)
    short.chosen = 0
    assert bundle.stand_ins([short, note], [short, note], derived, {"msg:7": 0.5, "mem:1": 0.6}) == {}
    # standing, it is worth what the turn was
    assert bundle.standing(note, got["mem:1"][1], [turn]).value == 1.0
