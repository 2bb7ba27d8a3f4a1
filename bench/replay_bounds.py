"""What a paging policy can reach on replayed sessions, without a database: the
reduction of idealised policies over the same calls and the same accounting as
bench/replay.py (issue 44's arithmetic: is a goal reachable at all?).

- ceiling: every policy sends the system prompt, the task and the call's new input
  (replay.py's reduction_ceiling).
- foresight, 0 faults: each result is held in full exactly while a later call will
  re-read it (the newest result the re-read matches), from the call after it until that
  re-read; every other result is dropped (``bare``), or sent as the oracle's stub
  (``stubs``), and the agent's messages and user turns are dropped (``bare``, ``stubs``)
  or sent whole (``whole``).
- LRU-K: the results of the newest K calls held in full, everything older dropped,
  with (``+foresight``) or without the older results a later call re-reads; without,
  the re-reads made more than K calls after their result are its faults.

Usage: bench/replay_bounds.py [DIR_OR_FILE...] [--max-calls 300] [--lru 4,8,12,16]
(none: the shared SWE-agent trajectories). One JSON line per input group.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))  # run as a script
import replay
from replay_policies import _stub


def bounds(a: replay.Analysis, max_calls: int | None, lru: list[int]) -> dict:
    """The token sums behind the bounds for one session (add them up per group)."""
    calls = [c for c in a.calls[:max_calls] if c.index > 0]
    until: dict[int, int] = {}  # result -> the last call that re-reads it
    distances = []
    for c in calls:
        for _, hits in a.rereads(c):
            h = hits[-1]
            until[h] = max(until.get(h, -1), c.number)
            distances.append(c.number - a.observations[h].call)
    out = {"calls": len(calls), "rereads": len(distances), "full": 0, "floor": 0, "bare": 0, "stubs": 0,
           "whole": 0, **{f"lru{k}": 0 for k in lru}, **{f"lru{k}+foresight": 0 for k in lru},
           **{f"lru{k}_faults": sum(1 for d in distances if d > k) for k in lru}}
    for c in calls:
        must = set(c.new_input) | ({a.task} if a.task is not None and a.task < c.index else set())
        floor = a.system_tokens + sum(a.tokens[i] for i in must)
        out["full"] += a.system_tokens + sum(a.tokens[:c.index])
        out["floor"] += floor
        pending = stubs = other = 0
        lru_sent = dict.fromkeys(lru, 0)
        lru_fs = dict.fromkeys(lru, 0)
        for i in range(c.index):
            if i in must:
                continue
            if i not in a.observations:
                other += a.tokens[i]
                continue
            reread = until.get(i, -1) >= c.number
            if reread:
                pending += a.tokens[i]
            else:
                stubs += a.sent_tokens(_stub(a.rec.messages[i], a, i))
            for k in lru:
                if c.number - a.observations[i].call <= k:
                    lru_sent[k] += a.tokens[i]
                    lru_fs[k] += a.tokens[i]
                elif reread:
                    lru_fs[k] += a.tokens[i]
        out["bare"] += floor + pending
        out["stubs"] += floor + pending + stubs
        out["whole"] += floor + pending + stubs + other
        for k in lru:
            out[f"lru{k}"] += floor + lru_sent[k]
            out[f"lru{k}+foresight"] += floor + lru_fs[k]
    return out


def figures(t: dict, lru: list[int]) -> dict:
    def red(k: str) -> float:
        return round(1 - t[k] / t["full"], 4) if t["full"] else 0.0
    return {
        "sessions": t["sessions"], "calls": t["calls"], "rereads": t["rereads"],
        "full_tokens_per_call": round(t["full"] / t["calls"]) if t["calls"] else 0,
        "ceiling": red("floor"),
        "foresight_bare": red("bare"), "foresight_stubs": red("stubs"), "foresight_whole": red("whole"),
        "reread_tokens_per_call": round((t["bare"] - t["floor"]) / t["calls"]) if t["calls"] else 0,
        **{f"lru{k}": {"reduction": red(f"lru{k}"), "faults": t[f"lru{k}_faults"],
                       "with_foresight": red(f"lru{k}+foresight")} for k in lru},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", type=Path)
    ap.add_argument("--max-calls", type=int, default=300)
    ap.add_argument("--lru", default="4,8,12,16")
    args = ap.parse_args(argv)
    lru = [int(k) for k in args.lru.split(",") if k]
    groups: dict[str, dict] = {}
    for rec in replay.load(args.inputs or [replay.SWE_AGENT_DIR]):
        got = bounds(replay.Analysis(replay.truncated(rec, args.max_calls)), args.max_calls, lru)
        g = groups.setdefault(rec.group, dict.fromkeys(got, 0) | {"sessions": 0})
        g["sessions"] += 1
        for k, v in got.items():
            g[k] += v
    result = {group: figures(t, lru) for group, t in groups.items()}
    for group, f in result.items():
        print(json.dumps({"group": group, **f}))
    return result


if __name__ == "__main__":
    main()
