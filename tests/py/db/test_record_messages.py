"""mnemo.record_messages through the client: a batch is all or nothing, and batches
written concurrently into one session keep the turns gapless, each batch in one run
of consecutive turns (the pgTAP file tests/sql/07_record_messages.sql checks what is
stored against record_message)."""

from __future__ import annotations

import threading

import pytest
from conftest import DSN

from mnemosyne import connect
from mnemosyne.errors import InvalidMessage, InvalidParameter


def turns(db, tenant, session) -> list[tuple[int, int, str]]:
    return [(r["message_id"], r["turn_index"], r["content"]) for r in db._rows(
        "SELECT message_id, turn_index, content FROM mnemo.messages WHERE tenant_id = %(t)s"
        " AND session_id = %(s)s ORDER BY turn_index", {"t": tenant, "s": session})]


def test_a_bad_message_anywhere_writes_nothing(db, tenant, session):
    db.record_message(tenant, session, {"role": "user", "content": "before"})
    batch = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
             {"role": "assistant", "content": 3}]
    with pytest.raises(InvalidMessage, match=r"^\[MN004\] message 3 of 3: message.content must be"):
        db.record_messages(tenant, session, batch)
    with pytest.raises(InvalidParameter, match="metadata must be NULL or one JSON object per message"):
        db.record_messages(tenant, session, batch[:2], metadata=[{}])
    assert [c for _, _, c in turns(db, tenant, session)] == ["before"]
    assert db._call("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %(t)s AND session_id = %(s)s",
                    {"t": tenant, "s": session}) == 1


def test_concurrent_batches_keep_turns_gapless_and_each_batch_together(db, tenant, session):
    writers, batches, size = 3, 6, 4

    def write(w: int) -> None:
        with connect(DSN) as m:
            for b in range(batches):
                m.record_messages(tenant, session, [{"role": "user", "content": f"{w}.{b}.{i}"} for i in range(size)])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = turns(db, tenant, session)
    assert [turn for _, turn, _ in rows] == list(range(writers * batches * size))
    for start in range(0, len(rows), size):  # each run of `size` turns is one batch, in its order
        run = [c.rsplit(".", 1) for _, _, c in rows[start:start + size]]
        assert len({head for head, _ in run}) == 1 and [int(i) for _, i in run] == list(range(size))
