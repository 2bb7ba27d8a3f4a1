"""Mnemosyne on Citus (make test-citus): the schema spread by the deploy, each API call
on the one worker that holds its tenant, tenant isolation through the coordinator.
Skipped on a server without the citus extension (the single-node suite)."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import DSN, drain_jobs

from mnemosyne import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import citus_rebalance  # bench/citus_rebalance.py: the writers, the move, the figures


def _citus(conn) -> bool:
    return bool(conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0])


with psycopg.connect(DSN, autocommit=True) as _c:
    pytestmark = pytest.mark.skipif(not _citus(_c), reason="the database has no citus extension")


@pytest.fixture()
def admin():
    with psycopg.connect(DSN, autocommit=True) as conn:
        yield conn


def _worker_of(admin, tenant: str) -> int:
    """The port of the worker that holds the tenant's shard of every co-located table."""
    return admin.execute(
        "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid)"
        " WHERE p.shardid = get_shard_id_for_distribution_column('mnemo.sessions', %s::text)", [tenant]).fetchone()[0]


def test_tenant_tables_distributed_and_colocated(admin):
    rows = admin.execute("""
        SELECT c.oid::regclass::text, d.partmethod, d.colocationid,
               column_to_column_name(d.logicalrelid, d.partkey),
               EXISTS (SELECT FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
                       AND a.attnotnull AND NOT a.attisdropped)
        FROM pg_class AS c
        LEFT JOIN pg_dist_partition AS d ON d.logicalrelid = c.oid
        WHERE c.relnamespace IN ('mnemo'::regnamespace, 'mnemo_internal'::regnamespace)
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition""").fetchall()
    anchor = admin.execute("SELECT colocationid FROM pg_dist_partition"
                           " WHERE logicalrelid = 'mnemo.sessions'::regclass").fetchone()[0]
    registries = {"mnemo.tenants", "mnemo_internal.role_tenants", "mnemo_internal.api_keys"}
    local = [name for name, method, *_ in rows if method is None]
    assert not local, f"tables left on the coordinator only: {local}"
    distributed = [r for r in rows if r[1] == "h"]
    assert len(distributed) >= 30
    for name, method, colocation, key, tenant_col in rows:
        if tenant_col and name not in registries:
            assert (method, key, colocation) == ("h", "tenant_id", anchor), name
        else:
            assert method == "n", f"{name} should be a reference table"
    # the partitioned planes stay partitioned, one level (Citus's limit)
    parts = admin.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'mnemo.memories'::regclass").fetchone()[0]
    assert parts >= 1
    assert admin.execute("SELECT partstrat FROM pg_partitioned_table"
                         " WHERE partrelid = 'mnemo.messages'::regclass").fetchone()[0] == "r"


def test_api_functions_distributed_on_their_tenant(admin):
    """The API routines run distributed in mnemo_citus, each behind a wrapper of the same
    name and signature in mnemo (mnemo_internal.citus_delegate)."""
    rows = dict(admin.execute("""
        SELECT p.proname, o.distribution_argument_index
        FROM pg_dist_object AS o JOIN pg_proc AS p ON p.oid = o.objid
        WHERE o.classid = 'pg_proc'::regclass AND p.pronamespace = 'mnemo_citus'::regnamespace
          AND o.colocationid = (SELECT colocationid FROM pg_dist_partition
                                WHERE logicalrelid = 'mnemo.sessions'::regclass)""").fetchall())
    for name in ("compile_context", "record_message", "record_messages", "start_session", "remember",
                 "memory_query", "build_acb"):
        assert rows.get(name) == 0, name
        wrapper = admin.execute("SELECT p.prosqlbody IS NOT NULL AND NOT p.prosecdef FROM pg_proc AS p"
                                " WHERE p.pronamespace = 'mnemo'::regnamespace AND p.proname = %s", [name]).fetchall()
        assert wrapper == [(True,)], name
    # nothing distributed is left in mnemo itself (a caller could name it with a NULL tenant)
    assert admin.execute("""
        SELECT count(*) FROM pg_dist_object AS o JOIN pg_proc AS p ON p.oid = o.objid
        WHERE o.classid = 'pg_proc'::regclass AND p.pronamespace = 'mnemo'::regnamespace
          AND o.distribution_argument_index IS NOT NULL""").fetchone()[0] == 0


def _start_times(admin) -> dict[int, object]:
    times = {}
    for (port,) in admin.execute("SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary'").fetchall():
        with psycopg.connect(DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(port))) as n:
            times[port] = n.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
    return times


def test_a_null_tenant_crashes_no_node(admin):
    """Citus 13.2 segfaults a node that delegates a distributed function whose distribution
    argument is a NULL constant (FindShardInterval on a NULL datum). Every API function
    with a tenant, called by an API role with a NULL tenant through the coordinator (a
    literal and a bound parameter, in the select list and in FROM), must end in a
    project error as on one server, and no node may restart. Nor may the role reach a
    distributed routine by name or send SQL to the workers through Citus."""
    role = "r_" + uuid.uuid4().hex[:12]
    before = _start_times(admin)
    functions = admin.execute("""
        SELECT p.proname, p.proretset, array_agg(format_type(t.type, NULL) ORDER BY t.n)
        FROM pg_proc AS p, unnest(p.proargtypes) WITH ORDINALITY AS t (type, n)
        WHERE p.pronamespace = 'mnemo'::regnamespace AND (p.proargnames)[1] = 'p_tenant_id'
          AND has_function_privilege('mnemo_app', p.oid, 'EXECUTE')
        GROUP BY p.oid, p.proname, p.proretset ORDER BY 1""").fetchall()
    assert len(functions) >= 20
    admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE mnemo_app")
    outcomes = {}
    try:
        with psycopg.connect(DSN.replace("postgres@", f"{role}@"), autocommit=True) as conn:
            for name, retset, types in functions:
                rest = "".join(f", NULL::{t}" for t in types[1:])
                for form in (f"SELECT mnemo.{name}(NULL::text{rest})", f"SELECT mnemo.{name}(%s::text{rest})",
                             f"SELECT * FROM mnemo.{name}(%s::text{rest})"):
                    try:
                        conn.execute(form, [None] if "%s" in form else None)
                        outcomes[form] = "ok"
                    except psycopg.OperationalError as e:  # the connection is gone
                        outcomes[form] = f"crash {e}"
                        raise
                    except psycopg.Error as e:
                        outcomes[form] = e.sqlstate
            assert {f: s for f, s in outcomes.items() if not (s or "").startswith("MN")} == {}
            # the distributed routines cannot be named on the coordinator
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT mnemo_citus.compile_context(NULL, NULL)")
            # nor reached on the workers through Citus's run_command_on_*
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT run_command_on_workers('SELECT mnemo_citus.compile_context(NULL, NULL)')")
    finally:
        admin.execute(f"DROP ROLE {role}")
    assert _start_times(admin) == before, "a node restarted"


def test_a_call_runs_on_the_one_worker_holding_its_tenant(admin):
    workers = {r[0] for r in admin.execute(
        "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'").fetchall()}
    assert len(workers) >= 2
    seen = set()
    for _ in range(8):  # tenants on both workers
        tenant = "t_" + uuid.uuid4().hex[:12]
        admin.execute("SELECT mnemo.create_tenant(%s)", [tenant])
        sid = admin.execute("SELECT mnemo.start_session(%s)", [tenant]).fetchone()[0]
        home = _worker_of(admin, tenant)
        seen.add(home)
        for call, args in (("record_message", "%s::text, %s::uuid, '{\"role\": \"user\", \"content\": \"hi\"}'"),
                           ("compile_context", "%s::text, %s::uuid")):
            plan = "\n".join(r[0] for r in admin.execute(
                f"EXPLAIN (COSTS OFF) SELECT mnemo.{call}({args})", [tenant, sid]).fetchall())
            assert "Task Count: 1" in plan, plan
            assert f"port={home} " in plan, plan
        # the message is on that worker's shard, and only there
        shard = admin.execute("SELECT shard_name('mnemo.sessions', get_shard_id_for_distribution_column("
                              "'mnemo.sessions', %s::text))", [tenant]).fetchone()[0]
        for port in workers:
            with psycopg.connect(DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(port))) as w:
                on = w.execute(f"SELECT count(*) FROM {shard} WHERE tenant_id = %s", [tenant]).fetchone()[0] \
                    if w.execute("SELECT to_regclass(%s::text)", [shard]).fetchone()[0] else 0
            assert on == (1 if port == home else 0), (port, home)
    assert seen == workers, "8 tenants all landed on one worker"


def _on_workers(admin, sql: str) -> None:
    for (port,) in admin.execute("SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'"):
        with psycopg.connect(DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(port)), autocommit=True) as w:
            w.execute(sql)
            w.execute("SELECT pg_reload_conf()")


def test_compile_and_the_write_path_run_on_the_workers(admin):
    """compile_context, record_message(s), tool results, remember and the job runner,
    through the coordinator, again and again (past the compiles after which one server
    goes generic): with the workers told to prefer generic
    plans (which PostgreSQL may pick for a saved plan after 5 runs, and which Citus
    cannot plan with the tenant a parameter), the database's plan_cache_mode set by
    the deploy keeps every plan custom."""
    _on_workers(admin, "ALTER SYSTEM SET plan_cache_mode = force_generic_plan")
    try:
        with connect(DSN) as m:
            tenant = "t_" + uuid.uuid4().hex[:12]
            m.create_tenant(tenant)
            sid = m.start_session(tenant, context_window=8192, system_prompt="You are terse.")
            for i in range(8):
                m.record_message(tenant, sid, {"role": "user", "content": f"I moved to Lisbon in year {2000 + i}"})
                m.record_message(tenant, sid, {"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
                m.record_messages(tenant, sid, [{"role": "tool", "tool_call_id": f"c{i}", "content": "a.txt"},
                                                {"role": "assistant", "content": f"Noted {i}."}])
                m.remember(tenant, f"The deploy target {i} is Fly.io", kind="fact")
                messages = m.compile_context(tenant, sid, "where do I live?", budget=2000)
                assert messages[0]["role"] == "system" and messages[-1] == {"role": "assistant", "content": f"Noted {i}."}
            # past compiler.GENERIC_PLANS_AFTER compiles in the worker's backend, where a
            # single node switches to generic plans
            for i in range(14):
                m.compile_context(tenant, sid, f"what happened in {2000 + i}?", budget=1000)
            drain_jobs(m, tenant, worker=45)
            assert m._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status <> 'done'",
                           {"t": tenant}) == 0
            bundle = m.compile_context_bundle(tenant, sid, "which year did I move to Lisbon?", budget=2000)
            assert "Lisbon" in json.dumps(bundle["messages"])
    finally:
        _on_workers(admin, "ALTER SYSTEM RESET plan_cache_mode")


def test_a_compile_on_its_worker_reads_the_tenant_shards_there(admin):
    """A compile delegated to its tenant's worker reads the tenant's shards directly
    (compiler.PlpyDatabase): Citus executes only its writes and what the routines it
    calls read (citus.log_local_commands on the worker: no read of the memories, the
    segments or the context log), and it compiles what the same call run on the
    coordinator, through Citus, compiles."""
    tenant = "t_" + uuid.uuid4().hex[:12]
    with connect(DSN) as m:
        m.create_tenant(tenant)
        sid = m.start_session(tenant, context_window=8192)
        for i in range(6):
            m.record_message(tenant, sid, {"role": "user", "content": f"I moved to Lisbon in year {2000 + i}"})
            m.record_message(tenant, sid, {"role": "assistant", "content": f"Noted {i}."})
            m.remember(tenant, f"The deploy target {i} is Fly.io", kind="fact")
        drain_jobs(m, tenant, worker=45)
    # (SELECT f(...) alone: what Citus delegates)
    call = ("SELECT mnemo.compile_context(%s, %s, 'where do I live and deploy?', '{\"budget\": 2000}')",
            [tenant, sid])
    home = DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(_worker_of(admin, tenant)))
    with psycopg.connect(DSN, autocommit=True) as conn:
        with conn.transaction():  # in a transaction block: run on the coordinator
            conn.execute(*call)
        with psycopg.connect(home, autocommit=True) as w:
            w.execute("ALTER SYSTEM SET citus.log_local_commands = on")
            w.execute("SELECT pg_reload_conf()")
        local: list[str] = []
        conn.add_notice_handler(lambda d: local.append(d.message_primary or ""))
        try:
            # the worker's backend of this connection reloads its settings after the
            # command it is sent next: the first call may run without them
            conn.execute(*call)
            local.clear()
            delegated = conn.execute(*call).fetchone()[0]
        finally:
            with psycopg.connect(home, autocommit=True) as w:
                w.execute("ALTER SYSTEM RESET citus.log_local_commands")
                w.execute("SELECT pg_reload_conf()")
        with conn.transaction():
            through_citus = conn.execute(*call).fetchone()[0]
    commands = [n for n in local if n.startswith("executing the command locally")]
    # what the routines it calls read goes through Citus (logged: the setting took)
    assert any("mnemo.tenants_" in n for n in commands), commands
    for shard in ("mnemo.memories_", "mnemo.message_segments_", "mnemo.system_prompts_", "mnemo.lexicon_"):
        assert not any(shard in n for n in commands), (shard, commands)
    assert delegated == through_citus
    assert "Lisbon" in json.dumps(delegated) and "Fly.io" in json.dumps(delegated)


def test_isolation_holds_through_the_coordinator(admin):
    a, b = ("t_" + uuid.uuid4().hex[:12] for _ in range(2))
    role = "r_" + uuid.uuid4().hex[:12]
    for t in (a, b):
        admin.execute("SELECT mnemo.create_tenant(%s)", [t])
    sb = admin.execute("SELECT mnemo.start_session(%s)", [b]).fetchone()[0]
    admin.execute("SELECT mnemo.record_message(%s, %s, '{\"role\": \"user\", \"content\": \"b secret\"}')",
                  [b, sb])
    admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE mnemo_app")
    admin.execute("SELECT mnemo.bind_role(%s, %s)", [role, a])
    try:
        with psycopg.connect(DSN.replace("postgres@", f"{role}@"), autocommit=True) as conn:
            # a bound role: delegated calls on the worker check the binding there
            with pytest.raises(psycopg.Error) as e:
                conn.execute("SELECT mnemo.start_session(%s)", [b])
            assert e.value.sqlstate == "MN008"
            with pytest.raises(psycopg.Error) as e:
                conn.execute("SELECT mnemo.record_message(%s, %s, '{\"role\": \"user\", \"content\": \"x\"}')",
                             [b, sb])
            assert e.value.sqlstate == "MN008"
            # its own reads through the coordinator see its tenant's rows only
            assert conn.execute("SELECT count(*) FROM mnemo.messages").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM mnemo.sessions WHERE tenant_id = %s", [b]).fetchone()[0] == 0
            assert conn.execute("SELECT mnemo.start_session(%s)", [a]).fetchone()[0]
    finally:
        admin.execute("DELETE FROM mnemo_internal.role_tenants WHERE role_name = %s", [role])
        admin.execute(f"DROP ROLE {role}")


def test_api_key_of_a_transaction_holds_through_the_coordinator(admin):
    a, b = ("t_" + uuid.uuid4().hex[:12] for _ in range(2))
    with connect(DSN) as m:
        for t in (a, b):
            m.create_tenant(t)
        key = m.create_api_key(a, "test")
        secret = key["secret"] if isinstance(key, dict) else key
    with psycopg.connect(DSN) as conn:  # a transaction, as a network service runs a request
        conn.execute("SELECT set_config('mnemo.api_key', %s, true)", [secret])
        assert conn.execute("SELECT mnemo.start_session(%s)", [a]).fetchone()[0]
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT mnemo.start_session(%s)", [b])
        assert e.value.sqlstate == "MN008"


def test_api_key_of_the_session_holds_through_the_coordinator(admin):
    """A key set for the whole session (SET, not SET LOCAL) and calls outside a
    transaction block, which Citus delegates to the tenant's worker with the call's text
    alone: the worker never saw the key and acted for any tenant. Every call for another
    tenant must be refused (MN008), with the tenant a literal or a bound parameter, in
    the select list or in FROM; the key's own tenant works."""
    a, b = ("t_" + uuid.uuid4().hex[:12] for _ in range(2))
    with connect(DSN) as m:
        for t in (a, b):
            m.create_tenant(t)
        sb = m.start_session(b)
        key = m.create_api_key(a, "test")
        secret = key["secret"] if isinstance(key, dict) else key
    calls = {"start_session": "{t}", "record_message": "{t}, '{s}', '{{\"role\": \"user\", \"content\": \"x\"}}'",
             "remember": "{t}, 'the key leaks'", "compile_context": "{t}, '{s}'", "memory_stats": "{t}"}
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("SELECT set_config('mnemo.api_key', %s, false)", [secret])  # = SET mnemo.api_key
        refused = {}
        for name, args in calls.items():
            for form in (f"SELECT mnemo.{name}({args})", f"SELECT * FROM mnemo.{name}({args})"):
                for tenant, params in ((f"'{b}'", None), ("%s::text", [b])):
                    sql = form.format(t=tenant, s=sb)
                    try:
                        conn.execute(sql, params)
                        refused[sql] = None
                    except psycopg.Error as e:
                        refused[sql] = e.sqlstate
        assert {sql: s for sql, s in refused.items() if s != "MN008"} == {}
        # the key's own tenant: its calls (now run on the coordinator) see its rows
        sa = conn.execute("SELECT mnemo.start_session(%s)", [a]).fetchone()[0]
        conn.execute("SELECT mnemo.record_message(%s, %s, '{\"role\": \"user\", \"content\": \"I live in Lisbon\"}')",
                     [a, sa])
        messages = conn.execute("SELECT mnemo.compile_context(%s, %s, 'where do I live?')", [a, sa]).fetchone()[0]
        assert "Lisbon" in json.dumps(messages)
        assert [r[0] for r in conn.execute("SELECT * FROM mnemo.list_sessions(%s)", [a])] == [sa]
    assert admin.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s", [b]).fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM mnemo.sessions WHERE tenant_id = %s", [b]).fetchone()[0] == 1


class _ThreeWays:
    """Writes one session of a tenant through the three ways a call reaches it: outside
    a transaction block (Citus delegates it to the tenant's worker), in a transaction
    block and with an API key set for the session (both run on the coordinator, each
    statement routed to the worker)."""

    def __init__(self, tenant: str):
        self.tenant = tenant
        with connect(DSN) as m:
            m.create_tenant(tenant)
            self.sid = m.start_session(tenant)
            key = m.create_api_key(tenant, "ids")
            self.secret = key["secret"] if isinstance(key, dict) else key
        self.turn = 0

    def _record(self, conn, messages: list[dict]) -> list[int]:
        return conn.execute("SELECT mnemo.record_messages(%s, %s, %s::jsonb[])",
                            [self.tenant, self.sid, [json.dumps(x) for x in messages]]).fetchone()[0]

    def write(self, way: str, messages: list[dict]) -> list[int]:
        if way == "delegated":
            with psycopg.connect(DSN, autocommit=True) as conn:
                return self._record(conn, messages)
        if way == "block":
            with psycopg.connect(DSN) as conn:  # BEGIN ... COMMIT
                ids = self._record(conn, messages[:1])
                return ids + (self._record(conn, messages[1:]) if messages[1:] else [])
        with psycopg.connect(DSN, autocommit=True) as conn:  # a session's key: not delegated
            conn.execute("SELECT set_config('mnemo.api_key', %s, false)", [self.secret])
            return self._record(conn, messages)

    def round(self, ways: tuple[str, str, str]) -> list[int]:
        """A user turn, an assistant's tool call and its result, each another way."""
        i, self.turn = self.turn, self.turn + 1
        call = f"call_{i}"
        return (self.write(ways[0], [{"role": "user", "content": f"Step {i}: list the files of project {i}"}])
                + self.write(ways[1], [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": call, "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}])
                + self.write(ways[2], [{"role": "tool", "tool_call_id": call, "content": f"report_{i}.txt"},
                                       {"role": "assistant", "content": f"Project {i} holds report_{i}.txt."}]))


WAYS = ("delegated", "block", "keyed")


def test_one_tenants_message_ids_follow_write_order_whichever_node_ran_the_call(admin):
    """A call delegated to the tenant's worker drew its message ids from the worker's
    sequence (its range, group id << 48), one the coordinator ran (in a transaction
    block, or with an API key) from the coordinator's: one session's ids came out of
    write order (562949953430344, then 13546), a tool result recorded in a transaction
    after its call recorded outside one found no earlier call (MN006), and the messages
    below the segments' watermark were never sealed, indexed or read as the live tail.
    Now every way draws on the tenant's worker: ids increase in turn order, every tool
    result pairs, and the segments and the recall index hold every recallable message."""
    w = _ThreeWays("t_" + uuid.uuid4().hex[:12])
    ids = []
    for k in range(18):  # 72 messages: past the 64 a segment waits for
        ids += w.round(tuple(WAYS[(k + j) % 3] for j in range(3)))
    rows = admin.execute("SELECT message_id, turn_index FROM mnemo.messages WHERE tenant_id = %s"
                         " ORDER BY turn_index", [w.tenant]).fetchall()
    assert [r[0] for r in rows] == ids and [r[1] for r in rows] == list(range(len(ids)))
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    home = _worker_of(admin, w.tenant)
    assert admin.execute("SELECT count(*) FILTER (WHERE result_message_id IS NOT NULL), count(*)"
                         " FROM mnemo.tool_calls WHERE tenant_id = %s", [w.tenant]).fetchone() == (18, 18)
    with connect(DSN) as m:
        drain_jobs(m, w.tenant, worker=46)
    # the sweep (on the coordinator) waits for a writer on the tenant's worker that
    # holds the tenant's sealing lock there, as a delegated record_message does from
    # before it draws its ids until it commits: it seals nothing while that is open
    with psycopg.connect(DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(home))) as writer:
        writer.execute("SELECT pg_advisory_xact_lock_shared(hashtext('mnemo.message_segments'), hashtext(%s))",
                       [w.tenant])
        assert admin.execute("SELECT mnemo_internal.build_message_segments(%s, 64)", [w.tenant]).fetchone()[0] == 0
    admin.execute("CALL mnemo.run_sweep('segments', p_tenant_id => %s)", [w.tenant])
    recallable = admin.execute(
        "SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s AND content IS NOT NULL"
        " AND NOT is_pruned AND role IN ('user', 'assistant', 'tool') AND sensitivity <> 'secret'"
        " AND message_id <= (SELECT max(last_message_id) FROM mnemo.message_segments WHERE tenant_id = %s)",
        [w.tenant, w.tenant]).fetchone()[0]
    sealed = admin.execute("SELECT coalesce(sum(n_messages), 0) FROM mnemo.message_segments WHERE tenant_id = %s",
                           [w.tenant]).fetchone()[0]
    assert sealed >= 64 and sealed == recallable, (sealed, recallable)
    admin.execute("SELECT mnemo_internal.sync_recall_index(%s, 1)", [w.tenant])
    indexed = admin.execute("SELECT count(*) FROM mnemo_internal.recall_index WHERE tenant_id = %s"
                            " AND NOT is_memory", [w.tenant]).fetchone()[0]
    assert indexed == sealed
    # a call in a transaction block holds the lock on the worker until its commit (the
    # ids are drawn there, through a routed query): the sweep waits for it too
    w.write("delegated", [{"role": "user", "content": "one more, to seal"}])
    with connect(DSN) as m:
        drain_jobs(m, w.tenant, worker=46)
    with psycopg.connect(DSN) as writer:
        w._record(writer, [{"role": "user", "content": "and one not committed yet"}])
        assert admin.execute("SELECT mnemo_internal.build_message_segments(%s, 1)", [w.tenant]).fetchone()[0] == 0
    with connect(DSN) as m:
        drain_jobs(m, w.tenant, worker=46)
    assert admin.execute("SELECT mnemo_internal.build_message_segments(%s, 1)", [w.tenant]).fetchone()[0] == 2


def test_message_ids_keep_increasing_after_the_tenant_moves(admin):
    """A tenant's shard group moved to a node whose sequence stands lower (each worker
    draws in its own range) must still get ids above its old ones there, whichever
    way its calls come; and again after moving back."""
    if citus_rebalance.local_cluster(DSN) is None:
        pytest.skip("moves shard groups: the local cluster of scripts/citus.sh only")
    workers = sorted(r[0] for r in admin.execute(
        "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'").fetchall())
    for _ in range(40):  # a tenant on the worker of the highest range
        w = _ThreeWays("t_" + uuid.uuid4().hex[:12])
        if _worker_of(admin, w.tenant) == workers[-1]:
            break
    ids = w.round(WAYS)
    shard = admin.execute("SELECT get_shard_id_for_distribution_column('mnemo.sessions', %s::text)",
                          [w.tenant]).fetchone()[0]

    def move(source: int, target: int) -> None:
        admin.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
                      " shard_transfer_mode => 'block_writes')", [shard, source, target])
        admin.execute("CALL citus_cleanup_orphaned_resources()")
        assert _worker_of(admin, w.tenant) == target

    move(workers[-1], workers[0])
    try:
        for ways in (WAYS, WAYS[::-1]):
            ids += w.round(ways)
    finally:
        move(workers[0], workers[-1])
    for ways in (WAYS[1:] + WAYS[:1], WAYS):
        ids += w.round(ways)
    rows = admin.execute("SELECT message_id FROM mnemo.messages WHERE tenant_id = %s ORDER BY turn_index",
                         [w.tenant]).fetchall()
    assert [r[0] for r in rows] == ids
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    assert admin.execute("SELECT count(*) FROM mnemo.tool_calls WHERE tenant_id = %s"
                         " AND result_message_id IS NULL", [w.tenant]).fetchone()[0] == 0


def test_a_quiet_tenant_checked_first_after_a_move_leaves_no_busier_one_behind(admin):
    """The tenants of one shard move together, each with its own highest id: a worker
    backend whose first draw after the move was for a quiet tenant (the node's sequence
    moved past that tenant's ids only) must still check a busier tenant of the same
    shard before drawing for it (the check was once made per placement, and the busy
    tenant's next ids came out below its old ones, under its watermarks)."""
    if citus_rebalance.local_cluster(DSN) is None:
        pytest.skip("moves shard groups: the local cluster of scripts/citus.sh only")
    workers = sorted(r[0] for r in admin.execute(
        "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'").fetchall())

    def shard_of(tenant: str) -> int:
        return admin.execute("SELECT get_shard_id_for_distribution_column('mnemo.sessions', %s::text)",
                             [tenant]).fetchone()[0]
    names = ("t_" + uuid.uuid4().hex[:12] for _ in range(400))
    quiet_name = next(t for t in names if admin.execute(
        "SELECT n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid)"
        " WHERE p.shardid = %s", [shard_of(t)]).fetchone()[0] == workers[-1])
    shard = shard_of(quiet_name)
    busy_name = next(t for t in names if shard_of(t) == shard)
    quiet, busy = _ThreeWays(quiet_name), _ThreeWays(busy_name)
    quiet.round(("delegated",) * 3)
    ids = busy.round(("delegated",) * 3) + busy.round(("delegated",) * 3)  # drawn after the quiet one's

    def move(source: int, target: int) -> None:
        admin.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s,"
                      " shard_transfer_mode => 'block_writes')", [shard, source, target])
        admin.execute("CALL citus_cleanup_orphaned_resources()")

    move(workers[-1], workers[0])
    try:
        # one coordinator session: its delegated calls reach the worker over one cached
        # connection, one backend there, whose first draw is the quiet tenant's
        with psycopg.connect(DSN, autocommit=True) as conn:
            quiet._record(conn, [{"role": "user", "content": "still here"}])
            ids += busy._record(conn, [{"role": "user", "content": "and busy"}])
    finally:
        move(workers[0], workers[-1])
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids


def test_a_worker_added_and_rebalanced_under_writes_loses_nothing(admin):
    """Growing the cluster (issue 45): a third worker added (scripts/citus.sh
    add-worker) and the shard groups rebalanced onto it (citus_rebalance_start,
    block_writes: bench/citus_rebalance.py says why) while writers record messages
    through the API (retrying a failed call, as a client would) and the job runner
    runs: every acknowledged write is there exactly once, none is given up, a shard
    group moved to the new worker, its tenants' calls and rows are there, and every
    job of the writers' tenants completes after the move.
    The worker is drained and removed at the end (scripts/citus.sh remove-worker), so
    the suite after it sees the node set it had, its groups spread evenly."""
    if citus_rebalance.local_cluster(DSN) is None:
        pytest.skip("adds and removes a worker: the local cluster of scripts/citus.sh only")
    before = citus_rebalance.workers(admin)
    with citus_rebalance.added_worker(DSN) as new:
        assert citus_rebalance.workers(admin) == sorted([*before, new])
        r = citus_rebalance.rebalance_under_writes(DSN, new, before=2, after=2, log=lambda s: None)
        assert r["job_state"] == "finished", r
        assert r["acknowledged"] >= 50, r
        assert (r["lost"], r["duplicated"], r["gave_up"]) == (0, 0, 0), r
        # a call delegated to the old worker just as its group moves away fails and
        # rolls back (0A000, docs/operations.md "On Citus"); retried, it is there once
        assert r["failed"] <= r["writers"], r
        assert r["runner_errors"] == [], r
        # writes went on while the job ran (the copy itself pauses them all)
        assert r["writes_per_s_during"] > 0 and r["writes_per_s_after"] > 0, r
        assert r["on_new_worker"] and r["moved_to"] == [new], r
        groups = admin.execute(
            "SELECT count(*) FROM pg_dist_placement AS p JOIN pg_dist_shard AS s USING (shardid)"
            " JOIN pg_dist_node AS n USING (groupid)"
            " WHERE s.logicalrelid = 'mnemo.sessions'::regclass AND n.nodeport = %s", [new]).fetchone()[0]
        assert groups >= 1
        # the jobs enqueued before, during and after the move all ran
        assert set(r["jobs"]) <= {"embed:done", "extract:done"}, r["jobs"]
        assert r["jobs"]["embed:done"] == r["acknowledged"], r
        assert r["messages_embedded"][0] == r["messages_embedded"][1] == r["acknowledged"], r
        # a moved tenant: its calls run on the new worker, its rows are in its shard there
        tenant = r["on_new_worker"][0]
        sid = admin.execute("SELECT session_id FROM mnemo.sessions WHERE tenant_id = %s", [tenant]).fetchone()[0]
        plan = "\n".join(row[0] for row in admin.execute(
            "EXPLAIN (COSTS OFF) SELECT mnemo.compile_context(%s::text, %s::uuid)", [tenant, sid]))
        assert "Task Count: 1" in plan and f"port={new} " in plan, plan
        shard = admin.execute("SELECT shard_name('mnemo.messages', get_shard_id_for_distribution_column("
                              "'mnemo.messages', %s::text))", [tenant]).fetchone()[0]
        n = admin.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s", [tenant]).fetchone()[0]
        with psycopg.connect(DSN.replace(DSN.rsplit(":", 1)[1].split("/")[0], str(new))) as w:
            assert w.execute(f"SELECT count(*) FROM {shard} WHERE tenant_id = %s", [tenant]).fetchone()[0] == n > 0
        # and it compiles there, from its shards there (compiler.PlpyDatabase)
        with connect(DSN) as m:
            messages = m.compile_context(tenant, sid, "what did I say?", budget=2000)
        assert messages[0]["role"] == "system" and any(x["role"] == "user" for x in messages), messages
    # the node set restored, the groups even again
    assert citus_rebalance.workers(admin) == before
    per_worker = [r[0] for r in admin.execute(
        "SELECT count(*) FROM pg_dist_placement AS p JOIN pg_dist_shard AS s USING (shardid)"
        " JOIN pg_dist_node AS n USING (groupid) WHERE s.logicalrelid = 'mnemo.sessions'::regclass"
        " GROUP BY n.nodeport")]
    assert max(per_worker) - min(per_worker) <= 1, per_worker
