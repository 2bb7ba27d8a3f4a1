"""Knowledge updates in the memory block: a memory that replaced an earlier value of
the same thing (formation superseded that one: vocabulary.UPDATED) is sent with the
latest value first and then the earlier one with the day it stopped holding,
"User runs 5k in 24 min. (earlier, until 2023-05-02: 27 min)". A question about the
current value reads the first; one about the change, or what it was before, reads both
on one line, where the superseded memory itself is no candidate (compile_context's pool
leaves superseded memories out).

CANDIDATE_ROWS reads the earlier value (statements.py): the newest one the channel
may see, as the compile's time knew it. Its source turns are added to the memory's
derived_from, so the turn that said it stays reachable by id (memory_restore) and a
note whose turns are all sent whole still leaves the block (bundle.repeats_block)."""

from __future__ import annotations

from datetime import datetime

from ..timestamps import said_day_at_end

# A knowledge update (formation superseded the memory it replaced: its
# superseded_reason, vocabulary.UPDATED): the newest earlier value the channel may
# see ($5), as the compile's time ($6, as_of) knew it, by the (tenant_id,
# superseded_by) index. Its value is its fact's object where the two facts share a
# predicate and the object is a thing of its own (an entity: "Berlin", not a
# sentence), else its text; updates.with_earlier writes it after the memory's.
EARLIER_VALUE = """
LEFT JOIN LATERAL (
    SELECT CASE WHEN ef.object_entity_id IS NOT NULL AND ef.predicate = nf.predicate THEN ef.object
            ELSE em.content_full END AS text,
        em.valid_to, em.source_message_ids
    FROM mnemo.memories AS em
    LEFT JOIN mnemo.memory_facts AS ef ON ef.tenant_id = $1 AND ef.memory_id = em.memory_id
    LEFT JOIN mnemo.memory_facts AS nf ON nf.tenant_id = $1 AND nf.memory_id = mm.memory_id
    WHERE em.tenant_id = $1 AND em.superseded_by = mm.memory_id AND em.sensitivity = ANY($5)
        AND em.metadata ->> 'superseded_reason' = $7
        AND CASE WHEN $6::timestamptz IS NULL THEN em.is_active ELSE em.created_at <= $6 END
    ORDER BY em.valid_to DESC NULLS LAST, em.memory_id DESC
    LIMIT 1
) AS e ON true"""


def earlier_value(text: str) -> str:
    """An earlier value as the line states it: one line (its whitespace collapsed: the
    block's lines must not break, packing.memory_block_tokens), without the day it was
    said (timestamps.said_suffix: the note gives the day it stopped holding) or the
    full stop that closes it."""
    said = said_day_at_end(text)
    if said is not None:
        text = text[:said[0]]
    return " ".join(text.split()).rstrip(" .")


def earlier_note(text: str, until: datetime | None) -> str:
    """What follows the latest value: " (earlier, until YYYY-MM-DD: <value>)" (without
    a day when none is known); '' for an empty value."""
    value = earlier_value(text)
    if not value:
        return ""
    return f" (earlier, until {until.date().isoformat()}: {value})" if until else f" (earlier: {value})"


def with_earlier(c: dict) -> dict:
    """A candidate with its earlier value (c["earlier"]: (text, until) from
    rows.candidates) after its text; its full text's stored token count is then
    counted again (the stored line_tokens are of the memory's own text), its lower
    levels', which leave the note out, kept."""
    earlier = c.get("earlier")
    note = earlier_note(*earlier) if earlier else ""
    if not note:
        return c
    stored = c.get("text_tokens")
    return {**c, "text": c["text"].rstrip() + note, "text_tokens": (None, *stored[1:]) if stored else None}
