"""Words of the data model that several modules rank or weigh, each defined once.

Sensitivity: the values of mnemo.messages.sensitivity and mnemo.memories.sensitivity
(their CHECK, migration 0001), least to most sensitive. Provenance authority: the
weight pi(p) of docs/design.md §Scoring, which compile_context's score multiplies with a
memory's confidence, and whose order formation resolves conflicts by (docs/design.md §Tiers:
user_stated > correction > ... > system_inferred).
"""

from __future__ import annotations

from collections.abc import Iterable

SENSITIVITIES = ("none", "low", "high", "secret")
SENSITIVITY_RANK = {s: i for i, s in enumerate(SENSITIVITIES)}

AUTHORITY = {
    "user_stated": 1.0, "correction": 0.95, "instruction": 0.90, "preference": 0.85,
    "fact": 0.80, "tool_output": 0.70, "system_inferred": 0.60,
}
# Why formation superseded a memory when a newer statement gave its subject another
# value (memories.metadata superseded_reason): a knowledge update, whose earlier value
# compile_context states beside the new one (compile/updates.py). Not a correction
# (the earlier value was wrong) nor a file re-read.
UPDATED = "contradicted by a newer statement"

# A provenance the table does not name is trusted no more than an inference.
UNKNOWN_PROVENANCE_AUTHORITY = AUTHORITY["system_inferred"]


def most_sensitive(values: Iterable[str]) -> str:
    """The most sensitive of the values; 'none' when there are none."""
    return max(values, key=SENSITIVITY_RANK.__getitem__, default="none")


def provenance_authority(provenance_type: str | None) -> float:
    return AUTHORITY.get(provenance_type, UNKNOWN_PROVENANCE_AUTHORITY)
