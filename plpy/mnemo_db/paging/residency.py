"""Residency in a compile: each history unit's fidelity floor from its object's
residency, and the pressure zone's changes (ladder.relieve) measured in the unit
costs the history packing will use (compile/history.PreparedHistory), so that what
the fidelity manager decides is exactly what the context costs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import ladder
from .ladder import LADDER, LEVEL, Change, Resident, relieve

EVICTED = LEVEL["evicted"]


@dataclass
class PagingPlan:
    """What a compile decided about residency: each unit's fidelity floor (0 full ..
    4 evicted), the changes to store, the zone, and the history's tokens at the floors."""
    floors: list[int]
    changes: list[Change] = field(default_factory=list)
    zone: str = "normal"
    tokens: int = 0
    turn: int = 0
    restored_memories: frozenset[str] = frozenset()
    evicted_units: int = 0
    tool_units: frozenset[int] = frozenset()  # the units of objects other than conversation phases


def net_changes(changes: list[Change]) -> list[Change]:
    """One change per object, from its first fidelity to its last: relieve may step
    an object down the ladder more than once in a compile, and the stored residency
    must be where the compile left it (the write's UPDATE applies one row per object;
    storing the first step only made the next compile step it down again)."""
    net: dict[int, Change] = {}
    for c in changes:
        first = net.get(c.object_id)
        net[c.object_id] = c if first is None else Change(c.object_id, first.from_fidelity, c.to_fidelity,
                                                          c.trigger, c.zone)
    return [c for c in net.values() if c.from_fidelity != c.to_fidelity]


def unit_cost(prepared, u: int, level: int) -> int:
    return 0 if level >= EVICTED else prepared.cost(u, level)


def plan_residency(prepared, objects: list[dict], capacity: int, cfg: dict, turn: int,
                   restored_memories: frozenset[str] = frozenset()) -> PagingPlan:
    """The floors of the history's units and the pressure changes. objects: the
    session's objects overlapping the history (object_id, kind, message_ids,
    last_turn, fidelity, pinned_until_turn, anchored); turn: the session's next turn
    index; capacity: the window budget the zones are ratios of."""
    units = prepared.units
    unit_of = {m["message_id"]: u for u, unit in enumerate(units) for m in unit}
    owned: dict[int, list[int]] = {}
    residents: list[Resident] = []
    for o in sorted(objects, key=lambda o: (o["last_turn"], o["object_id"])):
        us = sorted({unit_of[mid] for mid in o["message_ids"] if mid in unit_of})
        if not us:
            continue
        owned[o["object_id"]] = us
        residents.append(Resident(
            object_id=o["object_id"], kind=o["kind"], fidelity=o["fidelity"], last_turn=o["last_turn"],
            pinned=o["pinned_until_turn"] > turn, anchored=o["anchored"],
            relevance=float(o.get("accesses", 1) > 1 or o.get("result_class") == "test"),
            cost=lambda f, us=us: sum(unit_cost(prepared, u, LEVEL[f]) for u in us)))
    if not residents:
        return PagingPlan(floors=[0] * len(units), tokens=sum(prepared.full_costs), turn=turn,
                          restored_memories=restored_memories)
    # the working set: the newest objects and those holding the last two user turns
    last_users = [u for u, unit in enumerate(units) if unit[0]["role"] == "user"][-2:]
    for o in residents[-cfg["protect_newest"]:]:
        o.protected = True
    # a source the agent came back to (read or written more than once) is its working
    # set: its objects among the newest `protect_hot` stay too (LRU-2: a source read
    # once is what leaves first); so does a test run's output (relevance 1): agents
    # run the tests again and again, and one run with nothing written since shows
    # what the next would
    for o in residents[-cfg["protect_hot"]:] if cfg["protect_hot"] > 0 else ():
        if o.relevance > 0:
            o.protected = True
    residents[-1].essential = True
    for o in residents:
        if any(u in last_users for u in owned[o.object_id]):
            o.essential = True
    floors = [0] * len(units)
    for o in residents:
        for u in owned[o.object_id]:
            floors[u] = max(floors[u], LEVEL[o.fidelity])
    used = sum(unit_cost(prepared, u, f) for u, f in enumerate(floors))
    zone, changes, _ = relieve(residents, used, capacity, cfg)
    for o in residents:
        for u in owned[o.object_id]:
            floors[u] = LEVEL[o.fidelity]
    used = sum(unit_cost(prepared, u, f) for u, f in enumerate(floors))
    return PagingPlan(floors=floors, changes=net_changes(changes), zone=zone, tokens=used, turn=turn,
                      restored_memories=restored_memories,
                      evicted_units=sum(1 for f in floors if f >= EVICTED),
                      tool_units=frozenset(u for o in residents if o.kind != "conversation_phase"
                                           for u in owned[o.object_id]))


# The compile's statements (run through compile/phases.Database by name).
STATEMENTS = {
    # accesses: the objects of the history that read or wrote the same source (a
    # command's object: 1)
    "paging_objects": ("""SELECT mnemo_internal.setting('paging')::text AS settings, (
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'object_id', o.object_id, 'kind', o.kind, 'message_ids', o.message_ids, 'memory_id', o.memory_id,
        'last_turn', o.last_turn, 'fidelity', o.fidelity, 'pinned_until_turn', o.pinned_until_turn,
        'anchored', o.anchored, 'summary', o.summary, 'accesses', o.accesses, 'result_class', o.result_class)
        ORDER BY o.first_turn), '[]')::text
    FROM (
        SELECT o.*, r.fidelity, r.pinned_until_turn, r.anchored,
            CASE WHEN o.source_key IS NULL THEN 1 ELSE count(*) OVER (PARTITION BY o.source_key) END AS accesses
        FROM mnemo.semantic_objects AS o
        JOIN mnemo.object_residency AS r
            ON r.tenant_id = o.tenant_id AND r.session_id = o.session_id AND r.object_id = o.object_id
        WHERE o.tenant_id = $1 AND o.session_id = $2 AND (o.last_turn >= $3 OR o.memory_id IS NOT NULL)) AS o
    ) AS objects""", ["text", "uuid", "integer"]),
    # paging_state's updated_at = excluded.updated_at (its default, now()): Citus takes only
    # IMMUTABLE functions in ON CONFLICT DO UPDATE SET
    "paging_write": ("""WITH c AS (
    SELECT * FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[])
        AS c (object_id, from_fidelity, to_fidelity, zone)),
r AS (
    UPDATE mnemo.object_residency AS r SET fidelity = c.to_fidelity, changed_turn = $7, updated_at = now()
    FROM c WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.object_id = c.object_id
        AND r.fidelity = c.from_fidelity
    RETURNING r.object_id),
l AS (
    INSERT INTO mnemo.fidelity_log (tenant_id, session_id, object_id, from_fidelity, to_fidelity, trigger,
        pressure_zone, turn_index, token_count)
    SELECT $1, $2, c.object_id, c.from_fidelity, c.to_fidelity, 'pressure', c.zone, $7, o.token_count
    FROM c JOIN r ON r.object_id = c.object_id
    JOIN mnemo.semantic_objects AS o ON o.tenant_id = $1 AND o.object_id = c.object_id)
INSERT INTO mnemo.paging_state AS s (tenant_id, session_id, zone) VALUES ($1, $2, $8)
ON CONFLICT (tenant_id, session_id) DO UPDATE SET zone = $8, updated_at = excluded.updated_at""",
                     ["text", "uuid", "bigint[]", "text[]", "text[]", "text[]", "integer", "text"]),
}


def read(db, tenant_id: str, session_id: str, prepared, capacity: int) -> PagingPlan | None:
    """The compile's PagingPlan (None: the session has no semantic objects, and its
    history is packed by age alone, as before paging)."""
    units = prepared.units
    if not units:
        return None
    first_turn = units[0][0]["turn_index"]
    row = db.run("paging_objects", [tenant_id, session_id, first_turn])[0]
    objects = json.loads(row["objects"])
    if not objects:
        return None
    cfg = ladder.settings(json.loads(row["settings"]) if row["settings"] else None)
    turn = units[-1][-1]["turn_index"] + 1
    history_objects = [o for o in objects if o["memory_id"] is None]
    sizes = {m["message_id"]: m["token_count"] or 0 for unit in units for m in unit}
    # a tool object's messages but its call: the outputs (their stub is a pointer)
    roles = {m["message_id"]: m["role"] for unit in units for m in unit}
    outputs = {mid for o in history_objects if o["kind"] != "conversation_phase"
               for mid in o["message_ids"] if roles.get(mid) in ("tool", "user")}
    if outputs:
        prepared.mark_outputs(outputs)
    for o in history_objects:
        present = [mid for mid in o["message_ids"] if mid in sizes]
        if o.get("summary") and present:
            carrier = max(present, key=lambda mid: sizes[mid])  # the summary replaces the largest
            for mid in present:
                prepared.authored[mid] = (o["object_id"], o["summary"], mid == carrier)
    restored = frozenset(f"mem:{o['memory_id']}" for o in objects
                         if o["memory_id"] is not None and o["fidelity"] == "full" and o["pinned_until_turn"] > turn)
    return plan_residency(prepared, history_objects, capacity, cfg, turn, restored)


def write(db, tenant_id: str, session_id: str, plan: PagingPlan) -> None:
    """The compile's residency changes, their fidelity_log rows and the session's zone.
    A change whose object moved since the compile read it (a phantom tool call, a
    record in between) is skipped: the later decision stands."""
    cs = plan.changes
    db.run("paging_write", [tenant_id, session_id, [c.object_id for c in cs], [c.from_fidelity for c in cs],
                            [c.to_fidelity for c in cs], [c.zone for c in cs], plan.turn, plan.zone])


__all__ = ["LADDER", "STATEMENTS", "PagingPlan", "plan_residency", "read", "write"]
