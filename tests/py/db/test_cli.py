"""The `mnemo` CLI against the real database: every command, the import formats,
idempotent and resumable imports, the export / import round trip, and errors that
print the project's message and hint with no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import click
import psycopg
import pytest
import typer
from conftest import DSN
from typer.testing import CliRunner

from mnemosyne import importers
from mnemosyne.cli import app

# shared/ (the benchmark data) lies beside the checkout, or beside the worktrees' folder
BENCH = next((p / "shared" / "bench" for p in Path(__file__).resolve().parents
              if (p / "shared" / "bench").is_dir()), Path("/nonexistent"))
TRAJ = BENCH / "traj" / "swe-agent"
SAMPLE_TRAJ = TRAJ / "trajectories" / "demonstrations" / "function_calling_simple.traj"
LOCOMO = BENCH / "locomo" / "locomo10.json"
needs_bench = pytest.mark.skipif(not BENCH.is_dir(), reason="shared/bench is not beside the checkout")
ENV = {"DATABASE_URL": DSN, "COLUMNS": "200"}


def mnemo(*args: str, ok: bool = True):
    result = CliRunner().invoke(app, list(args), env=ENV)
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def as_json(*args: str):
    return json.loads(mnemo(*args, "--json").stdout)


@pytest.fixture()
def fresh():
    return "t_" + uuid.uuid4().hex[:12]


def test_every_command_has_help_with_an_example():
    root = typer.main.get_command(app)
    names = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        names.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    assert {"status", "tenants", "sessions", "show", "search", "remember", "forget", "decisions",
            "import", "export", "jobs", "mcp", "serve"} <= {p[0] for p in names if p}
    for path in names:
        out = mnemo(*path, "--help").stdout
        assert "Example" in out and "$ mnemo" in out, path


def test_status(db, tenant):
    st = as_json("status", "--tenant", tenant)
    assert st["status"]["embedding"]["dims"] == 384
    assert {"history", "memory", "graph", "operations"} <= set(st["status"]["sizes"])
    assert "mnemo-run-jobs" in {j["job"] for j in st["lifecycle"]}
    assert st["memory_stats"]["tenant_id"] == tenant
    text = mnemo("status").stdout
    for part in ("Mnemosyne", "Job queue", "Background jobs", "Sizes per plane", "all-MiniLM-L6-v2"):
        assert part in text


def test_tenants_and_sessions(db, fresh):
    out = mnemo("tenants", "--create", fresh).stdout
    assert fresh in out
    sid = db.start_session(fresh)
    db.record_message(fresh, sid, {"role": "user", "content": "hello"})
    rows = as_json("sessions", fresh)
    assert [(r["session_id"], r["messages"]) for r in rows] == [(str(sid), 1)]
    assert str(sid) in mnemo("sessions", fresh).stdout
    assert fresh in {t["tenant_id"] for t in as_json("tenants")}


def test_show_renders_the_compiled_context_and_logs_nothing(db, tenant):
    sid = db.start_session(tenant, system_prompt="You are a build assistant.", context_window=8192)
    db.record_message(tenant, sid, {"role": "user", "content": "The nightly build runs on ci-7."})
    db.remember(tenant, "Releases are cut on Thursdays", kind="fact")
    logged = db._call("SELECT count(*) FROM mnemo.context_log WHERE tenant_id = %(t)s", {"t": tenant})
    bundle = as_json("show", str(sid), "--query", "when are releases cut?", "--budget", "2000")
    assert bundle["messages"][0]["content"] == "You are a build assistant."
    assert bundle["report"]["budget"]["available"] == 2000
    out = mnemo("show", str(sid), "--tenant", tenant, "--query", "when are releases cut?").stdout
    for part in ("You are a build assistant.", "Releases are cut on Thursdays", "ci-7", "Items",
                 "fidelity", "timings"):
        assert part in out
    assert db._call("SELECT count(*) FROM mnemo.context_log WHERE tenant_id = %(t)s", {"t": tenant}) == logged


def test_search_remember_decisions_forget(db, tenant):
    out = mnemo("remember", tenant, "The staging database listens on port 6543", "--kind", "fact",
                "--tag", "ops").stdout
    mid = int(out.split("mem:")[1].split()[0])
    rows = as_json("search", tenant, "staging database port")
    assert rows[0]["source"] == f"mem:{mid}" and rows[0]["score"] > 0
    assert "mem:" in mnemo("search", tenant, "staging database port", "--memories").stdout
    sid = db.start_session(tenant)
    db.record_event(tenant, sid, "decision", {"decision": "Use PostgreSQL for the queue",
                                              "rationale": ["one system to run"]})
    assert as_json("decisions", tenant, "queue")[0]["rationale"] == ["one system to run"]
    assert "Use PostgreSQL for the queue" in mnemo("decisions", tenant).stdout
    assert "forgot 1 memory" in mnemo("forget", tenant, str(mid)).stdout
    assert not as_json("search", tenant, "staging database port", "--memories")


def test_errors_print_message_and_hint_without_traceback(tmp_path):
    env = {**os.environ, "DATABASE_URL": DSN}
    cmd = [sys.executable, "-m", "mnemosyne.cli"]
    r = subprocess.run([*cmd, "search", "t_nobody_" + uuid.uuid4().hex[:6], "x"],
                       check=False, capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert "[MN002]" in r.stderr and "unknown tenant" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    # a server that is not there
    r = subprocess.run([*cmd, "status"], check=False, capture_output=True, text=True,
                       env={**env, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/mnemo?connect_timeout=3"})
    assert r.returncode == 1 and "cannot connect" in r.stderr and "make up" in r.stderr
    assert "Traceback" not in r.stderr
    # a file in no known format
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    r = subprocess.run([*cmd, "import", str(bad), "--tenant", "t_x"], check=False,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "cannot tell the format" in r.stderr and "--format" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_console_script_runs():
    script = Path(sys.executable).with_name("mnemo")
    r = subprocess.run([str(script), "tenants", "--json"], check=False, capture_output=True, text=True,
                       env={**os.environ, "DATABASE_URL": DSN})
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)


# ------------------------------------------------------------------------ import
def messages_of(db, tenant: str) -> list[dict]:
    return [x["message"] for x in db.export_tenant(tenant) if x["type"] == "message"]


@needs_bench
def test_import_swe_agent_is_idempotent(db, fresh):
    out = mnemo("import", str(SAMPLE_TRAJ), "--tenant", fresh, "--create-tenant").stdout
    history = json.loads(SAMPLE_TRAJ.read_text())["history"]
    assert f"{len(history) - 1} messages recorded" in out  # the system prompt is the session's
    msgs = messages_of(db, fresh)
    assert [m["role"] for m in msgs] == [h["role"] for h in history[1:]]
    calls = [c["id"] for m in msgs for c in m.get("tool_calls", [])]
    assert calls == [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    again = mnemo("import", str(SAMPLE_TRAJ), "--tenant", fresh, "--create-tenant").stdout
    assert "0 messages recorded" in again and "1 complete" in again
    assert len(messages_of(db, fresh)) == len(msgs)


@needs_bench
def test_import_every_shared_trajectory(db, fresh):
    """Real files reuse tool call ids (replays); each reuse is renamed, the results follow it."""
    files = sorted(TRAJ.rglob("*.traj"))
    assert len(files) == 22
    for f in files:
        mnemo("import", str(f), "--tenant", fresh, "--create-tenant")
    sessions = db.list_sessions(fresh)
    assert len(sessions) == len({importers.read(f).sessions[0].session_id for f in files})
    assert sum(s["messages"] for s in sessions) == sum(importers.read(f).message_count for f in files)


def test_import_openai_jsonl_both_shapes(db, fresh, tmp_path):
    loose = tmp_path / "chat.jsonl"
    loose.write_text("".join(json.dumps(m) + "\n" for m in [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": \"2+2\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4"}]))
    mnemo("import", str(loose), "--tenant", fresh, "--create-tenant")
    assert [m["role"] for m in messages_of(db, fresh)] == ["user", "assistant", "tool", "assistant"]
    sid = str(uuid.uuid4())
    per_line = tmp_path / "dataset.jsonl"
    per_line.write_text(json.dumps({"session_id": sid, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "bye"}]}) + "\n")
    out = mnemo("import", str(per_line), "--tenant", fresh, "--create-tenant").stdout
    assert "3 messages recorded" in out and "2 new" in out
    assert any(s["session_id"] == uuid.UUID(sid) and s["messages"] == 2 for s in db.list_sessions(fresh))


def test_detect_reads_a_first_line_longer_than_its_head(tmp_path):
    """A session per line whose first line exceeds the 64 KiB head (a long recorded
    session) is still OpenAI JSONL, not 'cannot tell the format'."""
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * (1 << 17)}]}) + "\n")
    assert importers.detect(f) == "openai"
    assert len(importers.read(f).sessions[0].messages) == 1


def claude_code_log(sid: str) -> list[dict]:
    """A Claude Code session log as it writes one: a reply's blocks one per line."""
    base = {"sessionId": sid, "cwd": "/repo", "version": "1.0.0", "isSidechain": False}
    return [
        {"type": "summary", "summary": "Fix the failing test", "leafUuid": "u0"},
        {**base, "type": "user", "uuid": "u1", "timestamp": "2026-01-05T10:00:00Z",
         "message": {"role": "user", "content": "The test test_parse fails, fix it"}},
        {**base, "type": "assistant", "uuid": "u2", "timestamp": "2026-01-05T10:00:02Z",
         "message": {"id": "msg_A", "role": "assistant", "model": "claude-sonnet-4",
                     "content": [{"type": "thinking", "thinking": "Let me look."}]}},
        {**base, "type": "assistant", "uuid": "u3", "timestamp": "2026-01-05T10:00:03Z",
         "message": {"id": "msg_A", "role": "assistant", "model": "claude-sonnet-4",
                     "content": [{"type": "text", "text": "I'll run the test first."}]}},
        {**base, "type": "assistant", "uuid": "u4", "timestamp": "2026-01-05T10:00:04Z",
         "message": {"id": "msg_A", "role": "assistant", "model": "claude-sonnet-4",
                     "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                  "input": {"command": "pytest -k test_parse"}}],
                     "usage": {"input_tokens": 1200, "output_tokens": 40}}},
        {**base, "type": "user", "uuid": "u5", "timestamp": "2026-01-05T10:00:09Z",
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                                  "content": [{"type": "text", "text": "E  ValueError: bad date"}]}]}},
        {**base, "isSidechain": True, "type": "user", "uuid": "s1", "timestamp": "2026-01-05T10:00:10Z",
         "message": {"role": "user", "content": "(a sub-agent's prompt)"}},
        {**base, "type": "assistant", "uuid": "u6", "timestamp": "2026-01-05T10:00:12Z",
         "message": {"id": "msg_B", "role": "assistant", "model": "claude-sonnet-4",
                     "content": [{"type": "text", "text": "parse_date needs the ISO format; fixed."}]}},
    ]


def test_import_claude_code_session_and_resume_as_it_grows(db, fresh, tmp_path):
    sid = str(uuid.uuid4())
    lines = claude_code_log(sid)
    log = tmp_path / f"{sid}.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines[:6]))
    assert "3 messages recorded" in mnemo("import", str(log), "--tenant", fresh, "--create-tenant").stdout
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))  # the session went on
    out = mnemo("import", str(log), "--tenant", fresh, "--create-tenant").stdout
    assert "1 messages recorded, 3 already there" in out and "1 resumed" in out
    msgs = messages_of(db, fresh)
    assert msgs == [
        {"role": "user", "content": "The test test_parse fails, fix it"},
        {"role": "assistant", "content": "I'll run the test first.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "Bash", "arguments": "{\"command\": \"pytest -k test_parse\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "E  ValueError: bad date"},
        {"role": "assistant", "content": "parse_date needs the ISO format; fixed."},
    ]
    held = db.list_sessions(fresh)
    assert [str(s["session_id"]) for s in held] == [sid]


@needs_bench
def test_import_locomo(db, fresh, tmp_path):
    sample = json.loads(LOCOMO.read_text())[0]
    conv = {k: v for k, v in sample["conversation"].items()
            if not k.startswith("session_") or k.split("_")[1] in ("1", "2")}
    small = tmp_path / "locomo_small.json"
    small.write_text(json.dumps([{**sample, "conversation": conv}]))
    mnemo("import", str(small), "--tenant", fresh, "--create-tenant")
    turns = len(conv["session_1"]) + len(conv["session_2"])
    assert sum(s["messages"] for s in db.list_sessions(fresh)) == turns
    first = next(x for x in db.export_tenant(fresh) if x["type"] == "message")
    assert first["metadata"]["dia_id"] == conv["session_1"][0]["dia_id"]
    assert first["message"]["name"] and first["created_at"].startswith("2023-05-08T13:56")


def test_an_interrupted_import_goes_on_where_it_stopped(db, fresh, tmp_path):
    """A real interruption: the import process is killed midway, then run again."""
    n = 600
    big = tmp_path / "long.jsonl"
    big.write_text("".join(json.dumps({"role": "user" if i % 2 == 0 else "assistant",
                                       "content": f"message number {i}"}) + "\n" for i in range(n)))
    proc = subprocess.Popen([sys.executable, "-m", "mnemosyne.cli", "import", str(big), "--tenant", fresh,
                             "--create-tenant"],
                            env={**os.environ, "DATABASE_URL": DSN}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    with psycopg.connect(DSN, autocommit=True) as conn:
        for _ in range(1200):
            held = conn.execute("SELECT count(*) FROM mnemo.messages WHERE tenant_id = %s", (fresh,)).fetchone()[0]
            if held >= 20 or proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    out = mnemo("import", str(big), "--tenant", fresh, "--create-tenant").stdout
    assert "1 resumed" in out, out
    contents = [m["content"] for m in messages_of(db, fresh)]
    assert contents == [f"message number {i}" for i in range(n)]


# ------------------------------------------------------------------------ export
def test_export_import_round_trip_is_lossless(db, fresh, tmp_path):
    src = fresh
    db.create_tenant(src, "Round trip", config={"formation": {"method": "off"}})
    parent = db.start_session(src, agent_id="coder", channel="team", model="gpt-4o-mini", context_window=16000,
                              system_prompt="You write Go.", config={"x": 1}, metadata={"repo": "acme/api"})
    child = db.start_session(src, parent_session_id=parent, metadata={"sub": True})
    db.record_message(src, parent, {"role": "user", "content": [
        {"type": "text", "text": "Look at this log"}]}, tags=["triage"], sensitivity="low",
        metadata={"model": "gpt-4o-mini"})
    db.record_message(src, parent, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{\"f\": \"app.log\"}"}}]})
    db.record_message(src, parent, {"role": "tool", "tool_call_id": "c1",
                                    "content": "\n".join(f"12:00:{i % 60:02d} GET /v1/items/{i} 200"
                                                         for i in range(4000))})
    db.record_message(src, parent, {"role": "assistant", "content": "Mostly 200s."},
                      metadata={"prompt_tokens": 900, "completion_tokens": 12})
    db.record_message(src, child, {"role": "user", "content": "token sk-abcdefghijklmnopqrstuvwxyz012345 leaked"})
    db.remember(src, "The API is written in Go", kind="fact",
                options={"fact": {"subject": "API", "predicate": "language", "object": "Go"}, "tags": ["stack"]})
    db.remember(src, "Use chi for routing", kind="decision",
                options={"rationale": ["small"], "alternatives": ["gin"], "pinned": True})
    dump = tmp_path / "src.jsonl"
    mnemo("export", src, "-o", str(dump))
    assert db._call("SELECT count(*) FROM mnemo.artifacts WHERE tenant_id = %(t)s", {"t": src}) == 1

    dst = "t_" + uuid.uuid4().hex[:12]
    out = mnemo("import", str(dump), "--tenant", dst, "--create-tenant").stdout
    assert "5 messages recorded" in out and "2 memories" in out
    first = [json.loads(x) for x in dump.read_text().splitlines()]
    second = db.export_tenant(dst)
    assert second[0]["tenant_id"] == dst
    assert [x for x in first[1:]] == json.loads(json.dumps(second[1:], default=str))
    assert {k: v for k, v in first[0].items() if k != "tenant_id"} == \
        {k: v for k, v in second[0].items() if k != "tenant_id"}
    # and an export file names its tenant: import without --tenant goes back there
    again = mnemo("import", str(dump)).stdout
    assert f"into {src}" in again and "0 messages recorded" in again


def test_export_to_stdout(db, tenant):
    sid = db.start_session(tenant)
    db.record_message(tenant, sid, {"role": "user", "content": "hello"})
    lines = [json.loads(x) for x in mnemo("export", tenant).stdout.splitlines()]
    assert [x["type"] for x in lines] == ["tenant", "session", "message"]


# -------------------------------------------------------------------------- jobs
def test_jobs_list_retry_run(db, fresh):
    db.create_tenant(fresh, config={"formation": {"method": "off"}})
    sid = db.start_session(fresh)
    db.record_message(fresh, sid, {"role": "user", "content": "embed me"})
    db._call("UPDATE mnemo.jobs SET status = 'failed', tries = 5, last_error = 'test: boom'"
             " WHERE tenant_id = %(t)s", {"t": fresh})
    failed = as_json("jobs", "list", "--tenant", fresh, "--status", "failed")
    assert failed and all(j["last_error"] == "test: boom" for j in failed)
    assert "test: boom" in mnemo("jobs", "list", "--tenant", fresh).stdout
    assert "Jobs" in mnemo("jobs").stdout  # `mnemo jobs` alone lists
    assert f"queued {len(failed)} failed job" in mnemo("jobs", "retry", "--tenant", fresh).stdout
    assert "ran due jobs" in mnemo("jobs", "run", "--worker", "16").stdout
    # the runner takes due jobs of every tenant, oldest first: on a server with a
    # backlog (other tests' tenants) this tenant's may need more than one run
    for _ in range(20):
        if {j["status"] for j in as_json("jobs", "list", "--tenant", fresh)} == {"done"}:
            break
        mnemo("jobs", "run", "--worker", "16")
    assert {j["status"] for j in as_json("jobs", "list", "--tenant", fresh)} == {"done"}
    done = as_json("jobs", "list", "--tenant", fresh)[0]["job_id"]
    r = mnemo("jobs", "retry", str(done), ok=False)
    assert r.exit_code == 1 and "[MN010]" in r.stderr


def test_mcp_command_refuses_an_unknown_transport():
    r = mnemo("mcp", "--transport", "carrier-pigeon", ok=False)
    assert r.exit_code == 1 and "unknown transport" in r.stderr


def test_default_database_is_the_local_cluster(monkeypatch):
    from mnemosyne import cli
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("MNEMO_PORT", "55999")
    assert cli.default_dsn() == "postgresql://postgres@127.0.0.1:55999/mnemo"
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@h/db")
    assert cli.default_dsn() == "postgresql://x@h/db"



# ------------------------------------------------------------------------ first contact (issue 40)
def test_mcp_help_lists_every_tool():
    from mnemosyne.mcp_server import TOOLS

    text = " ".join(mnemo("mcp", "--help").stdout.split())
    assert [name for name, _ in TOOLS if name not in text] == []


def test_import_of_a_file_that_is_not_utf8_is_a_clear_error(db, tenant, tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(json.dumps({"role": "user", "content": "caf\u00e9"}, ensure_ascii=False).encode("latin-1") + b"\n")
    r = mnemo("import", str(bad), "--tenant", tenant, ok=False)
    assert r.exit_code == 1 and "not UTF-8" in r.stderr and "Traceback" not in r.output
    assert db.list_sessions(tenant) == []


def test_import_into_an_unknown_tenant_needs_create_tenant(db, fresh, tmp_path):
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({"role": "user", "content": "hello"}) + "\n")
    r = mnemo("import", str(f), "--tenant", fresh, ok=False)
    assert r.exit_code == 1 and "[MN002]" in r.stderr and "--create-tenant" in r.stderr
    assert fresh not in [t["tenant_id"] for t in db.list_tenants()]
    assert "1 messages recorded" in mnemo("import", str(f), "--tenant", fresh, "--create-tenant").stdout


def test_a_failed_import_leaves_nothing_and_says_what_it_kept(db, tenant, tmp_path):
    f = tmp_path / "bad_role.jsonl"
    f.write_text("".join(json.dumps(m) + "\n" for m in (
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
        {"role": "wizard", "content": "three"})))
    r = mnemo("import", str(f), "--tenant", tenant, ok=False)
    assert r.exit_code == 1 and "[MN005]" in r.stderr and "Recorded before the error: 0 messages" in r.stderr
    assert "Traceback" not in r.output
    assert db.list_sessions(tenant) == []  # no empty session left behind


def test_unknown_tenant_hint_names_the_cli_and_a_bad_dsn_keeps_libpqs_reason():
    r = mnemo("search", "t_nobody_" + uuid.uuid4().hex[:6], "x", ok=False)
    assert "mnemo tenants --create" in r.stderr
    r = subprocess.run([sys.executable, "-m", "mnemosyne.cli", "status"], check=False, capture_output=True,
                       text=True, env={**os.environ, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/mnemo"})
    assert r.returncode == 1 and "Connection refused" in r.stderr, r.stderr


def test_keys_create_list_revoke(db, tenant):
    made = mnemo("keys", "create", tenant, "--label", "ci", "--expires-in-days", "30")
    secret = made.stdout.strip()
    assert secret.startswith("mnk_") and "shown only now" in made.stderr
    assert db.api_key_tenant(secret) == tenant
    listed = as_json("keys", "list", tenant)
    assert [(k["label"], k["state"]) for k in listed] == [("ci", "active")] and secret not in json.dumps(listed)
    assert "revoked key" in mnemo("keys", "revoke", tenant, listed[0]["key_id"]).stdout
    assert db.api_key_tenant(secret) is None
    r = mnemo("keys", "revoke", tenant, "000000000000", ok=False)
    assert r.exit_code == 1 and "[MN010]" in r.stderr


def test_tables_are_readable_at_80_columns(db, tenant):
    """No terminal (a pipe: 80 columns): every header whole on its line, content folded."""
    sid = db.start_session(tenant)
    db.record_message(tenant, sid, {"role": "user", "content": "embed me"})
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["DATABASE_URL"] = DSN
    for args, headers in ((["sessions"], ["tenant", "session", "agent", "channel", "status", "messages", "tokens",
                                          "last message"]),
                          (["jobs", "list", "--tenant", tenant], ["id", "tenant", "kind", "status", "tries",
                                                                  "run after", "updated", "last error"])):
        r = subprocess.run([sys.executable, "-m", "mnemosyne.cli", *args], check=True, capture_output=True,
                           text=True, env=env)
        lines = r.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80
        header = next(line for line in lines if "status" in line)
        assert all(f" {h} " in f" {header} " for h in headers), header


def test_stored_control_characters_reach_the_terminal_as_escapes(db, tenant):
    """An agent id is whatever a caller sent: ESC, a C1 CSI or a bidi override in it must
    not drive the admin's terminal, nor widen a table past 80 columns."""
    db.start_session(tenant, agent_id="bot\x1b[2J\x9b31m\u202eevil")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["DATABASE_URL"] = DSN
    r = subprocess.run([sys.executable, "-m", "mnemosyne.cli", "sessions", tenant], check=True,
                       capture_output=True, text=True, env=env)
    assert not any(c in r.stdout for c in "\x1b\x9b\u202e"), r.stdout
    assert "\\x1b" in r.stdout and "\\x9b" in r.stdout and "\\u202e" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
