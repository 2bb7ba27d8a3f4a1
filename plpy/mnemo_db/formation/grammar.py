"""The grammar of offline extraction: sentences, speakers, the third person, groups,
entities and due dates. extract.py's rules decide what to write down; these helpers
say it the way a note-taker would (a speaker named, verbs in agreement, "we" as the
speaker's group), free of the database."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from ..lifecycle import summarize
from ..timestamps import MONTHS

# --------------------------------------------------------------------- helpers
_SENT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WS = re.compile(r"\s+")
_FIRST_PERSON = re.compile(r"(?i)\b(i|i'm|i've|i'd|i'll|my|me|myself|we|we're|we've|our|us)\b")
_MARKER = re.compile(r"\[REDACTED:\w+\]")
_SENTENCE_START = re.compile(r"(?:[.!?:]\s+|\n\s*)$")
_CLAUSE_RE = re.compile(r";\s+|,?\s+(?:and|but|so)\s+(?=(?:I|I'm|I've|we|my)\b)")
_PROPER = re.compile(r"\b[A-Z][a-zA-Z'’-]+(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][a-zA-Z'’-]+)*")
_NOT_ENTITY = frozenset(["I", "I'm", "I've", "I'd", "I'll", "Im", "Ive", "The", "A", "An", "And", "But", "So", "Or", "Yes", "No", "Ok", "Okay", "Hey", "Hi", "Hello", "Wow", "Thanks", "Thank", "Oh", "Ah", "Well", "Sure", "Great", "Nice", "Cool", "Awesome", "That", "This", "These", "Those", "It", "It's", "Its", "What", "When", "Where", "Why", "How", "Who", "Which", "We", "You", "Your", "My", "Me", "He", "She", "They", "Our", "Their", "There", "Here", "Let", "Let's", "Also", "Just", "Really", "Sounds", "Good", "Yeah", "Yep", "Nope", "Please", "Maybe", "Definitely", "Absolutely", "Totally", "Congrats", "Congratulations", "Love", "Today", "Tomorrow", "Yesterday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December", "Do", "Did", "Does", "Have", "Has", "Had", "Is", "Are", "Was", "Were", "Will", "Would", "Can", "Could", "Should", "Shall", "Must", "Might", "Being", "Been", "If", "Then", "Once", "After", "Before", "Since", "As", "For", "From", "With", "Without", "About", "Into", "Over", "Under", "Always", "Never", "Don't", "Remember", "Make", "Use", "TODO", "Note", "Big", "News", "Task", "Open", "Loop", "Instruction", "File", "Output", "Error"])

# Present-tense agreement for a third-person subject: irregular forms, then words that
# never take an -s (modals, past tenses, contractions), adverbs that sit between the
# subject and its verb.
_VERB_S = {"have": "has", "do": "does", "go": "goes", "am": "is", "are": "is", "were": "was",
           "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "weren't": "wasn't"}
_NO_S = frozenset([
    "was", "is", "has", "does", "can", "could", "will", "would", "shall", "should", "may", "might",
    "must", "ought", "can't", "couldn't", "won't", "wouldn't", "shouldn't", "didn't", "doesn't",
    "hasn't", "isn't", "wasn't", "mustn't", "needn't", "cannot", "had", "did", "said", "went", "got",
    "made", "took", "saw", "came", "gave", "found", "felt", "thought", "knew", "left", "met", "ran",
    "bought", "brought", "built", "caught", "chose", "drew", "drove", "ate", "fell", "flew", "forgot",
    "grew", "heard", "held", "kept", "lost", "paid", "put", "sat", "sent", "set", "sold", "spent",
    "stood", "taught", "told", "understood", "won", "wrote", "began", "became", "broke", "hurt", "let",
    "cut", "quit", "read", "hit", "spoke", "woke", "wore", "threw", "swam", "sang", "rode", "shot",
    "slept", "fought", "led", "lit", "meant", "dealt", "dug", "hung", "fed", "bent", "lent", "burnt",
    "learnt", "dreamt", "wanna", "gonna", "gotta",
])
_ADVERB = frozenset([
    "still", "really", "just", "also", "usually", "always", "never", "often", "sometimes", "now",
    "only", "even", "actually", "definitely", "truly", "totally", "kinda", "mostly", "finally",
    "currently", "recently", "already", "probably", "certainly", "honestly", "seriously", "personally",
    "literally", "absolutely", "sort", "kind", "of", "not"
])
_FUNCTION_WORDS = frozenset([
    "and", "or", "but", "so", "to", "too", "the", "a", "an", "in", "on", "at", "for", "with", "of",
    "from", "by", "as", "than", "then", "that", "this", "it"
])

_DUE = re.compile(
    r"(?i)\b(?:by|on|before|until|due|next)\s+(?P<d>today|tonight|tomorrow|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday|week|month|(?:\d{4}-\d{2}-\d{2})|(?:(?:jan|feb|mar|apr|may|jun|jul|aug|"
    r"sep|oct|nov|dec)[a-z]* \d{1,2}))\b")


def clean(text: str) -> str:
    return _WS.sub(" ", text or "").strip()


def speaker_of(m: dict) -> str:
    if m.get("name"):
        return m["name"].replace("_", " ")
    return {"user": "The user", "assistant": "The assistant"}.get(m["role"], m["role"])


def mid_sentence(name: str) -> str:
    """A speaker as written inside a sentence: 'The user' -> 'the user', 'Ana' -> 'Ana'."""
    return name[:1].lower() + name[1:] if name.startswith("The ") else name


def third_singular(verb: str) -> str:
    """'need' -> 'needs', 'go' -> 'goes', 'try' -> 'tries', 'have' -> 'has'."""
    low = verb.lower()
    if low in _VERB_S:
        return _VERB_S[low]
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(low) > 2 and low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


# A past tense in -ed (a word of the text, or the pattern's piece): "agreed" and "freed"
# are, "need", "indeed", "succeed", "feed" and their like are not.
PAST_ED = r"(?!(?:n|ind|succ|proc|exc|f|s|br|bl|sp|w|h)eed\b)\w+ed"


def _agree(rest: str) -> str:
    """The words after a rewritten singular subject, its verb put in agreement: adverbs
    are skipped ('still need' -> 'still needs'), a past tense, a modal or a word that is
    not a verb is left alone."""
    m = re.match(r"((?:\s+(?:{}))*)\s+([A-Za-z]+(?:n't)?)\b(?!['’-])".format("|".join(sorted(_ADVERB, key=len, reverse=True))),
                 rest, re.IGNORECASE)
    if not m:
        return rest
    verb = m.group(2)
    low = verb.lower()
    past = re.fullmatch(PAST_ED, low) is not None and low not in ("embed", "shed", "shred", "wed")
    if (past or low in _NO_S or low in _FUNCTION_WORDS or low.endswith(("ly", "ing")) or not verb.islower()
            or low in _NOT_VERB):
        return rest
    return rest[:m.start(2)] + third_singular(verb) + rest[m.end(2):]


# Verbs after which a "you" in the middle of a clause is the subject ("I'm sure you feel").
_SUBJECT_VERBS = ("are|were|have|had|feel|felt|look|looked|know|knew|need|want|like|love|make|made|do|did|go|went"
                  "|get|got|seem|think|deserve|can|could|will|would|should|must|might|may|always|never|really|still")
# Words that follow "I" / "you" without being a present-tense verb ("I too", "you guys").
_NOT_VERB = frozenset([
    "guys", "all", "both", "two", "three", "alone", "yourself", "myself"
])


def third_person(sentence: str, speaker: str, addressee: str | None = None) -> str:
    """'I still need to call my mom' -> 'Ana still needs to call Ana's mom': first person
    becomes the speaker and second person the addressee, named in the third person with
    the verb in agreement; 'the user' / 'the assistant' are capitalised only where they
    start the sentence. Without an addressee, 'you' is left alone."""
    people = [("I", mid_sentence(speaker))]
    if addressee:
        people.append(("you", mid_sentence(addressee)))
    s = sentence
    for pron, name in people:
        first = pron == "I"
        subj = r"\bI" if first else r"(?i:\byou)"
        # contractions and auxiliaries of the subject
        for pat, rep in ((r"(?:'m|’m| am)\b" if first else r"(?:'re|’re| are)\b", " is"),
                         (r"(?:'ve|’ve) got\b", " has"), (r"(?:'ve|’ve)\b", " has"), (r"(?:'d|’d)\b", " would"),
                         (r"(?:'ll|’ll)\b", " will"), ((r" was\b" if first else r" were\b"), " was")):
            s = re.sub(subj + pat, lambda m, rep=rep, name=name: name + rep, s)
        if first:
            s = re.sub(r"\bmyself\b", "themselves", s, flags=re.IGNORECASE)
            s = re.sub(r"\b(?:[Mm]y|[Mm]ine)\b(?!-)", name + "'s", s)
            s = re.sub(r"\b[Mm]e\b(?!-)", name, s)
            while (i := re.search(r"\bI\b(?!['’])", s)) is not None:
                s = s[:i.start()] + name + _agree(s[i.end():])
        else:
            s = re.sub(r"(?i)\byourself\b", "themselves", s)
            s = re.sub(r"(?i)\byours?\b(?!-)", name + "'s", s)
            # "you" as the subject: at the start of a clause or before a verb; else an object
            while (y := re.search(r"(?i)(?:^|[,;:–—-]\s*|\b(?:and|but|so|if|when|because|that|as|sure|think|hope"
                                  r"|know|bet|guess|glad|seems?)\s+)(you)\b(?!['’])"
                                  rf"|\b(you)(?=\s+(?:{_SUBJECT_VERBS})\b)", s)) is not None:
                g = 1 if y.group(1) else 2
                s = s[:y.start(g)] + name + _agree(s[y.end(g):])
            s = re.sub(r"(?i)\byou\b(?!['’])", name, s)
    return s[:1].upper() + s[1:]


# name_the_group: a "we" that is the subject (not the two speakers' "we last talked",
# "we both"), an "our(s)"; at most GROUP_REWRITES of each in a sentence.
_WE_SUBJECT = re.compile(r"\b[Ww]e\b(?!['’])(?! (?:last|both|(?:just |first )?(?:talked|spoke|chatted|caught up"
                         r"|met)\b))")
_OUR = re.compile(r"\b[Oo]urs?\b")
GROUP_REWRITES = 16


def name_the_group(sentence: str, speaker: str) -> str:
    """'Last week we had a blast at a concert with our kids' -> "Last week Ana's group had a
    blast at a concert with their kids": a note names who it is about, and the "we" of a
    statement is the speaker with others (family, team, friends), whoever they are. The
    "we" of the two speakers ("since we last talked", "we both") is left as it is. "our"
    after the group is named is "their", before it the speaker's."""
    name = mid_sentence(speaker)
    group = f"{name}'s group"
    s = sentence
    for pat, rep in ((r"\b[Ww]e(?:'re|’re| are)\b", group + " is"), (r"\b[Ww]e(?:'ve|’ve) got\b", group + " has"),
                     (r"\b[Ww]e(?:'ve|’ve)", group + " has"), (r"\b[Ww]e(?:'d|’d)", group + " would"),
                     (r"\b[Ww]e(?:'ll|’ll)", group + " will"), (r"\b[Ww]e were\b", group + " was"),
                     (r"\b[Uu]s\b", group), (r"\b[Oo]urselves\b", "themselves")):
        s = re.sub(pat, rep, s)
    # "we" as the subject, its verb in agreement with the group ("we go" -> "Ana's group goes")
    # (each rewrite reads the sentence again: a bounded number of them, as speech has)
    for _ in range(GROUP_REWRITES):
        w = _WE_SUBJECT.search(s)
        if w is None:
            break
        s = s[:w.start()] + group + _agree(s[w.end():])
    for _ in range(GROUP_REWRITES):
        o = _OUR.search(s)
        if o is None:
            break
        named = group in s[:o.start()]
        word = ("their" if named else name + "'s") + ("s" if named and o.group(0).endswith("s") else "")
        s = s[:o.start()] + word + s[o.end():]
    return s[:1].upper() + s[1:]


def entities_in(text: str, speaker: str | None = None) -> list[tuple[str, str]]:
    """(name, kind) pairs: the speaker, proper nouns, paths and identifiers."""
    out: dict[str, str] = {}
    if speaker and not speaker.startswith("The "):
        out[speaker] = "person"
    text = _MARKER.sub(" ", text)
    for m in _PROPER.finditer(text):
        words = [w for w in m.group(0).strip(" '’-").split() if w not in _NOT_ENTITY]
        if not words:
            continue
        name = " ".join(words)
        initial = m.start() == 0 or _SENTENCE_START.search(text[:m.start()]) is not None
        if len(name) < 2 or (initial and len(words) == 1 and name == m.group(0).split()[0]):
            continue  # a capitalised first word of a sentence is usually not a name
        out.setdefault(name, "thing")
    for e in summarize.entities(text):
        if ("/" in e or "." in e or "_" in e or "(" in e) and not re.fullmatch(r"[\d.,:/-]+", e) \
                and not e.startswith("/") and not e.startswith("//"):
            out.setdefault(e, "path" if "/" in e else "identifier")
    return list(out.items())[:12]


def parse_due(sentence: str, said: datetime | None) -> datetime | None:
    m = _DUE.search(sentence)
    if not m or said is None:
        return None
    d = m.group("d").lower()
    base = said.replace(hour=17, minute=0, second=0, microsecond=0)
    if d in ("today", "tonight"):
        return base
    if d == "tomorrow":
        return base + timedelta(days=1)
    if d == "week":
        return base + timedelta(days=7)
    if d == "month":
        return base + timedelta(days=30)
    days = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    if d in days:
        return base + timedelta(days=(days.index(d) - base.weekday() - 1) % 7 + 1)
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", d):
            return datetime.fromisoformat(d).replace(hour=17, tzinfo=said.tzinfo)
        mon, dd = d.split()
        month = [x[:3].lower() for x in MONTHS].index(mon[:3])
        due = base.replace(month=month + 1, day=int(dd))
        return due if due >= base - timedelta(days=1) else due.replace(year=due.year + 1)
    except (ValueError, IndexError):
        return None
