"""What a user says about themselves is always caught, an agent's next step never becomes
a decision (issue 42): plpy/mnemo_db/formation/personal.py alone, and through the
offline extractor, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from mnemo_db.formation import admission, extract, personal

SAID = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def formed(text: str, role: str = "user") -> list[tuple[str, str | None, str]]:
    """(kind, predicate, content) of the admitted candidates of one turn: a user's to an
    AI assistant, or the AI's own in an agent's work."""
    turns = [("user", text), ("assistant", "Noted.")] if role == "user" else \
        [("user", "Please fix the failing test in utils.py."), ("assistant", text)]
    msgs = [{"message_id": i + 1, "role": r, "name": None, "content": t, "created_at": SAID, "session_id": "s"}
            for i, (r, t) in enumerate(turns)]
    own = 1 if role == "user" else 2
    return [(c["kind"], c.get("predicate"), c["content"]) for c in extract.extract(msgs)
            if own in c["source_message_ids"] and admission.score(c, None, SAID)["admitted"]]


# ------------------------------------------------------------------ personal.read
@pytest.mark.parametrize("text, category, relation, negated, hedged", [
    ("I'm allergic to peanuts.", "health", None, False, False),
    ("I think I might be allergic to cats.", "health", None, False, True),
    ("I don't eat meat.", "diet", None, True, False),
    ("I'm vegan.", "diet", None, False, False),
    ("My sister lives in Oslo.", "family", "sister", False, False),
    ("My son is allergic to eggs.", "health", "son", False, False),
    ("I'm divorced.", "biography", None, False, False),
    ("I grew up in Lagos.", "biography", None, False, False),
    ("I'm not a native English speaker.", "biography", None, True, False),
    ("I'm not a big fan of horror movies.", "preference", None, True, False),
    ("Coffee is my favourite drink.", "preference", None, False, False),
    ("I usually go to bed around 11.", "habit", None, False, False),
    ("Yesterday, I went to a concert with Bo.", "experience", None, False, False),
    # a capital U is not chat's "u": an initial or a title addresses no one
    ("I moved to the U.S. last year.", "biography", None, False, False),
    ("I finished The Hate U Give.", "experience", None, False, False),
])
def test_personal_statements_are_read_with_what_they_are_about(text, category, relation, negated, hedged):
    got = personal.read(text)
    assert got == personal.Personal(category, relation, negated, hedged), got


@pytest.mark.parametrize("text", [
    "I'm so happy for you!", "I love your painting.", "I think so.", "I see what you mean.",
    "I have a question about Python decorators.", "I'm back.", "I'm just curious how this works.",
    "What's the capital of Australia?", "I wonder why the sky is blue.", "Kindness matters so much.",
    "Do you have any pets?", "I'm so proud of my own work.", "My own journey of self-discovery.",
    "I'm glad to hear that nobody was hurt.", "I always feel so peaceful there.", "I miss u so much.",
])
def test_what_is_not_about_the_speaker_is_not_personal(text):
    assert personal.read(text) is None


def test_a_tag_question_leaves_the_statement():
    assert personal.statement_of("I had an accident near some roses - can you believe it?") == \
        "I had an accident near some roses"
    assert personal.read("I had an accident near some roses - can you believe it?").category == "experience"


def test_hedges_come_off_and_are_remembered():
    assert personal.unhedge("I think I prefer tea.") == ("I prefer tea.", True)
    assert personal.unhedge("Probably I prefer window seats.") == ("I prefer window seats.", True)
    assert personal.unhedge("I prefer tea.") == ("I prefer tea.", False)


# ------------------------------------------------------------------ through the extractor
@pytest.mark.parametrize("text, kind, predicate, content", [
    ("I'm allergic to peanuts.", "fact", "health", "The user is allergic to peanuts."),
    ("I don't eat meat.", "fact", "diet", "The user doesn't eat meat."),
    ("My sister lives in Oslo.", "fact", "family", "The user's sister lives in Oslo."),
    ("I'm 34.", "fact", "biography", "The user is 34."),
    ("I think I prefer tea.", "preference", "likes", "The user thinks the user prefers tea."),
    ("I'm not a big fan of horror movies.", "preference", "dislikes", "The user is not a big fan of horror movies."),
    ("I don't like spicy food.", "preference", "dislikes", "The user doesn't like spicy food."),
])
def test_a_short_statement_about_oneself_forms_a_memory(text, kind, predicate, content):
    got = formed(text)
    assert len(got) == 1, got
    assert got[0][:2] == (kind, predicate)
    assert got[0][2].startswith(content), got


def test_a_hedge_lowers_confidence_and_a_third_party_is_the_subject():
    msgs = [{"message_id": 1, "role": "user", "name": None, "content": text, "created_at": SAID, "session_id": "s"}
            for text in ("I might be allergic to cats.",)]
    c = next(c for c in extract.extract(msgs) if c["kind"] != "note")
    assert (c["predicate"], c["hedged"], c["confidence"]) == ("health", True, pytest.approx(0.6))
    msgs[0]["content"] = "My brother works at Google."
    c = next(c for c in extract.extract(msgs) if c["kind"] != "note")
    assert c["subject"] == "The user's brother"


@pytest.mark.parametrize("text", [
    "Don't use emojis in your replies.", "Keep your answers short, please.", "Stop apologizing all the time.",
    "I'd like you to always cite your sources.", "Can you always reply in British English from now on?",
    "When you write code for me, use TypeScript.", "Never use bullet points when you write to me.",
])
def test_standing_instructions_without_a_word_of_time_are_instructions(text):
    assert [k for k, _, _ in formed(text)] == ["instruction"], formed(text)


@pytest.mark.parametrize("text", [
    "Let's use find_file to see where it is.", "Now let's run the tests.", "Let me search for the function definition.",
    "I'll create a script to reproduce the issue.", "First, let's check the current directory.",
    "We should run the reproduction script again to confirm the fix.", "The tests pass now, so let's submit.",
    "Let's use grep to find all occurrences of the function.",
])
def test_an_agents_next_step_forms_nothing(text):
    assert personal.procedure(text)
    assert formed(text, role="assistant") == [], formed(text, role="assistant")


@pytest.mark.parametrize("text, kind", [
    ("Let's use PostgreSQL for the job queue because we need transactions.", "decision"),
    ("We decided to go with Redis instead of Memcached.", "decision"),
    ("I'll send the invoice to Dana by Friday.", "task"),
])
def test_decisions_and_commitments_are_not_procedure(text, kind):
    assert not personal.procedure(text)
    assert [k for k, _, _ in formed(text)] == [kind]


@pytest.mark.parametrize("text", ["Thanks, that helps!", "What's the capital of Australia?", "I think so.",
                                  "I have a question about Python decorators.", "Hmm, I'm not sure that's right."])
def test_small_talk_still_forms_nothing(text):
    assert formed(text) == []
