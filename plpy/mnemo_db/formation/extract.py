"""Offline memory extraction: deterministic rules over a window of messages.

The default implementation of the `extract` job (the helper LLM one is in
helper_llm.py; both produce the same candidate dicts). Each message is segmented:

- user / assistant turns are split into sentences; first-person statements become
  typed candidates: facts (subject / predicate / object; `functional` predicates such
  as lives_in hold one value at a time, so a newer one supersedes), preferences,
  instructions, decisions (rationale, alternatives), tasks and open loops (due and
  expiry). An imperative to the assistant is a request (a task). An instruction is
  durable only when it is addressed to the assistant about its behaviour from now on,
  and not part of a request's prompt scaffolding or role-play. A turn's informative
  statements without a type become one `event` fact, rewritten in the third person
  (speaker and addressee named, verbs in agreement) with the day it was said, so a
  question that names the speaker or the date finds it; reactions to the other
  speaker, thanks, platitudes and passing remarks are not written down.
- the assistant, when it is the AI (a message without a name), speaks for the work:
  its decisions, commitments and what it reports having done are kept, its opinions,
  hedges, advice and small talk are not. A named assistant is a participant (a person
  in an imported conversation) whose statements about themselves count. A turn with
  no candidate at all is offered as a `note`, which admission control rejects.
- tool results become `file_context` (a file read, keyed by path: a re-read
  supersedes), `error_context` (tracebacks, failures) or `tool_result`; routine
  commands (ls, git status, pwd ...) are flagged so admission rejects them.

Every candidate keeps the ids of the messages it came from. Nothing here touches the
database; the wording is grammar.py's; formation.py deduplicates, resolves conflicts, scores admission and writes.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from ..lifecycle import summarize
from ..timestamps import day_text, said_suffix
from . import personal
from .grammar import (
    _CLAUSE_RE,
    _SENT_RE,
    PAST_ED,
    clean,
    entities_in,
    mid_sentence,
    name_the_group,
    parse_due,
    speaker_of,
    third_person,
)

_FUNCTIONAL = frozenset({"lives_in", "from", "works_at", "occupation", "name", "age", "email",
                         "phone", "birthday", "partner", "wife", "husband", "uses"})

_FACT_RULES: list[tuple[str, re.Pattern]] = [
    ("lives_in", re.compile(
        r"(?i:\bI(?:'ve| have)? (?:now |currently |just )?(?:live|am living|'m living|reside|moved"
        r"|have moved|relocated|am moving|'m moving)(?: back)? (?:in|to) )"
        r"(?P<obj>(?:the )?[A-Z][\w'’-]+(?:[ ,]+[A-Z][\w'’-]+)*)")),
    ("from", re.compile(
        r"(?i:\bI(?:'m| am) (?:originally )?from |\bI grew up in )"
        r"(?P<obj>[A-Z][\w'’-]+(?:[ ,]+[A-Z][\w'’-]+)*)")),
    ("works_at", re.compile(
        r"(?i:\bI (?:now |currently )?(?:work|am working|'m working) (?:at|for) "
        r"|\bI(?:'ve| have)? (?:just )?(?:joined|started (?:a job |working )?at) )"
        r"(?P<obj>[A-Z][\w&.'’-]+(?: [A-Z][\w&.'’-]+)*)")),
    ("occupation", re.compile(
        r"(?i:\bI work as (?:an? )?|\bmy job is (?:an? )?|\bI(?:'m| am) (?:an? )(?=\w+ (?:by profession|at \w)))"
        r"(?P<obj>[\w -]{3,40}?)(?= by profession| at |[,.!;]|$)")),
    ("name", re.compile(r"(?i:\bmy name is |\bcall me )(?P<obj>[A-Z][\w'’-]+(?: [A-Z][\w'’-]+)?)")),
    ("age", re.compile(r"(?i:\bI(?:'m| am) )(?P<obj>\d{1,3})(?i: years? old)")),
    ("favorite", re.compile(
        r"(?i:\bmy (?:all-time )?fav(?:ou?rite)? )(?P<what>[a-z]+(?: [a-z]+)?)(?i: is | are )"
        r"(?P<obj>[^,.!?;]{2,60})")),
    ("my", re.compile(
        r"(?i:\bmy )(?P<what>email|e-mail|phone number|phone|birthday|wife|husband|partner|"
        r"girlfriend|boyfriend|dog|cat|editor|shell|timezone|time zone|os|laptop)(?i: is | are )"
        r"(?P<obj>[^,!?;]{2,60}?)(?=[,!?;]|\.\s|\.$|$)")),
    ("uses", re.compile(
        r"(?i:\b(?:I|we) (?:now |currently |mainly |mostly )?(?:use|are using|'re using|am using|'m using|switched to"
        r"|moved to|migrated to) )(?P<obj>[A-Z][\w.+#-]*(?: [A-Z0-9][\w.+#-]*)?)(?= for |[,.!?;]|$)")),
]
_PREF = re.compile(
    r"(?i)\b(?:I|we)(?: (?:(?:really|much|strongly|definitely|probably|usually|generally|mostly|actually|also|still"
    r"|absolutely|totally|just|truly|personally|kind of|kinda|sort of|maybe|always|never|sometimes|do(?:n't| not))"
    r" )*"
    r"(?P<verb>prefer|like|love|enjoy|hate|dislike|can't stand|cannot stand|would rather)|(?P<rather>'d|’d) rather)"
    r" (?P<obj>[^.!?;]{3,120})")
# A durable instruction: addressed to the assistant (an imperative, or "I want you to
# ...") and about its behaviour from now on (a standing marker), not one request's.
_INSTR = re.compile(
    r"(?i)^(?:(?:please|so|and|also|ok(?:ay)?|one more thing)[,:]? )*(?:(?:from now on|in (?:the )?future|going forward"
    r"|from here on|by default|for (?:all|every) (?:future )?\w+|whenever \w[^,]*),? )?"
    r"(?:please |you should |you must |i(?: want| need| would like|'d like|’d like) you to )?"
    r"(?:always|never|don't|do not|make sure|remember to|be sure to|avoid|use|prefer|stop|keep|call me|refer to|"
    r"address me|answer|reply|respond|write|format|speak|talk|include|add|put|give|show|explain|ask)\b")
_STANDING = re.compile(
    r"(?i)\b(?:from now on|in (?:the )?future|going forward|from here on|by default|always|never|whenever|every time"
    r"|each time|any ?time|from today|for (?:all|every) (?:future )?\w+|(?:don't|do not) ever|remember to"
    r"|call me|refer to me|address me)\b")
# Prompt scaffolding and role-play: the rules inside it belong to that one request.
_SCAFFOLD = re.compile(
    r"(?im)^\s*(?:you are (?:an?|the|my)\b|act as\b|pretend\b|imagine (?:you|that you)\b|role-?play\b|let's play\b"
    r"|your (?:task|job|role|goal) is\b|system:|instructions?:|#{1,6}\s|```)|\{\s*\"|<\w+>")
# A request to the assistant: an imperative (optionally after "please"), or "can you ...?".
_REQUEST = re.compile(
    r"(?i)^(?:please,? |(?:can|could|would|will) you (?:please )?|i(?: want| need| would like|'d like|’d like) you to )"
    r"(?P<what>\w.+)|^(?P<verb>help|write|create|make|add|fix|show|tell|give|explain|find|list|generate|summari[sz]e"
    r"|translate|draft|review|check|update|remove|delete|rename|refactor|implement|build|run|deploy|send|book|set up"
    r"|change|convert|describe|compare|suggest|recommend|plan|install|move|draw|design|debug|test|look up|search"
    r"|calculate|analy[sz]e|organi[sz]e|prepare|schedule|rewrite|format|proofread|edit|outline)\b(?P<rest>.*)")
_DECISION = re.compile(
    r"(?i)\b(?:we|i|the team)(?:'ve| have)? (?:decided|agreed|chose|have chosen|opted|settled on|"
    r"will go with|are going with|went with|picked)\b|\b(?:we|i)(?:'ll|’ll) go with\b|\b(?:we|i)(?:'re|’re) going with\b"
    r"|^decision:|^let's (?:use|go with|switch to|adopt|keep using|stick with)\b|\bthe decision is\b")
_RATIONALE = re.compile(r"(?i)\b(?:because|since|as it|so that|due to|given that|the reason is)\b\s*(?P<why>.+)")
_ALTERNATIVE = re.compile(
    r"(?i)\b(?:instead of|rather than|over|not|and not)\s+(?P<alt>[^,.;]{2,60}?)(?=\s+(?:because|since|as|so|due)\b|[,.;]|$)")
# The two-word actions of a commitment (_TASK; vague_commitment skips both words).
_PHRASAL_ACTIONS = ("set up", "follow up", "get back", "look into", "find out", "pick up", "sign up", "fill out")
# Task markers end with a colon or a dash ("TODO: ...", "Task - ..."), so "Todoist" or
# "Tasks are ..." are not tasks; commitments name a first-person subject and an action.
_TASK = re.compile(
    r"(?i)^(?:todo|to-do|action item|next step|task)\s*[:–—-]\s*(?P<t>\S.+)|^TODO\b\s*(?P<t3>\S.+)|"
    r"\b(?:I|we)(?:'ll|’ll|'m going to|’m going to|'re going to|’re going to| (?:need to|have to|must|should|will"
    r"|am going to|are going to)) (?:(?:still|also|really|definitely|first) )?"
    r"(?P<t2>(?:finish|fix|write|send|call|email|review|deploy|ship|update|add|remove|book|buy|pay|"
    r"submit|prepare|schedule|check|test|migrate|refactor|document|clean|renew|file|order|"
    r"apply|register|cancel|return|move|" + "|".join(_PHRASAL_ACTIONS) + r")\b.+)")
# "remind me" only as a request ("Remind me to ...", "can you remind me", "I need you
# to remind me"): "these moments remind me to slow down" and "a painting in my room to
# remind me to stay true" are not open loops. "Sorry I didn't get back to you" is an
# apology, not a promise to.
_LOOP = re.compile(r"(?i)(?:^|\b(?:please|can you|could you|will you|would you|(?:want|need|'d like|would like|ask|asked) you to)\s+)remind me\b|"
                   r"\b(?:follow up|(?<!n't )(?<!not )get back to (?:you|me)|let me (?:check|find out)|"
                   r"i'll find out|we'll revisit|revisit this|open question|tbd|to be decided)\b")
# What a commitment's action may hold besides its verb and still name nothing: "I'll
# check it out", "I'll add it to my list", "I'll look into it", "I'll send it to you
# later". What "it" is lies in an earlier turn; a note-taker who cannot say what will
# be checked writes nothing.
_VAGUE_WORDS = frozenset([
    "it", "them", "that", "this", "those", "these", "one", "out", "up", "to", "into", "on", "for", "at", "in", "of",
    "and", "back", "later", "soon", "again", "first", "tomorrow", "sometime", "definitely", "asap", "now", "my",
    "your", "our", "his", "her", "their", "list", "you", "me", "him", "us", "let", "know", "what", "i", "think",
    "thinks", "how", "goes"])


def vague_commitment(action: str) -> bool:
    """A commitment's action (the _TASK match after its subject) whose words after the
    verb name nothing (_VAGUE_WORDS)."""
    words = re.findall(r"[a-z']+", action.lower())
    verb = 2 if " ".join(words[:2]) in _PHRASAL_ACTIONS else 1
    return all(w in _VAGUE_WORDS for w in words[verb:])


_FILLER = re.compile(
    r"(?i)^(?:sure|ok(?:ay)?|thanks?(?: you)?|got it|sounds good|will do|yes|no|yep|nope|great|cool|"
    r"perfect|alright|right|hmm+|hi|hello|hey|bye|lol|haha)\b[^.!?]{0,40}[.!?]*$")

_READ_TOOLS = re.compile(r"(?i)^(?:read|read_?file|open_?file|view|view_?file|cat|get_?file|"
                         r"fs_read|file_read|str_replace_based_edit_tool)$")
_SHELL_TOOLS = re.compile(r"(?i)^(?:bash|shell|sh|run|run_?command|exec|execute|terminal|cmd)$")
_ROUTINE_CMD = re.compile(
    r"^\s*(?:ls|ll|la|pwd|cd|clear|whoami|date|echo|which|env|history|tree|du|df|git (?:status|"
    r"branch|log --oneline|remote -v|fetch|stash list)|true)\b")
_ROUTINE_TOOLS = re.compile(r"(?i)^(?:ls|list_?dir|list_?files|list_?directory|glob|pwd|git_?status)$")
_ERROR = re.compile(r"(?m)Traceback \(most recent call last\)|^\s*(?:\w+)?(?:Error|Exception)\b[:\s]|"
                    r"\berror(?:\[E\d+\])?:|\bFAILED\b|\bfatal:|\bpanic:|\bSegmentation fault\b|"
                    r"exit (?:code|status) [1-9]")
_PATH_ARGS = ("path", "file_path", "filepath", "file", "filename", "target_file", "uri")


# ------------------------------------------------------------------ candidates
def _cand(kind: str, content: str, m: dict, **kw) -> dict:
    c = {"kind": kind, "content": clean(content), "source_message_ids": [m["message_id"]],
         "valid_from": m.get("created_at"), "session_id": m.get("session_id"),
         "provenance_type": "user_stated" if m["role"] == "user" else "fact",
         "confidence": 0.7, "entities": entities_in(content, kw.pop("speaker", None))}
    c.update(kw)
    return c


_LEAD = re.compile(
    r"(?i)^(?:(?:hey|hi|hello|wow|whoa|yeah|yes|yep|yup|oh|ah|aw+|well|haha|lol|omg|hmm+|ok(?:ay)?|sure"
    r"|great|cool|nice|awesome|congrats|congratulations)\b(?:,? [A-Z]\w+)?(?: \w+)?\s*[,!.]+\s*)+")
# A sentence that opens with a verb in the imperative addresses the listener ("Check out
# this piece I made"): not a statement about the speaker.
_IMPERATIVE = re.compile(
    r"(?i)^(?:please |just |do )?(?:check|look|see|take|let's|let me|imagine|guess|keep|go|try|come|have a look|enjoy"
    r"|remember|don't|stay|hang|tell|give|show|send|make sure|be sure|get|feel free)\b")
_ASKING = re.compile(r"(?i)^(?:could|can|would|will|do|did|does|should|shall|may|have|has|are|were) (?:you|ya|u)\b")
_THANKS = re.compile(r"(?i)^(?:thanks|thank you|thx|ty)\b")
_SINGULAR = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|I’m|I’ve|I’d|I’ll|my|me|myself|mine)\b(?!-)", re.IGNORECASE)
_PLURAL = re.compile(r"(?i)\b(?:we|we're|we've|we'd|we'll|our|us)\b")
# A first person reacting to the other speaker ("I'm so proud of you", "I hope you ..."):
# about the addressee, not a note about the speaker.
_REACTION = re.compile(
    r"(?i)\bI(?:'m|’m| am)? (?:(?:so|really|very|super|just|totally|truly|too|also) )*(?:proud|happy|glad|sorry|thrilled"
    r"|excited|thankful|grateful|jealous|impressed|amazed|stoked|hope|bet|wish|admire|appreciate|agree|understand"
    r"|know|think|believe|guess|can tell|can't wait|cannot wait|love (?:that|how|the way|your|you|it)|like (?:that|how"
    r"|your)|mean|miss you|feel you|get (?:it|you|that))\b")
# A first person guessing at the other speaker's experience or reassuring them ("I bet
# those rides brought back memories", "I can imagine how proud you must feel", "I'm
# sure it'll be a blast", "I'll keep you posted"): a courtesy, not something the speaker
# asserts.
_HEDGE = re.compile(
    r"(?i)^I(?:'m|’m| am)? (?:(?:just|really|totally|so|pretty|quite) )*(?:bet|can imagine|can only imagine|sure)\b"
    r"|^I(?:'ll|’ll| will) keep (?:you|my fingers)\b")
# A wish for the listener ("Good luck with your project", "Wishing you a great day",
# "Congrats on the show, I'll be tuning in"): a courtesy, which says nothing about the speaker.
_WELL_WISH = re.compile(
    r"(?i)^(?:wishing you|(?:I'm|I’m|I am|I) (?:just )?wish(?:ing)? you|good luck|best of luck|congrats|congratulations"
    r"|happy birthday)\b")
# A promise to report back to the listener ("I'll let you know how it goes", "If I need
# anything, I'll let you know", "I'll fill you in when I get back"): it keeps the
# conversation going and says nothing about the speaker; a note-taker skips it, and keeps
# what else the sentence says ("I'll try the new recipe and let you know").
_REPORT_BACK = re.compile(
    r"(?i)(?:^(?:if|when|once) [^,]+, |^|,? (?:and|but|so) |, )(?:I(?:'ll|’ll| will)(?: (?:definitely|surely|also"
    r"|be sure to|make sure to))* )?(?:let you know|keep you (?:posted|updated|in the loop)|update you|fill you in"
    r"|get back to you|give you a shout|text you|contact you)\b.*$")
# What a liking points at without naming it ("I love them so much", "I love this quote",
# "I love those games too", not "I love those old arcade games"): what is liked lies in
# another turn, so the sentence is no preference of its own; it is judged as a plain
# statement of the turn, kept only with the rest of what the turn says.
_POINTER = re.compile(r"(?i)(?:it|them|this|that|these|those|their|its)\b(?! (?:is|are|was|were)\b)")


def pointer_only(obj: str) -> bool:
    """What is liked is a pointer with at most one specific word after it ("this quote")."""
    ptr = _POINTER.match(obj)
    return bool(ptr) and len(_specific_words(obj[ptr.end():])) < 2


# A resolve to keep at it ("I'll keep pushing", "I won't give up on my dreams", "I'm gonna
# keep working hard to make it happen"): encouragement the speaker gives themselves, which
# names no action; a note-taker writes down what they do, not that they will persevere.
# It is dropped when, past the resolve, it says nothing but effort (_EFFORT_WORDS).
# (the adverb runs are possessive, *+: two runs of the same words around an optional
# word split a long run of them in every way, a quadratic search: 6 s for 8,000 words)
_RESOLVE = re.compile(
    r"(?i)^(?:I(?:'ll|’ll| will|'m|’m| am| won't| won’t)? )?(?:(?:just|definitely|really|still|also|not|never)\s+)*+"
    r"(?:gonna|going to|will|won't|won’t)?\s*(?:(?:just|definitely|really|still|also|not|never)\s+)*+"
    r"(?:keep(?: on)?|continue|give up|giving up|quit|stop|do my best|try my best)\b(?P<rest>.*)")
_EFFORT_WORDS = frozenset([
    "pushing", "grinding", "plugging", "working", "trying", "striving", "chasing", "pursuing", "going", "moving",
    "ahead", "forward", "dreams", "goals", "myself", "step", "doing", "reaching", "matter", "promise", "make",
    "happen", "work", "stay", "staying", "way", "come"])


def resolve_only(s: str) -> bool:
    """A first-person resolve to keep going that names nothing past the effort."""
    r = _RESOLVE.match(s)
    return bool(r) and not [w for w in _specific_words(r.group("rest")) if w not in _EFFORT_WORDS]


# A first person plural that is only "us" / "our", with no "we" doing anything, in a
# sentence that tells no event ("Nature has a way of making us feel alive", "It's always
# a shock where life will take us next", "Having support is key to reaching our goals"):
# a maxim about people in general, not a note about the speaker. An event names its time
# or happens to the group ("Last weekend our city held a parade", "A car hit us").
_WE = re.compile(r"(?i)\bwe\b")
_EVENT_TO_US = re.compile(
    r"(?i)\b(?:last|yesterday|ago|next \w+|tomorrow|tonight|this (?:week|month|year|weekend)|(?:mon|tues|wednes|thurs"
    r"|fri|satur|sun)day)\b|\b(?:" + PAST_ED + r"|took|gave|hit|told|taught|sent|brought|wrote|made|let|left|got) (?:us|our)\b"
    r"|\bour (?:\w+ ){1,2}(?:" + PAST_ED + r"|got|went|took|came|made|had|was|were)\b")
# What makes a "we" statement an event or a plan rather than a sentiment: a past tense
# (PAST_ED: "We all need an outlet" is a maxim); "need to" / "have to" is a plan like
# "want to".
_PAST_OR_PLAN = re.compile(
    r"(?i)\b(?:" + PAST_ED + r"|went|got|made|took|saw|came|gave|found|felt|had|did|bought|built|ran|wrote|began|met|won"
    r"|going to|planning|plan to|thinking (?:about|of)|want to|hope to|need to|have to|next|last|yesterday|tomorrow|tonight"
    r"|ago|since|this (?:week|month|year|weekend))\b")
# A statement of the AI assistant about the work it did ("I updated settings.py"):
# assertions about the work stay, its opinions, hedges and pleasantries do not.
_WORK_DONE = re.compile(
    r"(?i)\bI(?:'ve|’ve| have)? (?:just |now |also |already )?(?:\w+ed|made|wrote|ran|set|put|built|found|rewrote"
    r"|split|moved|kept|left|broke|chose|took)\b")
_STOP = frozenset([
    "i", "me", "my", "myself", "mine", "we", "our", "us", "you", "your", "yours", "it", "its", "this",
    "that", "these", "those", "a", "an", "the", "and", "or", "but", "so", "to", "of", "in", "on", "at",
    "for", "with", "from", "by", "as", "is", "am", "are", "was", "were", "be", "been", "being", "have",
    "has", "had", "do", "does", "did", "not", "no", "yes", "just", "really", "very", "too",
    "also", "all", "some", "any", "much", "many", "more", "most", "can", "could", "will", "would",
    "should", "it's", "that's", "i'm", "i've", "i'd", "i'll", "there", "here", "what", "when", "how",
    "why", "who", "which", "then", "than", "up", "out", "about", "get", "got", "like", "lol", "haha",
    "oh", "wow", "yeah"
])


# Words of affect, evaluation and platitude: a statement made only of these ("Jon will
# keep going and never quit", "Life's unpredictable, but moments like these remind us
# how important our loved ones are") says nothing a note would keep.
_GENERIC = frozenset([
    "love", "loved", "loves", "lovely", "great", "good", "nice", "awesome", "amazing", "incredible",
    "wonderful", "fantastic", "cool", "fun", "happy", "glad", "proud", "grateful", "thankful",
    "excited", "thrilled", "lucky", "blessed", "special", "moment", "moments", "life", "time", "times",
    "thing", "things", "stuff", "lot", "lots", "way", "ways", "super", "best", "better", "hard",
    "keep", "keeps", "keeping", "going", "gonna", "wanna", "gotta", "feel", "feels", "felt", "feeling",
    "make", "makes", "made", "mean", "means", "meant", "remind", "reminds", "important", "true",
    "totally", "definitely", "everything", "something", "anything", "someone", "everyone", "people",
    "kind", "sort", "bit", "little", "big", "whole", "sure", "hope", "hopefully", "wish", "want",
    "wants", "need", "needs", "know", "knows", "think", "thinks", "believe", "believes", "guess",
    "appreciate", "appreciates", "support", "supportive", "motivated", "motivate", "motivates",
    "optimistic", "positive", "journey", "dream", "dreams", "passion", "world", "difference",
    "inspiring", "inspired", "inspire", "strength", "courage", "rewarding", "worth", "enjoy",
    "enjoys", "tough", "challenging", "challenge", "challenges", "together", "others", "quit", "give",
    "up", "right", "well", "still", "ever", "never", "always", "even", "every", "back", "lately",
    "today", "day", "days", "beautiful", "cute", "sweet", "wow", "yay", "sounds",
    "agree", "agrees", "vibe", "vibes", "joy", "peace", "happiness", "helps", "help", "care",
    "ones", "closer", "amazed", "forward", "looking", "hear", "heard", "share", "sharing",
    "chat", "chatting", "talk", "talking", "catch", "touch",
])


# The specific words (see _specific_words) a turn's plain statements need to be noted:
# about one clause with its details ("ran a charity race for mental health").
NOTE_MIN_WORDS = 4
# A turn whose statements tell something of the speaker's own life (personal.read:
# what they did, are doing, plan) is noted with fewer: "I watched Little Women
# recently" is a note; "it was great" is not (issue 42).
NOTE_MIN_WORDS_PERSONAL = 4


class Turn:
    """Who says one message, to whom, and in what kind of conversation."""

    def __init__(self, m: dict, addressee: str, ai_present: bool):
        self.m = m
        self.speaker = speaker_of(m)
        self.addressee = addressee
        # An unnamed assistant is the AI; a named one is a participant (a person in an
        # imported two-party conversation) whose statements about themselves count.
        self.ai = m["role"] == "assistant" and not m.get("name")
        self.to_ai = m["role"] == "user" and ai_present
        self.scaffold = bool(self.to_ai and (_SCAFFOLD.search(m["content"] or "")
                                             or len((m["content"] or "").split()) > 150))


def _specific_words(s: str) -> list[str]:
    """The words that carry what a statement is about (not pronouns, function words,
    affect or platitude)."""
    return [w for w in re.findall(r"[a-z][a-z'’]+", s.lower())
            if w not in _STOP and w not in _GENERIC and len(w) > 2]


def _request(s: str, t: Turn) -> str | None:
    """'Please help me onboard' -> 'help them onboard' (a request to the assistant)."""
    r = _REQUEST.match(s)
    if not r or not t.to_ai or t.scaffold:
        return None
    what = (r.group("what") or (r.group("verb") + r.group("rest"))).rstrip(" ?.!")
    for pat, rep in ((r"\bmyself\b", "themselves"), (r"\b[Mm]y\b", "their"), (r"\b[Mm]ine\b", "theirs"),
                     (r"\b[Mm]e\b(?!-)", "them"), (r"\bI(?:'m|’m| am)\b", "they are"), (r"\bI\b", "they")):
        what = re.sub(pat, rep, what)
    return what[:1].lower() + what[1:] if not what[:2].isupper() else what


# What a note-taker leaves out of a statement, so that the note is shorter than what
# was said: an opener that only ties it to the conversation ("Since we last chatted,",
# "Actually,", "So"), and a last clause that only says how it was ("- it was really
# rewarding", ", which is pretty exciting", "and it was so powerful"): a pronoun, a
# linking verb and an evaluation naming nothing (at most one specific word, no name
# or number). What happened stays, in the speaker's words.
_OPENER = re.compile(
    r"(?i)^(?:(?:since (?:we|I) (?:last )?(?:chatted|talked|spoke|caught up|saw each other)(?: last)?|actually"
    r"|so|and|anyway|anyways|plus|also|by the way|oh yeah|honestly|basically|guess what)\b[,!:?]?\s+)+")
_EVALUATION = re.compile(
    r"(?i)(?:\s+[–—-]+\s*|-\s+|,\s+|,?\s+(?:and|but)\s+)(?P<c>(?:it|that|this|which|they|these|those)"
    r"(?:'s|’s|'re|’re| is| was| are| were| has been| have been| had been| felt| feels| looks?| looked| sounds?"
    r"| seemed| seems)\b[^.;!?–—,]*)[.!]*$")
_INTENSIFIERS = frozenset(["pretty", "quite", "truly", "such", "totally", "incredibly", "extremely"])


def compact(s: str) -> str:
    """A statement as a note keeps it: without its opener and its evaluating last
    clauses (_OPENER, _EVALUATION)."""
    s = _OPENER.sub("", s)
    while (e := _EVALUATION.search(s)) is not None:
        words = [w for w in _specific_words(e.group("c")) if w not in _INTENSIFIERS]
        if len(words) > 1 or re.search(r"\d|(?<!^)\b[A-Z]", e.group("c")):
            break
        s = s[:e.start()]
    return s[:1].upper() + s[1:] if s else s


def _sentence_candidates(s: str, t: Turn) -> list[dict]:
    """Typed candidates of one sentence (first match per family)."""
    m, speaker = t.m, t.speaker
    said = m.get("created_at")
    when = said_suffix(said)
    s = compact(_REPORT_BACK.sub("", personal.statement_of(s)).rstrip(" ,;-–—")).rstrip(" ,;-–—")
    if (len(s) < 8 and not personal.read(s)) or resolve_only(s) or personal.procedure(s):
        return []  # an agent's next step is the work going on, never a decision
    # (a question without its mark, "Could you tell me more about it", is one too)
    question = s.rstrip().endswith("?") or _ASKING.match(s) is not None
    # "I think I prefer tea": the rules read the statement without its hedge; the
    # memory keeps the speaker's words, hedge and all, with less confidence.
    core, hedged = personal.unhedge(s)
    doubt = 0.15 if hedged else 0.0

    def rewrite(x: str) -> str:
        return third_person(x, speaker, t.addressee)

    if _DECISION.search(s) and not question:
        why = _RATIONALE.search(s)
        alts = [a.group("alt").strip() for a in _ALTERNATIVE.finditer(s)]
        return [_cand("decision", rewrite(s), m, speaker=speaker,
                      decision=clean(s), rationale=[clean(why.group("why"))] if why else [],
                      alternatives=alts, confidence=0.8)]
    if t.to_ai and not t.scaffold and ((not question and _INSTR.match(s) and _STANDING.search(s))
                                       or personal.standing_instruction(s)):
        return [_cand("instruction", f"Instruction from {mid_sentence(speaker)}: {s}",
                      m, speaker=speaker, provenance_type="instruction", confidence=0.8)]
    loop = _LOOP.search(s)
    task = _TASK.search(s)
    if task and task.group("t2") and vague_commitment(task.group("t2")):
        return []
    if (task or loop) and not (t.scaffold and not task):
        title = clean((task.group("t") or task.group("t3") or task.group("t2")) if task else s).rstrip(".!")
        title = _request(title, t) or third_person(title, speaker, t.addressee) if not task or not task.group("t2") \
            else title
        due = parse_due(s, said)
        kind = "open_loop" if loop else "task"
        expires = (due or said) + timedelta(days=7 if due else 30) if (due or said) else None
        label = "Open loop" if loop else "Task"
        body = rewrite(s) if task and task.group("t2") or loop else title
        return [_cand(kind, f"{label} ({speaker}): {body.rstrip('.!')}" + (f" (due {day_text(due)})" if due else "") + when,
                      m, speaker=speaker, title=title, status="open", due_at=due, expires_at=expires, confidence=0.7)]
    request = _request(s, t)
    if request:
        title = request[:1].upper() + request[1:]
        return [_cand("task", f"Request: {mid_sentence(speaker)} asked {mid_sentence(t.addressee)} to {request}{when}",
                      m, speaker=speaker,
                      title=title, status="open", due_at=parse_due(s, said),
                      expires_at=said + timedelta(days=7) if said else None, confidence=0.6)]
    if t.ai:
        # The AI's own statements: only what it reports having done in the work.
        if (_WORK_DONE.search(s) and not question
                and any(("/" in e or "." in e or "_" in e or "(" in e or any(ch.isdigit() for ch in e))
                        for e in summarize.entities(s))):
            return [_cand("fact", rewrite(s) + when, m, speaker=speaker, subject=speaker, predicate="reported",
                          object=clean(s), functional=False, confidence=0.6)]
        return []

    for pred, rx in _FACT_RULES:
        f = rx.search(s)
        if not f:
            continue
        obj = clean(f.group("obj")).rstrip(".,'’ ")
        if not obj:
            continue
        predicate = pred
        if pred in ("favorite", "my"):
            predicate = ("favorite_" if pred == "favorite" else "") + re.sub(r"\W+", "_", f.group("what").lower())
        functional = pred in _FUNCTIONAL or pred in ("favorite", "my")
        return [_cand("fact", rewrite(s) + when, m, speaker=speaker, subject=speaker, predicate=predicate,
                      object=obj, functional=functional, confidence=0.8 - doubt)]
    p = _PREF.search(core)
    if (p and not question and not _REACTION.search(core) and _specific_words(p.group("obj"))
            and not pointer_only(p.group("obj"))):
        verb = (p.group("verb") or "would rather").lower()
        low = core.lower()
        neg = re.search(r"n't|n’t|\bnot\b|\bnever\b", low[p.start():p.end()]) is not None or verb in (
            "hate", "dislike", "can't stand", "cannot stand")
        return [_cand("preference", name_the_group(rewrite(s), speaker) + when, m, speaker=speaker,
                      subject=speaker, predicate="dislikes" if neg else "likes",
                      object=clean(p.group("obj")), functional=False,
                      provenance_type="preference" if m["role"] == "user" else "fact", confidence=0.75 - doubt)]
    own = None if question else personal.read(s)
    if own and own.category == "preference" and not own.relation and _specific_words(core):
        return [_personal_candidate(s, core, own, t, doubt)]
    if own and own.category != "experience" and (_specific_words(core) or re.search(r"\d", core)):
        # a plain statement that is always noted (_merge_statements): alone in its
        # turn, a fact typed by what it is about
        return [_cand("fact", name_the_group(rewrite(s), speaker), m, speaker=speaker, subject=speaker,
                      predicate="stated", object=clean(s), functional=False, confidence=0.75 - doubt,
                      personal=own)]
    # An informative statement about the speaker: an event or a fact, as a note-taker
    # would write it. Not: questions, small talk, reactions to the other speaker, a
    # "we" that is only a sentiment, a line with little content.
    singular = bool(_SINGULAR.search(s)) or own is not None
    if (question or _FILLER.match(s) or _THANKS.match(s) or _IMPERATIVE.match(s) or _HEDGE.match(s)
            or _WELL_WISH.match(s)
            or not (singular or _PLURAL.search(s))):
        return []
    if (personal.SECOND_PERSON.search(s) or len(s.split()) < 8) and (_REACTION.search(s) or not singular):
        return []
    if not singular and not _PAST_OR_PLAN.search(s):
        return []
    if not singular and not _WE.search(s) and not _EVENT_TO_US.search(s):
        return []  # a maxim about people in general
    if len(_specific_words(s)) < 2:
        return []
    if not _SINGULAR.search(s) and not _PLURAL.search(s):
        # "Just started learning": the speaker is its subject
        lead = personal.opener(s)
        s = s[:lead] + "I " + s[lead:lead + 1].lower() + s[lead + 1:]
    return [_cand("fact", name_the_group(rewrite(s), speaker), m, speaker=speaker, subject=speaker, predicate="stated",
                  object=clean(s), functional=False, confidence=0.6, personal=own)]


def _personal_candidate(s: str, core: str, own: personal.Personal, t: Turn, doubt: float) -> dict:
    """A liking said with a copula ("I'm really into woodworking", "Coffee is my
    favourite drink"; personal.read) as a preference."""
    speaker = t.speaker
    content = name_the_group(third_person(s, speaker, t.addressee), speaker) + said_suffix(t.m.get("created_at"))
    return _cand("preference", content, t.m, speaker=speaker, subject=speaker,
                 predicate="dislikes" if own.negated else "likes", object=clean(core), functional=False,
                 provenance_type="preference" if t.m["role"] == "user" else "fact", confidence=0.75 - doubt)


def _merge_statements(found: list[dict], when: str) -> list[dict]:
    """A turn's plain statements become one note, the way a person writes down what
    someone said, when together they carry NOTE_MIN_WORDS specific words (a passing
    remark does not); typed candidates (facts with a predicate, preferences, tasks ...)
    stay apart."""
    stated = [c for c in found if c["kind"] == "fact" and c.get("predicate") == "stated"]
    if not stated:
        return found
    rest = [c for c in found if c not in stated]
    about = [c.pop("personal", None) for c in stated]
    if len(_specific_words(" ".join(c["object"] for c in stated))) < NOTE_MIN_WORDS:
        # too little for a note, unless it tells of the speaker's own life: then those
        # statements alone are the note (not the passing remarks beside them)
        stated, about = [c for c, p in zip(stated, about, strict=True) if p], [p for p in about if p]
        least = 0 if any(p.category != "experience" for p in about) else NOTE_MIN_WORDS_PERSONAL
        if not stated or len(_specific_words(" ".join(c["object"] for c in stated))) < least:
            return rest  # a passing remark
    typed = [p for p in about if p and p.category != "experience"]
    if len(stated) == 1 and typed:
        # one statement of the speaker's own life: a fact typed by what it is about,
        # its subject the speaker or someone of theirs ("Ana's sister")
        p = typed[0]
        subject = f"{stated[0]['subject']}'s {p.relation}" if p.relation else stated[0]["subject"]
        return rest + [{**stated[0], "content": clean(stated[0]["content"].rstrip(" .!") + "." + when), "predicate": p.category,
                        "subject": subject, "negated": p.negated, "hedged": p.hedged}]
    first = stated[0]
    text = " ".join(c["content"].rstrip(" .!") + "." for c in stated)
    merged = {**first, "content": clean(text + when), "object": clean(" ".join(c["object"] for c in stated)),
              "entities": list(dict.fromkeys(e for c in stated for e in c["entities"]))[:12]}
    return rest + [merged]


def _tool_candidates(m: dict) -> list[dict]:
    text = m.get("content") or ""
    if not text.strip():
        return []
    tool, args = m.get("tool_name") or "", m.get("tool_args") or {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's limit
            args = {"command": args}
    if not isinstance(args, dict):
        args = {}
    command = str(args.get("command") or args.get("cmd") or "")
    path = next((str(args[k]) for k in _PATH_ARGS if isinstance(args.get(k), str) and args[k]), None)
    if path is None and _SHELL_TOOLS.match(tool):
        cat = re.match(r"^\s*(?:cat|head|tail|less|bat)\s+(?:-\S+\s+)*([^\s|;&>]+)\s*$", command)
        path = cat.group(1) if cat else None
    base = {"provenance_type": "tool_output", "tool": tool}
    if path and (_READ_TOOLS.match(tool) or _SHELL_TOOLS.match(tool)) and not _ERROR.search(text[:2000]):
        return [_cand("file_context", f"File {path}:\n{text}", m, source_key=f"file:{path}",
                      confidence=0.9, utility_hint=0.6, **base)]
    if _ERROR.search(text):
        what = f"Error from {tool}" + (f" `{command}`" if command else "")
        return [_cand("error_context", f"{what}:\n{text}", m, confidence=0.8, utility_hint=0.8, **base)]
    routine = bool(_ROUTINE_TOOLS.match(tool) or (command and _ROUTINE_CMD.match(command)))
    what = f"Output of {tool}" + (f" `{command}`" if command else "")
    return [_cand("tool_result", f"{what}:\n{text}", m, confidence=0.7, routine=routine,
                  utility_hint=0.0 if routine else 0.3, **base)]


def extract(messages: list[dict]) -> list[dict]:
    """Candidates from messages ({message_id, role, name, content, created_at,
    session_id, tool_name, tool_args}) in order."""
    out: list[dict] = []
    chat = [m for m in messages if m["role"] in ("user", "assistant")]
    ai_present = not any(m.get("name") for m in chat if m["role"] == "assistant")
    for m in messages:
        if m["role"] == "tool":
            out.extend(_tool_candidates(m))
            continue
        if m["role"] not in ("user", "assistant") or not (m.get("content") or "").strip():
            continue
        t = Turn(m, _addressee(m, chat), ai_present)
        found: list[dict] = []
        units = [u for s in _SENT_RE.split(m["content"]) for u in _joined_subjects(_CLAUSE_RE.split(s))]
        for s in units:
            s = _LEAD.sub("", clean(s))
            if len(s) < 8 and not personal.read(s):
                continue
            found.extend(_sentence_candidates(s, t))
        said = m.get("created_at")
        found = _merge_statements(found, said_suffix(said))
        if not found:
            text = clean(m["content"])
            filler = bool(_FILLER.match(text)) or len(text.split()) < 4 or t.ai
            found.append(_cand("note", f"{t.speaker}: {text}", m, speaker=t.speaker,
                               confidence=0.5, filler=filler))
        out.extend(found)
    return out


def _joined_subjects(clauses: list[str]) -> list[str]:
    """Clauses split at "and I" put back together where the first is only someone of
    the speaker's ("My girlfriend and I broke up"): one subject, not two clauses."""
    out: list[str] = []
    for c in clauses:
        if out and re.fullmatch(r"(?i)\s*(?:my|our) (?:\w+ ){0,2}\w+\s*", out[-1]) and re.match(r"I\b", c):
            out[-1] = f"{out[-1].rstrip()} and {c}"
        else:
            out.append(c)
    return out


def _addressee(m: dict, chat: list[dict]) -> str:
    """Who a message speaks to: the nearest message of the other role (before it,
    else after it), or the user / the assistant."""
    i = next(i for i, x in enumerate(chat) if x is m)
    for x in list(reversed(chat[:i])) + chat[i + 1:]:
        if x["role"] != m["role"]:
            return speaker_of(x)
    return "The assistant" if m["role"] == "user" else "The user"
