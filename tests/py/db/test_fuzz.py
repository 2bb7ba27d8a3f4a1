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
from fuzz_api import Fuzzer, drive, missing_strategies

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:55432/mnemo")
EXAMPLES = int(os.environ.get("MNEMO_FUZZ_EXAMPLES", "2000"))


@pytest.fixture()
def conn():
    with psycopg.connect(DSN, autocommit=True) as c:
        yield c


def test_every_api_function_has_a_strategy(conn):
    assert missing_strategies(conn) == []


# Inputs the fuzzer found raising non-project errors, each kept as a regression
# ({T}: a fuzzed tenant, {S}: one of its sessions).
REGRESSIONS = [
    # TypeError: unhashable type 'list' (parse_options)
    ("compile_context", {"p_tenant_id": "{T}", "p_session_id": "{S}", "p_options": '{"task_type": [{}]}'}),
    ("compile_context_bundle", {"p_tenant_id": "{T}", "p_session_id": "{S}", "p_options": '{"channel": []}'}),
    # a tenant config of another shape: every later compile failed (AttributeError)
    ("create_tenant", {"p_tenant_id": "{T}_cfg", "p_config": '{"scoring": [1]}'}),
    ("create_tenant", {"p_tenant_id": "{T}_cfg", "p_config": '{"redaction": {"enabled": "maybe"}}'}),
    # 22009 time zone displacement out of range: "-693"
    ("forget", {"p_tenant_id": "{T}", "p_filter": '{"created_after": -693}'}),
    # 22003 (a real column's underflow)
    ("remember", {"p_tenant_id": "{T}", "p_content": "x", "p_options": '{"confidence": 2.1457467271555025e-234}'}),
    # the examples (RecursionError, TypeError, 22003, 23514)
    ("compile_context", {"p_tenant_id": "{T}", "p_session_id": "{S}",
                         "p_options": '{"a": ' * 1200 + "1" + "}" * 1200}),
    ("remember", {"p_tenant_id": "{T}", "p_content": "x", "p_options": '{"source_message_ids": [{}]}'}),
    ("remember", {"p_tenant_id": "{T}", "p_content": "x", "p_options": '{"source_message_ids": [1e30]}'}),
    ("record_event", {"p_tenant_id": "{T}", "p_session_id": "{S}", "p_kind": "task_update",
                      "p_content": '{"title": "x"}', "p_sensitivity": "bogus"}),
    ("record_message", {"p_tenant_id": "{T}", "p_session_id": "{S}", "p_message": '{"role": "user", "content": "x"}',
                        "p_created_at": "4713-01-01 00:00:00+00 BC"}),
]


@pytest.fixture(scope="module")
def one_tenant_fuzzer():
    with psycopg.connect(DSN, autocommit=True) as c:
        yield Fuzzer(c, tenants=1, sessions=1)


@pytest.mark.parametrize("name, args", REGRESSIONS)
def test_regressions_end_in_success_or_a_project_error(one_tenant_fuzzer, name, args):
    fuzzer = one_tenant_fuzzer
    t = fuzzer.pool.tenants[0]
    args = {k: v.replace("{T}", t).replace("{S}", fuzzer.pool.sessions[t][0]) if isinstance(v, str) else v
            for k, v in args.items()}
    assert fuzzer.call(name, args) in ("ok", "project"), fuzzer.findings
    # and the tenant still compiles
    assert fuzzer.call("compile_context", {"p_tenant_id": t, "p_session_id": fuzzer.pool.sessions[t][0]}) == "ok"


def test_fuzzed_calls_end_in_success_or_a_project_error(conn):
    fuzzer = Fuzzer(conn)
    drive(fuzzer, EXAMPLES)
    figures = fuzzer.figures()
    print(figures)
    assert figures["inputs"] >= EXAMPLES * 0.9
    assert [(f.function, f.sqlstate, f.message, f.args) for f in fuzzer.findings[:10]] == []
    # the write paths were exercised, not only refused
    for name in ("record_message", "remember", "start_session", "compile_context"):
        assert fuzzer.counts[name]["ok"] > 0, name
    assert violations(conn, fuzzer.pool.like) == {}
    fuzzer.drop_queued_jobs()
