"""make bench-replay: recorded agent sessions replayed the way a proxy sees them.

For model call k of a recording (the k-th assistant message), every message before it
is recorded (mnemo.record_message), the job queue is run (as pg_cron would between two
model calls), and the context is compiled (mnemo.compile_context_bundle) for a session
whose context window is W (32k and 128k by default: the default budget, window - system
prompt - response reserve - tool definitions). Then the recorded model's next move (its
message k, its tool calls, and the results they got) is compared with what the compiled
context held. Each (session, window) replays in a tenant of its own, so no run sees
another's messages. The same evaluation runs on two naive policies over the same calls:
``stub8`` stubs every tool result older than 8 calls (pichay-like), ``oracle`` stubs
every tool result but the newest one unless the session re-reads it later (perfect
foresight). Figures (docs/replay.md says the same at length):

- reduction: 1 - tokens sent / full-history tokens, summed over the calls. Tokens are
  o200k counts of each message's text (content, and each tool call's name and
  arguments) plus 4 a message, on both sides; tool definitions are left out of both.
  reduction_ceiling: 1 - what every policy sends (the system prompt, the task, which is
  the first user message, and the call's new input) / full: the reduction of a policy
  that dropped everything else without a trace.
- re-reads and faults: an action of the next message re-reads an earlier observation
  (a tool result, or the environment's reply to an action written in the text) when
  it reads the same file with an overlapping line range and nothing wrote that file
  since, or runs the same command (or fetches the same URL) and nothing wrote
  anything since. It is a fault when none of the matching observations' full text is
  in the compiled messages (text comparison: the observation's whole text must be a
  substring of the compiled context). Offline every such re-read counts against the
  policy, even where the recorded model re-read what it still had.
- evictions: an observation that was in full in the previous call's context and is
  not in full in this one (or, the first time it is offered, is not in full): the
  fault rate is faults / evictions, as pichay counts it; faults per call beside it.
- information misses: see :func:`identifiers`. Candidates are the identifiers of the
  next message (text and tool arguments) that are in the identifiers of some message of
  its prompt, minus those of the system prompt and of this call's new input (the
  messages after the previous assistant message: every policy sends those). A
  candidate is a miss when no prompt message holding it is in full in the context;
  ``absent`` counts the misses whose identifier is nowhere in the context text.
- compile latency: wall time of the compile_context_bundle call, p50/p95.
- --show-faults: each fault's kind of result (test output, ls, grep, file read, error,
  other), distance in calls, the fidelity the context held it at and paging's zone;
  a table per kind, and `fault_analysis` in the JSON line (bench/replay_faults.py).

What a shell command reads and writes is read by paging's own parser
(plpy/mnemo_db/paging/shell.py): `cat`, `head`, `tail`, `sed -n 'A,Bp'`, `nl`, `grep` on
a named file, in chains, pipes and commands over several lines.

Usage: bench/replay.py [DIR_OR_FILE...] [--generated N [--seed S] [--shell-reads]] [--windows 32000,128000]
       [--sessions N] [--max-calls N] [--jobs-every N] [--policies mnemo,stub8,oracle]
       [--per-session] [--show-faults]
Inputs: SWE-agent .traj files and the OpenAI-shaped JSONL that mnemosyne.importers
reads (docs/replay.md); a directory is searched recursively; none: the shared SWE-agent
trajectories. --generated adds long sessions of bench/replay_gen.py (--sessions 0: those
alone). Figures are summed
per input (and 'generated'). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))  # make bench-replay runs it as a script
import conversations as conv
import psycopg
from mnemo_db import tokens
from replay_actions import (  # reading a recording
    Action,
    call_actions,
    identifiers,
    norm_path,
    same_path,
    shown_range,
    swe_command_actions,
    text_command,
)
from replay_faults import aggregate, result_kind, table
from replay_policies import STUB_AGE, Mnemosyne, Oracle, Policy, StubOlderThan

from mnemosyne import connect, default_dsn, importers

MESSAGE_OVERHEAD = 4  # tokens a chat message costs beyond its text (OpenAI's accounting)
# The job queue runs every JOBS_EVERY calls: pg_cron runs it every minute, and an
# agent's model call and tool take 5 to 30 s, so a few calls go by between two runs.
JOBS_EVERY = 4
INPUT_SUFFIXES = (".traj", ".jsonl", ".json")
ROOT = Path(__file__).resolve().parents[1]
# the shared data beside the checkout, or beside its parent (a worktree); MNEMO_SHARED first
SHARED = next((p for p in (os.environ.get("MNEMO_SHARED"), ROOT.parent / "shared",
                           ROOT.parent.parent / "shared") if p and Path(p).is_dir()),
              ROOT.parent / "shared")
SHARED = Path(SHARED)
SWE_AGENT_DIR = SHARED / "bench" / "traj" / "swe-agent"


# ------------------------------------------------------------------ sessions and text
@dataclass
class Recording:
    group: str  # what the figures are summed by: the input it came from, or "generated"
    name: str
    system_prompt: str | None
    messages: list[dict]  # OpenAI chat messages, the system prompt left out
    entries: list[dict]  # importers' entries (message, created_at, metadata) for recording
    params: dict[str, Any] = field(default_factory=dict)


def load(paths: Iterable[Path], group: str | None = None) -> list[Recording]:
    """Every session of the given files and directories (searched recursively), in path
    order, through mnemosyne.importers (its SWE-agent and OpenAI readers). Each input
    is a group of its own (its name), unless `group` is given."""
    out = []
    for p in paths:
        files = (sorted(f for f in p.rglob("*") if f.suffix in INPUT_SUFFIXES and f.is_file())
                 if p.is_dir() else [p])
        for f in files:
            parsed = importers.read(f)
            for n, s in enumerate(parsed.sessions):
                params = dict(s.params)
                system = params.pop("system_prompt", None)
                name = str(f.relative_to(p)) if p.is_dir() else f.name
                name = name if len(parsed.sessions) == 1 else f"{name}#{n}"
                out.append(Recording(group or p.name, name, system,
                                     [e["message"] for e in s.messages], s.messages, params))
    return out


def generated(n: int, seed: int, max_calls: int | None, shell_reads: bool = False) -> list[Recording]:
    """n sessions of bench/replay_gen.py (their first max_calls calls; shell_reads: with
    reads written as shell commands), read back through the importer as any JSONL input is."""
    import tempfile

    import replay_gen
    lines = replay_gen.generate(n, seed, 300, 2000, limit=max_calls)
    if shell_reads:
        lines = [replay_gen.as_shell_reads(s) for s in lines]
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / f"generated-{seed}.jsonl"
        f.write_text("".join(json.dumps(s) + "\n" for s in lines), encoding="utf-8")
        return load([f], "generated")


def truncated(rec: Recording, max_calls: int | None) -> Recording:
    """The recording up to its first max_calls model calls and their results."""
    if max_calls is None:
        return rec
    seen = 0
    for i, m in enumerate(rec.messages):
        if m.get("role") == "assistant":
            seen += 1
            if seen > max_calls:
                return Recording(rec.group, rec.name, rec.system_prompt, rec.messages[:i],
                                 rec.entries[:i], rec.params)
    return rec


def message_text(m: dict) -> str:
    """What a message says: its content, then each tool call's name and arguments."""
    parts = [importers._text_of(m.get("content")) if m.get("content") else ""]
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(p for p in parts if p)


def message_tokens(m: dict) -> int:
    return tokens.count(message_text(m)) + MESSAGE_OVERHEAD



# ------------------------------------------------------------------ the session's structure
@dataclass
class Observation:
    index: int  # of the message in Recording.messages
    call: int  # the model call whose action it answers
    # what it shows: the reads and commands it answers, each with the global write
    # count when it was made (writes of the same command before it included)
    shows: list[tuple[Action, int]] = field(default_factory=list)


@dataclass
class Call:
    index: int  # of the assistant message in Recording.messages
    number: int
    actions: list[Action]
    new_input: list[int]  # indices of the messages since the previous assistant message


class Analysis:
    """A recording's model calls, the actions each makes, and the observations that
    answer them, with the write epochs re-reads are judged by."""

    def __init__(self, rec: Recording):
        self.rec = rec
        msgs = rec.messages
        self.calls: list[Call] = []
        self.observations: dict[int, Observation] = {}
        self.text = [message_text(m) for m in msgs]
        self.tokens = [message_tokens(m) for m in msgs]
        self._token_cache = dict(zip(self.text, self.tokens, strict=True))
        self.system_tokens = (tokens.count(rec.system_prompt) + MESSAGE_OVERHEAD
                              if rec.system_prompt else 0)
        self.system_identifiers = identifiers(rec.system_prompt or "")
        self.idents = [identifiers(t) for t in self.text]
        # the task: the first user message (every policy keeps it)
        self.task = next((i for i, m in enumerate(msgs) if m.get("role") == "user"), None)
        # the writes seen so far: global count, and per path (a list of (path, epoch))
        self.epoch = 0
        self.writes: list[tuple[str, int]] = []
        self.current_file: str | None = None
        self._rereads: dict[int, list[tuple[Action, list[int]]]] = {}
        last_assistant = -1
        for i, m in enumerate(msgs):
            if m.get("role") != "assistant":
                continue
            self.calls.append(Call(i, len(self.calls), [], list(range(last_assistant + 1, i))))
            last_assistant = i
        for call in self.calls:
            self._resolve(call)

    def _results(self, call: Call) -> list[int]:
        """Indices of the messages answering the call: its tool messages, or (text-acting
        agents) the user message right after it."""
        msgs, i = self.rec.messages, call.index
        out, j = [], i + 1
        if msgs[i].get("tool_calls"):
            while j < len(msgs) and msgs[j].get("role") == "tool":
                out.append(j)
                j += 1
        elif j < len(msgs) and msgs[j].get("role") == "user" and text_command(self.text[i]):
            out.append(j)
        return out

    def _writes_to(self, path: str) -> int:
        return sum(1 for p, _ in self.writes if p == "*" or same_path(p, path))

    def _resolve(self, call: Call) -> None:
        m = self.rec.messages[call.index]
        results = self._results(call)
        acting: list[tuple[int | None, list[Action]]] = []  # (observation, its actions)
        if m.get("tool_calls"):
            for n, c in enumerate(m["tool_calls"]):
                fn = c.get("function") or {}
                obs = results[n] if n < len(results) else None
                acting.append((obs, call_actions(fn.get("name", ""), fn.get("arguments", ""), self.current_file,
                                                 self.text[obs] if obs is not None else None)))
        else:
            cmd = text_command(self.text[call.index])
            if cmd:
                acting.append((results[0] if results else None, swe_command_actions(cmd, self.current_file)))
        for obs, actions in acting:
            shows = []
            whole = [k for k, a in enumerate(actions) if a.kind == "read" and not a.partial]
            if obs is not None and len(whole) == 1:  # the lines its result shows
                start, end = shown_range(self.text[obs])
                if start is not None:
                    a = actions[whole[0]]
                    actions[whole[0]] = Action("read", a.key, start, end, command=a.command)
            for a in actions:
                call.actions.append(a)
                if a.kind == "read" and not a.partial:
                    self.current_file = a.key
                if a.kind in ("read", "command"):
                    shows.append((a, self.epoch))
                if a.kind == "write":
                    self.epoch += 1
                    self.writes.append((a.key, self.epoch))
                    if a.key != "*":
                        self.current_file = a.key
            if obs is not None:
                self.observations[obs] = Observation(obs, call.number, shows)
        opened = re.search(r"\(Open file: ([^)\n]+)\)", self.text[results[-1]]) if results else None
        if opened and opened.group(1) != "n/a":
            self.current_file = norm_path(opened.group(1))

    def sent_tokens(self, m: dict) -> int:
        """message_tokens of a sent message, counted once per distinct text."""
        text = message_text(m)
        if text not in self._token_cache:
            self._token_cache[text] = tokens.count(text) + MESSAGE_OVERHEAD
        return self._token_cache[text]

    def rereads(self, call: Call) -> list[tuple[Action, list[int]]]:
        """Each read/command action of the call that re-reads earlier observations (made
        before the call, still valid), with the indices of those observations."""
        if call.number not in self._rereads:
            self._rereads[call.number] = self._find_rereads(call)
        return self._rereads[call.number]

    def _find_rereads(self, call: Call) -> list[tuple[Action, list[int]]]:
        out = []
        # the epochs at the time of this call: writes made by calls before it
        epoch_now = sum(1 for c in self.calls[:call.number] for a in c.actions
                        if a.kind == "write")
        writes_now = self.writes[:epoch_now]
        for a in call.actions:
            if a.kind not in ("read", "command"):
                continue
            hits = [obs.index for obs in self.observations.values() if obs.call < call.number
                    and any(_shows(b, epoch, a, epoch_now, writes_now) for b, epoch in obs.shows)]
            if hits:
                out.append((a, hits))
        return out


def _shows(b: Action, epoch: int, a: Action, epoch_now: int, writes_now: list[tuple[str, int]]) -> bool:
    """Whether what action b showed (at write count `epoch`) is what action a asks for
    again now: the same command with nothing written since, or lines of the same file
    with nothing written to it since (a partial result: the same command only)."""
    if b.kind != a.kind:
        return False
    if a.kind == "command":
        return b.key == a.key and epoch == epoch_now
    if not same_path(b.key, a.key) or (b.partial and b.command != a.command) or not _overlap(b, a):
        return False
    return not any(p == "*" or same_path(p, a.key) for p, _ in writes_now[epoch:])


def _overlap(a: Action, b: Action) -> bool:
    if None in (a.start, a.end, b.start, b.end):
        return True
    return a.start <= b.end and b.start <= a.end


# ------------------------------------------------------------------ evaluation
@dataclass
class Tally:
    calls: int = 0
    full_tokens: int = 0
    sent_tokens: int = 0
    rereads: int = 0
    faults: int = 0
    evictions: int = 0
    candidates: int = 0
    misses: int = 0
    absent: int = 0
    over_window: int = 0
    skipped: int = 0
    # what every policy sends: the system prompt, the task (the first user message) and
    # the call's new input; 1 - floor / full is the most any policy can remove
    floor_tokens: int = 0
    fault_log: list[dict] = field(default_factory=list)  # one record per fault (--show-faults)

    def add(self, other: Tally) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def figures(self) -> dict[str, Any]:
        return {
            **{k: getattr(self, k) for k in self.__dataclass_fields__ if k != "fault_log"},
            "reduction": round(1 - self.sent_tokens / self.full_tokens, 4) if self.full_tokens else 0.0,
            "reduction_ceiling": round(1 - self.floor_tokens / self.full_tokens, 4) if self.full_tokens else 0.0,
            "fault_rate": round(self.faults / self.evictions, 5) if self.evictions else 0.0,
            "faults_per_call": round(self.faults / self.calls, 5) if self.calls else 0.0,
            "miss_rate": round(self.misses / self.candidates, 4) if self.candidates else 0.0,
        }


class Presence:
    """Which prompt messages a context holds in full: a message whose text equals a sent
    message's text, or is a substring of the sent messages that are not verbatim copies
    of prompt messages (memory block, summary, degraded turns)."""

    def __init__(self, analysis: Analysis, call: Call, sent: list[dict]):
        self.analysis = analysis
        prompt_texts = {analysis.text[i] for i in range(call.index)}
        sent_texts = [message_text(m) for m in sent]
        self.verbatim = set(sent_texts)
        self.residue = "\n".join(t for t in sent_texts if t not in prompt_texts)
        self.all_text = "\n".join(sent_texts)
        self._cache: dict[int, bool] = {}

    def full(self, i: int) -> bool:
        if i not in self._cache:
            t = self.analysis.text[i]
            self._cache[i] = (not t.strip() or t in self.verbatim or t.strip() in self.residue)
        return self._cache[i]


def evaluate_call(analysis: Analysis, call: Call, sent: list[dict], previous: set[int] | None,
                  window: int) -> tuple[Tally, set[int]]:
    """One model call's figures, and the observations held in full (for evictions)."""
    t = Tally(calls=1)
    t.full_tokens = analysis.system_tokens + sum(analysis.tokens[:call.index])
    t.sent_tokens = sum(analysis.sent_tokens(m) for m in sent)
    must = set(call.new_input) | ({analysis.task} if analysis.task is not None and analysis.task < call.index else set())
    t.floor_tokens = analysis.system_tokens + sum(analysis.tokens[i] for i in must)
    t.over_window = int(t.sent_tokens > window)
    p = Presence(analysis, call, sent)
    offered = [i for i in analysis.observations if i < call.index]
    held = {i for i in offered if p.full(i)}
    previous = previous or set()
    # an observation leaves the context: it was held in full before, or is new and not held
    t.evictions = sum(1 for i in offered if i not in held and (i in previous or i >= _first_new(call)))
    for action, hits in analysis.rereads(call):
        t.rereads += 1
        if not any(p.full(i) for i in hits):
            t.faults += 1
            newest = analysis.observations[hits[-1]]
            t.fault_log.append({
                "session": analysis.rec.name, "call": call.number, "observation": newest.index,
                "what": f"{action.kind} {action.key[:100]!r} {action.start}-{action.end}",
                "kind": result_kind(action, analysis.text[newest.index]),
                "distance": call.number - newest.call})
    new_input = set(call.new_input)
    excluded = analysis.system_identifiers.union(*(analysis.idents[i] for i in new_input))
    holders: dict[str, list[int]] = {}
    for ident in analysis.idents[call.index] - excluded:
        holders[ident] = [i for i in range(call.index) if ident in analysis.idents[i]]
    for ident, where in holders.items():
        if not where:
            continue
        t.candidates += 1
        if not any(p.full(i) for i in where):
            t.misses += 1
            t.absent += int(ident not in p.all_text)
    return t, held


def _first_new(call: Call) -> int:
    """The first message index new to this call (offered for the first time)."""
    return call.new_input[0] if call.new_input else call.index


@dataclass
class Lane:
    """One policy at one window, over the sessions."""

    window: int
    policy: Policy
    totals: dict[str, Tally] = field(default_factory=dict)  # per group
    per_session: dict[str, dict[str, Any]] = field(default_factory=dict)  # per group
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)  # per group


def replay(analysis: Analysis, lanes: list[Lane], max_calls: int | None,
           between: Callable[[], None] | None = None, jobs_every: int = JOBS_EVERY,
           log: Callable[[str], None] = print, show_faults: bool = False) -> None:
    """Replays one session through every lane in lockstep: for each call, every lane
    takes in the messages before it, then `between` runs (the job queue, once for all
    lanes, every `jobs_every` calls), then every lane compiles and is scored."""
    for lane in lanes:
        lane.policy.start(analysis, lane.window)
    tallies = [Tally() for _ in lanes]
    held: list[set[int] | None] = [None for _ in lanes]
    left: list[dict[int, str]] = [{} for _ in lanes]  # observation -> zone where it left full
    calls = [c for c in analysis.calls[:max_calls] if c.index > 0]  # a call needs a prompt
    for n, call in enumerate(calls):
        for lane in lanes:
            lane.policy.record(analysis, call)
        if between is not None and n % jobs_every == 0:
            between()
        for k, lane in enumerate(lanes):
            sent = lane.policy.context(analysis, call)
            if sent is None:
                tallies[k].skipped += 1
                continue
            before = held[k] or set()
            t, held[k] = evaluate_call(analysis, call, sent, held[k], lane.window)
            for i in (i for i in analysis.observations if i < call.index):
                if i in held[k]:
                    left[k].pop(i, None)
                elif i in before or i >= _first_new(call):
                    left[k][i] = lane.policy.zone
            for r in t.fault_log:
                i = r.pop("observation")
                r.update(fidelity=lane.policy.held_at(analysis, sent, i), zone=lane.policy.zone,
                         zone_left=left[k].get(i, "-"))
            tallies[k].add(t)
        if (n + 1) % 50 == 0:
            log(f"[replay] {analysis.rec.name}: {n + 1}/{len(calls)} calls")
    group = analysis.rec.group
    for lane, t in zip(lanes, tallies, strict=True):
        lane.totals.setdefault(group, Tally()).add(t)
        lane.per_session.setdefault(group, {})[analysis.rec.name] = f = t.figures()
        lane.latencies_ms.setdefault(group, []).extend(lane.policy.latencies_ms)
        if show_faults:
            for r in t.fault_log:
                log(f"[{lane.window}] {lane.policy.name:7} fault: {r['session']} call {r['call']}: "
                    f"{r['what']}, {r['kind']}, {r['distance']} calls back, held at {r['fidelity']}, "
                    f"zone {r['zone']} (left full in {r['zone_left']})")
        log(f"[{lane.window}] {lane.policy.name:7} {analysis.rec.name[:60]:60} calls {t.calls:4} "
            f"reduction {f['reduction']:6.1%} faults {t.faults}/{t.evictions} "
            f"misses {t.misses}/{t.candidates}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return round(values[0], 2)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 2)


def run(recordings: list[Recording], lanes: list[Lane], max_calls: int | None,
        between: Callable[[], None] | None = None, jobs_every: int = JOBS_EVERY,
        log: Callable[[str], None] = print, show_faults: bool = False) -> dict[str, Any]:
    """Every session through every lane; the figures per group of sessions, window and
    policy: result["groups"][group][window][policy]."""
    result: dict[str, Any] = {"bench": "replay", "groups": {}}
    analyses = [Analysis(truncated(r, max_calls)) for r in recordings]
    for a in analyses:
        g = result["groups"].setdefault(a.rec.group, {"sessions": 0, "model_calls": 0})
        g["sessions"] += 1
        g["model_calls"] += len([c for c in a.calls if c.index > 0])
        replay(a, lanes, max_calls, between, jobs_every, log, show_faults)
    for lane in lanes:
        for group, total in lane.totals.items():
            figures = total.figures()
            if lane.latencies_ms.get(group):
                figures["compile_ms_p50"] = percentile(lane.latencies_ms[group], 50)
                figures["compile_ms_p95"] = percentile(lane.latencies_ms[group], 95)
            figures["per_session"] = lane.per_session[group]
            if show_faults:  # per kind of result re-read: distances, fidelities, zones
                figures["fault_analysis"] = aggregate(total.fault_log)
                for line in table(f"[{lane.window}] {lane.policy.name} {group}", figures["fault_analysis"]):
                    log(line)
            result["groups"][group].setdefault(str(lane.window), {})[lane.policy.name] = figures
    return result


def summary_line(result: dict[str, Any]) -> dict[str, Any]:
    """The JSON line: the figures per group, window and policy, per-session ones left out."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "per_session"}
        return v
    return strip(result)


def make_lanes(names: list[str], windows: list[int], db: Any, run_id: str) -> list[Lane]:
    lanes = []
    for w in windows:
        for n in names:
            if n == "mnemo":
                lanes.append(Lane(w, Mnemosyne(db, run_id)))
            elif n == "oracle":
                lanes.append(Lane(w, Oracle()))
            elif re.fullmatch(r"stub\d*", n):
                lanes.append(Lane(w, StubOlderThan(int(n[4:] or STUB_AGE))))
            else:
                raise ValueError(f"unknown policy {n!r}: mnemo, stub<N> or oracle")
    return lanes


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", type=Path,
                    help=f"files or directories (default: {SWE_AGENT_DIR})")
    ap.add_argument("--windows", default="32000,128000")
    ap.add_argument("--sessions", type=int, help="the first N sessions only")
    ap.add_argument("--max-calls", type=int, help="the first N model calls of each session")
    ap.add_argument("--policies", default="mnemo,stub8,oracle")
    ap.add_argument("--generated", type=int, default=0,
                    help="also N long sessions of bench/replay_gen.py (group 'generated')")
    ap.add_argument("--seed", type=int, default=22, help="the generator's seed")
    ap.add_argument("--shell-reads", action="store_true",
                    help="the generated sessions read with cat -n, nl, sed -n, head (as shell agents do)")
    ap.add_argument("--jobs-every", type=int, default=JOBS_EVERY,
                    help=f"run the job queue every N calls (0: never; default {JOBS_EVERY})")
    ap.add_argument("--per-session", action="store_true", help="per-session figures in the JSON line")
    ap.add_argument("--show-faults", action="store_true",
                    help="a line per fault and a table per kind of result on stderr, the tables' "
                         "figures in the JSON line (fault_analysis)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--dsn", default=default_dsn())
    args = ap.parse_args(argv)
    args.inputs = args.inputs or [SWE_AGENT_DIR]
    recordings = load(args.inputs)[:args.sessions]
    if args.generated:
        recordings += generated(args.generated, args.seed, args.max_calls, args.shell_reads)
    windows = [int(w) for w in args.windows.split(",")]
    names = args.policies.split(",")
    db = connect(args.dsn) if "mnemo" in names else None
    try:
        lanes = make_lanes(names, windows, db, uuid.uuid4().hex[:8])
    except ValueError as e:
        ap.error(str(e))
    between = db.run_jobs if db is not None and args.jobs_every > 0 else None
    t0 = time.time()
    with ExitStack() as paused:
        if db is not None:  # the bench runs the queue itself: pg_cron's runner racing it moved
            # a session's residency between runs of one tree (SWE-agent reduction 7-17 %)
            paused.enter_context(conv.jobs_paused(
                paused.enter_context(psycopg.connect(args.dsn, autocommit=True))))
        result = run(recordings, lanes, args.max_calls, between, max(args.jobs_every, 1),
                     log=(lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr)),
                     show_faults=args.show_faults)
    result["inputs"] = [str(p) for p in args.inputs]
    result["jobs_every"] = args.jobs_every
    result["seconds"] = round(time.time() - t0, 1)
    if db is not None:
        result["compile_errors"] = sum(lane.policy.compile_errors for lane in lanes
                                       if isinstance(lane.policy, Mnemosyne))
        db.close()
    print(json.dumps(result if args.per_session else summary_line(result)))
    return result


if __name__ == "__main__":
    main()
