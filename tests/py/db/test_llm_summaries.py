"""Summaries written by the helper LLM (issue 5, docs/design.md §Fidelity ladder): the summaries and
compaction sweeps ask a local fake OpenAI-compatible server (fake_llm.py) for the
detail / compact / stub ladder as JSON; a valid reply is stored with its declared
losses and method helper_llm; a reply that breaks the rules, a server that never
answers, or no configuration gives the offline summary (method offline)."""

from __future__ import annotations

import copy
import json
import re
import time

import pytest
from fake_llm import HANG_S
from lifecycle_checks import check_levels, present
from mnemo_db import tokens
from mnemo_db.formation.helper_llm import MalformedReply
from mnemo_db.lifecycle import llm_summarize, summarize
from test_lifecycle import NOW, _turns, check_compaction_consistent, last_run, memory, row, sweep

pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")

LOG = "\n".join([f"2031-01-01 10:00:{i:02d} INFO step {i} of the nightly import done in {i * 7} ms"
                 for i in range(40)]
                + ["2031-01-01 10:00:41 ERROR E_DISK_FULL: /var/lib/app/data.db is full (100%)"])
WHEN = "2031-03-10 12:00"


def stub_of(body: dict, description: str) -> str:
    """The stub line the prompt asks for, with a description."""
    fmt = re.search(r"exactly\n\s+(\".*\")", body["messages"][1]["content"]).group(1)
    return json.loads(fmt).replace("<one-line description>", description)


def good_reply(body: dict) -> dict:
    return {
        "detail": {"summary": "The nightly import ran 40 steps, each done in 0 to 273 ms, all logged at INFO"
                              " level between 10:00:00 and 10:00:39; then it stopped with the error E_DISK_FULL"
                              " because /var/lib/app/data.db is full (100%), so the import did not finish.",
                   "losses": ["per-step timings"], "can_answer": ["why the import failed"],
                   "fault_when": ["the timing of a given step is needed"],
                   "key_entities": ["E_DISK_FULL", "/var/lib/app/data.db"]},
        "compact": {"summary": "The nightly import stopped after its first steps with E_DISK_FULL:"
                               " /var/lib/app/data.db is full.",
                    "losses": ["number of steps"], "can_answer": ["why the import failed"],
                    "fault_when": ["the step count is needed"], "key_entities": ["E_DISK_FULL"]},
        "stub": {"summary": stub_of(body, "Import failed, disk full"), "losses": ["which file"],
                 "can_answer": ["that an import failed"], "fault_when": [], "key_entities": []},
    }


def stored(c, tenant, mid) -> tuple[dict, dict]:
    r = row(c, "SELECT content_full, content_detail, tokens_detail, content_compact, tokens_compact, content_stub,"
               " tokens_stub, losses, metadata FROM mnemo.memories WHERE tenant_id = %s AND memory_id = %s",
            tenant, mid)
    levels = {n: {"text": r[f"content_{n}"], "tokens": r[f"tokens_{n}"], "losses": r["losses"][n]}
              for n in ("detail", "compact", "stub") if r[f"content_{n}"]}
    check_levels(r["content_full"], levels)
    return levels, r["metadata"]["summary"]


# ---------------------------------------------------------------- validation (no database)
BODY = {"messages": llm_summarize.prompt(LOG, "tool_result", WHEN)}


def test_prompt_is_seed_002_6_1_with_the_stub_format():
    text = BODY["messages"][1]["content"]
    assert "CONTENT TYPE: tool_result" in text and "E_DISK_FULL" in text and "DECLARED LOSSES" in text
    assert stub_of(BODY, "x") == f"[tool_result | {WHEN} | x]"
    assert stub_of({"messages": llm_summarize.prompt(LOG, "summary", "a to b", 12)}, "x") == "[summary | a to b | x | 12 related]"


def test_valid_reply_gives_the_ladder_with_accumulated_losses():
    levels = llm_summarize.validate(good_reply(BODY), LOG, "tool_result", WHEN)
    check_levels(LOG, summarize.levels_json(levels))
    d, c, s = levels["detail"], levels["compact"], levels["stub"]
    assert "per-step timings" in d.dropped and "E_DISK_FULL" in d.key_entities
    # the declared losses come first (the lists are capped) and accumulate
    assert d.dropped[0] == "per-step timings" and c.dropped[:2] == ["per-step timings", "number of steps"]
    assert s.dropped[:3] == ["per-step timings", "number of steps", "which file"]
    assert not any(present(e, c.text) for e in c.dropped) and s.dropped_count > len(s.dropped)
    assert s.fault_when[:len(c.fault_when)] == c.fault_when and c.fault_when[:len(d.fault_when)] == d.fault_when
    assert s.text == f"[tool_result | {WHEN} | Import failed, disk full]"


def _broken(what: str) -> dict:
    r = copy.deepcopy(good_reply(BODY))
    if what == "compact longer than detail":
        r["compact"]["summary"] = r["detail"]["summary"] + " Nothing else happened afterwards."
    elif what == "declared loss in the text":
        r["detail"]["losses"].append("E_DISK_FULL")
    elif what == "kept entity not in the text":
        r["compact"]["key_entities"].append("handleAuth()")
    elif what == "stub not in the format":
        r["stub"]["summary"] = "Import failed"
    elif what == "stub on two lines":
        r["stub"]["summary"] = r["stub"]["summary"].replace("failed,", "failed\n")
    elif what == "losses not a list of strings":
        r["detail"]["losses"] = "per-step timings"
    elif what == "level missing":
        del r["compact"]
    return r


BROKEN = ["compact longer than detail", "declared loss in the text", "kept entity not in the text",
          "stub not in the format", "stub on two lines", "losses not a list of strings", "level missing"]


@pytest.mark.parametrize("what", BROKEN)
def test_invalid_reply_is_malformed(what):
    with pytest.raises(MalformedReply):
        llm_summarize.validate(_broken(what), LOG, "tool_result", WHEN)


def test_detail_longer_than_the_source_is_malformed():
    r = good_reply(BODY)
    r["detail"]["summary"] = LOG + " And more."
    with pytest.raises(MalformedReply, match="more than"):
        llm_summarize.validate(r, LOG, "tool_result", WHEN)


# ------------------------------------------------------------------- summaries sweep
def test_summaries_sweep_stores_the_helper_llm_ladder(db, tenant, session, fake_llm):
    c = db.conn
    srv = fake_llm("good", good_reply)
    mid = memory(c, tenant, "tool_result", LOG, session)
    c.execute("UPDATE mnemo.memories SET created_at = %s WHERE tenant_id = %s AND memory_id = %s",
              (NOW, tenant, mid))
    secret = memory(c, tenant, "tool_result", LOG.replace("nightly", "secret"), session, sensitivity="secret")
    sweep(c, "summaries", NOW, tenant)
    assert len(srv.requests) == 1  # the secret memory is not sent
    req = srv.requests[0]
    assert req["auth"] == "Bearer sk-test-key-0123456789abcdefghij"
    assert req["body"]["response_format"] == {"type": "json_object"}
    assert "CONTENT TYPE: tool_result" in req["body"]["messages"][1]["content"]
    levels, meta = stored(c, tenant, mid)
    assert meta == {"method": "helper_llm", "model": "tiny-model", "attempts": 1}
    assert levels["compact"]["text"].endswith("E_DISK_FULL: /var/lib/app/data.db is full.")
    assert levels["stub"]["text"] == f"[tool_result | {WHEN} | Import failed, disk full]"
    assert "number of steps" in levels["stub"]["losses"]["dropped"]
    assert stored(c, tenant, secret)[1] == {"method": "offline"}
    counts = last_run(c, "summaries")["counts"]
    assert counts["helper_llm"] == 1 and counts["offline"] == 1 and counts["summarised"] == 2


@pytest.mark.parametrize("what", ["compact longer than detail", "declared loss in the text"])
def test_summaries_sweep_falls_back_offline_on_an_invalid_reply(db, tenant, session, fake_llm, what):
    c = db.conn
    srv = fake_llm("good", lambda body: _broken(what), retries=1)
    mid = memory(c, tenant, "tool_result", LOG, session)
    sweep(c, "summaries", NOW, tenant)
    assert len(srv.requests) == 2  # retried once, then offline
    levels, meta = stored(c, tenant, mid)
    assert meta["method"] == "offline" and "malformed reply" in meta["fallback"]
    assert levels["detail"]["text"] == summarize.summarize(LOG, "tool_result")["detail"].text
    counts = last_run(c, "summaries")["counts"]
    assert counts["offline"] == 1 and counts["helper_fallbacks"] == 1 and counts["helper_llm"] == 0


def test_summaries_sweep_with_a_server_that_never_answers(db, tenant, session, fake_llm):
    c = db.conn
    srv = fake_llm("hang", timeout=0.3, retries=1)
    ids = [memory(c, tenant, "tool_result", LOG.replace("nightly", f"run-{i}"), session) for i in range(3)]
    t = time.perf_counter()
    sweep(c, "summaries", NOW, tenant)
    elapsed = time.perf_counter() - t
    assert len(srv.requests) == 2 and elapsed < HANG_S, elapsed  # not asked again in this run
    for mid in ids:
        assert stored(c, tenant, mid)[1]["method"] == "offline"
    assert last_run(c, "summaries")["counts"]["offline"] == 3


@pytest.mark.parametrize("configured", ["none", "disabled"])
def test_summaries_sweep_without_a_helper_is_offline(db, tenant, session, fake_llm, configured):
    c = db.conn
    srv = fake_llm("good", good_reply, enabled=False) if configured == "disabled" else None
    mid = memory(c, tenant, "tool_result", LOG, session)
    sweep(c, "summaries", NOW, tenant)
    assert stored(c, tenant, mid)[1] == {"method": "offline"}
    assert srv is None or srv.requests == []


# ---------------------------------------------------------------------- compaction
def compaction_reply(body: dict) -> dict:
    return {
        "detail": {"summary": "The user asked, module by module, to run the tests of modules 0 to 13. Each run"
                              " logged 30 build steps and then failed with its own error code (E_TEST_0 for"
                              " module 0, and so on), and each time the assistant fixed the failing test file"
                              " (tests/test_mod_0.py for module 0, and so on) before moving on to the next one.",
                   "losses": ["build step timings"], "can_answer": ["which modules failed"],
                   "fault_when": ["exact error lines are needed"], "key_entities": ["E_TEST_0", "tests/test_mod_0.py"]},
        "compact": {"summary": "The user had the test suite of each module run in turn; every module failed with"
                               " its own error code and the assistant fixed each failing test file, module after module, until"
                               " the whole suite passed.",
                    "losses": ["error codes"],
                    "can_answer": ["what was done"], "fault_when": [], "key_entities": []},
        "stub": {"summary": stub_of(body, "Fixed failing tests"), "losses": [], "can_answer": [],
                 "fault_when": [], "key_entities": []},
    }


def test_compaction_with_the_helper_llm(db, tenant, fake_llm):
    c = db.conn
    srv = fake_llm("good", compaction_reply)
    sid = db.start_session(tenant, context_window=1500, response_reserve=200)
    _turns(db, tenant, sid, 0, 14)
    sweep(c, "compaction", NOW, tenant)
    check_compaction_consistent(c, tenant)
    assert len(srv.requests) == 1
    assert "CONTENT TYPE: summary" in srv.requests[0]["body"]["messages"][1]["content"]
    log = row(c, "SELECT * FROM mnemo.compaction_log WHERE tenant_id = %s", tenant)
    assert log["method"] == "helper_llm"
    msg = row(c, "SELECT content FROM mnemo.messages WHERE tenant_id = %s AND message_id = %s",
              tenant, log["summary_message_id"])
    assert msg["content"].endswith("\n" + compaction_reply(srv.requests[0]["body"])["compact"]["summary"])
    mem = row(c, "SELECT provenance, content_full, content_stub FROM mnemo.memories WHERE tenant_id = %s"
                 " AND memory_id = %s", tenant, log["summary_memory_id"])
    assert mem["provenance"]["method"] == "helper_llm"
    assert mem["content_full"].startswith("user: Run the tests for module 0 please.")  # the span's transcript
    assert mem["content_stub"].startswith("[summary | ") and mem["content_stub"].endswith(
        f" | Fixed failing tests | {log['messages_compacted']} related]")
    levels, meta = stored(c, tenant, log["summary_memory_id"])
    assert meta["method"] == "helper_llm" and tokens.count(levels["compact"]["text"]) == levels["compact"]["tokens"]
    counts = last_run(c, "compaction")["counts"]
    assert counts["helper_llm"] == 1 and counts["offline"] == 0


def test_compaction_falls_back_offline_when_the_helper_fails(db, tenant, fake_llm):
    c = db.conn
    srv = fake_llm("malformed", retries=0)
    sid = db.start_session(tenant, context_window=1500, response_reserve=200)
    _turns(db, tenant, sid, 0, 14)
    sweep(c, "compaction", NOW, tenant)
    check_compaction_consistent(c, tenant)
    assert len(srv.requests) == 1
    log = row(c, "SELECT * FROM mnemo.compaction_log WHERE tenant_id = %s", tenant)
    assert log["method"] == "extractive" and log["ratio"] >= 5
    meta = stored(c, tenant, log["summary_memory_id"])[1]
    assert meta["method"] == "offline" and "malformed" in meta["fallback"]
    assert last_run(c, "compaction")["counts"]["helper_fallbacks"] == 1
