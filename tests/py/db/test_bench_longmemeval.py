"""bench/longmemeval.py's core on two tiny instances in the LongMemEval format, recorded,
embedded, formed into memories and compiled for real: an evidence turn that is a
tenant's only turn is in the context at every budget and first in every ranking; the
last turns miss an early evidence turn at a small budget and hold it at a large one;
turns are recorded at their sessions' dates, in date order."""

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from conftest import DSN

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import longmemeval  # bench/longmemeval.py
from conversations import BUDGETS, jobs_paused  # bench/conversations.py

FILLER = ("For a shade garden, start with hostas, ferns and astilbe; water them deeply once a week, "
          "mulch to keep the roots cool, divide crowded clumps in early spring and feed them lightly. ")

ONLY_TURN = {
    "question_id": "only", "question_type": "single-session-user",
    "question": "What am I allergic to?", "answer": "peanuts",
    "question_date": "2023/06/01 (Thu) 12:00",
    "haystack_session_ids": ["s1"], "haystack_dates": ["2023/05/30 (Tue) 08:15"],
    "haystack_sessions": [[{"role": "user", "content": "I'm allergic to peanuts, so keep them out of recipes.",
                            "has_answer": True}]],
    "answer_session_ids": ["s1"],
}

# Sessions out of date order in the file (as in some LongMemEval instances); one
# evidence turn in the earliest session, one the very last turn; ~2k tokens of
# filler between them, 9 turns in all.
TWO_SESSIONS = {
    "question_id": "dog", "question_type": "multi-session",
    "question": "What is the name of the dog I adopted, and how much does he weigh?",
    "answer": "Biscuit, 9 kg", "question_date": "2023/05/23 (Tue) 18:00",
    "haystack_session_ids": ["later", "earliest", "last"],
    "haystack_dates": ["2023/05/21 (Sun) 10:00", "2023/05/20 (Sat) 09:30", "2023/05/22 (Mon) 11:00"],
    "haystack_sessions": [
        [{"role": "user", "content": "How do I plan a shade garden?"},
         {"role": "assistant", "content": FILLER * 6},
         {"role": "user", "content": "And which flowers?"},
         {"role": "assistant", "content": FILLER * 5}],
        [{"role": "user", "content": "I adopted a beagle named Biscuit from the shelter.", "has_answer": True},
         {"role": "assistant", "content": "Congratulations! Beagles are curious and friendly."}],
        [{"role": "user", "content": "Which ferns are easy?"},
         {"role": "assistant", "content": FILLER * 5},
         {"role": "user", "content": "Biscuit had his first vet visit today: he weighs 9 kg.", "has_answer": True}],
    ],
    "answer_session_ids": ["earliest", "last"],
}


def test_the_bench_core_on_tiny_instances(db):
    bench = longmemeval.Bench(f"lmetest_{uuid.uuid4().hex[:6]}")
    with psycopg.connect(DSN, autocommit=True) as conn, jobs_paused(conn):
        for inst in (ONLY_TURN, TWO_SESSIONS):
            bench.run(db, conn, inst)
        rows = conn.execute(
            "SELECT m.metadata->>'lme_turn', m.created_at, s.started_at FROM mnemo.messages AS m"
            " JOIN mnemo.sessions AS s USING (tenant_id, session_id)"
            " WHERE m.tenant_id = %s ORDER BY m.created_at", (bench.tenant(TWO_SESSIONS),)).fetchall()
        question_sessions = conn.execute(
            "SELECT started_at FROM mnemo.sessions WHERE tenant_id = %s AND turn_count = 0",
            (bench.tenant(TWO_SESSIONS),)).fetchall()
    f = bench.figures()
    json.dumps(f)  # the JSON line

    assert f["questions"] == 2 and f["per_type"] == {"single-session-user": 1, "multi-session": 1}
    # turns at their session's date, 30 s apart, sessions in date order
    earliest = datetime(2023, 5, 20, 9, 30, tzinfo=UTC)
    assert [r[0] for r in rows] == ["1:0", "1:1", "0:0", "0:1", "0:2", "0:3", "2:0", "2:1", "2:2"]
    assert rows[0][1] == rows[0][2] == earliest and rows[1][1] == earliest + timedelta(seconds=30)
    assert rows[-1][1] == datetime(2023, 5, 22, 11, 1, tzinfo=UTC)
    # both questions asked at the question's date (turns alone, then with memories)
    assert [r[0] for r in question_sessions] == [datetime(2023, 5, 23, 18, 0, tzinfo=UTC)] * 2

    by_type = f["by_type"]
    only = by_type["single-session-user"]
    for phase in ("turns", "with_memories"):
        assert only["evidence_share"][phase] == {str(b): 1.0 for b in BUDGETS}
    assert all(v == 1.0 for m in longmemeval.RANKINGS for v in only["recall"][m].values())

    # 9 turns: every ranking of them holds both evidence turns in its top 10
    dog = by_type["multi-session"]
    for m in longmemeval.RANKINGS:
        assert dog["recall"][m]["all@10"] == 1.0
    # everything fits in 8k, and the last turns hold only the latest evidence at 512
    assert dog["evidence_share"]["turns"]["8192"] == dog["evidence_share"]["with_memories"]["8192"] == 1.0
    assert f["evidence_share"]["last_n"]["512"] == (1.0 + 0.5) / 2
    assert f["evidence_share"]["last_n"]["8192"] == 1.0
    assert f["all_evidence"]["turns"]["8192"] == 1.0
    # the whole window holds every evidence turn of so small a history; the short
    # probe has no evidence to hold
    window = f["block_at_128k_window"]
    assert window["question"]["evidence"] == 1.0 and "evidence" not in window["short"]

    assert f["extraction"]["failed_jobs"] == 0
    assert f["memories_per_question"] == f["extraction"]["memories"] / 2
    assert f["latency_ms"]["turns"]["compiles"] == f["latency_ms"]["with_memories"]["compiles"] == 2 * len(BUDGETS)
    assert f["ingest"]["turns"] == 10

    # the bench leaves pg_cron's job runner as it found it: paused for the test session
    # (it once resumed it, and pg_cron then ran jobs beside every later test)
    with psycopg.connect(DSN) as conn:
        assert conn.execute("SELECT bool_or(active) FROM cron.job WHERE jobname = 'mnemo-run-jobs'"
                            ).fetchone()[0] is not True
