"""Paging (issue 22): semantic objects, residency under the pressure zones, the
phantom tools answered in the database, faults and the thrash guard, cleanup tags,
and the metrics, on crafted sessions whose numbers are known."""

from __future__ import annotations

import json
import math

import pytest
from helpers import run_jobs

from mnemosyne.errors import InvalidParameter

PIN_TURNS = 8  # sql/settings.sql paging.pin_turns


@pytest.fixture(autouse=True)
def warm_reads(request, db):
    """The crafted sessions below read files once and never again: the cold-read rule
    (ladder's cold_reads) would stub each read once a newer call stands between, and
    what they test (segmentation, the zones, faults) needs reads that stay. It is off
    for them, on for the tests of it (cold_reads in the name). Restored afterwards."""
    if "cold_read" in request.node.name:
        yield
        return
    old = db._call("SELECT value::text FROM mnemo_internal.settings WHERE key = 'paging'", {})
    db._call("UPDATE mnemo_internal.settings SET value = value || '{\"cold_reads\": false}'"
             " WHERE key = 'paging' RETURNING true", {})
    yield
    db._call("UPDATE mnemo_internal.settings SET value = %(v)s::jsonb WHERE key = 'paging' RETURNING true",
             {"v": old})


@pytest.fixture
def small_working_set(db):
    """The zone tests' crafted sessions hold a handful of objects: they test each zone's
    moves with a working set of 2, no revisited source protected, and a target of 0.4
    (the defaults before migration 0023; with 12 protected, none of their objects would
    move). The setting is the server's, restored afterwards."""
    old = db._call("SELECT value::text FROM mnemo_internal.settings WHERE key = 'paging'", {})
    db._call("UPDATE mnemo_internal.settings SET value = value"
             " || '{\"protect_newest\": 2, \"protect_hot\": 0, \"target\": 0.4}'"
             " WHERE key = 'paging' RETURNING true", {})
    yield
    db._call("UPDATE mnemo_internal.settings SET value = %(v)s::jsonb WHERE key = 'paging' RETURNING true",
             {"v": old})


def source(name: str, n: int = 40) -> str:
    """A file's text: n distinct lines of code (no two files share a line)."""
    return "\n".join(f"def {name}_step_{i}(value):\n    return value * {i} + {len(name)}  # {name} {i}"
                     for i in range(n))


class Session:
    """A session under test, recording as an agent does."""

    def __init__(self, db, tenant, window=128000):
        self.db, self.t = db, tenant
        self.s = db.start_session(tenant, context_window=window, response_reserve=0)
        self.n = 0

    def say(self, role: str, text: str) -> int:
        return self.db.record_message(self.t, self.s, {"role": role, "content": text})

    def tool(self, name: str, args: dict, output: str, content: str | None = None) -> tuple[int, int]:
        self.n += 1
        cid = f"call_{self.n}"
        call = self.db.record_message(self.t, self.s, {"role": "assistant", "content": content, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        result = self.db.record_message(self.t, self.s, {"role": "tool", "tool_call_id": cid, "content": output})
        return call, result

    def read(self, path: str, text: str | None = None) -> int:
        """Reads a file; returns its object's id."""
        call, _ = self.tool("Read", {"file_path": path}, text if text is not None else source(path.split("/")[-1][:-3]))
        return self.object_of(call)

    def object_of(self, message_id: int) -> int:
        return self.db._call("SELECT object_id FROM mnemo.semantic_objects WHERE tenant_id = %(t)s"
                             " AND message_ids @> ARRAY[%(m)s]::bigint[]", {"t": self.t, "m": message_id})

    def residency(self) -> dict[int, dict]:
        return {r["object_id"]: r for r in self.db._rows(
            "SELECT o.object_id, o.kind, o.source_key, r.fidelity, r.pinned_until_turn, r.anchored, o.summary"
            " FROM mnemo.semantic_objects AS o JOIN mnemo.object_residency AS r USING (tenant_id, session_id,"
            " object_id) WHERE o.tenant_id = %(t)s AND o.session_id = %(s)s ORDER BY o.first_turn",
            {"t": self.t, "s": self.s})}

    def log(self) -> list[dict]:
        return self.db._rows(
            "SELECT object_id, from_fidelity, to_fidelity, trigger, pressure_zone FROM mnemo.fidelity_log"
            " WHERE tenant_id = %(t)s AND session_id = %(s)s ORDER BY transition_id", {"t": self.t, "s": self.s})

    def faults(self) -> list[dict]:
        return self.db._rows(
            "SELECT fault_type, object_id, fidelity, turn_index, answer_tokens, avoided_tokens FROM mnemo.fault_log"
            " WHERE tenant_id = %(t)s AND session_id = %(s)s ORDER BY fault_id", {"t": self.t, "s": self.s})

    def set(self, object_id: int, fidelity: str) -> None:
        self.db._call("UPDATE mnemo.object_residency SET fidelity = %(f)s WHERE tenant_id = %(t)s"
                      " AND object_id = %(o)s RETURNING 1", {"f": fidelity, "t": self.t, "o": object_id})

    def history_tokens(self) -> int:
        return self.db._call("SELECT sum(token_count)::integer FROM mnemo.messages WHERE tenant_id = %(t)s"
                             " AND session_id = %(s)s", {"t": self.t, "s": self.s})

    def window_for(self, ratio: float) -> None:
        """Sets the session's window so that its history, at the objects' current
        fidelities, is `ratio` of the window budget. The job runner has run first, as it
        does between an agent's turns: a message's detail and compact levels are stored
        by its embed job, and a compile never makes them."""
        run_jobs(self.db, self.t)
        self._window(10_000_000)
        report = self.compile(log=False)["report"]
        self._window(math.ceil(report["paging"]["history_tokens"] / ratio) + report["budget"]["tool_definitions"])

    def _window(self, window: int) -> None:
        self.db._call("UPDATE mnemo.sessions SET context_window = %(w)s WHERE tenant_id = %(t)s"
                      " AND session_id = %(s)s RETURNING 1", {"w": window, "t": self.t, "s": self.s})

    def compile(self, **options) -> dict:
        return self.db.compile_context_bundle(self.t, self.s, None, **options)

    def turn(self) -> int:
        return self.db._call("SELECT turn_count FROM mnemo.sessions WHERE tenant_id = %(t)s"
                             " AND session_id = %(s)s", {"t": self.t, "s": self.s})


def text_of(bundle: dict) -> str:
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in bundle["messages"])


def coding_session(db, tenant, files: int = 8) -> tuple[Session, list[int]]:
    """The task, `files` file reads (each ~700 tokens, distinct), and a closing remark."""
    s = Session(db, tenant)
    s.say("user", "Refactor the billing module so that retries are bounded.")
    reads = [s.read(f"src/billing/part_{k}.py") for k in range(files)]
    s.say("assistant", "I have read the billing parts; next I will change the retry loop.")
    return s, reads


# --------------------------------------------------------------------------- segmentation
def test_segmentation_types_tool_results_and_keeps_the_conversation_in_phases(db, tenant):
    s = Session(db, tenant)
    s.say("user", "Please fix the failing parser test.")
    s.say("assistant", "Let me look at the code first.")
    read_call, read_result = s.tool("Read", {"file_path": "src/parser.py", "offset": 10, "limit": 20}, source("parser"))
    test_call, _ = s.tool("Bash", {"command": "pytest -q tests/test_parser.py"},
                          "F\nFAILED tests/test_parser.py::test_split - ValueError: empty field\n1 failed")
    ls_call, _ = s.tool("Bash", {"command": "ls src"}, "parser.py\nbilling/")
    fetch_call, _ = s.tool("WebFetch", {"url": "https://docs.python.org/3/library/csv.html"}, "csv — CSV File Reading")
    s.say("assistant", "The split fails on empty fields.")
    objs = list(s.residency().values())
    kinds = [o["kind"] for o in objs]
    assert kinds == ["conversation_phase", "file_context", "error_context", "tool_result", "external_reference",
                     "conversation_phase"]
    # the user turn and the assistant's reply are one phase; a tool call closes it
    first = db._call("SELECT message_ids FROM mnemo.semantic_objects WHERE object_id = %(o)s",
                     {"o": objs[0]["object_id"]})
    assert len(first) == 2
    row = db._rows("SELECT source_key, lower(source_lines) AS a, upper(source_lines) - 1 AS b, message_ids"
                   " FROM mnemo.semantic_objects WHERE object_id = %(o)s", {"o": s.object_of(read_call)})[0]
    assert (row["source_key"], row["a"], row["b"]) == ("src/parser.py", 10, 29)
    assert row["message_ids"] == [read_call, read_result]  # the call and its result, one object
    assert s.object_of(test_call) != s.object_of(ls_call)
    assert objs[4]["source_key"] == "https://docs.python.org/3/library/csv.html"
    assert all(o["fidelity"] == "full" for o in objs)
    assert s.object_of(fetch_call) == objs[4]["object_id"]


def test_small_tool_results_merge_with_their_small_neighbour(db, tenant):
    s = Session(db, tenant)
    s.say("user", "Look around the repository.")
    a, _ = s.tool("Bash", {"command": "ls"}, "src\ntests")
    b, _ = s.tool("Bash", {"command": "ls src"}, "main.py\nutil.py")
    big, _ = s.tool("Bash", {"command": "ls -R tests"}, "x " * 800)
    assert s.object_of(a) == s.object_of(b)  # under the minimum object size, merged
    assert s.object_of(big) != s.object_of(b)
    # a command of another kind does not merge: a listing stays while a script's output goes
    c, _ = s.tool("Bash", {"command": "ls docs"}, "a.md")
    d, _ = s.tool("Bash", {"command": "git status"}, "On branch main\nnothing to commit")
    assert s.object_of(c) != s.object_of(d)


# --------------------------------------------------------------------------- zones
def pressure_moves(s: Session) -> list[dict]:
    return [r for r in s.log() if r["trigger"] == "pressure"]


def first_moves(s: Session) -> dict[int, tuple[str, str]]:
    """Each object's first pressure move (from, to)."""
    out: dict[int, tuple[str, str]] = {}
    for m in pressure_moves(s):
        out.setdefault(m["object_id"], (m["from_fidelity"], m["to_fidelity"]))
    return out


def test_normal_zone_observes_only(db, tenant):
    s, _ = coding_session(db, tenant)
    s.window_for(0.3)
    b = s.compile()
    assert b["report"]["paging"]["zone"] == "normal"
    assert pressure_moves(s) == []
    assert "[detail of" not in text_of(b) and "[stub of" not in text_of(b)


@pytest.mark.usefixtures("small_working_set")
def test_pressure_keeps_a_source_the_agent_came_back_to(db, tenant):
    s, reads = coding_session(db, tenant)
    # part_1 read again (its first lines: the whole read stays, nothing superseded)
    again = s.tool("Read", {"file_path": "src/billing/part_1.py", "offset": 1, "limit": 6},
                   source("part_1", 3))[0]
    s.window_for(0.75)
    assert s.compile()["report"]["paging"]["zone"] == "warning"
    moved = {m["object_id"] for m in pressure_moves(s)}
    # the sources read once leave first, oldest first; part_1's reads stay whole
    assert reads[0] in moved and reads[2] in moved
    assert reads[1] not in moved and s.object_of(again) not in moved
    assert s.residency()[reads[1]]["fidelity"] == "full"


@pytest.mark.usefixtures("small_working_set")
def test_pressure_keeps_a_test_runs_output_after_the_reads_made_once(db, tenant):
    """A test run's output is as relevant as a source the agent came back to: agents
    run the tests again and again, and a run with nothing written since shows what the
    next one would. Under pressure the reads made once leave before it, though it is
    the oldest."""
    s = Session(db, tenant)
    s.say("user", "Fix the failing billing test.")
    failure = "\n".join(f"tests/test_billing.py:{i}: in test_retry_{i}\n    assert retry_{i}(3) == {i}\n"
                        f"E   AssertionError: retry_{i} returned {i + 1}" for i in range(30))
    run = s.object_of(s.tool("bash", {"command": "python -m pytest -q tests/test_billing.py"}, failure)[0])
    reads = [s.read(f"src/billing/part_{k}.py") for k in range(8)]
    s.say("assistant", "I have read the billing parts; next I will change the retry loop.")
    s.window_for(0.72)
    assert s.compile()["report"]["paging"]["zone"] == "warning"
    moved = {m["object_id"] for m in pressure_moves(s)}
    assert reads[0] in moved and reads[1] in moved
    assert run not in moved
    assert s.residency()[run]["fidelity"] == "full"


@pytest.mark.usefixtures("small_working_set")
def test_caution_degrades_the_oldest_full_objects_and_then_holds(db, tenant):
    """Caution takes the oldest full objects one level down; a file read, whose detail
    a re-read does not spare, goes to stub in that step (ladder.relieve)."""
    s, reads = coding_session(db, tenant)
    s.window_for(0.6)
    first = s.compile()
    assert first["report"]["paging"]["zone"] == "caution"
    moves = pressure_moves(s)
    assert moves and all((m["from_fidelity"], m["to_fidelity"], m["pressure_zone"]) == ("full", "stub", "caution")
                         for m in moves)
    # oldest first, and never the newest objects (the working set)
    assert [m["object_id"] for m in moves] == reads[:len(moves)]
    assert reads[-1] not in {m["object_id"] for m in moves}
    assert first["report"]["paging"]["history_tokens"] <= 0.4 * first["report"]["budget"]["available"]
    res = s.residency()
    assert {o for o, r in res.items() if r["fidelity"] == "stub"} == {m["object_id"] for m in moves}
    # nothing new: the same context, byte for byte, and no change (provider prompt caches)
    second = s.compile()
    assert second["messages"] == first["messages"]
    assert second["report"]["paging"]["changes"] == 0 and len(pressure_moves(s)) == len(moves)


def under_pressure(db, tenant, share: float, start: dict[int, str]):
    """A coding session whose reads[i] start at fidelity start[i], compiled with a window
    that its history fills to `share`: (session, reads, bundle, first moves by object)."""
    s, reads = coding_session(db, tenant)
    for i, fidelity in start.items():
        s.set(reads[i], fidelity)
    s.window_for(share)
    b = s.compile()
    return s, reads, b, first_moves(s)


@pytest.mark.usefixtures("small_working_set")
def test_warning_steps_each_object_one_level_down_to_stub(db, tenant):
    s, reads, b, moves = under_pressure(db, tenant, 0.8, {0: "compact", 1: "detail"})
    assert b["report"]["paging"]["zone"] == "warning"
    # these generated sources' stored levels: a detail of ~28 tokens, no compact, and a
    # stub a few tokens shorter (its pointer is "[stub of msg:N; memory_restore]"); a
    # step that frees nothing is passed over (tests/py/unit/test_paging_units.py)
    assert moves[reads[0]] == ("compact", "stub")
    assert moves[reads[1]] == ("detail", "stub")
    # a full read goes to stub in one step (ladder.relieve), the oldest first
    assert moves[reads[2]] == ("full", "stub")
    assert all(moves[r] == ("full", "stub") for r in reads[2:] if r in moves)
    assert all(m["pressure_zone"] == "warning" for m in pressure_moves(s))
    assert all(to in ("detail", "compact", "stub") for _, to in moves.values())


@pytest.mark.usefixtures("small_working_set")
def test_critical_stubs_and_evicts(db, tenant):
    _, reads, b, moves = under_pressure(db, tenant, 0.9, {0: "stub"})
    assert b["report"]["paging"]["zone"] == "critical"
    assert moves[reads[0]] == ("stub", "evicted")
    assert moves[reads[1]] == ("full", "stub")
    assert "part_0_step_1(" not in text_of(b)  # evicted: not in the context at all
    assert b["report"]["paging"]["evicted_units"] >= 1


def test_emergency_moves_the_working_set_too_but_not_the_last_user_turns_or_pins(db, tenant):
    """With the default working set (the 12 newest objects: all of these reads), only
    emergency moves it (docs/design.md §Semantic objects and paging: what stays is the last two user turns and the
    pins), oldest first, until the history is below the critical threshold (not down to the
    target: a working set larger than the window leaves one object at a time)."""
    s, reads = coding_session(db, tenant)
    restored = s.db.memory_restore(s.t, s.s, f"obj:{reads[2]}")
    s.window_for(1.5)
    b = s.compile()
    assert b["report"]["paging"]["zone"] == "emergency"
    res = s.residency()
    evicted = [oid for oid in reads if res[oid]["fidelity"] == "evicted"]
    assert evicted and evicted == [oid for oid in reads if oid != reads[2]][:len(evicted)]  # oldest first
    assert res[reads[2]]["fidelity"] == "full"  # pinned by the restore
    # each read is ~1/9 of the history: out of emergency below 0.85, short of the target
    assert 0.6 * b["report"]["budget"]["available"] < b["report"]["paging"]["history_tokens"] \
        < 0.85 * b["report"]["budget"]["available"]
    text = text_of(b)
    assert "Refactor the billing module" in text  # the user turn
    assert "part_2_step_3(" in text and "part_0_step_3(" not in text
    assert restored["pinned_until_turn"] == s.turn() + PIN_TURNS - 0
    assert b["report"]["tokens"]["total"] <= b["report"]["budget"]["available"]
    # below emergency, the working set stays: a critical zone moves none of it
    s2, reads2 = coding_session(db, tenant)
    s2.window_for(0.9)
    assert s2.compile()["report"]["paging"]["zone"] == "critical"
    assert all(r["fidelity"] == "full" for o, r in s2.residency().items() if o in reads2)


def test_a_budget_option_packs_this_call_only(db, tenant):
    """Residency is the session's: a caller asking once for a small context changes none."""
    s, _ = coding_session(db, tenant)
    b = s.compile(budget=600)
    assert b["report"]["paging"]["zone"] == "normal" and pressure_moves(s) == []
    assert b["report"]["tokens"]["total"] <= 600


@pytest.mark.usefixtures("small_working_set")
def test_looking_without_logging_changes_nothing(db, tenant):
    s, _ = coding_session(db, tenant)
    s.window_for(0.9)
    b = s.compile(log=False)
    assert b["report"]["paging"]["changes"] > 0
    assert s.log() == [] and all(r["fidelity"] == "full" for r in s.residency().values())


# --------------------------------------------------------------------------- faults
def test_a_reread_after_eviction_is_a_fault_and_pins_the_new_read(db, tenant):
    s, reads = coding_session(db, tenant, files=2)
    db.memory_release(tenant, s.s, [f"obj:{reads[0]}"])
    again = s.read("src/billing/part_0.py")
    fault = s.faults()[-1]
    assert (fault["fault_type"], fault["object_id"], fault["fidelity"]) == ("reread", reads[0], "stub")
    res = s.residency()
    assert res[again]["pinned_until_turn"] == fault["turn_index"] + PIN_TURNS
    assert db._call("SELECT count(*) FROM mnemo.object_links WHERE tenant_id = %(t)s AND src_object_id = %(a)s"
                    " AND relation = 'supersedes' AND dst_object_id = %(b)s",
                    {"t": tenant, "a": again, "b": reads[0]}) == 1


def test_rereads_that_are_not_faults(db, tenant):
    s, reads = coding_session(db, tenant, files=3)
    # a re-read of a resident read: waste, not a fault; the old read goes to stub
    s.read("src/billing/part_0.py")
    # a write in between: not a fault either, and the write made the old read stale
    edit, _ = s.tool("Edit", {"file_path": "src/billing/part_1.py", "old_string": "a", "new_string": "b"}, "ok")
    s.set(reads[2], "evicted")
    assert s.residency()[reads[1]]["fidelity"] == "stub"
    s.read("src/billing/part_1.py")
    # another part of a file: no overlap, no fault
    call, _ = s.tool("Read", {"file_path": "src/billing/other.py", "offset": 1, "limit": 20}, source("other", 10))
    db.memory_release(tenant, s.s, [f"obj:{s.object_of(call)}"])
    s.tool("Read", {"file_path": "src/billing/other.py", "offset": 500, "limit": 10}, "(no lines)")
    assert s.faults() == []
    waste = [r for r in s.log() if r["trigger"] == "waste"]
    # and once a newer call stands between, the edit's own output is outdated: stub
    assert {(r["object_id"], r["to_fidelity"]) for r in waste} == {
        (reads[0], "stub"), (reads[1], "stub"), (s.object_of(edit), "stub")}


def test_duplicated_outputs_and_stale_tool_results_are_degraded(db, tenant):
    s = Session(db, tenant)
    s.say("user", "Run the tests until they pass.")
    out = "collected 40 items\n" + "".join(f"tests/test_{i}.py ....\n" for i in range(60)) + "1 failed\n"
    first, _ = s.tool("Bash", {"command": "pytest"}, out)
    second, _ = s.tool("Bash", {"command": "pytest -x"}, out)
    res = s.residency()
    assert res[s.object_of(first)]["fidelity"] != "full" and res[s.object_of(second)]["fidelity"] == "full"
    # a tool result older than 8 tool calls is stale: detail
    for k in range(9):
        s.tool("Bash", {"command": f"python step_{k}.py"}, f"step {k}\n" + "y " * 700)
    assert s.residency()[s.object_of(second)]["fidelity"] == "detail"
    triggers = {r["object_id"]: r["trigger"] for r in s.log()}
    assert triggers[s.object_of(second)] == "waste"


def test_outputs_a_write_outdated_go_down_once_a_newer_call_stands_between(db, tenant):
    """What a write outdated cannot be read again (a re-read after a write reads the
    file now; a command run again shows the new state): it goes to stub as soon as it
    is not the newest call (issue 44: the oracle's horizon, at its information misses)."""
    s = Session(db, tenant)
    s.say("user", "Make the parser accept empty fields.")
    util = s.read("src/util.py")
    grep, _ = s.tool("Bash", {"command": "grep -rn split src"},
                     "".join(f"src/parser.py:{i}: fields = line.split(',')  # {i}\n" for i in range(40)))
    test, _ = s.tool("Bash", {"command": "pytest -q tests/test_parser.py"},
                     "".join(f"tests/test_parser.py::test_{i} PASSED\n" for i in range(40))
                     + "FAILED tests/test_parser.py::test_split - ValueError: empty field\n")
    read = s.read("src/parser.py")
    grep, test = s.object_of(grep), s.object_of(test)

    def fidelities():
        res = s.residency()
        return [res[o]["fidelity"] for o in (util, grep, test, read, edit)]

    # before the write, a search, a test run and a read are live: they stay whole
    assert all(s.residency()[o]["fidelity"] == "full" for o in (util, grep, test, read))
    edit, _ = s.tool("Edit", {"file_path": "src/parser.py", "old_string": "a", "new_string": "b"},
                     "The file src/parser.py has been updated:\n" + source("parser", 12))
    edit = s.object_of(edit)
    # the write outdated the grep, the test run and the read of the file it changed;
    # the edit itself is the newest call, and the read of another file stays
    assert fidelities() == ["full", "stub", "stub", "stub", "full"]
    ls, _ = s.tool("Bash", {"command": "ls -R src"}, "".join(f"src/module_{i}/__init__.py\n" for i in range(80)))
    # the edit's own output is outdated once a newer call stands between
    assert fidelities() == ["full", "stub", "stub", "stub", "stub"]
    s.read("src/module_1/__init__.py")
    s.read("src/module_2/__init__.py")
    # a read of a file nothing wrote, and a listing after the last write, stay whole
    assert fidelities()[0] == "full" and s.residency()[s.object_of(ls)]["fidelity"] == "full"
    assert {r["trigger"] for r in s.log()} == {"waste"}
    assert s.faults() == []


def test_a_plain_commands_output_leaves_unless_the_agent_uses_its_names(db, tenant):
    """The quiet rule: the output of a command that is no test run, listing or search
    goes to stub once it is not the newest call, with nothing written since; one
    whose names the assistant used since stays (it is working with it)."""
    s = Session(db, tenant)
    s.say("user", "Find the flag in the binary.")
    # (outputs over the minimum object size: small ones merge with their neighbour)
    first, _ = s.tool("Bash", {"command": "python run.py --dump"},
                      "".join(f"entry_{i:03d} = 0x{i * 4099:06x}\n" for i in range(150)))
    used, _ = s.tool("Bash", {"command": "python decompile.py main"},
                     "".join(f"    local_{i} = FUN_00401{i:03d}(param_1);\n" for i in range(150)))
    s.tool("Bash", {"command": "python decompile.py FUN_00401007"}, "void FUN_00401007(void) {}",
           content="FUN_00401007 is called with local_7: decompiling it.")
    tests, _ = s.tool("Bash", {"command": "pytest -q"}, "".join(f"test_{i} PASSED\n" for i in range(150)))
    res = s.residency()
    assert [res[s.object_of(c)]["fidelity"] for c in (first, used, tests)] == ["stub", "full", "full"]
    assert s.faults() == []


def test_a_cold_read_leaves_until_the_session_reads_again(db, tenant):
    """The cold-read rule: in a session that has not re-read lines it read, a read of a
    file nothing wrote since goes to stub once a newer call stands between, unless
    the assistant named the file or one of its names since; after the session's
    first re-read, reads stay (pressure decides)."""
    s = Session(db, tenant)
    s.say("user", "Make the parser accept empty fields.")
    setup = s.read("setup.py")
    named = s.read("src/parser.py")
    s.tool("Bash", {"command": "python -c 'print(1)'"}, "1", content="parser.py splits on commas; checking.")
    res = s.residency()
    assert (res[setup]["fidelity"], res[named]["fidelity"]) == ("stub", "full")
    again = s.read("src/parser.py")  # the session reads lines again: no longer cold
    later = s.read("src/util.py")
    s.tool("Bash", {"command": "python -c 'print(2)'"}, "2")
    s.tool("Bash", {"command": "python -c 'print(3)'"}, "3")
    res = s.residency()
    assert res[later]["fidelity"] == "full" and res[again]["fidelity"] == "full"
    assert {r["trigger"] for r in s.log()} == {"waste"}
    assert s.faults() == []


def test_cold_reads_gathered_before_the_assistant_speaks_stay_until_it_does(db, tenant):
    """An agent that reads file after file, calling tools without a word, gathers what
    its next reply draws on ("what is this project for?"): its cold reads stay while
    it has said nothing since, and go once it has spoken without naming them."""
    s = Session(db, tenant)
    s.say("user", "What is this project for?")
    reads = [s.read(p) for p in ("README.py", "setup.py", "src/cli.py")]
    s.tool("Bash", {"command": "python -c 'print(1)'"}, "1")
    res = s.residency()
    assert [res[r]["fidelity"] for r in reads] == ["full"] * 3
    s.tool("Bash", {"command": "python -c 'print(2)'"}, "2", content="It slices log files; checking the tests.")
    s.tool("Bash", {"command": "python -c 'print(3)'"}, "3")
    res = s.residency()
    assert [res[r]["fidelity"] for r in reads] == ["stub"] * 3
    assert s.faults() == []


def test_a_memory_of_what_paging_holds_lower_does_not_come_back_in_the_block(db, tenant):
    s = Session(db, tenant)
    s.say("user", "Find out why the nightly export is slow.")
    out = ("export_orders scanned 48213 rows in 9120 ms using seq scan on orders_archive\n"
           + "".join(f"partition orders_{y}_{m:02d}: 4017 rows, 760 ms\n" for y in (2023, 2024) for m in range(1, 13)))
    call, _ = s.tool("Bash", {"command": "python scripts/profile_export.py"}, out)
    obj = s.object_of(call)
    run_jobs(db, tenant)  # the output's levels, stored by its embed job
    db._call("SELECT mnemo_internal.extract(%(t)s, %(p)s)",
             {"t": tenant, "p": json.dumps({"session_id": str(s.s)})})
    mems = db._rows("SELECT memory_id FROM mnemo.memories WHERE tenant_id = %(t)s"
                    " AND content_full LIKE '%%orders_archive%%'", {"t": tenant})
    assert mems, "the profile's output became a memory"
    question = "why is the export of orders_archive slow?"
    before = db.compile_context_bundle(tenant, s.s, question)
    assert "orders_archive" in text_of(before)
    # released by the model: the history holds a stub, and the memory formed from the
    # output does not bring its text back (memory_restore does)
    db.memory_release(tenant, s.s, [f"obj:{obj}"])
    after = db.compile_context_bundle(tenant, s.s, question)
    assert [i for i in after["report"]["items"] if i["section"] == "memory"] == []
    assert {o["source"] for o in after["report"]["omissions"] if o["reason"] == "repeats_history"} >= {
        f"mem:{m['memory_id']}" for m in mems}
    assert "9120 ms" not in text_of(after)


@pytest.mark.usefixtures("small_working_set")
def test_the_thrash_guard_holds_a_faulted_object_under_pressure_for_n_turns(db, tenant):
    s, reads = coding_session(db, tenant)
    db.memory_release(tenant, s.s, [f"obj:{reads[0]}"])
    again = s.read("src/billing/part_0.py")
    s.window_for(1.5)
    s.compile()
    assert s.residency()[again]["fidelity"] == "full"  # pinned: stays, though everything else around went
    assert s.residency()[reads[3]]["fidelity"] == "evicted"
    for k in range(PIN_TURNS // 2):
        s.tool("Bash", {"command": f"python step_{k}.py"}, f"step {k}\n" + "y " * 600)
    s.window_for(1.5)
    s.compile()
    assert s.residency()[again]["fidelity"] == "evicted"  # the pin is over


# --------------------------------------------------------------------------- cleanup tags
def test_cleanup_tags_are_applied_and_never_sent_back(db, tenant):
    s, reads = coding_session(db, tenant, files=4)
    mid = s.say("assistant", f'Done with the first parts. <mnemo:drop ids="obj:{reads[0]}"/>\n'
                f'<mnemo:summarize id="obj:{reads[1]}">part_1 holds the retry steps 0-39.</mnemo:summarize>'
                f'<mnemo:anchor id="obj:{reads[2]}"/>'
                f'<mnemo:declare_losses id="obj:{reads[1]}">exact multipliers</mnemo:declare_losses>'
                f'<mnemo:collapse ids="obj:{reads[3]} obj:999999">gone</mnemo:collapse> Moving on.')
    row = db._rows("SELECT content, metadata FROM mnemo.messages WHERE tenant_id = %(t)s AND message_id = %(m)s",
                   {"t": tenant, "m": mid})[0]
    assert row["content"] == "Done with the first parts.\n Moving on."
    assert [t["action"] for t in row["metadata"]["cleanup_tags"]] == [
        "drop", "summarize", "anchor", "declare_losses", "collapse"]
    res = s.residency()
    assert res[reads[0]]["fidelity"] == "evicted"
    assert res[reads[1]]["fidelity"] == "compact" and res[reads[1]]["summary"] == "part_1 holds the retry steps 0-39."
    assert res[reads[2]]["anchored"] and res[reads[2]]["fidelity"] == "full"
    assert res[reads[3]]["fidelity"] == "compact"  # collapse: the first id carries the summary
    assert {r["trigger"] for r in s.log()} == {"cleanup_tag"}
    b = s.compile()
    assert "<mnemo:" not in text_of(b)
    # the summarised object is sent as the assistant's summary (in place of its largest message)
    assert f"[summary of obj:{reads[1]}; memory_restore obj:{reads[1]} for the full text] part_1 holds" in text_of(b)
    assert "part_1_step_7(value)" not in text_of(b)
    s.window_for(1.5)
    s.compile()
    assert s.residency()[reads[2]]["fidelity"] == "full"  # anchored: pressure leaves it


# --------------------------------------------------------------------------- metrics
def test_metrics_on_a_crafted_session(db, tenant):
    s = Session(db, tenant)
    s.say("user", "Check the two billing modules.")
    a = s.read("src/billing/alpha.py")
    b = s.read("src/billing/beta.py", "ZETA_LIMIT = 99\n" + source("beta", 20))
    h1 = s.history_tokens()
    sent1 = s.compile()["report"]["tokens"]["total"]
    db.memory_release(tenant, s.s, [f"obj:{a}"])          # an eviction
    s.read("src/billing/alpha.py")                        # a re-read fault
    db.memory_release(tenant, s.s, [f"obj:{b}"])          # an eviction
    q = db.memory_query(tenant, s.s, "What is ZETA_LIMIT?", max_tokens=30)  # a micro-fault on beta
    assert q["sources"] == [f"obj:{b}"]
    db.memory_restore(tenant, s.s, f"obj:{b}")            # a restore fault, after the micro-fault
    h2 = s.history_tokens()
    sent2 = s.compile()["report"]["tokens"]["total"]
    m = db.paging_metrics(tenant, s.s)
    assert m["compiles"] == 2
    assert (m["full_history_tokens"], m["sent_tokens"]) == (h1 + h2, sent1 + sent2)
    assert m["context_reduction"] == round(1 - (sent1 + sent2) / (h1 + h2), 6)
    assert (m["evictions"], m["faults"], m["reread_faults"], m["restore_faults"]) == (2, 2, 1, 1)
    assert m["fault_rate"] == 1.0
    assert (m["micro_faults"], m["micro_fault_success"]) == (1, 0.0)
    assert m["micro_tokens_saved"] == q["restore_tokens"] - q["tokens"]
    assert m["tokens_saved"] == (h1 + h2 - sent1 - sent2) + m["micro_tokens_saved"]
    assert db.paging_metrics(tenant)["compiles"] == 2  # the tenant's sessions
    with pytest.raises(InvalidParameter):
        db.paging_metrics(tenant, s.s, since=__import__("datetime").datetime(2030, 1, 1),
                          until=__import__("datetime").datetime(2029, 1, 1))


# --------------------------------------------------------------------------- relationships, shifts
def test_relationships_and_restore_brings_back_what_an_error_was_caused_by(db, tenant):
    s, reads = coding_session(db, tenant, files=2)
    call, _ = s.tool("Bash", {"command": "python -m pytest"},
                     'Traceback (most recent call last):\n  File "src/billing/part_1.py", line 7\nValueError: bad')
    err = s.object_of(call)
    links = {(r["src"], r["relation"], r["dst"]) for r in db._rows(
        "SELECT src_object_id AS src, relation, dst_object_id AS dst FROM mnemo.object_links"
        " WHERE tenant_id = %(t)s", {"t": tenant})}
    assert (err, "caused_by", reads[1]) in links and (err, "caused_by", reads[0]) not in links
    phase = next(o for o, r in s.residency().items() if r["kind"] == "conversation_phase")
    assert (phase, "parent_of", reads[0]) in links
    s.set(err, "evicted")
    s.set(reads[1], "evicted")
    db.memory_restore(tenant, s.s, f"obj:{err}")
    assert s.residency()[reads[1]]["fidelity"] == "detail"


def test_an_edit_depends_on_the_read_it_was_made_from_and_an_output_references_the_files_it_names(db, tenant):
    s, reads = coding_session(db, tenant, files=3)
    edit, _ = s.tool("Edit", {"file_path": "src/billing/part_2.py", "old_string": "a", "new_string": "b"}, "ok")
    grep, _ = s.tool("Bash", {"command": "grep -rn step_3 src"},
                     "src/billing/part_0.py:7: def part_0_step_3(value):\nsrc/billing/mypart_1.py:1: x\n")
    links = {(r["src"], r["relation"], r["dst"]) for r in db._rows(
        "SELECT src_object_id AS src, relation, dst_object_id AS dst FROM mnemo.object_links"
        " WHERE tenant_id = %(t)s", {"t": tenant})}
    edit, grep = s.object_of(edit), s.object_of(grep)
    assert (edit, "depends_on", reads[2]) in links and (edit, "supersedes", reads[2]) in links
    # part_0.py is named; part_1.py is not (mypart_1.py is another file)
    assert (grep, "references", reads[0]) in links
    assert (grep, "references", reads[1]) not in links
    # restoring the grep's output brings back what it named, at detail
    s.set(grep, "evicted")
    s.set(reads[0], "evicted")
    db.memory_restore(tenant, s.s, f"obj:{grep}")
    assert s.residency()[reads[0]]["fidelity"] == "detail"


def test_topic_and_goal_shifts(db, tenant):
    from conftest import drain_jobs
    s = Session(db, tenant)
    s.say("user", "Fix the SQL migration that adds the invoice_total column to the invoices table.")
    s.say("assistant", "The migration " + "alters the invoices table and backfills invoice totals. " * 60)
    read = s.read("migrations/0042_invoices.sql", "ALTER TABLE invoices ADD COLUMN invoice_total numeric;\n" * 30)
    drain_jobs(db, tenant, worker=17)  # the messages' embeddings (the goal is matched against them)
    s.say("user", "Write a short poem about autumn leaves falling in a quiet forest.")
    phases = [o for o, r in s.residency().items() if r["kind"] == "conversation_phase"]
    assert len(phases) == 2  # after a tool call: a new phase
    # the shift is decided with the message's embedding, by its job: the write encodes nothing
    assert not [r for r in s.log() if r["trigger"] == "goal_shift"]
    drain_jobs(db, tenant, worker=17)
    shift = [r for r in s.log() if r["trigger"] == "goal_shift"]
    assert {(r["object_id"], r["from_fidelity"], r["to_fidelity"]) for r in shift} >= {(read, "full", "detail")}
    assert all(r["to_fidelity"] in ("detail", "compact") for r in shift)
    assert db._call("SELECT goal_turn FROM mnemo.paging_state WHERE tenant_id = %(t)s", {"t": tenant}) == s.turn() - 1
    # another shift later never takes an object below compact
    s.say("user", "Now explain how photosynthesis works in deciduous trees.")
    s.say("user", "Which football team won the 1998 world cup final?")
    drain_jobs(db, tenant, worker=17)
    assert {r["to_fidelity"] for r in s.log() if r["trigger"] == "goal_shift"} <= {"detail", "compact"}


def test_a_topic_shift_splits_the_phase_once_the_message_is_embedded(db, tenant):
    """Conversation without tool calls: the phase takes every message when they are
    recorded; the embed job of the message that changes topic splits it there, and
    the assistant's reply that followed goes with it."""
    from conftest import drain_jobs
    s = Session(db, tenant)
    s.say("user", "Fix the SQL migration that adds the invoice_total column to the invoices table.")
    s.say("assistant", "The migration " + "alters the invoices table and backfills invoice totals. " * 60)
    poem = s.say("user", "Write a short poem about autumn leaves falling in a quiet forest.")
    reply = s.say("assistant", "Leaves drift down, amber and red, over the quiet forest floor.")
    phases = {o: r for o, r in s.residency().items() if r["kind"] == "conversation_phase"}
    assert len(phases) == 1
    drain_jobs(db, tenant, worker=17)
    rows = db._rows("SELECT o.message_ids, o.first_turn, o.last_turn, o.token_count, o.is_open"
                    " FROM mnemo.semantic_objects AS o WHERE o.tenant_id = %(t)s AND o.kind = 'conversation_phase'"
                    " ORDER BY o.first_turn", {"t": tenant})
    assert len(rows) == 2
    tokens = {r["message_id"]: r["token_count"] for r in db._rows(
        "SELECT message_id, token_count FROM mnemo.messages WHERE tenant_id = %(t)s", {"t": tenant})}
    first, second = rows
    assert list(second["message_ids"]) == [poem, reply] and second["first_turn"] == 2 and second["last_turn"] == 3
    assert first["last_turn"] == 1 and not first["is_open"] and second["is_open"]
    assert first["token_count"] == sum(tokens[m] for m in first["message_ids"])
    assert second["token_count"] == tokens[poem] + tokens[reply]
    # a second run of the jobs changes nothing
    drain_jobs(db, tenant, worker=17)
    assert len(db._rows("SELECT 1 FROM mnemo.semantic_objects WHERE tenant_id = %(t)s", {"t": tenant})) == 2


def test_agents_acting_in_text_are_segmented_like_tool_calls(db, tenant):
    """SWE-agent and mini-swe-agent write their action as a shell block at the end of
    their text; the environment answers in the next (user) message."""
    s = Session(db, tenant)
    s.say("user", "We're currently solving the following issue: the parser drops empty fields.")
    opened = s.say("assistant", "Let's look at the parser.\n```\nopen src/parser.py\n```")
    s.say("user", "[File: /repo/src/parser.py (80 lines total)]\n" + source("parser"))
    run = s.say("assistant", "Now reproduce it.\n```bash\npython reproduce.py\n```")
    s.say("user", "Traceback (most recent call last):\n  File \"reproduce.py\", line 3\nValueError: empty")
    answer = s.say("assistant", "Here is the fix:\n```python\nprint(1)\n```\nIt handles the empty case.")
    s.say("user", "Thanks, and what about quoted fields?")
    res = s.residency()
    kinds = {o: r["kind"] for o, r in res.items()}
    assert kinds[s.object_of(opened)] == "file_context" and res[s.object_of(opened)]["source_key"] == "src/parser.py"
    assert kinds[s.object_of(run)] == "error_context"
    assert kinds[s.object_of(answer)] == "conversation_phase"  # a code answer in a chat is no action
    # re-opening the file after it was released is a fault
    db.memory_release(tenant, s.s, [f"obj:{s.object_of(opened)}"])
    s.say("assistant", "Back to the parser.\n```\nopen src/parser.py 40\n```")
    assert [f["fault_type"] for f in s.faults()] == ["reread"]
