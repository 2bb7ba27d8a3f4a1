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
    cfg = ladder.settings(None)  # outdated after 3, stale after 8, stubs evicted after 40

    def obj(oid, n, kind="tool_result", fidelity="full", writes=False, source=False, written_after=False):
        return {"object_id": oid, "n": n, "kind": kind, "fidelity": fidelity, "writes_source": writes,
                "has_source": source, "written_after": written_after}

    objects = [
        obj(1, 3, written_after=True),                                  # among the newest: stays
        obj(2, 4, written_after=True),                                  # a command before a write: compact
        obj(3, 4, kind="file_context", source=True, written_after=True),  # a read of a file written: stub
        obj(4, 4, kind="file_context", source=True),                    # a read nothing wrote: stays
        obj(5, 4, writes=True, source=True),                            # an edit's own output: compact
        obj(6, 9),                                                      # a stale command output: detail
        obj(7, 9, written_after=True),                                  # stale and outdated: compact
        obj(8, 9, fidelity="stub", written_after=True),                 # already lower: stays
        obj(9, 41, kind="file_context", fidelity="stub", source=True),  # an old stub: evicted
        obj(10, 41, kind="file_context", source=True),                  # an old read at full: stays
        obj(11, 5, kind="external_reference", source=True, written_after=True),  # a fetch: stays
    ]
    got = {c.object_id: (c.from_fidelity, c.to_fidelity) for c in ladder.aging(objects, cfg)}
    assert got == {2: ("full", "compact"), 3: ("full", "stub"), 5: ("full", "compact"), 6: ("full", "detail"),
                   7: ("full", "compact"), 9: ("stub", "evicted")}
    assert all(c.trigger == "waste" and c.zone is None for c in ladder.aging(objects, cfg))


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
