"""The phantom tools (memory_query, memory_restore, memory_release) over paged objects:
restore pins, release stubs, query answers from evicted content (offline or through the
helper LLM), bad calls write nothing, and another tenant's ids are unknown. The session
harness is test_paging.py's."""

from __future__ import annotations

import json

import pytest
import test_paging
from test_paging import PIN_TURNS, Session, coding_session, source, text_of

from mnemosyne.errors import InvalidParameter, NotFound, UnknownSession, UnknownTenant

small_working_set = test_paging.small_working_set
warm_reads = test_paging.warm_reads  # autouse: reads stay (no cold-read rule)


# --------------------------------------------------------------------------- phantom tools
def test_restore_brings_full_fidelity_and_pins_for_n_turns(db, tenant):
    s, reads = coding_session(db, tenant)
    s.set(reads[0], "evicted")
    turn = s.turn()
    got = db.memory_restore(tenant, s.s, f"obj:{reads[0]}", "need the exact code")
    assert (got["from"], got["fidelity"], got["pinned_until_turn"]) == ("evicted", "full", turn + PIN_TURNS)
    assert "part_0_step_7(value)" in got["content"]
    assert s.residency()[reads[0]]["fidelity"] == "full"
    assert s.faults()[-1]["fault_type"] == "restore" and s.faults()[-1]["fidelity"] == "evicted"
    assert s.log()[-1]["trigger"] == "restore"
    # msg:N names the object holding message N
    msg = db._call("SELECT message_ids[2] FROM mnemo.semantic_objects WHERE object_id = %(o)s", {"o": reads[1]})
    assert db.memory_restore(tenant, s.s, f"msg:{msg}")["id"] == f"obj:{reads[1]}"


def test_release_sends_objects_to_stub(db, tenant):
    s, reads = coding_session(db, tenant)
    got = db.memory_release(tenant, s.s, [f"obj:{reads[0]}", f"obj:{reads[1]}"], "done with them")
    assert got == {"zone": "normal", "released": [{"id": f"obj:{reads[0]}", "fidelity": "stub"},
                                                  {"id": f"obj:{reads[1]}", "fidelity": "stub"}]}
    assert [r["trigger"] for r in s.log()] == ["release", "release"]
    text = text_of(s.compile())
    assert "[stub of msg:" in text and "part_0_step_7(value)" not in text
    assert "part_2_step_7(value)" in text


def test_query_answers_from_evicted_content_offline_and_the_object_stays_evicted(db, tenant):
    s, _ = coding_session(db, tenant)
    oid = s.read("src/billing/settings.py", "import os\nRETRY_BUDGET_SECONDS = 4242\nMAX_INVOICES = 17\n"
                 + source("settings", 30))
    s.say("user", "Now look at the reports.")
    s.set(oid, "evicted")
    got = db.memory_query(tenant, s.s, "What is RETRY_BUDGET_SECONDS set to?", max_tokens=60)
    assert "RETRY_BUDGET_SECONDS = 4242" in got["answer"]
    assert got["sources"] == [f"obj:{oid}"] and got["method"] == "extractive"
    assert got["tokens"] <= 60 < got["restore_tokens"]
    assert s.residency()[oid]["fidelity"] == "evicted"
    micro = s.faults()[-1]
    assert (micro["fault_type"], micro["object_id"], micro["fidelity"]) == ("micro", oid, "evicted")
    assert micro["avoided_tokens"] == got["restore_tokens"] and micro["answer_tokens"] == got["tokens"]


def test_query_through_the_helper_llm_answers_over_the_full_content(db, tenant, fake_llm):
    s, _ = coding_session(db, tenant, files=2)
    oid = s.read("src/billing/settings.py", "RETRY_BUDGET_SECONDS = 4242\n" + source("settings", 30))
    s.set(oid, "evicted")
    srv = fake_llm("good", good={"answer": "The retry budget is 4242 seconds.", "sources": [f"obj:{oid}"]})
    got = db.memory_query(tenant, s.s, "How long is the retry budget?", "RETRY_BUDGET_SECONDS", 80)
    assert (got["answer"], got["sources"], got["method"]) == (
        "The retry budget is 4242 seconds.", [f"obj:{oid}"], "helper_llm")
    sent = json.dumps(srv.requests[-1]["body"]["messages"])
    assert "RETRY_BUDGET_SECONDS = 4242" in sent and "settings_step_29" in sent  # the full content
    assert s.residency()[oid]["fidelity"] == "evicted"
    assert s.faults()[-1]["fault_type"] == "micro"


def test_query_falls_back_to_extractive_when_the_helper_fails(db, tenant, fake_llm):
    s, _ = coding_session(db, tenant, files=1)
    oid = s.read("src/billing/settings.py", "RETRY_BUDGET_SECONDS = 4242\n")
    fake_llm("malformed", retries=0)
    got = db.memory_query(tenant, s.s, "RETRY_BUDGET_SECONDS?", max_tokens=40)
    assert got["method"] == "extractive" and "4242" in got["answer"] and got["sources"] == [f"obj:{oid}"]


def test_handle_tool_call_answers_each_phantom_tool(db, tenant):
    s, reads = coding_session(db, tenant, files=2)

    def call(name, args, cid="call_x"):
        return db.handle_tool_call(tenant, s.s, {"id": cid, "type": "function",
                                                 "function": {"name": name, "arguments": json.dumps(args)}})
    out = call("memory_release", {"ids": [f"obj:{reads[0]}"]}, "r1")
    assert out == {"role": "tool", "tool_call_id": "r1", "content": f"Released obj:{reads[0]} (now stub)."}
    out = call("memory_query", {"question": "what does part_0_step_3 return?", "max_tokens": 50}, "q1")
    assert out["tool_call_id"] == "q1" and "part_0_step_3" in out["content"] and f"obj:{reads[0]}" in out["content"]
    out = call("memory_restore", {"id": f"obj:{reads[0]}", "reason": "edit it"}, "x1")
    assert out["content"].startswith(f"obj:{reads[0]} (file_context") and "part_0_step_39(value)" in out["content"]


@pytest.mark.parametrize(("tool_call", "exc"), [
    ({"id": "c", "type": "function", "function": {"name": "rm_rf", "arguments": "{}"}}, InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_query", "arguments": "{not json"}}, InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_query", "arguments": "[1]"}}, InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_query", "arguments": "{}"}}, InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_query",
                                                  "arguments": '{"question": "x", "max_tokens": 5}'}}, InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_restore", "arguments": '{"id": 12}'}},
     InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_restore", "arguments": '{"id": "file:12"}'}},
     InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_restore", "arguments": '{"id": "obj:999999999"}'}},
     NotFound),
    ({"id": "c", "type": "function", "function": {"name": "memory_release", "arguments": '{"ids": []}'}},
     InvalidParameter),
    ({"id": "c", "type": "function", "function": {"name": "memory_release", "arguments": '{"ids": ["x"], "y": 1}'}},
     InvalidParameter),
    ({"type": "function", "function": {"name": "memory_query"}}, InvalidParameter),
    ("memory_query", InvalidParameter),
])
def test_bad_tool_calls_raise_project_errors_and_write_nothing(db, tenant, tool_call, exc):
    s, _ = coding_session(db, tenant, files=1)
    before = (s.log(), s.faults(), s.residency())
    with pytest.raises(exc):
        db.handle_tool_call(tenant, s.s, tool_call)
    assert (s.log(), s.faults(), s.residency()) == before


def test_another_tenants_ids_and_sessions_are_unknown(db, tenant):
    s, reads = coding_session(db, tenant, files=1)
    other_tenant = tenant + "_b"
    db.create_tenant(other_tenant)
    other = Session(db, other_tenant)
    other.say("user", "hello")
    with pytest.raises(NotFound):
        db.memory_restore(other_tenant, other.s, f"obj:{reads[0]}")
    with pytest.raises(UnknownSession):
        db.memory_restore(other_tenant, s.s, f"obj:{reads[0]}")
    with pytest.raises(UnknownTenant):
        db.memory_query("no_such_tenant_x", s.s, "anything")
    assert s.residency()[reads[0]]["fidelity"] == "full"


def test_a_memory_restored_then_forgotten_leaves_no_object(db, tenant):
    s, _ = coding_session(db, tenant, files=1)
    mid = db.remember(tenant, "The staging database listens on port 6543", kind="fact")
    got = db.memory_restore(tenant, s.s, f"mem:{mid}")
    assert got["content"] == "The staging database listens on port 6543" and got["fidelity"] == "full"
    from conftest import drain_jobs
    drain_jobs(db, tenant, worker=17)  # its embedding: retrievable
    bundle = db.compile_context_bundle(tenant, s.s, "staging database port")
    items = {i["source"]: i for i in bundle["report"]["items"]}
    assert items[f"mem:{mid}"]["pinned"] and items[f"mem:{mid}"]["fidelity"] == "full"  # while the pin lasts
    assert db.forget(tenant, mid) == 1
    assert db._call("SELECT count(*) FROM mnemo.semantic_objects WHERE tenant_id = %(t)s AND memory_id = %(m)s",
                    {"t": tenant, "m": mid}) == 0


def test_query_answers_from_the_tenants_other_sessions_and_memories(db, tenant):
    """Issue 40: "Which city did I move to?", told in an earlier session, was answered
    "Nothing in this session's memory answers that." memory_query now searches what
    this session may see beyond its own context: the tenant's memories and the history
    of its other sessions, by the compile's rules (another agent's `agent` session stays
    its own)."""
    from conftest import drain_jobs
    earlier = db.start_session(tenant, agent_id="assistant")
    db.record_message(tenant, earlier, {"role": "user", "content": "Big news: I moved to Lisbon in March."})
    hidden = db.start_session(tenant, agent_id="other-agent", channel="agent")
    db.record_message(tenant, hidden, {"role": "user", "content": "The vault combination is 31-7-22."})
    mem = db.remember(tenant, "The user's favourite editor is Helix.", kind="preference")
    now = db.start_session(tenant, agent_id="assistant")
    db.record_message(tenant, now, {"role": "user", "content": "Hello again."})
    drain_jobs(db, tenant, worker=41)  # the messages' embeddings, as the job runner makes them
    got = db.memory_query(tenant, now, "Which city did I move to?", max_tokens=60)
    assert "Lisbon" in got["answer"] and any(s.startswith("msg:") for s in got["sources"]), got
    got = db.memory_query(tenant, now, "What is my favourite editor?", max_tokens=60)
    assert "Helix" in got["answer"] and f"mem:{mem}" in got["sources"], got
    got = db.memory_query(tenant, now, "What is the vault combination?", max_tokens=60)
    assert "31-7-22" not in got["answer"], got


def test_restore_brings_back_a_turn_of_another_session_that_the_session_may_see(db, tenant):
    """Issue 42 §1: the memory block names turns of other sessions (a recalled turn
    abbreviated, or one a memory stands in for), and memory_restore
    brings such a turn back whole, by the rules memory_query's search keeps: another
    agent's `agent` session stays its own, and an id of no turn is still unknown."""
    earlier = db.start_session(tenant, agent_id="assistant")
    told = db.record_message(tenant, earlier, {"role": "user", "content": "Big news: I moved to Lisbon in March."})
    hidden = db.start_session(tenant, agent_id="other-agent", channel="agent")
    secret = db.record_message(tenant, hidden, {"role": "user", "content": "The vault combination is 31-7-22."})
    now = db.start_session(tenant, agent_id="assistant")
    got = db.memory_restore(tenant, now, f"msg:{told}")
    assert got["id"] == f"msg:{told}" and got["fidelity"] == "full" and "Lisbon in March" in got["content"]
    with pytest.raises(NotFound):
        db.memory_restore(tenant, now, f"msg:{secret}")
    with pytest.raises(NotFound):
        db.memory_restore(tenant, now, f"msg:{told + 10_000_000}")
