"""Bounded excerpts of large tool outputs.

A tool output above the artifact threshold keeps an excerpt in the message (its head
and tail, cut at line boundaries, joined by a marker naming what was left out and
where the full bytes are) and the full bytes in mnemo.artifacts.
"""

from __future__ import annotations


def make_excerpt(text: str, max_bytes: int, artifact_id: int | None = None) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    head_budget = int(max_bytes * 0.75)
    tail_budget = max_bytes - head_budget
    head = raw[:head_budget].decode("utf-8", "ignore")
    tail = raw[-tail_budget:].decode("utf-8", "ignore")
    # Cut at line boundaries so that no half line reaches the model.
    if "\n" in head:
        head = head[: head.rfind("\n") + 1]
    if "\n" in tail:
        tail = tail[tail.find("\n") + 1:]
    omitted = len(raw) - len(head.encode()) - len(tail.encode())
    lines = text.count("\n") + 1
    where = f"artifact {artifact_id}" if artifact_id is not None else "an artifact"
    marker = (
        f"\n[... {omitted} of {len(raw)} bytes omitted ({lines} lines in all); "
        f"full output in {where}: SELECT mnemo.get_artifact(tenant, {artifact_id}) ...]\n"
    )
    return head + marker + tail
