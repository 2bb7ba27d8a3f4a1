"""8 writers x 500 messages into one session: turn indexes unique, gapless, nothing lost."""

from __future__ import annotations

import threading

from conftest import DSN

from mnemosyne import connect

WRITERS, PER_WRITER = 8, 500


def test_concurrent_writers_get_gapless_turns(db, tenant, session):
    errors: list[Exception] = []
    barrier = threading.Barrier(WRITERS)

    def writer(w: int) -> None:
        try:
            with connect(DSN) as c:
                barrier.wait()
                for i in range(PER_WRITER):
                    c.record_message(tenant, session, {"role": "user", "content": f"writer {w} message {i}"})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]

    with db.conn.cursor() as cur:
        cur.execute("SELECT turn_index, content FROM mnemo.messages WHERE tenant_id = %s AND session_id = %s"
                    " ORDER BY turn_index", (tenant, session))
        rows = cur.fetchall()
        cur.execute("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %s AND session_id = %s",
                    (tenant, session))
        (turn_count,) = cur.fetchone()
    total = WRITERS * PER_WRITER
    assert [r[0] for r in rows] == list(range(total))  # unique and gapless
    assert turn_count == total
    assert {r[1] for r in rows} == {f"writer {w} message {i}" for w in range(WRITERS) for i in range(PER_WRITER)}
    # each writer's messages are in the order it wrote them
    for w in range(WRITERS):
        mine = [int(r[1].rsplit(" ", 1)[1]) for r in rows if r[1].startswith(f"writer {w} ")]
        assert mine == list(range(PER_WRITER))
    # one embed job per message; drop them, embedding 4,000 texts is not this test's subject
    assert db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND kind = 'embed'",
                    {"t": tenant}) == total
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
