"""bench/replay.py --show-faults: for each fault, the kind of result re-read (test
output, ls, grep, a file read, an error, other), how many calls back it was made
(distance), the fidelity the context held it at when it was re-read (detail, compact,
stub, evicted; the naive baselines only stub), the pressure zone of that compile and
the zone of the compile where it left full (paging's zones: normal, caution,
warning, critical, emergency; '-' for the baselines, which have none). Aggregated
per kind: count, distance p50 / max, and histograms. See docs/replay.md."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from mnemo_db import redact
from mnemo_db.paging import shell, sources
from replay_actions import Action

KINDS = ("test output", "ls", "grep", "file read", "error", "other")
FIDELITIES = ("detail", "compact", "stub", "summarised", "evicted", "redacted", "other")
ZONES = ("normal", "caution", "warning", "critical", "emergency", "-")
# what runs tests, lists and searches: paging's own reading (sources.command_class)
TEST_RE = sources.TEST_RE
LISTERS = sources.LISTERS | {"find_file"}
SEARCHERS = sources.SEARCHERS | {"search_dir", "search_file"}
# what a degraded message of the compile says it is (compile/history.py's markers)
_LEVEL_RE = r"\[(detail|compact|stub) of msg:{id};"


def result_kind(action: Action, text: str) -> str:
    """The kind of result a re-read asked for again: a test run's output by its command;
    an error by its text (as paging tells one: sources.looks_like_error, a file's first
    lines only); a file read; a listing or a search by the programs of its command."""
    if action.kind == "command" and TEST_RE.search(action.key):
        return "test output"
    if sources.looks_like_error(text[:300] if action.kind == "read" else text):
        return "error"
    if action.kind == "read":
        return "file read"
    words = action.key.split()
    programs = set(shell.effects(action.key).programs) | {words[0] if words else ""}
    if programs & LISTERS:
        return "ls"
    if programs & SEARCHERS:
        return "grep"
    return "other"


def held_in(sent_text: str, message_id: int | None, tool_call_id: str | None, sent: list[dict]) -> str:
    """The fidelity a compiled context holds a message at that it does not hold in full:
    the level its degraded text names; else, where its tool call's result is there,
    'summarised' (part of an assistant's summary), 'redacted' (whole but for what the
    write path's redaction masked: the text differs from the recording) or 'other';
    else 'evicted'."""
    if message_id is not None:
        m = re.search(_LEVEL_RE.format(id=message_id), sent_text)
        if m:
            return m.group(1)
    there = [str(s.get("content") or "") for s in sent if tool_call_id and s.get("tool_call_id") == tool_call_id]
    if not there:
        return "evicted"
    if there[0].startswith(("[summary of obj:", "[part of obj:")):
        return "summarised"
    return "redacted" if redact.MARKED.search(there[0]) else "other"


def _histogram(values: list[str], order: tuple[str, ...]) -> dict[str, int]:
    counts = Counter(values)
    return {k: counts[k] for k in (*order, *sorted(set(counts) - set(order))) if counts[k]}


def aggregate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind (and 'all'): count, distance p50 / max in calls, and the histograms of
    fidelity, zone at the re-read and zone where the result left full."""
    out: dict[str, Any] = {}
    groups = {k: [r for r in records if r["kind"] == k] for k in KINDS}
    for kind, rs in [*groups.items(), ("all", records)]:
        if not rs:
            continue
        d = [r["distance"] for r in rs]
        out[kind] = {
            "count": len(rs), "distance_p50": statistics.median(d), "distance_max": max(d),
            "fidelity": _histogram([r["fidelity"] for r in rs], FIDELITIES),
            "zone": _histogram([r["zone"] for r in rs], ZONES),
            "zone_left": _histogram([r["zone_left"] for r in rs], ZONES),
        }
    return out


def table(title: str, agg: dict[str, Any]) -> list[str]:
    """The aggregate as a compact table, a row per kind (histograms as name:count)."""
    def hist(h: dict[str, int]) -> str:
        return " ".join(f"{k}:{v}" for k, v in h.items())
    rows = [(kind, a["count"], a["distance_p50"], a["distance_max"], hist(a["fidelity"]), hist(a["zone"]),
             hist(a["zone_left"])) for kind, a in agg.items()]
    wf = max([len("fidelity"), *(len(r[4]) for r in rows)])
    wz = max([len("zone at re-read"), *(len(r[5]) for r in rows)])
    lines = [f"{title}: faults by kind",
             f"  {'kind':11} {'n':>4} {'dist p50':>8} {'max':>4}  {'fidelity':{wf}}  {'zone at re-read':{wz}}  zone left full"]
    lines += [f"  {k:11} {n:4} {p50:8g} {mx:4}  {f:{wf}}  {z:{wz}}  {zl}" for k, n, p50, mx, f, z, zl in rows]
    return lines
