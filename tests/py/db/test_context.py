"""compile_context and compile_context_bundle against the real database.

Every test commits and uses its own random tenant. Token costs are recomputed here with
the same counter the server uses (plpy/mnemo_db/tokens.py), so "B is a hard limit" is
checked on the messages actually returned, not on the report's own arithmetic.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import openai
import psycopg
import pytest
from conftest import DSN
from helpers import assert_tool_pairs_whole, run_jobs, say, text_of
from mnemo_db import tokens
from mnemo_db.compile import phases
from mnemo_db.compile.compiler import GENERIC_PLANS_AFTER
from mnemo_db.compile.levels import message_levels
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import TypeAdapter

from mnemosyne import errors

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
TOOLS = TypeAdapter(list[ChatCompletionToolParam])
SYSTEM_PROMPT = "You are a careful coding assistant. Answer from the repository's files."


# --------------------------------------------------------------------------- helpers
pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")


def _marker(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10].upper()}"


def _call(call_id: str, name: str, args: dict | None = None) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args or {})}}


def _assistant_calls(db, tenant, session, *calls, content=None, **kw) -> int:
    return db.record_message(tenant, session, {"role": "assistant", "content": content,
                                               "tool_calls": list(calls)}, **kw)


def _tool(db, tenant, session, call_id: str, content: str, **kw) -> int:
    return db.record_message(tenant, session,
                             {"role": "tool", "tool_call_id": call_id, "content": content}, **kw)


def _pin(db, tenant: str, memory_id: int) -> None:
    db._call("UPDATE mnemo.memories SET is_pinned = true"
             " WHERE tenant_id = %(t)s AND memory_id = %(m)s", {"t": tenant, "m": memory_id})


def prompt_cost(messages: list[dict], system_prompt: str | None) -> int:
    """Tokens of the returned messages, less the session's own system prompt."""
    if system_prompt is not None:
        assert messages[0] == {"role": "system", "content": system_prompt}
        messages = messages[1:]
    return sum(tokens.count_message(m) for m in messages)


def context_log(db, tenant: str) -> list[tuple]:
    with db.conn.cursor() as cur:
        cur.execute("SELECT context_id, session_id, budget, tokens_used, query, task_type,"
                    " items, omissions, provenance FROM mnemo.context_log"
                    " WHERE tenant_id = %s ORDER BY context_id", (tenant,))
        return cur.fetchall()


def _big_output(min_bytes: int, first_line: str = "") -> str:
    lines = [first_line] if first_line else []
    i = 0
    while sum(len(x) + 1 for x in lines) <= min_bytes:
        lines.append(f"2026-03-0{i % 9 + 1} 12:{i % 60:02d}:00 INFO worker-{i % 7} "
                     f"processed batch {i} from /var/spool/jobs/{i}.json in {i % 97} ms")
        i += 1
    return "\n".join(lines) + "\nfinished: ERR_NONE"


# --------------------------------------------------------------------------- 1. OpenAI
class _Recorder(BaseHTTPRequestHandler):
    """A minimal Chat Completions endpoint that keeps what it was sent."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))
        answer = json.dumps({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 1_700_000_000,
            "model": body.get("model", "gpt-4o"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "It is an invoicing app."}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def test_messages_validate_with_the_openai_sdk_and_are_sent_unchanged(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    say(db, tenant, s, "user", "List the repository root and read the README, please.")
    _assistant_calls(db, tenant, s, _call("call_ls", "fs_list_root"),
                     _call("call_rd", "fs_read_file", {"path": "README.md"}),
                     content="Looking at the repository.")
    _tool(db, tenant, s, "call_ls", "README.md\npackage.json\nsrc/")
    _tool(db, tenant, s, "call_rd", "# Ledger\nLedger turns timesheets into invoices.")
    say(db, tenant, s, "assistant", "This repository is an invoicing tool.")
    db.record_message(tenant, s, {"role": "user", "name": "alice", "content": [
        {"type": "text", "text": "Thanks. Which database does it use?"}]})
    mem = db.record_event(tenant, s, "decision", {"decision": "Use PostgreSQL for invoices",
                                                  "rationale": ["one system to operate"]})
    bundle = db.compile_context_bundle(tenant, s, "which database for invoices?")
    messages = bundle["messages"]
    assert messages == db.compile_context(tenant, s, "which database for invoices?")

    MESSAGES.validate_python(messages)
    TOOLS.validate_python(bundle["tools"])
    roles = [m["role"] for m in messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert f"[mem:{mem['memory_id']} decision" in messages[1]["content"]
    assert messages[-1]["name"] == "alice" and isinstance(messages[-1]["content"], list)
    assert {t["function"]["name"] for t in bundle["tools"]} == {
        "memory_query", "memory_restore", "memory_release"}

    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
                               api_key="test", max_retries=0, timeout=20)
        reply = client.chat.completions.create(model="gpt-4o", messages=messages,
                                               tools=bundle["tools"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert reply.choices[0].message.content == "It is an invoicing app."
    [(path, body)] = server.requests
    assert path == "/v1/chat/completions"
    assert body["messages"] == messages
    assert body["tools"] == bundle["tools"]


# --------------------------------------------------------------------------- 2. budget
@pytest.fixture()
def long_session(db, tenant):
    """Many turns of varied length, a tool group with a >64 KB output, memories."""
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    for i in range(14):
        say(db, tenant, s, "user", f"Question {i}: how does module m{i} in src/m{i}.py work?"
             + (" It retries 3 times with a 250 ms backoff. " * (i % 4)))
        say(db, tenant, s, "assistant", f"Module m{i} parses /etc/app/m{i}.toml. " * (1 + i % 5))
        if i == 5:
            _assistant_calls(db, tenant, s, _call("call_log", "shell", {"cmd": "cat big.log"}),
                             _call("call_ver", "shell", {"cmd": "node --version"}))
            _tool(db, tenant, s, "call_log", _big_output(70_000))
            _tool(db, tenant, s, "call_ver", "v20.11.1")
    for k in range(3):
        db.record_event(tenant, s, "decision", {
            "decision": f"Decision {k}: keep retries at {3 + k} for module m{k}",
            "rationale": [f"measured {k * 17} failures per day", "simpler than a queue"]})
    say(db, tenant, s, "user", "Now summarise what we decided about retries and the big log.")
    return s


@pytest.mark.parametrize("budget", [0, 50, 200, 1000, 5000])
@pytest.mark.parametrize("task_type", [None, "knowledge", "tool_heavy"])
def test_budget_is_a_hard_limit(db, tenant, long_session, budget, task_type):
    opts = {"budget": budget} | ({"task_type": task_type} if task_type else {})
    bundle = db.compile_context_bundle(tenant, long_session, **opts)
    report, messages = bundle["report"], bundle["messages"]
    cost = prompt_cost(messages, SYSTEM_PROMPT)
    assert report["budget"]["available"] == budget  # the window is far larger
    assert cost <= budget
    assert report["tokens"]["total"] == cost
    t = report["tokens"]
    assert t["total"] == t["memory"] + t["summary"] + t["history"]
    assert t["prompt"] == t["system"] + t["total"] + report["budget"]["tool_definitions"]
    assert t["system"] == tokens.count_message({"role": "system", "content": SYSTEM_PROMPT})
    hist = [i for i in report["items"] if i["section"] == "history"]
    assert sum(i["tokens"] for i in hist) == t["history"]
    memory_msgs = [m for m in messages[1:] if m["role"] == "system"]
    assert sum(tokens.count_message(m) for m in memory_msgs) == t["memory"] + t["summary"]
    assert_tool_pairs_whole(messages)
    if budget >= 200:
        # the newest message (the question) is verbatim whenever it fits
        assert messages[-1]["content"].startswith("Now summarise what we decided")
    if budget == 0:
        assert messages == [{"role": "system", "content": SYSTEM_PROMPT}]


def test_stored_content_parts_go_back_out_verbatim_whatever_numbers_they_hold(db, tenant):
    # jsonb keeps any number; a content part may carry one beyond 64 bits, and the
    # message must still go back out exactly as stored
    s = db.start_session(tenant, context_window=128000)
    parts = [{"type": "text", "text": "Here is the dump you asked for."},
             {"type": "file", "file": {"file_id": "file-1", "bytes": 123456789012345678901234567890,
                                       "checksum": -12345678901234567890123}}]
    db.record_message(tenant, s, {"role": "user", "content": parts})
    sent = db.compile_context(tenant, s)
    assert sent[-1] == {"role": "user", "content": parts}
    bundle = db.compile_context_bundle(tenant, s)
    assert bundle["messages"][-1]["content"] == parts


def test_history_is_verbatim_when_everything_fits(db, tenant, long_session):
    everything = db.compile_context_bundle(tenant, long_session, budget=100_000)
    full_cost = everything["report"]["tokens"]["total"]
    assert {i["fidelity"] for i in everything["report"]["items"]} == {"full"}
    budget = full_cost + 200
    for task_type in ("knowledge", "continuation", "new_session", "tool_heavy"):
        report = db.compile_context_bundle(tenant, long_session, budget=budget,
                                           task_type=task_type)["report"]
        fidelities = {i["fidelity"] for i in report["items"] if i["section"] == "history"}
        assert fidelities == {"full"}, (task_type, report["tokens"])


def test_older_turns_degrade_to_the_levels_their_embed_job_stored(db, tenant):
    """The embed job stores a long message's extractive levels (messages.levels) as
    compile_context computes them, short ones get none, and a compile degrades an older
    turn to the stored levels instead of summarising it again."""
    s = db.start_session(tenant, context_window=128000)
    long_text = " ".join(f"Step {i}: deploy.sh copies build/app-{i}.tar to /srv/app{i} and "
                         f"restarts the unit app{i}.service after {i * 5} seconds." for i in range(12))
    long_id = say(db, tenant, s, "user", long_text)
    short_id = say(db, tenant, s, "assistant", "Noted, twelve steps.")
    for i in range(8):
        say(db, tenant, s, "user", f"Follow-up {i}: is step {i} idempotent when run twice?")
    run_jobs(db, tenant)
    with db.conn.cursor() as cur:
        cur.execute("SELECT message_id, levels, role, content, token_count, created_at"
                    " FROM mnemo.messages WHERE tenant_id = %s AND message_id = ANY(%s)",
                    (tenant, [long_id, short_id]))
        rows = {r[0]: r for r in cur.fetchall()}
    assert rows[short_id][1] is None
    stored = rows[long_id][1]
    _, _, role, content, token_count, created_at = rows[long_id]
    assert stored == message_levels({"content": content, "role": role,
                                         "token_count": token_count, "created_at": created_at})
    assert set(stored) >= {"stub"} and stored["stub"]["text"] != content

    # What a compile sends for the old turn comes from the stored levels: mark them.
    marked = {name: dict(lv, text=f"{lv['text']} MARK-{name.upper()}")
              for name, lv in stored.items()}
    db._call("UPDATE mnemo.messages SET levels = %(l)s WHERE tenant_id = %(t)s"
             " AND message_id = %(m)s", {"l": json.dumps(marked), "t": tenant, "m": long_id})
    budget = 260  # the follow-ups fit verbatim, the long turn only at a lower level
    bundle = db.compile_context_bundle(tenant, s, budget=budget, task_type="continuation")
    fidelity = {i["source"]: i["fidelity"] for i in bundle["report"]["items"]}
    assert fidelity[f"msg:{long_id}"] in ("detail", "compact", "stub")
    sent = text_of(bundle["messages"])
    assert "MARK-" in sent  # the level sent (a level no shorter than the one above is skipped)
    assert long_text not in sent


def test_stored_line_tokens_give_the_context_counting_gives(db, tenant):
    """The triggers of migration 0012 keep line_tokens (each text's tokens as a memory-
    block line's text part) in step with the texts, and a compile that adds them to
    its labels' counts sends exactly what counting every line sends: the same bundle
    with the stored counts as with them cleared (NULL: rows from before 0012)."""
    s = db.start_session(tenant, context_window=128000)
    other = db.start_session(tenant, context_window=128000, channel="team")
    for i in range(10):
        say(db, tenant, other, "user", f"Team note {i}: the exporter for region-{i} writes "
             f"reports/{i}.csv at 0{i}:15 UTC; ticket OPS-{4100 + i} tracks its retries.")
    long_text = " ".join(f"Rule {i}: exports to bucket-{i} are checked by job check-{i} "
                         f"within {i + 3} minutes, or OPS-{4200 + i} is paged." for i in range(8))
    ids = [db.record_event(tenant, s, "decision", {"decision": long_text})["memory_id"]]
    ids += [db.record_event(tenant, s, "decision", {
        "decision": f"Decision {k}: reports/{k}.csv is written in UTC."})["memory_id"] for k in range(4)]
    # stored levels for the long one (the summaries job's columns): its lines cost the
    # stored counts too
    db._call("UPDATE mnemo.memories SET content_detail = %(d)s, content_compact = %(c)s,"
             " content_stub = %(s)s WHERE tenant_id = %(t)s AND memory_id = %(m)s",
             {"d": long_text[: len(long_text) // 2], "c": long_text[:120], "s": "Export rules, OPS pages.",
              "t": tenant, "m": ids[0]})
    say(db, tenant, s, "user", "Which job checks the region exports, and who is paged?")
    run_jobs(db, tenant)

    texts = db._call("SELECT array_agg(array[content_full, content_detail, content_compact, content_stub]"
                     " ORDER BY memory_id) FROM mnemo.memories WHERE tenant_id = %(t)s", {"t": tenant})
    stored = db._call("SELECT array_agg(array_to_string(line_tokens, ',', '-') ORDER BY memory_id)"
                      " FROM mnemo.memories WHERE tenant_id = %(t)s", {"t": tenant})
    assert stored == [",".join("-" if x is None else str(tokens.count_line_text(x)) for x in row)
                      for row in texts]
    msgs = db._call("SELECT array_agg(array[content, line_tokens::text]) FROM mnemo.messages"
                    " WHERE tenant_id = %(t)s", {"t": tenant})
    assert all(n == str(tokens.count_line_text(c)) for c, n in msgs)

    # one clock for both compiles: freshness moves with now(), and on a loaded machine
    # seconds pass between them
    now = db._call("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", {})
    # a budget the long decision cannot fill at full fidelity beside a recalled turn
    opts = {"budget": 300, "task_type": "knowledge", "log": False, "as_of": now}
    with_stored = db.compile_context_bundle(tenant, s, **opts)
    recalled = {i["source"].split(":")[0] for i in with_stored["report"]["items"] if i["section"] == "memory"}
    assert recalled == {"mem", "msg"}  # both kinds of stored count were used
    assert any(i["source"] == f"mem:{ids[0]}" and i["fidelity"] != "full"
               for i in with_stored["report"]["items"])  # and a stored level's
    db._call("UPDATE mnemo.memories SET line_tokens = NULL WHERE tenant_id = %(t)s", {"t": tenant})
    db._call("UPDATE mnemo.messages SET line_tokens = NULL WHERE tenant_id = %(t)s", {"t": tenant})
    counted = db.compile_context_bundle(tenant, s, **opts)
    with_stored["report"].pop("timings_ms"), counted["report"].pop("timings_ms")
    with_stored["report"].pop("latency_ms"), counted["report"].pop("latency_ms")
    assert counted == with_stored
    # and the compile does read them: at a stored 1,000 tokens no line fits at full
    # fidelity (a recalled turn may still enter as its extractive stub, counted)
    db._call("UPDATE mnemo.messages SET line_tokens = 1000 WHERE tenant_id = %(t)s", {"t": tenant})
    db._call("UPDATE mnemo.memories SET line_tokens = '{1000,1000,1000,1000}' WHERE tenant_id = %(t)s",
             {"t": tenant})
    inflated = db.compile_context_bundle(tenant, s, **opts)["report"]["items"]
    assert [i for i in inflated if i["section"] == "memory"]
    assert not [i for i in inflated if i["section"] == "memory" and i["fidelity"] == "full"]


def test_short_turns_are_all_kept_when_they_fit(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    ids = [say(db, tenant, s, "user", "ok") for _ in range(60)]
    everything = db.compile_context(tenant, s, budget=100_000)
    cost = prompt_cost(everything, None)
    assert len(everything) == 60
    report = db.compile_context_bundle(tenant, s, budget=cost)["report"]
    assert [i["source"] for i in report["items"]] == [f"msg:{i}" for i in ids]



def test_short_turns_past_the_first_history_read_are_kept_when_they_fit(db, tenant):
    """read_history reads the newest HISTORY_FIRST_ROWS rows first, and reads on only
    when those cost less than B at their cheapest: turns past the first read that fit
    B are all sent, the oldest included."""
    from mnemo_db.compile.statements import HISTORY_FIRST_ROWS

    turns = 300
    assert turns > HISTORY_FIRST_ROWS
    s = db.start_session(tenant, context_window=128000)
    ids = [say(db, tenant, s, "user", "ok") for _ in range(turns)]
    report = db.compile_context_bundle(tenant, s, budget=100_000)["report"]
    assert [i["source"] for i in report["items"]] == [f"msg:{i}" for i in ids]

def test_pinned_memory_never_breaks_the_budget(db, tenant):
    """The memory block's day line costs tokens too: B outranks a pinned memory."""
    s = db.start_session(tenant, context_window=128000)
    for _ in range(2):
        say(db, tenant, s, "user", "Build retry deploy tests/test_api.py service query report "
                                    "billing tenant 18317 timeout service!")
    for pinned in (False, False, True):
        m = db.record_event(tenant, s, "decision", {
            "decision": "Latency export table build retry deploy service query report billing."})
        if pinned:
            _pin(db, tenant, m["memory_id"])
    over = []
    for budget in range(40, 160, 10):
        for task_type in ("continuation", "knowledge", "tool_heavy"):
            bundle = db.compile_context_bundle(tenant, s, budget=budget, task_type=task_type)
            cost = prompt_cost(bundle["messages"], None)
            if cost > budget:
                over.append((budget, task_type, cost))
    assert not over


def test_pinned_memory_is_kept_when_the_history_can_yield(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    for i in range(80):  # short turns: the history fills its share to the token
        say(db, tenant, s, "user", f"step {i} done")
    m = db.record_event(tenant, s, "decision", {"decision": "Always use UTC timestamps"})
    _pin(db, tenant, m["memory_id"])
    dropped = []
    for budget in (100, 300, 500):
        for task_type in ("continuation", "knowledge", "new_session", "tool_heavy"):
            bundle = db.compile_context_bundle(tenant, s, budget=budget, task_type=task_type)
            assert prompt_cost(bundle["messages"], None) <= budget
            if f"mem:{m['memory_id']}" not in {i["source"] for i in bundle["report"]["items"]}:
                dropped.append((budget, task_type, bundle["report"]["tokens"]))
    assert not dropped


@pytest.fixture()
def memories_session(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    for i in range(12):
        say(db, tenant, s, "user" if i % 2 == 0 else "assistant",
             f"Turn {i}: the exporter writes reports/{i}.csv every {i + 2} minutes.")
    for k in range(6):
        m = db.record_event(tenant, s, "decision", {
            "decision": f"Decision {k}: always use UTC timestamps in reports/{k}.csv"})
        if k < 2:
            _pin(db, tenant, m["memory_id"])
    return s


def test_memory_cap_bounds_the_memory_block(db, tenant, memories_session):
    over = []
    for cap in range(40, 200, 5):
        bundle = db.compile_context_bundle(tenant, memories_session, budget=2000,
                                           caps={"memory": cap})
        t = bundle["report"]["tokens"]
        assert prompt_cost(bundle["messages"], None) == t["total"] <= 2000
        if t["memory"] > cap:
            over.append((cap, t["memory"]))
    assert not over


def test_history_and_item_caps(db, tenant, memories_session):
    for cap in (0, 30, 90, 200, 5000):
        bundle = db.compile_context_bundle(tenant, memories_session, budget=3000,
                                           caps={"history": cap})
        t = bundle["report"]["tokens"]
        assert t["history"] + t["summary"] <= cap
        assert prompt_cost(bundle["messages"], None) == t["total"] <= 3000
        assert_tool_pairs_whole(bundle["messages"])
    for n in (0, 1, 3, 100):
        for opts in ({"caps": {"items": n}}, {"max_items": n}):
            report = db.compile_context_bundle(tenant, memories_session, budget=3000,
                                               **opts)["report"]
            memory = [i for i in report["items"] if i["section"] == "memory"]
            assert len(memory) <= max(n, 2)
            assert len([i for i in memory if i["pinned"]]) == 2  # kept whatever the cap


def test_a_memory_that_repeats_the_history_sent_whole_is_left_out(db, tenant):
    """Issue 22: a memory formed only from messages the history sends whole said again
    what the model reads below it (a coding session's tool-output memories: replayed
    SWE-agent sessions were sent more than their full history). It is left out, with
    the reason in the report; one formed from a message outside the window, or from
    another session, is recalled; a pinned one is kept."""
    old = db.start_session(tenant, context_window=128000)
    gone = say(db, tenant, old, "user", "The staging database listens on port 6543.")
    s = db.start_session(tenant, context_window=128000)
    here = say(db, tenant, s, "user", "The staging database host is db-stg-4.internal.")
    say(db, tenant, s, "assistant", "Noted: db-stg-4.internal.")
    repeats = db.remember(tenant, "Staging database host: db-stg-4.internal", kind="fact", session_id=s,
                          options={"source_message_ids": [here]})
    elsewhere = db.remember(tenant, "Staging database port: 6543", kind="fact",
                            options={"source_message_ids": [gone]})
    pinned = db.remember(tenant, "Staging database host (pinned): db-stg-4.internal", kind="fact", session_id=s,
                         options={"source_message_ids": [here], "pinned": True})
    run_jobs(db, tenant)
    say(db, tenant, s, "user", "Which host and port does the staging database use?")
    report = db.compile_context_bundle(tenant, s, log=False)["report"]
    memory = {i["source"] for i in report["items"] if i["section"] == "memory"}
    assert f"mem:{repeats}" not in memory
    assert {"source": f"mem:{repeats}", "reason": "repeats_history"} in report["omissions"]
    assert f"mem:{pinned}" in memory
    # the other session's fact comes back: as its note, or as its turn recalled whole
    # (then the note repeats the block: the next test)
    assert f"mem:{elsewhere}" in memory or f"msg:{gone}" in memory
    history = {i["source"]: i["fidelity"] for i in report["items"] if i["section"] == "history"}
    assert history[f"msg:{here}"] == "full"


def test_a_memory_whose_turns_the_block_recalls_whole_is_left_out_for_another(db, tenant):
    """Issue 26: the memory block recalled a past turn and the note made of it side by
    side (31 % of its memory lines at 1k tokens on LoCoMo). The note is left out, with
    the reason in the report, and its tokens go to another candidate; a pinned note
    stays."""
    old = db.start_session(tenant, context_window=128000)
    turn = say(db, tenant, old, "user", "Our staging database moved to the host db-stg-4.internal last week.")
    other = say(db, tenant, old, "user", "The staging database listens on port 6543 since the move.")
    note = db.remember(tenant, "The staging database host is db-stg-4.internal", kind="fact",
                       options={"source_message_ids": [turn]})
    pinned = db.remember(tenant, "Staging database (pinned): host db-stg-4.internal", kind="fact",
                         options={"source_message_ids": [turn], "pinned": True})
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)
    report = db.compile_context_bundle(tenant, s, "Which host does the staging database use?",
                                       budget=4000, log=False)["report"]
    memory = {i["source"]: i["fidelity"] for i in report["items"] if i["section"] == "memory"}
    assert memory.get(f"msg:{turn}") == "full" and f"msg:{other}" in memory
    assert f"mem:{note}" not in memory and f"mem:{pinned}" in memory
    assert {"source": f"mem:{note}", "reason": "repeats_block"} in report["omissions"]


def test_budget_from_the_window_arithmetic(db, tenant):
    s = db.start_session(tenant, context_window=6000, response_reserve=1000,
                         system_prompt=SYSTEM_PROMPT)
    for i in range(60):
        say(db, tenant, s, "user" if i % 2 == 0 else "assistant",
             f"Turn {i} talks about src/file_{i}.py and its {i * 13} lines. " * 6)
    b = db.compile_context_bundle(tenant, s)["report"]["budget"]
    system = tokens.count_message({"role": "system", "content": SYSTEM_PROMPT})
    assert b["system_prompt"] == system and b["tool_definitions"] > 0
    assert b["available"] == 6000 - system - 1000 - b["tool_definitions"]
    bundle = db.compile_context_bundle(tenant, s, phantom_tools=False, tool_tokens=500)
    assert bundle["tools"] == []
    assert bundle["report"]["budget"]["available"] == 6000 - system - 1000 - 500
    assert prompt_cost(bundle["messages"], SYSTEM_PROMPT) <= bundle["report"]["budget"]["available"]
    assert bundle["report"]["tokens"]["prompt"] <= 6000 - 1000
    # a budget larger than the window is clipped to it
    big = db.compile_context_bundle(tenant, s, budget=1_000_000)["report"]["budget"]
    assert big["available"] == b["available"]


# --------------------------------------------------------------------------- 3. tool pairs
def test_tool_call_pairs_stay_whole(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    say(db, tenant, s, "user", "Check the build and the tests.")
    _assistant_calls(db, tenant, s, _call("c_build", "shell", {"cmd": "make"}),
                     _call("c_test", "shell", {"cmd": "make test"}))
    _tool(db, tenant, s, "c_build", "build ok")
    _tool(db, tenant, s, "c_test", "12 passed")
    # a group where one call never got its result; the other call is kept alone
    _assistant_calls(db, tenant, s, _call("c_lint", "shell", {"cmd": "ruff check"}),
                     _call("c_lost_1", "shell", {"cmd": "sleep 1000"}))
    _tool(db, tenant, s, "c_lint", "All checks passed!")
    # a call-only message none of whose calls was answered: not sent at all
    lost_only = _assistant_calls(db, tenant, s, _call("c_lost_2", "shell", {"cmd": "hang"}))
    # text plus an unanswered call: the text is kept, the call is not
    with_text = _assistant_calls(db, tenant, s, _call("c_lost_3", "web", {"q": "x"}),
                                 content="Let me also search the web.")
    say(db, tenant, s, "user", "And the coverage?")
    _assistant_calls(db, tenant, s, _call("c_cov", "shell", {"cmd": "coverage report"}))
    # the result arrives after an interleaved user message: it still follows its call
    say(db, tenant, s, "user", "Take your time.")
    _tool(db, tenant, s, "c_cov", "TOTAL 91%\n" + "src/x.py 100%\n" * 200)
    say(db, tenant, s, "assistant", "Coverage is 91 %.")

    lost = ("c_lost_1", "c_lost_2", "c_lost_3")
    for budget in (None, 40, 80, 150, 300, 600, 2000):
        opts = {} if budget is None else {"budget": budget}
        bundle = db.compile_context_bundle(tenant, s, **opts)
        messages = bundle["messages"]
        MESSAGES.validate_python(messages)
        assert_tool_pairs_whole(messages)
        dumped = json.dumps(messages)
        assert not any(c in dumped for c in lost), budget
        sources = {i["source"] for i in bundle["report"]["items"] if i["section"] == "history"}
        assert f"msg:{lost_only}" not in sources
        assert prompt_cost(messages, None) <= bundle["report"]["budget"]["available"]
        if budget is None:
            assert f"msg:{with_text}" in sources
            kept = next(m for m in messages if m.get("content") == "Let me also search the web.")
            assert "tool_calls" not in kept
            ids = [tc["id"] for m in messages for tc in m.get("tool_calls") or ()]
            assert ids == ["c_build", "c_test", "c_lint", "c_cov"]


# --------------------------------------------------------------------------- 4. stability
def test_consecutive_compiles_are_stable_and_grow_by_appending(db, tenant, long_session):
    args = {"t": tenant, "s": long_session, "o": json.dumps({"budget": 100_000})}
    sql = "SELECT mnemo.compile_context(%(t)s, %(s)s, NULL, %(o)s::jsonb)::text"
    first = db.compile_context(tenant, long_session, budget=100_000)
    second = db.compile_context(tenant, long_session, budget=100_000)
    assert second == first
    assert json.dumps(second) == json.dumps(first)
    assert db._call(sql, args) == db._call(sql, args) == json.dumps(first)
    # bounded budgets are stable too
    for budget in (300, 2000):
        a = db.compile_context(tenant, long_session, budget=budget)
        b = db.compile_context(tenant, long_session, budget=budget)
        assert json.dumps(a) == json.dumps(b), budget

    new = {"role": "user", "content": "One more thing: what about the retries in m3?"}
    db.record_message(tenant, long_session, new)
    after = db.compile_context(tenant, long_session, budget=100_000)
    assert after == first + [new]
    assert json.dumps(after[:-1]) == json.dumps(first)


# --------------------------------------------------------------------------- 5. secrets
def test_secret_content_never_leaks(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    user_m, asst_m, tool_m, mem_m = (_marker(p) for p in ("SU", "SA", "ST", "SM"))
    say(db, tenant, s, "user", "Let us talk about the deployment credentials.")
    secret_user = say(db, tenant, s, "user",
                       f"The deployment password for prod database is {user_m}.",
                       sensitivity="secret")
    say(db, tenant, s, "assistant", f"Noted the deployment password {asst_m}.",
         sensitivity="secret")
    _assistant_calls(db, tenant, s, _call("c_env", "shell", {"cmd": "env"}))
    _tool(db, tenant, s, "c_env", f"DB_PASSWORD={tool_m}\nDB_HOST=db.internal",
          sensitivity="secret")
    db.record_event(tenant, s, "decision", {
        "decision": f"Rotate the deployment password {mem_m} monthly",
        "rationale": ["compliance"]}, sensitivity="secret")
    public_decision = db.record_event(tenant, s, "decision", {
        "decision": "Deployment credentials live in the vault", "rationale": ["audit"]})
    other = db.start_session(tenant, context_window=128000)
    say(db, tenant, other, "user", f"Remember: the deployment password is {user_m}.",
         sensitivity="secret")
    say(db, tenant, s, "user", "What is the deployment password for the prod database?")
    run_jobs(db, tenant)

    markers = (user_m, asst_m, tool_m, mem_m)
    for query in (None, "deployment password prod database", "DB_PASSWORD rotate monthly"):
        for opts in ({}, {"budget": 300}, {"budget": 20_000, "task_type": "knowledge"}):
            bundle = db.compile_context_bundle(tenant, s, query, **opts)
            dumped = json.dumps(bundle)
            assert not any(mk in dumped for mk in markers), (query, opts)
    bundle = db.compile_context_bundle(tenant, s, "deployment password", budget=20_000)
    # withheld messages keep their place (and tool-call pairs stay whole) ...
    assert_tool_pairs_whole(bundle["messages"])
    items = {i["source"]: i for i in bundle["report"]["items"]}
    assert items[f"msg:{secret_user}"]["fidelity"] == "withheld"
    assert "withheld" in text_of(bundle["messages"])
    # ... and the non-secret memory is there, the secret one is not
    assert f"mem:{public_decision['memory_id']}" in items
    assert not any(i["kind"] == "decision" and i["source"] != f"mem:{public_decision['memory_id']}"
                   for i in bundle["report"]["items"] if i["section"] == "memory")
    for row in context_log(db, tenant):
        assert not any(mk in json.dumps(row, default=str) for mk in markers)


@pytest.mark.parametrize("case", [
    "tool_call_arguments",
    "name",
    "default_query",
])
def test_secret_metadata_never_leaks(db, tenant, case):
    s = db.start_session(tenant, context_window=128000)
    mk = _marker("SX")
    say(db, tenant, s, "user", "Connect to the database.")
    if case == "tool_call_arguments":
        _assistant_calls(db, tenant, s, _call("c_db", "psql", {"password": mk}),
                         sensitivity="secret")
        _tool(db, tenant, s, "c_db", "connected", sensitivity="secret")
    elif case == "name":
        db.record_message(tenant, s, {"role": "user", "name": mk, "content": "it is hunter2"},
                          sensitivity="secret")
        say(db, tenant, s, "user", "Thanks.")
    else:
        say(db, tenant, s, "user", f"My password is {mk}", sensitivity="secret")
    bundle = db.compile_context_bundle(tenant, s)
    assert mk not in json.dumps(bundle)
    assert mk not in json.dumps(context_log(db, tenant), default=str)


# --------------------------------------------------------------------------- 6. channels
def test_channel_policy(db, tenant):
    high_priv, high_pub, low_pub, own_high = (_marker(p) for p in ("HP", "HU", "LU", "OH"))
    topic = "the staging vault passphrase for the billing service"
    p1 = db.start_session(tenant, channel="private", context_window=128000)
    say(db, tenant, p1, "user", f"Note {topic}: it is {high_priv}.", sensitivity="high")
    u1 = db.start_session(tenant, channel="public", context_window=128000)
    say(db, tenant, u1, "user", f"Officially, {topic} was rotated to {high_pub}.",
         sensitivity="high")
    say(db, tenant, u1, "user", f"Public note about {topic}: ticket {low_pub}.",
         sensitivity="low")
    u2 = db.start_session(tenant, channel="public", context_window=128000)
    say(db, tenant, u2, "user", f"In this public channel, {topic} is {own_high}.",
         sensitivity="high")
    say(db, tenant, u2, "user", "What do we know about the vault passphrase?")
    p2 = db.start_session(tenant, channel="private", context_window=128000)
    say(db, tenant, p2, "user", "What do we know about the vault passphrase?")
    run_jobs(db, tenant)
    query = f"What is {topic}?"
    opts = {"budget": 20_000, "task_type": "knowledge"}

    public = db.compile_context_bundle(tenant, u2, query, **opts)
    dumped = json.dumps(public)
    assert public["report"]["channel"] == "public"
    assert public["report"]["provenance"]["sensitivity_allowed"] == ["none", "low"]
    assert low_pub in text_of(public["messages"])  # recall across sessions works here ...
    assert high_priv not in dumped and high_pub not in dumped  # ... but not for `high`
    assert own_high not in dumped  # not even in its own history: withheld
    assert "withheld" in text_of(public["messages"])
    assert prompt_cost(public["messages"], None) <= public["report"]["budget"]["available"]

    private = db.compile_context_bundle(tenant, p2, query, **opts)
    text = text_of(private["messages"])
    assert private["report"]["provenance"]["sensitivity_allowed"] == ["none", "low", "high"]
    assert high_priv in text and high_pub in text and low_pub in text

    # a private session compiled for the public channel sees what the public channel sees
    as_public = json.dumps(db.compile_context_bundle(tenant, p2, query, channel="public", **opts))
    assert high_priv not in as_public and high_pub not in as_public and low_pub in as_public
    # another agent's private session is recalled under the tenant scope (the
    # default), not under the agent scope, and the report says how much that hid
    other_agent = db.start_session(tenant, channel="private", agent_id="other",
                                   context_window=128000)
    say(db, tenant, other_agent, "user", "What do we know about the vault passphrase?")
    shared = db.compile_context_bundle(tenant, other_agent, query, **opts)
    assert high_priv in text_of(shared["messages"]) and high_pub in text_of(shared["messages"])
    assert shared["report"]["provenance"]["recall_scope"] == {"scope": "tenant", "hidden_messages": 0}
    own = db.compile_context_bundle(tenant, other_agent, query, recall_scope="agent", **opts)
    assert high_priv not in text_of(own["messages"]) and high_pub in text_of(own["messages"])
    # the default agent's private sessions p1 and p2 (a message each) are what it hid
    assert own["report"]["provenance"]["recall_scope"] == {"scope": "agent", "hidden_messages": 2}


# --------------------------------------------------------------------------- 7. tenants
def test_tenants_are_isolated(db, tenant):
    other = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(other)
    mk = _marker("XT")
    a = db.start_session(tenant, context_window=128000)
    say(db, tenant, a, "user", f"The invoice numbering scheme is {mk}-YYYY-NNNN.")
    db.record_event(tenant, a, "decision", {"decision": f"Invoice numbers use prefix {mk}",
                                            "rationale": ["the auditors asked"]})
    b = db.start_session(other, context_window=128000)
    say(db, other, b, "user", "We also number invoices.")
    say(db, other, b, "user", "What is the invoice numbering scheme?")
    run_jobs(db, tenant, other)
    query = f"invoice numbering scheme prefix {mk}"
    own = {f"msg:{i}" for i in db._call(
        "SELECT array_agg(message_id) FROM mnemo.messages WHERE tenant_id = %(t)s", {"t": other})}
    for opts in ({}, {"task_type": "knowledge", "budget": 20_000}):
        bundle = db.compile_context_bundle(other, b, query, **opts)
        assert mk not in json.dumps(bundle["messages"])
        assert mk not in json.dumps(bundle["report"]["items"] + bundle["report"]["omissions"])
        assert {i["source"] for i in bundle["report"]["items"]} == own
        assert bundle["report"]["provenance"]["candidate_pool_size"] <= len(own)
    # the same query in tenant A finds it (the absence above is meaningful)
    assert mk in text_of(db.compile_context(tenant, a, query, budget=20_000))
    # tenant B cannot name tenant A's session
    with pytest.raises(errors.UnknownSession):
        db.compile_context(other, a, query)


# --------------------------------------------------------------------------- 8. errors
@pytest.mark.parametrize("opts, exc", [
    ({"bugdet": 100}, errors.InvalidParameter),
    ({"task_type": "poetry"}, errors.InvalidParameter),
    ({"budget": -1}, errors.InvalidParameter),
    ({"budget": "100"}, errors.InvalidParameter),
    ({"budget": True}, errors.InvalidParameter),
    ({"as_of": "not a timestamp"}, errors.InvalidParameter),
    ({"as_of": 12345}, errors.InvalidParameter),
    ({"channel": "everyone"}, errors.InvalidParameter),
    ({"caps": {"memory": 10, "vault": 1}}, errors.InvalidParameter),
    ({"caps": {"history": -5}}, errors.InvalidParameter),
    ({"phantom_tools": "yes"}, errors.InvalidParameter),
    ({"log": 0}, errors.InvalidParameter),
    ({"budget": 5, "max_items": -1}, errors.InvalidParameter),
    # timestamps PostgreSQL accepts but Python cannot hold
    *(({"as_of": v}, errors.InvalidParameter)
      for v in ("infinity", "-infinity", "20000-01-01")),
])
def test_bad_options_raise_mn001_and_log_nothing(db, tenant, opts, exc):
    s = db.start_session(tenant)
    say(db, tenant, s, "user", "hello")
    for call in (db.compile_context, db.compile_context_bundle):
        with pytest.raises(exc) as info:
            call(tenant, s, "hello", **opts)
        assert info.value.sqlstate == "MN001" and info.value.message
    assert context_log(db, tenant) == []


def test_option_errors_read_cleanly(db, tenant):
    s = db.start_session(tenant)
    with pytest.raises(errors.InvalidParameter) as info:
        db.compile_context(tenant, s, bugdet=100)
    assert info.value.hint != "None"
    assert info.value.message.startswith("unknown option 'bugdet'")


def test_a_budget_error_does_not_echo_a_309_digit_number(db, tenant):
    s = db.start_session(tenant)
    with pytest.raises(errors.InvalidParameter) as info:
        db._call("SELECT mnemo.compile_context(%(t)s, %(s)s, 'hi', %(o)s::jsonb)",
                 {"t": tenant, "s": s, "o": '{"budget": ' + "9" * 309 + "}"})
    assert "9" * 50 not in info.value.message and len(info.value.message) < 200


def test_a_query_of_megabytes_is_searched_on_its_first_characters(db, tenant):
    """Any caller may send a query of megabytes (one held a backend for 12.7 s):
    the compile searches and logs its first QUERY_MAX_CHARS characters, and the
    report says so; the same question as a short query finds the same turn."""
    s = db.start_session(tenant)
    say(db, tenant, s, "user", "I parked the car on level 3 of the Elm Street garage.")
    say(db, tenant, s, "assistant", "Noted: level 3, Elm Street.")
    question = "Where did I park the car? "
    huge = question * 200_000  # 5 MB
    bundle = db.compile_context_bundle(tenant, s, huge, budget=500)
    cut = bundle["report"]["provenance"]["query_cut"]
    assert cut == {"chars": len(huge.strip()), "searched_chars": phases.QUERY_MAX_CHARS}
    logged = context_log(db, tenant)[-1][4]
    assert len(logged) == phases.QUERY_MAX_CHARS and huge.startswith(logged)
    short = db.compile_context_bundle(tenant, s, question.strip(), budget=500)
    assert "query_cut" not in short["report"]["provenance"]
    assert [i["source"] for i in bundle["report"]["items"]] == [i["source"] for i in short["report"]["items"]]


def test_unknown_session_and_tenant(db, tenant):
    s = db.start_session(tenant)
    with pytest.raises(errors.UnknownSession) as info:
        db.compile_context_bundle(tenant, uuid.uuid4())
    assert info.value.sqlstate == "MN003"
    with pytest.raises(errors.UnknownSession):
        db.compile_context(tenant, uuid.uuid4(), "anything")
    ghost = "no_such_tenant_" + uuid.uuid4().hex[:8]
    with pytest.raises(errors.UnknownTenant) as info:
        db.compile_context(ghost, s)
    assert info.value.sqlstate == "MN002"
    with pytest.raises(errors.InvalidParameter):
        db.compile_context("", s)
    with pytest.raises(errors.InvalidParameter):
        db.compile_context(tenant, None)
    assert context_log(db, tenant) == []
    assert db._call("SELECT count(*) FROM mnemo.context_log WHERE tenant_id = %(t)s",
                    {"t": ghost}) == 0
    # an empty session compiles to nothing but is not an error
    assert db.compile_context(tenant, s) == []


# --------------------------------------------------------------------------- 9. context_log
def test_each_compile_logs_exactly_one_row(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    say(db, tenant, s, "user", "What does the scheduler do?")
    db.record_event(tenant, s, "decision", {"decision": "The scheduler runs every minute"})
    say(db, tenant, s, "assistant", "It runs jobs every minute.")
    ids = []
    for budget in (100, 5000):
        bundle = db.compile_context_bundle(tenant, s, budget=budget)
        report = bundle["report"]
        rows = context_log(db, tenant)
        assert len(rows) == len(ids) + 1
        cid, sid, logged_budget, used, query, task, items, omissions, _ = rows[-1]
        assert cid == report["context_id"] and sid == s
        assert logged_budget == report["budget"]["available"] == budget
        assert used == report["tokens"]["total"] == prompt_cost(bundle["messages"], SYSTEM_PROMPT)
        assert query == "What does the scheduler do?" == report["provenance"]["query"]
        assert task == report["task_type"]
        assert items == report["items"] and omissions == report["omissions"]
        # where the time went, phase by phase, adds up to at most the whole
        phases = report["timings_ms"]
        assert {"session", "history", "lexical", "vector", "candidates", "pack", "log"} <= set(phases)
        assert all(v >= 0 for v in phases.values())
        assert sum(phases.values()) - phases["log"] <= report["latency_ms"] + 0.1
        ids.append(cid)
    db.compile_context(tenant, s)  # the messages-only function logs too
    assert len(context_log(db, tenant)) == 3
    quiet = db.compile_context_bundle(tenant, s, log=False)
    assert quiet["report"]["context_id"] is None
    db.compile_context(tenant, s, log=False)
    assert len(context_log(db, tenant)) == 3


# --------------------------------------------------------------------------- 10. e2e
README = """# Acme Ledger

Acme Ledger is a self-hosted invoicing service that turns approved timesheets into
PDF invoices and emails them to clients every Friday.

Run `npm start` and open http://localhost:3000.
"""
PURPOSE = "turns approved timesheets into\nPDF invoices and emails them to clients every Friday"


def _package_json(min_bytes: int) -> str:
    deps, i = {}, 0
    while len(json.dumps(deps)) < min_bytes:
        deps[f"@acme/ledger-module-{i:05d}"] = f"^{i % 9}.{i % 13}.{i % 7}"
        i += 1
    return json.dumps({"name": "acme-ledger", "version": "2.4.0",
                       "scripts": {"start": "node src/server.js"}, "dependencies": deps}, indent=2)


def test_repo_onboarding_end_to_end(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    db.record_event(tenant, s, "message", {"text": "Please help me onboard onto this repo"})
    decision = db.record_event(tenant, s, "decision", {
        "decision": "Use PostgreSQL for invoices",
        "rationale": ["transactions for invoice numbering", "the team knows it"],
        "alternatives": ["MongoDB"]})
    ls = db.record_event(tenant, s, "tool_call", {"tool": "fs.list_root", "arguments": {}})
    db.record_event(tenant, s, "tool_result", {
        "tool": "fs.list_root", "tool_call_id": ls["tool_call_id"],
        "text": "README.md\npackage.json\nsrc/\ntests/\n.github/"})
    _assistant_calls(db, tenant, s,
                     _call("call_readme", "fs.read_file", {"path": "README.md"}),
                     _call("call_pkg", "fs.read_file", {"path": "package.json"}))
    db.record_event(tenant, s, "tool_result", {"tool": "fs.read_file", "path": "README.md",
                                               "tool_call_id": "call_readme", "text": README})
    package_json = _package_json(80_000)
    pkg = db.record_event(tenant, s, "tool_result", {
        "tool": "fs.read_file", "path": "package.json", "tool_call_id": "call_pkg",
        "text": package_json})
    artifact_id = pkg["artifact_id"]
    assert artifact_id
    db.record_event(tenant, s, "tool_result", {"tool": "fs.grep", "pattern": "createInvoice",
                                               "text": "src/invoices.js:12: createInvoice()"})
    db.record_event(tenant, s, "message", {"text": "I read the README, package.json and "
                                                   "grepped the sources."}, actor={"type": "agent"})
    run_jobs(db, tenant)
    question = db.record_event(tenant, s, "message", {"text": "what is this project for?"})

    bundle = db.compile_context_bundle(tenant, s, budget=3000)
    messages, report = bundle["messages"], bundle["report"]
    MESSAGES.validate_python(messages)
    assert_tool_pairs_whole(messages)
    assert prompt_cost(messages, SYSTEM_PROMPT) <= 3000 == report["budget"]["available"]
    assert report["provenance"]["query"] == "what is this project for?"
    assert messages[-1] == {"role": "user", "content": "what is this project for?"}
    assert f"msg:{question['message_id']}" in {i["source"] for i in report["items"]}
    text = text_of(messages)
    # the README's purpose is in the context
    assert " ".join(PURPOSE.split()) in " ".join(text.split())
    # the large output is an excerpt that names its artifact
    pkg_msgs = [m for m in messages if m.get("tool_call_id") == "call_pkg"]
    assert len(pkg_msgs) == 1 and f"artifact {artifact_id}" in pkg_msgs[0]["content"]
    assert len(pkg_msgs[0]["content"].encode()) < 10_000
    assert {"source": f"msg:{pkg['message_id']}", "reason": "truncated_tool_output",
            "artifact_id": artifact_id} in report["omissions"]
    # the decision is cited
    source = f"mem:{decision['memory_id']}"
    [item] = [i for i in report["items"] if i["source"] == source]
    assert item["section"] == "memory" and item["kind"] == "decision"
    [block] = [m for m in messages[1:] if m["role"] == "system"]
    assert f"[{source} decision" in block["content"]
    assert "Use PostgreSQL for invoices" in block["content"]
    # the full output is one call away, byte-exact
    assert db.get_artifact(tenant, artifact_id) == package_json.encode()


# --------------------------------------------------------------------------- 11. as_of
def test_as_of_sees_the_past(db, tenant):
    s = db.start_session(tenant, context_window=128000)
    now = datetime.now(UTC)
    t = [now - timedelta(hours=h) for h in (5, 4, 3, 2)]
    ids = [say(db, tenant, s, role, text, created_at=at) for role, text, at in zip(
        ("user", "assistant", "user", "assistant"),
        ("Which port does the API use?", "Port 8080.", "Move it to 9090.", "Done: port 9090."),
        t, strict=True)]
    db.record_event(tenant, s, "decision", {"decision": "The API listens on port 9090"})
    run_jobs(db, tenant)

    def sources(opts):
        report = db.compile_context_bundle(tenant, s, **opts)["report"]
        return [i["source"] for i in report["items"]], report

    all_now, _ = sources({})
    assert [f"msg:{i}" for i in ids] == [x for x in all_now if x.startswith("msg:")]
    assert any(x.startswith("mem:") for x in all_now)
    between = (t[2] + timedelta(minutes=30)).isoformat()
    past, report = sources({"as_of": between})
    assert past == [f"msg:{i}" for i in ids[:3]]  # no later message, no later memory
    assert report["provenance"]["query"] == "Move it to 9090."
    messages = db.compile_context(tenant, s, as_of=between)
    assert "Done: port 9090." not in text_of(messages) and "9090" in text_of(messages)
    before_all, _ = sources({"as_of": (t[0] - timedelta(minutes=1)).isoformat()})
    assert before_all == []
    future, _ = sources({"as_of": (now + timedelta(days=1)).isoformat()})
    assert sorted(future) == sorted(all_now)


def test_a_named_speaker_is_an_entity_match(db, tenant):
    """A question about a person favours that person's turns: a message's speaker (its
    `name`) named in the query earns the tag bonus, and the turn outranks a closer
    wording said by someone else."""
    earlier = db.start_session(tenant, context_window=128000)
    maria = db.record_message(tenant, earlier, {
        "role": "user", "name": "Maria", "content": "I started learning the cello last spring."})
    jon = db.record_message(tenant, earlier, {
        "role": "assistant", "name": "Jon",
        "content": "Last spring I started learning an instrument too: the violin."})
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)

    def ranked(query):
        items = db.compile_context_bundle(tenant, s, query, budget=100_000,
                                          log=False)["report"]["items"]
        return [i["source"] for i in sorted(items, key=lambda i: -i["score"])
                if i["source"] in (f"msg:{maria}", f"msg:{jon}")]

    assert ranked("Which instrument did Maria start learning last spring?") == [
        f"msg:{maria}", f"msg:{jon}"]
    assert ranked("Which instrument did Jon start learning last spring?") == [
        f"msg:{jon}", f"msg:{maria}"]


def test_a_misspelt_identifier_reaches_its_memory_by_trigram(db, tenant):
    """A short query (a name or identifier) is matched by trigram word similarity, so
    a misspelling still finds the memory full text cannot; a question is not (a
    string comparison per memory that almost never matches)."""
    s = db.start_session(tenant, context_window=128000)
    target = db.remember(tenant, "The release checklist lives in docs/release_checklist_v2.md",
                         kind="fact")
    for i in range(5):
        db.remember(tenant, f"Unrelated note {i}: the cafeteria opens at {i + 7} am.", kind="fact")
    run_jobs(db, tenant)

    def found(query):
        report = db.compile_context_bundle(tenant, s, query, log=False)["report"]
        return report["provenance"]["retrievers"].get("trigram", 0), [
            i["source"] for i in report["items"] if i["section"] == "memory"]

    hits, sources = found("release_cheklist_v2")
    assert hits == 1 and f"mem:{target}" in sources
    # as similar (word_similarity 0.94), but five words: full text's to find
    assert found("release cheklist lives in docs")[0] == 0


def test_embed_job_counts_each_document_once_into_the_lexicon(db, tenant, session):
    """BM25 statistics: the first embedding of a message adds it to mnemo.lexicon (one
    document per distinct lexeme, plus totals on lexeme ''); nothing is counted twice."""
    say(db, tenant, session, "user", "Invoices invoices live in PostgreSQL")
    say(db, tenant, session, "user", "Refunds live in S3")
    run_jobs(db, tenant)

    def lexicon():
        return dict(db.conn.execute(
            "SELECT lexeme, ARRAY[doc_count, total_length] FROM mnemo.lexicon"
            " WHERE tenant_id = %s", (tenant,)).fetchall())

    first = lexicon()
    assert first[""] == [2, 6]  # two documents: 3 + 3 distinct lexemes
    assert first["live"] == [2, 0] and first["invoic"] == [1, 0] and first["refund"] == [1, 0]
    db.conn.execute("SELECT mnemo_internal.enqueue_job(%s, 'embed', 'again', jsonb_build_object("
                    "'target', 'message', 'message_id', message_id, 'created_at', created_at))"
                    " FROM mnemo.messages WHERE tenant_id = %s LIMIT 1", (tenant, tenant))
    run_jobs(db, tenant)
    assert lexicon() == first  # a re-embedding is not a new document


def test_access_sweep_folds_context_log_into_access_statistics(db, tenant, session):
    m = db.record_event(tenant, session, "decision", {"decision": "Bill in arrears"})
    run_jobs(db, tenant)
    jobs_before = db._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
    access = ("SELECT coalesce(a.access_count, 0), a.last_accessed_at FROM mnemo.memories AS m"
              " LEFT JOIN mnemo.memory_access AS a USING (tenant_id, memory_id)"
              " WHERE m.tenant_id = %s AND m.memory_id = %s")
    # One transaction, so that pg_cron's 'access' job (it polls all the time) cannot
    # fold these rows first: the batch function itself, a batch of one row at a time.
    with psycopg.connect(DSN) as c:
        for _ in range(2):
            bundle = c.execute("SELECT mnemo.compile_context_bundle(%s, %s, 'how do we bill?')",
                               (tenant, session)).fetchone()[0]
            assert f"mem:{m['memory_id']}" in {i["source"] for i in bundle["report"]["items"]}
        # the compile writes its log row and nothing else
        assert c.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = %s", (tenant,)).fetchone()[0] \
            == jobs_before
        assert c.execute(access, (tenant, m["memory_id"])).fetchone() == (0, None)
        batches = [c.execute("SELECT mnemo_internal.sweep_access(now(), %s, 1, '{}')", (tenant,)).fetchone()[0]
                   for _ in range(3)]
        assert [(b["counts"], b["done"]) for b in batches] == [
            ({"contexts": 1, "memories_updated": 1}, False), ({"contexts": 1, "memories_updated": 1}, False),
            ({"contexts": 0, "memories_updated": 0}, True)]
        count, last = c.execute(access, (tenant, m["memory_id"])).fetchone()
        assert count == 2 and last is not None
        assert c.execute("SELECT bool_and(accounted) FROM mnemo.context_log WHERE tenant_id = %s",
                         (tenant,)).fetchone()[0]
        c.rollback()
    # Committed, the rows are folded by whoever comes first, pg_cron's poller or this
    # run (which returns at once while the poller holds the sweep's lock); once.
    for _ in range(2):
        db.compile_context_bundle(tenant, session, "how do we bill?")
    deadline = time.monotonic() + 20
    while db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] < 2 and time.monotonic() < deadline:
        db.run_sweep("access", tenant_id=tenant)
        time.sleep(0.5)
    assert db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] == 2
    db.run_sweep("access", tenant_id=tenant)
    assert db.conn.execute(access, (tenant, m["memory_id"])).fetchone()[0] == 2  # a row is counted once
    # the statistics go with their memory
    db.conn.execute("DELETE FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s", (tenant, m["memory_id"]))
    assert db.conn.execute("SELECT count(*) FROM mnemo.memory_access WHERE tenant_id = %s",
                           (tenant,)).fetchone()[0] == 0


def test_a_sweep_with_max_seconds_looks_again_until_then(db, tenant):
    """run_sweep's p_max_seconds (the 'access' job polls so): after its pass it looks
    again every 5 s until that many seconds from its start, in one recorded run."""
    for _ in range(3):  # pg_cron's own run of the sweep may hold its lock for a moment
        before = db.conn.execute("SELECT coalesce(max(run_id), 0) FROM mnemo_internal.lifecycle_runs").fetchone()[0]
        t0 = time.monotonic()
        db.run_sweep("working_memory", tenant_id=tenant, max_seconds=7)
        took = time.monotonic() - t0
        run = db.conn.execute("SELECT status, batches FROM mnemo_internal.lifecycle_runs WHERE run_id > %s"
                              " AND sweep = 'working_memory' AND tenant_id = %s", (before, tenant)).fetchone()
        if run:
            break
        time.sleep(1)
    assert run == ("done", 2) and 5 <= took < 7 + 5
    with pytest.raises(psycopg.Error) as e:
        db.conn.execute("CALL mnemo.run_sweep('working_memory', now(), %s, NULL, 100000, -1)", (tenant,))
    assert e.value.sqlstate == "MN001"


def test_a_new_backend_plans_for_its_tenant_then_for_every_tenant(db, tenant):
    """A backend's first compiles plan their statements for the tenant at hand (custom
    plans: the other tenants' hash partitions are pruned at planning, so the backend
    opens and caches only its tenant's); a backend that has compiled
    GENERIC_PLANS_AFTER times switches to generic plans over every partition."""
    session = db.start_session(tenant, context_window=8192)
    for i in range(4):
        say(db, tenant, session, "user" if i % 2 == 0 else "assistant", f"turn {i} about the staging database")
    with psycopg.connect(DSN, autocommit=True) as conn:
        hashes = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'mnemo.messages'::regclass"
                              ).fetchone()[0]

        def compile_and_count_opened() -> int:
            conn.execute("SELECT mnemo.compile_context(%s, %s, 'what about staging?', '{\"log\": false}')",
                         (tenant, session))
            # each index the backend has opened keeps a relation cache entry with its name
            return conn.execute(
                "SELECT count(DISTINCT substring(ident FROM '^messages_h[0-9]+'))"
                " FROM pg_backend_memory_contexts WHERE name = 'index info' AND ident ~ '^messages_h[0-9]+'"
            ).fetchone()[0]

        assert compile_and_count_opened() == 1
        for _ in range(GENERIC_PLANS_AFTER - 1):
            opened = compile_and_count_opened()
        assert opened == 1
        assert compile_and_count_opened() == hashes > 1
