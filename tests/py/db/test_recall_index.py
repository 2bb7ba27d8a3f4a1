"""A large tenant's recall index (mnemo_internal.recall_index, migration 0017): compile_context
reads the k nearest and the best lexical items by the tenant's own indexes instead of
scoring its whole history. Against the real database: the index changes no context
of a small tenant, a planted evidence turn in a large tenant is found by its
paraphrase, its rare term and its entity, and the sync follows the memories (a
forgotten one leaves at once)."""

from __future__ import annotations

import itertools
import re
import uuid
from contextlib import contextmanager

import pytest
from conftest import DSN
from helpers import run_jobs, text_of
from psycopg import sql
from test_segments import _conversation, build

from mnemosyne import connect

# Filler turns: two of a hundred work updates each (ten subjects by ten happenings).
SUBJECTS = ["The staging cluster", "Our billing export", "The mobile release", "The team offsite",
            "The search service", "The design review", "The office printer", "The hiring loop",
            "The data warehouse", "The onboarding guide"]
EVENTS = ["slipped by a week", "passed its load test", "needs a second reviewer", "moved to Thursday",
          "ran out of disk space", "got a new owner", "failed the security scan", "is waiting on legal",
          "doubled its traffic", "was rolled back"]

# The evidence turn, and three ways to ask for it: a paraphrase (no word in common:
# only its vector finds it), a rare term, an entity (a name).
NEEDLE = ("Theodora Quillfeather says her grandmother's quince marmalade always gets "
          "a pinch of cardamom from Zanzibar.")
ASKED = {
    "paraphrase": "Which spice goes into the jam that granny used to make?",
    "rare term": "Who talked about cardamom?",
    "entity": "What did Quillfeather tell us?",
}


def recall_index(db, tenant: str, min_messages: int = 1) -> int:
    return db.conn.execute("SELECT mnemo_internal.sync_recall_index(%s, %s)",
                           (tenant, min_messages)).fetchone()[0]


def on_citus(c) -> bool:
    return c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0] == 1


@contextmanager
def prepared(c, text: str, types: list[str], generic: bool = True):
    """A compile statement prepared as the compile prepares it (its parameter types),
    in a transaction of its own, as a long-lived backend's generic plan unless
    generic=False (a setting made inside the block still applies: the generic plan is
    built at the first EXECUTE). On Citus, through the coordinator, a statement cannot
    go generic (with the tenant a parameter Citus cannot plan it), so neither does
    this: the plan shown is the custom one the tenant's worker runs (as a compile on
    the worker does on the tenant's shards for its backend's first 20 compiles,
    compiler.py). Yields args -> its EXECUTE."""
    def listed(parts: list) -> sql.Composable:  # (no parameters: no parentheses)
        return sql.SQL("({})").format(sql.SQL(", ").join(parts)) if parts else sql.SQL("")

    with c.transaction():
        if generic and not on_citus(c):
            c.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        c.execute(sql.SQL("PREPARE tested {} AS {}").format(listed([sql.SQL(t) for t in types]), sql.SQL(text)))
        try:
            yield lambda args: sql.SQL("EXECUTE tested {}").format(listed([sql.Literal(a) for a in args]))
        finally:
            c.execute("DEALLOCATE tested")


def written_for(c, text: str, tenant: str) -> str:
    """A statements.TENANT_STATEMENTS text written for the tenant, as the compile writes it."""
    from mnemo_db.compile import statements

    return statements.for_tenant(text, c.execute("SELECT quote_literal(%s::text)", (tenant,)).fetchone()[0])


def indexed(db, tenant: str) -> bool:
    return db.conn.execute("SELECT count(*) FROM mnemo_internal.recall_tenants WHERE tenant_id = %s",
                           (tenant,)).fetchone()[0] == 1


def test_the_recall_index_changes_no_context_of_a_small_tenant(db, tenant):
    sids = _conversation(db, tenant)
    db.remember(tenant, "The invoice numbering scheme restarts every January.", kind="fact")
    queries = [(sids[-1], "What happened to the PDF renderer upgrade?"),
               (sids[0], "ann asked about the invoice numbering scheme"),
               (sids[1], None)]
    build(db, tenant)
    contexts = {}
    for state in ("whole", "indexed"):
        if state == "indexed":
            assert recall_index(db, tenant) > 0
            assert indexed(db, tenant)
        contexts[state] = [db.compile_context_bundle(tenant, s, q, budget=budget, log=False)
                           for s, q in queries for budget in (600, 1500, 4000)]
    for whole, index in zip(contexts["whole"], contexts["indexed"], strict=True):
        assert index["messages"] == whole["messages"]


def test_turns_far_apart_in_time_keep_their_neighbours(db, tenant):
    """RECALLED_MESSAGES finds each found turn's neighbours wherever they lie in time
    (in another monthly partition: a session resumed after a pause): with every turn
    of two sessions 20 days after the one before, the indexed compile holds the
    contexts of the whole-history one, and the statement returns each found turn with
    the turns before and after it."""
    from datetime import UTC, datetime, timedelta

    from test_segments import TOPICS

    start = datetime.now(UTC) - timedelta(days=330)
    sids = []
    for s in range(2):
        sid = db.start_session(tenant, context_window=128000)
        sids.append(sid)
        for i in range(8):
            at = start + timedelta(days=20 * i, minutes=s)
            topic = TOPICS[(s + i) % len(TOPICS)]
            db.record_message(tenant, sid, {"role": "user", "content": f"Session {s} turn {i}: what changed in {topic}?"},
                              created_at=at)
            db.record_message(tenant, sid, {"role": "assistant", "content": f"In session {s}, {topic} moved to plan "
                                            f"S{s}T{i}."}, created_at=at + timedelta(days=20, seconds=-1))
    run_jobs(db, tenant)
    queries = [(sids[-1], "What happened to the PDF renderer upgrade?"), (sids[0], "what moved to plan S1T3?")]
    build(db, tenant)
    contexts = {}
    for state in ("whole", "indexed"):
        if state == "indexed":
            assert recall_index(db, tenant) > 0
        contexts[state] = [db.compile_context_bundle(tenant, s, q, budget=budget, log=False)
                           for s, q in queries for budget in (400, 1500)]
    for whole, index in zip(contexts["whole"], contexts["indexed"], strict=True):
        assert index["messages"] == whole["messages"]
    # the statement itself: each turn found comes with the turns before and after it
    import numpy as np
    from mnemo_db.compile import statements

    c = db.conn
    rows = c.execute("SELECT message_id, session_id::text, turn_index, extract(epoch FROM created_at) "
                     "FROM mnemo.messages WHERE tenant_id = %s ORDER BY message_id", (tenant,)).fetchall()
    found = [r for r in rows if r[2] in (0, 5, 15)]  # a session's first, a middle and its last turn
    up_to = c.execute("SELECT messages_up_to FROM mnemo_internal.recall_tenants WHERE tenant_id = %s",
                      (tenant,)).fetchone()[0]
    args = statements.segments_args(tenant, str(sids[0]), [], "private", None, "channel") + [
        [r[0] for r in found], [float(r[3]) for r in found], up_to]
    with prepared(c, statements.RECALLED_MESSAGES, statements.RECALLED_MESSAGES_TYPES, generic=False) as execute:
        got = c.execute(execute(args)).fetchall()
    ids = {int(i) for r in got for i in np.frombuffer(r[1] or b"", dtype=">i8")}  # int8send, concatenated
    wanted = {r[0] for r in rows for f in found if r[1] == f[1] and abs(r[2] - f[2]) <= 1}
    assert ids == wanted


def _large_tenant(db, tenant: str, n: int) -> None:
    """n filler messages over four sessions, bulk SQL: each two of the hundred work
    updates, its vector the normalized sum of theirs (their real embeddings: a text's
    embedding is close to the mean of its sentences'), a distinct pair each, as in a
    real history, where few turns repeat (thousands of copies of a hundred vectors are
    tight clusters, a graph an HNSW search cannot cross). The needle halfway through,
    with its own embedding. Then sealed and indexed."""
    fillers = [f"{s} {e}." for s, e in itertools.product(SUBJECTS, EVENTS)]
    c = db.conn
    vectors = c.execute("SELECT mnemo.embed_batch(%s)::text[]", (fillers + [NEEDLE],)).fetchone()[0]
    sids = [db.start_session(tenant, context_window=128000) for _ in range(4)]
    with c.transaction():
        c.execute("CREATE TEMP TABLE filler (k integer, content text, embedding vector) ON COMMIT DROP")
        c.execute("INSERT INTO filler SELECT k - 1, t, v::vector FROM unnest(%s::text[], %s::text[]) "
                  "WITH ORDINALITY AS x (t, v, k)", (fillers + [NEEDLE], vectors))
        c.execute("""
            INSERT INTO mnemo.messages (tenant_id, session_id, turn_index, role, content, name,
                token_count, content_hash, embedding, created_at)
            SELECT %(t)s, (%(s)s::uuid[])[1 + i %% 4], i / 4, CASE WHEN i %% 2 = 0 THEN 'user' ELSE 'assistant' END,
                x.content, NULL, 30, sha256(convert_to(x.content || i, 'UTF8')), x.embedding,
                now() - interval '20 days' + i * interval '1 second'
            FROM generate_series(0, %(n)s - 1) AS i
            CROSS JOIN LATERAL (
                SELECT f.content, f.embedding FROM filler AS f WHERE i = %(n)s / 2 + 1 AND f.k = %(needle)s
                UNION ALL
                SELECT a.content || ' ' || b.content, l2_normalize(a.embedding + b.embedding)
                FROM filler AS a, filler AS b
                WHERE i <> %(n)s / 2 + 1 AND a.k = (i * 7919) %% %(pairs)s / %(needle)s
                    AND b.k = (i * 7919) %% %(pairs)s %% %(needle)s
            ) AS x
            """, {"t": tenant, "s": sids, "n": n, "needle": len(fillers), "pairs": len(fillers) ** 2})
        c.execute("SELECT mnemo_internal.add_to_lexicon(array_agg(tenant_id), array_agg(search_tsv)) "
                  "FROM mnemo.messages WHERE tenant_id = %s", (tenant,))
    assert build(db, tenant) == n
    assert recall_index(db, tenant, n) == n
    assert indexed(db, tenant)


@pytest.fixture(scope="module")
def large_tenant():
    """A tenant of 10,000 messages with the needle among them, built once."""
    with connect(DSN) as db:
        tid = "t_" + uuid.uuid4().hex[:12]
        db.create_tenant(tid)
        _large_tenant(db, tid, 10_000)
        yield tid


@pytest.mark.parametrize("how", list(ASKED))
def test_a_needle_in_a_large_tenant_is_found(db, large_tenant, how):
    """The evidence turn among 10,000 messages, asked for from a new session: by its
    paraphrase (vector only), by its rare term (lexical only), by its entity."""
    sid = db.start_session(large_tenant, context_window=128000)
    bundle = db.compile_context_bundle(large_tenant, sid, ASKED[how], budget=2000, log=False)
    assert NEEDLE in text_of(bundle["messages"]), how


def test_the_sync_follows_memories_and_forget_leaves_at_once(db, tenant):
    _conversation(db, tenant, sessions=1, turns=6)
    build(db, tenant)
    kept = db.remember(tenant, "The renderer upgrade ships with the cobalt theme.", kind="fact")
    gone = db.remember(tenant, "The portal login uses the saffron identity provider.", kind="fact")
    recall_index(db, tenant)

    def memories():
        return {r[0] for r in db.conn.execute(
            "SELECT item_id FROM mnemo_internal.recall_index WHERE tenant_id = %s AND is_memory", (tenant,))}

    assert memories() == {kept, gone}
    db.forget(tenant, gone)
    assert memories() == {kept}  # forget erases it here too, before any sync
    later = db.remember(tenant, "The invoice export moved to the amber bucket.", kind="fact")
    db.conn.execute("UPDATE mnemo.memories SET is_active = false WHERE tenant_id = %s AND memory_id = %s",
                    (tenant, kept))
    recall_index(db, tenant)
    assert memories() == {later}


def test_memories_nearer_a_question_leave_its_turns_room(db, tenant):
    """Memories sit nearer a question than turns do. On one HNSW graph of both kinds,
    the k nearest items were memories alone, and a turn only its vector finds was
    not among them (bench-context, 100,000 messages: 113 of the 120 nearest were
    memories). The recall index's KNN (statements.RECALL_KNN, as the compile runs it)
    takes the k nearest of each kind, each by its own index (migration 0024)."""
    from mnemo_db.compile import statements

    _large_tenant(db, tenant, 2000)
    question = ASKED["paraphrase"]
    k = 120  # retrieval.recall_k's least: 2 x MIN_CANDIDATES
    for i in range(k + 30):
        db.remember(tenant, f"Recipe card {i}: granny put a spice into the jam she used to make.", kind="fact")
    run_jobs(db, tenant)  # their embeddings
    assert recall_index(db, tenant) > 0
    c = db.conn
    vector = c.execute("SELECT mnemo.embed(%s)::text", (question,)).fetchone()[0]
    needle_id, nearer = c.execute("""
        SELECT m.message_id, (SELECT count(*) FROM mnemo.memories AS mm WHERE mm.tenant_id = m.tenant_id
            AND mm.is_active AND mm.embedding <=> %(v)s::vector < m.embedding <=> %(v)s::vector)
        FROM mnemo.messages AS m WHERE m.tenant_id = %(t)s AND m.content = %(needle)s""",
        {"t": tenant, "v": vector, "needle": NEEDLE}).fetchone()
    assert nearer >= k, "the crowd must fill the k nearest items, or this test proves nothing"
    names = {r[0] for r in c.execute(
        "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'mnemo_internal.recall_index'::regclass "
        "AND pg_get_expr(indpred, indrelid) LIKE %s", (f"%{tenant}%",))}
    assert len([n for n in names if "hnsw" in n]) == 2, names
    c.execute("ANALYZE mnemo_internal.recall_index")  # the 150 memories came after the sync's own
    knn = statements.for_tenant(statements.RECALL_KNN, f"'{tenant}'").replace("$1", "%(v)s").replace("$2", "%(k)s")
    with c.transaction():
        c.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        c.execute("SET LOCAL hnsw.ef_search = 400")  # as mnemo_internal.compile_context sets them
        # 2,000 turns are sorted more cheaply than the graph is searched where the table
        # holds little else (a Citus shard: this tenant's share of it); a tenant large
        # enough for a recall index (25,000 messages) is the index's, what is checked here
        c.execute("SET LOCAL enable_sort = off")
        plan = "\n".join(r[0] for r in c.execute("EXPLAIN " + knn, {"v": vector, "k": k}))
        found = c.execute(knn, {"v": vector, "k": k}).fetchone()
    # (the memories' side may be sorted whole: 150 rows are fewer than a graph search reads)
    assert "Index Scan using recall_index_msg_hnsw_" in plan, plan
    messages = [i for m, i in zip(found[0], found[1], strict=True) if not m]
    assert needle_id in messages
    assert sum(found[0]) == k and len(messages) == k


def test_the_knn_orders_by_its_vector_parameter_under_a_generic_plan(db, tenant):
    """A backend past its first compiles runs RECALL_KNN as a generic plan. With the
    query vector passed as text and cast in the statement, the HNSW scans ordered by
    the cast expression and took 2-3x as long (8.9 against 3.3 ms for k = 135 on a
    100,000-message tenant); the compile prepares it with a halfvec parameter, and
    the generic plan orders by the parameter itself."""
    from mnemo_db.compile import statements

    _conversation(db, tenant, sessions=1, turns=6)
    build(db, tenant)
    assert recall_index(db, tenant) > 0
    c = db.conn
    text, types = statements.TENANT_STATEMENTS["recall_knn"]
    assert types[0] == "halfvec"
    vector = c.execute("SELECT mnemo.embed('the renderer upgrade')::text").fetchone()[0]
    with prepared(c, written_for(c, text, tenant), types) as execute:
        # a tenant of six turns beside large ones is estimated at a row or two, which a
        # sort orders more cheaply than the index: the plan of a tenant large enough
        # for a recall index is the index's (what is checked here is its Order By)
        c.execute("SET LOCAL enable_sort = off")
        plan = "\n".join(r[0] for r in c.execute(sql.SQL("EXPLAIN ") + execute([vector, 10])))
    orders = [line.strip() for line in plan.splitlines() if "Order By" in line]
    # (on Citus the worker gets the statement with the vector written in: a halfvec
    # constant, where a cast of text would show as ('...'::text)::halfvec)
    by_vector = (re.compile(r"Order By: \(embedding <=> '\[[^']*\]'::halfvec\)") if on_citus(c)
                 else re.compile(re.escape("Order By: (embedding <=> $1)")))
    assert orders and all(by_vector.fullmatch(o) for o in orders), plan


def test_memories_changed_just_before_a_sync_are_synced_again(db, tenant):
    """A sync sets memories_synced_at 5 minutes back (its margin for transactions
    still open), and a compile reads every memory changed since then whole. A memory
    changed in those 5 minutes stayed 'changed since' after the sync; the segments
    sweep, which looked only for changes more than 5 minutes after the last sync,
    never synced the tenant again, and every compile read it whole. The sweep now
    syncs a tenant whose changed memories a new sync would move past."""
    _conversation(db, tenant, sessions=1, turns=6)
    db.remember(tenant, "The renderer upgrade ships with the cobalt theme.", kind="fact")
    build(db, tenant)
    recall_index(db, tenant)
    c = db.conn
    # as if the last sync ran an hour ago, and the memory changed two minutes after
    # its memories_synced_at: inside the margin, before the sync itself
    c.execute("UPDATE mnemo_internal.recall_tenants SET memories_synced_at = now() - interval '1 hour' "
              "WHERE tenant_id = %s", (tenant,))
    c.execute("UPDATE mnemo.memories SET updated_at = now() - interval '58 minutes' WHERE tenant_id = %s",
              (tenant,))
    c.execute("SELECT mnemo_internal.sweep_segments(now(), %s, 10, '{}')", (tenant,))
    synced = c.execute("SELECT memories_synced_at > now() - interval '10 minutes' FROM mnemo_internal.recall_tenants "
                       "WHERE tenant_id = %s", (tenant,)).fetchone()[0]
    assert synced, "the sweep did not sync the tenant whose memories changed inside the margin"
    changed = c.execute("SELECT count(*) FROM mnemo.memories AS m JOIN mnemo_internal.recall_tenants AS r "
                        "USING (tenant_id) WHERE m.tenant_id = %s AND m.updated_at >= r.memories_synced_at",
                        (tenant,)).fetchone()[0]
    assert changed == 0  # no compile reads it whole any more


def test_a_recall_index_missing_an_index_gets_it_at_the_next_sync(db, tenant):
    """Migration 0024 drops the HNSW index over both kinds; the segments sweep asks a
    tenant whose index is missing to sync, though nothing else is new, and the sync
    builds it, as it builds any that is missing."""
    _conversation(db, tenant, sessions=1, turns=6)
    db.remember(tenant, "The renderer upgrade ships with the cobalt theme.", kind="fact")
    build(db, tenant)
    recall_index(db, tenant)
    c = db.conn
    hnsw, memory_hnsw = c.execute("SELECT hnsw_index, memory_hnsw_index FROM mnemo_internal.recall_tenants "
                                  "WHERE tenant_id = %s", (tenant,)).fetchone()
    c.execute(f'DROP INDEX mnemo_internal."{hnsw}"')
    assert c.execute("SELECT to_regclass(%s)", (f"mnemo_internal.{hnsw}",)).fetchone()[0] is None
    # the sweep asks the tenant though nothing is newer than its segments
    c.execute("SELECT mnemo_internal.sweep_segments(now(), %s, 10, '{}')", (tenant,))
    for name, kind in ((hnsw, "NOT is_memory"), (memory_hnsw, "is_memory")):
        pred = c.execute("SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = to_regclass(%s)",
                         (f"mnemo_internal.{name}",)).fetchone()[0]
        assert tenant in pred and kind in pred.replace("(", "").replace(")", ""), pred


# Every posting of the query's terms, as RECALL_HITS read them before it bounded the
# read of frequent terms: the reference for its ranking.
ALL_POSTINGS = """
WITH {terms},
hits AS MATERIALIZED (
    SELECT t.k, r.is_memory, r.item_id, length(r.search_tsv) AS doc_length
    FROM terms AS t JOIN mnemo_internal.recall_index AS r ON r.tenant_id = $1 AND r.search_tsv @@ t.tq
),
items AS MATERIALIZED (
    SELECT (row_number() OVER (ORDER BY h.is_memory, h.item_id))::integer - 1 AS pos, h.is_memory,
        h.item_id, min(h.doc_length) AS doc_length
    FROM hits AS h GROUP BY h.is_memory, h.item_id
)
SELECT {terms_out},
    (SELECT array_agg(i.item_id ORDER BY i.pos) FROM items AS i) AS item_id,
    (SELECT array_agg(i.doc_length ORDER BY i.pos) FROM items AS i) AS doc_length,
    (SELECT array_agg(i.pos ORDER BY i.pos, h.k) FROM hits AS h
        JOIN items AS i ON i.is_memory = h.is_memory AND i.item_id = h.item_id) AS hit_rows,
    (SELECT array_agg(h.k ORDER BY i.pos, h.k) FROM hits AS h
        JOIN items AS i ON i.is_memory = h.is_memory AND i.item_id = h.item_id) AS hit_terms
"""


@pytest.mark.parametrize("query", ["printer warehouse", "Who mentioned cardamom and the staging cluster?",
                                   ASKED["paraphrase"], "printer"])
def test_bounded_postings_rank_the_same_k_best(db, large_tenant, query):
    """RECALL_HITS reads a bounded number of the items that hold one frequent term
    alone (statements.RECALL_POSTINGS): the k best by BM25 are those of reading
    every posting (ties aside), for frequent words alone, a rare word among them, and
    words the tenant lacks."""
    import numpy as np
    from mnemo_db.compile import statements
    from mnemo_db.compile.retrieval import bm25
    from psycopg.rows import dict_row

    k = 120
    c = db.conn
    frequent = c.execute("SELECT count(*) FROM mnemo.lexicon WHERE tenant_id = %s AND doc_count > %s",
                         (large_tenant, statements.RECALL_POSTINGS)).fetchone()[0]
    assert frequent > 0, "the tenant must have terms past the bound, or this test proves nothing"

    def best(text: str, args: dict) -> tuple[dict, float, int]:
        r = c.cursor(row_factory=dict_row).execute(text, args).fetchone()
        ids = np.asarray(r["item_id"] or [], dtype=np.int64)
        if not len(ids):
            return {}, 0.0, 0
        score = bm25(len(ids), r["hit_rows"], r["hit_terms"], r["idf"], r["doc_length"], r["avgdl"])
        order = np.lexsort((ids, -score))[:k]
        return {int(ids[i]): float(score[i]) for i in order}, float(score[order[-1]]), len(ids)

    def sql(text: str) -> str:
        return text.replace("$1", "%(t)s").replace("$2", "%(q)s").replace("$3", "%(k)s")

    args = {"t": large_tenant, "q": query, "k": k}
    # RECALL_HITS ranks in SQL and returns its k best with their BM25
    r = c.cursor(row_factory=dict_row).execute(
        sql(statements.for_tenant(statements.RECALL_HITS, f"'{large_tenant}'")), args).fetchone()
    bounded = dict(zip(r["item_id"] or [], r["score"] or [], strict=True))
    floor, read = (r["score"] or [0.0])[-1], r["items_read"]
    every, _, all_read = best(sql(ALL_POSTINGS.format(terms=statements.query_terms("$2"),
                                                      terms_out=statements.TERMS_OUT)), args)
    if query == "printer warehouse":  # two frequent words, together in a few hundred turns
        assert read < all_read, "the bound is not reached: this case proves nothing"
    assert len(bounded) == len(every)
    assert all(i in bounded or s <= floor + 1e-9 for i, s in every.items())
    # the same float operations as retrieval.bm25: the same scores, to the last bit
    assert all(bounded[i] == s for i, s in every.items() if i in bounded)


def test_recall_hits_reads_a_bounded_number_of_items_for_frequent_words(db, large_tenant):
    """A question of five frequent words and no rare one: RECALL_HITS reads at most
    pair_rows items holding two of them (the pairs of highest idf first) and postings
    items holding one (that of highest idf first), where it read every pair's items
    and `postings` of each word's (a question of five frequent words read 32,000
    rows in a 100,000-message tenant). The bounds are narrowed to this tenant's size;
    the k best it then ranks hold two or more of the words, as the k best do."""
    import numpy as np
    from mnemo_db.compile import statements
    from psycopg.rows import dict_row

    def sql(text: str) -> str:
        return text.replace("$1", "%(t)s").replace("$2", "%(q)s").replace("$3", "%(k)s")

    args = {"t": large_tenant, "q": "staging billing mobile printer warehouse", "k": 120}
    postings, pair_rows = 300, 400
    every = db.conn.cursor(row_factory=dict_row).execute(sql(ALL_POSTINGS.format(
        terms=statements.query_terms("$2"), terms_out=statements.TERMS_OUT)), args).fetchone()
    assert min(every["idf"]) > 0 and all(  # each word frequent: past the narrowed bound
        n > postings for n in np.bincount(np.asarray(every["hit_terms"]), minlength=5))
    held = np.bincount(np.asarray(every["hit_rows"]), minlength=len(every["item_id"]))
    assert (held >= 2).sum() > pair_rows, "the pair bound is not reached: this case proves nothing"
    got = db.conn.cursor(row_factory=dict_row).execute(sql(statements.for_tenant(
        statements.recall_hits(postings=postings, pair_rows=pair_rows), f"'{large_tenant}'")), args).fetchone()
    assert got["items_read"] <= pair_rows + postings
    assert got["items_read"] < len(every["item_id"])
    assert len(got["item_id"]) == 120 and min(got["held"]) >= 2  # the k best hold two words or more


def test_an_indexed_compile_reads_the_memories_it_wants_by_their_ids(db, tenant):
    """CANDIDATE_POOL_RECALLED reads the memories the index found (and the few it may
    lack) by primary key, not every memory of the tenant: as an IN semi-join its
    generic plan scanned all of a 100,000-message tenant's 10,000 memories in key
    order to match ~1,200 ids (28 -> 13 ms p50 in bench-context's size sweep)."""
    from mnemo_db.compile import statements

    session = db.start_session(tenant)
    for i in range(40):
        db.remember(tenant, f"Fact {i}: the staging cluster runs release {i}.", kind="fact")
    c = db.conn
    wanted = [r[0] for r in c.execute("SELECT memory_id FROM mnemo.memories WHERE tenant_id = %s "
                                      "ORDER BY memory_id LIMIT 3", (tenant,))]
    args = statements.pool_args(tenant, str(session), "staging release", ["staging", "release"], None,
                                "private") + [wanted, "infinity"]
    with prepared(c, statements.CANDIDATE_POOL_RECALLED, statements.CANDIDATE_POOL_RECALLED_TYPES) as execute:
        plan = "\n".join(r[0] for r in c.execute(sql.SQL("EXPLAIN ") + execute(args)))
        got = c.execute(execute(args)).fetchone()
    assert sorted(got[0]) == sorted(wanted)
    assert "(memory_id = ANY (" in plan, plan


def test_migration_0026_retires_an_index_below_the_threshold(db, tenant):
    """A tenant indexed under the old threshold (5,000) and below today's loses its
    recall index, rows and indexes; the deploy ran the migration once, before this
    tenant existed, so the test runs its statement again (it only reads the setting)."""
    from pathlib import Path

    _conversation(db, tenant, sessions=1, turns=6)
    build(db, tenant)
    recall_index(db, tenant)  # indexed below the threshold, as under the old one
    c = db.conn
    names = c.execute("SELECT hnsw_index, memory_hnsw_index, gin_index FROM mnemo_internal.recall_tenants "
                      "WHERE tenant_id = %s", (tenant,)).fetchone()
    assert all(c.execute("SELECT to_regclass(%s)", (f"mnemo_internal.{n}",)).fetchone()[0] for n in names)
    c.execute(Path(__file__).resolve().parents[3].joinpath(
        "sql", "migrations", "0026_recall_index_retire_small.sql").read_text())
    assert not indexed(db, tenant)
    assert not any(c.execute("SELECT to_regclass(%s)", (f"mnemo_internal.{n}",)).fetchone()[0] for n in names)
    assert c.execute("SELECT count(*) FROM mnemo_internal.recall_index WHERE tenant_id = %s",
                     (tenant,)).fetchone()[0] == 0
    # the compile reads the whole history again, and finds what it found before
    session = c.execute("SELECT session_id FROM mnemo.sessions WHERE tenant_id = %s LIMIT 1", (tenant,)).fetchone()[0]
    assert db.compile_context(tenant, session, "cobalt theme")


def test_a_memory_linked_to_an_entity_the_question_names_is_a_candidate(db, tenant):
    """A large tenant's pool takes, besides what its index finds, the newest memories
    linked to an entity the question names, and marks each memory linked to one as a
    tag match (statements.CANDIDATE_POOL_RECALLED, as a generic plan). Migration 0027
    looks the entities up by name and each one's newest memories by its own index:
    before, every entity and every mention of the tenant was read at each compile.
    Nothing found by the index ($10 empty), nothing changed since the sync: the linked
    memory is the pool, whatever its wording."""
    from mnemo_db.compile import retrieval, statements

    _conversation(db, tenant, sessions=1, turns=6)
    for filler in ("The staging cluster slipped by a week.", "Our billing export passed its load test."):
        db.remember(tenant, filler, kind="fact")
    linked = db.remember(tenant, "The tide tables were printed on blue paper.", kind="fact")
    c = db.conn
    entity = c.execute("INSERT INTO mnemo.entities (tenant_id, kind, name, normalized) "
                       "VALUES (%s, 'person', 'Quillfeather', 'quillfeather') RETURNING entity_id",
                       (tenant,)).fetchone()[0]
    c.execute("INSERT INTO mnemo.entity_mentions (tenant_id, memory_id, entity_id, role) "
              "VALUES (%s, %s, %s, 'subject')", (tenant, linked, entity))
    build(db, tenant)
    assert recall_index(db, tenant) > 0
    sid = str(db.start_session(tenant, context_window=128000))
    text, types = statements.STATEMENTS["candidate_pool_recalled"]

    def pool(question: str) -> dict:
        """The statement's row for the question."""
        words = retrieval.query_words(question)
        args = statements.pool_args(tenant, sid, question, words, None, "private") + [
            [], "infinity"]  # nothing found by the index, nothing changed since
        with prepared(c, text, types) as execute:
            cur = c.execute(execute(args))
            return dict(zip((d.name for d in cur.description), cur.fetchone(), strict=True))

    named = pool("What did Quillfeather tell us?")
    unnamed = pool("What did the gardener tell us?")
    assert named["mem_ids"] == [linked] and named["mem_tag"] == [True]
    assert not unnamed["mem_ids"]


def test_the_most_used_memories_are_read_off_the_tenants_index(db, tenant):
    """A large tenant's most used memories are candidates whatever the question
    (statements.FREQUENT_MEMORIES): the first 5 * FREQUENT_GLOBAL by use, most used
    first, read off its (tenant_id, access_count) index. The statement is written for
    the tenant: with the tenant a parameter, the generic plan of a long-lived backend
    took it for an average tenant, read all of its access rows and sorted them (7,877
    rows, 2.6 ms, for a 100,000-message tenant: a cost that grew with its use)."""
    from mnemo_db.compile import retrieval, statements

    c = db.conn
    n = 300
    ids = [r[0] for r in c.execute(
        "INSERT INTO mnemo.memories (tenant_id, kind, content_full, content_stub, tokens_full, tokens_stub,"
        " content_hash) SELECT %s, 'fact', 'Fact ' || i, 'Fact ' || i, 3, 3, sha256(('fact ' || i)::bytea)"
        " FROM generate_series(1, %s) AS i RETURNING memory_id", (tenant, n))]
    # each used as often as its place in the list: the last is the most used
    c.execute("INSERT INTO mnemo.memory_access (tenant_id, memory_id, access_count, last_accessed_at)"
              " SELECT %s, m, u, now() FROM unnest(%s::bigint[]) WITH ORDINALITY AS x (m, u)", (tenant, ids))
    c.execute("ANALYZE mnemo.memory_access")  # the planner learns this tenant's rows
    text, types = statements.TENANT_STATEMENTS["frequent_memories"]
    assert types == []
    with prepared(c, written_for(c, text, tenant), types) as execute:
        plan = "\n".join(r[0] for r in c.execute(sql.SQL("EXPLAIN ") + execute([])))
        got = c.execute(execute([])).fetchone()[0]
    assert got == ids[::-1][:5 * retrieval.FREQUENT_GLOBAL]
    assert "Index Scan" in plan and "memory_access" in plan and "Sort" not in plan, plan


def test_an_indexed_compile_takes_the_most_used_global_memory_whatever_the_question(db, tenant):
    """The most used global memories are candidates of a large tenant's compile however
    far from the question (FREQUENT_MEMORIES, then retrieval.fuse_candidates keeps
    them): the index finds the nearest and best lexical items, which these are not."""
    _conversation(db, tenant)
    used = db.remember(tenant, "Deploys to production need a second approver on weekends.", kind="instruction")
    c = db.conn
    c.execute("UPDATE mnemo.memories SET scope = 'global' WHERE tenant_id = %s AND memory_id = %s", (tenant, used))
    c.execute("INSERT INTO mnemo.memory_access (tenant_id, memory_id, access_count, last_accessed_at)"
              " VALUES (%s, %s, 40, now()) ON CONFLICT (tenant_id, memory_id) DO UPDATE SET access_count = 40",
              (tenant, used))
    build(db, tenant)
    assert recall_index(db, tenant) > 0 and indexed(db, tenant)
    # out of the index, unchanged since well before the sync (which reads again what
    # changed in a margin before it): only its use can bring it in
    assert c.execute("DELETE FROM mnemo_internal.recall_index WHERE tenant_id = %s AND is_memory"
                     " AND item_id = %s", (tenant, used)).rowcount == 1
    c.execute("UPDATE mnemo.memories SET updated_at = now() - interval '1 day' WHERE tenant_id = %s"
              " AND memory_id = %s", (tenant, used))
    sid = db.start_session(tenant, context_window=128000)
    report = db.compile_context_bundle(tenant, sid, "What happened to the PDF renderer upgrade?",
                                       budget=4000, log=False)["report"]
    assert f"mem:{used}" in [i["source"] for i in report["items"]], report["items"]
    assert report["provenance"]["retrievers"].get("frequent") == 1, report["provenance"]
