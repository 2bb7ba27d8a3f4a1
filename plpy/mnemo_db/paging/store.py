"""Paging's database side (PL/Python; one Pager per backend, GD['mnemo_pager']):

- on_message, from record_messages for each message: segmentation into semantic
  objects (strategy A: a tool call with its results is one object, typed by what it
  read and returned; consecutive conversation is one conversation_phase until a tool
  call or a topic shift, small objects merge with their neighbour of the same kind),
  faults (a re-read of a source whose object is below full, with no write between),
  structural waste (superseded and stale reads, duplicated outputs, stale tool
  results), and the assistant's cleanup tags;
- on_embedded, from a user message's embed job: its topic shift (a phase splits)
  and goal shift;
- the phantom tools (query, restore, release) and handle_tool_call;
- metrics.
Every residency change goes through change(): the residency row and its
fidelity_log row, together. The compile side is compile_residency / write_plan.
Runs as mnemo_api_owner under row-level security: the tenant is entered by the
calling SQL function, and every statement names it as well.
"""

from __future__ import annotations

import hashlib
import json
import re
import time

from .. import tokens
from . import answer as answers
from . import ladder, sources, tags
from .ladder import LADDER, LEVEL, Change
from .statements import STATEMENTS

ELSEWHERE_CANDIDATES = 20  # memory_query's candidates beyond the session (mnemo.search's best)
ERROR_SCAN = 4000  # characters of an error output searched for the files it names
MEMORY_KINDS = {"decision": "design_decision", "plan": "plan", "file_context": "file_context",
                "error_context": "error_context", "tool_result": "tool_result"}


def names_file(text: str, path: str) -> bool:
    """Whether a text names a file by its base name, as a word of its own (a.py is not
    named by data.py)."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return bool(base) and re.search(rf"(?<![\w.-]){re.escape(base)}(?!\w)", text) is not None


class PagingError(Exception):
    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.code, self.hint = code, hint


class Pager:
    def __init__(self, plpy):
        self.plpy = plpy
        self.plans = {k: plpy.prepare(q, t) for k, (q, t) in STATEMENTS.items()}
        self.rereading: set[tuple[str, str]] = set()  # sessions known to re-read (_cold_reads)

    # ------------------------------------------------------------------ plumbing
    def run(self, name: str, args: list) -> list[dict]:
        """Runs the statement of STATEMENTS of that name; its rows."""
        return list(self.plpy.execute(self.plans[name], args))

    def one(self, name: str, args: list) -> dict | None:
        rows = self.run(name, args)
        return dict(rows[0]) if rows else None

    def cfg(self) -> dict:
        row = self.one("settings", [])
        return ladder.settings(json.loads(row["v"]) if row and row["v"] else None)

    def change(self, t: str, s: str, changes: list[Change], turn: int) -> None:
        """The residency rows and their fidelity_log rows."""
        changes = [c for c in changes if c.from_fidelity != c.to_fidelity]
        if changes:
            done = [r["object_id"] for r in self.run(
                "change", [t, s, [c.object_id for c in changes], [c.to_fidelity for c in changes], turn])]
            sizes = {r["object_id"]: r["token_count"] for r in self.run("change_tokens", [t, done])} if done else {}
            for c in changes:
                if c.object_id in sizes:
                    self.run("change_log", [t, s, c.object_id, c.from_fidelity, c.to_fidelity, c.trigger,
                                            c.zone, turn, sizes[c.object_id]])

    def move(self, t: str, s: str, obj: dict, to: str, trigger: str, turn: int, zone: str | None = None) -> None:
        self.change(t, s, [Change(obj["object_id"], obj["fidelity"], to, trigger, zone)], turn)
        obj["fidelity"] = to

    def insert(self, t: str, s: str, kind: str, message_ids: list[int], turn: int, tokens_: int,
               access: sources.Access | None = None, label: str = "", is_open: bool = False,
               memory_id: int | None = None, pinned_until: int = 0, result_class: str | None = None) -> int:
        a = access or sources.Access()
        first, last = (a.lines if a.lines else (None, None))
        return self.run("insert", [t, s, kind, message_ids, memory_id, turn, a.source, first, last,
                                 a.writes, label, tokens_, is_open, pinned_until, result_class])[0]["object_id"]

    # ------------------------------------------------------------------ record path
    def on_message(self, t: str, s: str, m: dict, tag_list: list[dict] | None, cfg: dict | None = None) -> None:
        """Segments one recorded message (m: message_id, role, content, tool_calls,
        tool_call_id, turn, tokens, metadata) and applies its cleanup tags. cfg: the
        paging settings, when the caller read them for a batch."""
        cfg = cfg or self.cfg()
        if m["role"] == "tool":
            self._on_result(t, s, m, cfg)
        elif m["role"] == "assistant" and m.get("tool_calls"):
            self._on_calls(t, s, m, cfg)
        elif m["role"] in ("user", "assistant"):
            self._on_text(t, s, m, cfg)
        if tag_list:
            self.apply_tags(t, s, [tags.Tag(g["action"], tuple(g["ids"]), g.get("body")) for g in tag_list],
                            m["turn"])

    def _on_text(self, t: str, s: str, m: dict, cfg: dict) -> None:
        last = self.one("latest", [t, s])
        if m["role"] == "assistant":
            action = sources.text_action(m.get("content"))
            if action:  # an agent acting in text: the environment answers next
                name, args = action
                self._on_calls(t, s, m, cfg, [{"function": {"name": name, "arguments": json.dumps(args)}}], True)
                return
        elif last and last["is_open"] and last["kind"] != "conversation_phase":
            # the environment's answer to the action just before it
            self._attach_result(t, s, last, m, cfg, last["label"].split(" ", 1)[0].rstrip(":"))
            self.run("close", [t, s, last["object_id"]])
            return
        # A user message's topic and goal shift wait for its embedding (on_embedded, from
        # its embed job): the write path encodes nothing. Until then it continues the phase.
        phase = last if last and last["kind"] == "conversation_phase" and last["is_open"] else None
        if phase:
            self.run("append", [t, s, phase["object_id"], [m["message_id"]], m["turn"], m["tokens"],
                              None, None, None])
            return
        if phase:
            self.run("close", [t, s, phase["object_id"]])
        first = next((ln.strip() for ln in (m.get("content") or "").splitlines() if ln.strip()), "")
        self.insert(t, s, "conversation_phase", [m["message_id"]], m["turn"], m["tokens"],
                    label=f"{m['role']}: {first[:120]}", is_open=True)

    def _on_calls(self, t: str, s: str, m: dict, cfg: dict, calls: list[dict] | None = None,
                  awaiting: bool = False) -> None:
        """A message with tool calls (or, calls given, an action written in its text,
        awaiting the environment's answer) starts an object."""
        last = self.one("latest", [t, s])
        if last and last["is_open"]:
            self.run("close", [t, s, last["object_id"]])
        open_file = (self.one("open_file", [t, s]) or {}).get("source_key")
        calls = calls or m["tool_calls"]
        per_call = [sources.tool_accesses(c["function"]["name"], c["function"].get("arguments"), open_file)
                    for c in calls]
        accesses = [a for got in per_call for a in got]
        main = accesses[0] if accesses else sources.Access()
        kind = "external_reference" if main.fetch else ("file_context" if main.reads else "tool_result")
        name = next((c["function"]["name"] for c, got in zip(calls, per_call) if main in got),
                    calls[0]["function"]["name"])
        # a call that touches no source: what kind of command it is; a fetch: a page
        # (the quiet rule)
        result_class = ("fetch" if main.fetch else None) if accesses else \
            sources.command_class(name, calls[0]["function"].get("arguments"))
        oid = self.insert(t, s, kind, [m["message_id"]], m["turn"], m["tokens"], main,
                          sources.label_of(kind, name, main, None), is_open=awaiting, result_class=result_class)
        new = {"object_id": oid}  # all _touch reads of it (no statement to read it back)
        phase = self.one("latest_phase", [t, s])
        if phase:
            self.run("link", [t, phase["object_id"], "parent_of", oid])
        for a in accesses:
            if a.source:
                self._touch(t, s, new, a, m["turn"], cfg)
        newest = min(cfg["outdated_after_calls"], cfg["stale_after_calls"], cfg["quiet_after_calls"],
                     cfg["evict_stubs_after_calls"])
        aging = [dict(o) for o in self.run("aging", [t, s, newest, m["turn"]])]
        self._cold_reads(t, s, aging, cfg)
        aging = self._in_use(t, s, aging, m, cfg)
        self.change(t, s, ladder.aging(aging, cfg), m["turn"])

    def _cold_reads(self, t: str, s: str, objects: list[dict], cfg: dict) -> None:
        """Marks cold_read the aging rows that are reads of a file nothing wrote since,
        full, once the quiet rule's age is reached, while the session has re-read
        nothing it read (ladder's cold_reads). A session that re-read once stays a
        re-reading one: this backend remembers it, and asks the database no more."""
        if not cfg["cold_reads"] or (t, s) in self.rereading:
            return
        cold = [o for o in objects if o["kind"] == "file_context" and o["has_source"] and not o["writes_source"]
                and not o["written_after"] and o["fidelity"] == "full" and o["n"] > cfg["quiet_after_calls"]]
        if not cold:
            return
        if self.one("rereads", [t, s])["rereads"]:
            self.rereading.add((t, s))
            return
        for o in cold:
            o["cold_read"] = True

    def _in_use(self, t: str, s: str, objects: list[dict], m: dict, cfg: dict) -> list[dict]:
        """The aging rows, a plain command's output that the quiet rule would take
        marked in_use when the assistant named one of its names since (a function of
        a decompiled listing, a variable a script printed): the agent is working
        with it. Only the few outputs about to go are read. Any of them stays, too,
        while the assistant has said nothing since, only called tools: an agent that
        reads file after file before it speaks gathers what its next reply draws on
        (the README and package.json behind "what is this project for?")."""
        going = [o for o in objects if ladder.quiet(o, cfg) and o["fidelity"] == "full"
                 and cfg["quiet_after_calls"] < o["n"] <= cfg["stale_after_calls"]]
        if not going:
            return objects
        def spoke(content: str | None) -> bool:  # words of its own, not only calls
            return bool((content or "").strip())

        said = [(r["turn_index"], sources.names(r["text"]), spoke(r["content"]))
                for r in self.run("said_since", [t, s, min(o["last_turn"] for o in going)])]
        if m.get("turn") is not None and not any(turn == m["turn"] for turn, _, _ in said):
            said.append((m["turn"], sources.names((m.get("content") or "") + " " + json.dumps(m.get("tool_calls"))),
                         spoke(m.get("content"))))
        for o in going:
            since = [(n, spoke) for turn, n, spoke in said if turn > o["last_turn"]]
            if not any(spoke for _, spoke in since):
                o["in_use"] = True
                continue
            named = set().union(*(n for n, _ in since))
            if named:
                out = " ".join(r["content"] or "" for r in self.run("contents", [t, s, o["message_ids"]])
                               if r["role"] != "assistant")
                # a read is named by its file as well (a cold read: "the encryption in
                # `chall.py`" names what cat chall.py showed, not a name inside it)
                own = {o["source_key"], o["source_key"].rstrip("/").rsplit("/", 1)[-1]} if o.get("cold_read") else set()
                o["in_use"] = bool(named & (sources.names(out) | own))
        return objects

    def _touch(self, t: str, s: str, new: dict, a: sources.Access, turn: int, cfg: dict) -> None:
        """A read or a write of a source by the new object: faults, supersession, staleness."""
        earlier = self.run("by_source", [t, s, a.source, new["object_id"]])
        last_write = next((o["first_turn"] for o in earlier if o["writes_source"]), -1)
        reads = [o for o in earlier if not o["writes_source"] and o["first_turn"] > last_write]
        down = cfg["superseded_to"]
        if a.reads:
            seen = [o for o in reads if sources.overlaps(lines_of(o), a.lines)]
            if seen and seen[0]["fidelity"] != "full":
                o = seen[0]
                self.run("fault", [t, s, o["object_id"], None, "reread", o["fidelity"], turn, None, None, None,
                                 None, None, []])
                self.run("pin", [t, s, new["object_id"], turn + cfg["pin_turns"]])
            for o in seen:
                if covers(a.lines, lines_of(o)) and LEVEL[o["fidelity"]] < LEVEL[down]:
                    self.move(t, s, o, down, "waste", turn)
                if covers(a.lines, lines_of(o)):
                    self.run("link", [t, new["object_id"], "supersedes", o["object_id"]])
        if a.writes:  # the reads it outdates go down once it is not among the newest calls
            for o in reads:
                self.run("link", [t, new["object_id"], "supersedes", o["object_id"]])
            # the edit was made from what the agent last read of the file
            if reads:
                self.run("link", [t, new["object_id"], "depends_on", reads[0]["object_id"]])

    def _on_result(self, t: str, s: str, m: dict, cfg: dict) -> None:
        obj = self.one("by_call", [t, s, m["tool_call_id"]])
        if obj is None:
            return  # its call was recorded before paging existed
        self._attach_result(t, s, obj, m, cfg, obj["call_name"])

    def _attach_result(self, t: str, s: str, obj: dict, m: dict, cfg: dict, call_name: str) -> None:
        """A tool's output (or the environment's answer to a text action) joins its
        call's object: its kind, label, duplicates, the files it names."""
        text = m.get("content") or ""
        digest = hashlib.sha256(text.encode()).digest() if len(text) >= 64 else None
        # a file's text is an error only when it is short and says so (No such file ...):
        # code is full of the words errors are made of
        scan = text[:300] if obj["kind"] == "file_context" else text
        kind = "error_context" if sources.looks_like_error(scan, m.get("metadata")) else None
        label = None
        if obj["source_key"] is None and len(obj["message_ids"]) == 1:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            label = f"{call_name}: {first[:120]}"
        self.run("append", [t, s, obj["object_id"], [m["message_id"]], m["turn"], m["tokens"], kind, label, digest])
        # the files an output names (the newest read of each): an error was caused_by
        # them, any other output references them (a grep's hits, a test's names)
        relation = "caused_by" if kind == "error_context" else "references"
        head = text[:ERROR_SCAN]
        for o in self.run("recent_sources", [t, s, obj["object_id"]]):
            if o["source_key"] != obj["source_key"] and names_file(head, o["source_key"]):
                self.run("link", [t, obj["object_id"], relation, o["object_id"]])
        if digest is not None:
            for o in self.run("by_output", [t, s, digest, obj["object_id"]]):
                o = dict(o)
                if LEVEL[o["fidelity"]] < LEVEL[cfg["superseded_to"]] and o["pinned_until_turn"] <= m["turn"]:
                    self.move(t, s, o, cfg["superseded_to"], "waste", m["turn"])
                self.run("link", [t, obj["object_id"], "supersedes", o["object_id"]])
        # the object as the append left it (the statement's own arithmetic; nothing else here changes it)
        self._merge_small(t, s, dict(obj, kind=kind or obj["kind"], token_count=obj["token_count"] + m["tokens"]),
                          m["turn"], cfg)

    def _merge_small(self, t: str, s: str, obj: dict, turn: int, cfg: dict) -> None:
        """A small tool_result object (obj, as stored) joins the small tool_result
        object just before it, while the two stay under the minimum object size."""
        object_id = obj["object_id"]
        if (obj["kind"] != "tool_result" or obj["source_key"] or obj["pinned_until_turn"] > turn
                or obj["token_count"] >= cfg["min_object_tokens"]):
            return
        prev = self.one("previous", [t, s, obj["first_turn"], object_id])
        # of one command class only: a test run merged into a plain command would leave with it
        if prev and (prev["kind"] == "tool_result" and not prev["source_key"] and prev["fidelity"] == obj["fidelity"]
                and prev["result_class"] == obj["result_class"]
                and not prev["anchored"] and prev["pinned_until_turn"] <= turn
                and prev["token_count"] + obj["token_count"] < cfg["min_object_tokens"]):
            self.run("merge", [t, s, prev["object_id"], object_id])

    def on_embedded(self, t: str, s: str, message_ids: list[int]) -> None:
        """User messages of this session just embedded (their embed job, in turn order):
        the topic and goal shift their text makes, decided with the vector the job
        stored, so that a message is encoded once, off the write path. A message that
        went into a conversation phase when it was recorded (not one answering an
        action written in text) and that moves away from the user message before it:
        below goal_shift, a goal shift (as of its turn); below topic_shift, the phase
        splits there, unless the part before it is shorter than the minimum object size
        (it takes the turn whatever its topic), so the message and what followed it in
        the phase start a new phase, which becomes the parent of the objects started
        since."""
        cfg = None
        for m in self.run("embedded_user", [t, s, message_ids]):
            if m["cosine"] is None or not (m["content"] or "").strip():
                continue
            cfg = cfg or self.cfg()
            if m["cosine"] >= cfg["topic_shift"] and m["cosine"] >= cfg["goal_shift"]:
                continue
            phase = self.one("by_message", [t, s, m["message_id"]])
            if phase is None or phase["kind"] != "conversation_phase":
                continue
            if m["cosine"] < cfg["goal_shift"]:
                self.goal_shift(t, s, dict(m), cfg)
            if m["cosine"] >= cfg["topic_shift"]:
                continue
            cut = self.one("split_point", [t, s, list(phase["message_ids"]), m["turn"]])
            if not cut["before_ids"] or cut["before_tokens"] < cfg["min_object_tokens"]:
                continue
            self.run("split", [t, s, phase["object_id"], cut["before_ids"], cut["before_last"],
                               cut["before_tokens"]])
            first = next((ln.strip() for ln in (m["content"] or "").splitlines() if ln.strip()), "")
            oid = self.insert(t, s, "conversation_phase", list(cut["after_ids"]), m["turn"], cut["after_tokens"],
                              label=f"user: {first[:120]}", is_open=phase["is_open"])
            if phase["last_turn"] > m["turn"]:
                self.run("last_turn", [t, s, oid, phase["last_turn"]])
            self.run("reparent", [t, s, phase["object_id"], oid, m["turn"]])

    def goal_shift(self, t: str, s: str, m: dict, cfg: dict) -> None:
        """The user's goal moved (m: a user message, its id and turn). Objects
        from before it whose messages match the new message come back to full, the
        others go down a level, not below compact."""
        cos = {r["object_id"]: r["cosine"] for r in self.run("goal_matches", [t, s, m["message_id"]])}
        objects = [dict(o) for o in self.run("all_objects", [t, s])
                   if o["object_id"] in cos and o["first_turn"] < m["turn"]]
        # the newest objects served the old goal: they are not protected here (a
        # demotion stops at compact, and the next turns bring back what they need)
        residents = [ladder.Resident(o["object_id"], o["kind"], o["fidelity"], o["last_turn"],
                                     pinned=o["pinned_until_turn"] > m["turn"], anchored=o["anchored"])
                     for o in objects]
        matching = {k for k, c in cos.items() if c >= cfg["goal_shift"]}
        self.change(t, s, ladder.goal_shift(residents, matching, cfg), m["turn"])
        self.run("state", [t, s, None, m["turn"]])

    def apply_tags(self, t: str, s: str, tag_list: list[tags.Tag], turn: int) -> None:
        """The cleanup tags of an assistant message, on the objects they name (ids
        that name nothing of this session are ignored: the model's text must not make
        record_message fail)."""
        for tag in tag_list:
            objs = [o for o in (self.resolve(t, s, ref, missing_ok=True) for ref in tag.ids) if o]
            if not objs:
                continue
            if tag.action == "drop":
                for o in objs:
                    self.move(t, s, o, "evicted", "cleanup_tag", turn)
            elif tag.action == "anchor":
                for o in objs:
                    self.run("anchor", [t, s, o["object_id"]])
                    self.move(t, s, o, "full", "cleanup_tag", turn)
            elif tag.action in ("summarize", "collapse"):
                self.run("annotate", [t, s, objs[0]["object_id"], tag.body, None])
                self.move(t, s, objs[0], "compact", "cleanup_tag", turn)
                for o in objs[1:] if tag.action == "collapse" else ():
                    self.move(t, s, o, "evicted", "cleanup_tag", turn)
            elif tag.action == "declare_losses":
                for o in objs:
                    self.run("annotate", [t, s, o["object_id"], None, tag.body])

    # ------------------------------------------------------------------ ids
    def resolve(self, t: str, s: str, ref, missing_ok: bool = False) -> dict | None:
        """The object an id names in this session: obj:N, msg:N (its object), mem:N
        (the memory's object in this session, made on first use)."""
        if not isinstance(ref, str) or ":" not in ref:
            if missing_ok:
                return None
            raise PagingError("MN001", f"malformed id {str(ref)[:80]!r}", "ids look like obj:12, msg:345 or mem:7")
        prefix, _, num = ref.strip().partition(":")
        if prefix not in ("obj", "msg", "mem") or not num.isdigit() or len(num) > 18:
            if missing_ok:
                return None
            raise PagingError("MN001", f"malformed id {ref[:80]!r}", "ids look like obj:12, msg:345 or mem:7")
        n = int(num)
        if prefix == "obj":
            row = self.one("by_id", [t, s, n])
        elif prefix == "msg":
            row = self.one("by_message", [t, s, n])
        else:
            row = self.one("by_memory", [t, s, n])
            if row is None:
                mem = self.one("memory", [t, n])
                if mem is not None:
                    turn = self.turn(t, s)
                    oid = self.insert(t, s, MEMORY_KINDS.get(mem["kind"], "conversation_phase"), [], turn,
                                      mem["tokens_full"] or 0, label=f"memory {ref}", memory_id=n)
                    row = self.one("by_id", [t, s, oid])
        if row is None and not missing_ok:
            raise PagingError("MN010", f"unknown id {ref} in session {s}",
                              "Use an id the context shows (obj:N, msg:N, mem:N).")
        return dict(row) if row else None

    def turn(self, t: str, s: str) -> int:
        row = self.one("session", [t, s])
        if row is None:
            raise PagingError("MN003", f"unknown session {s}")
        return row["turn_count"]

    def zone(self, t: str, s: str) -> str:
        """The pressure zone of the session's last compile (normal before any)."""
        return (self.one("zone", [t, s]) or {}).get("zone", "normal")

    def full_text(self, t: str, s: str, obj: dict) -> str:
        """An object's full content: its messages as stored (large outputs from their
        artifacts), or its memory's full text."""
        if obj.get("memory_id"):
            mem = self.one("memory", [t, obj["memory_id"]])
            return mem["content_full"] if mem else ""
        parts = []
        for r in self.run("contents", [t, s, list(obj["message_ids"])]):
            if r["tool_calls"]:
                for c in json.loads(r["tool_calls"]):
                    parts.append(f"-> {c['function']['name']}({c['function'].get('arguments', '')})")
            if r["content"]:
                parts.append(r["content"] if r["role"] in ("tool", "assistant") else f"{r['role']}: {r['content']}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ phantom tools
    def restore(self, t: str, s: str, ref: str, reason: str | None) -> dict:
        """memory_restore: the object to full, pinned for pin_turns turns; a fault."""
        cfg, turn = self.cfg(), self.turn(t, s)
        obj = self.resolve(t, s, ref, missing_ok=isinstance(ref, str) and ref.strip().startswith("msg:"))
        if obj is None:
            return self.restore_recalled(t, s, ref)
        before = obj["fidelity"]
        self.run("fault", [t, s, obj["object_id"], obj.get("memory_id"), "restore", before, turn, reason, None,
                         None, None, None, []])
        self.move(t, s, obj, "full", "restore", turn)
        self.run("pin", [t, s, obj["object_id"], turn + cfg["pin_turns"]])
        # what it was caused by, depends on or references comes back as well, at
        # detail (enough to follow it; restore it in turn for more)
        for r in self.run("related", [t, s, obj["object_id"]]):
            r = dict(r)
            if LEVEL[r["fidelity"]] > LEVEL["detail"]:
                self.move(t, s, r, "detail", "restore", turn)
        content = self.full_text(t, s, obj)
        return {"id": f"obj:{obj['object_id']}", "kind": obj["kind"], "label": obj["label"], "from": before,
                "fidelity": "full", "pinned_until_turn": turn + cfg["pin_turns"], "content": content,
                "tokens": tokens.count(content)}

    def restore_recalled(self, t: str, s: str, ref: str) -> dict:
        """memory_restore of a turn of another session (msg:N): one the memory block
        recalled abbreviated, or one a memory stood in for (compile.bundle.stand_ins),
        whole, when this session may see it by the rules memory_query's search keeps
        (may_see). It is no object of this session: nothing is pinned or logged as a
        fault, and a later compile recalls it by relevance as before."""
        n = ref.strip()[4:]
        row = self.one("recalled", [t, s, int(n)]) if n.isdigit() and len(n) <= 18 else None
        reader = self.one("reader", [t, s]) if row is not None else None
        if row is None or reader is None or not self.may_see(reader, row, True):
            raise PagingError("MN010", f"unknown id {ref} in session {s}",
                              "Use an id the context shows (obj:N, msg:N, mem:N).")
        content = f"{row['role']}: {row['text'] or ''}"
        return {"id": f"msg:{int(n)}", "kind": "recalled_turn", "label": f"a {row['role']} turn of another session",
                "from": "recalled", "fidelity": "full", "content": content, "tokens": tokens.count(content)}

    def release(self, t: str, s: str, refs: list, reason: str | None) -> dict:
        """memory_release: the objects to stub, or evicted when the session is under pressure."""
        if not isinstance(refs, list) or not refs:
            raise PagingError("MN001", "ids must be a non-empty array of ids", "e.g. [\"obj:3\", \"msg:40\"]")
        turn = self.turn(t, s)
        zone = self.zone(t, s)
        to = "stub" if zone == "normal" else "evicted"
        objs = {}
        for ref in refs:
            o = self.resolve(t, s, ref)
            objs[o["object_id"]] = o
        out = []
        for o in objs.values():
            target = to if LEVEL[o["fidelity"]] < LEVEL[to] else o["fidelity"]
            self.move(t, s, o, target, "release", turn, zone)
            out.append({"id": f"obj:{o['object_id']}", "fidelity": target})
        return {"released": out, "zone": zone}

    def query(self, t: str, s: str, question, scope, max_tokens) -> dict:
        """memory_query: an answer from the full content of the session's objects that
        best match the question; nothing changes fidelity. Sources below full make it a
        micro-fault (fault_log, with the answer's tokens and what a restore would cost)."""
        if not isinstance(question, str) or not question.strip():
            raise PagingError("MN001", "question must be a non-empty string")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 16 <= max_tokens <= 2000:
            raise PagingError("MN001", "max_tokens must be an integer from 16 to 2000")
        if scope is not None and not isinstance(scope, str):
            raise PagingError("MN001", "scope must be a string")
        started = time.perf_counter()
        turn = self.turn(t, s)
        objects = [dict(o) for o in self.run("all_objects", [t, s])]
        scoped = [o for o in objects if scope and f"obj:{o['object_id']}" in scope.split()]
        if scoped:
            objects = scoped
        by_ref = {f"obj:{o['object_id']}": o for o in objects}
        texts = [answers.Source(ref, self.full_text(t, s, o)) for ref, o in by_ref.items()]
        elsewhere = [] if scoped else self.elsewhere(t, s, question)  # beyond this context
        texts += elsewhere
        ranked = [src for _, src in answers.rank_sources(f"{question} {scope or ''}", texts)][:5]
        # what the search found by meaning (no word in common): after the word matches
        ranked += [src for src in elsewhere if src not in ranked][:max(0, 5 - len(ranked))]
        text, refs, method = "", [], "extractive"
        if ranked:
            reply = self.one("helper", [json.dumps(answers.helper_prompt(question, ranked, max_tokens))])
            got = answers.helper_reply(json.loads(reply["reply"]) if reply and reply["reply"] else None,
                                       ranked, max_tokens)
            if got:
                (text, refs), method = got, "helper_llm"
            else:
                text, refs = answers.extractive(question, ranked, max_tokens)
        if not text and elsewhere:  # no line shares a word: the search's best match, by meaning
            best = elsewhere[0]
            head = f"[{best.ref}]"
            text, refs = head + "\n" + answers.window(" ".join(best.text.split()), set(),
                                                     max_tokens - tokens.count(head) - 1), [best.ref]
        if not text:
            text = "Nothing in this tenant's memory that this session may see answers that."
        full = {r: tokens.count(next(x.text for x in texts if x.ref == r)) for r in refs}
        below = [r for r in refs if r in by_ref and by_ref[r]["fidelity"] != "full"]
        restore_tokens = sum(full[r] for r in below)
        answer_tokens = tokens.count(text)
        for r in below:
            o = by_ref[r]
            self.run("fault", [t, s, o["object_id"], None, "micro", o["fidelity"], turn, question[:2000], text[:8000],
                             answer_tokens, full[r], (time.perf_counter() - started) * 1000.0, refs])
        return {"answer": text, "sources": refs, "tokens": answer_tokens, "restore_tokens": restore_tokens,
                "method": method}

    def elsewhere(self, t: str, s: str, question: str) -> list:
        """Sources beyond the session's objects that this session may see: the tenant's
        memories and the messages of its other sessions that best match the question,
        held to the compile's rules (policy): the channel's sensitivities and excluded
        kinds, the other sessions its channel may recall, within the recall scope."""
        reader = self.one("reader", [t, s])
        if reader is None:
            return []
        return [answers.Source(r["ref"], r["text"] or "")
                for r in self.run("elsewhere", [t, s, question[:2000], ELSEWHERE_CANDIDATES])
                if self.may_see(reader, r, r["ref"].startswith("msg:"))]

    @staticmethod
    def may_see(reader, r, message: bool) -> bool:
        """Whether the reading session (its channel, agent and recall scope) may see a
        memory or another session's message (r: its sensitivity, a memory's kind, a
        message's session channel and agent; message: r is a message), by the
        compile's rules (policy): the channel's sensitivities and excluded kinds, the
        other sessions its channel may recall, within the recall scope."""
        from ..compile import policy

        channel = reader["channel"] if reader["channel"] in policy.CHANNEL_SENSITIVITY else "private"
        if r["sensitivity"] not in policy.CHANNEL_SENSITIVITY[channel]:
            return False
        if r.get("memory_kind") in policy.CHANNEL_EXCLUDED_KINDS.get(channel, ()):
            return False
        if message:
            if r["channel"] not in policy.CHANNEL_SOURCES[channel]:
                return False
            other_agent = r["agent_id"] != reader["agent_id"]
            if other_agent and (r["channel"] == "agent" or r["channel"] == "private" and reader["scope"] == "agent"):
                return False
        return True

    def handle(self, t: str, s: str, call) -> dict:
        """The role: tool message answering one phantom tool call (an OpenAI tool_call
        object {id, type: function, function: {name, arguments: JSON text}})."""
        if (not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]
                or not isinstance(call.get("function"), dict)
                or not isinstance(call["function"].get("name"), str)):
            raise PagingError("MN001", "tool_call must be an OpenAI tool call object",
                              'e.g. {"id": "call_1", "type": "function", "function": {"name": '
                              '"memory_query", "arguments": "{\\"question\\": \\"...\\"}"}}')
        name, raw = call["function"]["name"], call["function"].get("arguments", "{}")
        if name not in TOOL_NAMES:
            raise PagingError("MN001", f"unknown tool {name[:80]!r}", "the phantom tools are " + ", ".join(TOOL_NAMES))
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise PagingError("MN001", f"{name}: arguments are not JSON") from None
        if not isinstance(args, dict):
            raise PagingError("MN001", f"{name}: arguments must be a JSON object")
        unknown = set(args) - TOOL_NAMES[name]
        if unknown:
            raise PagingError("MN001", f"{name}: unexpected argument {min(unknown)!r}")
        reason = args.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise PagingError("MN001", f"{name}: reason must be a string")
        if name == "memory_query":
            got = self.query(t, s, args.get("question"), args.get("scope"), args.get("max_tokens", 300))
            text = got["answer"] + ("\n(sources: " + ", ".join(got["sources"]) + ")" if got["sources"] else "")
        elif name == "memory_restore":
            if not isinstance(args.get("id"), str):
                raise PagingError("MN001", "memory_restore: id must be a string such as obj:12 or msg:345")
            got = self.restore(t, s, args["id"], reason)
            text = (f"{got['id']} ({got['kind']}: {got['label']}) restored at full fidelity, pinned until "
                    f"turn {got['pinned_until_turn']}:\n{got['content']}")
        else:
            got = self.release(t, s, args.get("ids"), reason)
            text = "Released " + ", ".join(f"{r['id']} (now {r['fidelity']})" for r in got["released"]) + "."
        return {"role": "tool", "tool_call_id": call["id"], "content": text}

    # ------------------------------------------------------------------ inspection
    def objects(self, t: str, s: str, limit: int) -> dict:
        """memory_objects: the session's newest `limit` objects as paging sees them now,
        in turn order, and the count and tokens of all its objects at each fidelity."""
        turn = self.turn(t, s)
        zone = self.zone(t, s)
        rows = self.run("objects", [t, s, limit])
        counts = {f: {"objects": 0, "tokens": 0} for f in LADDER}
        for r in self.run("fidelities", [t, s]):
            counts[r["fidelity"]] = {"objects": r["objects"], "tokens": r["tokens"]}
        return {"session_id": s, "zone": zone, "turn": turn, "by_fidelity": counts, "objects": [{
            "id": f"obj:{r['object_id']}", "kind": r["kind"], "label": r["label"],
            "turns": [r["first_turn"], r["last_turn"]], "tokens": r["token_count"] or 0,
            "fidelity": r["fidelity"], "pinned": r["pinned_until_turn"] > turn, "anchored": r["anchored"],
            "source": r["source_key"], "memory": f"mem:{r['memory_id']}" if r["memory_id"] else None,
        } for r in rows]}

    # ------------------------------------------------------------------ metrics
    def metrics(self, t: str, s: str | None, since, until) -> dict:
        """The paging metrics over the compiles, transitions and faults of a session (or
        of the tenant's sessions) in [since, until)."""
        r = self.one("metrics", [t, s, since, until, list(LADDER)])
        sent, full = r["sent_tokens"] or 0, r["full_tokens"] or 0
        faults = (r["reread_faults"] or 0) + (r["restore_faults"] or 0)
        evictions = r["evictions"] or 0
        micro = r["micro_faults"] or 0
        return {
            "compiles": r["compiles"] or 0,
            "full_history_tokens": full,
            "sent_tokens": sent,
            "context_reduction": round(1 - sent / full, 6) if full else None,
            "tokens_saved": max(full - sent, 0) + (r["micro_saved"] or 0),
            "degradations": r["degradations"] or 0,
            "evictions": evictions,
            "faults": faults,
            "reread_faults": r["reread_faults"] or 0,
            "restore_faults": r["restore_faults"] or 0,
            "fault_rate": round(faults / evictions, 6) if evictions else None,
            "micro_faults": micro,
            "micro_fault_success": round(1 - (r["micro_then_restored"] or 0) / micro, 6) if micro else None,
            "micro_tokens_saved": r["micro_saved"] or 0,
        }


TOOL_NAMES = {"memory_query": {"question", "scope", "max_tokens"}, "memory_restore": {"id", "reason"},
              "memory_release": {"ids", "reason"}}


def lines_of(o: dict) -> tuple[int, int | None] | None:
    if o.get("line_first") is None:
        return None
    return (o["line_first"], None if o.get("line_open") else o["line_last"])


def covers(a: tuple[int, int | None] | None, b: tuple[int, int | None] | None) -> bool:
    """Whether line range a holds all of b (None: the whole source)."""
    if a is None:
        return True
    if b is None:
        return False
    a_last = a[1] if a[1] is not None else float("inf")
    b_last = b[1] if b[1] is not None else float("inf")
    return a[0] <= b[0] and b_last <= a_last


__all__ = ["LADDER", "STATEMENTS", "Pager", "PagingError"]
