"""Digests: the facts a tenant's memories hold about one entity or one topic, gathered
across sessions into one dated memory (the 'digests' sweep, docs/design.md §Lifecycle).

A question such as "How many doctors did I see?" needs every instance, said in
different sessions weeks apart; each instance is a memory of its own, and a ranking
rarely brings all of them into one context. The sweep keeps, per group of memories
that spans two or more sessions, one memory that lists every member with its date:

    Digest of "tank" (4 notes over 3 sessions, oldest first): (2023-05-21) The user
    set up a 1-gallon tank for a friend's kid.; (2023-05-29) ...

Pure functions here (the grouping and the text); sweeps.py reads and writes the rows.

Members (the pool): a tenant's active memories that every reader of a digest could
see: scope 'global' only (a 'local' memory is its own session's alone), never a
'secret' one (secrets are not copied into other rows), no 'summary' (compaction's) and
no digest, and no kind that some channel excludes (policy.CHANNEL_EXCLUDED_KINDS:
'preference' on the public channel), so a digest never shows one where it is hidden. A
digest's sensitivity is its most sensitive member's, so a channel that may not read one
member does not read the digest either. Its kind is 'summary': a compile gives it its
own relevance, not its best turn's (compile/bundle.py GATHERING_KINDS).

Groups:
- entity: the memories that mention one entity (mnemo.entity_mentions);
- topic: the memories whose text holds one word (its English stem, the lexeme the
  full-text index uses), the said-day suffix left out. A word is a topic of the
  tenant when it is not broad (below).
A group forms a digest when its members span MIN_SESSIONS sessions or more (a memory
without a session counts by its day). A group is too broad to be one topic when it
holds more than MAX_MEMBERS memories and more than BROAD_SHARE of the pool (the user
themself, "want", "help"): the digest could not list every instance. Groups that
say nearly the same (Jaccard overlap of members >= SAME_GROUP with a group already
kept) are kept once: entity groups first, then topics over more sessions first, then
fewer members (the more specific word). At most MAX_DIGESTS digests a tenant.

Size: a digest lists at most MAX_MEMBERS members, chosen session by session (the
newest note of each session, newest sessions first, then the second of each...), so
a capped digest still names as many distinct occasions as it can; they are listed
oldest first, each with its day; a superseded member is marked as an earlier value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

from ..compile.policy import CHANNEL_EXCLUDED_KINDS
from ..timestamps import said_day_at_end
from ..vocabulary import most_sensitive

MIN_SESSIONS = 2
MAX_MEMBERS = 10
BROAD_SHARE = 0.1
SAME_GROUP = 0.6
MAX_DIGESTS = 64
# The newest memories of a tenant a run reads (a batch is bounded whatever the tenant)
POOL_LIMIT = 2000
# A member's text in a digest, at most (a long note is cut at a word)
MEMBER_CHARS = 400
KEY_PREFIX = "digest:"

_EXCLUDED_KINDS = frozenset(k for ks in CHANNEL_EXCLUDED_KINDS.values() for k in ks)
_WORD = re.compile(r"[a-z][a-z'-]{2,}")
# A noun phrase's head: the word after a determiner or a possessive ("the doctor",
# "her wedding", "Maria's aquarium"), or the next one when that word is a common
# adjective, number or quantifier ("a good idea", "a few plants", "the three cats").
# Verbs, adverbs and the extractor's phrasing ("would", "really", "wonders") rarely
# stand there, so they name no topic. "The user's" and "it's" are taken for "is".
_NOUN_PHRASE = re.compile(
    r"\b(?:a|an|the|my|his|her|their|our|your|its|these|those|some|each|every|another|several|"
    r"(?!(?:user|assistant|it|that|he|she|there|here|what|who|let|where|how)'s)[a-z]+'s)"
    r"\s+([a-z][a-z-]+)(?:\s+([a-z][a-z-]+))?")
_MODIFIERS = frozenset([
    "best", "better", "big", "bit", "certain", "couple", "different", "earliest", "eight",
    "favorite", "favourite", "few", "first", "five", "four", "free", "full", "good", "great",
    "high", "large", "last", "latest", "little", "local", "long", "lot", "low", "main", "many",
    "more", "most", "much", "new", "next", "nice", "nine", "old", "one", "other", "own",
    "particular", "real", "recent", "right", "same", "seven", "short", "similar", "six", "small",
    "specific", "such", "ten", "three", "two", "whole", "wrong"
])
# The conversation's parties, as extracted notes name them: in every note, no topic.
# Nor are spans of time (the stems of "weeks", "months", "the weekend"): they say when,
# not what, and every dated note has one.
PARTIES = frozenset(["user", "assist"])
TIME_WORDS = frozenset(["day", "week", "weekend", "month", "year", "time", "hour", "minut", "moment",
                        "morn", "even", "night", "today", "tomorrow", "yesterday", "while", "date"])


@dataclass(frozen=True)
class Member:
    memory_id: int
    session: str | None
    day: date
    text: str
    kind: str = "fact"
    sensitivity: str = "none"
    superseded: bool = False
    confidence: float = 0.5
    sources: tuple[int, ...] = ()
    entities: tuple[int, ...] = ()
    lexemes: tuple[str, ...] = ()
    said_at: str = ""   # when it was said (valid_from, ISO 8601); '' when unknown

    @property
    def occasion(self) -> str:
        """What 'another session' means: the session, or the day for a memory without one."""
        return self.session or f"day:{self.day.isoformat()}"


@dataclass
class Group:
    key: str          # the digest's source_key: digest:entity:<id> or digest:topic:<lexeme>
    label: str        # what the text names: the entity's name or the topic's word
    members: list[Member] = field(default_factory=list)

    @property
    def occasions(self) -> int:
        return len({m.occasion for m in self.members})


@dataclass(frozen=True)
class Digest:
    key: str
    kind: str
    text: str
    sources: list[int]
    sensitivity: str
    confidence: float
    members: list[int]      # the members listed, oldest first
    total: int              # the group's members, listed or not
    occasions: int
    newest: date
    newest_at: str          # the newest listed member's said_at ('' when unknown)
    label: str

    @property
    def dated_at(self) -> str:
        """When the digest is dated (its created_at and valid_from: what a compile's
        recency and day lines read): its newest listed member's said_at, else that
        member's day at midnight UTC."""
        return self.newest_at or self.newest.isoformat() + "T00:00:00Z"


def member_text(text: str) -> tuple[str, date | None]:
    """A note's text without its closing said-day suffix (the digest dates each line
    itself), cut to MEMBER_CHARS at a word; and the day that suffix named."""
    said = said_day_at_end(text)
    day = None
    if said is not None:
        text, day = text[:said[0]], said[1]
    text = " ".join(text.split())
    if len(text) > MEMBER_CHARS:
        text = text[:MEMBER_CHARS].rsplit(" ", 1)[0] + " ..."
    return text, day


def word_for(lexeme: str, members: list[Member]) -> str:
    """The topic's word as the members write it: the most frequent word that starts
    with the stem (the stem itself when none does)."""
    counts: dict[str, int] = {}
    for m in members:
        for w in _WORD.findall(m.text.lower()):
            if w.startswith(lexeme):
                counts[w] = counts.get(w, 0) + 1
    return min(counts, key=lambda w: (-counts[w], len(w), w)) if counts else lexeme


def nouns(texts: list[str]) -> set[str]:
    """The heads of the texts' noun phrases (_NOUN_PHRASE), lower case."""
    out = set()
    for t in texts:
        for first, second in _NOUN_PHRASE.findall(t.lower()):
            out.add(second if first in _MODIFIERS and second else first)
    return out - _MODIFIERS


def _topical(lexeme: str, noun_stems: set[str]) -> bool:
    """A lexeme that can name a topic: a stem of three letters or more, no party of the
    conversation and no span of time, of a word the members use as a noun (noun_stems: the
    stems of nouns())."""
    return (len(lexeme) >= 3 and lexeme.isalpha() and lexeme not in PARTIES and lexeme not in TIME_WORDS
            and lexeme in noun_stems)


def _broad(n: int, pool: int) -> bool:
    return n > MAX_MEMBERS and n > BROAD_SHARE * pool


def groups(pool: list[Member], entity_names: dict[int, str], noun_stems: set[str]) -> list[Group]:
    """The groups of the pool that form digests, in the order they are kept (module
    docstring: the rule, broad groups, near-duplicates, MAX_DIGESTS). noun_stems: the
    stems (the full-text index's lexemes) of nouns() of the pool's texts."""
    by_entity: dict[int, list[Member]] = {}
    by_lexeme: dict[str, list[Member]] = {}
    pool = [m for m in pool if m.kind not in _EXCLUDED_KINDS]
    for m in pool:
        for e in set(m.entities):
            by_entity.setdefault(e, []).append(m)
        for lx in set(m.lexemes):
            by_lexeme.setdefault(lx, []).append(m)
    n = len(pool)
    entity_groups = [Group(f"{KEY_PREFIX}entity:{e}", entity_names.get(e) or f"entity {e}", ms)
                     for e, ms in by_entity.items()
                     if any(ch.isalpha() for ch in entity_names.get(e, "")) and not _broad(len(ms), n)]
    topic_groups = [Group(f"{KEY_PREFIX}topic:{lx}", word_for(lx, ms), ms)
                    for lx, ms in by_lexeme.items()
                    if len({m.occasion for m in ms}) >= MIN_SESSIONS and not _broad(len(ms), n)
                    and _topical(lx, noun_stems)]
    entity_groups = [g for g in entity_groups if g.occasions >= MIN_SESSIONS]
    topic_groups = [g for g in topic_groups if g.occasions >= MIN_SESSIONS]
    entity_groups.sort(key=lambda g: (-g.occasions, len(g.members), g.key))
    topic_groups.sort(key=lambda g: (-g.occasions, len(g.members), g.key))
    kept: list[Group] = []
    seen: list[frozenset[int]] = []
    for g in entity_groups + topic_groups:
        ids = frozenset(m.memory_id for m in g.members)
        if any(len(ids & s) >= SAME_GROUP * len(ids | s) for s in seen):
            continue
        kept.append(g)
        seen.append(ids)
        if len(kept) >= MAX_DIGESTS:
            break
    return kept


def chosen_members(members: list[Member]) -> list[Member]:
    """At most MAX_MEMBERS members, session by session: the newest of each occasion
    (newest occasions first), then the next newest of each, and so on; oldest first."""
    by_occ: dict[str, list[Member]] = {}
    for m in sorted(members, key=lambda m: (m.day, m.memory_id), reverse=True):
        by_occ.setdefault(m.occasion, []).append(m)
    queues = sorted(by_occ.values(), key=lambda ms: (ms[0].day, ms[0].memory_id), reverse=True)
    out: list[Member] = []
    depth = 0
    while len(out) < MAX_MEMBERS and any(len(q) > depth for q in queues):
        for q in queues:
            if len(q) > depth and len(out) < MAX_MEMBERS:
                out.append(q[depth])
        depth += 1
    return sorted(out, key=lambda m: (m.day, m.memory_id))


def render(group: Group) -> Digest:
    """The digest of a group: its text (each member with its day, oldest first),
    sources (the union of the listed members'), sensitivity, kind and confidence."""
    listed = chosen_members(group.members)
    lines = []
    for m in listed:
        text, _ = member_text(m.text)
        mark = ", an earlier value, since superseded" if m.superseded else ""
        lines.append(f"({m.day.isoformat()}{mark}) {text}")
    total, occ = len(group.members), group.occasions
    shown = f"{total} notes" if len(listed) == total else f"the {len(listed)} of {total} notes chosen by session"
    head = f'Digest of "{group.label}" ({shown} over {occ} sessions, oldest first): '
    sources = sorted({s for m in listed for s in m.sources})
    return Digest(key=group.key, kind="summary", text=head + "; ".join(lines),
                  sources=sources, sensitivity=most_sensitive(m.sensitivity for m in listed),
                  confidence=min(m.confidence for m in listed), members=[m.memory_id for m in listed],
                  total=total, occasions=occ, newest=max(m.day for m in listed),
                  newest_at=max(m.said_at for m in listed), label=group.label)


def digests(pool: list[Member], entity_names: dict[int, str], noun_stems: set[str]) -> list[Digest]:
    """Every digest the pool asks for, in the order of keeping (groups)."""
    return [render(g) for g in groups(pool, entity_names, noun_stems)]
