"""Lifecycle decisions (docs/design.md §Lifecycle): pure functions, no database.

The sweeps of lifecycle/sweeps.py fetch rows and settings, ask these functions what to do,
and write the answer. Everything takes the current time as an argument, so tests
control the clock.

Promotion: a memory moves from tier k to k+1 when

    U(m) = r̄(m) · log2(1 + a(m)) / (1 + λ_k · Δt(m)) > θ_k   and   a(m) >= min_access_k

with r̄ = relevance_accumulator / access_count (mnemo.memory_access, summed by the
access sweep from the scores of the compiles that sent m), a = access_count and Δt
the hours since creation. episodic → procedural instead of semantic for behavioural kinds
(preferences, instructions, plans). Promoted memories become global and validated.

Demotion and expiry: a memory idle for at least `min_idle_hours` is demoted
or expired when its activity D(m) = a(m) / hours since last access < φ_k. Session
and episodic memories expire; semantic and procedural ones (φ = 0 by default: they
never expire on their own) go back to episodic, where the TTL applies.

Compaction: when a session's active history passes `factor` × its
context window, its oldest messages down to one context window become a summary; a
span never separates tool results from the call that issued them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

TIERS = ("session", "episodic", "semantic", "procedural")

DEFAULT_PROMOTION = {
    "session": {"to": "episodic", "lambda": 0.01, "theta": 0.3, "min_access": 3},
    "episodic": {"to": "semantic", "lambda": 0.001, "theta": 0.5, "min_access": 10},
    "procedural_kinds": ["preference", "instruction", "plan"],
}
DEFAULT_DEMOTION = {
    "session": {"phi": 0.05, "min_idle_hours": 24},
    "episodic": {"phi": 0.01, "min_idle_hours": 168},
    "semantic": {"phi": 0, "min_idle_hours": 720},
    "procedural": {"phi": 0, "min_idle_hours": 720},
}
EPISODIC_TTL_DAYS = 90


def hours(delta: timedelta) -> float:
    return max(delta.total_seconds() / 3600.0, 0.0)


def utility(relevance_accumulator: float, access_count: int, created_at: datetime,
            now: datetime, lam: float) -> float:
    """U(m) of docs/design.md §Lifecycle (0 for a memory never retrieved)."""
    a = max(int(access_count or 0), 0)
    if a == 0:
        return 0.0
    r_mean = float(relevance_accumulator or 0.0) / a
    return r_mean * math.log2(1 + a) / (1 + lam * hours(now - created_at))


def activity(access_count: int, last_access: datetime, now: datetime) -> float:
    """D(m) of docs/design.md §Lifecycle: accesses per hour since the last access."""
    idle = hours(now - last_access)
    return math.inf if idle == 0 else max(int(access_count or 0), 0) / idle


@dataclass
class Promotion:
    memory_id: int
    tier: str
    utility: float
    expires_at: datetime | None


def promotion(m: dict, now: datetime, params: dict | None = None,
              episodic_ttl_days: float = EPISODIC_TTL_DAYS) -> Promotion | None:
    """The promotion of memory m (keys: memory_id, tier, kind, access_count,
    relevance_accumulator, created_at), or None."""
    p = params or DEFAULT_PROMOTION
    rule = p.get(m["tier"])
    if not rule or (m.get("access_count") or 0) < rule["min_access"]:
        return None
    u = utility(m["relevance_accumulator"], m["access_count"], m["created_at"], now, rule["lambda"])
    if u <= rule["theta"]:
        return None
    target = rule["to"]
    if target == "semantic" and m.get("kind") in p.get("procedural_kinds", ()):
        target = "procedural"
    expires = now + timedelta(days=episodic_ttl_days) if target == "episodic" else None
    return Promotion(m["memory_id"], target, u, expires)


@dataclass
class Demotion:
    memory_id: int
    action: str  # 'expire' or 'demote'
    tier: str | None  # the new tier when demoted
    activity: float
    expires_at: datetime | None


def demotion(m: dict, now: datetime, params: dict | None = None,
             episodic_ttl_days: float = EPISODIC_TTL_DAYS) -> Demotion | None:
    """The demotion or expiry of memory m (keys: memory_id, tier, access_count,
    last_accessed_at, created_at, is_pinned), or None. Pinned memories stay."""
    rule = (params or DEFAULT_DEMOTION).get(m["tier"])
    if not rule or m.get("is_pinned") or not rule.get("phi"):
        return None
    last = m.get("last_accessed_at") or m["created_at"]
    if hours(now - last) < rule.get("min_idle_hours", 0):
        return None
    d = activity(m.get("access_count") or 0, last, now)
    if d >= rule["phi"]:
        return None
    if m["tier"] in ("session", "episodic"):
        return Demotion(m["memory_id"], "expire", None, d, None)
    return Demotion(m["memory_id"], "demote", "episodic", d, now + timedelta(days=episodic_ttl_days))


def compaction_span(rows: list[dict], context_window: int, factor: float = 2.0,
                    keep_recent: int = 2, max_span_tokens: int | None = None) -> int:
    """How many of the oldest active rows (keys: role, token_count; oldest first) to
    compact: 0 unless their tokens exceed factor × context_window; else the shortest
    prefix that brings the rest down to one context window (docs/design.md §Lifecycle), never
    ending just before a tool result (it stays with its call), never touching the
    `keep_recent` newest rows, and at most max_span_tokens (a later pass goes on)."""
    total = sum(r["token_count"] for r in rows)
    if total <= factor * context_window or len(rows) <= keep_recent + 1:
        return 0
    to_remove = total - context_window
    limit = len(rows) - keep_recent
    removed = 0
    k = 0
    while k < limit and removed < to_remove:
        if max_span_tokens is not None and k > 0 and removed + rows[k]["token_count"] > max_span_tokens \
                and rows[k]["role"] != "tool":
            break
        removed += rows[k]["token_count"]
        k += 1
    while k < limit and rows[k]["role"] == "tool":  # results stay with their call
        k += 1
    while k > 0 and k < len(rows) and rows[k]["role"] == "tool":  # hit the kept tail
        k -= 1
    return k if k >= 2 else 0


def compaction_ratio(tokens_removed: int, summary_tokens: int) -> float:
    """ρ of docs/design.md §Lifecycle: tokens taken out of the active history per summary token."""
    return tokens_removed / max(summary_tokens, 1)
