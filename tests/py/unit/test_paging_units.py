"""Paging's pure parts (no database)."""

from __future__ import annotations

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
