"""Isolation matrix (issue 20): a login role bound to tenant A calls every routine it
may execute and runs every statement on every table and partition, with B's tenant
and ids and with A's tenant and B's ids. Nothing of B may come back or change, and no
direct write may get through (applications write through the API only). The bench
version (make bench-trust) runs more id sets and every context; see
bench/trust/isolation.py."""

import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import DSN

from mnemosyne import connect
from mnemosyne.errors import MnemoError

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from trust import isolation  # bench/trust/isolation.py


def test_a_role_bound_to_a_tenant_neither_reads_nor_changes_another():
    t0 = time.monotonic()
    f = isolation.matrix(DSN, id_sets=1, contexts=("login", "tenant setting"), partition_contexts=("login",))
    isolation.report(f, time.monotonic() - t0)
    # everything the role may execute, read from the catalog (the API and two helpers;
    # the exact set is the schema contract's, tests/sql/01_schema_contract.sql)
    assert f.routines >= 16
    # on Citus test-citus deploys 2 hash partitions a table, not the default's, and
    # mnemo.messages has its month level only: fewer partitions to probe
    with psycopg.connect(DSN) as conn:
        citus = conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()[0]
    assert f.partitions > (50 if citus else 100) and f.relations > f.partitions
    assert f.leaks == 0, f.details
    assert f.writes == 0, f.details


def test_the_matrix_finds_leaks_and_writes_when_the_grants_are_weakened():
    """The matrix can fail: a role given SELECT on a partition reads B's rows around
    the policy, INSERT on context_log plants a row, and a routine added to the schema
    (found through the catalog, not a list) that reads across tenants leaks."""
    leaky = "mnemo_internal.iso_test_leaky_probe(p_tenant_id text)"
    f = isolation.matrix(
        DSN, contexts=("login",), partition_contexts=("login",), run_jobs=False,
        trees=("mnemo.memories", "mnemo.context_log"),
        weaken=(
            "GRANT SELECT ON ALL TABLES IN SCHEMA mnemo TO {role}",
            "GRANT INSERT ON mnemo.context_log TO {role}",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA mnemo TO {role}",
            "CREATE FUNCTION " + leaky + " RETURNS text LANGUAGE sql SECURITY DEFINER"
            " SET search_path = pg_catalog AS"
            " 'SELECT string_agg(content_full, '' '') FROM mnemo.memories WHERE tenant_id = $1'",
            "GRANT EXECUTE ON FUNCTION " + leaky + " TO {role}"),
        undo=("DROP FUNCTION IF EXISTS mnemo_internal.iso_test_leaky_probe(text)",))
    details = "\n".join(f.details)
    with psycopg.connect(DSN) as conn:
        granted = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace::regnamespace::text IN ('mnemo', 'mnemo_internal')"
            " AND has_function_privilege('mnemo_app', oid, 'EXECUTE')").fetchone()[0]
    assert f.routines == granted + 1  # the app's routines and the planted one
    assert "iso_test_leaky_probe" in details and "mnemo.memories_h" in details, details
    assert f.writes > 0 and "context_log" in details, details


def test_a_bound_login_role_uses_the_whole_api_through_the_client(db):
    """The application works with nothing but its grants: every client method on its
    own tenant, as a login role bound to it (the API runs as mnemo_api_owner under
    row-level security, and the role itself writes nothing)."""
    tenant = "iso_app_" + uuid.uuid4().hex[:8]
    db.create_tenant(tenant)
    with psycopg.connect(DSN, autocommit=True) as owner, isolation.bound_login(owner, DSN, tenant) as (_, conninfo), \
            connect(conninfo) as app:
        sid = app.start_session(tenant, context_window=8000)
        app.record_message(tenant, sid, {"role": "user", "content": "I moved to Lisbon. Use UTC in reports."})
        app.record_message(tenant, sid, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
        app.record_message(tenant, sid, {"role": "tool", "tool_call_id": "c1", "content": "report.csv\n" * 9000})
        artifact = app.record_event(tenant, sid, "artifact", {"text": "plan " * 20000})["artifact_id"]
        assert app.get_artifact(tenant, artifact).startswith(b"plan plan")
        decision = app.record_event(tenant, sid, "decision", {"decision": "Reports use UTC", "rationale": ["one zone"]})
        assert [d["memory_id"] for d in app.query_decisions(tenant, "UTC")] == [decision["memory_id"]]
        note = app.remember(tenant, "Alice prefers tea", kind="preference", session_id=sid)
        newer = app.correct(tenant, note, "Alice prefers green tea", "she said so")
        assert app.compile_context(tenant, sid, "what does Alice drink?")
        bundle = app.compile_context_bundle(tenant, sid, "what does Alice drink?")
        assert any(i["source"] == f"mem:{newer}" for i in bundle["report"]["items"])
        assert app.forget(tenant, newer) == 1
        assert len(app.embed("tea")) == 384 and len(app.embed_batch(["a", "b"])) == 2
        assert app.count_tokens("hello world") > 0
        with pytest.raises(MnemoError):  # its binding holds: another tenant is refused
            app.start_session("iso_other_" + tenant)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # and it runs no admin routine
            app.run_jobs()
