"""Memory formation, database side (runs inside PL/Python).

`Former.extract_job` is the body of the `extract` job: it loads a session's new
messages, gets candidates from the helper LLM (when configured; retried, then
falling back) or the offline rules (extract.py), and hands each to `form`:

1. idempotence: a candidate (normalised-content hash + source message) that
   admission control has already seen is skipped, so a re-run changes nothing;
2. exact duplicate (same hash, current) -> merge: sources added, access bumped,
   version recorded (docs/design.md §Tiers);
3. conflict: a fact with a functional predicate (lives_in, works_at ...) whose
   subject already has another current value -> recency, then provenance authority,
   then confidence decide; the loser gets superseded_by and valid_to. A file
   read with the same source key supersedes the previous read, which drops to stub;
4. near duplicate (cosine above dedup_threshold, same kind) -> merge;
5. admission (admission.py) -> admitted candidates are written through
   mnemo_internal.insert_memory with their typed payload, entities, mentions, edges
   and a version; every decision goes to mnemo.admission_log.

Steps 1-4 read the tenant's memories once per job for all its candidates (lookups.Batch,
one statement after the formation lock), each candidate still seeing what those before
it wrote. `remember` and `correct` (the explicit API) use the same steps 2-3 and 5's
writes, with a query per question (lookups.Lookups).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from .. import redact
from ..timestamps import utc_datetime
from ..vocabulary import UPDATED, most_sensitive, provenance_authority
from . import admission, extract, helper_llm, updates
from .lookups import Batch, Lookups
from .statements import (
    ADMISSION,
    BATCH,
    CURRENT_FACTS,
    DECISION,
    EDGE,
    EMBED,
    ENTITY,
    EXACT,
    FACT,
    HASH,
    INSERT,
    LEXICON,
    MEMORY,
    MENTION,
    MERGE,
    MESSAGES,
    NEAREST,
    NOTES,
    PAIRS,
    SAME_KEY,
    SAVE_STATE,
    SEEN,
    STATE,
    SUPERSEDE,
    SUPERSEDE_PAYLOADS,
    TASK,
    VERSION,
)

DURABLE_KINDS = ("fact", "preference", "instruction", "decision")
# Defaults of the extract_batch_messages and extract_job_messages settings
# (sql/settings.sql), for a database where a setting's row is gone.
HELPER_BATCH_MESSAGES = 40
JOB_MESSAGES = 100

_ts = utc_datetime


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts else None


class Former:
    def __init__(self, plpy):
        self.plpy = plpy
        p = plpy.prepare
        t = "text"
        self.q = {
            "messages": p(MESSAGES, [t, "uuid", "integer", "integer"]),
            "state": p(STATE, [t, "uuid"]),
            "lock": p("SELECT pg_advisory_xact_lock(hashtext('mnemo.formation'), hashtext($1))", [t]),
            # one extraction of a session at a time (the job, a manual run): the second
            # reads the first's watermark and asks no model for the same messages again
            "holds_lock": p("SELECT EXISTS (SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory'"
                            " AND l.pid = pg_backend_pid() AND l.granted AND l.objsubid = 2"
                            " AND l.classid = hashtext('mnemo.formation')::oid AND l.objid = hashtext($1)::oid) AS held",
                            [t]),
            "session_lock": p("SELECT pg_advisory_xact_lock(hashtext('mnemo.extract'), hashtext($1 || '/' || $2))",
                              [t, t]),
            "save_state": p(SAVE_STATE, [t, "uuid", "integer", t]),
            "helper": p(helper_llm.CONFIG, []),
            "hash": p(HASH, [t]),
            "redacts": p("SELECT mnemo_internal.redaction_enabled($1) AS on", [t]),
            "seen": p(SEEN, [t, "bytea", "bigint[]"]),
            "exact": p(EXACT, [t, "bytea"]),
            "embed": p(EMBED, ["text[]"]),
            "nearest": p(NEAREST, [t, "vector"]),
            "notes": p(NOTES, [t, "bigint[]"]),
            "batch": p(BATCH, [t, "text[]", "text[]", "text[]", "text[]", "text[]"]),
            "pairs": p(PAIRS, ["text[]"]),
            "current_facts": p(CURRENT_FACTS, [t, t, t]),
            "same_key": p(SAME_KEY, [t, t, "bigint"]),
            "merge": p(MERGE, [t, "bigint", "bigint[]"]),
            "version": p(VERSION, [t, "bigint", t, t, t, t]),
            "supersede": p(SUPERSEDE, [t, "bigint", "bigint", "timestamptz", t]),
            "supersede_payloads": p(SUPERSEDE_PAYLOADS, [t, "bigint", "timestamptz", "bigint", t]),
            "insert": p(INSERT, [t, "uuid", t, t, t, t, "bigint[]", t, t]),
            "fact": p(FACT, [t, "bigint", t, t, t, "bigint", "bigint", "timestamptz", "timestamptz"]),
            "decision": p(DECISION, [t, "bigint", t, t, "text[]", "text[]"]),
            "task": p(TASK, [t, "bigint", t, t, "timestamptz", "timestamptz"]),
            "entity": p(ENTITY, [t, t, t, t]),
            "mention": p(MENTION, [t, "bigint", "bigint", t]),
            "edge": p(EDGE, [t, "bigint", t, "bigint", "bigint", "timestamptz"]),
            "admission": p(ADMISSION, [t, "uuid", "bigint", "boolean", "real", "real", "real", "real",
                                       "real", "real", t, t, "bytea", "bigint[]", t, t]),
            "lexicon": p(LEXICON, [t, "bigint[]"]),
            "memory": p(MEMORY, [t, "bigint"]),
        }
        self.sleep = time.sleep

    def execute(self, statement: str, args: list):
        """Runs one of the prepared statements (self.q) by name."""
        return self.plpy.execute(self.q[statement], args)

    # ------------------------------------------------------------------ the job
    def extract_job(self, tenant: str, payload: dict) -> dict:
        """Extracts a session's messages after its watermark (or payload's turn range)."""
        session = payload.get("session_id")
        if not session:
            raise ValueError("extract job payload needs a session_id")
        # One extraction of a session at a time, unless this transaction already holds
        # the tenant's formation lock (a manual run over several sessions): waiting then
        # could deadlock with a job that holds this session's lock and waits for the
        # tenant's. That run re-reads nothing twice but may ask the model again for
        # messages a job has in hand; forming them twice changes nothing (idempotence).
        if not self.execute("holds_lock", [tenant])[0]["held"]:
            self.execute("session_lock", [tenant, session])
        st = self.execute("state", [tenant, session])[0]
        cfg = json.loads(st["config"]) if st["config"] else {}
        method = cfg.get("method") or st["method"]
        if method == "off" or st["last"] is None:
            return {"method": "off", "messages": 0}
        lo = int(payload["from_turn"]) - 1 if "from_turn" in payload else st["upto"]
        hi = int(payload["to_turn"]) if "to_turn" in payload else st["last"]
        # Bounded work per run (per transaction): the rest goes on in another run of
        # the job, after the other due jobs (see mnemo_internal.process_job).
        rest, per_run = None, max(int(st["per_run"] or JOB_MESSAGES), 1)
        if hi - lo > per_run:
            hi = lo + per_run
            rest = {**payload, "from_turn": hi + 1} if "from_turn" in payload else payload
        rows = self.execute("messages", [tenant, session, lo, hi])
        msgs = [{"message_id": r["message_id"], "turn_index": r["turn_index"], "role": r["role"],
                 "name": r["name"], "content": r["content"], "session_id": r["session_id"],
                 "sensitivity": r["sensitivity"], "created_at": _ts(r["created_epoch"]),
                 "tool_name": r["tool_name"], "tool_args": r["tool_args"]}
                for r in rows if r["sensitivity"] != "secret"]
        used, fallback, attempts = "offline", None, 0
        cands: list[dict] = []
        helper = self.helper_config() if method in ("auto", "helper_llm") else None
        if method == "helper_llm" and helper is None:
            fallback = "helper LLM not configured"
        if helper is not None:
            tools = [m for m in msgs if m["role"] == "tool"]
            try:
                step = max(int(st["batch"] or HELPER_BATCH_MESSAGES), 1)
                for i in range(0, len(msgs), step):
                    got, n = helper_llm.extract(helper, helper.get("api_key"), msgs[i:i + step], self.sleep)
                    cands.extend(got)
                    attempts += n
                cands.extend(extract.extract(tools))
                used = "helper_llm"
            except helper_llm.HelperLLMError as e:
                fallback, cands = str(e)[:300], []
        if used == "offline":
            cands = extract.extract(msgs)
        sens = {m["message_id"]: m["sensitivity"] for m in msgs}
        for c in cands:
            c.setdefault("method", used)
            c["sensitivity"] = most_sensitive(sens.get(i, "none") for i in c["source_message_ids"])
        # payload "lookup": "per_candidate" reads the tenant's memories once per candidate,
        # as formation did before batches (tests and bench/formation.py compare the two)
        stats = self.form_all(tenant, cands, cfg.get("admission_threshold") or st["admit"], st["dedup"],
                              batch=payload.get("lookup") != "per_candidate")
        if rows:
            self.execute("save_state", [tenant, session, max(r["turn_index"] for r in rows), used])
        stats.update({"method": used, "messages": len(msgs), "candidates": len(cands),
                      "helper_attempts": attempts})
        if fallback:
            stats["fallback"] = fallback
        if rest is not None:
            stats["continue"] = rest
        return stats

    def lock(self, tenant: str) -> None:
        """The tenant's formation lock, before any row is written or locked: one
        formation transaction per tenant at a time (extract jobs, a manual run,
        remember, correct), so two never lock the same entities, memories or versions
        in opposite orders. An extract job takes it only for its writes (form_all,
        after the helper LLM and the encoder), so a tenant's remember or a second
        session's extraction never waits behind seconds of model work. The lock order
        of the whole job runner is written down in sql/functions/mnemo.run_jobs.sql."""
        self.execute("lock", [tenant])

    def helper_config(self) -> dict | None:
        return helper_llm.config_from_rows(self.execute("helper", []))

    # ---------------------------------------------------------------- formation
    def form_all(self, tenant: str, cands: list[dict], threshold: float, dedup: float,
                 batch: bool = True) -> dict:
        stats = {"admitted": 0, "rejected": 0, "merged": 0, "superseded": 0, "skipped": 0}
        if not cands:
            return stats
        redacts = self.redact(tenant, cands)
        vecs = [r["v"] for r in self.execute("embed", [[c["content"] for c in cands]])]
        for c, vec in zip(cands, vecs, strict=True):
            c["embedding"] = vec
        self.lock(tenant)  # only now: reading and encoding need no lock (see lock)
        # the batch's reads after the lock: what another former wrote before is seen
        look = Batch(self, tenant, cands, redacts) if batch else Lookups(self, tenant)
        new_ids: list[int] = []
        now = datetime.now(UTC)
        for k, c in enumerate(cands):
            outcome, mid = self.form(tenant, c, threshold, dedup, now, look=look, k=k)
            stats[outcome] = stats.get(outcome, 0) + 1
            if outcome in ("admitted", "superseded") and mid:
                new_ids.append(mid)
        if new_ids:
            self.execute("lexicon", [tenant, new_ids])
        return stats

    def _log(self, tenant, c, h, memory_id, admitted, s, decision):
        self.execute("admission", [tenant, c.get("session_id"), memory_id, admitted, s["total"], s["type"],
                             s["novelty"], s["utility"], s["recency"], s["threshold"], c["content"],
                             c["kind"], h, c["source_message_ids"], decision, c.get("method")])

    def redact(self, tenant: str, cands: list[dict]) -> bool:
        """Candidates are redacted once, before anything (embedding, log, version,
        payload) keeps them: form() and insert() take them redacted. -> whether the
        tenant redacts."""
        if not cands or not self.execute("redacts", [tenant])[0]["on"]:
            return False
        for c in cands:
            keys = [k for k in ("content", "decision", "rationale", "alternatives", "title", "subject",
                                "object", "entities", "tags", "source_key", "tool") if c.get(k)]
            value, kinds = redact.redact_value({k: c[k] for k in keys})
            if kinds:
                c.update(value)
                c["redactions"] = kinds
        return True

    def form(self, tenant: str, c: dict, threshold: float, dedup: float, now: datetime,
             explicit: bool = False, look: Lookups | None = None, k: int = 0) -> tuple[str, int | None]:
        """One (redacted) candidate through idempotence, dedup, conflicts and admission;
        `look` reads the tenant's memories (per candidate, or the batch's k-th)."""
        look = look or Lookups(self, tenant)
        h = look.hash(k, c)
        src = c["source_message_ids"]
        if src and look.seen(k, h, src):
            return "skipped", None
        mid = look.exact(k, h)
        if mid is not None:
            if not explicit:
                self.merge(tenant, mid, c, "exact_duplicate")
                s = admission.score(c, 1.0, now, threshold)
                self._log(tenant, c, h, mid, True, s, "merged_exact")
                look.logged(h, src)
            return "merged", mid

        # Conflicts: one current value per functional predicate; file re-reads.
        losers: list[int] = []
        winner_over_candidate = None
        if c["kind"] == "fact" and c.get("functional") and c.get("subject") and c.get("predicate"):
            for f in look.current_facts(k, c):
                if (f["object"] or "").strip().lower() == (c.get("object") or "").strip().lower():
                    if not explicit:
                        self.merge(tenant, f["memory_id"], c, "same_fact")
                        s = admission.score(c, 1.0, now, threshold)
                        self._log(tenant, c, h, f["memory_id"], True, s, "merged_same_fact")
                        look.logged(h, src)
                    return "merged", f["memory_id"]
                if self.newer_wins(c, f):
                    losers.append(f["memory_id"])
                else:
                    winner_over_candidate = f
        near = look.nearest(k, c) if c.get("embedding") else []
        if not losers and winner_over_candidate is None:
            losers, winner_over_candidate = self.updated_notes(tenant, c, near)
        best = max((r["cosine"] for r in near), default=None)
        if not losers and winner_over_candidate is None and not explicit and c["kind"] != "file_context":
            for r in near:
                if r["cosine"] > dedup and r["kind"] == c["kind"]:
                    self.merge(tenant, r["memory_id"], c, f"near_duplicate cosine={r['cosine']:.3f}")
                    s = admission.score(c, r["cosine"], now, threshold)
                    self._log(tenant, c, h, r["memory_id"], True, s, "merged_near")
                    look.logged(h, src)
                    return "merged", r["memory_id"]
        s = admission.score(c, best, now, threshold)
        if not (explicit or s["admitted"] or losers):
            self._log(tenant, c, h, None, False, s, "rejected")
            look.logged(h, src)
            return "rejected", None
        options = {}
        if winner_over_candidate is not None:
            # an older statement arriving late: stored as already superseded
            options = {"superseded_by": winner_over_candidate["memory_id"],
                       "valid_to": _iso(_ts(winner_over_candidate["valid_epoch"])), "superseded_reason": UPDATED}
        mid = self.insert(tenant, c, options)
        self._log(tenant, c, h, mid, True, s, "explicit" if explicit else "admitted")
        look.logged(h, src)
        look.formed(k, c, h, mid, current=winner_over_candidate is None)
        if c.get("source_key"):
            losers.extend(r["memory_id"] for r in self.execute("same_key", [tenant, c["source_key"], mid]))
        for old in losers:
            self.supersede(tenant, old, mid, c.get("valid_from") or now,
                           "file re-read" if c["kind"] == "file_context" else UPDATED)
            look.superseded(old)
        return ("superseded" if losers else "admitted"), mid

    def updated_notes(self, tenant: str, c: dict, near: list[dict]) -> tuple[list[int], dict | None]:
        """The current notes among the candidate's nearest that it says again with
        new quantities (updates.restates_with_new_values), said before it in another
        session, which it supersedes (a knowledge update said in passing, which no
        functional predicate names); and the newest one said after it that says it
        again so, which supersedes it (an older statement extracted late: sessions
        are not extracted in date order). Within a session the same words with
        another number are most often the next of a series ("added the $100
        expense", then "the $30 expense"; "part 1", "part 2"), not a new value. Only
        a fact or preference that states a quantity asks."""
        ids = [r["memory_id"] for r in near if r["kind"] == c["kind"]]
        said = c.get("valid_from")
        if (not ids or said is None or c["kind"] not in ("fact", "preference")
                or not updates.states_a_quantity(c["content"])):
            return [], None
        older, newer = [], None
        for r in self.execute("notes", [tenant, ids]):
            if r["session_id"] == str(c.get("session_id")):
                continue
            gap = said.timestamp() - r["valid_epoch"]
            if gap >= 1 and updates.restates_with_new_values(r["content_full"], c["content"]):
                older.append(r["memory_id"])
            elif gap <= -1 and updates.restates_with_new_values(c["content"], r["content_full"]) and (
                    newer is None or r["valid_epoch"] > newer["valid_epoch"]):
                newer = r
        return ([], newer) if newer is not None else (older, None)

    @staticmethod
    def newer_wins(c: dict, f: dict) -> bool:
        """docs/design.md §Tiers (conflicts): recency, then provenance authority, then confidence."""
        new_t, old_t = c.get("valid_from"), _ts(f["valid_epoch"])
        if new_t and old_t and abs((new_t - old_t).total_seconds()) >= 1:
            return new_t > old_t
        a_new = provenance_authority(c.get("provenance_type"))
        a_old = provenance_authority(f["provenance_type"])
        if a_new != a_old:
            return a_new > a_old
        return (c.get("confidence") or 0.5) >= (f["confidence"] or 0.5)

    def merge(self, tenant: str, mid: int, c: dict, reason: str) -> None:
        self.execute("merge", [tenant, mid, c["source_message_ids"]])
        self.execute("version", [tenant, mid, "merge", reason, None,
                           json.dumps({"content": c["content"], "source_message_ids": c["source_message_ids"],
                                       "method": c.get("method")})])

    def supersede(self, tenant: str, old: int, new: int, at: datetime, reason: str) -> None:
        meta = {"superseded_reason": reason}
        if reason == "file re-read":
            meta["max_fidelity"] = "stub"
        rows = self.execute("supersede", [tenant, old, new, at, json.dumps(meta)])
        self.execute("supersede_payloads", [tenant, old, at, new, json.dumps({"reason": reason})])
        self.execute("version", [tenant, old, "superseded", reason,
                           json.dumps({"content": rows[0]["content_full"] if rows else None}),
                           json.dumps({"superseded_by": new, "valid_to": _iso(at)})])

    def insert(self, tenant: str, c: dict, extra: dict) -> int:
        durable = c["kind"] in DURABLE_KINDS
        ents = c.get("entities") or []
        options = {
            "scope": c.get("scope") or ("global" if durable else "local"),
            "confidence": c.get("confidence", 0.5), "created_at": _iso(c.get("valid_from")),
            "valid_from": _iso(c.get("valid_from")), "expires_at": _iso(c.get("expires_at")),
            "source_key": c.get("source_key"), "key_entities": [e for e, _ in ents],
            "embedding": c.get("embedding"), "is_pinned": c.get("is_pinned"),
            "metadata": {k: c[k] for k in ("tool", "method", "predicate") if c.get(k)},
        }
        options.update(extra)
        if options.get("superseded_reason"):  # stored as already superseded (form)
            options["metadata"]["superseded_reason"] = options.pop("superseded_reason")
        flagged = sorted(set(c.get("redactions") or []) | set(redact.MARKED.findall(c["content"])))
        if flagged:
            options["metadata"]["redactions"] = flagged
        prov = {"method": c.get("method", "offline"), "extractor": "mnemo_db.extract"
                if c.get("method", "offline") == "offline" else "mnemo_db.helper_llm"}
        if c.get("model"):
            prov["model"] = c["model"]
        mid = self.execute("insert", [tenant, c.get("session_id"), c["kind"], c["content"],
                                c.get("provenance_type", "system_inferred"), json.dumps(prov),
                                c["source_message_ids"], c.get("sensitivity", "none"),
                                json.dumps({k: v for k, v in options.items() if v is not None})])[0]["id"]
        ids = {}
        for name, kind in ents:
            norm = " ".join(name.lower().split())
            ids[norm] = self.execute("entity", [tenant, kind, name, norm])[0]["entity_id"]
            self.execute("mention", [tenant, mid, ids[norm], "mention"])
        vf, vt = c.get("valid_from"), extra.get("valid_to")
        if c["kind"] in ("fact", "preference") and c.get("subject") and c.get("predicate"):
            subj = ids.get(" ".join(c["subject"].lower().split()))
            if subj is None:
                norm = " ".join(c["subject"].lower().split())
                subj = self.execute("entity", [tenant, "person", c["subject"], norm])[0]["entity_id"]
                self.execute("mention", [tenant, mid, subj, "subject"])
            obj = ids.get(" ".join((c.get("object") or "").lower().split()))
            if obj is None and c.get("functional") and c.get("object"):
                norm = " ".join(c["object"].lower().split())
                obj = self.execute("entity", [tenant, "thing", c["object"], norm])[0]["entity_id"]
                self.execute("mention", [tenant, mid, obj, "object"])
            self.execute("fact", [tenant, mid, c["subject"], c["predicate"], c.get("object") or "",
                            subj, obj, vf, vt])
            if subj and obj and subj != obj:
                self.execute("edge", [tenant, subj, c["predicate"], obj, mid, vf])
        elif c["kind"] == "decision":
            self.execute("decision", [tenant, mid, c.get("decision") or c["content"],
                                "superseded" if extra.get("superseded_by") else "active",
                                c.get("rationale") or [], c.get("alternatives") or []])
        elif c["kind"] in ("task", "open_loop"):
            self.execute("task", [tenant, mid, c.get("title") or c["content"], c.get("status") or "open",
                            c.get("due_at"), c.get("expires_at")])
        self.execute("version", [tenant, mid, "created", f"{c.get('method', 'offline')} {c['kind']}", None,
                           json.dumps({"content": c["content"], "source_message_ids": c["source_message_ids"]})])
        return mid

    # -------------------------------------------------------------- explicit API
    def remember(self, tenant: str, content: str, kind: str, session: str | None, o: dict) -> int:
        self.lock(tenant)
        c = {"kind": kind, "content": extract.clean(content), "session_id": session,
             "source_message_ids": [int(x) for x in o.get("source_message_ids") or []],
             "valid_from": datetime.now(UTC), "provenance_type": o.get("provenance_type") or "user_stated",
             "confidence": float(o.get("confidence", 0.9)), "method": "explicit",
             "entities": [(e, "thing") for e in o.get("entities") or []] or extract.entities_in(content),
             "scope": o.get("scope"), "is_pinned": o.get("pinned"),
             "rationale": o.get("rationale"), "alternatives": o.get("alternatives"),
             "due_at": o.get("due_at"), "title": o.get("title")}
        fact = o.get("fact") or {}
        if fact:
            c.update(subject=fact["subject"], predicate=fact["predicate"], object=fact["object"],
                     functional=bool(fact.get("functional", True)))
        self.redact(tenant, [c])
        _, mid = self.form(tenant, c, 0.0, 1.0, c["valid_from"], explicit=True)
        if o.get("tags") or o.get("sensitivity"):
            self.plpy.execute(self.plpy.prepare(
                "UPDATE mnemo.memories SET tags = coalesce($3, tags), sensitivity = coalesce($4, sensitivity)"
                " WHERE tenant_id = $1 AND memory_id = $2", ["text", "bigint", "text[]", "text"]),
                [tenant, mid, o.get("tags"), o.get("sensitivity")])
        return mid

    def correct(self, tenant: str, memory_id: int, content: str, reason: str | None) -> int:
        self.lock(tenant)
        rows = self.execute("memory", [tenant, memory_id])
        if not rows:
            return None
        old = rows[0]
        c = {"kind": old["kind"], "content": extract.clean(content), "session_id": old["session_id"],
             "source_message_ids": list(old["source_message_ids"] or []),
             "valid_from": datetime.now(UTC), "provenance_type": "correction", "confidence": 0.95,
             "method": "correction", "entities": extract.entities_in(content),
             "scope": old["scope"], "source_key": None}
        if old["subject"] and old["predicate"]:
            c.update(subject=old["subject"], predicate=old["predicate"], functional=False,
                     object=extract.clean(content))
        self.redact(tenant, [c])
        mid = self.insert(tenant, c, {"tier": old["tier"]})
        h = self.execute("hash", [c["content"]])[0]["h"]
        s = admission.score(c, None, c["valid_from"], 0.0)
        self._log(tenant, c, h, mid, True, s, "correction")
        self.supersede(tenant, memory_id, mid, c["valid_from"], reason or "corrected")
        return mid
