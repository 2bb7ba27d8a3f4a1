"""The digests' grouping and text (plpy/mnemo_db/lifecycle/digests.py), no database."""

from __future__ import annotations

from datetime import date

from mnemo_db.compile.bundle import noted_relevance
from mnemo_db.lifecycle import digests as dg
from mnemo_db.lifecycle.digests import Member


def m(i: int, session: str | None, day: str, text: str, lexemes=(), entities=(), **kw) -> Member:
    return Member(memory_id=i, session=session, day=date.fromisoformat(day), text=text,
                  sources=(100 + i,), lexemes=tuple(lexemes), entities=tuple(entities), **kw)


VISITS = [
    m(1, "s1", "2023-03-03", "The user saw the doctor for a check-up. (said 3 March 2023)", ["user", "saw", "doctor"]),
    m(2, "s2", "2023-04-10", "The user went to a new doctor about a rash.", ["user", "went", "doctor", "rash"]),
    m(3, "s2", "2023-04-10", "The user likes Lisbon.", ["user", "like", "lisbon"], entities=[7]),
    m(4, "s3", "2023-05-01", "The user plans a trip to Lisbon.", ["user", "plan", "trip", "lisbon"], entities=[7]),
]


def test_nouns_are_the_heads_after_a_determiner():
    words = dg.nouns(["The user saw a good doctor about her wedding.", "It's really nice; the user's tank",
                      "That would help. A few plants arrived."])
    assert {"doctor", "wedding", "plants"} <= words
    # ("user" is a noun, and no topic: a party of the conversation, see _topical)
    assert not words & {"good", "really", "would", "nice", "few", "tank"}


def test_groups_by_entity_and_topic_over_two_sessions():
    groups = dg.groups(VISITS, {7: "Lisbon"}, {"doctor", "trip", "rash"})
    keys = [g.key for g in groups]
    assert keys == ["digest:entity:7", "digest:topic:doctor"]  # entities first; trip and rash: one session
    lisbon, doctor = groups
    assert lisbon.label == "Lisbon" and [x.memory_id for x in lisbon.members] == [3, 4]
    assert doctor.label == "doctor" and {x.memory_id for x in doctor.members} == {1, 2}
    # the topic word "lisbon" says what entity 7 says: kept once
    assert dg.groups(VISITS, {7: "Lisbon"}, {"lisbon"}) == groups[:1]
    # a word that is no noun of the members forms nothing; nor a party of the conversation,
    # nor a span of time
    assert dg.groups(VISITS, {}, {"saw", "user"}) == []
    weeks = [m(i, f"s{i}", "2023-03-03", "The user waited for weeks.", ["week"]) for i in range(2)]
    assert dg.groups(weeks, {}, {"week"}) == []


def test_one_session_or_a_broad_group_forms_no_digest():
    same = [m(i, "s1", "2023-03-03", f"The user saw the doctor {i}.", ["doctor"]) for i in range(5)]
    assert dg.groups(same, {}, {"doctor"}) == []
    # no session: days count as occasions
    days = [m(i, None, f"2023-03-0{i + 1}", "The user saw the doctor.", ["doctor"]) for i in range(2)]
    assert [g.key for g in dg.groups(days, {}, {"doctor"})] == ["digest:topic:doctor"]
    # more than MAX_MEMBERS notes and more than BROAD_SHARE of the pool: too broad
    n = dg.MAX_MEMBERS + 1
    broad = [m(i, f"s{i}", "2023-03-03", "The user saw the doctor.", ["doctor"]) for i in range(n)]
    assert dg.groups(broad, {}, {"doctor"}) == []
    other = [m(100 + i, f"s{i}", "2023-03-03", "x", ["other"]) for i in range(int(n / dg.BROAD_SHARE))]
    assert [g.key for g in dg.groups(broad + other, {}, {"doctor"})] == ["digest:topic:doctor"]


def test_the_text_dates_each_member_oldest_first_and_marks_earlier_values():
    members = [m(1, "s1", "2023-03-03", "The user saw the doctor. (said 3 March 2023)", superseded=True,
                 sensitivity="low"),
               m(2, "s2", "2023-04-10", "The user went to a new doctor.", sensitivity="high", confidence=0.4)]
    d = dg.render(dg.Group("digest:topic:doctor", "doctor", list(reversed(members))))
    assert d.text == ('Digest of "doctor" (2 notes over 2 sessions, oldest first): '
                      "(2023-03-03, an earlier value, since superseded) The user saw the doctor.; "
                      "(2023-04-10) The user went to a new doctor.")
    assert d.sources == [101, 102] and d.members == [1, 2]
    assert (d.sensitivity, d.kind, d.confidence, d.newest) == ("high", "summary", 0.4, date(2023, 4, 10))
    # a kind some channel excludes is never a member, so no channel sees it in a digest
    pref = m(3, "s3", "2023-05-01", "The user prefers the doctor in the mornings.", ["doctor"], kind="preference")
    visit = m(4, "s4", "2023-05-02", "The user saw the doctor.", ["doctor"])
    assert dg.groups([pref, visit], {}, {"doctor"}) == []


def test_a_capped_digest_names_as_many_sessions_as_it_can():
    # session s0 has many notes, the others one each: every session is listed first
    many = [m(i, "s0", "2023-06-01", f"The user saw the doctor, visit {i}.") for i in range(12)]
    few = [m(100 + i, f"s{i + 1}", f"2023-0{i + 1}-01", f"The user saw a doctor in month {i + 1}.") for i in range(4)]
    d = dg.render(dg.Group("k", "doctor", many + few))
    assert len(d.members) == dg.MAX_MEMBERS and {100, 101, 102, 103} <= set(d.members)
    assert d.text.startswith(f'Digest of "doctor" (the {dg.MAX_MEMBERS} of 16 notes chosen by session over 5')
    assert d.sources == sorted(100 + i for i in d.members)


def test_a_long_member_is_cut_at_a_word():
    text, day = dg.member_text("word " * 200 + "(said 3 March 2023)")
    assert day == date(2023, 3, 3) and text.endswith(" ...") and len(text) <= dg.MEMBER_CHARS + 4


def test_a_digest_keeps_its_own_relevance_a_note_takes_its_turns():
    """A note is as relevant as the turn it was written from; a digest (kind 'summary')
    gathers many turns, and one relevant turn among them does not make it relevant."""
    visible = [{"source": "msg:1", "kind": "message"}, {"source": "msg:2", "kind": "message"},
               {"source": "mem:7", "kind": "fact", "derived_from": ["msg:1"]},
               {"source": "mem:8", "kind": "summary", "derived_from": ["msg:1", "msg:2", "msg:3"]}]
    assert noted_relevance(visible, [0.9, 0.1, 0.2, 0.3]) == [0.9, 0.1, 0.9, 0.3]
