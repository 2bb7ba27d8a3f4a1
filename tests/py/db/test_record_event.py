"""The record_event surface, stored in the same tables as record_message."""

from __future__ import annotations

import pytest

from mnemosyne import errors


def test_event_kinds(db, tenant, session):
    m = db.record_event(tenant, session, "message", {"text": "what is this project for?"})
    r = db.record_event(tenant, session, "tool_result",
                        {"tool": "fs.read_file", "path": "README.md", "text": "# Demo\n" + "x" * 70_000})
    c = db.record_event(tenant, session, "tool_call", {"tool": "fs.grep", "arguments": {"pattern": "main"}})
    g = db.record_event(tenant, session, "tool_result", {"tool": "fs.grep", "tool_call_id": c["tool_call_id"],
                                                          "text": "src/main.py:1"})
    d = db.record_event(tenant, session, "decision", {"decision": "Use PostgreSQL", "rationale": ["one system"]})
    a = db.record_event(tenant, session, "artifact", {"base64": "aGVsbG8=", "media_type": "text/plain"})
    assert r["artifact_id"] and db.get_artifact(tenant, a["artifact_id"]) == b"hello"
    with db.conn.cursor() as cur:
        cur.execute("SELECT role, tool_call_id, tool_calls IS NOT NULL FROM mnemo.messages"
                    " WHERE tenant_id = %s ORDER BY turn_index", (tenant,))
        rows = cur.fetchall()
        cur.execute("SELECT m.kind, d.decision, d.rationale FROM mnemo.memories m"
                    " JOIN mnemo.memory_decisions d USING (tenant_id, memory_id) WHERE tenant_id = %s", (tenant,))
        decision = cur.fetchone()
    # a tool_result without a call id gets its assistant call recorded first
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant", "tool"]
    assert rows[2][1] == r["tool_call_id"] and rows[4][1] == g["tool_call_id"]
    assert m["message_id"] and d["memory_id"]
    assert decision == ("decision", "Use PostgreSQL", ["one system"])


@pytest.mark.parametrize("kind, content, exc", [
    ("gossip", {"text": "x"}, errors.InvalidParameter),
    ("tool_result", {"text": "no tool name"}, errors.InvalidMessage),
    ("decision", {"rationale": ["no decision"]}, errors.InvalidMessage),
    ("task_update", {"title": "t", "due_at": "not a date"}, errors.InvalidMessage),
    ("artifact", {"base64": "@@not base64@@"}, errors.InvalidMessage),
])
def test_bad_events_write_nothing(db, tenant, session, kind, content, exc):
    with pytest.raises(exc):
        db.record_event(tenant, session, kind, content)
    for table in ("messages", "memories", "artifacts", "jobs"):
        assert db._call(f"SELECT count(*) FROM mnemo.{table} WHERE tenant_id = %(t)s", {"t": tenant}) == 0
