"""Project SQLSTATEs reach Python as exception classes, and nothing is half-written."""

from __future__ import annotations

import uuid

import pytest

from mnemosyne import errors


def test_client_knows_every_server_error_code(db):
    with db.conn.cursor() as cur:
        cur.execute("SELECT sqlstate FROM mnemo_internal.error_codes ORDER BY 1")
        server = [r[0] for r in cur.fetchall()]
    assert server == sorted(errors.BY_SQLSTATE)


@pytest.mark.parametrize("message, exc", [
    ({"role": "wizard", "content": "x"}, errors.UnknownRole),
    ({"role": "user"}, errors.InvalidMessage),
    ({"role": "user", "content": 5}, errors.InvalidMessage),
    ({"role": "user", "content": "x", "colour": "red"}, errors.InvalidMessage),
    ({"role": "tool", "tool_call_id": "nope", "content": "x"}, errors.UnknownToolCall),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}, errors.InvalidMessage),
])
def test_bad_messages_raise_and_write_nothing(db, tenant, session, message, exc):
    with pytest.raises(exc) as info:
        db.record_message(tenant, session, message)
    assert info.value.sqlstate.startswith("MN") and str(info.value)
    assert db._call("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %(t)s", {"t": tenant}) == 0
    assert db._call("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %(t)s", {"t": tenant}) == 0
    assert db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant}) == 0


def test_unknown_tenant_and_session(db, tenant):
    with pytest.raises(errors.UnknownTenant):
        db.start_session("no_such_tenant_" + uuid.uuid4().hex[:6])
    with pytest.raises(errors.UnknownSession):
        db.record_message(tenant, uuid.uuid4(), {"role": "user", "content": "hi"})


def test_oversize_content(db, tenant, session):
    limit = int(db._call("SELECT value::text FROM mnemo_internal.settings WHERE key = 'max_message_bytes'", {}))
    with pytest.raises(errors.ContentTooLarge) as info:
        db.record_message(tenant, session, {"role": "user", "content": "x" * (limit + 1)})
    assert "limit" in info.value.message and info.value.hint


def test_tool_call_pairing(db, tenant, session):
    db.record_message(tenant, session, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
    db.record_message(tenant, session, {"role": "tool", "tool_call_id": "c1", "content": "a b"})
    with pytest.raises(errors.Duplicate):
        db.record_message(tenant, session, {"role": "tool", "tool_call_id": "c1", "content": "again"})
    with pytest.raises(errors.Duplicate):
        db.record_message(tenant, session, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
    assert db._call("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %(t)s", {"t": tenant}) == 2
