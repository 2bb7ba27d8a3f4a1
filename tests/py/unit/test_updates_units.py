"""compile/updates.py: how a knowledge update's line states the earlier value, and
that the line's tokens stay exact (packing.memory_block_tokens)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from mnemo_db import tokens
from mnemo_db.compile import packing
from mnemo_db.compile.updates import earlier_note, earlier_value, with_earlier
from mnemo_db.timestamps import said_suffix

UNTIL = datetime(2023, 5, 2, 14, 30, tzinfo=UTC)


def test_the_earlier_value_without_its_said_day_and_closing_stop():
    said = said_suffix(datetime(2023, 3, 1, tzinfo=UTC))
    assert earlier_value(f"The user runs 5k in 27 min.{said}") == "The user runs 5k in 27 min"
    assert earlier_value("27 min") == "27 min"
    # one line whatever it held: the block's lines never break
    assert earlier_value("first line\n\nsecond\tline. ") == "first line second line"


def test_the_note_gives_the_day_the_earlier_value_stopped_holding():
    assert earlier_note("27 min", UNTIL) == " (earlier, until 2023-05-02: 27 min)"
    assert earlier_note("27 min", None) == " (earlier: 27 min)"
    assert earlier_note(" . ", UNTIL) == ""


def test_with_earlier_puts_the_latest_value_first_and_recounts_only_the_full_text():
    c = {"source": "mem:7", "kind": "fact", "text": "The user now runs 5k in 24 min. ",
         "text_tokens": (9, 6, 4, 2), "earlier": ("27 min", UNTIL)}
    out = with_earlier(c)
    assert out["text"] == "The user now runs 5k in 24 min. (earlier, until 2023-05-02: 27 min)"
    assert out["text_tokens"] == (None, 6, 4, 2), "the stored full count is of the text alone"
    assert c["text"].endswith("min. "), "the candidate itself is left as it was"
    # nothing to add: the candidate as it is
    for plain in ({**c, "earlier": None}, {k: v for k, v in c.items() if k != "earlier"}, {**c, "earlier": ("", UNTIL)}):
        assert with_earlier(plain) is plain
    assert with_earlier({**c, "text_tokens": None})["text_tokens"] is None


@given(st.text(max_size=60), st.text(max_size=60), st.none() | st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1)))
def test_an_update_line_is_counted_exactly(latest, earlier, until):
    # the full line is counted again (its stored count lacks the note), so the block's
    # tokens stay the sum of its lines whatever either value holds
    c = with_earlier({"source": "mem:3", "kind": "fact", "text": latest, "text_tokens": (tokens.count_line_text(latest), None,
                      None, None), "earlier": (earlier, until and until.replace(tzinfo=UTC))})
    (full,), _ = packing.full_options([c])
    assert full.tokens == packing.line_tokens(full.text)
    item = packing.Item(source="mem:3", kind="fact", score=1.0, options=[full], created_at=UNTIL, chosen=0)
    assert packing.memory_block_tokens([item]) == tokens.count_message(packing.memory_block([item]))
