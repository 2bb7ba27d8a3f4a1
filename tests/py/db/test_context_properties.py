"""Property tests of compile_context against the real database (hypothesis).

Each example records a random session (text turns of varied length, tool-call groups
with results of varied size, some calls never answered, secret and high-sensitivity
content carrying unique markers) and random memories in a fresh tenant, then compiles
it under random budgets, task types and queries, and checks the invariants listed in
plpy/mnemo_db/compile/bundle.py's docstring on what actually came back.
"""

from __future__ import annotations

import json
import random
import uuid

from helpers import assert_tool_pairs_whole
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from mnemo_db import redact, tokens
from mnemo_db.compile.policy import MEMORY_HEADER

FIDELITY_RANK = {"full": 0, "detail": 1, "compact": 2, "stub": 3, "evicted": 4}
ALLOWED = {"private": ("none", "low", "high"), "team": ("none", "low"),
           "public": ("none", "low")}
SETTINGS = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

WORDS = ("the", "build", "cache", "worker", "queue", "invoice", "ledger", "parser", "retry",
         "timeout", "schema", "index", "query", "table", "user", "service", "deploy", "config",
         "token", "budget", "module", "migration", "replica", "checksum", "latency", "billing",
         "tenant", "session", "export", "report")
PATHS = ("src/app/main.py", "lib/util/strings.ts", "/etc/nginx/nginx.conf", "docs/setup.md",
         "tests/test_api.py", "migrations/0042_add_index.sql")


# --------------------------------------------------------------------------- content
def _sentence(r: random.Random) -> str:
    words = [r.choice(WORDS) for _ in range(r.randint(4, 14))]
    if r.random() < 0.4:
        words.insert(r.randrange(len(words)), r.choice(PATHS))
    if r.random() < 0.4:
        number = f"{r.randint(1, 99_999)}{r.choice(['', ' ms', ' MB'])}"
        words.insert(r.randrange(len(words)), number)
    return words[0].capitalize() + " " + " ".join(words[1:]) + r.choice(".....?!")


def _text(r: random.Random, size: str) -> str:
    if size == "huge":  # a >64 KB tool output: stored as an excerpt plus an artifact
        lines, n = [], 0
        while n < 70_000:
            lines.append(f"{r.choice(PATHS)}:{r.randint(1, 9999)}: {_sentence(r)}")
            n += len(lines[-1]) + 1
        return "\n".join(lines)
    k = {"short": 1, "medium": r.randint(2, 5), "long": r.randint(12, 40)}[size]
    return " ".join(_sentence(r) for _ in range(k))


SENSITIVITY = st.sampled_from(["none"] * 6 + ["low", "high", "secret", "secret"])
SIZES = st.sampled_from(["short", "short", "medium", "long"])
RESULT_SIZES = st.sampled_from(["short"] * 4 + ["medium"] * 3 + ["long"] * 2 + ["huge"])
TEXT_TURN = st.fixed_dictionaries({
    "kind": st.just("text"), "role": st.sampled_from(["user", "assistant"]), "size": SIZES,
    "sens": SENSITIVITY, "seed": st.integers(0, 2**32)})
TOOL_GROUP = st.fixed_dictionaries({
    "kind": st.just("tools"),
    "calls": st.lists(st.fixed_dictionaries({
        "answered": st.sampled_from([True] * 5 + [False]), "size": RESULT_SIZES,
        "sens": SENSITIVITY}), min_size=1, max_size=3),
    "content": st.booleans(), "sens": SENSITIVITY, "shuffle": st.booleans(),
    "seed": st.integers(0, 2**32)})
MEMORY = st.fixed_dictionaries({"sens": SENSITIVITY,
                                "pinned": st.sampled_from([False] * 3 + [True]),
                                "seed": st.integers(0, 2**32)})
SESSIONS = st.fixed_dictionaries({
    "system_prompt": st.sampled_from([None, "You are a terse assistant for the billing team."]),
    "channel": st.sampled_from(["private", "private", "team", "public"]),
    "turns": st.lists(st.one_of(TEXT_TURN, TEXT_TURN, TOOL_GROUP), min_size=2, max_size=18),
    "memories": st.lists(MEMORY, max_size=5),
})
COMPILES = st.lists(st.fixed_dictionaries({
    "budget": st.one_of(st.integers(0, 400), st.integers(0, 3000)),
    "task_type": st.sampled_from([None, "continuation", "knowledge", "new_session", "tool_heavy"]),
    "query": st.sampled_from([None, None, "what did we decide about the invoice retry budget?",
                              "src/app/main.py timeout"]),
}), min_size=1, max_size=3)


# --------------------------------------------------------------------------- recording
class Built:
    """What was recorded, and what compile_context may send of it."""

    def __init__(self, tenant, session, spec):
        self.tenant, self.session, self.spec = tenant, session, spec
        self.sendable: list[int] = []  # message ids the history may send, in order
        self.markers: dict[str, list[str]] = {"secret": [], "high": []}
        self.memories: list[dict] = []  # memory_id, sensitivity, pinned, text
        self.user_texts: list[tuple[str, str]] = []  # (sensitivity, text)


def _marked(b: Built, r: random.Random, sens: str, text: str) -> str:
    if sens not in b.markers:
        return text
    mk = f"{sens.upper()}MARK{uuid.uuid4().hex[:12]}"
    b.markers[sens].append(mk)
    cut = r.randint(0, len(text))
    return f"{text[:cut]} {mk} {text[cut:]}"


def build(db, spec: dict, window: int = 128000) -> Built:
    tenant = "t_" + uuid.uuid4().hex[:12]
    db.create_tenant(tenant)
    session = db.start_session(tenant, channel=spec["channel"], context_window=window,
                               response_reserve=min(4096, window // 4), system_prompt=spec["system_prompt"])
    b = Built(tenant, session, spec)
    rec = db.record_message
    for n, turn in enumerate(spec["turns"]):
        r = random.Random(turn["seed"])
        if turn["kind"] == "text":
            text = _marked(b, r, turn["sens"], _text(r, turn["size"]))
            b.sendable.append(rec(tenant, session, {"role": turn["role"], "content": text},
                                  sensitivity=turn["sens"]))
            if turn["role"] == "user":
                b.user_texts.append((turn["sens"], text))
            continue
        calls = [{"id": f"call_{n}_{k}", "type": "function", "function": {
            "name": r.choice(["shell", "fs_read", "grep"]),
            "arguments": json.dumps({"path": _marked(b, r, turn["sens"], r.choice(PATHS)),
                                     "n": r.randint(1, 500)})}}
                 for k in range(len(turn["calls"]))]
        content = _marked(b, r, turn["sens"], _text(r, "short")) if turn["content"] else None
        aid = rec(tenant, session, {"role": "assistant", "content": content, "tool_calls": calls},
                  sensitivity=turn["sens"])
        answered = [(c, call) for c, call in zip(calls, turn["calls"], strict=True)
                    if call["answered"]]
        results = {}
        order = list(answered)
        if turn["shuffle"]:
            r.shuffle(order)
        for c, call in order:
            text = _marked(b, r, call["sens"], _text(r, call["size"]))
            results[c["id"]] = rec(tenant, session, {"role": "tool", "tool_call_id": c["id"],
                                                     "content": text}, sensitivity=call["sens"])
        if answered or content:
            # the assistant message, then its results in the order of its calls
            b.sendable += [aid] + [results[c["id"]] for c, _ in answered]
    for mem in spec["memories"]:
        r = random.Random(mem["seed"])
        text = _marked(b, r, mem["sens"], _sentence(r))
        mid = db.record_event(tenant, session, "decision", {"decision": text},
                              sensitivity=mem["sens"])["memory_id"]
        if mem["pinned"]:
            db._call("UPDATE mnemo.memories SET is_pinned = true"
                     " WHERE tenant_id = %(t)s AND memory_id = %(m)s", {"t": tenant, "m": mid})
        b.memories.append({"memory_id": mid, "sens": mem["sens"], "pinned": mem["pinned"],
                           "text": text})
    # embeddings are not this file's subject (test_context.py runs the jobs)
    db._call("DELETE FROM mnemo.jobs WHERE tenant_id = %(t)s", {"t": tenant})
    return b


# --------------------------------------------------------------------------- checks
def pinned_block_bound(pinned: list[dict]) -> int:
    """An upper bound of the memory block holding these memories at full fidelity."""
    lines = [MEMORY_HEADER, "(2026-01-01)"] + [f"[mem:{m['memory_id']} decision] {m['text']}"
                                                for m in pinned]
    return tokens.count_message({"role": "system", "content": "\n".join(lines)}) + 2 * len(pinned)


def residency_floors(db, b: Built) -> dict[int, int]:
    """Each message's fidelity floor: its semantic object's residency (paging)."""
    rows = db._rows("SELECT m AS message_id, r.fidelity FROM mnemo.semantic_objects AS o"
                    " JOIN mnemo.object_residency AS r USING (tenant_id, session_id, object_id),"
                    " unnest(o.message_ids) AS m WHERE o.tenant_id = %(t)s AND o.session_id = %(s)s",
                    {"t": b.tenant, "s": b.session})
    return {r["message_id"]: FIDELITY_RANK[r["fidelity"]] for r in rows}


def check_bundle(b: Built, bundle: dict, opts: dict, query: str | None, floors: dict[int, int]) -> None:
    """floors: residency_floors after the compile (paging)."""
    messages, report = bundle["messages"], bundle["report"]
    channel = b.spec["channel"]
    available = report["budget"]["available"]
    assert available <= opts.get("budget", available)

    # the system prompt comes first when the session has one
    rest = messages
    if b.spec["system_prompt"]:
        assert messages[0] == {"role": "system", "content": b.spec["system_prompt"]}
        rest = messages[1:]
    # B is a hard limit, on the messages as returned
    cost = sum(tokens.count_message(m) for m in rest)
    assert cost <= available
    assert cost == report["tokens"]["total"]

    # nothing secret anywhere; nothing `high` outside private channels
    dumped = json.dumps(bundle)
    if query is None:  # the default query: the last user message the channel may see
        # as stored: redacted (a random marker after "token ..." can read as a secret)
        seen = [redact.redact(t)[0].strip() for sens, t in b.user_texts if sens in ALLOWED[channel]]
        assert report["provenance"]["query"] == (seen[-1] if seen else None)
    forbidden = b.markers["secret"] + (b.markers["high"] if channel != "private" else [])
    leaked = [mk for mk in forbidden if mk in dumped]
    assert not leaked, leaked

    # tool-call pairs are whole
    assert_tool_pairs_whole(messages)

    # kept history: a contiguous suffix of what may be sent but what paging evicted,
    # the same messages as the tail of the list; no message above its object's
    # residency, and what the budget forced below it never rising going back in time
    hist = [it for it in report["items"] if it["section"] == "history"]
    ids = [int(it["source"].removeprefix("msg:")) for it in hist]
    resident = [i for i in b.sendable if floors.get(i, 0) < FIDELITY_RANK["evicted"]]
    assert ids == (resident[-len(ids):] if ids else [])
    tail = messages[len(messages) - len(hist):] if hist else []
    assert all(m["role"] != "system" for m in tail)
    assert len([m for m in rest if m["role"] != "system"]) == len(hist)
    assert [tokens.count_message(m) for m in tail] == [it["tokens"] for it in hist]
    assert sum(it["tokens"] for it in hist) == report["tokens"]["history"]
    forced = 0
    for it, i in zip(reversed(hist), reversed(ids)):
        if it["fidelity"] == "withheld":
            continue
        rank, floor = FIDELITY_RANK[it["fidelity"]], floors.get(i, 0)
        assert rank >= max(floor, forced), ([x["fidelity"] for x in hist], floors)
        if rank > floor:
            forced = rank
    withheld = {it["source"] for it in hist if it["fidelity"] == "withheld"}
    event("history: " + ("none" if not ids else "all" if len(ids) == len(b.sendable)
                         else "a suffix"))
    event("lowest fidelity: " + max((it["fidelity"] for it in hist), default="-",
                                    key=lambda f: FIDELITY_RANK.get(f, -1)))
    if withheld:
        event("withheld messages")
    for it, m in zip(hist, tail, strict=True):
        if it["source"] in withheld:
            assert "withheld" in m["content"]

    # pinned memories enter first: kept whenever the memory share holds them all
    visible = [m for m in b.memories if m["sens"] in ALLOWED[channel]]
    pinned = [m for m in visible if m["pinned"]]
    sources = {it["source"] for it in report["items"] if it["section"] == "memory"}
    if pinned and report["budget"]["memory_share"] >= pinned_block_bound(pinned):
        assert {f"mem:{m['memory_id']}" for m in pinned} <= sources
    assert sources <= {f"mem:{m['memory_id']}" for m in visible} | {
        f"msg:{i}" for i in b.sendable}


# --------------------------------------------------------------------------- properties
@SETTINGS
@given(spec=SESSIONS, compiles=COMPILES)
def test_compiled_context_invariants(db, spec, compiles):
    b = build(db, spec)
    for c in compiles:
        opts = {"budget": c["budget"]} | ({"task_type": c["task_type"]} if c["task_type"] else {})
        bundle = db.compile_context_bundle(b.tenant, b.session, c["query"], **opts)
        check_bundle(b, bundle, opts, c["query"], residency_floors(db, b))
        # with no new data, the next compiles are byte-identical (provider prompt caches)
        sql = "SELECT mnemo.compile_context(%(t)s, %(s)s, %(q)s, %(o)s::jsonb)::text"
        args = {"t": b.tenant, "s": b.session, "q": c["query"], "o": json.dumps(opts)}
        again = db._call(sql, args)
        assert json.loads(again) == bundle["messages"]
        assert db._call(sql, args) == again


LONG_HISTORY = {
    "system_prompt": None, "channel": "private",
    "turns": [{"kind": "text", "role": ("user", "assistant")[i % 2], "size": "medium",
               "sens": "none", "seed": i} for i in range(20)],
    "memories": [{"sens": "none", "pinned": True, "seed": 1}],
}


@SETTINGS
@given(spec=SESSIONS.filter(lambda s: any(m["pinned"] for m in s["memories"])),
       budget=st.integers(300, 3000),
       task_type=st.sampled_from([None, "continuation", "knowledge", "new_session", "tool_heavy"]))
@example(spec=LONG_HISTORY, budget=300, task_type="tool_heavy")
def test_pinned_memories_are_kept_whenever_they_fit(db, spec, budget, task_type):
    """Pinned memories are kept whenever their block fits in B: history yields to them."""
    b = build(db, spec)
    opts = {"budget": budget} | ({"task_type": task_type} if task_type else {})
    report = db.compile_context_bundle(b.tenant, b.session, **opts)["report"]
    pinned = [m for m in b.memories if m["pinned"] and m["sens"] in ALLOWED[spec["channel"]]]
    if pinned and pinned_block_bound(pinned) <= report["budget"]["available"] // 2:
        sources = {it["source"] for it in report["items"] if it["section"] == "memory"}
        assert {f"mem:{m['memory_id']}" for m in pinned} <= sources, (
            report["task_type"], report["budget"], report["tokens"])


# --------------------------------------------------------------------------- paging
@SETTINGS
@given(spec=SESSIONS, window=st.integers(1200, 9000), restore=st.integers(0, 2**32),
       query=st.sampled_from([None, "src/app/main.py timeout"]))
@example(spec={"system_prompt": None, "channel": "private", "memories": [], "turns": [
    {"kind": "text", "role": "user", "size": "short", "sens": "none", "seed": 0},
    {"kind": "text", "role": "user", "size": "long", "sens": "none", "seed": 3},
    {"kind": "tools", "calls": [{"answered": True, "size": "short", "sens": "none"}], "content": False,
     "sens": "secret", "shuffle": False, "seed": 0},
    {"kind": "text", "role": "user", "size": "short", "sens": "none", "seed": 0},
    {"kind": "tools", "calls": [{"answered": True, "size": "short", "sens": "none"}], "content": False,
     "sens": "none", "shuffle": False, "seed": 0}]}, window=1200, restore=0, query=None)
def test_paging_invariants_at_the_window(db, spec, window, restore, query):
    """Compiled at the session's window, where paging's pressure zones act: B holds,
    tool pairs stay whole, nothing secret leaks, a pinned (restored) object is resident
    at full fidelity, and with no new data the next compile is byte-identical."""
    b = build(db, spec, window)
    objects = db._rows("SELECT o.object_id, o.message_ids FROM mnemo.semantic_objects AS o"
                       " WHERE o.tenant_id = %(t)s AND o.session_id = %(s)s ORDER BY o.first_turn",
                       {"t": b.tenant, "s": b.session})
    pinned = random.Random(restore).choice(objects) if objects else None
    if pinned:
        db.memory_restore(b.tenant, b.session, f"obj:{pinned['object_id']}")
    first = db.compile_context_bundle(b.tenant, b.session, query)
    floors = residency_floors(db, b)
    check_bundle(b, first, {}, query, floors)
    event(f"zone: {first['report']['paging']['zone']}" if "paging" in first["report"] else "zone: -")
    if pinned:
        assert all(floors[m] == 0 for m in pinned["message_ids"])
        items = {it["source"]: it["fidelity"] for it in first["report"]["items"] if it["section"] == "history"}
        kept = [items.get(f"msg:{m}") for m in pinned["message_ids"]]
        # sent at full whenever the history at its residencies fits its share of B
        # (else packing degrades by age what paging could not: the pinned turns alone
        # are more than B). No paging report: no object lies within the history's
        # reach of B (whether a long turn's levels are stored yet, by its embed job,
        # moves that reach), so there is nothing of it to send.
        paging = first["report"].get("paging")
        if paging is not None and paging["history_tokens"] <= first["report"]["budget"]["history_share"]:
            event("pinned object sent")
            assert all(f in ("full", "withheld") for f in kept if f is not None), kept
    second = db.compile_context_bundle(b.tenant, b.session, query)
    assert second["messages"] == first["messages"]
    assert second["report"].get("paging", {}).get("changes", 0) == 0
