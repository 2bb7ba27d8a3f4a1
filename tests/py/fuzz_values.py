"""The values fuzz_api.py's strategies draw from: JSON written as text (so that nesting
past any client's json module reaches the server), words that form memories, and
timestamps and numbers at and past PostgreSQL's extremes."""

from __future__ import annotations

import json
from datetime import datetime

from hypothesis import strategies as st


class JSONText(str):
    """A JSON argument, already serialised (sent as text, cast to jsonb)."""


def dumps(value) -> JSONText:
    return JSONText(json.dumps(value, ensure_ascii=False))


# Text that PostgreSQL's text type can hold (no NUL, no lone surrogates).
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
WORDS = ["I", "live", "in", "Paris", "my", "name", "is", "Ada", "we", "decided", "to", "use", "PostgreSQL",
         "because", "it", "is", "one", "system", "password", "hunter2", "the", "of", "a", "by", "Friday",
         "deploy", "error", "file", "/etc/hosts", "Bob", "prefers", "tea", "TODO", "instead", "of", "MySQL"]
prose = st.lists(st.sampled_from(WORDS), min_size=1, max_size=25).map(" ".join)
junk_text = st.text(CHARS, max_size=40)
some_text = st.one_of(prose, junk_text, st.sampled_from(["", " ", "\t\n", "é" * 3, "🙂", "ℌ𝔢𝔩𝔩𝔬",
                                                          "a" * 5000, "'; DROP TABLE x; --"]))

# Timestamps as PostgreSQL literals: ordinary, at the ends of what PostgreSQL, Python
# and the API hold, and past them.
EXTREME_TIMESTAMPS = ["infinity", "-infinity", "294276-12-31 23:59:59+00", "4713-01-01 00:00:00+00 BC",
                      "0001-01-01 00:00:00+00", "0001-01-01 00:00:00+14", "0002-01-01 00:00:00+00",
                      "9998-12-31 23:59:59+00", "9999-12-31 23:59:59.999999+00", "10000-01-01 00:00:00+00",
                      "1970-01-01 00:00:00+00", "epoch", "2038-01-19 03:14:08+00", "1900-02-28 12:00:00-12"]
timestamps = st.one_of(
    st.sampled_from(EXTREME_TIMESTAMPS),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(lambda d: d.isoformat() + "+00"),
)
# In JSON (options): the literals above and strings that are no timestamp at all.
json_timestamps = st.one_of(timestamps, junk_text, st.sampled_from(["", "now", "tomorrow", "2024-13-45",
                                                                     "1e400", "yesterday 25:00"]))

NUMBER_TEXTS = ["0", "-0", "1", "-1", "1.5", "1e30", "-1e30", "1e400", "-1e400", "1E-400", "0.1e1",
                "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                "2147483648", "123456789012345678901234567890123456789", "1" + "0" * 300]
json_number_text = st.one_of(st.sampled_from(NUMBER_TEXTS), st.integers().map(str),
                             st.floats(allow_nan=False, allow_infinity=False).map(repr))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), some_text,
                         st.text(max_size=8))  # (may hold NUL: refused by jsonb's input)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(["role", "content", "type", "text", "id"]),
                                                      st.text(CHARS, max_size=6)), inner, max_size=4)),
    max_leaves=12)


def deep(depth: int, leaf: str = "1", kind: str = "[") -> JSONText:
    if kind == "[":
        return JSONText("[" * depth + leaf + "]" * depth)
    return JSONText('{"a": ' * depth + leaf + "}" * depth)


deep_json = st.builds(deep, st.integers(1, 1500), st.sampled_from(["1", '"password hunter2"', "{}"]),
                      st.sampled_from(["[", "{"]))


def json_object_text(known: dict[str, st.SearchStrategy], required: tuple[str, ...] = ()) -> st.SearchStrategy:
    """A JSON object as text: the `required` keys and some of the other `known` ones
    with plausible values; one value in ten anything at all (any JSON, nesting
    1-1500 deep, a number literal beyond any type), and one object in ten with a key
    the function does not know."""
    optional = sorted(set(known) - set(required))

    @st.composite
    def build(draw):
        keys = list(required) + (draw(st.lists(st.sampled_from(optional), unique=True, max_size=len(optional)))
                                 if optional else [])
        parts = []
        for k in keys:
            wild = draw(st.integers(0, 9)) == 0
            v = draw(st.one_of(json_values.map(dumps), deep_json, json_number_text.map(JSONText))
                     if wild else known[k].map(dumps))
            parts.append(f"{json.dumps(k)}: {v}")
        if draw(st.integers(0, 9)) == 0:
            parts.append(f"{json.dumps(draw(junk_text))}: {dumps(draw(json_values))}")
        return JSONText("{" + ", ".join(parts) + "}")
    return build()


int32 = st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 1, 255, 256, 10_000_000, 10_000_001]))
int64 = st.integers(-2**63, 2**63 - 1)
