"""Issue 26 §2-§4: one scoring for the ranked list and the context, the signals that
gather evidence (speakers, dated lines, date ranges, diversity), sessions that know
their time (start_session's p_started_at) and the recall scope."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest
from helpers import run_jobs, text_of
from mnemo_db.compile import options, retrieval, temporal
from mnemo_db.compile.policy import DEFAULT_WEIGHTS

from mnemosyne import default_dsn, errors
from mnemosyne.importers import Parsed, Session, run_import


# --------------------------------------------------------------------------- units
@pytest.mark.parametrize("query, asks", [
    ("When did Caroline go to the support group?", True),
    ("How long has she had her friends?", True),
    ("how many weeks did the trip take", True),
    ("What year did they move?", True),
    ("Where did Caroline move from?", False),
    ("Whenever you can, summarise the thread", False),
    (None, False),
])
def test_temporal_intent(query, asks):
    assert temporal.temporal_intent(query) is asks


def test_date_ranges_are_read_against_the_sessions_now():
    now = datetime(2023, 7, 20, 15, 0)  # a Thursday
    day = timedelta(days=1)

    def single(query):
        (got,) = temporal.date_ranges(query, now)
        return got

    assert single("What did we decide yesterday?") == (datetime(2023, 7, 19) - day, datetime(2023, 7, 20) + day)
    assert single("the bug from last Tuesday") == (datetime(2023, 7, 18) - day, datetime(2023, 7, 19) + day)
    start, end = single("what did I cook two weeks ago")
    assert start < datetime(2023, 7, 6) < end <= datetime(2023, 7, 12)
    assert single("in May 2023") == (datetime(2023, 5, 1) - day, datetime(2023, 6, 1) + day)
    # a named day is that day, not its month
    assert single("on 1 February, 2023") == (datetime(2023, 2, 1) - day, datetime(2023, 2, 2) + day)
    assert single("What was she doing on December 4, 2023?") == (datetime(2023, 12, 3), datetime(2023, 12, 6))
    assert single("on February 30, 2023") == (datetime(2023, 2, 1) - day, datetime(2023, 3, 1) + day)  # no such day
    # "the last week of August" is in August, not the week before now
    assert single("Where was he during the last week of August 2023?") == (
        datetime(2023, 8, 1) - day, datetime(2023, 9, 1) + day)
    assert single("How many times did she swim in 2022?") == (datetime(2022, 1, 1) - day, datetime(2023, 1, 1) + day)
    assert single("When did Melanie go camping in June?") == (6, None)  # June of any year
    assert temporal.date_ranges("I may come by later", now) == []  # "may" is the verb here
    assert temporal.date_ranges(None, now) == []


def test_in_date_ranges():
    epochs = np.array([datetime(2023, 6, 3, tzinfo=UTC).timestamp(), np.nan,
                       datetime(2021, 6, 30, tzinfo=UTC).timestamp(), datetime(2023, 7, 1, tzinfo=UTC).timestamp()])
    assert temporal.in_date_ranges(epochs, [(6, None)]).tolist() == [True, False, True, False]
    july = [(datetime(2023, 6, 30), datetime(2023, 7, 2))]
    assert temporal.in_date_ranges(epochs, july).tolist() == [False, False, False, True]
    assert temporal.in_date_ranges(epochs, []).tolist() == [False] * 4


def test_in_date_ranges_reaches_back_from_a_line_that_dates_something():
    """A line said on 4 July that says "last week" tells of late June: with a reach
    of 14 days it is in June (a range, or June of any year); said 20 days after
    June, it is not; a time without a reach is where it was said."""
    day = 86400.0
    july4 = datetime(2023, 7, 4, tzinfo=UTC).timestamp()
    epochs = np.array([july4, july4 + 16 * day, np.nan])
    june = [(datetime(2023, 5, 31), datetime(2023, 7, 2))]
    assert temporal.in_date_ranges(epochs, june).tolist() == [False, False, False]
    assert temporal.in_date_ranges(epochs, june, 14 * day).tolist() == [True, False, False]
    assert temporal.in_date_ranges(epochs, june, np.array([0.0, 14 * day, 14 * day])).tolist() == [False] * 3
    assert temporal.in_date_ranges(epochs, [(6, None)], 14 * day).tolist() == [True, False, False]
    # a reach across the new year: said on 5 January, it reaches December
    jan5 = np.array([datetime(2024, 1, 5, tzinfo=UTC).timestamp()])
    assert temporal.in_date_ranges(jan5, [(12, None)], 14 * day).tolist() == [True]
    assert temporal.in_date_ranges(jan5, [(11, None)], 14 * day).tolist() == [False]


def _memory_pool(vectors: list[list[float]]) -> retrieval.CandidatePool:
    n = len(vectors)
    v = np.asarray(vectors, dtype=np.float32)
    return retrieval.CandidatePool(
        memory_ids=np.arange(1, n + 1), message_ids=np.zeros(0, dtype=np.int64),
        message_created=np.zeros(0), same_session=np.zeros(0, dtype=bool),
        floor_tokens=np.full(n, 10), bm25=np.zeros(n), tag_match=np.zeros(n, dtype=bool),
        trigram=np.zeros(n), pinned=np.zeros(n, dtype=bool), access_count=np.zeros(n, dtype=np.int64),
        is_global=np.ones(n, dtype=bool), embedded=np.arange(n), vectors=[v], norms=np.linalg.norm(v, axis=1))


def test_diversify_moves_a_distinct_line_above_a_near_copy():
    pool = _memory_pool([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    relevance = np.array([0.90, 0.88, 0.85])
    got = retrieval.diversify(pool, relevance, 0.1, pool.memory_ids)
    assert got[0] == pytest.approx(0.90) and got[2] == pytest.approx(0.85)  # nothing like them ranked above
    assert got[1] < got[2]  # the near copy of the first falls below the distinct third
    assert retrieval.diversify(pool, relevance, 0.0, pool.memory_ids) is relevance


def test_fused_relevance_counts_dated_lines_and_date_ranges():
    pool = _memory_pool([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    pool.dated = np.array([False, True, False])
    june = datetime(2023, 6, 10, tzinfo=UTC).timestamp()
    pool.event_epoch = np.array([june - 86400 * 60, june - 86400 * 60, june])
    w = {**DEFAULT_WEIGHTS, "diversity": 0.0}
    cos = np.array([0.5, 0.5, 0.5])
    plain = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cos, w, 1000)}
    ranged = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cos, w, 1000, [(6, None)])}
    assert plain[2] == pytest.approx(plain[1] + w["dated_bonus"]) and plain[3] == pytest.approx(plain[1])
    assert ranged[3] == pytest.approx(plain[3] + w["date_range_bonus"]) and ranged[1] == pytest.approx(plain[1])


def test_a_dated_line_said_after_a_range_is_in_it_and_earns_no_dated_bonus_unless_asked_when():
    """"What did he read in January?": the line said on 4 February that says "two
    weeks ago" is in January; an undated line said then is not. A question that
    does not ask when gives the dated line no bonus of its own."""
    pool = _memory_pool([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    pool.dated = np.array([True, False, False])
    feb4 = datetime(2023, 2, 4, tzinfo=UTC).timestamp()
    pool.event_epoch = np.array([feb4, feb4, feb4 - 86400 * 30])
    w = {**DEFAULT_WEIGHTS, "diversity": 0.0}
    cos = np.array([0.5, 0.5, 0.5])
    january = [(datetime(2022, 12, 31), datetime(2023, 2, 2))]
    got = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cos, w, 1000, january, asks_when=False)}
    assert got[1] == pytest.approx(got[2] + w["date_range_bonus"])  # dated, said after January: in it
    assert got[3] == pytest.approx(got[2] + w["date_range_bonus"])  # said in January
    asked = {c["id"]: c["relevance"] for c in retrieval.fuse_candidates(pool, cos, w, 1000, january, asks_when=True)}
    assert asked[1] == pytest.approx(got[1] + w["dated_bonus"]) and asked[2] == pytest.approx(got[2])


def test_recall_scope_option():
    assert options.parse_options({}, "private")["recall_scope"] == "tenant"
    assert options.parse_options({}, "private", "agent")["recall_scope"] == "agent"
    assert options.parse_options({}, "private", "bogus")["recall_scope"] == "tenant"  # a config set by hand
    assert options.parse_options({"recall_scope": "tenant"}, "private", "agent")["recall_scope"] == "tenant"
    for bad in ("everyone", "", 3, ["agent"]):
        with pytest.raises(options.OptionError):
            options.parse_options({"recall_scope": bad}, "private")


# --------------------------------------------------------------------------- the database
def _ranked(db, tenant, session, query, **opts) -> list[str]:
    items = db.compile_context_bundle(tenant, session, query, budget=100_000, log=False, **opts)["report"]["items"]
    return [i["source"] for i in sorted((i for i in items if i["section"] == "memory"), key=lambda i: i["rank"])]


def test_start_session_takes_its_time_checked_like_every_timestamp(db, tenant):
    when = datetime(2023, 5, 7, 13, 56, tzinfo=UTC)
    s = db.start_session(tenant, started_at=when)
    assert db._call("SELECT started_at FROM mnemo.sessions WHERE tenant_id = %(t)s AND session_id = %(s)s",
                    {"t": tenant, "s": s}) == when
    live = db.start_session(tenant)
    assert db._call("SELECT started_at FROM mnemo.sessions WHERE tenant_id = %(t)s AND session_id = %(s)s",
                    {"t": tenant, "s": live}) is None
    # the old signature's calls still work (positional, without p_started_at)
    assert db._call("SELECT mnemo.start_session(%(t)s, 'default', 'private', 'gpt-4o', 128000, 4096,"
                    " NULL, '{}', NULL, NULL, '{}')", {"t": tenant})
    for bad in ("infinity", "-infinity", "0001-06-01 00:00:00+00"):
        sid = uuid.uuid4()
        with pytest.raises(errors.InvalidParameter, match="started_at"):
            db._call("SELECT mnemo.start_session(%(t)s, p_session_id => %(s)s, p_started_at => %(a)s)",
                     {"t": tenant, "s": sid, "a": bad})
        assert not db.list_sessions(tenant, session_id=sid)
    exported = [r for r in db.export_tenant(tenant) if r["type"] == "session" and r["session_id"] == str(s)]
    assert datetime.fromisoformat(exported[0]["started_at"]) == when


def test_relative_dates_are_read_against_the_sessions_own_time(db, tenant):
    """"two weeks ago" in a session that took place on 15 March 2023 means early
    March 2023: the line said then ranks first; as_of still wins over the session's
    time."""
    said = {}
    for day in (datetime(2023, 1, 10, 19, tzinfo=UTC), datetime(2023, 2, 28, 19, tzinfo=UTC)):
        s = db.start_session(tenant, started_at=day)
        dinner = {"role": "user", "content": "I cooked a big dinner for the whole family."}
        said[day.month] = f"msg:{db.record_message(tenant, s, dinner, created_at=day)}"
    run_jobs(db, tenant)
    query = "What did I cook two weeks ago?"
    then = db.start_session(tenant, started_at=datetime(2023, 3, 15, 9, tzinfo=UTC))
    assert _ranked(db, tenant, then, query)[:2] == [said[2], said[1]]
    assert _ranked(db, tenant, then, query, as_of="2023-01-24T12:00:00Z")[:1] == [said[1]]


def test_a_when_question_ranks_the_line_that_dates_it_first(db, tenant):
    # (in two sessions: neighbouring turns share their relevance)
    plain = db.record_message(tenant, db.start_session(tenant), {
        "role": "user", "name": "Ana", "content": "I went to the dentist, all fine."})
    dated = db.record_message(tenant, db.start_session(tenant), {
        "role": "user", "name": "Ana", "content": "Small update: the dentist appointment was last Friday."})
    run_jobs(db, tenant)
    q = db.start_session(tenant)
    assert _ranked(db, tenant, q, "When did Ana go to the dentist?")[0] == f"msg:{dated}"
    assert _ranked(db, tenant, q, "Did Ana go to the dentist?")[0] == f"msg:{plain}"


def test_a_speaker_named_in_the_query_counts_as_the_speaker_not_as_a_word(db, tenant):
    """The reply that names Maria ("Maria, ...") is not what Maria said."""
    s = db.start_session(tenant)
    maria = db.record_message(tenant, s, {"role": "user", "name": "Maria",
                                          "content": "We adopted a kitten from the shelter last week."})
    jon = db.record_message(tenant, s, {"role": "assistant", "name": "Jon",
                                        "content": "Maria, Maria! That adoption news about Maria is great, Maria."})
    run_jobs(db, tenant)
    q = db.start_session(tenant)
    ranked = _ranked(db, tenant, q, "What did Maria adopt?")
    assert ranked.index(f"msg:{maria}") < ranked.index(f"msg:{jon}")


def test_a_first_person_question_counts_the_users_turns_as_its_speaker(db, tenant):
    """Issue 42 §3: "When did I see my dermatologist?" asks about what the user said,
    a fact said in passing in a turn about something else, over an assistant's
    closer explanation of the topic; a question to the assistant ("what did you tell
    me") names no role, and the explanation stays first."""
    said = {}
    s = db.start_session(tenant)
    said["user"] = db.record_message(tenant, s, {"role": "user", "content": (
        "Can you help me plan meals for the week? Something quick, I get home late. By the way, I finally "
        "went to see my dermatologist on Tuesday about the rash on my arm.")})
    db.record_message(tenant, s, {"role": "assistant", "content": (
        "Sure! Monday: lentil soup. Tuesday: stir-fried tofu with rice. Wednesday: pasta with pesto.")})
    s = db.start_session(tenant)
    db.record_message(tenant, s, {"role": "user", "content": "Any tips on skin care in winter?"})
    said["assistant"] = db.record_message(tenant, s, {"role": "assistant", "content": (
        "See a dermatologist about a rash that lasts: a dermatologist visit starts with a look at the rash, "
        "and the dermatologist may suggest a cream.")})
    run_jobs(db, tenant)
    q = db.start_session(tenant)

    def order(query):
        ranked = _ranked(db, tenant, q, query)
        return sorted(said, key=lambda role: ranked.index(f"msg:{said[role]}"))

    assert order("When did I see my dermatologist about the rash?") == ["user", "assistant"]
    assert order("What did you tell me about seeing a dermatologist about the rash?") == ["assistant", "user"]


@pytest.mark.parametrize("text, expected", [
    ("Can you plan my meals? By the way, I adopted two kittens last spring.",
     ["Can you plan my meals?", "By the way, I adopted two kittens last spring."]),
    ("Thanks! That helps a lot.", []),  # one sentence that says something: the turn's own vector
    ("What is 3.5 times 2? I need it for the recipe.", ["What is 3.5 times 2?", "I need it for the recipe."]),
    ('I asked "Is it safe?" She said it was fine.', ['I asked "Is it safe?"', "She said it was fine."]),
    ("", []),
    (None, []),
])
def test_sentences(text, expected):
    assert retrieval.sentences(text) == expected


def test_a_fact_said_in_passing_is_matched_by_its_sentence(db, tenant):
    """Issue 42 §3: a user's turn that is a request with an aside ("By the way, I
    adopted two kittens") holds the fact a first-person question asks for in one
    sentence; the turn's vector is the request's, and another turn on the question's
    topic is the closer match as a whole. For a question that names the user
    (asker_roles) the turn's closest sentence is what counts; the same question in
    the first person plural names no role, and the turns rank as wholes."""
    s = db.start_session(tenant)
    aside = db.record_message(tenant, s, {"role": "user", "content": (
        "Can you suggest a weekly cleaning schedule for a two-bedroom apartment? I want the kitchen and the "
        "bathroom tidy without losing my whole weekend to it. By the way, I adopted two kittens from the "
        "animal shelter last spring.")})
    db.record_message(tenant, s, {"role": "assistant", "content": (
        "Monday: kitchen surfaces. Wednesday: bathroom. Saturday: floors and dusting, about an hour.")})
    s = db.start_session(tenant)
    topic = db.record_message(tenant, s, {"role": "user", "content": (
        "Which toys keep shelter pets busy at home in the evenings?")})
    db.record_message(tenant, s, {"role": "assistant", "content": "Puzzle feeders and wand toys work well."})
    run_jobs(db, tenant)
    q = db.start_session(tenant)

    def order(query):
        ranked = _ranked(db, tenant, q, query)
        return sorted((aside, topic), key=lambda m: ranked.index(f"msg:{m}"))

    assert order("How many pets did we adopt from the shelter?") == [topic, aside]
    assert order("How many pets did I adopt from the shelter?") == [aside, topic]

    # The sentences' vectors are the embed job's, stored with the turn's: the
    # compile encodes none. Without them the turn ranks as a whole again, and
    # with them back as before.
    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        def stored(m):
            return conn.execute("SELECT sentence_embeddings::text FROM mnemo.messages "
                                "WHERE tenant_id = %s AND message_id = %s", (tenant, m)).fetchone()[0]
        kept = stored(aside)
        conn.execute("UPDATE mnemo.messages SET sentence_embeddings = NULL WHERE tenant_id = %s AND message_id = %s",
                     (tenant, aside))
        assert order("How many pets did I adopt from the shelter?") == [topic, aside]
        conn.execute("UPDATE mnemo.messages SET sentence_embeddings = %s::vector(384)[] "
                     "WHERE tenant_id = %s AND message_id = %s", (kept, tenant, aside))
        assert order("How many pets did I adopt from the shelter?") == [aside, topic]


def test_the_embed_job_stores_a_user_turns_sentence_vectors(db, tenant):
    """The embed job encodes a user turn's sentences (retrieval.sentences, the one
    split) with the turn and stores their vectors in order; a turn of one sentence,
    an assistant's turn and a memory get none."""
    s = db.start_session(tenant)
    text = ("Can you plan a three-day trip to Lisbon for me? I like museums more than beaches. "
            "Thanks! My budget is about nine hundred euros.")
    user = db.record_message(tenant, s, {"role": "user", "content": text})
    short = db.record_message(tenant, s, {"role": "user", "content": "What is the weather like in Lisbon in May?"})
    said = db.record_message(tenant, s, {"role": "assistant", "content": (
        "Day one: Belem and the Jeronimos Monastery. Day two: the Gulbenkian Museum. Day three: Sintra.")})
    with psycopg.connect(default_dsn(), autocommit=True) as conn:
        def stored(m):
            return conn.execute(
                "SELECT sentence_embeddings IS NULL, embedding IS NULL FROM mnemo.messages "
                "WHERE tenant_id = %s AND message_id = %s", (tenant, m)).fetchone()
        assert stored(user) == (True, True)  # nothing before the job runs
        run_jobs(db, tenant)
        for m in (short, said):
            assert stored(m) == (True, False)
        expected = retrieval.sentences(text)
        assert expected == ["Can you plan a three-day trip to Lisbon for me?", "I like museums more than beaches.",
                            "My budget is about nine hundred euros."]
        (cosines,) = conn.execute("""
            SELECT array_agg(1 - (v <=> mnemo.embed(x)) ORDER BY k)
            FROM mnemo.messages AS m,
                unnest(m.sentence_embeddings, %s::text[]) WITH ORDINALITY AS s (v, x, k)
            WHERE m.tenant_id = %s AND m.message_id = %s""", (expected, tenant, user)).fetchone()
    assert len(cosines) == 3 and min(cosines) > 0.9999


def test_the_items_cap_keeps_the_best_ranked(db, tenant):
    s = db.start_session(tenant)
    for k in range(6):
        db.record_message(tenant, s, {"role": "user", "content": f"Fact {k}: the build server runs job {k}."})
    run_jobs(db, tenant)
    q = db.start_session(tenant)
    everything = _ranked(db, tenant, q, "Which job does the build server run?")
    capped = db.compile_context_bundle(tenant, q, "Which job does the build server run?", budget=100_000,
                                       log=False, caps={"items": 3})["report"]["items"]
    assert sorted(i["rank"] for i in capped if i["section"] == "memory") == [1, 2, 3]
    assert {i["source"] for i in capped if i["section"] == "memory"} == set(everything[:3])


def test_recall_scope_per_tenant_and_per_call(db):
    tenant = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(tenant, config={"recall_scope": "agent"})
    mk = f"SCOPE{uuid.uuid4().hex[:8].upper()}"
    coder = db.start_session(tenant, agent_id="coder")
    db.record_message(tenant, coder, {"role": "user", "content": f"The deploy key rotation ticket is {mk}."})
    shared = db.start_session(tenant, agent_id="coder", channel="team")
    db.record_message(tenant, shared, {"role": "user", "content": "The deploy key rotation happens monthly."})
    run_jobs(db, tenant)
    planner = db.start_session(tenant, agent_id="planner")
    query = "What is the deploy key rotation ticket?"
    hidden = db.compile_context_bundle(tenant, planner, query, budget=20_000)
    assert mk not in text_of(hidden["messages"])
    assert "monthly" in text_of(hidden["messages"])  # a team session is everyone's
    assert hidden["report"]["provenance"]["recall_scope"] == {"scope": "agent", "hidden_messages": 1}
    opened = db.compile_context_bundle(tenant, planner, query, budget=20_000, recall_scope="tenant")
    assert mk in text_of(opened["messages"])
    assert opened["report"]["provenance"]["recall_scope"] == {"scope": "tenant", "hidden_messages": 0}
    # an `agent`-channel session stays its agent's under either scope
    own = db.start_session(tenant, agent_id="coder", channel="agent")
    mk2 = f"AGENT{uuid.uuid4().hex[:8].upper()}"
    db.record_message(tenant, own, {"role": "user", "content": f"The deploy key rotation scratch note is {mk2}."})
    run_jobs(db, tenant)
    still = db.compile_context_bundle(tenant, planner, query, budget=20_000, recall_scope="tenant")
    assert mk2 not in text_of(still["messages"])
    assert still["report"]["provenance"]["recall_scope"] == {"scope": "tenant", "hidden_messages": 1}
    with pytest.raises(errors.InvalidParameter):
        db.compile_context(tenant, planner, query, recall_scope="everyone")
    for config in ({"recall_scope": "nobody"}, {"recall_scope": 1}):
        with pytest.raises(errors.InvalidParameter):
            db.create_tenant("t_" + uuid.uuid4().hex[:12], config=config)


def test_an_import_keeps_each_sessions_time(db, tenant):
    first = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    sid = uuid.uuid4()
    parsed = Parsed("openai", [Session(sid, {"agent_id": "import"}, [
        {"message": {"role": "user", "content": "hello"}, "created_at": first, "metadata": {}},
        {"message": {"role": "assistant", "content": "hi"}, "created_at": first + timedelta(minutes=1),
         "metadata": {}}])])
    run_import(db, tenant, parsed)
    assert db._call("SELECT started_at FROM mnemo.sessions WHERE tenant_id = %(t)s AND session_id = %(s)s",
                    {"t": tenant, "s": sid}) == first
