"""Secret redaction on the write path: the one place that decides what a secret is.

Every write path (record_message, record_event, start_session, remember, correct,
the extract job, compile_context's logged query) hands its text-bearing fields to
this module, through mnemo_internal.redact in SQL, so no table, index, job payload,
summary, artifact or compiled context ever holds a credential. Credentials are
replaced by `[REDACTED:<kind>]`; a false positive costs a few words of a message, a
false negative leaks a credential into every derived row.

Three layers, each catching what the one before cannot:
1. known formats (`_PATTERNS`): provider key prefixes, PEM blocks, credentials in
   URLs, JWTs, bearer/basic auth. The prefix formats are the rule set of Yelp's
   detect-secrets 1.5.0 (its RegexBasedDetector plugins: tests/py/db/test_secrets.py
   checks every one of its denylist patterns against this module), plus formats
   it lacks (Anthropic, Google, Hugging Face, GitLab's newer prefixes ...). A token
   may be glued after `_` or a word (`bob_ghp_...`, `call_ghp_...`): formats start
   after any non-alphanumeric character, not at a regex word boundary.
2. keywords in code and in prose: `password=X`, `"token": "X"`, and the way people
   write ("I use the password hunter2-prod", "the aws secret wJalr..."): after a
   keyword, a value that looks like a credential (a digit or symbol in it, or an
   explicit `=`/`:`/`is` before it).
3. shape: a standalone 32-100 character token of mixed case and digits with high
   Shannon entropy (an AWS secret key, an unknown provider's key), and base64 runs
   that decode to text holding a secret (a base64-encoded PEM key).

detect-secrets itself is not imported in the server: it finds neither prose example
above (it reads code, line by line), pulls in requests (18 MB more per backend) and
adds a scan of every plugin to every write (figures in the commit that chose this).

`redact(text)` returns the new text and the kinds found; `redact_value` walks JSON
(keys too; a string under a key named like a credential is redacted whole);
`redact_bytes` handles artifact bytes.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import re

MARK = "[REDACTED:{}]"
MARKED = re.compile(r"\[REDACTED:(\w+)\]")  # what a redacted text says it lost

# A token starts after anything but a letter or digit: `_` and words glued before a
# key (bob_ghp_..., call_ghp_..., MY_sk_live_...) do not hide it.
_START = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"
# A value that looks like a credential, not a word: 6+ characters with a digit or a
# symbol in them, and a letter or digit.
_CRED_MARK = r"[0-9!@#$%^&*+=~?]"  # what makes a word look like a credential
_CRED = r"(?=[^\s\"'`]*" + _CRED_MARK + r")(?=[^\s\"'`]*[A-Za-z0-9])[^\s\"'`,;)\]}]{6,}(?<![.:])"
# A keyword starts a word: not after a letter or digit, unless after an escape (\n).
_KW = r"(?:(?<![A-Za-z0-9])|(?<=\\[ntr]))"
_KEYWORD_PASSWORD = r"(?:password|passwd|passphrase|passcode|pwd)"
_KEYWORD_SECRET = (r"(?:api[_ -]?key|apikey|secret(?:[_ -]?(?:access[_ -]?)?key)?|client[_ -]?secret|"
                   r"access[_ -]?(?:token|key)|auth[_ -]?token|refresh[_ -]?token|private[_ -]?key|"
                   r"token|credentials?)")

# Query-string parameters that carry a credential (a prefix such as x-amz- or
# client_ may come before them).
_URL_PARAM_NAMES = (r"key|api[_-]?key|apikey|token|access[_-]?token|auth|auth[_-]?token|secret|"
                    r"client[_-]?secret|password|passwd|pwd|signature|sig|credential|session[_-]?token")

# A name in code, not a credential: words joined by `_` or `.` (snake_case, a dotted
# attribute path, an environment variable's name), without a digit.
_NAME = re.compile(r"[A-Za-z]+(?:[_.][A-Za-z]+)+")
# A type annotation: a CamelCase name of letters, then what follows a type (`token:
# EventLoopToken | None = None` in anyio's source was redacted, and an agent re-reading
# the file saw a line not in it); a passphrase ending a line stays a value
_TYPE_ANNOTATION = r"(?!(?-i:(?:[A-Z][a-z]+){2,})\s*[|=,)\]])"  # case-sensitive in (?i) patterns
# A URL's password that only names itself, as docs and code write one
# ("user:password@host", "<pass>", "${DB_PASSWORD}", "$PGPASS", "****"): a placeholder,
# not a secret; redacting it changed the lines an agent re-read (bench-replay faults).
_PLACEHOLDER = re.compile(r"(?i:[<{\[(]?(?:password|passwd|pass|pwd|pw|secret|x{3,}|\*{3,})[>}\])]?)"
                          r"|\$\{?[A-Z_][A-Z0-9_]*\}?")  # an environment variable: upper case only

# (kind, pattern, group to replace or 0 for the whole match[, check the value must
# pass]). Order matters: PEM blocks and URLs first, then prefixed key formats, then
# keywords.
_PATTERNS: list[tuple] = [
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"), 0),
    ("private_key", re.compile(r"PuTTY-User-Key-File-\d:[\s\S]*?(?:Private-MAC: *[0-9a-f]+|\Z)"), 0),
    # scheme://user:password@host  (connection strings, git remotes, proxies)
    ("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@'\"]*:([^\s@/'\"]+)@"), 1,
     lambda v: not _PLACEHOLDER.fullmatch(v)),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"), 0),
    ("anthropic_key", re.compile(_START + r"sk-ant-[A-Za-z0-9_-]{20,}"), 0),
    ("openai_key", re.compile(
        _START + r"sk-(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}"), 0),
    ("aws_access_key_id", re.compile(
        _START + r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}" + _END), 0),
    ("aws_secret_access_key", re.compile(
        r"(?i)aws.{0,20}?(?:key|pwd|pw|password|pass|token|secret).{0,20}?(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})"
        + _END), 1),
    ("github_token", re.compile(
        _START + r"(?:gh[pousr]_[A-Za-z0-9_]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"), 0),
    ("gitlab_token", re.compile(
        _START + r"(?:(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-[A-Za-z0-9_-]{20,1024}"
        r"|GR1348941[A-Za-z0-9_-]{20,50})"), 0),
    ("slack_token", re.compile(_START + r"(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})"), 0),
    ("google_api_key", re.compile(_START + r"AIza[0-9A-Za-z_-]{35}"), 0),
    ("google_oauth_token", re.compile(_START + r"ya29\.[0-9A-Za-z_-]{20,}"), 0),
    ("stripe_key", re.compile(_START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("huggingface_token", re.compile(_START + r"hf_[A-Za-z0-9]{34,}" + _END), 0),
    ("npm_token", re.compile(_START + r"npm_[A-Za-z0-9]{36}" + _END), 0),
    ("npm_token", re.compile(r"//\S+/:_authToken=\s*(\S+)"), 1),
    ("pypi_token", re.compile(_START + r"pypi-AgE[A-Za-z0-9_-]{70,}"), 0),
    ("sendgrid_key", re.compile(_START + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"), 0),
    ("square_token", re.compile(_START + r"(?:sq0csp|sq0atp|EAAA)[-A-Za-z0-9_\\]{40,}"), 0),
    ("twilio_key", re.compile(_START + r"(?:AC|SK)[a-z0-9]{32}" + _END), 0),
    ("mailchimp_key", re.compile(_START + r"[0-9a-z]{32}-us[0-9]{1,2}" + _END), 0),
    ("telegram_token", re.compile(_START + r"\d{8,10}:[0-9A-Za-z_-]{35}" + _END), 0),
    ("discord_token", re.compile(_START + r"[MNO][A-Za-z\d_-]{23,25}\.[A-Za-z\d_-]{6}\.[A-Za-z\d_-]{27}"), 0),
    ("azure_storage_key", re.compile(r"(?i)AccountKey=([A-Za-z0-9+/=]{60,})"), 1),
    ("artifactory_token", re.compile(r"(?:^|[\s=:\"])(AKC[a-zA-Z0-9]{10,})(?=[\s\"]|$)"), 1),
    ("jwt", re.compile(_START + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    # "Bearer <token>", "Authorization: token <token>": credential-shaped values only
    # (letters and digits), so prose like "token migrations/0042" stays.
    ("bearer_token", re.compile(
        r"(?i)(?:\bbearer|\bauthorization:\s*token)\s+((?=[A-Za-z0-9._~+/-]*\d)(?=[A-Za-z0-9._~+/-]*[A-Za-z])"
        r"[A-Za-z0-9._~+/-]{16,}=*)"), 1),
    ("basic_auth", re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{16,}={0,2})"), 1),
    # a credential in a URL's query string (?key=..., &access_token=..., &sig=...):
    # the parameter's name says what the value is, whatever its shape
    ("url_query_secret", re.compile(
        r"(?i)[?&](?:[a-z0-9_.-]*[_.-])?(?:" + _URL_PARAM_NAMES + r")=([^&#\s\"'<>]{6,})"), 1),
    # password=..., PGPASSWORD=..., "password": "...", pwd: ..., password is ...;
    # quoted values may hold spaces, and JSON inside a string escapes its quotes.
    ("password", re.compile(
        r"(?i)" + _KEYWORD_PASSWORD + r"\\?[\"']?\s*(?:=>?|:=?|\bis\b|\bwas\b)\s*"
        r"(\"[^\"\n\\]{3,}\"|'[^'\n]{3,}')"), 1),
    ("password", re.compile(
        r"(?i)" + _KEYWORD_PASSWORD + r"\\?[\"']?\s*(?:=>?|:=?|\bis\b|\bwas\b)\s*\\?[\"']?"
        r"([^\s;,&'\"\\]{3,})"), 1),
    # prose: "I use the password hunter2-prod", "the password for prod is Xy7!..."
    ("password", re.compile(
        r"(?i)" + _KW + _KEYWORD_PASSWORD + r"s?(?:\s+(?!is\b|was\b)[A-Za-z]+){0,5}?"
        r"(?:\s+(?:is|was|to|of|as|=|:))?\s+[\"'`]?(" + _CRED + ")"), 1,
     # (not a word ending a question: "the password for the prod database?")
     lambda v: re.search(_CRED_MARK, v.rstrip("?!")) is not None),
    # token = ..., "api_key": "...": a value, not code (`token = set_current_async_library(
    # backend)` in a file an agent reads was redacted, and the agent saw a broken line):
    # no call, not a name made of words, not a type annotation (below)
    ("secret", re.compile(
        r"(?i)" + _KW + _KEYWORD_SECRET + r"\\?[\"']?\s*(?:=>?|:=?)\s*\\?[\"']?" + _TYPE_ANNOTATION
        + r"([A-Za-z0-9._~+/=-]{12,})"
        r"(?![A-Za-z0-9._~+/=(-])"), 1, lambda v: not _NAME.fullmatch(v)),
    # an identifier ending in key/pass/pw assigned a key-like value (cloudant_key = ...,
    # ibm_pass: ...): 12+ characters with a digit, or 20+ (no "_" or ".": not a name)
    ("secret", re.compile(
        r"(?i)[A-Za-z0-9][_-](?:key|pass|pw|pwd)\\?[\"']?\s*(?:=>?|:=?)\s*\\?[\"']?"
        r"((?=[A-Za-z0-9+/=-]*\d)[A-Za-z0-9+/=-]{12,}|[A-Za-z0-9+/=-]{20,})(?![A-Za-z0-9_.])"), 1),
    # prose: "the aws secret wJalr...", "my API key is 3f9a...": a 16+ character value
    # of letters and digits (one of each at least) after the keyword.
    ("secret", re.compile(
        r"(?i)" + _KW + _KEYWORD_SECRET + r"s?(?:\s+(?!is\b|was\b)[A-Za-z]+){0,4}?"
        r"(?:\s+(?:is|was|=|:))?\s+[\"'`]?"
        r"((?=[A-Za-z0-9_+/=-]*\d)(?=[A-Za-z0-9_+/=-]*[A-Za-z])[A-Za-z0-9_+/=-]{16,})(?!\.?[A-Za-z0-9_+/=-])"),
     1, lambda v: _entropy(v) >= 3.0),
]
# Cheap pre-check: a text with none of these cannot match a keyword or format pattern.
_QUICK = re.compile(
    r"(?i)PRIVATE KEY|PuTTY|://|sk-|A3T|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA|aws|gh[pousr]_"
    r"|github_pat_|gl[a-z]+-|GR1348941|xox|xapp-|AIza|ya29\.|_live_|_test_|hf_|npm_|pypi-|SG\.|sq0|EAAA"
    r"|AC[a-z0-9]{32}|SK[a-z0-9]{32}|-us\d|\d{8}:|\.[A-Za-z\d_-]{6}\.|AccountKey|AKC|eyJ|bearer|token"
    r"|basic|pass|pwd|secret|api.?key|credential|[_-](?:key|pw)|[?&][^=\s]*(?:key|sig|auth)")

# The same pre-check without a regex of 50 alternatives tried at every position (a
# third of a clean message's redaction): on ASCII text, lowered once, the literal
# alternatives are substring tests and the rest one short regex. Other text takes
# _QUICK itself (case folding beyond ASCII: re's (?i) matches "ſ" for "s").
_QUICK_WORDS = ("private key", "putty", "://", "sk-", "a3t", "akia", "asia", "abia", "acca", "agpa", "aida",
                "aroa", "aipa", "anpa", "anva", "apka", "aws", "github_pat_", "gr1348941", "xox", "xapp-",
                "aiza", "ya29.", "_live_", "_test_", "hf_", "npm_", "pypi-", "sg.", "sq0", "eaaa", "accountkey",
                "akc", "eyj", "bearer", "token", "basic", "pass", "pwd", "secret", "credential")
_QUICK_REST = re.compile(r"gh[pousr]_|gl[a-z]+-|(?:ac|sk)[a-z0-9]{32}|-us\d|\d{8}:|\.[a-z\d_-]{6}\.|api.?key"
                         r"|[_-](?:key|pw)|[?&][^=\s]*(?:key|sig|auth)")
# For each of _PATTERNS, words one of which its match holds (lowered), or None: a
# pattern runs only on a text that has one, so a text that looks like a credential
# to one keyword is not searched by the 35 other patterns.
_NEEDS: list[tuple[str, ...] | None] = [
    ("private key",), ("putty-user-key-file-",), ("://",), ("hooks.slack.com",), ("sk-ant-",), ("sk-",),
    ("a3t", "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "apka"), ("aws",),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-",
     "gr1348941"),
    ("xox", "xapp-"), ("aiza",), ("ya29.",), ("_live_", "_test_"), ("hf_",), ("npm_",), ("/:_authtoken=",),
    ("pypi-age",), ("sg.",), ("sq0csp", "sq0atp", "eaaa"), ("ac", "sk"), ("-us",), (":",), None,
    ("accountkey=",), ("akc",), ("eyj",), ("bearer", "authorization:"), ("basic",), ("?", "&"),
    ("pass", "pwd"), ("pass", "pwd"), ("pass", "pwd"),
    ("api", "secret", "access", "auth", "token", "private", "credential"),
    ("_key", "-key", "_pass", "-pass", "_pw", "-pw"),
    ("api", "secret", "access", "auth", "token", "private", "credential"),
]
assert len(_NEEDS) == len(_PATTERNS)


def _quick(text: str) -> bool:
    """_QUICK.search(text) is not None, faster."""
    if not text.isascii():
        return _QUICK.search(text) is not None
    low = text.lower()
    return any(w in low for w in _QUICK_WORDS) or _QUICK_REST.search(low) is not None


# Layer 3. Runs of base64 characters long enough to hide a secret (the lines of a
# wrapped block joined), standalone tokens long enough to be a key, and wrapped
# base64 blocks (an image, a certificate), whose lines are high-entropy by nature.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{24,}(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/_-]{4,})*={0,2}")
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{32,100}(?![A-Za-z0-9+/=_-])")
_BLOCK = re.compile(r"(?m)(?:^[ \t]*[A-Za-z0-9+/]{40,100}={0,2}[ \t]*\r?\n){2,}(?:[ \t]*[A-Za-z0-9+/]+={0,2})?")


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in (s.count(ch) for ch in set(s)))


def _high_entropy(token: str) -> bool:
    """A random-looking key: upper, lower and digits mixed, and Shannon entropy above
    what 99% of random base62 strings of its length reach (4.2 bits per character at
    32 characters, 4.45 at 40, 4.9 at 64, 5.25 at 100). Long camelCase identifiers
    stay below it (a 47-character one measured 4.38 against 4.5)."""
    if "[REDACTED" in token or not (any(c.isdigit() for c in token) and any(c.isupper() for c in token)
                                    and any(c.islower() for c in token)):
        return False
    return _entropy(token) >= 4.15 + 0.61 * (math.log2(len(token)) - 5)


def _decoded(run: str) -> str | None:
    """The text a base64 run encodes, or None (not base64, or binary)."""
    compact = re.sub(r"\s+", "", run)
    compact += "=" * (-len(compact) % 4)
    try:
        raw = base64.b64decode(compact.replace("-", "+").replace("_", "/"), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\r\n\t" for c in text)
    return text if text and printable >= 0.95 * len(text) else None


def _encodes_words(token: str) -> bool:
    """Whether a high-entropy token is base64 of words (printable text with a space
    or a line break in it): a test's sample, a fixture, an encoded message, not a key.
    Its decoded text was searched for secrets already (the base64 pass); a random key
    does not decode to text, and a lone encoded password has no space. Without this,
    `"SGVsbG8gV29ybGQhIFRoaXMgaXMgYmFzZTY0"` in a test file was stored as
    [REDACTED:high_entropy], and an agent re-reading the file saw a line not in it."""
    inner = _decoded(token)
    return inner is not None and any(c in inner for c in " \n")


def _shapes(text: str, found: dict[str, str], depth: int) -> str:
    """Layer 3: base64-encoded secrets, then high-entropy tokens."""
    def encoded(m: re.Match) -> str:
        run, rest = m.group(0), ""
        inner = _decoded(run)
        if inner is None and "\n" in run.rstrip():
            # a word on the line after a blob ("export", "done") joins the run as a
            # wrapped line of it, and the whole no longer decodes: the blob alone
            run, sep, last = run.rstrip().rpartition("\n")
            rest = sep + last + m.group(0)[len(run) + len(sep) + len(last):]
            inner = _decoded(run)
        if inner is None:
            return m.group(0)
        inner_found: dict[str, str] = {}
        _redact(inner, depth + 1, inner_found)
        if not inner_found:
            return m.group(0)
        kind = "base64_" + min(inner_found.values())
        found[run] = kind
        return MARK.format(kind) + rest

    if depth == 0:
        text = _BASE64.sub(encoded, text)
    if len(text) < 32:
        return text
    blocks = [b.span() for b in _BLOCK.finditer(text)] if "\n" in text else []

    def token(m: re.Match) -> str:
        if (not _high_entropy(m.group(0)) or any(a <= m.start() < b for a, b in blocks)
                or _encodes_words(m.group(0))):
            return m.group(0)
        found[m.group(0)] = "high_entropy"
        return MARK.format("high_entropy")

    return _TOKEN.sub(token, text)


def _redact(text: str, depth: int, found: dict[str, str]) -> str:
    """The text with layers 1-3 applied; each secret value replaced goes into found
    (value -> kind)."""
    if _quick(text):
        ascii_ = text.isascii()
        low = text.lower() if ascii_ else None
        for (kind, pattern, group, *check), needs in zip(_PATTERNS, _NEEDS):
            if ascii_ and needs and not any(w in low for w in needs):
                continue  # no match possible: the pattern holds one of these words
            def repl(m: re.Match, kind=kind, group=group, check=check) -> str:
                value = m.group(group)
                if not value or "[REDACTED" in value or (check and not check[0](value)):
                    return m.group(0)
                found[value.strip("\"'")] = kind
                if group == 0:
                    return MARK.format(kind)
                start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
                whole = m.group(0)
                mark = MARK.format(kind)
                if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
                    mark = value[0] + mark + value[0]  # keep quoted JSON/strings well formed
                return whole[:start] + mark + whole[end:]
            new = pattern.sub(repl, text)
            if new is not text and new != text:
                text = new
                ascii_ = text.isascii()  # a mark replaced something: the words to look for changed
                low = text.lower() if ascii_ else None
    return _shapes(text, found, depth)


def _repeats(found: dict[str, str]):
    """A function replacing every other occurrence of the secret values found (the
    password named once in prose and repeated bare, a fact's object), or None. Only
    credential-shaped values (6+ characters with a digit or symbol) as whole tokens:
    "swordfish" from "the password is swordfish" is a word elsewhere."""
    values = sorted((v for v in found if re.fullmatch(_CRED, v)), key=len, reverse=True)
    if not values:
        return None
    pattern = re.compile(r"\[REDACTED:\w+\]|(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, values))
                         + r")(?![A-Za-z0-9])")
    return lambda s: pattern.sub(
        lambda m: m.group(0) if m.group(0).startswith("[REDACTED:") else MARK.format(found[m.group(0)]), s)


def redact(text: str | None) -> tuple[str | None, list[str]]:
    """(text with secrets replaced, sorted kinds found)."""
    if not text:
        return text, []
    found: dict[str, str] = {}
    text = _redact(text, 0, found)
    again = _repeats(found)
    return (again(text) if again else text), sorted(set(found.values()))


# A JSON key that names a credential: its string value is a secret whatever it
# looks like ({"password": "swordfish"}). Words of the key, split at _ - . space and
# camelCase; "prompt_tokens", "max_tokens" are not credentials.
_SECRET_KEY_WORDS = {"password", "passwd", "passphrase", "passcode", "pwd", "secret", "token", "apikey",
                     "credential", "credentials", "privatekey", "accesskey", "secretkey", "authorization"}
_KEY_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")


def _secret_key(key: str) -> bool:
    words = [w.lower() for w in _KEY_SPLIT.split(key) if w]
    joined = {a + b for a, b in itertools.pairwise(words)}
    return bool(_SECRET_KEY_WORDS & (set(words) | joined))


# The end of one string and the start of the next: the two halves of a secret split
# across two values (two tool-call arguments, two content parts).
_TAIL = re.compile(r"[A-Za-z0-9_+/=.-]+\Z")
_HEAD = re.compile(r"[A-Za-z0-9_+/=.-]+")
_STRUCTURE = re.compile(r"[a-z_]{1,16}")  # "type": "text", "image_url": structure, not content
_FORMATS = [(kind, pattern) for kind, pattern, group, *check in _PATTERNS if group == 0 and not check]


def _split_kind(tail: str, head: str) -> str | None:
    """The kind of a secret that runs from tail (the end of one value) into head (the
    start of the next), or None. head must look like a credential on its own (6+
    characters with a digit or symbol, or 8+ with capitals past the first: "bob" or
    "Tuesday" after a key is a word), and the match must cross the boundary: a key that
    ends where its value ends is found by itself."""
    if len(head) < 6 or not (re.search(_CRED_MARK, head) or len(head) >= 8 and head != head.lower()
                             and head[1:] != head[1:].lower()):
        return None
    joined = tail + head
    for kind, pattern in _FORMATS:
        for m in pattern.finditer(joined):
            if m.start() < len(tail) < m.end():
                return kind
    # an unknown vendor's key: both halves credential-shaped, neither a known format
    # alone, random-looking together
    if (min(len(tail), len(head)) >= 8 and 32 <= len(joined) <= 100 and re.search(_CRED_MARK, tail)
            and _high_entropy(joined) and not any(p.search(tail) or p.search(head) for _, p in _FORMATS)):
        return "high_entropy"
    return None


def _json_in_string(text: str) -> dict | list | None:
    """The JSON object or array a string holds (tool-call arguments), else None."""
    if text[:1] not in ("{", "[") or text[-1:] not in ("}", "]"):
        return None
    try:
        inner = json.loads(text)
    except ValueError:
        return None
    return inner if isinstance(inner, dict | list) else None


def _pairing_id(container, key) -> bool:
    """Whether a value is an id that pairs a tool call with its result (a tool
    message's tool_call_id, a tool call's id): structure, not text. Joined with the
    end of the output before it ("...typemod=CharTypeModifier" + "call_00267"), one
    looked like an unknown vendor's split key; its redaction broke the pairing and
    the result's record failed (MN006, bench-replay's generated session seed 22)."""
    return isinstance(container, dict) and (key == "tool_call_id" or key == "id" and "function" in container)


def _string_slots(value, slots: list, encoded: list) -> None:
    """Every string value inside value, in document order, as [container, key] slots
    (the ids that pair tool calls with results left out: _pairing_id);
    JSON held in a string (tool-call arguments) is parsed, its strings taken in turn,
    and [container, key, parsed] goes into encoded (re-encoded if changed)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, x in items:
        if isinstance(x, str) and _pairing_id(value, k):
            continue
        if isinstance(x, str):
            inner = _json_in_string(x)
            if inner is not None:
                encoded.append([value, k, inner])
                _string_slots(inner, slots, encoded)
                continue
            slots.append([value, k])
        else:
            _string_slots(x, slots, encoded)


def _join_split_secrets(value, found: dict[str, str]):
    """value with the halves of each secret split across two adjacent string values
    replaced by marks (a scanner that reads the whole message sees the key whole;
    one that reads each value sees a prefix, redacted, and a random-looking rest, kept)."""
    slots: list = []
    _string_slots(value, slots, [])
    texts = [c[k] for c, k in slots]
    splits = []
    for i in range(len(texts) - 1):
        # the next value that says something: a content part's "type": "text" between
        # two texts is structure, not part of what the message says
        j = i + 1
        while j < len(texts) - 1 and slots[j][1] == "type" and _STRUCTURE.fullmatch(texts[j]):
            j += 1
        if splits and splits[-1][1] == i:
            continue  # this value's start was the end of a split secret: not its start too
        tail, head = _TAIL.search(texts[i]), _HEAD.match(texts[j])
        kind = tail and head and _split_kind(tail.group(0), head.group(0))
        if kind:
            splits.append((i, j, tail.group(0), head.group(0), kind))
    if not splits:
        return value
    value = json.loads(json.dumps(value))  # a copy to change
    slots, encoded = [], []
    _string_slots(value, slots, encoded)
    for i, j, tail, head, kind in splits:
        found[tail] = found[head] = kind
        (c, k), (c2, k2) = slots[i], slots[j]
        c[k] = c[k][:len(c[k]) - len(tail)] + MARK.format(kind)
        c2[k2] = MARK.format(kind) + c2[k2][len(head):]
    for c, k, inner in reversed(encoded):  # innermost first
        c[k] = json.dumps(inner, ensure_ascii=False)
    return value


def redact_value(value):
    """Redacts every string inside a JSON value, keys included. -> (value, kinds)."""
    found: dict[str, str] = {}
    value = _join_split_secrets(value, found)

    def walk(v, text):
        if isinstance(v, str):
            # JSON in a string (tool-call arguments): walked as JSON, so its keys and
            # credential-named fields are seen; re-encoded only if changed
            inner = _json_in_string(v)
            if inner is not None:
                before = len(found)
                out = walk(inner, text)
                return json.dumps(out, ensure_ascii=False) if len(found) > before else v
            return text(v)
        if isinstance(v, list | tuple):
            return [walk(x, text) for x in v]
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if isinstance(x, str) and x and "[REDACTED" not in x and _secret_key(k):
                    found[x] = "secret_field"
                    x = MARK.format("secret_field")
                out[text(k)] = walk(x, text)
            return out
        return v

    value = walk(value, lambda s: _redact(s, 0, found) if s else s)
    again = _repeats(found)
    if again:
        value = walk(value, again)
    return value, sorted(set(found.values()))


def redact_bytes(data: bytes) -> tuple[bytes, list[str]]:
    """Artifact bytes: UTF-8 text is redacted as text; other bytes are read as
    Latin-1 (one character per byte, so every byte round-trips) and the ASCII
    secrets inside them (a PEM key in a tarball) are replaced."""
    try:
        text, codec = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, codec = data.decode("latin-1"), "latin-1"
    out, kinds = redact(text)
    return (out.encode(codec) if kinds else data), kinds


# Nothing in a JSON document can be redacted without one of these (keeps clean
# writes cheap): a keyword or format prefix, a run long enough for layer 3, or two
# runs that end and start two string values a little apart (the halves of a split
# key: _join_split_secrets).
# (the case-sensitive part: a long key-like run, or a key split around a JSON string)
_QUICK_JSON_REST = re.compile(r'[A-Za-z0-9+/=_-]{24,}|[A-Za-z0-9+/=_-]{8}\\?".{0,60}?"[A-Za-z0-9+/=_-]{8}')
_QUICK_JSON = re.compile(_QUICK.pattern + r"|private|auth|" + _QUICK_JSON_REST.pattern)


def _quick_json(raw: str) -> bool:
    """_QUICK_JSON.search(raw) is not None, faster (as _quick)."""
    if not raw.isascii():
        return _QUICK_JSON.search(raw) is not None
    low = raw.lower()
    return ("private" in low or "auth" in low or any(w in low for w in _QUICK_WORDS)
            or _QUICK_REST.search(low) is not None or _QUICK_JSON_REST.search(raw) is not None)


def redact_json_text(raw: str) -> str:
    """PL/Python entry: a JSON document in, {"value": ..., "kinds": [...]} out (no
    value when nothing was found)."""
    if not _quick_json(raw):
        return '{"kinds": []}'
    try:
        value, kinds = redact_value(json.loads(raw))
    except RecursionError:
        # nested deeper than Python parses: the document's text is redacted instead
        # (quoted values stay quoted, so it stays JSON; the server parses it again)
        text, kinds = redact(raw)
        return f'{{"value": {text}, "kinds": {json.dumps(kinds)}}}' if kinds else '{"kinds": []}'
    if not kinds:
        return '{"kinds": []}'
    return json.dumps({"value": value, "kinds": kinds}, ensure_ascii=False)
