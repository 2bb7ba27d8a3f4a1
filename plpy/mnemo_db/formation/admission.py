"""Admission control for memory candidates (docs/design.md §Tiers, after A-MAC).

    S(m) = w_T * TypePrior + w_N * Novelty + w_U * Utility + w_R * Recency

TypePrior ranks kinds (a decision is worth more than a tool listing); Novelty is
1 - the best cosine to an existing memory of the tenant; Utility estimates future
use from the content (identifiers, names, numbers, rationale; zero for routine
command output, acknowledgements and notes); Recency decays with the age of the source
message. Below the threshold a candidate stays only in the history. Every decision
is recorded in mnemo.admission_log with its four scores.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

TYPE_PRIOR = {
    "decision": 1.0, "instruction": 0.9, "preference": 0.85, "correction": 0.9, "fact": 0.8,
    "task": 0.8, "open_loop": 0.75, "error_context": 0.7, "file_context": 0.6, "plan": 0.7,
    "tool_result": 0.3, "note": 0.1,
}
WEIGHTS = {"type": 0.35, "novelty": 0.20, "utility": 0.30, "recency": 0.15}
THRESHOLD = 0.5
RECENCY_HALF_LIFE_DAYS = 30.0

_SIGNAL = re.compile(r"\b[A-Z][a-z]+\b|\d|[\w-]+/[\w./-]+|\b\w+\(\)|\b[a-z]+_[a-z_]+\b|`")
_WORD = re.compile(r"[A-Za-z0-9']+")


def utility(c: dict) -> float:
    """Estimated future usefulness in [0, 1] (offline; the helper LLM may supply one).
    A `note` is a turn in which the extractor found nothing a person would write down
    (a question, a reaction, small talk): it stays in the history, where retrieval
    still finds it, and is worth nothing more as a memory."""
    if c.get("routine") or c.get("filler") or c["kind"] == "note":
        return 0.0
    if c.get("utility") is not None:
        return max(0.0, min(1.0, float(c["utility"])))
    text = c["content"]
    words = _WORD.findall(text)
    if not words:
        return 0.0
    u = min(len(words) / 25.0, 1.0) * 0.4 + min(len(_SIGNAL.findall(text)) / 6.0, 1.0) * 0.4
    if c.get("rationale"):
        u += 0.3
    if c.get("alternatives"):
        u += 0.1
    if c.get("due_at"):
        u += 0.2
    u = max(u, c.get("utility_hint") or 0.0)
    return round(min(u, 1.0), 4)


def recency(said: datetime | None, now: datetime) -> float:
    if said is None:
        return 1.0
    days = max((now - said).total_seconds() / 86400.0, 0.0)
    return math.exp(-math.log(2) * days / RECENCY_HALF_LIFE_DAYS)


def score(c: dict, best_cosine: float | None, now: datetime, threshold: float = THRESHOLD,
          weights: dict | None = None) -> dict:
    """The four factors, the total and the decision for one candidate."""
    w = weights or WEIGHTS
    t = TYPE_PRIOR.get(c["kind"], 0.3)
    n = 1.0 if best_cosine is None else max(0.0, min(1.0, 1.0 - best_cosine)) / 0.15
    n = min(n, 1.0)
    u = utility(c)
    r = recency(c.get("valid_from"), now)
    total = w["type"] * t + w["novelty"] * n + w["utility"] * u + w["recency"] * r
    return {"type": round(t, 4), "novelty": round(n, 4), "utility": round(u, 4),
            "recency": round(r, 4), "total": round(total, 4), "threshold": threshold,
            "admitted": total >= threshold}
