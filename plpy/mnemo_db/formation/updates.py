"""Knowledge updates said in passing: a later note that states what an earlier one
said with another quantity ("The user has been dedicating about an hour each day to
coding exercises" -> "... about two hours each day to coding exercises"). The
functional predicates (extract._FUNCTIONAL: lives_in, works_at ...) catch a new value
of a named relation; most of what people update is a count, a time or an amount in a
sentence of their own, which the extractor keeps as a plain statement.

`restates_with_new_values(old, new)`: every statement of the earlier note is said
again in the later one, word for word but for the quantities, and at least one
quantity changed. Word for word: the same words before the quantity, and after it
the one's words a beginning of the other's (a restatement may drop or add a closing
clause), or the value closing both. Nothing of the earlier note is then lost when the later one supersedes it
(formation.Former.form), and the compile states the earlier value beside the new
one (compile/updates.py)."""

from __future__ import annotations

import re

from ..timestamps import said_day_at_end

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[\w:/-]+")
# Words that say how many or how much: a numeral (27, 5-6, 25:50, 3/4) or a number word.
_NUMBER_WORDS = frozenset((
    "a", "an", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    "hundred", "thousand", "million", "dozen", "couple", "few", "several", "half"))


def _is_quantity(word: str) -> bool:
    return word in _NUMBER_WORDS or any(ch.isdigit() for ch in word)


def words(sentence: str) -> list[str]:
    """A statement's words, lowercased, a plural's s dropped (an hour, two hours)."""
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in _WORD.findall(sentence.lower())]


def statements(note: str) -> list[list[str]]:
    """A note's statements as words, without the day it was said."""
    said = said_day_at_end(note)
    if said is not None:
        note = note[:said[0]]
    return [w for w in (words(s) for s in _SENTENCE.split(note.strip())) if w]


def new_value_of(old: list[str], new: list[str]) -> bool | None:
    """Whether `new` states `old` with other quantities (True), the same (False), or
    says something else (None)."""
    if old == new:
        return False
    n = 0
    while n < min(len(old), len(new)) and old[n] == new[n]:
        n += 1
    if n == 0:
        return None  # not the same subject and verb
    i, j = n, n
    while i < len(old) and _is_quantity(old[i]):
        i += 1
    while j < len(new) and _is_quantity(new[j]):
        j += 1
    if i == n or j == n:
        return None  # the first difference is no quantity replaced by another
    rest_old, rest_new = old[i:], new[j:]
    shared = min(len(rest_old), len(rest_new))
    if (shared == 0 and rest_old != rest_new) or rest_old[:shared] != rest_new[:shared]:
        return None  # what is counted differs, or is said of one only ("is a model" / "is 20")
    return True


def states_a_quantity(note: str) -> bool:
    """Whether a note says how many or how much of something (a word of
    _NUMBER_WORDS but "a"/"an" alone: nearly every note has one)."""
    return any(_is_quantity(w) and w not in ("a", "an") for s in statements(note) for w in s)


def restates_with_new_values(old_note: str, new_note: str) -> bool:
    """Every statement of old_note is in new_note, the same or with other quantities,
    and at least one with other quantities."""
    new = statements(new_note)
    changed = False
    for s in statements(old_note):
        found = [new_value_of(s, t) for t in new]
        if False in found:
            continue
        if True not in found:
            return False
        changed = True
    return changed
