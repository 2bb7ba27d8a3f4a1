"""bench/longmemeval.py without a database: recall_any / recall_all arithmetic over a
ranking, the spread of --questions N over the types, and the haystack as it is recorded
(dates parsed, sessions in date order, empty turns left out, positional keys)."""

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import longmemeval  # bench/longmemeval.py


def test_recall_any_and_all_at_k_over_a_ranking():
    bench = longmemeval.Bench("unit")
    scores = bench.scores
    # two evidence turns, at ranks 2 and 6: some in the top 5, all only in the top 10
    first = ["x", "a", "y", "z", "w", "b", "v"]
    # one evidence turn at rank 7: none in the top 5, all in the top 10
    second = ["p", "q", "r", "s", "t", "u", "c"]
    # two evidence turns, one never ranked: some at 10, never all
    third = ["d", "m", "n"]
    for qtype, evidence, ranked in (("multi-session", {"a", "b"}, first),
                                    ("knowledge-update", {"c"}, second),
                                    ("multi-session", {"d", "e"}, third)):
        for k in longmemeval.KS:
            scores.add("mnemosyne", f"@{k}", qtype, evidence, set(ranked[:k]))
    assert bench.recall("mnemosyne", ("multi-session",)) == {
        "any@5": 1.0, "all@5": 0.0, "any@10": 1.0, "all@10": 0.5}
    assert bench.recall("mnemosyne", ("knowledge-update",)) == {
        "any@5": 0.0, "all@5": 0.0, "any@10": 1.0, "all@10": 1.0}
    assert bench.recall("mnemosyne", ("multi-session", "knowledge-update")) == {
        "any@5": round(2 / 3, 4), "all@5": 0.0, "any@10": 1.0, "all@10": round(2 / 3, 4)}
    # the evidence share of the same questions: the fraction found, averaged
    assert scores.mean("mnemosyne", "@5", ("multi-session",)) == 0.5  # 1/2 and 1/2
    assert scores.mean("mnemosyne", "@10", ("multi-session",)) == 0.75  # 2/2 and 1/2


def instance(qid: str, qtype: str) -> dict:
    return {"question_id": qid, "question_type": qtype}


def test_questions_are_spread_over_the_types():
    data = [instance(f"{t}-{i}", t) for t in reversed(longmemeval.TYPES) for i in range(3)]
    twelve = longmemeval.select(data, 12)
    assert sorted(q["question_type"] for q in twelve) == sorted(longmemeval.TYPES * 2)
    # within a type, the file's order
    assert [q["question_id"] for q in twelve if q["question_type"] == "multi-session"] == [
        "multi-session-0", "multi-session-1"]
    seven = longmemeval.select(data, 7)
    assert [q["question_type"] for q in seven] == [*longmemeval.TYPES, longmemeval.TYPES[0]]
    assert len(longmemeval.select(data, 0)) == len(data)


def test_questions_of_the_types_asked_for():
    data = [instance(f"{t}-{i}", t) for t in longmemeval.TYPES for i in range(3)]
    multi = longmemeval.select(data, 0, ("multi-session",))
    assert [q["question_id"] for q in multi] == ["multi-session-0", "multi-session-1", "multi-session-2"]
    # --questions is spread over the types asked for, not over all of them
    two = longmemeval.select(data, 4, ("multi-session", "knowledge-update"))
    assert [q["question_id"] for q in two] == ["multi-session-0", "knowledge-update-0",
                                               "multi-session-1", "knowledge-update-1"]
    with pytest.raises(ValueError, match="no questions of type multi_session"):
        longmemeval.select(data, 0, ("multi_session",))


def test_the_haystack_in_date_order_with_positional_keys():
    inst = {
        "haystack_dates": ["2023/05/21 (Sun) 10:00", "2023/05/20 (Sat) 09:30"],
        "haystack_sessions": [
            [{"role": "user", "content": "later"}, {"role": "assistant", "content": "  "}],
            [{"role": "user", "content": "I adopted a beagle.", "has_answer": True},
             {"role": "assistant", "content": "Lovely!", "has_answer": False}],
        ],
    }
    sessions = longmemeval.sessions_of(inst)
    assert [when for when, _ in sessions] == [datetime(2023, 5, 20, 9, 30, tzinfo=UTC),
                                              datetime(2023, 5, 21, 10, 0, tzinfo=UTC)]
    assert [[key for _, key, _ in turns] for _, turns in sessions] == [["1:0", "1:1"], ["0:0"]]
    assert sessions[0][1][0][0] == {"role": "user", "content": "I adopted a beagle."}
    assert longmemeval.evidence_of(inst) == {"1:0"}


def test_a_gold_answer_is_in_a_context_when_its_content_words_are():
    """conversations.answer_words / answer_in_context: the check that a context holds
    the answer, not only a memory that counts for the evidence turn. Short words match
    whole ('3' is not in '30'), longer ones as part of a word ('doctor' in
    'doctors'); a long answer (a preference rubric) and a missing one are not counted."""
    import conversations
    bundle = {"messages": [{"role": "system", "content": "[mem:1 fact] I saw 3 doctors, Dr. Patel last."},
                           {"role": "user", "content": None}]}
    assert conversations.answer_words("Dr. Patel") == ["dr", "patel"]
    assert conversations.answer_in_context(bundle, conversations.answer_words("3 doctors"))
    assert conversations.answer_in_context(bundle, conversations.answer_words("Patel"))
    assert not conversations.answer_in_context(bundle, conversations.answer_words("30 doctors"))
    assert not conversations.answer_in_context(bundle, conversations.answer_words("Dr. Smith"))
    assert conversations.answer_words(None) is None and conversations.answer_words("the") is None
    assert conversations.answer_words("The user would prefer suggestions that build on their baking success") is None
    scores = conversations.Scores()
    scores.add_answer("m", "512", bundle, "Patel")
    scores.add_answer("m", "512", bundle, "Smith")
    scores.add_answer("m", "512", bundle, None)  # not counted
    assert scores.answer_share("m", "512") == 0.5
