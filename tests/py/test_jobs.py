"""The job runner: claims, retries with backoff, idempotency, concurrent runners."""

from __future__ import annotations

import itertools
import threading

import psycopg
from conftest import DSN

# The runs below use a worker of their own: pg_cron's runner (worker 0) may still be in
# its minute-long run beside them (right after `make up`, say), and a second run of the
# same worker returns at once, leaving the queue as it was (test_context runs as 11,
# test_formation 12, test_secrets 13).
WORKER = 14


def _jobs(db, tenant):
    with db.conn.cursor() as cur:
        cur.execute("SELECT job_id, kind, status, tries, last_error, run_after > now() AS later"
                    " FROM mnemo.jobs WHERE tenant_id = %s ORDER BY job_id", (tenant,))
        return cur.fetchall()


def _enqueue(db, tenant, kind, key, payload="{}"):
    return db._call("SELECT mnemo_internal.enqueue_job(%(t)s, %(k)s, %(d)s, %(p)s::jsonb)",
                    {"t": tenant, "k": kind, "d": key, "p": payload})


def test_record_message_enqueues_embed_and_runner_embeds(db, tenant, session):
    ids = [db.record_message(tenant, session, {"role": "user", "content": f"fact number {i}"})
           for i in range(5)]
    jobs = _jobs(db, tenant)
    # one embed job per message, and one extract job for the session (memory formation)
    assert sorted(j[1] for j in jobs) == ["embed"] * 5 + ["extract"] and {j[2] for j in jobs} == {"queued"}
    db.run_jobs(batch_size=2, max_batches=100_000, worker=WORKER)  # drains the whole queue, 2 at a time
    assert {(j[2], j[3]) for j in _jobs(db, tenant)} == {("done", 1)}
    with db.conn.cursor() as cur:
        cur.execute("SELECT message_id, embedding <=> mnemo.embed(content) FROM mnemo.messages"
                    " WHERE tenant_id = %s ORDER BY message_id", (tenant,))
        rows = cur.fetchall()
    assert [r[0] for r in rows] == ids
    assert all(r[1] < 1e-5 for r in rows)  # the stored vector is the text's embedding


def test_enqueue_is_idempotent_while_queued(db, tenant):
    a = _enqueue(db, tenant, "noop", "same-key")
    b = _enqueue(db, tenant, "noop", "same-key")
    assert a == b and len(_jobs(db, tenant)) == 1
    db.run_jobs(worker=WORKER)
    # once done, the same key may be queued again (new work), and runs cleanly
    c = _enqueue(db, tenant, "noop", "same-key")
    assert c != a
    db.run_jobs(worker=WORKER)
    assert [j[2] for j in _jobs(db, tenant)] == ["done", "done"]


def test_embed_job_twice_is_harmless(db, tenant, session):
    mid = db.record_message(tenant, session, {"role": "user", "content": "I live in Paris"})
    db.run_jobs(worker=WORKER)
    first = db._call("SELECT embedding::text FROM mnemo.messages WHERE tenant_id=%(t)s AND message_id=%(m)s",
                     {"t": tenant, "m": mid})
    created = db._call("SELECT created_at FROM mnemo.messages WHERE tenant_id=%(t)s AND message_id=%(m)s",
                       {"t": tenant, "m": mid})
    _enqueue(db, tenant, "embed", f"message:{mid}",
             f'{{"target": "message", "message_id": {mid}, "created_at": "{created.isoformat()}"}}')
    db.run_jobs(worker=WORKER)
    again = db._call("SELECT embedding::text FROM mnemo.messages WHERE tenant_id=%(t)s AND message_id=%(m)s",
                     {"t": tenant, "m": mid})
    assert first == again
    assert all(j[2] == "done" for j in _jobs(db, tenant))


def test_failures_retry_with_backoff_then_fail(db, tenant):
    max_tries = int(db._call("SELECT value::text FROM mnemo_internal.settings WHERE key='job_max_tries'", {}))
    _enqueue(db, tenant, "fail", "boom", '{"message": "disk on fire"}')
    delays = []
    for attempt in range(1, max_tries + 1):
        db.run_jobs(worker=WORKER)
        (job,) = _jobs(db, tenant)
        assert job[3] == attempt and job[4] == "disk on fire"
        if attempt < max_tries:
            assert job[2] == "queued" and job[5]  # retried later, not now
            delays.append(float(db._call(
                "SELECT extract(epoch FROM run_after - updated_at) FROM mnemo.jobs WHERE tenant_id=%(t)s",
                {"t": tenant})))
            # the clock moves on: make the retry due
            db._call("UPDATE mnemo.jobs SET run_after = now() WHERE tenant_id = %(t)s", {"t": tenant})
        else:
            assert job[2] == "failed"
    assert all(b > a * 1.9 for a, b in itertools.pairwise(delays))  # exponential backoff


def test_a_failing_job_does_not_block_the_others(db, tenant):
    _enqueue(db, tenant, "fail", "bad")
    for i in range(3):
        _enqueue(db, tenant, "noop", f"ok{i}")
    db.run_jobs(worker=WORKER)
    assert sorted(j[2] for j in _jobs(db, tenant)) == ["done", "done", "done", "queued"]


def test_two_runners_at_once_share_the_queue_without_overlap(db, tenant):
    n = 300
    db._call("SELECT count(mnemo_internal.enqueue_job(%(t)s, 'noop', 'k' || i)) FROM generate_series(1, %(n)s) i",
             {"t": tenant, "n": n})
    errors = []

    def runner(worker):
        try:
            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute("CALL mnemo.run_jobs(p_batch_size => 7, p_max_batches => 1000, p_worker => %s)",
                             (worker,))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=runner, args=(w,)) for w in (11, 12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    jobs = _jobs(db, tenant)
    assert len(jobs) == n
    assert all(j[2] == "done" and j[3] == 1 for j in jobs)  # each ran exactly once


def test_same_worker_does_not_overlap(db, tenant):
    _enqueue(db, tenant, "noop", "x")
    with psycopg.connect(DSN, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('mnemo.run_jobs'), 21)")
        notices = []
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            conn.execute("CALL mnemo.run_jobs(p_worker => 21)")
        assert any("already running" in n for n in notices)
        assert _jobs(db, tenant)[0][2] == "queued"


def test_a_runner_that_dies_releases_its_claims(db, tenant):
    _enqueue(db, tenant, "noop", "claimed")
    victim = psycopg.connect(DSN)
    victim.execute("SELECT mnemo_internal.process_job_batch(1000)")  # claims, not committed
    pid = victim.info.backend_pid
    # while claimed, another runner skips it
    assert db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'done'",
                    {"t": tenant}) == 0
    db._call("SELECT pg_terminate_backend(%(p)s)", {"p": pid})
    victim.close()
    (job,) = _jobs(db, tenant)
    assert job[2] == "queued" and job[3] == 0
    db.run_jobs(worker=WORKER)
    assert _jobs(db, tenant)[0][2] == "done"
