"""Offline memory extraction: deterministic rules over a window of messages.

The default implementation of the `extract` job (the helper LLM one is in
helper_llm.py; both produce the same candidate dicts). Each message is segmented:

- user / assistant turns are split into sentences; first-person statements become
  typed candidates: facts (subject / predicate / object; `functional` predicates such
  as lives_in hold one value at a time, so a newer one supersedes), preferences,
  instructions, decisions (rationale, alternatives), tasks and open loops (due and
  expiry). A statement with nothing typed but real content becomes an `event` fact,
  rewritten in the third person with the day it was said, so a question that names
  the speaker or the date finds it. A turn with no candidate at all is offered as a
  `note` (admission control usually rejects those: "Sure, I'll do that").
- tool results become `file_context` (a file read, keyed by path: a re-read
  supersedes), `error_context` (tracebacks, failures) or `tool_result`; routine
  commands (ls, git status, pwd ...) are flagged so admission rejects them.

Every candidate keeps the ids of the messages it came from. Nothing here touches the
database; formation.py deduplicates, resolves conflicts, scores admission and writes.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

from . import summarize

# --------------------------------------------------------------------- helpers
_SENT_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WS = re.compile(r"\s+")
_FIRST_PERSON = re.compile(r"(?i)\b(i|i'm|i've|i'd|i'll|my|me|myself|we|we're|we've|our|us)\b")
_MARKER = re.compile(r"\[REDACTED:\w+\]")
_SENTENCE_START = re.compile(r"(?:[.!?:]\s+|\n\s*)$")
_CLAUSE_RE = re.compile(r";\s+|,?\s+(?:and|but|so)\s+(?=(?:I|I'm|I've|we|my)\b)")
_PROPER = re.compile(r"\b[A-Z][a-zA-Z'’-]+(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][a-zA-Z'’-]+)*")
_NOT_ENTITY = frozenset(["I", "I'm", "I've", "I'd", "I'll", "Im", "Ive", "The", "A", "An", "And", "But", "So", "Or", "Yes", "No", "Ok", "Okay", "Hey", "Hi", "Hello", "Wow", "Thanks", "Thank", "Oh", "Ah", "Well", "Sure", "Great", "Nice", "Cool", "Awesome", "That", "This", "These", "Those", "It", "It's", "Its", "What", "When", "Where", "Why", "How", "Who", "Which", "We", "You", "Your", "My", "Me", "He", "She", "They", "Our", "Their", "There", "Here", "Let", "Let's", "Also", "Just", "Really", "Sounds", "Good", "Yeah", "Yep", "Nope", "Please", "Maybe", "Definitely", "Absolutely", "Totally", "Congrats", "Congratulations", "Love", "Today", "Tomorrow", "Yesterday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December", "Do", "Did", "Does", "Have", "Has", "Had", "Is", "Are", "Was", "Were", "Will", "Would", "Can", "Could", "Should", "Shall", "Must", "Might", "Being", "Been", "If", "Then", "Once", "After", "Before", "Since", "As", "For", "From", "With", "Without", "About", "Into", "Over", "Under", "Always", "Never", "Don't", "Remember", "Make", "Use", "TODO", "Note", "Big", "News", "Task", "Open", "Loop", "Instruction", "File", "Output", "Error"])
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]

# "I" -> third person: the commonest verbs get their -s; the rest read well enough.
_VERB_S = {"have": "has", "do": "does", "go": "goes", "am": "is", "was": "was"}
_BASE_VERBS = frozenset(["live", "work", "like", "love", "prefer", "want", "need", "think", "enjoy", "hate", "know", "feel", "plan", "hope", "use", "study", "teach", "play", "write", "read", "paint", "run", "cook", "own", "believe", "find", "keep", "try", "miss", "wish", "agree", "visit", "volunteer", "collect", "practice", "practise", "ride", "swim", "dance", "sing", "draw", "mean", "remember", "usually", "always", "often", "still", "really"])

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
    r"(?i)\b(?:I|we) (?:really |much |strongly |definitely |do(?:n't| not) )?"
    r"(?P<verb>prefer|like|love|enjoy|hate|dislike|can't stand|cannot stand|would rather|'d rather)"
    r" (?P<obj>[^.!?;]{3,120})")
_INSTR = re.compile(
    r"(?i)^(?:please |from now on,? |in the future,? |going forward,? )?(?:always|never|do not|don't|"
    r"make sure|remember to|be sure to|avoid|use|prefer|stop|keep)\b")
_INSTR_STRONG = re.compile(r"(?i)^(?:always|never|from now on|in the future|going forward|please always|"
                           r"please never|make sure|remember to|don't ever)\b")
_DECISION = re.compile(
    r"(?i)\b(?:we|i|the team)(?:'ve| have)? (?:decided|agreed|chose|have chosen|opted|settled on|"
    r"will go with|'ll go with|are going with|'re going with|went with|picked)\b|^decision:|"
    r"^let's (?:use|go with|switch to|adopt|keep)\b|\bthe decision is\b")
_RATIONALE = re.compile(r"(?i)\b(?:because|since|as it|so that|due to|given that|the reason is)\b\s*(?P<why>.+)")
_ALTERNATIVE = re.compile(
    r"(?i)\b(?:instead of|rather than|over|not|and not)\s+(?P<alt>[^,.;]{2,60}?)(?=\s+(?:because|since|as|so|due)\b|[,.;]|$)")
_TASK = re.compile(
    r"(?i)^(?:todo:?|to-do:?|action item:?|next step:?|task:?)\s*(?P<t>.+)|"
    r"\b(?:I|we) (?:need to|have to|must|should|will|'ll|am going to|'m going to|are going to) "
    r"(?P<t2>(?:finish|fix|write|send|call|email|review|deploy|ship|update|add|remove|book|buy|pay|"
    r"submit|prepare|schedule|check|test|migrate|refactor|document|clean|renew|file|order|set up|"
    r"follow up|get back|look into|find out)\b.+)")
_LOOP = re.compile(r"(?i)\b(?:remind me|follow up|get back to (?:you|me)|let me (?:check|find out)|"
                   r"i'll find out|we'll revisit|revisit this|open question|tbd|to be decided)\b")
_DUE = re.compile(
    r"(?i)\b(?:by|on|before|until|due|next)\s+(?P<d>today|tonight|tomorrow|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday|week|month|(?:\d{4}-\d{2}-\d{2})|(?:(?:jan|feb|mar|apr|may|jun|jul|aug|"
    r"sep|oct|nov|dec)[a-z]* \d{1,2}))\b")
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


def clean(text: str) -> str:
    return _WS.sub(" ", text or "").strip()


def speaker_of(m: dict) -> str:
    if m.get("name"):
        return m["name"].replace("_", " ")
    return {"user": "The user", "assistant": "The assistant"}.get(m["role"], m["role"])


def third_person(sentence: str, speaker: str) -> str:
    """'I moved to Berlin and my dog loves it' -> 'Ana moved to Berlin and Ana's dog ...'."""
    poss = speaker + "'s"
    s = sentence
    for pat, rep in ((r"\bI'm\b|\bI am\b", f"{speaker} is"), (r"\bI've\b", f"{speaker} has"),
                     (r"\bI'd\b", f"{speaker} would"), (r"\bI'll\b", f"{speaker} will"),
                     (r"\bmyself\b", speaker), (r"\b[Mm]y\b", poss), (r"\bmine\b", poss),
                     (r"\bme\b", speaker)):
        s = re.sub(pat, rep, s)

    def verb(m: re.Match) -> str:
        w = m.group(1)
        lw = w.lower()
        if lw in _VERB_S:
            return f"{speaker} {_VERB_S[lw]}"
        if lw in _BASE_VERBS and not lw.endswith("ly") and lw not in ("still", "really"):
            return f"{speaker} {w}{'es' if lw.endswith(('s', 'sh', 'ch')) else 's'}"
        return f"{speaker} {w}"

    s = re.sub(r"\bI (\w+)", verb, s)
    s = re.sub(r"\bI\b", speaker, s)
    return s[:1].upper() + s[1:]


def day(ts: datetime | None) -> str:
    return f"{ts.day} {_MONTHS[ts.month - 1]} {ts.year}" if ts else ""


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
        month = [x[:3].lower() for x in _MONTHS].index(mon[:3])
        due = base.replace(month=month + 1, day=int(dd))
        return due if due >= base - timedelta(days=1) else due.replace(year=due.year + 1)
    except (ValueError, IndexError):
        return None


# ------------------------------------------------------------------ candidates
def _cand(kind: str, content: str, m: dict, **kw) -> dict:
    c = {"kind": kind, "content": clean(content), "source_message_ids": [m["message_id"]],
         "valid_from": m.get("created_at"), "session_id": m.get("session_id"),
         "provenance_type": "user_stated" if m["role"] == "user" else "fact",
         "confidence": 0.7, "entities": entities_in(content, kw.pop("speaker", None))}
    c.update(kw)
    return c


def _sentence_candidates(s: str, m: dict, speaker: str) -> list[dict]:
    """Typed candidates of one sentence (first match per family)."""
    out: list[dict] = []
    said = m.get("created_at")
    low = s.lower()
    subj = speaker
    when = f" (said {day(said)})" if said else ""

    if _DECISION.search(s):
        why = _RATIONALE.search(s)
        alts = [a.group("alt").strip() for a in _ALTERNATIVE.finditer(s)]
        out.append(_cand("decision", third_person(s, speaker), m, speaker=speaker,
                         decision=clean(s), rationale=[clean(why.group("why"))] if why else [],
                         alternatives=alts, confidence=0.8))
        return out
    if m["role"] == "user" and (_INSTR_STRONG.match(s) or (
            _INSTR.match(s) and len(s.split()) <= 25 and not s.endswith("?")
            and low.startswith(("please", "use ", "prefer ", "avoid ", "do not", "don't")))):
        out.append(_cand("instruction", f"Instruction from {speaker}: {s}", m, speaker=speaker,
                         provenance_type="instruction", confidence=0.8))
        return out
    loop = _LOOP.search(s)
    task = _TASK.search(s)
    if task or loop:
        title = clean((task.group("t") or task.group("t2")) if task else s).rstrip(".!")
        due = parse_due(s, said)
        kind = "open_loop" if loop else "task"
        expires = (due or said) + timedelta(days=7 if due else 30) if (due or said) else None
        out.append(_cand(kind, f"{'Open loop' if loop else 'Task'} ({speaker}): {title}"
                         + (f" (due {day(due)})" if due else "") + when, m, speaker=speaker,
                         title=title, status="open", due_at=due, expires_at=expires, confidence=0.7))
        return out

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
        content = third_person(s, speaker) + when
        out.append(_cand("fact", content, m, speaker=speaker, subject=subj, predicate=predicate,
                         object=obj, functional=functional, confidence=0.8))
        return out
    p = _PREF.search(s)
    if p and not s.endswith("?"):
        verb = p.group("verb").lower()
        neg = "n't" in low[p.start():p.end()] or " not " in low[p.start():p.end()] or verb in (
            "hate", "dislike", "can't stand", "cannot stand")
        out.append(_cand("preference", third_person(s, speaker) + when, m, speaker=speaker,
                         subject=subj, predicate="dislikes" if neg else "likes",
                         object=clean(p.group("obj")), functional=False,
                         provenance_type="preference" if m["role"] == "user" else "fact",
                         confidence=0.75))
        return out
    # An informative first-person statement: an event or a fact about the speaker.
    words = re.findall(r"[A-Za-z0-9']+", s)
    if (_FIRST_PERSON.search(s) and len(words) >= 6 and not s.rstrip().endswith("?")
            and not _FILLER.match(s)):
        content = third_person(s, speaker) + when
        out.append(_cand("fact", content, m, speaker=speaker, subject=subj, predicate="stated",
                         object=clean(s), functional=False, confidence=0.6))
    return out


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
    for m in messages:
        if m["role"] == "tool":
            out.extend(_tool_candidates(m))
            continue
        if m["role"] not in ("user", "assistant") or not (m.get("content") or "").strip():
            continue
        speaker = speaker_of(m)
        found: list[dict] = []
        units = [u for s in _SENT_RE.split(m["content"]) for u in _CLAUSE_RE.split(s)]
        for s in units:
            s = clean(s)
            if len(s) < 8:
                continue
            found.extend(_sentence_candidates(s, m, speaker))
        if not found:
            text = clean(m["content"])
            filler = bool(_FILLER.match(text)) or len(text.split()) < 4
            found.append(_cand("note", f"{speaker}: {text}", m, speaker=speaker,
                               confidence=0.5, filler=filler))
        out.extend(found)
    return out
