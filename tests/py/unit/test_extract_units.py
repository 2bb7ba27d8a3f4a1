"""The offline extractor (plpy/mnemo_db/formation/extract.py), outside the server: what a careful
note-taker would write down, in sentences that read well (issue 26 §1)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from mnemo_db.formation import extract

SAID = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def chat(*turns, name_of=None) -> list[dict]:
    """Messages from (role, content) pairs; name_of gives a role's name (a named
    participant) when set."""
    return [{"message_id": i + 1, "role": role, "name": (name_of or {}).get(role), "content": text,
             "created_at": SAID, "session_id": "s"} for i, (role, text) in enumerate(turns)]


def kept(messages: list[dict]) -> list[tuple[str, str]]:
    """(kind, content) of the candidates admission would consider (notes aside)."""
    return [(c["kind"], c["content"]) for c in extract.extract(messages) if c["kind"] != "note"]


# ------------------------------------------------------------------ word boundaries
@pytest.mark.parametrize("text", [
    "Todoist and Trello are both excellent choices for a small team.",
    "Tasks are piling up faster than I can finish them, honestly.",
    "Next steps matter less than the direction we pick, in my view.",
])
def test_task_markers_never_cut_a_word(text):
    got = kept(chat(("user", "Which tool?"), ("assistant", text)) + chat(("user", text)))
    assert not [c for k, c in got if k == "task"], got
    assert not [c for _, c in got if "ist and Trello" in c or c.startswith("Task (")], got


def test_task_markers_with_a_colon_still_make_tasks():
    got = kept(chat(("user", "TODO: write the migration guide for v2")))
    assert [k for k, _ in got] == ["task"]
    assert "write the migration guide for v2" in got[0][1]


def test_first_person_commitments_with_contractions_are_tasks():
    got = kept(chat(("user", "I'll send the invoice to Dana by Friday.")))
    assert [k for k, _ in got] == ["task"]
    assert "The user will send the invoice to Dana by Friday" in got[0][1]


# ------------------------------------------------------------------ third person
@pytest.mark.parametrize("said, speaker, note", [
    ("I still need to pick up the kids", "The user", "The user still needs to pick up the kids"),
    ("I would like to get through my commute faster", "The user",
     "The user would like to get through the user's commute faster"),
    ("When I look after myself, I have more energy for my family", "Ana",
     "When Ana looks after themselves, Ana has more energy for Ana's family"),
    ("I go running and I try to cook", "Ana", "Ana goes running and Ana tries to cook"),
    ("I don't drink coffee and I'm not a morning person", "Ana",
     "Ana doesn't drink coffee and Ana is not a morning person"),
    ("I went there and I was happy", "Ana", "Ana went there and Ana was happy"),
    ("Honestly I am as tired as I was", "Ana", "Honestly Ana is as tired as Ana was"),
    ("I carve out some me-time", "Ana", "Ana carves out some me-time"),
])
def test_third_person_conjugates_and_keeps_possessives_in_lower_case(said, speaker, note):
    assert extract.third_person(said, speaker) == note


def test_second_person_becomes_the_addressee_in_agreement():
    assert (extract.third_person("You are right and you look great in your photo", "Bo", "Ana")
            == "Ana is right and Ana looks great in Ana's photo")


# ------------------------------------------------------------------ requests, not facts
def test_an_imperative_request_is_a_task_not_a_fact():
    got = kept(chat(("user", "Please help me onboard onto the acme-billing repo.")))
    assert got == [("task", ("Request: the user asked the assistant to help them onboard onto the "
                            "acme-billing repo (said 2 March 2026)"))]


# ------------------------------------------------------------------ the assistant's small talk
def test_the_assistants_small_talk_is_not_stored():
    got = kept(chat(("user", "We're thinking of a small wedding in June."),
                    ("assistant", ("I love the sound of a small, intimate ceremony! I think June is a lovely "
                                  "choice, and I'd suggest booking the venue early."))))
    assert all(not c.startswith("The assistant") for _, c in got), got


def test_what_the_assistant_reports_doing_in_the_work_is_kept():
    got = kept(chat(("user", "Fix the port."),
                    ("assistant", "I updated config/settings.py to use port 5433 instead of 5432.")))
    assert ("fact", ("The assistant updated config/settings.py to use port 5433 instead of 5432."
                    " (said 2 March 2026)")) in got


def test_a_named_participant_speaks_for_themselves():
    """In an imported conversation between two people (both named), either one's
    statements about their life are notes about them; reactions to the other are not."""
    got = kept(chat(("user", "I ran a charity race for mental health last Saturday."),
                    ("assistant", "I'm so proud of you! I went to a pottery class yesterday and made a bowl."),
                    name_of={"user": "Mel", "assistant": "Caro"}))
    assert [c for _, c in got] == [
        "Mel ran a charity race for mental health last Saturday. (said 2 March 2026)",
        "Caro went to a pottery class yesterday and made a bowl. (said 2 March 2026)"]


# ------------------------------------------------------------------ instructions
def test_prompt_scaffolding_is_not_a_durable_instruction():
    prompt = ("You are a support-ticket classifier. Classify the ticket below as billing, bug or other. "
              "Do not respond with anything except the JSON object {\"label\": ...}. "
              "Always include the label field.\n\nTicket: my card was charged twice")
    got = kept(chat(("user", prompt)))
    assert not [c for k, c in got if k == "instruction"], got


def test_a_one_off_request_is_not_a_durable_instruction():
    got = kept(chat(("user", "Do not respond with anything except the JSON object.")))
    assert not [c for k, c in got if k == "instruction"], got


@pytest.mark.parametrize("text", [
    "From now on, answer in British English.",
    "Always use tabs for indentation in my Go code.",
    "Never commit directly to main.",
])
def test_an_instruction_about_future_behaviour_is_durable(text):
    got = kept(chat(("user", text)))
    assert [k for k, _ in got] == ["instruction"], got


def test_advice_between_two_people_is_not_an_instruction():
    got = kept(chat(("user", "Never give up on your dreams, they matter."), ("assistant", "Thanks!"),
                    name_of={"user": "Mel", "assistant": "Caro"}))
    assert not [c for k, c in got if k == "instruction"], got


# ------------------------------------------------------------------ volume
def test_a_turns_statements_make_one_note_and_pleasantries_none():
    got = kept(chat(("user", "Hey Bo! Good to see you! How have you been?"),
                    ("assistant", ("Thanks for asking! I'm swamped with the kids and work. I started a new job "
                                  "at the library last month. It's been a lot.")),
                    ("user", "Wow, that's great, I'm so happy for you!"),
                    name_of={"user": "Ana", "assistant": "Bo"}))
    assert [k for k, _ in got] == ["fact"], got
    assert got[0][1].startswith("Bo is swamped with the kids and work. Bo started a new job at the library")


def test_a_turn_with_nothing_to_note_is_not_admitted():
    """The turn stays in the history; a note of it is not a memory (it used to be
    admitted when long and recent: 1.24 memories per turn)."""
    from mnemo_db.formation import admission
    reaction = chat(("user", ("Wow, that is a really detailed comparison of Postgres 15, MySQL 8 "
                              "and SQLite across the 12 TPC-H queries and the JSON workloads!")))
    notes = [c for c in extract.extract(reaction) if c["kind"] == "note"]
    assert notes
    assert not admission.score(notes[0], None, SAID)["admitted"]


@pytest.mark.parametrize("request_", [
    "Remind me to renew the TLS certificate on Friday.",
    "I need you to remind me to renew the TLS certificate on Friday.",
])
def test_remind_me_is_an_open_loop_only_as_a_request(request_):
    assert [k for k, _ in kept(chat(("user", request_)))] == ["open_loop"]


@pytest.mark.parametrize("text", [
    "These long walks by the river remind me to slow down and enjoy the little things.",
    "I have a painting in my room to remind me to stay true to myself.",
    "I'm lucky to have friends like you to remind me of that.",
    "Sorry I didn't get back to you sooner, the week was hectic.",
])
def test_what_only_mentions_reminding_or_getting_back_is_no_open_loop(text):
    got = kept(chat(("user", text)))
    assert not [k for k, _ in got if k == "open_loop"], got


@pytest.mark.parametrize("text", [
    "I'll definitely check it out!", "I will add it to my list.", "I'll look into it.",
    "I'll send it to you later.", "I'll check it out and let you know what I think.",
])
def test_a_commitment_that_names_nothing_is_not_written_down(text):
    assert kept(chat(("user", text))) == []


def test_a_commitment_that_names_its_object_is_a_task():
    got = kept(chat(("user", "I'll check out the book you mentioned, it looks great for the trip.")))
    assert [k for k, _ in got] == ["task"] and "check out the book" in got[0][1], got


@pytest.mark.parametrize("text", [
    "I bet those rides brought back some great memories of the summer.",
    "I can imagine how proud you must feel seeing your ideas come to life in a game.",
    "I'm sure it'll be a blast with everyone there on Saturday night.",
    "I'll keep you updated on which brands I choose for the new line.",
])
def test_a_guess_at_the_listeners_experience_is_no_note(text):
    """Courtesies in the first person (a guess at what the other speaker feels, a
    reassurance, a promise to keep them posted) assert nothing about the speaker."""
    assert kept(chat(("user", text))) == []


def test_a_courtesy_leaves_the_rest_of_the_turn_its_note():
    turn = ("I'm sure it'll be a blast. I'm even getting everyone custom controller decorations "
            "from the shop downtown for the tournament.")
    got = kept(chat(("user", turn)))
    assert len(got) == 1 and "custom controller decorations" in got[0][1] and "blast" not in got[0][1], got


# ------------------------------------------------------------------ notes worth keeping
def named(*turns):
    """A two-party conversation between named participants (Ana speaks first)."""
    return chat(*turns, name_of={"user": "Ana", "assistant": "Bo"})


@pytest.mark.parametrize("text", [
    "If I find a good dog park near the lake, I'll let you know.",
    "I'll definitely fill you in on the details of the garden tour when I get back.",
])
def test_a_promise_to_report_back_is_no_note(text):
    assert kept(named(("user", "Any news?"), ("assistant", text))) == []


def test_a_promise_to_report_back_leaves_what_else_the_sentence_says():
    got = kept(named(("user", ("I'll bake the lemon cake for Sunday's picnic at the lake and let you know how it "
                              "turns out.")), ("assistant", "Sounds good!")))
    assert len(got) == 1 and "lemon cake" in got[0][1] and "let" not in got[0][1], got


@pytest.mark.parametrize("text", ["I love those games too.", "I really love this quote.",
                                  "I love them so much, honestly."])
def test_a_liking_that_only_points_at_something_is_no_preference(text):
    assert kept(named(("user", text), ("assistant", "Right?"))) == []


def test_a_liking_that_names_its_object_is_a_preference():
    got = kept(named(("user", "I love those old arcade racing games from the nineties."), ("assistant", "Me too")))
    assert [k for k, _ in got] == ["preference"], got


@pytest.mark.parametrize("text", [
    "I'm gonna keep pushing and make this work. Hiccups won't stop me.",
    "I won't give up, Gina. I will keep pushing and working to make my dreams happen.",
])
def test_a_resolve_to_keep_going_is_no_note(text):
    assert kept(named(("user", text), ("assistant", "You got this!"))) == []


def test_a_resolve_that_names_what_the_speaker_keeps_doing_stays():
    got = kept(named(("user", "I'm gonna keep learning more about auto engineering and restoring old Mustangs."),
                     ("assistant", "Nice")))
    assert len(got) == 1 and "auto engineering" in got[0][1], got


def test_we_is_the_speaker_with_others():
    got = kept(named(("user", ("Last week we went camping with our kids at Lake Tahoe where we were swimming "
                              "every day.")), ("assistant", "Fun!")))
    assert len(got) == 1, got
    assert got[0][1].startswith("Last week Ana's group went camping with their kids at Lake Tahoe where Ana's group "
                                "was swimming every day"), got


def test_the_we_of_both_speakers_stays():
    got = kept(named(("user", "I adopted a rescue greyhound named Pixel from the shelter the day after we last talked."),
                     ("assistant", "Wow")))
    assert len(got) == 1 and got[0][1].startswith("Ana adopted a rescue greyhound named Pixel from the shelter the day "
                                                  "after we last talked"), got


@pytest.mark.parametrize("text", [
    "Nature has a way of making us feel alive and centered.",
    "We all need an outlet to express our thoughts and feelings.",
    "It's always a shock where life will take us next!",
])
def test_a_maxim_about_people_in_general_is_no_note(text):
    assert kept(named(("user", text), ("assistant", "So true"))) == []


@pytest.mark.parametrize("text", [
    "Last weekend our city held a pride parade downtown!",
    "A car ran a red light and hit us on the way to the coast.",
    "We need to get the word out about the chili cook-off at the fundraiser.",
])
def test_what_happened_to_the_group_is_a_note(text):
    assert len(kept(named(("user", text), ("assistant", "Oh wow")))) == 1


@pytest.mark.parametrize("text", [
    "Good luck with your project, I'm sure the screenplay will turn out great!",
    "Congrats on the cooking show, I'll definitely be tuning in on Friday nights!",
])
def test_a_wish_for_the_listener_is_no_note(text):
    assert kept(named(("user", "Big week!"), ("assistant", text))) == []


@pytest.mark.parametrize("text", ["we went " * 16000, "I will " + "really " * 16000 + "go"])
def test_a_hostile_sentence_is_read_in_linear_time(text):
    """A sentence of 16,000 repeated words (no punctuation to split it): the group's
    rewrites are bounded and the resolve pattern's adverb runs possessive. Before, each
    "we" reread the sentence and two runs of the same adverbs split a run in every way:
    20-40 s for these, in the job that extracts a session; now ~0.2 s. The bound is 50x."""
    import time

    started = time.perf_counter()
    extract.extract([{"role": "user", "name": "Ana", "content": text, "message_id": 1, "created_at": None}])
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(("sentence", "expected"), [
    ("I agreed to help with the move.", "Ana agreed to help with the move."),
    ("I freed up my Saturday for the trip.", "Ana freed up Ana's Saturday for the trip."),
    ("I still need to call my mom.", "Ana still needs to call Ana's mom."),
])
def test_a_past_tense_in_eed_is_left_as_it_is(sentence, expected):
    """The verb after a rewritten subject is put in agreement unless it is a past tense
    (extract._PAST_ED, the one test of the statement rules too): "agreed" and "freed"
    are ("Ana agreeds" before), "need" is not."""
    assert extract.third_person(sentence, "Ana") == expected


# ------------------------------------------------------------------ compact notes
@pytest.mark.parametrize("said, note", [
    ("Since we last chatted, I ran a charity race for mental health last Saturday – it was really rewarding.",
     "Bo ran a charity race for mental health last Saturday."),
    ("Actually, I signed up for a pottery class at the community center, which is pretty exciting!",
     "Bo signed up for a pottery class at the community center."),
    ("I went to a support group for new parents yesterday and it was so powerful.",
     "Bo went to a support group for new parents yesterday."),
])
def test_a_note_leaves_out_the_opener_and_the_evaluating_clause(said, note):
    """A note-taker writes what happened, not how the conversation got there or how it
    felt: the note is shorter than the turn."""
    got = kept(named(("user", "What's new?"), ("assistant", said)))
    assert [c for _, c in got] == [f"{note} (said 2 March 2026)"], got


@pytest.mark.parametrize("said, kept_words", [
    ("I ran my first marathon in Boston - it was a 42 km course along the river.", "42 km course"),
    ("I finished the quilt for my sister, and it was Maya's idea to add the blue border.", "Maya's idea"),
])
def test_an_evaluating_clause_that_names_something_stays(said, kept_words):
    got = kept(named(("user", "What's new?"), ("assistant", said)))
    assert len(got) == 1 and kept_words in got[0][1], got
