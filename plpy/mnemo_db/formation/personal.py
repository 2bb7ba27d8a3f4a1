"""What a speaker says about themselves, and what an agent says about its next step.

The offline extractor (extract.py) keeps a statement when a note-taker would; a short
one ("I'm allergic to peanuts", "I don't eat meat", "My sister lives in Oslo") carries
too few words to pass its bar for a plain statement, yet it is what a memory of a
person is for (issue 42). This module reads one sentence:

- `read`: a statement about the speaker's own life (biography, health, diet, family and
  friends, likings, habits, what they did), whatever its wording: negated ("I don't eat
  meat", "I'm not a morning person"), hedged ("I think I prefer tea", "I might be
  allergic to cats"), or about someone of theirs ("my sister lives in Oslo", "my son is
  allergic to eggs"). It returns what it is about (a `Personal`), or None for what is
  not about the speaker: a question, a reaction to the listener, a maxim, small talk.
- `unhedge`: the statement without its hedging opener ("I think", "I guess",
  "probably"), which the extractor's rules then read, and whether there was one.
- `standing_instruction`: an instruction to the assistant that holds from now on
  though it names no time ("Don't use emojis in your replies", "Keep your answers
  short", "Can you always reply in British English?").
- `procedure`: an agent's next step ("Let's use find_file to see where it is", "Now
  let's run the tests"): the work going on, never a decision to remember.

Everything here is a pure function of its text; nothing touches the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Personal:
    """What a personal statement is about: `category` (one of CATEGORIES), whether it
    is about someone of the speaker's (`relation`: "sister", "dog"; None: the speaker),
    and whether it is negated or hedged."""

    category: str
    relation: str | None
    negated: bool
    hedged: bool


# "experience": something the speaker did or is doing, the weakest of them: it only
# lowers the bar a plain statement must pass (extract.py); the others are typed.
CATEGORIES = ("health", "diet", "family", "biography", "preference", "habit", "experience")

# ------------------------------------------------------------------ the parts of a sentence
_HEDGE_LEAD = re.compile(
    r"(?i)^(?:(?:I (?:think|guess|believe|suppose|reckon|feel like)|I(?:'m|’m| am) (?:pretty |fairly |quite )?sure"
    r"|I'd say|I’d say|maybe|perhaps|probably|possibly|honestly|to be honest|tbh|I mean|actually|personally"
    r"|I have to say|I must say|as far as I know)\b,?\s+(?:that\s+)?)+")
_HEDGE_WORD = re.compile(
    r"(?i)\b(?:might|may|maybe|perhaps|probably|possibly|kind of|kinda|sort of|not sure|I think|I guess"
    r"|as far as I know|I suppose)\b")
_NEGATION = re.compile(r"(?i)\b(?:not|never|no longer|no|nothing|anymore|neither|nor|without)\b|n['’]t\b")
# A tag question after a statement ("I had an accident - can you believe it?"): the
# statement is still one.
_TAG_QUESTION = re.compile(
    r"(?i)(?:\s*[-–—,:]\s*|\s+)(?:can you believe (?:it|that)|right|you know|isn't it|don't you think|huh|no|"
    r"guess what|how about you|what about you|and you|you)\?+$")
# Openers that only place a statement ("Yesterday,", "Last week", "These days", "Also").
_ADVERBIAL = re.compile(
    r"(?i)^(?:(?:and|but|so|also|plus|actually|well|oh|btw|by the way|anyway|anyways|now|then|recently|lately"
    r"|these days|nowadays|currently|today|tonight|yesterday|finally|honestly|luckily|sadly|unfortunately"
    r"|fortunately|funny enough|as for me|for me|last \w+|this (?:week|month|year|weekend|morning|summer|winter)"
    r"|(?:a (?:few|couple(?: of)?) |two |three )?(?:days?|weeks?|months?|years?) ago|on \w+day|in (?:\d{4}|\w+))"
    r"\b,?\s+)+")
# (the speaker alone: a "we" is the speaker's group, whose doings extract.py notes as
# it always did)
_SELF = re.compile(r"(?i)^(?:I\b(?!['’]ll\b)|I['’](?:m|ve|d)\b|me (?:and|too)\b|myself\b)")
# Ellipsis with the speaker as the subject ("Just started learning", "Got a new puppy").
_ELLIPSIS = re.compile(
    r"(?i)^(?:just |recently |finally |also )?(?:got|started|finished|bought|adopted|moved|joined|took|watched"
    r"|visited|signed up|began|went|had|picked up|tried|learned|learnt|made|won|lost|spent)\b")
_RELATIONS = (
    r"mom|mother|mum|mommy|dad|father|daddy|parents?|sister|brother|siblings?|sons?|daughters?|kids?|children|child"
    r"|baby|babies|twins|wife|husband|partner|spouse|hubby|girlfriend|boyfriend|fianc[eé]e?|grand(?:ma|pa|mother"
    r"|father|parents?|kids?|children|son|daughter)s?|aunt|uncle|cousins?|niece|nephew|in-laws?|family|friends?"
    r"|best friend|bff|colleagues?|co-?workers?|boss|manager|neighbou?rs?|roommates?|flatmates?|teammates?"
    r"|dogs?|cats?|pets?|puppy|puppies|kittens?|horses?|turtles?|snakes?|bird|fish|hamster|rabbit|guinea pigs?")
_MY_RELATION = re.compile(
    rf"(?i)^(?:both |all )?(?:my|our) (?:(?:little|older|younger|big|baby|twin|oldest|youngest|eldest|best|new|old"
    rf"|\d+-year-old|two|three|late) )*(?P<rel>{_RELATIONS})\b(?:['’]s?)?(?-i:(?: [A-Z][a-z]+)?(?:,? [A-Z][a-z]+,?)?)")
# A personal statement says something of the speaker; a sentence about the listener
# ("I'm so happy for you", "I love your painting") or a reaction does not.
# The listener, for extract.py too. Chat's "u" only in lower case and not as an
# initial: "The Hate U Give" and "the U.S." are not addressed to anyone.
SECOND_PERSON = re.compile(r"(?i)\b(?:you|your|yours|yourself|you're|you've|you'll|you'd|(?-i:u)(?![.’']\w))\b")
_REACTION = re.compile(
    r"(?i)^I(?:['’]m|['’]ve| am| have)? (?:(?:so|really|very|just|totally|also|too) )*(?:know|understand|agree|hope|bet"
    r"|wish|see|get it|can tell|can imagine|feel you|mean|appreciate|wonder|was wondering|am wondering)\b"
    r"|^I(?:['’]m| am) (?:(?:so|really|very|just|totally|also|too) )*(?:glad|sorry|happy|relieved|thrilled|excited)"
    r" (?:to hear|to see|that|for)\b")
# Talk about the talk ("I have a question", "I'm back", "I'm not sure that's right").
_TALK = re.compile(
    r"(?i)\b(?:have|had|got) (?:a|an|another|one more|some|two|a few|a quick) (?:quick |small |follow-up |little )?"
    r"(?:question|idea|problem|issue|doubt|suggestion|request|thought|point|minute|sec|second|look|query|favou?r)s?\b"
    r"|^I(?:['’]m| am) (?:just |only )?(?:back|here|curious|confused|lost|wondering|not sure|unsure|done|ready"
    r"|listening|kidding|joking)\b")

# What the statement is about (the first category whose words it holds).
_HEALTH = re.compile(
    r"(?i)\b(?:allerg\w*|intoleran\w*|diabet\w*|asthma\w*|c[oe]?eliac|migraines?|diagnos\w*|injur\w*|pregnan\w*"
    r"|surgery|operation|sick|illness|ill|pain|hurts?|hurting|aches?|doctor|hospital\w*|therap\w*|medication|meds"
    r"|pills?|prescri\w*|depress\w*|anxiety|adhd|autis\w*|blind|colou?r-?blind|deaf|disab\w*|wheelchair|broke my"
    r"|broken|sprain\w*|recover\w*|cancer|blood (?:pressure|sugar)|insomnia|sober|smok\w*|alcohol|vaccin\w*"
    r"|covid|flu|fever|physio\w*|rehab|epilep\w*|arthritis|heart condition|disease|disorder|syndrome|chronic"
    r"|symptoms?|glasses|hearing aid|inhaler|insulin|knee|ankle|wrist|concussion|checkup|check-up|dentist)\b")
_DIET = re.compile(
    r"(?i)\b(?:vegan|vegetarian|pescatarian|keto|paleo|halal|kosher|gluten-free|lactose|teetotal\w*|diet)\b"
    r"|\b(?:don['’]t|do not|doesn['’]t|never|no longer|only|rarely|can['’]t|cannot|avoid|cut out|gave up|stopped"
    r"|quit|try not to|trying not to|not allowed to) (?:\w+ )?(?:eat|eating|drink|drinking|consume|have any)\b"
    r"|\b(?:avoid|avoiding|cut out|cutting out|cut back on|cutting back on|gave up|give up|giving up|stay away from)"
    r" (?:\w+ )?(?:meat|pork|beef|sugar|dairy|gluten|carbs|caffeine|alcohol|coffee|junk food|fried food"
    r"|processed food|sweets|snacks|red meat|soda|bread)\b")
# A liking said with a copula ("I'm really into woodworking", "I'm not a big fan of
# horror movies"); a liking with a verb ("I love hiking") is extract.py's _PREF.
_PREFERENCE = re.compile(
    r"(?i)^(?:I['’]m|I am|we['’]re|we are)(?: (?:really|so|very|quite|pretty|totally|also|just|not|such|kind of"
    r"|kinda|big|huge|massive|a|an|definitely|absolutely|still))* (?:fan of|fans of|into|keen on|obsessed with"
    r"|crazy about|passionate about|addicted to|drawn to|big on|fascinated by|awed by|in love with|fond of)\b")
# (a word of a biography counts near the subject, as the predicate of the statement:
# "I work nights", "My brother works at Google", not "I'm proud of my own work")
_BIOGRAPHY = re.compile(
    r"(?i)^(?:[\w'’,-]+\s+){0,4}?(?:born|grew up|raised|moved|relocated|live|lives|lived|living|work|works|worked|working|job|jobs|career"
    r"|retired|unemployed|student|study|studies|studied|studying|graduat\w*|degree|university|college|school|major"
    r"|majored|speak|speaks|native|married|divorced|single|engaged|widow\w*|left-handed|right-handed"
    r"|years? old|citizen|nationality|christian|muslim|jewish|hindu|buddhist|atheist|used to|hometown|name is"
    r"|called|named|nurse|teacher|engineer|developer|doctor|lawyer|artist|musician|writer|designer|manager|chef"
    r"|freelanc\w*|self-employed|intern|volunteer\w*|mechanic|accountant|programmer|scientist|researcher)\b"
    r"|^I (?:also |still )?own\b|^I(?:['’]m| am) (?:\d{1,3}|an? (?!(?:big|huge|little|bit|lot|fan|bit)\b)[a-z-]+(?: [a-z-]+)?)(?:[,.!]|$)"
    r"|^(?:I|we)(?:['’]ve| have| got|['’]ve got)? (?:have|has|had|got) (?:a|an|no|one|two|three|four|five|\d+) (?:\w+ )?(?:" + _RELATIONS + r"|car|bike|house"
    r"|apartment|flat|degree|job|tattoo)\b|\b(?:don['’]t|do not|doesn['’]t) have (?:a|any) \w+")
# A habit: the speaker's own routine, an adverb of frequency on their verb ("I usually
# go to bed around 11"), not a wish ("I'd love to do that every day").
_HABIT = re.compile(
    r"(?i)^(?:I|we) (?:usually|always|never|often|normally|generally|rarely|seldom|sometimes|tend to)"
    r" (?!(?:feel|felt|dream|dreamed|dreamt|wanted|wish|wished|love|loved|think|thought)\b)|\b(?:morning|night) (?:person|owl)\b|\bearly riser\b"
    r"|^(?:I|we) (?!(?:would|will|could|can|should|might|may|wanna|want|hope|wish|need)\b)[a-z]+ [^,;]*"
    r"\b(?:every|each) (?:day|morning|evening|night|week|weekend|month|year|\w+day)\b")
_EXPERIENCE = re.compile(
    r"(?i)^(?:I|we|my \w+|our \w+)(?:['’]ve| have| had)? (?:(?:just|finally|recently|also|already|actually|really"
    r"|been|once|even|still|currently|now) )*(?:went|visited|watched|read|started|finished|got|bought|took|made|had"
    r"|joined|tried|learned|learnt|won|lost|saw|met|adopted|painted|wrote|built|ran|played|did|gave|found|began"
    r"|spent|left|came|drove|flew|sang|taught|sold|signed up|picked up|seen|done|taken|given|begun|gone|grown"
    r"|broke up|broke|fell|quit|hurt|caught|chose|drew|ate|kept|paid|sent|swam|rode|threw|wore|brought|bought"
    r"|(?!(?:need|feed|seed|speed|breed)ed\b)[a-z]{3,}ed|working|learning|trying|taking|reading|writing|training"
    r"|planning|thinking (?:of|about)|going to|gonna|about to|doing|making|building|looking (?:for|into)|saving"
    r"|preparing|practicing|practising|studying|volunteering|hoping to|want to|wanna|plan to|planned)\b(?!['’])")
# "Coffee is my favourite drink": the speaker's liking, its subject the thing liked.
_FAVOURITE = re.compile(r"(?i)^[\w' -]{2,40} (?:is|are|was|were) (?:my|our) (?:all-time |absolute )?fav(?:ou?rites?|e)\b")
_POINTER = re.compile(r"(?i)^\s*(?:it|them|this|that|these|those|him|her)\b(?:\s+\w+)?\s*[.!]*$")
_CATEGORY_RULES = (("health", _HEALTH), ("diet", _DIET), ("preference", _PREFERENCE), ("biography", _BIOGRAPHY),
                   ("habit", _HABIT))


def unhedge(s: str) -> tuple[str, bool]:
    """('I think I prefer tea') -> ('I prefer tea', True): the statement without its
    hedging opener, and whether it is hedged (an opener, or a hedging word inside:
    "I might be allergic to cats")."""
    core = _HEDGE_LEAD.sub("", s.strip())
    if not core:
        return s, False
    core = core[:1].upper() + core[1:] if core[:2].lower() in ("i ", "i'", "i’") else core
    return core, core != s.strip() or _HEDGE_WORD.search(core) is not None


def statement_of(s: str) -> str:
    """A sentence without a trailing tag question ("..., right?", "- can you believe it?")."""
    return _TAG_QUESTION.sub("", s.strip()).rstrip(" ,-–—") or s


def read(s: str) -> Personal | None:
    """What a statement tells about its speaker's own life, or None (see the module)."""
    core, hedged = unhedge(statement_of(s))
    if core.endswith("?") or SECOND_PERSON.search(core) or _REACTION.match(core) or _TALK.search(core):
        return None
    body = _ADVERBIAL.sub("", core)
    rel = _MY_RELATION.match(body)
    if _FAVOURITE.match(body):
        return Personal("preference", None, False, hedged)
    if not (rel or _SELF.match(body) or _ELLIPSIS.match(body) or re.match(r"(?i)^my\b", body)):
        return None
    relation = rel.group("rel").lower() if rel else None
    negated = _NEGATION.search(body) is not None
    if rel and len(body[rel.end():].split()) < 2:
        return None  # "My girlfriend.": someone named, nothing said of them
    for category, rx in _CATEGORY_RULES:
        m = rx.search(body)
        if m and category == "preference" and _POINTER.match(body[m.end():]):
            continue  # "I'm a big fan of them": what is liked is in another turn
        if m:
            return Personal("family" if relation and category != "health" else category, relation, negated, hedged)
    if relation:
        return Personal("family", relation, negated, hedged)
    if _EXPERIENCE.match(body) or _ELLIPSIS.match(body):
        return Personal("experience", None, negated, hedged)
    return None


# ------------------------------------------------------------------ standing instructions
# What an instruction is about when it shapes every later answer ("your replies",
# "emojis", "bullet points", "metric units"): it stands without a word of time.
_ABOUT_REPLIES = re.compile(
    r"(?i)\b(?:your (?:answers?|repl(?:y|ies)|responses?|messages?|explanations?|code|tone|emails?|summaries)"
    r"|emojis?|emoticons?|bullet(?:ed)? points?|bullets|jargon|exclamation marks?|apologi[sz]\w*|metric|imperial"
    r"|units|sources|citations?|(?:in|into) (?:English|French|German|Spanish|Italian|Portuguese|Dutch|Japanese"
    r"|Chinese|Korean|Russian|Polish|Swedish|Norwegian|Danish|Finnish|Greek|Turkish|Arabic|Hindi|British English"
    r"|American English)|formal|informal|casual|concise|short|brief|verbose|markdown|tables?|headings?"
    r"|code (?:blocks?|comments?)|type hints|tabs|spaces|time ?zone|all the time|when you write|for me)\b")
_ASKED = re.compile(r"(?i)^(?:(?:can|could|would|will) you (?:please )?|please )(?P<rest>.+?)\??$")
_WHEN_YOU = re.compile(r"(?i)^(?:when|whenever|if) you [^,]{3,60},\s*(?P<rest>.+)$")
_INSTRUCTION_VERB = re.compile(
    r"(?i)^(?:please )?(?:always|never|don['’]t|do not|make sure|remember|be sure to|avoid|use|prefer|stop|keep"
    r"|call me|refer to|address me|answer|reply|respond|write|format|speak|talk|include|add|put|give|show"
    r"|explain|ask|cite|skip|drop|no more|less|more)\b")
_STANDING_WORD = re.compile(r"(?i)\b(?:always|never|from now on|going forward|in (?:the )?future|by default|every time"
                            r"|any ?time|whenever|anymore|any more|ever)\b")


def standing_instruction(s: str) -> str | None:
    """An instruction to the assistant that holds from now on, as an imperative ("Can
    you always reply in British English from now on?" -> "always reply in British
    English from now on"), or None. A question counts when it asks for a standing
    behaviour (always, never, from now on ...); an imperative counts when it names
    that, or what every later answer is made of (_ABOUT_REPLIES)."""
    x = s.strip()
    asked = _ASKED.match(x)
    if x.endswith("?"):
        if not asked or not _STANDING_WORD.search(x):
            return None
        x = asked.group("rest")
    elif asked and x.lower().startswith("please"):
        x = asked.group("rest")
    when = _WHEN_YOU.match(x)
    core = when.group("rest") if when else x
    core = re.sub(r"(?i),? please[.!]*$", "", core).rstrip(" .!")
    if not _INSTRUCTION_VERB.match(core):
        return None
    if not (_STANDING_WORD.search(x) or _ABOUT_REPLIES.search(x) or when
            or re.match(r"(?i)^remember (?:that|my|I)\b", core)):
        return None
    return x.rstrip(" .!?")


# ------------------------------------------------------------------ agent procedure
# An agent narrating its next step: "let's" / "let me" / "I'll" / "now" + an action on
# the workspace, or a tool named by its identifier. A decision chooses something that
# lasts ("Let's use PostgreSQL for the queue because ..."); a step is done and gone.
_STEP_LEAD = re.compile(
    r"(?i)(?:^|[,;:]\s*(?:(?:so|and|then)\s+)?)(?:(?:now|next|first|then|finally|ok(?:ay)?|great|good|alright|so|again|also|perfect)\b,?\s+)*"
    r"(?:let['’]s|let me|let us|i['’]ll|i will|we['’]ll|we will|we should|i should|we need to|i need to|we can|i can"
    r"|time to)\s+(?:(?:now|first|also|then|quickly|again|just)\s+)*(?P<verb>\w+)")
_STEP_VERBS = frozenset([
    "run", "rerun", "open", "look", "check", "search", "find", "grep", "view", "scroll", "go", "navigate", "edit",
    "create", "write", "inspect", "examine", "see", "try", "test", "reproduce", "print", "list", "read", "submit",
    "execute", "verify", "confirm", "debug", "investigate", "explore", "locate", "modify", "update", "add", "remove",
    "fix", "apply", "install", "start", "begin", "make", "take", "review", "move", "jump", "call", "compile",
    "build", "save", "close", "cd", "cat", "ls", "revert", "undo", "clean", "delete", "rename", "replace", "insert",
    "change", "implement", "write", "figure", "understand", "dig", "get", "use", "switch", "look", "double-check",
])
_PURPOSE = re.compile(
    r"(?i)\bto (?:see|find|check|look|locate|view|inspect|confirm|verify|reproduce|understand|figure out|get a sense"
    r"|examine|search|print|list|navigate|open|make sure|ensure|debug|test|investigate|learn|know|determine)\b")
_TOOL_NAME = re.compile(r"\b[a-z]+_[a-z_]+\b|`[^`]+`|\b(?:grep|sed|awk|pytest|python3?|find|cat|ls|git|pip|npm)\b")
_DURABLE = re.compile(r"(?i)\b(?:from now on|going forward|for (?:the|this) project|in production|by default|because"
                      r"|since|instead of|rather than|over|tomorrow|tonight|next week|by (?:monday|tuesday|wednesday"
                      r"|thursday|friday|saturday|sunday|the end)|later)\b")
_WORKSPACE = re.compile(r"(?i)\b(?:file|files|script|tests?|directory|folder|function|method|class|line|lines|code"
                        r"|repo|repository|output|command|traceback|module|imports?|definition|occurrences|results?)\b")


def procedure(s: str) -> bool:
    """An agent's next step in its work (see above), not a choice that lasts. "Let's" /
    "let me" with an action on the workspace is one; "I'll" / "we should" only with a
    sign that it is this moment's step (a tool's name, an inspecting purpose, "now",
    the workspace), so "I'll fix the login bug by Friday" stays a commitment."""
    x = s.strip()
    m = _STEP_LEAD.search(x)
    if not m or _DURABLE.search(x):
        return False
    verb = m.group("verb").lower()
    lead = x[m.start():m.start("verb")].lower()
    now = re.search(r"(?i)^(?:now|next|first|then|finally|again)\b|\bnow\b", x[:m.start("verb")]) is not None
    tool = _TOOL_NAME.search(x) is not None or _PURPOSE.search(x) is not None
    if verb in ("use", "switch", "go", "try", "stick", "keep", "adopt"):
        # "let's use X": a step when X is a tool or serves an inspection right now
        return tool or now
    if verb not in _STEP_VERBS:
        return False
    return "let" in lead or "time to" in lead or tool or now or _WORKSPACE.search(x) is not None


def opener(s: str) -> int:
    """Where a statement starts past its placing opener ("BTW, just signed up ..." -> 5)."""
    m = _ADVERBIAL.match(s)
    return m.end() if m else 0
