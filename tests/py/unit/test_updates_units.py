"""compile/updates.py: how a knowledge update's line states the earlier value, and
that the line's tokens stay exact (packing.memory_block_tokens)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from mnemo_db import tokens
from mnemo_db.compile import packing
from mnemo_db.compile.updates import earlier_note, earlier_value, with_earlier
from mnemo_db.formation.updates import (
    new_value_of,
    restates_with_new_values,
    states_a_quantity,
    words,
)
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


def test_a_statement_said_again_with_another_quantity_is_a_new_value():
    old = "The user has been dedicating about an hour each day to coding exercises, which helps. (said 20 May 2023)"
    new = ("The user wants resources on algorithms. The user has been dedicating about two hours each day to "
           "coding exercises. (said 29 May 2023)")
    assert restates_with_new_values(old, new)
    assert new_value_of(words("The user leads a team of 4 engineers"), words("The user leads a team of 5 engineers"))
    assert new_value_of(words("Her best time was 27:12"), words("Her best time was 25:50"))
    # the same statement is no new value; another thing counted, another verb or
    # subject, or nothing said of what is counted, is another statement
    assert new_value_of(words("The user has 2 cats"), words("The user has 2 cats")) is False
    for a, b in (("The user has 2 cats", "The user has 3 dogs"), ("The user has 2 cats", "The user fed 2 cats"),
                 ("The user has 2 cats", "Ana has 3 cats"), ("The user ran 5 miles", "The user ran 5"),
                 ("The user is a male model", "The user is 20"), ("The user is having issues", "The user is 20"),
                 ("The user ran 5 miles", "The user ran 3")):
        assert new_value_of(words(a), words(b)) is None, (a, b)


def test_a_note_is_updated_only_when_every_statement_of_it_is_said_again():
    old = "The user has 2 cats. The user lives near the park."
    assert restates_with_new_values(old, "The user lives near the park. The user has 3 cats.")
    # one statement not said again: superseding the note would lose it
    assert not restates_with_new_values(old, "The user has 3 cats.")
    assert not restates_with_new_values(old, old), "nothing changed"
    assert states_a_quantity("The user has 3 cats.") and states_a_quantity("The user ran twenty miles.")
    assert not states_a_quantity("The user has a cat. (said 2 May 2023)"), "not the day it was said, nor 'a'"
