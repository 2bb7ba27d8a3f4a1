"""compile_context: what it may show and what it refuses. Secrets, channels, tenants,
bad options and the context_log row of each compile."""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import (
    assert_tool_pairs_whole,
    assistant_calls,
    context_log,
    prompt_cost,
    run_jobs,
    say,
    secret_marker,
    text_of,
    tool_call,
    tool_result,
)
from mnemo_db.compile import phases

from mnemosyne import errors

SYSTEM_PROMPT = "You are a careful coding assistant. Answer from the repository's files."



pytestmark = pytest.mark.usefixtures("drop_leftover_jobs")


# --------------------------------------------------------------------------- 5. secrets
def test_secret_content_never_leaks(db, tenant):
    s = db.start_session(tenant, context_window=128000, system_prompt=SYSTEM_PROMPT)
    user_m, asst_m, tool_m, mem_m = (secret_marker(p) for p in ("SU", "SA", "ST", "SM"))
    say(db, tenant, s, "user", "Let us talk about the deployment credentials.")
    secret_user = say(db, tenant, s, "user",
                       f"The deployment password for prod database is {user_m}.",
                       sensitivity="secret")
    say(db, tenant, s, "assistant", f"Noted the deployment password {asst_m}.",
         sensitivity="secret")
    assistant_calls(db, tenant, s, tool_call("c_env", "shell", {"cmd": "env"}))
    tool_result(db, tenant, s, "c_env", f"DB_PASSWORD={tool_m}\nDB_HOST=db.internal",
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
    mk = secret_marker("SX")
    say(db, tenant, s, "user", "Connect to the database.")
    if case == "tool_call_arguments":
        assistant_calls(db, tenant, s, tool_call("c_db", "psql", {"password": mk}),
                         sensitivity="secret")
        tool_result(db, tenant, s, "c_db", "connected", sensitivity="secret")
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
    high_priv, high_pub, low_pub, own_high = (secret_marker(p) for p in ("HP", "HU", "LU", "OH"))
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
    mk = secret_marker("XT")
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
