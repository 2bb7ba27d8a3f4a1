"""Knowledge updates in the compiled context (issue 42, item 1): a value the user
changed in a later session is sent latest first, with the earlier value and the day it
stopped holding on the same line (compile/updates.py), exactly counted; an earlier
value more sensitive than the channel allows, or not yet known at as_of, is not shown."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from conftest import drain_jobs
from mnemo_db import tokens

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
MOVED = T0 + timedelta(days=30)
# Chatter around each statement: its turn then costs more than the budget, so the
# memory, not the turn recalled whole, carries the value (bundle.repeats_block drops a
# note whose source turns the block also sends whole).
CHATTER = " ".join(
    f"The weather on day {i} was mild, the bakery on the corner sold rye bread and the tram ran late again."
    for i in range(12))


def two_sessions(db, tenant, first_sensitivity: str = "none") -> None:
    """Paris said in a first session, Berlin thirty days later in a second; both
    extracted by the extract job."""
    for at, statement, sens in ((T0, "I live in Paris.", first_sensitivity), (MOVED, "I now live in Berlin.", "none")):
        s = db.start_session(tenant, context_window=8192, started_at=at)
        db.record_message(tenant, s, {"role": "user", "content": f"{CHATTER} {statement} {CHATTER}"},
                          created_at=at, sensitivity=sens)
        db.record_message(tenant, s, {"role": "assistant", "content": "Noted."}, created_at=at + timedelta(minutes=1))
        db._call("SELECT mnemo_internal.enqueue_job(%(t)s, 'extract', 'session:' || %(s)s,"
                 " jsonb_build_object('session_id', %(s)s))", {"t": tenant, "s": str(s)})
    drain_jobs(db, tenant, 13)


def memory_of(db, tenant, city: str) -> tuple:
    with db.conn.cursor() as cur:
        cur.execute("SELECT memory_id, superseded_by, metadata ->> 'superseded_reason', source_message_ids"
                    " FROM mnemo.memories WHERE tenant_id = %s AND content_full LIKE %s", (tenant, f"%{city}%"))
        found = cur.fetchall()
    assert len(found) == 1, found
    return found[0]


def block_of(bundle: dict) -> dict | None:
    return next((m for m in bundle["messages"] if m["role"] == "system"
                 and isinstance(m.get("content"), str) and m["content"].startswith("Memory:")), None)


def compile_block(db, tenant, **options):
    s = db.start_session(tenant, context_window=8192, started_at=MOVED + timedelta(days=5))
    bundle = db.compile_context_bundle(tenant, s, "Where do I live?", budget=120, log=False, **options)
    return bundle, block_of(bundle)


def test_an_update_is_sent_latest_first_with_the_earlier_value_and_its_day(db, tenant):
    two_sessions(db, tenant)
    paris, berlin = memory_of(db, tenant, "Paris"), memory_of(db, tenant, "Berlin")
    assert paris[1] == berlin[0] and paris[2] == "contradicted by a newer statement", "formation superseded Paris"

    bundle, block = compile_block(db, tenant)
    assert block is not None, bundle["report"]
    line = next(x for x in block["content"].splitlines() if x.startswith(f"[mem:{berlin[0]} "))
    assert re.search(r"Berlin.* \(earlier, until 2025-03-31: Paris\)$", line), line
    # exact: the block's reported tokens are those of the block as sent
    assert bundle["report"]["tokens"]["memory"] == tokens.count_message(block)
    item = next(i for i in bundle["report"]["items"] if i["source"] == f"mem:{berlin[0]}")
    assert item["fidelity"] == "full"
    # the earlier turn stays reachable: Berlin's note now stands for Paris's turn too,
    # so with both turns sent whole it leaves the block (repeats_block)
    wide = db.compile_context_bundle(tenant, db.start_session(tenant, context_window=8192,
                                     started_at=MOVED + timedelta(days=5)),
                                     "Where do I live?", budget=4000, log=False)
    sent = {i["source"] for i in wide["report"]["items"]}
    if {f"msg:{paris[3][0]}", f"msg:{berlin[3][0]}"} <= sent:
        assert f"mem:{berlin[0]}" not in sent

    # as of a day between the two statements, Paris is current and has no earlier value
    _, past = compile_block(db, tenant, as_of=(T0 + timedelta(days=10)).isoformat())
    assert past is not None and "Berlin" not in past["content"] and "(earlier" not in past["content"]
    # as of a day after the move, the same line as now
    _, later = compile_block(db, tenant, as_of=(MOVED + timedelta(days=1)).isoformat())
    assert later is not None and line in later["content"].splitlines()


def test_an_earlier_value_more_sensitive_than_the_channel_is_not_shown(db, tenant):
    two_sessions(db, tenant, first_sensitivity="high")
    berlin = memory_of(db, tenant, "Berlin")
    # the team channel sees no 'high': Berlin alone, nothing of Paris
    bundle, block = compile_block(db, tenant, channel="team")
    assert block is not None, bundle["report"]
    assert f"[mem:{berlin[0]} " in block["content"]
    assert "Paris" not in json.dumps(bundle["messages"]) and "(earlier" not in block["content"]
    assert bundle["report"]["tokens"]["memory"] == tokens.count_message(block)
    # the private channel does
    _, private = compile_block(db, tenant, channel="private")
    assert private is not None and "(earlier, until 2025-03-31: Paris)" in private["content"]


def test_a_quantity_said_again_with_a_new_value_supersedes_the_earlier_note(db, tenant):
    # no functional predicate names these: a plain statement said again, its number changed
    # (session, said at, statement)
    said = [(1, T0, "I've been dedicating about an hour each day to coding exercises."),
            (2, T0 + timedelta(days=1), "I have 2 cats at home."),
            (3, MOVED, "By the way, I've been dedicating about two hours each day to coding exercises."),
            (4, MOVED + timedelta(minutes=5), "I have 3 dogs at home."),
            # the next of a series in one session is no new value
            (5, MOVED + timedelta(minutes=10), "I have added the $200 expense to the gifts category."),
            (5, MOVED + timedelta(minutes=11), "I have added the $100 expense to the gifts category.")]
    sessions = {}
    for n, at, statement in said:
        s = sessions.get(n) or sessions.setdefault(n, db.start_session(tenant, context_window=8192, started_at=at))
        db.record_message(tenant, s, {"role": "user", "content": f"{CHATTER} {statement} {CHATTER}"}, created_at=at)
    for s in sessions.values():
        db._call("SELECT mnemo_internal.enqueue_job(%(t)s, 'extract', 'session:' || %(s)s,"
                 " jsonb_build_object('session_id', %(s)s))", {"t": tenant, "s": str(s)})
    drain_jobs(db, tenant, 13)
    hour, two = memory_of(db, tenant, "about an hour"), memory_of(db, tenant, "about two hours")
    assert hour[1] == two[0] and hour[2] == "contradicted by a newer statement"
    # other things counted are other facts: both stay current
    assert memory_of(db, tenant, "2 cats")[1] is None and memory_of(db, tenant, "3 dogs")[1] is None
    # (the second merges into the first, a near duplicate, rather than replace it)
    assert memory_of(db, tenant, "$200")[1] is None
    s = db.start_session(tenant, context_window=8192, started_at=MOVED + timedelta(days=5))
    bundle = db.compile_context_bundle(tenant, s, "How much time do I spend on coding exercises?",
                                       budget=120, log=False)
    block = block_of(bundle)
    assert block is not None and bundle["report"]["tokens"]["memory"] == tokens.count_message(block)
    line = next((x for x in block["content"].splitlines() if x.startswith(f"[mem:{two[0]} ")), "")
    assert "two hours" in line and line.endswith(
        "(earlier, until 2025-03-31: The user has been dedicating about an hour each day to coding exercises)"), \
        block["content"]


def test_an_earlier_value_extracted_late_is_stored_superseded(db, tenant):
    # sessions are not extracted in date order: the later statement first
    later = db.start_session(tenant, context_window=8192, started_at=MOVED)
    earlier = db.start_session(tenant, context_window=8192, started_at=T0)
    for s, at, n in ((later, MOVED, "five"), (earlier, T0, "three")):
        db.record_message(tenant, s, {"role": "user", "content": f"{CHATTER} I lead a team of {n} engineers at work. {CHATTER}"},
                          created_at=at)
        db._call("SELECT mnemo_internal.enqueue_job(%(t)s, 'extract', 'session:' || %(s)s,"
                 " jsonb_build_object('session_id', %(s)s))", {"t": tenant, "s": str(s)})
        drain_jobs(db, tenant, 13)
    three, five = memory_of(db, tenant, "three engineers"), memory_of(db, tenant, "five engineers")
    assert three[0] > five[0], "the earlier statement formed second"
    assert three[1] == five[0] and three[2] == "contradicted by a newer statement" and five[1] is None
    s = db.start_session(tenant, context_window=8192, started_at=MOVED + timedelta(days=5))
    bundle = db.compile_context_bundle(tenant, s, "How many engineers do I lead?", budget=120, log=False)
    block = block_of(bundle)
    assert block is not None and bundle["report"]["tokens"]["memory"] == tokens.count_message(block)
    line = next((x for x in block["content"].splitlines() if x.startswith(f"[mem:{five[0]} ")), "")
    assert "five engineers" in line and line.endswith("(earlier, until 2025-03-31: The user leads a team of three engineers at work)"), block["content"]
