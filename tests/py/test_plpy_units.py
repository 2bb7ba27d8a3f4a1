"""Unit tests of the in-database package plpy/mnemo_db, outside the server."""

from __future__ import annotations

from mnemo_db import excerpt, tokens


def test_count_known_strings():
    # o200k_base ids for these strings are fixed by the encoding
    assert tokens.count("hello world") == 2
    assert tokens.count("") == 0 and tokens.count(None) == 0


def test_count_message_parts_and_tool_calls():
    plain = tokens.count_message({"role": "user", "content": "hello world"})
    assert plain == tokens.MESSAGE_OVERHEAD + 2
    parts = tokens.count_message({"role": "user", "content": [
        {"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}]})
    assert parts == plain + tokens.NON_TEXT_PART_TOKENS
    call = tokens.count_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]})
    assert call > tokens.MESSAGE_OVERHEAD + 5


def test_excerpt_small_text_is_unchanged():
    assert excerpt.make_excerpt("short", 100, 1) == "short"


def test_excerpt_keeps_whole_lines_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(10000))
    out = excerpt.make_excerpt(text, 1000, 7)
    head, _, rest = out.partition("\n[... ")
    marker, _, tail = rest.partition("]\n")
    assert head.startswith("line 0\n") and all(ln.startswith("line ") for ln in head.splitlines())
    assert all(ln.startswith("line ") for ln in tail.splitlines()) and out.endswith("line 9999\n")
    assert "artifact 7" in marker
    assert len(out.encode()) < 1000 + 200


def test_excerpt_never_splits_multibyte_characters():
    text = "é" * 100000
    out = excerpt.make_excerpt(text, 1001, 1)
    out.encode("utf-8")  # valid UTF-8
    assert "omitted" in out


def test_stickiness_boosts_an_item_at_its_previous_fidelity_and_below_only():
    """The next compile must not upgrade an item of the previous context (it would push
    others out): only its previous fidelity and lower ones are worth more."""
    from mnemo_db.context import Item, Option, _value, pack_items

    def item(source, value, sticky=None):
        opts = [Option("full", source, 100), Option("detail", source, 40), Option("stub", source, 10)]
        return Item(source=source, kind="fact", score=value, options=opts, value=value,
                    sticky_from=sticky, stickiness=0.10)

    x = item("mem:1", 1.0, sticky=1)  # was sent at detail
    assert _value(x, 1) == _value(item("mem:1", 1.0), 1) * 1.10
    assert _value(x, 2) == _value(item("mem:1", 1.0), 2) * 1.10
    assert _value(x, 0) == _value(item("mem:1", 1.0), 0)  # full: no boost
    # a previous context packed again with its fidelities marked: the same choice
    first = [item("mem:1", 1.0), item("mem:2", 0.9), item("mem:3", 0.5)]
    pack_items(first, 120)
    chosen = {i.source: i.chosen for i in first}
    again = [item(i.source, i.value, sticky=i.chosen) for i in first]
    pack_items(again, 120)
    assert {i.source: i.chosen for i in again} == chosen
