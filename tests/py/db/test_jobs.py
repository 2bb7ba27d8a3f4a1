"""The job runner: claims, retries with backoff, idempotency, concurrent runners,
isolation of a bad job, its deadline, postmaster death, lock order and fairness."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from conftest import DSN, drain_jobs, is_local_cluster
from helpers import waits_for_a_lock

ROOT = Path(__file__).resolve().parents[3]

# The runs below use a worker of their own: pg_cron's runner (worker 0) may still be in
# its minute-long run beside them (right after `make up`, say), and a second run of the
# same worker returns at once, leaving the queue as it was (test_context runs as 11,
# test_formation 12, test_secrets 13).
WORKER = 14


@pytest.fixture(scope="module", autouse=True)
def _test_job_kinds():
    """Two job kinds of these tests' own, which the runner dispatches like any kind
    (mnemo_internal.run_job runs kind K as mnemo_internal.job_K): 'noop' succeeds,
    'fail' raises its payload's message. Dropped afterwards: production has neither."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("""
            CREATE FUNCTION mnemo_internal.job_noop(p_tenant_id text, p_payload jsonb) RETURNS jsonb
            LANGUAGE sql AS 'SELECT NULL::jsonb';
            CREATE FUNCTION mnemo_internal.job_fail(p_tenant_id text, p_payload jsonb) RETURNS jsonb
            LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION USING ERRCODE = 'MN001', MESSAGE = p_payload ->> 'message';
            END $$;
            REVOKE ALL ON FUNCTION mnemo_internal.job_noop, mnemo_internal.job_fail FROM PUBLIC""")
    try:
        yield
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute("DROP FUNCTION mnemo_internal.job_noop, mnemo_internal.job_fail")


@pytest.fixture(autouse=True)
def _drop_leftover_jobs(db, tenant):
    """Jobs a test left queued (a failed one, say) are dropped: tests here make their
    jobs the oldest due, and a leftover would go ahead of the next test's."""
    yield
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})


def _jobs(db, tenant):
    with db.conn.cursor() as cur:
        cur.execute("SELECT job_id, kind, status, tries, last_error, run_after > now() AS later"
                    " FROM mnemo.jobs WHERE tenant_id = %s ORDER BY job_id", (tenant,))
        return cur.fetchall()


def _enqueue(db, tenant, kind, key, payload="{}"):
    return db._call("SELECT mnemo_internal.enqueue_job(%(t)s, %(k)s, %(d)s, %(p)s::jsonb)",
                    {"t": tenant, "k": kind, "d": key, "p": payload})


@contextlib.contextmanager
def another_runner(worker: int = 15):
    """A job runner working beside the test, as pg_cron's may (a run in flight is not
    stopped by pausing cron.job): it takes jobs, one small batch at a time."""
    stop, errors = threading.Event(), []

    def loop():
        try:
            with psycopg.connect(DSN, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute("CALL mnemo.run_jobs(p_batch_size => 1, p_max_batches => 1, p_worker => %s)",
                                 (worker,))
                    time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert not errors, errors


def test_record_message_enqueues_embed_and_runner_embeds(db, tenant, session):
    with another_runner():  # the test holds whatever other runner works beside it
        ids = [db.record_message(tenant, session, {"role": "user", "content": f"fact number {i}"})
               for i in range(5)]
        # one embed job per message, and one extract job for the session (memory formation)
        assert sorted(j[1] for j in _jobs(db, tenant)) == ["embed"] * 5 + ["extract"]
        drain_jobs(db, tenant, WORKER, batch_size=2, max_batches=100_000)
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
    _enqueue(db, tenant, "fail", "bad", '{"message": "bad"}')
    for i in range(3):
        _enqueue(db, tenant, "noop", f"ok{i}")
    db.run_jobs(worker=WORKER)
    assert sorted(j[2] for j in _jobs(db, tenant)) == ["done", "done", "done", "queued"]


def test_a_job_of_an_unknown_kind_fails_where_an_operator_sees_it(db, tenant):
    _enqueue(db, tenant, "record_access", "legacy")  # a kind of earlier versions, now gone
    db.run_jobs(worker=WORKER)
    (job,) = _jobs(db, tenant)
    assert job[3] == 1 and job[4] == "unknown job kind 'record_access'"


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
    victim.execute("SELECT mnemo_internal.process_job()")  # claims, not committed
    pid = victim.info.backend_pid
    # while claimed, another runner skips it
    assert db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'done'",
                    {"t": tenant}) == 0
    db._call("SELECT pg_terminate_backend(%(p)s::integer)", {"p": pid})
    victim.close()
    (job,) = _jobs(db, tenant)
    assert job[2] == "queued" and job[3] == 0
    db.run_jobs(worker=WORKER)
    assert _jobs(db, tenant)[0][2] == "done"


# ------------------------------------------------------------ a bad row fails only its job
def _age(db, tenant, kind, age="100 years"):
    """Makes a tenant's queued jobs of a kind the oldest due (claimed first)."""
    db._call("UPDATE mnemo.jobs SET run_after = now() - %(a)s::interval"
             " WHERE tenant_id = %(t)s AND kind = %(k)s AND status = 'queued'", {"t": tenant, "k": kind, "a": age})


def test_a_bad_row_of_one_tenant_fails_no_other_tenants_job(db, tenant, session):
    """Issue 20 (2): a batch is embedded in one call; one bad row failed it whole, and
    another tenant's job with it (for good after job_max_tries)."""
    victim = "t_victim_" + tenant[2:]
    db.create_tenant(victim)
    vs = db.start_session(victim, context_window=8192)
    mid = db.record_message(victim, vs, {"role": "user", "content": "I keep my notes in the blue binder"})
    own = db.record_message(tenant, session, {"role": "user", "content": "The attacker's own good message"})
    # A stored row that cannot be embedded (planted as the owner: the API refuses it).
    db._call("INSERT INTO mnemo.jobs (tenant_id, kind, dedup_key, payload) VALUES (%(t)s, 'embed', 'poison',"
             " jsonb_build_object('target', 'message', 'message_id', %(o)s, 'created_at', 'poison'))",
             {"t": tenant, "o": own})
    _age(db, tenant, "embed")
    _age(db, victim, "embed")  # all in the same batch, ahead of anything else queued
    db._call("CALL mnemo.run_jobs(64, 1, %(w)s)", {"w": WORKER})
    embeds = {j[0]: j for j in _jobs(db, tenant) + _jobs(db, victim) if j[1] == "embed"}
    poison = embeds.pop(db._call("SELECT job_id FROM mnemo.jobs WHERE dedup_key = 'poison' AND tenant_id = %(t)s",
                                 {"t": tenant}))
    assert poison[2:4] == ("queued", 1) and "poison" in poison[4]  # charged a try, retried later
    assert [j[2:5] for j in embeds.values()] == [("done", 1, None)] * 2  # the others are not charged
    assert db._call("SELECT count(*) FROM mnemo.messages WHERE embedding IS NOT NULL AND (tenant_id, message_id)"
                    " IN ((%(v)s, %(m)s), (%(t)s, %(o)s))", {"t": tenant, "v": victim, "m": mid, "o": own}) == 2
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(v)s AND status = 'queued'", {"v": victim})


# --------------------------------------------------------------------------- the deadline
def test_the_deadline_bounds_a_run_that_cannot_drain(db, tenant):
    """Issue 20 (6): a run left only when its queue was empty, so pg_cron's minute-long
    run went on for 12 min while work remained."""
    n = 20_000
    db._call("SELECT count(mnemo_internal.enqueue_job(%(t)s, 'noop', 'k' || i, '{}', now() - interval '100 years'))"
             " FROM generate_series(1, %(n)s) i", {"t": tenant, "n": n})
    t0 = time.monotonic()
    db._call("CALL mnemo.run_jobs(p_max_batches => 1000000, p_worker => %(w)s, p_max_seconds => 1)",
             {"w": WORKER})
    elapsed = time.monotonic() - t0
    left = db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})
    print(f"run_jobs with a 1 s deadline returned after {elapsed:.1f} s, {left} of {n} jobs left queued")
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
    assert 0 < left < n  # it worked, and stopped at its deadline with work left
    assert elapsed < 60


# ---------------------------------------------------------------------- postmaster death
def _restart_local_cluster() -> bool:
    """One try to start the local cluster; True once it accepts connections. (Its
    start may take the killed postmaster, not yet reaped, for a running server.)"""
    subprocess.run([str(ROOT / "scripts" / "cluster.sh"), "start"], check=False, env=dict(os.environ),
                   capture_output=True, timeout=120)
    try:
        psycopg.connect(DSN, connect_timeout=10).close()
    except psycopg.OperationalError:
        return False
    return True


def _running(pid: int) -> bool:
    """Whether a process still runs: an orphaned backend that exited stays a zombie
    (state Z) until an init that reaps is around, which a container may not have."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())


@pytest.mark.skipif(not is_local_cluster(),
                    reason="kills the server: only on the local cluster this checkout owns, not DATABASE_URL")
def test_a_runner_orphaned_by_a_postmaster_kill_never_blocks_the_restart(db, tenant, session):
    """Issue 20 (6): after a postmaster SIGKILL, the busy job runner went on for 50-90 s,
    still committing, and `pg_ctl start` failed meanwhile ("pre-existing shared memory
    block is still in use"). A busy loop never waits, where PostgreSQL notices it."""
    words = " ".join(f"word{i}" for i in range(300))  # 256 word pieces: the model's longest input
    mid = db.record_message(tenant, session, {"role": "user", "content": words})
    created = db._call("SELECT created_at FROM mnemo.messages WHERE tenant_id=%(t)s AND message_id=%(m)s",
                       {"t": tenant, "m": mid})
    payload = json.dumps({"target": "message", "message_id": mid, "created_at": created.isoformat()})
    db._call("SELECT count(mnemo_internal.enqueue_job(%(t)s, 'embed', 'load' || i, %(p)s::jsonb,"
             " now() - interval '1 day')) FROM generate_series(1, 6000) i", {"t": tenant, "p": payload})
    db.conn.execute("CHECKPOINT")  # keeps crash recovery short
    runner = psycopg.connect(DSN, autocommit=True)
    runner_pid = runner.info.backend_pid

    def run():
        with contextlib.suppress(psycopg.Error):  # its server is killed under it
            runner.execute("CALL mnemo.run_jobs(p_max_batches => 1000000, p_worker => %s)", (WORKER,))

    thread = threading.Thread(target=run)
    thread.start()
    for _ in range(600):  # until the runner is in the middle of its work
        if db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'done'", {"t": tenant}):
            break
        time.sleep(0.1)
    data = Path(os.environ["MNEMO_HOME"], "pgdata")
    os.kill(int((data / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
    t0 = time.monotonic()
    while not (started := _restart_local_cluster()) and time.monotonic() - t0 < 120:
        time.sleep(0.5)
    restart = time.monotonic() - t0
    print(f"the cluster {'restarted' if started else 'could not restart'} {restart:.1f} s after the SIGKILL")
    assert started, "the orphaned runner blocked the restart"  # it keeps running: kill it by hand
    thread.join(timeout=120)
    runner.close()
    db.conn = psycopg.connect(DSN, autocommit=True)  # the old connection died with the server
    left = db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
    for _ in range(60):  # it may still be on its way out on a loaded machine
        if not _running(runner_pid):
            break
        time.sleep(0.5)
    assert not _running(runner_pid)
    assert left > 0  # the runner was killed in the middle of its work, not after it
    assert restart < 60, f"the orphaned runner blocked the restart for {restart:.0f} s"


# ------------------------------------------------------------------ lock order, fairness
def test_extraction_beside_the_runner_never_deadlocks(db, tenant):
    """Issue 20 (7): a direct extract waited for a row of the runner's transaction while
    the runner, in the same batch, waited for the extract's per-session lock."""
    said = ["I moved to Lisbon in spring.", "My sister Maria lives in Porto.", "I work at Acme Robotics."]
    s1, s2 = (db.start_session(tenant, context_window=8192) for _ in range(2))
    for s in (s1, s2):  # the same facts in both sessions: the same entities and memories
        for text in said:
            db.record_message(tenant, s, {"role": "user", "content": text, "name": "Ana"})
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND (kind = 'embed' OR payload ->> 'session_id' = %(s)s)",
             {"t": tenant, "s": str(s2)})
    _age(db, tenant, "extract")  # the runner takes s1's extract job first
    direct = psycopg.connect(DSN)
    errors: list[Exception] = []
    runner = psycopg.connect(DSN, autocommit=True)

    def run():
        try:
            runner.execute("CALL mnemo.run_jobs(p_max_batches => 1, p_worker => %s)", (WORKER,))
        except psycopg.Error as e:
            errors.append(e)

    try:
        direct.execute("SELECT mnemo_internal.extract(%s, %s)", (tenant, json.dumps({"session_id": str(s2)})))
        thread = threading.Thread(target=run)
        thread.start()
        # until the runner waits for the direct extraction's transaction
        waited = waits_for_a_lock(runner.info.backend_pid, thread.is_alive)
        direct.execute("SELECT mnemo_internal.extract(%s, %s)", (tenant, json.dumps({"session_id": str(s1)})))
        direct.commit()
        thread.join()
    finally:
        direct.close()
        runner.close()
    assert waited and not errors
    jobs = _jobs(db, tenant)
    assert [(j[1], j[2], j[4]) for j in jobs] == [("extract", "done", None)]


def test_an_extraction_backlog_does_not_hold_embeddings_back(db, tenant):
    """Issue 20 (7): a batch took the oldest due jobs whatever their kind, so a tenant's
    extraction backlog ran first, in one long transaction, and its embed jobs waited."""
    for i in range(3):
        s = db.start_session(tenant, context_window=8192)
        db.record_message(tenant, s, {"role": "user", "content": f"I moved to city number {i}."})
    _age(db, tenant, "extract", "200 years")  # an older extraction backlog ...
    _age(db, tenant, "embed", "100 years")  # ... ahead of the embed jobs
    db._call("CALL mnemo.run_jobs(p_batch_size => 2, p_max_batches => 1, p_worker => %(w)s)", {"w": WORKER})
    done = [j[1] for j in _jobs(db, tenant) if j[2] == "done"]
    assert done.count("embed") == 2 and done.count("extract") <= 1


def test_an_extract_job_works_in_bounded_runs(db, tenant, session):
    """Issue 20 (7): one extract job of a long session held a transaction for minutes.
    A run reads at most extract_job_messages; the job stays queued and goes on."""
    for i in range(12):
        db.record_message(tenant, session, {"role": "user", "content": f"I moved to city number {i}."})
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND kind = 'embed'", {"t": tenant})
    _age(db, tenant, "extract")
    old = db._call("SELECT value::text FROM mnemo_internal.settings WHERE key = 'extract_job_messages'", {})
    db._call("UPDATE mnemo_internal.settings SET value = '5' WHERE key = 'extract_job_messages'", {})
    try:
        db._call("CALL mnemo.run_jobs(p_max_batches => 1, p_worker => %(w)s)", {"w": WORKER})
        (job,) = _jobs(db, tenant)
        upto = db._call("SELECT upto_turn FROM mnemo.extraction_state WHERE tenant_id = %(t)s", {"t": tenant})
        assert job[2:4] == ("queued", 0) and upto == 4  # five messages done, the job goes on
        drain_jobs(db, tenant, WORKER)
    finally:
        db._call("UPDATE mnemo_internal.settings SET value = %(v)s::jsonb WHERE key = 'extract_job_messages'",
                 {"v": old})
    (job,) = _jobs(db, tenant)
    upto = db._call("SELECT upto_turn FROM mnemo.extraction_state WHERE tenant_id = %(t)s", {"t": tenant})
    assert job[2:4] == ("done", 1) and upto == 11
