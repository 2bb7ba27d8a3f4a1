"""Paging's pure parts (no database)."""

from __future__ import annotations

from mnemo_db.paging import ladder
from mnemo_db.paging.ladder import Change
from mnemo_db.paging.residency import net_changes


def test_an_object_stepped_down_twice_in_a_compile_is_stored_where_it_ended():
    """Found by test_paging_invariants_at_the_window: relieve stepped an object full ->
    detail -> stub in one compile, the write stored detail (one row per object), the
    packing had used stub, and the next compile stepped it down again."""
    steps = [Change(7, "full", "detail", "pressure", "warning"), Change(8, "full", "detail", "pressure", "warning"),
             Change(7, "detail", "stub", "pressure", "warning")]
    assert net_changes(steps) == [Change(7, "full", "stub", "pressure", "warning"),
                                  Change(8, "full", "detail", "pressure", "warning")]
    # down and back up again is no change at all
    assert net_changes([Change(3, "full", "detail", "pressure", "caution"),
                        Change(3, "detail", "full", "goal_shift", None)]) == []


def test_a_step_that_frees_nothing_is_passed_over_for_the_next_one():
    """A message whose embed job has not stored its levels costs as much at detail and
    compact as in full: warning takes it to its stub in one move, caution (whose only
    step is detail) leaves it, and an object whose every step frees nothing stays."""
    def resident(oid, costs):
        return ladder.Resident(oid, "tool_result", "full", last_turn=oid, cost=costs.__getitem__)
    cfg = ladder.settings({"target": 0.2})  # warning from 0.70, caution from 0.50
    no_levels = {"full": 500, "detail": 500, "compact": 500, "stub": 20, "evicted": 0}
    levelled = {"full": 500, "detail": 150, "compact": 30, "stub": 20, "evicted": 0}
    short = {"full": 20, "detail": 20, "compact": 20, "stub": 20, "evicted": 0}
    zone, changes, used = ladder.relieve(
        [resident(1, no_levels), resident(2, levelled), resident(3, short)], 1020, 1400, cfg)
    assert (zone, used) == ("warning", 1020 - 480 - 350)
    assert changes == [Change(1, "full", "stub", "pressure", "warning"),
                       Change(2, "full", "detail", "pressure", "warning")]
    zone, changes, _ = ladder.relieve([resident(1, no_levels)], 520, 900, cfg)
    assert (zone, changes) == ("caution", [])


def test_aging_takes_the_lowest_fidelity_any_rule_gives_and_never_raises_one():
    cfg = ladder.settings(None)  # outdated and quiet once not the newest, stale after 8, stubs evicted after 40

    def obj(oid, n, kind="tool_result", fidelity="full", writes=False, source=False, written_after=False,
            result_class=None, in_use=False):
        return {"object_id": oid, "n": n, "kind": kind, "fidelity": fidelity, "writes_source": writes,
                "has_source": source, "written_after": written_after, "result_class": result_class,
                "in_use": in_use}

    objects = [
        obj(1, 1, written_after=True),                                  # the newest call: stays
        obj(2, 2, written_after=True),                                  # a command before a write: stub
        obj(3, 2, kind="file_context", source=True, written_after=True),  # a read of a file written: stub
        obj(4, 4, kind="file_context", source=True),                    # a read nothing wrote: stays
        obj(5, 2, writes=True, source=True),                            # an edit's own output: stub
        obj(6, 9, result_class="test"),                                 # a stale test run: detail
        obj(7, 9, written_after=True),                                  # stale and outdated: stub
        obj(8, 9, fidelity="stub", written_after=True),                 # already lower: stays
        obj(9, 41, kind="file_context", fidelity="stub", source=True),  # an old stub: evicted
        obj(10, 41, kind="file_context", source=True),                  # an old read at full: stays
        obj(11, 5, kind="external_reference", source=True, written_after=True),  # a fetch of old: stays
        obj(12, 2, result_class="command"),                             # a script's output: quiet, stub
        obj(13, 2, result_class="command", in_use=True),                # ... whose names the agent used: stays
        obj(14, 4, result_class="test"),                                # a test run, nothing written: stays
        obj(15, 4, result_class="search"),                              # a search: stays
        obj(16, 2, kind="external_reference", source=True, result_class="fetch"),  # a page: quiet, stub
        obj(17, 1, result_class="command"),                             # the newest command: stays
    ]
    got = {c.object_id: (c.from_fidelity, c.to_fidelity) for c in ladder.aging(objects, cfg)}
    assert got == {2: ("full", "stub"), 3: ("full", "stub"), 5: ("full", "stub"), 6: ("full", "detail"),
                   7: ("full", "stub"), 9: ("stub", "evicted"), 12: ("full", "stub"), 16: ("full", "stub")}
    assert all(c.trigger == "waste" and c.zone is None for c in ladder.aging(objects, cfg))


def test_what_a_command_is_decides_how_soon_its_output_leaves():
    """sources.command_class: test runs, listings and searches (run again by agents)
    apart from any other command, by its shell programs or its tool's name."""
    from mnemo_db.paging import sources
    assert sources.command_class("bash", {"command": "cd /r && python -m pytest -q tests/a.py"}) == "test"
    assert sources.command_class("bash", {"command": "ls -la src"}) == "listing"
    assert sources.command_class("find_file", '{"command": "find_file a.py"}') == "listing"
    assert sources.command_class("bash", {"command": "strings f.img | grep flag"}) == "search"
    assert sources.command_class("Grep", {"pattern": "def main"}) == "search"
    assert sources.command_class("bash", {"command": "python reproduce.py"}) == "command"
    assert sources.command_class("submit", {}) == "command"


def test_names_are_what_code_and_outputs_share_not_english():
    from mnemo_db.paging import sources
    said = "It looks like `FUN_00401260` is the main function; local_48 holds flag.append's result."
    assert sources.names(said) == {"FUN_00401260", "local_48", "flag.append"}
    assert sources.names("The Function returns THE value") == set()


def test_only_tool_units_paging_holds_lower_keep_their_memories_out_of_the_block():
    from types import SimpleNamespace

    from mnemo_db.compile.bundle import paged_tool_sources
    from mnemo_db.paging.residency import PagingPlan
    units = [[{"message_id": 1}], [{"message_id": 2}, {"message_id": 3}], [{"message_id": 4}], [{"message_id": 5}]]
    floors = [1, 2, 0, 3]  # a demoted phase, a compacted tool call, a whole one, a stubbed phase
    plan = SimpleNamespace(prepared=SimpleNamespace(units=units, floors=floors),
                           paging=PagingPlan(floors=floors, tool_units=frozenset({1, 2})))
    assert paged_tool_sources(plan) == {"msg:2", "msg:3"}
    assert paged_tool_sources(SimpleNamespace(prepared=SimpleNamespace(units=units, floors=None), paging=None)) == set()


def test_a_cold_read_leaves_as_a_plain_commands_output_does():
    """ladder.quiet: a read of a file nothing wrote since, in a session that has re-read
    nothing (cold_read, set by store.Pager), goes to stub once it is not the newest
    call, unless the agent named it or one of its names since; with cold_reads off,
    or once the session re-read, a read stays for pressure to decide."""
    def read(oid, n, cold=True, in_use=False, fidelity="full"):
        return {"object_id": oid, "n": n, "kind": "file_context", "fidelity": fidelity, "writes_source": False,
                "has_source": True, "written_after": False, "result_class": None, "cold_read": cold,
                "in_use": in_use}

    objects = [read(1, 1), read(2, 2), read(3, 2, in_use=True), read(4, 2, cold=False), read(5, 5, fidelity="stub")]
    cfg = ladder.settings(None)
    assert {c.object_id: c.to_fidelity for c in ladder.aging(objects, cfg)} == {2: "stub"}
    assert ladder.aging(objects, ladder.settings({"cold_reads": False})) == []
    # a boolean setting takes a boolean only; a number setting no boolean
    assert ladder.settings({"cold_reads": 0})["cold_reads"] is True
    assert ladder.settings({"quiet_after_calls": True})["quiet_after_calls"] == 1


def test_pressure_takes_a_file_read_to_stub_in_one_step():
    """relieve: a zone that moves a full file read moves it to stub (its detail keeps
    part of the lines, and a re-read asks for the lines); any other object goes one
    level down as before."""
    def resident(oid, kind, turn):
        costs = {"full": 1000, "detail": 300, "compact": 50, "stub": 10, "evicted": 0}
        return ladder.Resident(oid, kind, "full", turn, cost=costs.__getitem__)

    objects = [resident(1, "file_context", 1), resident(2, "tool_result", 2), resident(3, "file_context", 3)]
    cfg = ladder.settings(None)
    zone, changes, used = ladder.relieve(objects, 3000, 4500, cfg)  # 0.67: caution, target 0.6 = 2700
    assert zone == "caution"
    assert [(c.object_id, c.from_fidelity, c.to_fidelity) for c in changes] == [(1, "full", "stub")]
    assert used == 2010
    objects = [resident(1, "tool_result", 1), resident(2, "file_context", 2)]
    zone, changes, _ = ladder.relieve(objects, 2000, 3000, cfg)  # 0.67, target 1800
    assert [(c.object_id, c.to_fidelity) for c in changes] == [(1, "detail")]


def test_emergency_takes_the_working_set_only_out_of_emergency():
    """relieve in emergency: what is outside the working set goes down to the target;
    the working set (protected) only until the history is below the critical
    threshold, oldest first, so that a working set larger than the window leaves one
    object at a time as new ones come."""
    def resident(oid, protected):
        costs = {"full": 1000, "detail": 300, "compact": 50, "stub": 10, "evicted": 0}
        return ladder.Resident(oid, "file_context", "full", oid, protected=protected, cost=costs.__getitem__)

    cfg = ladder.settings(None)  # critical 0.85, emergency 0.95, target 0.6
    objects = [resident(1, False), resident(2, True), resident(3, True), resident(4, True), resident(5, True)]
    zone, changes, used = ladder.relieve(objects, 5000, 5000, cfg)  # 1.0: emergency, target 3000
    assert zone == "emergency"
    # 1 (not protected) goes: 4000, 0.8 < 0.85; the protected ones stay, though 0.8 > the target
    assert [(c.object_id, c.to_fidelity) for c in changes] == [(1, "evicted")]
    assert used == 4000
    objects = [resident(k, True) for k in range(1, 7)]
    zone, changes, used = ladder.relieve(objects, 6000, 5000, cfg)  # 1.2
    assert [c.object_id for c in changes] == [1, 2]  # oldest first, until 4000 < 4250
    assert used == 4000
