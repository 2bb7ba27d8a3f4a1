"""What one compile may cost a caller (issue 46): a query is searched on its first
characters, and an error message does not echo a huge value back."""

from __future__ import annotations

import pytest
from mnemo_db.compile import options, phases


def test_a_long_query_is_searched_on_its_first_characters():
    big = "where did I park? " * 500_000  # 9 MB
    assert len(phases.search_query(big, True)) == phases.QUERY_MAX_CHARS
    assert phases.query_cut(big) == {"chars": len(big.strip()), "searched_chars": phases.QUERY_MAX_CHARS}
    assert phases.query_cut("where did I park?") is None and phases.query_cut(None) is None


def test_an_option_error_does_not_echo_a_huge_value():
    with pytest.raises(options.OptionError) as e:
        options.parse_options({"budget": 10 ** 308}, "private")
    assert len(str(e.value)) < 200 and "309 characters" in str(e.value)
    with pytest.raises(options.OptionError) as e:
        options.parse_options({"channel": "x" * 1_000_000}, "private")
    assert len(str(e.value)) < 300
