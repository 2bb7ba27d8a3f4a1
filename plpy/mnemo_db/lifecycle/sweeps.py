"""The lifecycle sweeps' database side: statements run inside PL/Python.

Each `<sweep>_batch` method of Sweeps is one batch of a Python sweep (those
mnemo_internal.sweeps() marks python), run by mnemo_internal.sweep_py: it reads a
bounded set of rows after the cursor in `state`, asks rules.py (decisions),
llm_summarize.py (summaries by the helper LLM, when one is configured and enabled) or
summarize.py (offline summaries, and the fallback) what to do, writes the answer and
returns {"rows": touched, "done": bool, "state": {...}, "counts": {...}}.
mnemo.run_sweep calls it in a loop and commits after each batch, so a sweep that
is killed keeps every finished batch and redoes nothing twice (each batch is one
transaction and every write checks the state it expects).
"""

from __future__ import annotations

import json
import time
from datetime import date, datetime

from ..formation import helper_llm
from ..timestamps import utc_datetime
from ..vocabulary import most_sensitive
from . import digest_statements as ds
from . import digests, llm_summarize, rules, summarize
from .statements import (
    ACTIVE_HISTORY,
    ARCHIVE,
    COMPACTION_CANDIDATES,
    COMPACTION_SINCE,
    DEMOTE,
    DEMOTION_CANDIDATES,
    DUE_MEMORIES,
    EXPIRE_SESSIONS,
    FLAG_COMPACTED,
    INSERT_SUMMARY_MEMORY,
    INSERT_SUMMARY_MESSAGE,
    LIFECYCLE_KEYS,
    LOG_COMPACTION,
    PROMOTE,
    PROMOTION_CANDIDATES,
    SESSION_LOCK,
    SESSION_MEMORY_TTL,
    SETTINGS,
    STORE_LEVELS,
    SUMMARY_MESSAGE_ID,
    UNSUMMARISED,
    UPDATE_SESSION_SUMMARY,
)

_epoch = utc_datetime  # clamped to what a datetime holds: a stored infinity fails no sweep


def _first_turn(metadata: str | None, turn_index: int) -> int:
    """The first turn a message covers: metadata.compaction.first_turn for an earlier
    summary (turn -1; a turn number), else its own turn. Metadata is the tenant's to
    write: anything else there is ignored."""
    c = json.loads(metadata or "{}")
    c = c.get("compaction") if isinstance(c, dict) else None
    first = c.get("first_turn") if isinstance(c, dict) else None
    if isinstance(first, int) and not isinstance(first, bool) and 0 <= first <= 2**31 - 1:
        return first
    return turn_index


def _tool_calls(raw: str | None) -> list[dict] | None:
    """A message's tool calls for a transcript: the objects of its array, each with
    an object 'function' (or none); anything else a tenant stored there is left out."""
    calls = json.loads(raw or "null")
    if not isinstance(calls, list):
        return None
    return [dict(c, function=c["function"] if isinstance(c.get("function"), dict) else {})
            for c in calls if isinstance(c, dict)]


def _result(rows: int, done: bool, state: dict, counts: dict | None = None) -> str:
    return json.dumps({"rows": rows, "done": done, "state": state, "counts": counts or {}})


class Sweeps:
    """Prepared statements, once per backend."""

    def __init__(self, plpy):
        self.plpy = plpy
        self.plans: dict[str, object] = {}
        self.sleep = time.sleep

    def _plan(self, name: str, sql: str, types: list[str]):
        plan = self.plans.get(name)
        if plan is None:
            plan = self.plans[name] = self.plpy.prepare(sql, types)
        return plan

    def _run(self, name: str, sql: str, types: list[str], args: list) -> list:
        return self.plpy.execute(self._plan(name, sql, types), args)

    def settings(self) -> dict:
        rows = self._run("settings", SETTINGS, ["text[]"], [LIFECYCLE_KEYS])
        return {r["key"]: json.loads(r["value"]) for r in rows}

    def now(self, p_now: str) -> datetime:
        r = self._run("now", "SELECT extract(epoch FROM $1::timestamptz)::float8 AS e", ["text"], [p_now])
        return _epoch(r[0]["e"])

    # -- promotion --------------------------------------------------------------------
    def promotion_batch(self, p_now: str, tenant: str | None, batch: int, state: dict) -> str:
        cfg = self.settings()
        params = cfg.get("promotion") or rules.DEFAULT_PROMOTION
        ttl = float(cfg.get("episodic_ttl_days", rules.EPISODIC_TTL_DAYS))
        tiers = [t for t in rules.TIERS if isinstance(params.get(t), dict)]
        min_access = min(params[t]["min_access"] for t in tiers)
        now = self.now(p_now)
        rows = self._run("promo_cand", PROMOTION_CANDIDATES,
                         ["text[]", "integer", "text", "text", "bigint", "integer"],
                         [tiers, min_access, tenant, state.get("t", ""), state.get("m", 0), batch])
        ups = []
        for r in rows:
            p = rules.promotion(dict(r, created_at=_epoch(r["created_epoch"])), now, params, ttl)
            if p:
                ups.append((r["tenant_id"], p, r["tier"]))
        done_ids = []
        if ups:
            done_ids = self._run("promote", PROMOTE,
                                 ["text[]", "bigint[]", "text[]", "text[]", "float8[]", "float8[]",
                                  "timestamptz"],
                                 [[t for t, _, _ in ups], [p.memory_id for _, p, _ in ups],
                                  [old for _, _, old in ups], [p.tier for _, p, _ in ups],
                                  [p.utility for _, p, _ in ups],
                                  [p.expires_at.timestamp() if p.expires_at else None for _, p, _ in ups],
                                  p_now])
        last = rows[len(rows) - 1] if rows.nrows() else None
        state = {"t": last["tenant_id"], "m": last["memory_id"]} if last else state
        return _result(len(done_ids), rows.nrows() < batch, state, {"promoted": len(done_ids)})

    # -- expiry and demotion -------------------------------------------------------------
    def expiry_batch(self, p_now: str, tenant: str | None, batch: int, state: dict) -> str:
        cfg = self.settings()
        phase = state.get("phase", "sessions")
        if phase == "sessions":
            n = self._run("exp_sessions", EXPIRE_SESSIONS, ["timestamptz", "text", "float8", "integer"],
                          [p_now, tenant, float(cfg.get("session_idle_hours", 168)), batch]).nrows()
            k = self._run("session_ttl", SESSION_MEMORY_TTL, ["timestamptz", "text", "float8", "integer"],
                          [p_now, tenant, float(cfg.get("session_memory_grace_hours", 24)), batch]).nrows()
            nxt = state if n == batch or k == batch else {"phase": "ttl"}
            return _result(n + k, False, nxt, {"sessions_expired": n, "session_memories_ttl": k})
        if phase == "ttl":
            due = self._run("due", DUE_MEMORIES, ["timestamptz", "text", "integer"], [p_now, tenant, batch])[0]
            ids = list(due["ids"])
            n = 0
            if ids:
                n = self._archive(list(due["tenants"]), ids, ["expired: expires_at passed"] * len(ids), p_now)
            nxt = state if len(ids) == batch else {"phase": "demotion"}
            return _result(n, False, nxt, {"expired": n})
        # phase demotion: D(m) < phi
        params = cfg.get("demotion") or rules.DEFAULT_DEMOTION
        ttl = float(cfg.get("episodic_ttl_days", rules.EPISODIC_TTL_DAYS))
        tiers = [t for t in rules.TIERS if (params.get(t) or {}).get("phi")]
        if not tiers:
            return _result(0, True, state)
        min_idle = min(float(params[t].get("min_idle_hours", 0)) for t in tiers)
        now = self.now(p_now)
        rows = self._run("dem_cand", DEMOTION_CANDIDATES,
                         ["text[]", "timestamptz", "float8", "text", "text", "bigint", "integer"],
                         [tiers, p_now, min_idle, tenant, state.get("t", ""), state.get("m", 0), batch])
        expire, demote = [], []
        for r in rows:
            d = rules.demotion(dict(r, created_at=_epoch(r["created_epoch"]),
                                        last_accessed_at=_epoch(r["last_epoch"])), now, params, ttl)
            if d and d.action == "expire":
                expire.append((r["tenant_id"], d))
            elif d:
                demote.append((r["tenant_id"], d, r["tier"]))
        n_exp = self._archive([t for t, _ in expire], [d.memory_id for _, d in expire],
                              [f"expired: activity {d.activity:.5f}/h below the floor" for _, d in expire],
                              p_now) if expire else 0
        n_dem = 0
        if demote:
            n_dem = self._run("demote", DEMOTE,
                              ["text[]", "bigint[]", "text[]", "text[]", "float8[]", "float8[]", "timestamptz"],
                              [[t for t, _, _ in demote], [d.memory_id for _, d, _ in demote],
                               [old for _, _, old in demote], [d.tier for _, d, _ in demote],
                               [d.activity for _, d, _ in demote],
                               [d.expires_at.timestamp() for _, d, _ in demote], p_now]).nrows()
        last = rows[len(rows) - 1] if rows.nrows() else None
        nxt = dict(state, t=last["tenant_id"], m=last["memory_id"]) if last else state
        return _result(n_exp + n_dem, rows.nrows() < batch, nxt,
                       {"expired_inactive": n_exp, "demoted": n_dem})

    def _archive(self, tenants: list, ids: list, reasons: list, p_now: str) -> int:
        return self._run("archive", ARCHIVE, ["text[]", "bigint[]", "text[]", "timestamptz"],
                         [tenants, ids, reasons, p_now]).nrows()

    # -- summaries by the helper LLM, else offline -------------------------------------
    def helper(self, state: dict) -> dict | None:
        """The helper LLM's configuration when one is enabled and this run has not found
        it unreachable (state["helper_down"]), else None."""
        if state.get("helper_down"):
            return None
        return helper_llm.config_from_rows(self._run("helper", helper_llm.CONFIG, [], []))

    def llm_levels(self, helper: dict | None, content: str, kind: str, when: str | None, related: int,
                   counts: dict, state: dict) -> tuple[dict | None, dict]:
        """(levels, metadata) from the helper LLM, or (None, metadata) when there is no
        helper or it gave no valid reply after its retries (the caller then summarises
        offline). Never raises for the helper's sake: a sweep does not fail because the
        helper did. An unreachable helper (timeouts, connection or HTTP errors) is not
        asked again in this run (state["helper_down"]); a reply that breaks the rules is
        a failure of that item only."""
        if helper is None:
            return None, {"method": "offline"}
        try:
            levels, attempts = llm_summarize.summarize_llm(helper, helper.get("api_key"), content, kind, when,
                                                           related, self.sleep)
        except helper_llm.HelperLLMError as e:
            counts["helper_fallbacks"] = counts.get("helper_fallbacks", 0) + 1
            if e.unreachable:
                state["helper_down"] = 1
            return None, {"method": "offline", "fallback": str(e)[:300]}
        counts["helper_attempts"] = counts.get("helper_attempts", 0) + attempts
        return levels, {"method": "helper_llm", "model": helper["model"], "attempts": attempts}

    @staticmethod
    def _count_method(counts: dict, meta: dict) -> None:
        counts[meta["method"]] = counts.get(meta["method"], 0) + 1

    # -- summaries of memories -----------------------------------------------------------
    def summaries_batch(self, p_now: str, tenant: str | None, batch: int, state: dict) -> str:
        rows = self._run("unsummarised", UNSUMMARISED, ["integer", "text", "text", "bigint", "integer"],
                         [summarize.MIN_TOKENS_FOR_SUMMARY, tenant, state.get("t", ""), state.get("m", 0),
                          batch])
        helper = self.helper(state) if rows.nrows() else None
        counts = {"helper_llm": 0, "offline": 0}
        items = []
        for r in rows:
            # secrets never leave the database
            levels, meta = self.llm_levels(helper if r["sensitivity"] != "secret" else None, r["content_full"],
                                           r["kind"], r["created"], 0, counts, state)
            if state.get("helper_down"):
                helper = None
            if levels is None:
                levels = summarize.summarize(r["content_full"], r["kind"], r["created"])
            self._count_method(counts, meta)
            items.append((r["tenant_id"], r["memory_id"], levels, meta))
        n = self.store_levels(items) if items else 0
        last = rows[len(rows) - 1] if rows.nrows() else None
        nxt = {"t": last["tenant_id"], "m": last["memory_id"]} if last else {"t": state.get("t", ""),
                                                                            "m": state.get("m", 0)}
        if state.get("helper_down"):
            nxt["helper_down"] = 1
        return _result(n, rows.nrows() < batch, nxt, dict(counts, summarised=n))

    def store_levels(self, items: list) -> int:
        """Writes the detail / compact / stub levels, declared losses and how they were
        made (metadata.summary: method, model, attempts, fallback) of memories.
        items: (tenant, memory_id, levels, summary metadata)."""
        def col(name, attr):
            return [getattr(lv.get(name), attr) if lv.get(name) else None for _, _, lv, _ in items]
        return self._run("store_levels", STORE_LEVELS,
                         ["text[]", "bigint[]", "text[]", "integer[]", "text[]", "integer[]", "text[]",
                          "integer[]", "jsonb[]", "jsonb[]"],
                         [[t for t, _, _, _ in items], [m for _, m, _, _ in items],
                          col("detail", "text"), col("detail", "tokens"),
                          col("compact", "text"), col("compact", "tokens"),
                          col("stub", "text"), col("stub", "tokens"),
                          [json.dumps({k: v.losses() for k, v in lv.items()}) for _, _, lv, _ in items],
                          [json.dumps({"summary": meta}) for _, _, _, meta in items]]).nrows()

    # -- history compaction --------------------------------------------------------------
    def compaction_batch(self, p_now: str, tenant: str | None, batch: int, state: dict) -> str:
        cfg = self.settings()
        factor = float(cfg.get("compaction_factor", 2))
        if "since" not in state:  # the run's first batch
            state = {**state, "since": self._run("comp_since", COMPACTION_SINCE, ["text"], [tenant])[0]["since"]}
        rows = self._run("comp_cand", COMPACTION_CANDIDATES, ["text", "text", "text", "integer", "text"],
                         [tenant, state.get("t", ""), state.get("s", "00000000-0000-0000-0000-000000000000"),
                          batch, state["since"]])
        n_sessions = n_messages = 0
        ratios = []
        summ = {"helper_llm": 0, "offline": 0, "state": state}
        n_failed = 0
        for r in rows:
            if r["active_tokens"] <= factor * r["context_window"]:
                continue
            if "helper" not in summ:
                summ["helper"] = self.helper(state)
            # A session's rows are its tenant's to write: whatever one holds must not
            # fail the batch, every tenant's. Its compaction is undone and reported.
            try:
                with self.plpy.subtransaction():
                    out = self.compact_session(r["tenant_id"], r["session_id"], r["context_window"], p_now,
                                               cfg, summ)
            except Exception as e:  # noqa: BLE001 (any failure of this session's data)
                n_failed += 1
                self.plpy.warning(f"compaction of session {r['session_id']} (tenant {r['tenant_id']}) "
                                  f"skipped: {type(e).__name__}: {str(e)[:300]}")
                continue
            if out:
                n_sessions += 1
                n_messages += sum(o["messages"] for o in out)
                ratios += [o["ratio"] for o in out]
        last = rows[len(rows) - 1] if rows.nrows() else None
        nxt = {"t": last["tenant_id"], "s": last["session_id"]} if last else {
            k: state[k] for k in ("t", "s") if k in state}
        nxt["since"] = state["since"]
        if state.get("helper_down"):
            nxt["helper_down"] = 1
        counts = {"sessions_compacted": n_sessions, "messages_compacted": n_messages,
                  "compactions": len(ratios), **{k: v for k, v in summ.items() if k not in ("state", "helper")}}
        if n_failed:
            counts["sessions_failed"] = n_failed
        if ratios:
            counts["min_ratio"] = round(min(ratios), 2)
        return _result(n_messages, rows.nrows() < batch, nxt, counts)

    def compact_session(self, tenant: str, session: str, window: int, p_now: str, cfg: dict,
                        summ: dict | None = None) -> list[dict]:
        """Compacts one session's oldest active history until it is within the target
        (possibly in several spans when a span is capped). Skips a session another
        sweep is compacting. Returns one entry per compaction. summ: the helper LLM's
        configuration ("helper") and the run's state and counters (see llm_levels)."""
        summ = summ if summ is not None else {"state": {}}
        if not self._run("sess_lock", SESSION_LOCK, ["text", "text"], [tenant, session])[0]["ok"]:
            return []
        factor = float(cfg.get("compaction_factor", 2))
        keep = int(cfg.get("compaction_keep_recent", 2))
        cap = cfg.get("compaction_max_span_tokens")
        out = []
        for _ in range(100):
            hist = list(self._run("active", ACTIVE_HISTORY, ["text", "uuid"], [tenant, session]))
            before = sum(m["token_count"] for m in hist)
            k = rules.compaction_span(hist, window, factor, keep, int(cap) if cap else None)
            if k == 0:
                break
            out.append(self._compact_span(tenant, session, hist, k, before, p_now, summ))
            if out[-1]["active_after"] <= factor * window:  # a capped span: go on while over
                break
        return out

    def _compact_span(self, tenant, session, hist, k, before, p_now, summ) -> dict:
        span = hist[:k]
        msgs = []
        for m in span:
            secret = m["sensitivity"] == "secret"
            msgs.append({
                "role": m["role"], "name": m["name"] or m["tool_name"], "tool_call_id": m["tool_call_id"],
                "content": "[withheld: secret]" if secret else m["content"],
                "tool_calls": None if secret else _tool_calls(m["tool_calls"]),
                "first_turn": _first_turn(m["metadata"], m["turn_index"]),
            })
        first_turn = min(m["first_turn"] for m in msgs)
        last_turn = max(m["turn_index"] for m in span)
        # secret content is withheld from the summary, so it is no more than high
        sens = most_sensitive(m["sensitivity"] for m in span if m["sensitivity"] != "secret")
        when = f"{span[0]['created']} to {span[-1]['created']}"
        full = summarize.transcript(msgs)
        helper = None if summ["state"].get("helper_down") else summ.get("helper")
        levels, smeta = self.llm_levels(helper, full, "summary", when, k, summ, summ["state"])
        if levels is None:
            full, levels = summarize.summarize_transcript(msgs, when)
        self._count_method(summ, smeta)
        method = "helper_llm" if smeta["method"] == "helper_llm" else "extractive"
        body = (levels.get("compact") or levels.get("detail") or levels["stub"]).text
        removed = sum(m["token_count"] for m in span)
        header = f"[Conversation summary: turns {first_turn}-{last_turn}, {k} messages, {removed} tokens]"
        content = f"{header}\n{body}"
        ids = [m["message_id"] for m in span]
        meta = {"compaction": {"first_turn": first_turn, "last_turn": last_turn, "messages": k,
                               "tokens_removed": removed}}
        new_id = self._run("summary_id", SUMMARY_MESSAGE_ID, ["text"], [tenant])[0]["message_id"]
        msg = self._run("ins_summary", INSERT_SUMMARY_MESSAGE,
                        ["text", "uuid", "text", "text", "text", "timestamptz", "bigint"],
                        [tenant, session, content, sens, json.dumps(meta), p_now, new_id])[0]
        flagged = self._run("flag", FLAG_COMPACTED, ["text", "uuid", "bigint", "bigint[]"],
                            [tenant, session, msg["message_id"], ids]).nrows()
        if flagged != k:
            self.plpy.error(f"compaction of session {session}: {flagged} of {k} messages could be flagged",
                            sqlstate="40001")
        provenance = {"method": method, "compaction_message_id": msg["message_id"],
                      "first_turn": first_turn, "last_turn": last_turn}
        memory_id = self._run("ins_memory", INSERT_SUMMARY_MEMORY,
                              ["text", "uuid", "text", "text", "bigint[]", "text"],
                              [tenant, session, full, json.dumps(provenance), ids, sens])[0]["memory_id"]
        self.store_levels([(tenant, memory_id, levels, smeta)])
        self._run("sess_summary", UPDATE_SESSION_SUMMARY, ["text", "uuid", "text", "integer"],
                  [tenant, session, content, last_turn])
        ratio = rules.compaction_ratio(removed, msg["token_count"])
        after = before - removed + msg["token_count"]
        self._run("log_compaction", LOG_COMPACTION,
                  ["text", "uuid", "bigint", "bigint", "integer", "integer", "integer", "integer", "integer",
                   "float8", "integer", "integer", "timestamptz", "text"],
                  [tenant, session, msg["message_id"], memory_id, first_turn, last_turn, k, removed,
                   msg["token_count"], ratio, before, after, p_now, method])
        return {"messages": k, "ratio": ratio, "active_after": after}

    # -- digests: facts gathered across sessions per entity and topic -----------------
    def digests_batch(self, p_now: str, tenant: str | None, batch: int, state: dict) -> str:
        """One tenant's digests (digests.py): the next tenant after the cursor with a
        memory changed since the last run, its pool grouped, and each digest inserted,
        updated in place (a memory_versions row) or left as it is; a digest its group
        no longer asks for is deactivated and archived. batch: unused (a batch is one
        tenant, its pool bounded by digests.POOL_LIMIT)."""
        if "since" not in state:  # the run's first batch
            state = {**state, "since": self._run("dg_since", ds.DIGEST_SINCE, ["text"], [tenant])[0]["since"]}
        rows = self._run("dg_next", ds.DIGEST_NEXT_TENANT, ["text", "text", "text"],
                         [tenant, state.get("t", ""), state["since"]])
        if not rows.nrows():
            return _result(0, True, state)
        t = rows[0]["tenant_id"]
        counts = self.tenant_digests(t, p_now)
        return _result(sum(counts.values()), False, {**state, "t": t}, counts)

    def tenant_digests(self, tenant: str, p_now: str) -> dict:
        pool = [digests.Member(
            memory_id=r["memory_id"], session=r["session_id"], day=date.fromisoformat(r["day"]),
            text=r["content_full"], kind=r["kind"], sensitivity=r["sensitivity"], superseded=r["superseded"],
            confidence=r["confidence"], sources=tuple(r["source_message_ids"] or ()),
            entities=tuple(r["entities"] or ()), lexemes=tuple(r["lexemes"] or ()), said_at=r["said_at"])
            for r in self._run("dg_pool", ds.DIGEST_POOL, ["text", "timestamptz", "integer"],
                               [tenant, p_now, digests.POOL_LIMIT])]
        ent_ids = sorted({e for m in pool for e in m.entities})
        names = {r["entity_id"]: r["name"] for r in self._run(
            "dg_names", ds.DIGEST_ENTITY_NAMES, ["text", "bigint[]"], [tenant, ent_ids])} if ent_ids else {}
        words = sorted(digests.nouns([m.text for m in pool]))
        stems = set(self._run("dg_stems", ds.DIGEST_STEMS, ["text[]"], [words])[0]["stems"]) if words else set()
        wanted = {d.key: d for d in digests.digests(pool, names, stems)}
        existing = {r["source_key"]: r for r in self._run("dg_existing", ds.DIGEST_EXISTING, ["text"], [tenant])}
        counts = {"digests_formed": 0, "digests_updated": 0, "digests_retired": 0}
        for key, d in wanted.items():
            meta = {"digest": {"key": key, "label": d.label, "members": d.members, "total": d.total,
                               "sessions": d.occasions}}
            cur = existing.get(key)
            if cur is None:
                opts = {"scope": "global", "tier": "episodic", "confidence": d.confidence,
                        "created_at": d.dated_at, "valid_from": d.dated_at, "source_key": key, "metadata": meta}
                mid = self._run("dg_insert", ds.DIGEST_INSERT,
                                ["text", "text", "text", "text", "bigint[]", "text", "text"],
                                [tenant, d.kind, d.text, json.dumps({"method": "digest", "group": key}),
                                 d.sources, d.sensitivity, json.dumps(opts)])[0]["memory_id"]
                self._version(tenant, mid, "created", f"digest of {d.occasions} sessions", None,
                              {"content": d.text, "members": d.members}, p_now)
                counts["digests_formed"] += 1
                continue
            if (cur["content_full"], cur["kind"], cur["sensitivity"], list(cur["source_message_ids"] or [])) == (
                    d.text, d.kind, d.sensitivity, d.sources):
                continue  # the group is as it was
            self._run("dg_update", ds.DIGEST_UPDATE,
                      ["text", "bigint", "text", "text", "bigint[]", "text", "real", "timestamptz", "text",
                       "timestamptz"],
                      [tenant, cur["memory_id"], d.kind, d.text, d.sources, d.sensitivity, d.confidence,
                       d.dated_at, json.dumps(meta), p_now])
            self._version(tenant, cur["memory_id"], "updated", "digest: its group changed",
                          {"content": cur["content_full"], "source_message_ids": list(cur["source_message_ids"])},
                          {"content": d.text, "members": d.members}, p_now)
            counts["digests_updated"] += 1
        gone = [r["memory_id"] for k, r in existing.items() if k not in wanted]
        if gone:
            counts["digests_retired"] = self._archive([tenant] * len(gone), gone,
                                                      ["digest: its group no longer forms one"] * len(gone), p_now)
        return counts

    def _version(self, tenant: str, mid: int, change: str, reason: str, old: dict | None, new: dict,
                 p_now: str) -> None:
        self._run("dg_version", ds.DIGEST_VERSION,
                  ["text", "bigint", "text", "text", "text", "text", "timestamptz"],
                  [tenant, mid, change, reason, json.dumps(old) if old is not None else None, json.dumps(new), p_now])
