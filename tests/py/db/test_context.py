"""compile_context and compile_context_bundle against the real database.

Every test commits and uses its own random tenant. Token costs are recomputed here with
the same counter the server uses (plpy/mnemo_db/tokens.py), so "B is a hard limit" is
checked on the messages actually returned, not on the report's own arithmetic.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import openai
import pytest
from helpers import (
    assert_tool_pairs_whole,
    assistant_calls,
    big_output,
    pin_memory,
    prompt_cost,
    run_jobs,
    say,
    text_of,
    tool_call,
    tool_result,
)
from mnemo_db import tokens
from mnemo_db.compile import policy
from mnemo_db.compile.levels import message_levels
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import TypeAdapter

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
TOOLS = TypeAdapter(list[ChatCompletionToolParam])
SYSTEM_PROMPT = "You are a careful coding assistant. Answer from the repository's files."



pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")


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
    assistant_calls(db, tenant, s, tool_call("call_ls", "fs_list_root"),
                     tool_call("call_rd", "fs_read_file", {"path": "README.md"}),
                     content="Looking at the repository.")
    tool_result(db, tenant, s, "call_ls", "README.md\npackage.json\nsrc/")
    tool_result(db, tenant, s, "call_rd", "# Ledger\nLedger turns timesheets into invoices.")
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
            assistant_calls(db, tenant, s, tool_call("call_log", "shell", {"cmd": "cat big.log"}),
                             tool_call("call_ver", "shell", {"cmd": "node --version"}))
            tool_result(db, tenant, s, "call_log", big_output(70_000))
            tool_result(db, tenant, s, "call_ver", "v20.11.1")
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
            pin_memory(db, tenant, m["memory_id"])
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
    pin_memory(db, tenant, m["memory_id"])
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
            pin_memory(db, tenant, m["memory_id"])
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


DISHES = ("risotto", "ramen", "paella", "curry", "tacos", "pho", "lasagna", "gumbo", "falafel", "bibimbap")
PLACES = ("Lisbon", "Kyoto", "Oaxaca", "Hanoi", "Tbilisi", "Bergen", "Cusco", "Zanzibar", "Quebec", "Porto")


def test_a_short_question_in_a_long_history_gets_a_small_memory_block(db, tenant):
    """Issue 42: with no budget the memory block took whatever the window left: a
    16-character question carried ~11k tokens of memory upstream (the proxy, gpt-4o),
    a LongMemEval user's whole haystack in a 128k window. Without a budget the block
    is capped whatever the window; the cap is what bounds it (caps.memory lifts it), a
    tenant sets its own, and a budget the caller names is still filled."""
    old = db.start_session(tenant, context_window=128000)
    for i in range(160):
        dish, place = DISHES[i % 10], PLACES[(i * 3) % 10]
        say(db, tenant, old, "user" if i % 2 == 0 else "assistant",
            f"Day {i}: we talked about cooking {dish} the way they do in {place}, which spices "
            f"to buy ({i * 7 % 13} of them), how long to simmer it ({i % 9 + 1} hours) and what "
            f"to serve beside it; any suggestions for a {dish} night with {i % 6 + 2} guests?")
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)

    def block(**opts) -> dict:
        return db.compile_context_bundle(tenant, s, "Any suggestions?", log=False, **opts)["report"]

    cap = policy.DEFAULT_MEMORY_CAP
    r = block()
    assert r["budget"]["available"] > 100_000 and r["budget"]["memory_limit"] == cap
    assert 0 < r["tokens"]["memory"] <= cap
    lifted = block(caps={"memory": 1_000_000})["tokens"]["memory"]
    assert lifted > 3 * cap  # the history would have filled it
    assert block(budget=6000)["tokens"]["memory"] > cap  # an explicit budget is filled
    db._call("UPDATE mnemo.tenants SET config = config || '{\"memory_cap\": 500}' WHERE tenant_id = %(t)s",
             {"t": tenant})
    assert 0 < block()["tokens"]["memory"] <= 500
    db._call("UPDATE mnemo.tenants SET config = config || '{\"memory_cap\": null}' WHERE tenant_id = %(t)s",
             {"t": tenant})
    assert block()["tokens"]["memory"] == lifted


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


# A long turn that says one thing the questions below ask about, and much else
_OFFSITE = (" After that we talked about the quarterly offsite for a long while: the venue by the lake, the"
            " bus that leaves at eight, who brings the projector, the vegetarian menu, the evening walk along"
            " the shore, the budget for the boat trip, and whether the slides should be ready by Thursday.")


def _block_line(messages: list[dict], source: str) -> str | None:
    """The memory block's line of an item, if the block has one."""
    block = next((m["content"] for m in messages if m["content"].startswith(policy.MEMORY_HEADER)), "")
    return next((line for line in block.splitlines() if line.startswith(f"[{source} ")), None)


def test_a_memory_that_says_what_its_turn_matched_in_fewer_tokens_stands_in_for_it(db, tenant):
    """Issue 42 §1: a short note that carries what made its long source turn relevant
    (its own match to the question at least the turn's) is sent in the turn's place,
    its line naming the turn for memory_restore; the report says so, and the tokens
    the turn took go to other candidates: here turns that the block could not hold
    beside the turn whole. The block still costs exactly what the report says. (The
    tenant turns it on: scoring.stand_in; off, the note goes as repeats_block.)"""
    db.conn.execute("UPDATE mnemo.tenants SET config = config || '{\"scoring\": {\"stand_in\": 1}}'"
                    " WHERE tenant_id = %s", [tenant])
    old = db.start_session(tenant, context_window=128000)
    turn_text = "Our staging database moved to the host db-stg-4.internal last week." + _OFFSITE * 3
    turn = say(db, tenant, old, "user", turn_text)
    port = say(db, tenant, old, "user", "Since the move the staging database listens on port 6543, and its"
               " backups run nightly at two to the bucket stg-backups; the read replica is db-stg-5.internal.")
    pool = say(db, tenant, old, "user", "The staging database's connection pool allows forty clients, and its"
               " credentials rotate on the first Monday of each month through the vault path secret/stg/db.")
    more = [say(db, tenant, old, "user", text) for text in (
        "The staging web servers restart every Sunday night after the weekly deploy of the release branch.",
        "Staging alerts go to the #stg-alerts channel, and the on-call engineer acknowledges them within an hour.",
        "The staging load balancer terminates TLS with a certificate that renews itself every sixty days.",
        "Nobody should run migrations on staging during the demo hours on Tuesday and Thursday afternoons.")]
    note = db.remember(tenant, "The staging database host is db-stg-4.internal", kind="fact",
                       options={"source_message_ids": [turn]})
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)
    bundle = db.compile_context_bundle(tenant, s, "Which host does the staging database use?",
                                       budget=360, log=False)
    report = bundle["report"]
    memory = {i["source"]: i for i in report["items"] if i["section"] == "memory"}
    assert f"msg:{turn}" not in memory and memory[f"mem:{note}"]["fidelity"] == "full"
    assert {"source": f"msg:{turn}", "reason": "stood_in", "stood_in_by": f"mem:{note}"} in report["omissions"]
    line = _block_line(bundle["messages"], f"mem:{note}")
    assert line is not None and line.endswith(f"db-stg-4.internal (msg:{turn})")
    # the freed tokens: every other turn is sent, which the block's limit could not
    # hold beside the turn whole (without the stand-in, three of them were left out)
    assert {f"msg:{m}" for m in (port, pool, *more)} <= memory.keys()
    whole = tokens.count(f"[msg:{turn} user] {turn_text}\n")
    others = sum(i["tokens"] for src, i in memory.items() if src != f"mem:{note}")
    assert whole + others > report["budget"]["memory_limit"]
    block = next(m for m in bundle["messages"] if m["content"].startswith(policy.MEMORY_HEADER))
    assert tokens.count_message(block) == report["tokens"]["memory"]
    # the turn is one call away
    restored = db.memory_restore(tenant, s, f"msg:{turn}")
    assert "db-stg-4.internal" in json.dumps(restored)


def test_a_memory_that_leaves_out_what_its_turn_matched_does_not_stand_in(db, tenant):
    """The other side of the test above: a note of the same long turn that says
    something else in it (the offsite) matches the question less than the turn, so
    the turn stays, and the note does not stand in for it."""
    db.conn.execute("UPDATE mnemo.tenants SET config = config || '{\"scoring\": {\"stand_in\": 1}}'"
                    " WHERE tenant_id = %s", [tenant])
    old = db.start_session(tenant, context_window=128000)
    turn = say(db, tenant, old, "user",
               "Our staging database moved to the host db-stg-4.internal last week." + _OFFSITE * 3)
    note = db.remember(tenant, "The quarterly offsite is at the venue by the lake", kind="fact",
                       options={"source_message_ids": [turn]})
    run_jobs(db, tenant)
    s = db.start_session(tenant, context_window=128000)
    report = db.compile_context_bundle(tenant, s, "Which host does the staging database use?",
                                       budget=1000, log=False)["report"]
    memory = {i["source"]: i["fidelity"] for i in report["items"] if i["section"] == "memory"}
    assert memory.get(f"msg:{turn}") == "full"
    assert not [o for o in report["omissions"] if o["reason"] == "stood_in"]
    assert f"mem:{note}" not in memory
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
    assistant_calls(db, tenant, s, tool_call("c_build", "shell", {"cmd": "make"}),
                     tool_call("c_test", "shell", {"cmd": "make test"}))
    tool_result(db, tenant, s, "c_build", "build ok")
    tool_result(db, tenant, s, "c_test", "12 passed")
    # a group where one call never got its result; the other call is kept alone
    assistant_calls(db, tenant, s, tool_call("c_lint", "shell", {"cmd": "ruff check"}),
                     tool_call("c_lost_1", "shell", {"cmd": "sleep 1000"}))
    tool_result(db, tenant, s, "c_lint", "All checks passed!")
    # a call-only message none of whose calls was answered: not sent at all
    lost_only = assistant_calls(db, tenant, s, tool_call("c_lost_2", "shell", {"cmd": "hang"}))
    # text plus an unanswered call: the text is kept, the call is not
    with_text = assistant_calls(db, tenant, s, tool_call("c_lost_3", "web", {"q": "x"}),
                                 content="Let me also search the web.")
    say(db, tenant, s, "user", "And the coverage?")
    assistant_calls(db, tenant, s, tool_call("c_cov", "shell", {"cmd": "coverage report"}))
    # the result arrives after an interleaved user message: it still follows its call
    say(db, tenant, s, "user", "Take your time.")
    tool_result(db, tenant, s, "c_cov", "TOTAL 91%\n" + "src/x.py 100%\n" * 200)
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
