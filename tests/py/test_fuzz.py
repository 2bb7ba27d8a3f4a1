"""Fuzzing every API function (issue 20): ~2,000 inputs drawn by Hypothesis
(tests/py/fuzz_api.py) over the functions read from the catalog. Every call must
succeed or raise a project SQLSTATE (class MN), never anything else (38000 from
PL/Python, 23514 from a constraint, 22003 from a cast, a 'plpy.SPIError:' prefix), and
afterwards the fuzzed tenants' data must pass the consistency checks
(tests/py/consistency.py). bench/trust/fuzz.py runs the same with >= 100k inputs.
"""

from __future__ import annotations

import os

import psycopg
import pytest
from consistency import violations
from fuzz_api import Fuzzer, missing_strategies
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:55432/mnemo")
EXAMPLES = int(os.environ.get("MNEMO_FUZZ_EXAMPLES", "2000"))


@pytest.fixture()
def conn():
    with psycopg.connect(DSN, autocommit=True) as c:
        yield c


def test_every_api_function_has_a_strategy(conn):
    assert missing_strategies(conn) == []


def run(fuzzer: Fuzzer, examples: int, seed: int | None = None) -> None:
    """Draws `examples` calls (function, then its arguments) and runs each."""
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=seed is not None)
    @given(data=st.data())
    def one(data):
        name = data.draw(st.sampled_from(fuzzer.names), label="function")
        fuzzer.call(name, data.draw(fuzzer.strategy(name), label="arguments"))
    one()


def test_fuzzed_calls_end_in_success_or_a_project_error(conn):
    fuzzer = Fuzzer(conn)
    run(fuzzer, EXAMPLES)
    figures = fuzzer.figures()
    print(figures)
    assert figures["inputs"] >= EXAMPLES * 0.9
    assert [(f.function, f.sqlstate, f.message, f.args) for f in fuzzer.findings[:10]] == []
    # the write paths were exercised, not only refused
    for name in ("record_message", "remember", "start_session", "compile_context"):
        assert fuzzer.counts[name]["ok"] > 0, name
    assert violations(conn, fuzzer.pool.prefix.replace("_", r"\_") + "%") == {}
