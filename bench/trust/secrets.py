"""bench-trust, secrets: every kind of secret through every write path, then every
column of every table, the artifacts, the compiled contexts and the server log are
scanned for them (goal: 0 found). tests/py/db/test_secrets.py runs the same on one
tenant; this part runs it on many and measures what redaction costs record_message.

Each planted secret is a fresh random value (the needle), so a needle found anywhere
is a leak of this run, attributed to its kind and the table.column it was found in.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from mnemosyne import connect

ALNUM = string.ascii_letters + string.digits


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _pem(rng: random.Random) -> tuple[str, str]:
    body = "MII" + _r(rng, 61, ALNUM + "+/")
    kind = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"])
    return f"-----BEGIN {kind}-----\n{body}\n{_r(rng, 64, ALNUM + '+/')}\n-----END {kind}-----\n", body


# kind -> rng -> (token, needle): a secret that can stand alone or glued after "_"
# (names, ids, tags, JSON keys); the needle is what must not be found anywhere.
TOKENS = {
    "aws_access_key_id": lambda g: "AKIA" + _r(g, 16, string.ascii_uppercase + string.digits),
    "github_ghp": lambda g: "ghp_" + _r(g, 36),
    "github_gho": lambda g: "gho_" + _r(g, 36),
    "github_pat": lambda g: "github_pat_" + _r(g, 22) + "_" + _r(g, 59),
    "slack_xoxb": lambda g: f"xoxb-{g.randint(10**9, 10**10)}-{g.randint(10**9, 10**10)}-{_r(g, 24)}",
    "slack_xoxp": lambda g: f"xoxp-{g.randint(10**9, 10**10)}-{_r(g, 32)}",
    "stripe_live": lambda g: "sk_live_" + _r(g, 24),
    "openai_sk": lambda g: "sk-" + _r(g, 20) + "T3BlbkFJ" + _r(g, 20),
    "openai_proj": lambda g: "sk-proj-" + _r(g, 40, ALNUM + "_-") + "7",
    "anthropic": lambda g: "sk-ant-api03-" + _r(g, 40, ALNUM + "_-"),
    "google_api_key": lambda g: "AIza" + _r(g, 35, ALNUM + "_-"),
    "jwt": lambda g: ("eyJhbGciOiJIUzI1NiJ9." + base64.urlsafe_b64encode(
        json.dumps({"sub": _r(g, 12)}).encode()).decode().rstrip("=") + "." + _r(g, 43, ALNUM + "_-")),
    "gitlab": lambda g: "glpat-" + _r(g, 20, ALNUM + "_-"),
    "huggingface": lambda g: "hf_" + _r(g, 34),
    "sendgrid": lambda g: "SG." + _r(g, 22, ALNUM + "_-") + "." + _r(g, 43, ALNUM + "_-"),
    # an unknown vendor's key, found by its entropy alone: 40 distinct characters, so
    # its entropy is certain (a random draw falls below the threshold ~1% of the time)
    "high_entropy": lambda g: "".join(g.sample(g.sample(string.ascii_uppercase, 12) + g.sample(string.digits, 8)
                                               + g.sample(string.ascii_lowercase, 20), 40)),
}


def prose(rng: random.Random) -> list[tuple[str, str, list[str]]]:
    """(kind, text, needles): secrets as people write them in messages and notes."""
    out = []
    for kind, make in TOKENS.items():
        tok = make(rng)
        out.append((kind, f"use {tok} for that", [tok]))
    pw = [f"{rng.choice(['hunter', 'Tr0ub4', 'qwerty'])}{rng.randint(2, 99)}-{_r(rng, 5).lower()}"
          for _ in range(6)]
    aws_secret = [_r(rng, 30, ALNUM + "/+") + "K7" + _r(rng, 8) for _ in range(3)]
    pem, body = _pem(rng)
    pem_b64 = base64.b64encode(_pem(rng)[0].encode()).decode()
    b64_body = base64.b64decode(pem_b64).decode().split("\n")[1]
    out += [
        ("password_prose", f"I use the password {pw[0]} for the prod database", [pw[0]]),
        ("password_colon", f"password: {pw[1]}", [pw[1]]),
        ("passwd_eq", f"PGPASSWD={pw[2]} psql", [pw[2]]),
        ("password_is", f"the staging password is {pw[3]}, do not share", [pw[3]]),
        ("url_password", f"postgres://admin:{pw[4]}@db.internal:5432/prod", [pw[4]]),
        ("password_json", json.dumps({"user": "bob", "password": pw[5]}), [pw[5]]),
        ("aws_secret_prose", f"the AWS secret {aws_secret[0]} belongs to the deploy user", [aws_secret[0]]),
        ("aws_secret_is", f"and my secret is {aws_secret[1]}.", [aws_secret[1]]),
        ("aws_secret_assign", f"aws_secret_access_key = {aws_secret[2]}", [aws_secret[2]]),
        ("bearer", f"curl -H 'Authorization: Bearer {(b := _r(rng, 30) + '9')}' https://api.example.com", [b]),
        ("pem_private_key", pem, [body]),
        ("base64_pem", f"key blob {pem_b64}", [b64_body, pem_b64[40:80]]),
        ("base64_key", f"export KEY_B64={(b64k := base64.b64encode(TOKENS['openai_proj'](rng).encode()).decode())}",
         [b64k]),
        ("url_query", f"GET https://api.example.com/v2/items?page=2&api_key={(q := _r(rng, 24))}&fmt=json",
         [q]),
    ]
    return out


def split_secrets(rng: random.Random) -> list[tuple[str, dict, list[str]]]:
    """(kind, message, needles): a key split across two values of one message, which
    a scanner reading each value alone misses (issue 46): two tool-call arguments,
    two content parts (a JSON string boundary), an unknown vendor's key in halves."""
    out = []
    for kind in ("openai_proj", "github_ghp", "anthropic", "stripe_live"):
        tok = TOKENS[kind](rng)
        cut = rng.randint(len(tok) // 3, 2 * len(tok) // 3)
        call = {"id": "call_" + _r(rng, 8), "type": "function", "function": {
            "name": "configure", "arguments": json.dumps({"host": "db.internal", "key_a": tok[:cut],
                                                          "key_b": tok[cut:], "retries": 3})}}
        out.append((kind + "_split_args", {"role": "assistant", "content": None, "tool_calls": [call]},
                    [tok[cut:]]))
        tok = TOKENS[kind](rng)
        out.append((kind + "_split_parts", {"role": "user", "content": [
            {"type": "text", "text": f"the key is {tok[:cut]}"}, {"type": "text", "text": f"{tok[cut:]} thanks"}]},
            [tok[cut:]]))
    he = TOKENS["high_entropy"](rng)
    call = {"id": "call_" + _r(rng, 8), "type": "function", "function": {
        "name": "configure", "arguments": json.dumps({"k1": he[:20], "k2": he[20:]})}}
    out.append(("high_entropy_split_args", {"role": "assistant", "content": None, "tool_calls": [call]},
                [he[:20], he[20:]]))
    return out


class Planter:
    """Plants secrets into one tenant through every write path; remembers needles."""

    def __init__(self, db, tenant: str, rng: random.Random):
        self.db, self.tenant, self.rng = db, tenant, rng
        self.needles: dict[str, str] = {}  # needle -> kind
        self.sessions: list = []
        self.artifacts: list[int] = []
        self.literal_calls: list[str] = []

    def text(self) -> str:
        """Every prose kind, fresh values, in one text."""
        parts = []
        for kind, text, needles in prose(self.rng):
            parts.append(text)
            self.needles.update(dict.fromkeys(needles, kind))
        return "\n".join(parts)

    def glued(self, prefix: str) -> list[str]:
        """Every token kind, fresh values, glued after '_' (bob0_ghp_...: the number
        keeps ids unique once their secrets are redacted)."""
        out = []
        for n, (kind, make) in enumerate(TOKENS.items()):
            tok = make(self.rng)
            self.needles[tok] = kind + "_glued"
            out.append(f"{prefix}{n}_{tok}")
        return out

    def json_doc(self) -> dict:
        """Secrets in values, in keys, under credential-named keys, nested."""
        plain = _r(self.rng, 10).lower() + "-horse-battery"
        self.needles[plain] = "secret_field"
        return {"note": self.text(), "password": plain, "nested": {"list": [self.text()]},
                **dict.fromkeys(self.glued("k"), 1)}

    def plant(self) -> None:
        db, t = self.db, self.tenant
        s = db.start_session(t, context_window=16384, agent_id=" / ".join(self.glued("bob")),
                             model="gpt-4o " + self.glued("m")[0], system_prompt=self.text(),
                             config={"note": self.text()}, metadata=self.json_doc())
        self.sessions.append(s)
        db.record_message(t, s, {"role": "user", "content": self.text(), "name": self.glued("bob")[0]},
                          tags=self.glued("tag"), metadata=self.json_doc())
        db.record_message(t, s, {"role": "user", "content": [{"type": "text", "text": self.text()}]})
        ids = self.glued("call")
        calls = [{"id": i, "type": "function", "function": {
            "name": "fn_" + str(n), "arguments": json.dumps(self.json_doc())}} for n, i in enumerate(ids)]
        db.record_message(t, s, {"role": "assistant", "content": None, "tool_calls": calls})
        big = "log line\n" * 9000  # above the artifact threshold: stored as an artifact
        for n, i in enumerate(ids):
            db.record_message(t, s, {"role": "tool", "tool_call_id": i,
                                     "content": (big if n == 0 else "") + self.text()})
        db.record_message(t, s, {"role": "assistant", "content": self.text()}, metadata=self.json_doc())
        for kind, message, needles in split_secrets(self.rng):
            self.needles.update(dict.fromkeys(needles, kind))
            db.record_message(t, s, message)
            if message.get("tool_calls"):
                db.record_message(t, s, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                         "content": "configured"})
        # record_event, every kind
        tags, refs = self.glued("etag"), self.glued("ref")
        ev = {"actor": {"type": "human", "name": self.glued("eve")[0]}, "tags": tags, "refs": refs}
        db.record_event(t, s, "message", {"text": self.text()}, **ev)
        call = self.glued("evcall")[0]
        db.record_event(t, s, "tool_call", {"tool": "shell", "arguments": self.json_doc(), "id": call}, **ev)
        db.record_event(t, s, "tool_result", {"tool": "shell", "text": self.text(), "tool_call_id": call}, **ev)
        db.record_event(t, s, "tool_result", {"tool": "http", "text": self.text(), **self.json_doc()}, **ev)
        db.record_event(t, s, "decision", {"decision": self.text(), "rationale": [self.text()],
                                           "alternatives": [self.text()], "constraints": [self.text()],
                                           "consequences": [self.text()]}, **ev)
        db.record_event(t, s, "task_update", {"title": self.text(), "status": "open"}, **ev)
        for content in ({"text": self.text(), "meta": self.json_doc()},
                        {"base64": base64.b64encode((self.text() + "\n" + self.text()).encode()).decode(),
                         "media_type": "text/plain"},
                        {"base64": base64.b64encode(b"\x00\x01binary\xff" + self.text().encode()).decode()}):
            self.artifacts.append(db.record_event(t, s, "artifact", content, **ev)["artifact_id"])
        # the explicit memory API
        m = db.remember(t, self.text(), kind="note", session_id=s, options={
            "entities": self.glued("ent"), "tags": self.glued("mtag")})
        pw = f"Sw0rd{self.rng.randint(10, 99)}-{_r(self.rng, 6)}"
        self.needles[pw] = "fact_object"
        db.remember(t, f"The vault password is {pw}", kind="fact", session_id=s, options={
            "fact": {"subject": self.glued("svc")[0], "predicate": "password", "object": pw},
            "entities": self.glued("ent")})
        db.remember(t, self.text(), kind="decision", options={"rationale": [self.text()],
                                                              "alternatives": [self.text()]})
        db.remember(t, ("Long note about the deploy. " * 40) + self.text(), kind="note", session_id=s)
        db.correct(t, m, self.text(), reason=self.text())
        # failing calls written with literals (the server log)
        text = self.text().replace("'", "''").replace("\n", " ")
        for sql in ((f"SELECT mnemo.record_message('{t}', '{s}', '{{\"role\": \"bogus\", \"content\": "
                     f"{json.dumps(text)}}}')"),
                    f"SELECT mnemo.remember('{t}', '{text}', 'no-such-kind')",
                    f"INSERT INTO mnemo.memories (tenant_id, content_full) VALUES ('{t}', '{text}')",
                    f"SELECT mnemo.record_message('{t}', '{s}', '{{\"role\": \"user\", \"content\": \"{text[:200]}')"):
            self.literal_calls.append(sql)

    def fail_literal_calls(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in self.literal_calls:
                try:
                    conn.execute(sql.encode())
                except psycopg.Error:
                    pass
                else:
                    raise AssertionError(f"expected a failure: {sql[:80]}")

    def derive_and_compile(self) -> list:
        """Runs the jobs (embed, extract) and sweeps that write derived rows, then
        compiles; returns every compiled output and artifact read back."""
        db, t = self.db, self.tenant
        for _ in range(600):
            db.run_jobs(worker=17)
            if not db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s AND status = 'queued'",
                            {"t": t}):
                break
            time.sleep(0.1)
        outputs: list = []
        for s in self.sessions:
            for q in ("what is the database password?", "AWS secret key", None, self.text()):
                outputs.append(db.compile_context(t, s, q, budget=4000))
                outputs.append(db.compile_context_bundle(t, s, q, budget=4000))
        for sweep in ("access", "summaries", "working_memory"):
            db.conn.execute("CALL mnemo.run_sweep(%s, now(), %s)", (sweep, t))
        outputs.append(db.query_decisions(t, "password"))
        outputs += [db.get_artifact(t, a).decode("latin-1") for a in self.artifacts]
        return outputs


def text_columns(conn) -> list[tuple[str, str, list[str], bool]]:
    """(schema, table, text-bearing columns, has tenant_id) for every table of mnemo and
    mnemo_internal, from the catalog (partitions are read through their parent)."""
    rows = conn.execute("""
        SELECT n.nspname, c.relname,
            array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.atttypid = ANY(ARRAY[
                'text', 'varchar', 'bpchar', 'name', 'json', 'jsonb', 'bytea', 'tsvector',
                '_text', '_varchar', '_jsonb']::regtype[])),
            bool_or(a.attname = 'tenant_id')
        FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
        JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE n.nspname IN ('mnemo', 'mnemo_internal') AND c.relkind IN ('r', 'p')
            AND NOT c.relispartition
        GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()
    return [(s, t, cols, tid) for s, t, cols, tid in rows if cols]


def scan(conn, tenants: list[str], needles: dict[str, str], extra: dict[str, str]) -> Counter:
    """Counts needles found, by (kind, where): every text column of every table
    (the tenants' rows; whole tables without a tenant), plus extra {where: text}."""
    found: Counter = Counter()

    def look(where: str, text: str) -> None:
        for needle, kind in needles.items():
            if needle in text:
                found[(kind, where)] += 1

    for schema, table, cols, has_tenant in text_columns(conn):
        select = ", ".join(f'"{c}"' for c in cols)
        where = " WHERE tenant_id = ANY(%s)" if has_tenant else ""
        with conn.cursor() as cur:
            cur.execute(f'SELECT {select} FROM "{schema}"."{table}"{where}', (tenants,) if has_tenant else ())
            for row in cur:
                for col, value in zip(cols, row, strict=True):
                    if value is None:
                        continue
                    text = (bytes(value).decode("latin-1") if isinstance(value, bytes | memoryview)
                            else value if isinstance(value, str) else json.dumps(value, default=str))
                    look(f"{table}.{col}", text)
    for where, text in extra.items():
        look(where, text)
    return found


def server_log(conn) -> Path | None:
    """The local cluster's log file ($MNEMO_HOME/postgres.log), when the server is it."""
    home = os.environ.get("MNEMO_HOME") or str(Path(__file__).resolve().parents[2] / ".mnemo")
    log = Path(home) / "postgres.log"
    try:
        data = conn.execute("SHOW data_directory").fetchone()[0]
    except psycopg.Error:
        return None
    return log if log.exists() and Path(data).resolve() == (Path(home) / "pgdata").resolve() else None


def plant_and_scan(dsn: str, tenants: int, seed: int) -> dict:
    """Plants into `tenants` new tenants, runs what derives from them, scans."""
    rng = random.Random(seed)
    with connect(dsn) as db, psycopg.connect(dsn, autocommit=True) as conn:
        log = server_log(conn)
        log_start = log.stat().st_size if log else 0
        names, needles, outputs = [], {}, []
        for _ in range(tenants):
            t = "sec_" + uuid.uuid4().hex[:12]
            db.create_tenant(t)
            p = Planter(db, t, rng)
            p.plant()
            p.fail_literal_calls(dsn)
            outputs += p.derive_and_compile()
            names.append(t)
            needles.update(p.needles)
        extra = {"compile_output": json.dumps(outputs, default=str)}
        if log:
            with log.open("rb") as f:
                f.seek(log_start)
                extra["server_log"] = f.read().decode("utf-8", "replace")
        found = scan(conn, names, needles, extra)
        rows = conn.execute("SELECT count(*) FROM mnemo.memories WHERE tenant_id = ANY(%s)", (names,)).fetchone()[0]
    return {"tenants": names, "needles": len(needles), "kinds": len(set(needles.values())),
            "memories": rows, "server_log_scanned": log is not None, "found": found}


def record_message_cost(dsn: str, n: int) -> dict:
    """record_message with redaction on and off, interleaved (same backend, same
    texts): median ms each and the ratio."""
    rng = random.Random(7)
    words = ["the", "deploy", "failed", "because", "the", "migration", "ran", "twice", "so", "we", "rolled", "back", "and", "retried"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 120))) for _ in range(n)]
    with connect(dsn) as db:
        on, off = "cost_on_" + uuid.uuid4().hex[:8], "cost_off_" + uuid.uuid4().hex[:8]
        db.create_tenant(on)
        db.create_tenant(off, config={"redaction": {"enabled": False}})
        s_on, s_off = db.start_session(on), db.start_session(off)
        times: dict[str, list[float]] = {"on": [], "off": []}
        sql = "SELECT mnemo.record_message(%s, %s, %s)"
        for i, text in enumerate(texts):
            order = [("on", on, s_on), ("off", off, s_off)]
            for name, t, s in order if i % 2 else order[::-1]:
                t0 = time.perf_counter()
                db.conn.execute(sql, (t, s, Jsonb({"role": "user", "content": text})))
                times[name].append((time.perf_counter() - t0) * 1000)
        for t in (on, off):
            db.conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = %s", (t,))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"calls_each": n, "median_ms_redaction_on": round(med["on"], 3),
            "median_ms_redaction_off": round(med["off"], 3), "ratio": round(med["on"] / med["off"], 3)}


def run(dsn: str, args) -> dict:
    tenants = getattr(args, "secret_tenants", 8)
    r = plant_and_scan(dsn, tenants, seed=20)
    by_kind: Counter = Counter()
    by_table: Counter = Counter()
    for (kind, where), n in r["found"].items():
        by_kind[kind] += n
        by_table[where] += n
    found = sum(r["found"].values())
    print(f"secrets: {r['needles']} planted ({r['kinds']} kinds) in {tenants} tenants, "
          f"{r['memories']} memories formed; server log scanned: {r['server_log_scanned']}")
    for (kind, where), n in sorted(r["found"].items()):
        print(f"  LEAK {kind} in {where}: {n}")
    cost = record_message_cost(dsn, getattr(args, "secret_calls", 1000))
    print(f"secrets: found {found}; record_message median {cost['median_ms_redaction_on']} ms with "
          f"redaction, {cost['median_ms_redaction_off']} ms without (x{cost['ratio']})")
    return {"passed": found == 0, "found": found, "planted": r["needles"], "kinds": r["kinds"],
            "tenants": tenants, "server_log_scanned": r["server_log_scanned"],
            "found_by_kind": dict(by_kind), "found_by_table": dict(by_table), "record_message": cost}
