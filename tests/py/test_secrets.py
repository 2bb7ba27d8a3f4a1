"""Secret redaction on the write path: planted credentials in many formats and
places never reach a table (messages, artifacts, memories and their versions,
admission log, jobs, context log ...), the search, or a compiled context."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from mnemo_db import redact

SECRETS = {
    "openai_key": "sk-proj-Zt9xQ2mV7rL4pK8wB3nF6hJ1sD5gA0cE",
    "anthropic_key": "sk-ant-api03-h7Gk2LmP9qR4sT6vW8xY1zA3bC5dE",
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLQ",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEQ",
    "github_token": "ghp_1A2b3C4d5E6f7G8h9I0jK1lM2nO3pQ4rS5tU",
    "slack_token": "xoxb-2048-4096-Qw3rTy8UiOp2AsDf",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbjEyMyJ9.c2lnbmF0dXJlLXZhbHVl",
    "bearer": "b3ar3rT0kenV4lue99ZZqq",
    "url_password": "Pg-S3cret!pass",
    "conn_password": "hunter2-Swordfish",
    "pem": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    "json_password": "Tr0ub4dor&3-horse",
}

TEXT = (
    f"Here are the creds: OPENAI_API_KEY={SECRETS['openai_key']} and {SECRETS['anthropic_key']}. "
    f"AWS: aws_access_key_id = {SECRETS['aws_access_key_id']}, "
    f"aws_secret_access_key = {SECRETS['aws_secret_access_key']}. GitHub {SECRETS['github_token']}, "
    f"slack {SECRETS['slack_token']}, session token {SECRETS['jwt']}. "
    f"curl -H 'Authorization: Bearer {SECRETS['bearer']}' https://api.example.com. "
    f"DB: postgresql://admin:{SECRETS['url_password']}@db.internal:5432/prod and "
    f"Server=db;User Id=sa;Password={SECRETS['conn_password']};\n"
    f"-----BEGIN RSA PRIVATE KEY-----\n{SECRETS['pem']}\nAbCdEf0123456789\n-----END RSA PRIVATE KEY-----\n"
    "I live in Paris and I decided to keep these in the vault because it is audited."
)


def test_redact_unit_formats():
    out, kinds = redact.redact(TEXT)
    for name, secret in SECRETS.items():
        if name != "json_password":
            assert secret not in out, name
    assert {"openai_key", "anthropic_key", "aws_access_key_id", "aws_secret_access_key", "github_token",
            "slack_token", "jwt", "bearer_token", "url_password", "password", "private_key"} <= set(kinds)
    assert "I live in Paris" in out and "https://api.example.com" in out
    args, kinds = redact.redact(json.dumps({"password": SECRETS["json_password"], "user": "bob"}))
    assert SECRETS["json_password"] not in args and json.loads(args)["user"] == "bob", "JSON stays valid"
    clean = "Run `make test` then read the token counts in the report; tokens: 512."
    assert redact.redact(clean) == (clean, [])


def _all_text(db, tenant: str) -> str:
    """Every row of every mnemo table for the tenant, as text (artifact bytes decoded)."""
    parts = []
    with db.conn.cursor() as cur:
        cur.execute("SELECT c.relname FROM pg_class AS c JOIN pg_attribute AS a ON a.attrelid = c.oid"
                    " WHERE c.relnamespace = 'mnemo'::regnamespace AND c.relkind IN ('r', 'p')"
                    " AND NOT c.relispartition AND a.attname = 'tenant_id'")
        for (table,) in cur.fetchall():
            cur.execute(f"SELECT t::text FROM mnemo.{table} AS t WHERE t.tenant_id = %s", (tenant,))
            parts.extend(r[0] for r in cur.fetchall())
        cur.execute("SELECT convert_from(bytes, 'UTF8') FROM mnemo.artifacts WHERE tenant_id = %s", (tenant,))
        parts.extend(r[0] for r in cur.fetchall())
    return "\n".join(parts)


def test_planted_secrets_are_not_retrievable_anywhere(db, tenant):
    db._call("UPDATE mnemo_internal.settings SET value = '2000' WHERE key = 'artifact_threshold_bytes'", {})
    try:
        # the system prompt and session metadata are stored too
        s = db.start_session(tenant, context_window=8192,
                             system_prompt=f"You are ops. Call the API with {SECRETS['openai_key']}.",
                             metadata={"deploy": f"token={SECRETS['github_token']}"})
        now = datetime.now(UTC)
        m1 = db.record_message(tenant, s, {"role": "user", "content": TEXT}, created_at=now,
                               metadata={"note": f"token={SECRETS['github_token']}"})
        call = {"id": "c1", "type": "function", "function": {
            "name": "http_login", "arguments": json.dumps({"user": "bob", "password": SECRETS["json_password"]})}}
        db.record_message(tenant, s, {"role": "assistant", "content": None, "tool_calls": [call]}, created_at=now)
        big = ("log line\n" * 300) + TEXT  # goes to an artifact
        db.record_message(tenant, s, {"role": "tool", "tool_call_id": "c1", "content": big}, created_at=now)
        db.record_message(tenant, s, {"role": "user", "content": [{"type": "text", "text": TEXT}]}, created_at=now)
        db.record_event(tenant, s, "decision", {"decision": f"Rotate {SECRETS['openai_key']} monthly",
                                                "rationale": [f"leaked {SECRETS['github_token']}"]})
        db.remember(tenant, f"The staging password is {SECRETS['conn_password']}", kind="fact")
        for _ in range(300):
            db.run_jobs(worker=13)
            if not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'",
                            {"t": tenant}):
                break
            time.sleep(0.1)
        assert db._call("SELECT count(*) FROM mnemo.memories WHERE tenant_id = %(t)s", {"t": tenant}) >= 3
        contexts = [db.compile_context(tenant, s, q, budget=3000) for q in (
            "what are the AWS credentials?", "what is the database password?", "private key", None,
            # a query is logged (context_log.query, the report's provenance)
            f"is {SECRETS['aws_access_key_id']} still the live key?")]
        for name in ("sk-proj", "AKIA", "ghp_", "hunter2"):
            contexts.append(db._call(
                "SELECT coalesce(jsonb_agg(content_full), '[]') FROM mnemo.memories WHERE tenant_id = %(t)s"
                " AND (content_full ILIKE %(q)s OR search_tsv @@ plainto_tsquery('english', %(w)s))",
                {"t": tenant, "q": f"%{name}%", "w": name}))
        everything = _all_text(db, tenant) + json.dumps(contexts)
        leaked = [n for n, secret in SECRETS.items() if secret in everything]
        assert leaked == [], f"secrets found: {leaked}"
        assert "[REDACTED:" in everything
        flags = db._call("SELECT metadata -> 'redactions' FROM mnemo.messages WHERE tenant_id = %(t)s"
                         " AND message_id = %(m)s", {"t": tenant, "m": m1})
        assert "openai_key" in flags and "private_key" in flags
        assert db._call("SELECT count(*) FROM mnemo.memories WHERE tenant_id = %(t)s"
                        " AND metadata ? 'redactions'", {"t": tenant}) >= 2
    finally:
        db._call("UPDATE mnemo_internal.settings SET value = '65536' WHERE key = 'artifact_threshold_bytes'", {})
        db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'", {"t": tenant})


@pytest.mark.parametrize("enabled", [False])
def test_redaction_can_be_turned_off_per_tenant(db, enabled):
    import uuid

    t = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(t, config={"redaction": {"enabled": enabled}})
    s = db.start_session(t)
    m = db.record_message(t, s, {"role": "user", "content": f"key {SECRETS['openai_key']}"})
    assert SECRETS["openai_key"] in db._call(
        "SELECT content FROM mnemo.messages WHERE tenant_id = %(t)s AND message_id = %(m)s", {"t": t, "m": m})
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": t})
