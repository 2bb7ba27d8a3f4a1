"""Large tool outputs: excerpt in the message, full bytes in artifacts, byte-exact."""

from __future__ import annotations

import hashlib

import pytest

from mnemosyne.errors import NotFound


def _tool_call(db, tenant, session, call_id="call_1"):
    db.record_message(tenant, session, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "cat big.log"}'}}]})


@pytest.mark.parametrize("size", [65_537, 300_000, 2_000_000])
def test_large_tool_output_round_trips_byte_exact(db, tenant, session, size):
    line = "2026-11-21 12:00:00 INFO worker-7 processed job ✓ ünïcödé 🚀 id=%d\n"
    text, i = [], 0
    while sum(map(len, text)) < size:
        text.append(line % i)
        i += 1
    output = "".join(text) + "last line without newline"
    _tool_call(db, tenant, session)
    mid = db.record_message(tenant, session, {"role": "tool", "tool_call_id": "call_1", "content": output})
    with db.conn.cursor() as cur:
        cur.execute("SELECT artifact_id, content, token_count FROM mnemo.messages"
                    " WHERE tenant_id = %s AND message_id = %s", (tenant, mid))
        artifact_id, excerpt, tokens = cur.fetchone()
    assert artifact_id is not None
    full = db.get_artifact(tenant, artifact_id)
    assert full == output.encode("utf-8")
    assert hashlib.sha256(full).digest() == db._call(
        "SELECT sha256 FROM mnemo.artifacts WHERE tenant_id=%(t)s AND artifact_id=%(a)s",
        {"t": tenant, "a": artifact_id})
    # the message keeps a bounded excerpt: head, tail and a pointer to the artifact
    assert len(excerpt.encode()) < 8192 + 400
    assert excerpt.startswith(line % 0) and excerpt.endswith("last line without newline")
    assert f"artifact {artifact_id}" in excerpt
    assert tokens < 4000


def test_small_tool_output_stays_inline(db, tenant, session):
    _tool_call(db, tenant, session)
    mid = db.record_message(tenant, session, {"role": "tool", "tool_call_id": "call_1", "content": "ok"})
    assert db._call("SELECT artifact_id FROM mnemo.messages WHERE tenant_id=%(t)s AND message_id=%(m)s",
                    {"t": tenant, "m": mid}) is None


def test_artifacts_are_per_tenant(db, tenant, session):
    _tool_call(db, tenant, session)
    db.record_message(tenant, session, {"role": "tool", "tool_call_id": "call_1", "content": "x" * 70_000})
    art = db._call("SELECT max(artifact_id) FROM mnemo.artifacts WHERE tenant_id = %(t)s", {"t": tenant})
    other = tenant + "_other"
    db.create_tenant(other)
    with pytest.raises(NotFound):
        db.get_artifact(other, art)
