"""Secret redaction on the write path: planted credentials in many formats and
places never reach a table (messages, artifacts, memories and their versions,
admission log, jobs, context log ...), the search, a compiled context or the server
log. The planting and the catalog scan are bench/trust/secrets.py's (make
bench-trust runs them at scale)."""

from __future__ import annotations

import base64
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from mnemo_db import redact

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from trust import secrets as planting  # bench/trust/secrets.py

from mnemosyne import default_dsn

DSN = default_dsn()

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


# ------------------------------------------------------------------ issue 20, defect 5
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx7Hq9Zt2mV7rL4pK8wB3nF6hJ1sD5gA0cE\n"
       "-----END RSA PRIVATE KEY-----\n")
GHP = "ghp_1A2b3C4d5E6f7G8h9I0jK1lM2nO3pQ4rS5tU"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEQ"


@pytest.mark.parametrize(("text", "secret"), [
    ("I use the password hunter2-prod for the prod database", "hunter2-prod"),
    (f"the AWS secret {AWS_SECRET} is in the vault", AWS_SECRET),
    (f"my secret is {AWS_SECRET}.", AWS_SECRET),
    (f"bob_{GHP}", GHP),
    (f"call_{GHP}", GHP),
    ("PGPASSWD=Tr0ub4dor-3 psql", "Tr0ub4dor-3"),
    (base64.b64encode(PEM.encode()).decode(), "MIIEowIBAAKCAQEAx7Hq9Zt2mV7rL4pK8wB3nF6hJ1sD5gA0cE"),
    (base64.encodebytes(PEM.encode()).decode(), "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVkt"),
    ('{\\"user\\": \\"bob\\", \\"password\\": \\"hunter7-egrps\\"}', "hunter7-egrps"),
    ("cloudant_key = abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
])
def test_issue_20_kinds_are_redacted(text, secret):
    out, kinds = redact.redact(text)
    assert secret not in out and kinds, out


def test_json_keys_and_credential_named_fields_are_redacted():
    value, kinds = redact.redact_value({
        f"key {GHP}": 1, "password": "swordfish", "nested": [{"apiKey": "plainvalue"}],
        "arguments": json.dumps({"token": "abc", "user": "bob"}), "prompt_tokens": "12"})
    text = json.dumps(value)
    assert GHP not in text and "swordfish" not in text and "plainvalue" not in text and '\\"abc\\"' not in text
    assert value["prompt_tokens"] == "12" and json.loads(value["arguments"])["user"] == "bob"
    assert {"github_token", "secret_field"} <= set(kinds)


def test_a_secret_found_once_is_redacted_where_it_repeats():
    value, _ = redact.redact_value({"c": "The vault password is Sw0rd42-xyz",
                                    "fact": {"object": "Sw0rd42-xyz"}, "entities": ["Sw0rd42-xyz"]})
    assert "Sw0rd42" not in json.dumps(value)
    out, _ = redact.redact("password hunter2-prod; later I typed hunter2-prod again")
    assert "hunter2" not in out


def test_artifact_bytes_are_redacted_text_or_binary():
    for data in ("café " + PEM).encode(), b"\x00\xff\x10binary " + PEM.encode() + b"\xfe":
        out, kinds = redact.redact_bytes(data)
        assert b"MIIEowIBAAKCAQEA" not in out and kinds == ["private_key"]
        assert out[:6] == data[:6]  # every other byte kept


@pytest.mark.parametrize("text", [
    "commit 9130a71b2c3d4e5f60718293a4b5c6d7e8f90123 fixed it",
    "session 4e76de01-9452-4bff-a306-f6fd2b4b9419 and sha 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
    "see ThisIsAVeryLongCamelCaseIdentifier123ForTesting and testRecordMessageEnqueuesEmbedAndRunnerEmbeds2",
    "com/example/service/UserAccountServiceImpl2Factory loads src/mnemosyne/client2.py",
    "the password reset flow failed with error 500 on login; the token budget is 128000 tokens",
    "secret key rotation runs at 03:00 UTC; use secret scanning in CI: gitleaks v8.18.2",
    # code an agent reads: a keyword assigned a call or a name is not a credential
    # (anyio's _eventloop.py: `token = set_current_async_library(backend)`)
    "        token = set_current_async_library(backend)\n        api_key = settings.OPENAI_API_KEY",
    "access_token = response.json()['access_token']; secret = base64.b64encode(raw)",
    # a type annotation (anyio's from_thread.py)
    "    token: EventLoopToken | None = None\n    def __init__(self, token: EventLoopToken):",
    "What is the deployment password for the prod database? And for the staging server?!",
    "data:image/png;base64," + base64.b64encode(bytes(range(256)) * 12).decode(),
    base64.encodebytes(bytes(range(256)) * 3).decode(),
])
def test_ordinary_text_is_kept(text):
    assert redact.redact(text) == (text, [])


def test_detect_secrets_rule_set_is_covered():
    """Every format rule of detect-secrets (its RegexBasedDetector plugins) is ported:
    a sample each plugin flags is redacted here. A plugin added by a newer
    detect-secrets fails this test until it has a sample (and a rule) here."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    k40 = "Ab3dEf6hIj9lMn2pQr5tUv8xYz1BcDe4GhJk7MnP"
    samples = {
        "ArtifactoryDetector": ["artifactory: AKCp5bueTFpfypBqQbGJPz3pGCi28pPivfWczqjfYb9drAmd9LbRZbj6UpKFxJXA8ksWGc9fM"],
        "AWSKeyDetector": ["AKIAIOSFODNN7EXAMPLQ", f'aws_secret_key = "{k40}"'],
        "AzureStorageKeyDetector": ["AccountKey=" + (k40 * 3)[:86] + "=="],
        "BasicAuthDetector": ["https://admin:S3cretPassw0rd@example.com"],
        "CloudantDetector": ["cloudant_password = '" + "0123456789abcdef" * 4 + "'",
                             "cloudant_key: abcdefghijklmnopqrstuvwx"],
        "DiscordBotTokenDetector": ["MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs"],
        "GitHubTokenDetector": [GHP],
        "GitLabTokenDetector": ["glpat-" + k40[:20], "glptt-" + k40],
        "IbmCloudIamDetector": ["ibm_cloud_iam_key = 'Ab3dEf6hIj9lMn2pQr5tUv8xYz1BcDe4GhJk7MnP_q-R'"],
        "IbmCosHmacDetector": ["secret_access_key = '" + "0123456789abcdef" * 3 + "'"],
        "JwtTokenDetector": ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbjEyMyJ9.c2lnbmF0dXJlLXZhbHVl"],
        "MailchimpDetector": ["0123456789abcdef0123456789abcdef-us12"],
        "NpmDetector": ["//registry.npmjs.org/:_authToken=npm_" + k40[:36]],
        "OpenAIDetector": ["sk-" + k40[:20] + "T3BlbkFJ" + k40[20:40]],
        "PrivateKeyDetector": [PEM],
        "PypiTokenDetector": ["pypi-AgEIcHlwaS5vcmc" + (k40 * 2)[:72]],
        "SendGridDetector": ["SG." + k40[:22] + "." + (k40 * 2)[:43]],
        "SlackDetector": ["xoxb-2048-4096-qw3rty8uiop2asdf",
                          "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/" + k40[:24]],
        "SoftlayerDetector": ["softlayer_api_key = '" + "0123456789abcdef" * 4 + "'"],
        "SquareOAuthDetector": ["sq0csp-" + (k40 * 2)[:43]],
        "StripeDetector": ["sk_live_" + k40[:24]],
        "TelegramBotTokenDetector": ["110201543:" + k40[:35]],
        "TwilioKeyDetector": ["AC" + "0123456789abcdef" * 2, "SK" + "0123456789abcdef" * 2],
    }
    not_secrets = {"IPPublicDetector"}  # an IP address is not a credential
    plugins = {cls.__name__: cls() for cls in get_mapping_from_secret_type_to_class().values()
               if issubclass(cls, RegexBasedDetector) and cls.__name__ not in not_secrets}
    assert set(plugins) == set(samples), "detect-secrets has plugins without a sample here"
    for name, texts in samples.items():
        for text in texts:
            flagged = {v for line in text.splitlines() for v in plugins[name].analyze_string(line)}
            assert flagged, f"{name} does not flag its sample {text!r}"
            out, _ = redact.redact(text)
            leaked = [v for v in flagged if v in out]
            assert not leaked, f"{name}: {leaked} kept in {out!r}"


def test_record_event_artifact_base64_stores_no_decoded_key(db, tenant, session):
    art = db.record_event(tenant, session, "artifact", {"base64": base64.b64encode(PEM.encode()).decode()})
    stored = db.get_artifact(tenant, art["artifact_id"])
    assert b"MIIEowIBAAKCAQEA" not in stored and b"[REDACTED:private_key]" in stored


def test_fields_never_redacted_before(db, tenant):
    """Tags, agent id, entities and JSON keys (issue 20): they reach their tables
    redacted."""
    s = db.start_session(tenant, agent_id=f"bob_{GHP}")
    db.record_message(tenant, s, {"role": "user", "content": "hi", "name": f"bob_{GHP}"},
                      tags=[f"t_{GHP}"], metadata={f"k {GHP}": 1})
    db.remember(tenant, "A note about the deploy", options={"entities": [f"ent_{GHP}"]})
    text = planting.scan(db.conn, [tenant], {GHP: "github_token"}, {})
    assert not text, text


def test_server_log_keeps_no_literals_of_a_failing_call(db, tenant):
    log = planting.server_log(db.conn)
    if log is None:
        pytest.skip("not the local cluster: its log file is not here")
    start = log.stat().st_size
    with psycopg.connect(DSN, autocommit=True) as conn:
        for sql in ("SELECT mnemo.remember(%s, 'the password is LogLeak1-hunter2', 'no-such-kind')",
                    "INSERT INTO mnemo.memories (tenant_id, content_full) VALUES (%s, 'LogLeak2-ghp')"):
            with pytest.raises(psycopg.Error):
                conn.execute(sql.replace("%s", f"'{tenant}'"))
    time.sleep(0.5)
    with log.open("rb") as f:
        f.seek(start)
        written = f.read().decode("utf-8", "replace")
    assert "LogLeak1" not in written and "LogLeak2" not in written


def test_every_secret_kind_through_every_write_path_is_found_nowhere():
    """bench/trust/secrets.py's planting on one tenant: every kind through every write
    path, jobs and sweeps run, contexts compiled; then every text column of every
    table (from the catalog), artifacts, compile output and the server log."""
    r = planting.plant_and_scan(DSN, 1, seed=int(time.time()))
    try:
        assert r["kinds"] >= 40 and r["needles"] >= 1000 and r["memories"] >= 10
        assert not r["found"], sorted(r["found"].items())
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = ANY(%s)", (r["tenants"],))


def test_the_scan_finds_what_is_not_redacted(db):
    """The same planting with redaction off: the scan sees the secrets in the tables
    (so its 0 above means something)."""
    t = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(t, config={"redaction": {"enabled": False}})
    p = planting.Planter(db, t, __import__("random").Random(5))
    p.plant()
    found = planting.scan(db.conn, [t], p.needles, {})
    tables = {where for _, where in found}
    assert {"messages.content", "messages.name", "messages.tags", "messages.tool_call_id", "sessions.agent_id",
            "entities.name", "artifacts.bytes", "memories.content_full", "memory_versions.reason"} <= tables
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": t})
