"""The fidelity ladder and the fidelity manager's decisions (docs/design.md §Semantic objects and paging),
free of database access: given a session's objects with their residency and their
cost at each fidelity, which objects change fidelity, and why.

Pressure is the history's tokens at the objects' current fidelities over the
session's window budget (context window - system prompt - response reserve - tool
definitions; not the per-call budget option: residency is durable, and one caller
asking for a small context once must not evict objects from the session). Zones:

    normal    < caution     observe only
    caution   < warning     full -> detail, oldest and least relevant first
    warning   < critical    full -> detail, detail -> compact, compact -> stub
    critical  < emergency   full, detail, compact -> stub; stub -> evicted
    emergency               everything -> evicted but the last two user turns, the
                            newest tool call and pinned objects (the working set
                            only until the ratio is below critical)

A zone acts until the ratio is at most `target` or its moves run out (hysteresis:
changes come in batches, so most compiles change nothing and the prompt prefix stays
byte-identical).
Pinned objects (a fault or restore pinned them for some turns), anchored ones (the
anchor tag) and the essential ones (the last two user turns, the newest object) never
move under pressure; the protected working set (the newest, and a revisited source's
among the newest: residency.plan_residency) moves in emergency only, last. Relevance
is 1 for an object of a source the agent read or wrote more than once and for a test
run's output (run again and again), 0 otherwise:
what was read once leaves first (LRU-2; the generated long sessions' faults were re-reads of
the files beside the one being edited, 14-23 calls after the read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

LADDER = ("full", "detail", "compact", "stub", "evicted")
LEVEL = {f: i for i, f in enumerate(LADDER)}
ZONES = ("normal", "caution", "warning", "critical", "emergency")
# the outputs the quiet rule takes: a plain command's and a fetched page's (sources.command_class)
QUIET_CLASSES = ("command", "fetch")

DEFAULTS = {
    # ratio thresholds of the zones (docs/design.md §Semantic objects and paging)
    "caution": 0.50, "warning": 0.70, "critical": 0.85, "emergency": 0.95,
    # a zone acts until the ratio is at most this (0.40 faulted 4x as often on long
    # generated sessions at 32k for the same reduction: docs/replay.md)
    "target": 0.60,
    # turns an object stays pinned after a fault or a restore (thrash guard)
    "pin_turns": 8,
    # newest objects pressure never degrades below full (the working set: agents
    # re-read what they read 3-10 calls before; with 2, most faults were such re-reads)
    "protect_newest": 12,
    # ... and the objects of a source accessed more than once, among the newest this many
    "protect_hot": 30,
    # conversation phases and small tool results under this merge with their
    # neighbour of the same kind
    "min_object_tokens": 500,
    # consecutive turns below this cosine start a new conversation phase
    "topic_shift": 0.70,
    # consecutive user messages below this cosine are a goal shift
    "goal_shift": 0.50,
    # a tool_result older than this many tool calls is stale: degraded to `stale_to`
    "stale_after_calls": 8,
    "stale_to": "detail",
    # a file read superseded by a later read of the same lines, or made stale by a
    # write to the file, and a duplicated output, go to this fidelity
    "superseded_to": "stub",
    # outdated once it is not among this many newest tool calls: a read of a file written since, a
    # command's output that a later write has made stale (the state it showed is
    # gone: running it again is not a re-read), and an edit's own output (the agent
    # knows what it wrote, a read shows the file now). None of them can be read
    # again, so they go as the oracle's do: once a newer call stands between (1;
    # it was 3, to compact, when the agent's own words went down with them and the
    # next turns missed what they named: docs/replay.md, issue 44)
    "outdated_after_calls": 1,
    "outdated_to": "stub",
    # the output of a plain command (command_class 'command': a script run, an
    # install; not a test run, a listing or a search, which agents run again) and a
    # fetched page, once it is not among this many newest tool calls, with nothing
    # written since (else it is outdated): the shared SWE-agent sessions ran none of
    # their 67 such commands again, the generated ones none of theirs
    "quiet_after_calls": 1,
    "quiet_to": "stub",
    # ... and so does a cold read (the same threshold): a read of a file nothing wrote
    # since, in a session whose agent has not yet read again lines it had read (no
    # read overlapping an earlier one of the same file with no write between), unless
    # the assistant named one of its names since. An agent that does not re-read what
    # it read has no use for the text once a newer call stands between: the shared
    # SWE-agent sessions re-read 2 of their results in 230 calls, and kept a task's
    # setup.py whole for 11 calls. The first re-read ends the rule for the session (the
    # generated sessions re-read within their first 6 calls): pressure decides then.
    "cold_reads": True,
    # a stub older than this many tool calls is evicted: a long session's stubs (its
    # call and a line each) otherwise grow with it, and a re-read faults on a stub as
    # on an evicted object; memory_query and memory_restore still reach it
    "evict_stubs_after_calls": 40,
}


def settings(raw: dict | None) -> dict:
    """The paging settings: the defaults, with the stored setting's keys of the right
    type (booleans for booleans, numbers for numbers, fidelity names for fidelities)."""
    out = dict(DEFAULTS)
    for k, v in (raw if isinstance(raw, dict) else {}).items():
        if k not in out or isinstance(v, bool) != isinstance(out[k], bool):
            continue
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(out[k], int | float) and isinstance(v, int | float):
            out[k] = type(out[k])(v)
        elif isinstance(out[k], str) and v in LADDER[1:]:
            out[k] = v
    return out


def zone_of(ratio: float, cfg: dict) -> str:
    zone = "normal"
    for z in ZONES[1:]:
        if ratio >= cfg[z]:
            zone = z
    return zone


@dataclass(eq=False)
class Resident:
    """An object of the session as the fidelity manager sees it."""
    object_id: int
    kind: str
    fidelity: str
    last_turn: int
    pinned: bool = False
    anchored: bool = False
    protected: bool = False  # the working set: no zone but emergency moves it
    essential: bool = False  # the last two user turns and the newest object: no zone moves it
    relevance: float = 0.0
    # tokens of the object's messages at a fidelity (evicted: 0)
    cost: Callable[[str], int] = field(default=lambda f: 0, repr=False)


@dataclass(frozen=True)
class Change:
    object_id: int
    from_fidelity: str
    to_fidelity: str
    trigger: str
    zone: str | None


def _step(zone: str, fidelity: str) -> str | None:
    """Where a zone moves an object at a fidelity (None: it does not)."""
    level = LEVEL[fidelity]
    if zone == "caution":
        return "detail" if level == 0 else None
    if zone == "warning":
        return LADDER[level + 1] if level <= 2 else None
    if zone == "critical":
        return "stub" if level <= 2 else ("evicted" if level == 3 else None)
    if zone == "emergency":
        return "evicted" if level < 4 else None
    return None


def relieve(objects: list[Resident], used: int, capacity: int, cfg: dict) -> tuple[str, list[Change], int]:
    """The zone of a compile and the changes that bring the history's tokens (`used`,
    at the current fidelities) down to the target ratio of `capacity`: the zone's
    moves, least relevant then oldest first, pass after pass (warning takes an object
    from full down to stub in three; a step that frees nothing is
    passed over), until the target is reached or the zone has no
    move left. Either way the next compile, without new data, changes nothing: its
    zone is this one or a lower one, whose moves are a subset of these. A history
    that does not fit the window is in emergency, which may evict anything movable.
    Returns (zone, changes, tokens used after them); the objects' fidelities are
    updated in place."""
    if capacity <= 0:
        return "normal", [], used
    zone = zone_of(used / capacity, cfg)
    changes: list[Change] = []
    if zone == "normal":
        return zone, changes, used
    movable = sorted((o for o in objects
                      if not (o.pinned or o.anchored or o.essential or (o.protected and zone != "emergency"))),
                     key=lambda o: (o.protected, o.relevance, o.last_turn, o.object_id))
    moved = True
    while moved and used > cfg["target"] * capacity:
        moved = False
        for o in movable:
            if used <= cfg["target"] * capacity:
                break
            # the working set leaves only as far as the history must to leave
            # emergency (below critical), oldest first: a working set larger than the
            # window then goes one object at a time as new ones come, where going down
            # to the target took a third of the window's newest reads at once (the
            # generated sessions re-read two of them 36-51 calls later)
            if o.protected and used < cfg["critical"] * capacity:
                continue
            to = _step(zone, o.fidelity)
            # a file read goes from full to stub in one step: part of a file is no read
            # of it (an agent that needs the lines reads them again, a fault either
            # way), so a read's detail keeps 30 % of it for little; one read leaves
            # where three went to detail, and the others stay whole
            if to is not None and o.kind == "file_context" and LEVEL[to] < LEVEL["stub"]:
                to = "stub"
            # a step that frees nothing (a level the message lacks, e.g. before its
            # embed job stored its detail and compact) is passed over for the zone's
            # next one: a move that changes no token only costs the object fidelity
            while to is not None and o.cost(to) >= o.cost(o.fidelity):
                to = _step(zone, to)
            if to is None:
                continue
            used += o.cost(to) - o.cost(o.fidelity)
            changes.append(Change(o.object_id, o.fidelity, to, "pressure", zone))
            o.fidelity, moved = to, True
    return zone, changes, used


def quiet(o: dict, cfg: dict) -> bool:
    """Whether the quiet rule may take an aging row (store.py's 'aging', with cold_read
    set by store.Pager when the session has re-read nothing): a plain command's output,
    a fetched page (QUIET_CLASSES), or a cold read (cfg cold_reads)."""
    return o.get("result_class") in QUIET_CLASSES or (bool(cfg["cold_reads"]) and bool(o.get("cold_read")))


def aging(objects: list[dict], cfg: dict) -> list[Change]:
    """Structural waste among a session's older tool objects, at any pressure (store.py
    'aging' gives each with n, how many tool objects are newer, and written_after):
    what a write outdated (a read of the file written: superseded_to; an edit's own
    output and a command's output with a write after it: outdated_to) once n exceeds
    outdated_after_calls; a command's output (tool_result) past stale_after_calls:
    stale_to; a plain command's output, a fetched page or a cold read (quiet) past
    quiet_after_calls: quiet_to, unless the assistant named one of its names since
    (in_use: store.Pager._in_use); a stub past evict_stubs_after_calls: evicted. The lowest applicable
    fidelity wins; nothing moves up."""
    changes = []
    for o in objects:
        targets = []
        if o["n"] > cfg["outdated_after_calls"] and (o["writes_source"] or o["written_after"]) \
                and o["kind"] != "external_reference":
            read = o["has_source"] and not o["writes_source"]
            targets.append(cfg["superseded_to"] if read else cfg["outdated_to"])
        if o["n"] > cfg["stale_after_calls"] and o["kind"] == "tool_result":
            targets.append(cfg["stale_to"])
        if o["n"] > cfg["quiet_after_calls"] and quiet(o, cfg) and not o.get("in_use"):
            targets.append(cfg["quiet_to"])
        if o["n"] > cfg["evict_stubs_after_calls"] and o["fidelity"] == "stub":
            targets.append("evicted")
        to = max(targets, key=LEVEL.__getitem__, default=None)
        if to is not None and LEVEL[to] > LEVEL[o["fidelity"]]:
            changes.append(Change(o["object_id"], o["fidelity"], to, "waste", None))
    return changes


def goal_shift(objects: list[Resident], matching: set[int], cfg: dict) -> list[Change]:
    """On a goal shift: objects that match the new goal come back to full,
    resident ones that do not go down a level, never below compact (a goal
    misread must be cheap to undo). Pinned and anchored objects stay."""
    changes = []
    for o in objects:
        if o.pinned or o.anchored:
            continue
        if o.object_id in matching and o.fidelity != "full" and o.fidelity != "evicted":
            changes.append(Change(o.object_id, o.fidelity, "full", "goal_shift", None))
            o.fidelity = "full"
        elif o.object_id not in matching and not o.protected and LEVEL[o.fidelity] < LEVEL["compact"]:
            to = LADDER[LEVEL[o.fidelity] + 1]
            changes.append(Change(o.object_id, o.fidelity, to, "goal_shift", None))
            o.fidelity = to
    return changes
