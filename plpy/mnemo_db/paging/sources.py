"""What a tool call touches, read from its name and arguments: the source it reads
(a file path with the lines read, or a URL), whether it writes that source (an edit),
and what kind of semantic object its result makes (docs/design.md §Semantic objects and paging, strategy A).
Agents name their tools differently (Claude Code's Read/Edit/Bash, SWE-agent's
open/edit/create, str_replace_editor's view/str_replace, plain shell commands), so
the rules look at both the tool's name and the shell command it runs, if any."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import shell

# Tool names (lower case, without separators) that read or write a file.
READ_TOOLS = {"read", "readfile", "open", "openfile", "view", "viewfile", "cat", "getfile", "goto",
              "scrollup", "scrolldown", "readmanyfiles", "notebookread"}
WRITE_TOOLS = {"write", "writefile", "edit", "editfile", "create", "createfile", "multiedit",
               "strreplace", "insert", "applypatch", "patch", "notebookedit", "delete", "deletefile",
               "append", "replace"}
FETCH_TOOLS = {"webfetch", "fetch", "fetchurl", "browse", "curl", "wget", "openurl", "geturl"}
SHELL_TOOLS = {"bash", "shell", "sh", "run", "exec", "execute", "terminal", "runcommand", "command",
               "cmd", "localshell"}
PATH_KEYS = ("file_path", "path", "filename", "file", "filepath", "notebook_path", "target_file")
URL_RE = re.compile(r"https?://[^\s'\"<>]+")
# str_replace_editor-style tools say what they do in a `command` argument.
EDITOR_READ_COMMANDS = {"view"}
EDITOR_WRITE_COMMANDS = {"create", "str_replace", "insert", "undo_edit", "write", "append"}
# An error in the first lines of a tool output (or a failing exit status).
ERROR_RE = re.compile(
    r"(?m)(^Traceback \(most recent call last\)|^\w*(Error|Exception)\b[:(]|\berror(\[\w+\])?:|"
    r"^FAILED\b|^E\s{3}|command not found|No such file or directory|exit (code|status) [1-9]|"
    r"^fatal:|panic:|Segmentation fault)", re.IGNORECASE)
ERROR_SCAN_CHARS = 4000


@dataclass(frozen=True)
class Access:
    """What one tool call touches. lines: (first, last) line numbers read, inclusive,
    None for the whole source; last None: to the end."""
    source: str | None = None
    lines: tuple[int, int | None] | None = None
    reads: bool = False
    writes: bool = False
    fetch: bool = False


def tool_key(name: str) -> str:
    """A tool's name as the tool sets spell it: lower case letters, no namespace."""
    return re.sub(r"[^a-z]", "", (name or "").lower().rsplit(".", 1)[-1].rsplit("__", 1)[-1])


def _args(arguments: str | dict | None) -> dict:
    if isinstance(arguments, dict):
        return arguments
    try:
        out = json.loads(arguments or "{}")
    except (TypeError, ValueError, RecursionError):  # the API stores any string, nested past the limit too
        return {"command": arguments} if isinstance(arguments, str) else {}
    return out if isinstance(out, dict) else {}


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _lines_from_args(a: dict) -> tuple[int, int | None] | None:
    if isinstance(a.get("view_range"), list) and len(a["view_range"]) == 2:
        first, last = _int(a["view_range"][0]), _int(a["view_range"][1])
        if first is not None:
            return first, (None if last is None or last < 0 else last)
    offset, limit = _int(a.get("offset")), _int(a.get("limit"))
    if offset is not None or limit is not None:
        first = max(offset or 1, 1)
        return first, (first + limit - 1 if limit else None)
    first = _int(a.get("start_line") or a.get("line_number") or a.get("line"))
    if first is not None:
        last = _int(a.get("end_line"))
        return first, last
    return None


def shell_accesses(command: str) -> list[Access]:
    """A shell command's accesses (shell.effects): the URL curl or wget fetches; else
    the files it writes, then the files it shows with known lines (a grep's matches
    and tail's last lines are no read of known lines: they supersede nothing)."""
    eff = shell.effects(command)
    if eff.fetch:
        return [Access(source=eff.fetch, reads=True, fetch=True)]
    return ([Access(source=p, writes=True) for p in eff.writes]
            + [Access(source=r.path, lines=r.lines, reads=True) for r in eff.reads if not r.partial])


def tool_accesses(name: str, arguments: str | dict | None, open_file: str | None = None) -> list[Access]:
    """What a tool call touches: a shell command's accesses (shell_accesses), else
    tool_access's one (none when it touches no source)."""
    tool, a = tool_key(name), _args(arguments)
    command = a.get("command") if isinstance(a.get("command"), str) else None
    if tool in SHELL_TOOLS or (command and tool not in READ_TOOLS | WRITE_TOOLS and " " in command):
        return shell_accesses(command or a.get("cmd") or a.get("script") or "")
    access = tool_access(name, a, open_file)
    return [access] if access.source else []


def tool_access(name: str, arguments: str | dict | None, open_file: str | None = None) -> Access:
    """What a tool call that is no shell command touches. open_file: the file the
    session's agent has open (SWE-agent's edit and scroll commands act on it and name
    no path)."""
    tool, a = tool_key(name), _args(arguments)
    command = a.get("command") if isinstance(a.get("command"), str) else None
    url = a.get("url") or a.get("uri")
    if isinstance(url, str) and (tool in FETCH_TOOLS or URL_RE.match(url)):
        return Access(source=url, reads=True, fetch=True)
    path = next((a[k] for k in PATH_KEYS if isinstance(a.get(k), str) and a[k].strip()), None)
    if command in EDITOR_READ_COMMANDS | EDITOR_WRITE_COMMANDS and path:
        reads = command in EDITOR_READ_COMMANDS
        return Access(source=shell.clean_path(path), lines=_lines_from_args(a) if reads else None,
                      reads=reads, writes=not reads)
    if tool in WRITE_TOOLS:
        target = path or open_file
        return Access(source=shell.clean_path(target), writes=True) if target else Access()
    if tool in READ_TOOLS:
        target = path or open_file
        if target is None and command:  # SWE-agent's open: the path is the first word
            target = command.split()[0] if command.split() else None
        return Access(source=shell.clean_path(target), lines=_lines_from_args(a), reads=True) if target else Access()
    return Access()


# What a command's output is, for how soon it leaves (ladder.aging's quiet rule): a
# test run (its output: which tests pass; run again and again until they do), a
# listing and a search (small, and looked up again), or any other command (running a
# script, installing, a tool of no known kind), whose output an agent seldom asks for
# again before something changes. Shared with bench/replay_faults.py's fault kinds.
TEST_RE = re.compile(
    r"\b(?:pytest|py\.test|tox|nox|unittest|runtests?\.py|manage\.py test|test_\w+\.py|\w+_test\.py"
    r"|go test|cargo test|(?:npm|yarn|pnpm)(?: run)? test|mvn\b[^|;&]*\btest|gradlew?\b[^|;&]*\btest"
    r"|make (?:test|check))\b")
LISTERS = {"ls", "find", "tree", "du", "findfile", "glob", "listdir", "listfiles", "listdirectory"}
SEARCHERS = shell.SEARCHERS | {"searchdir", "searchfile", "search", "codesearch", "websearch"}
COMMAND_CLASSES = ("test", "listing", "search", "command")


# A name in code or in a tool's output: a word joined with _ . / :: or -, one with a
# digit and a letter, or camelCase (FUN_004016ba, flag.append, local_48, TimeDelta).
NAME_RE = re.compile(r"[A-Za-z_][\w]*(?:(?:\.|::|/|-)[A-Za-z_\d][\w]*)*")


def names(text: str | None) -> set[str]:
    """The names a text uses (NAME_RE, 4 characters or more): plain words are left out,
    so that two texts sharing names share what they are about, not their English."""
    out = set()
    for w in NAME_RE.findall(text or ""):
        if len(w) >= 4 and (not w.isalpha() or not (w.islower() or w.istitle() or w.isupper())):
            out.add(w)
    return out


def command_class(name: str, arguments: str | dict | None) -> str:
    """A tool call that reads and writes no source: 'test', 'listing', 'search' or
    'command' (COMMAND_CLASSES), by its shell command's programs, else its tool's name."""
    tool, a = tool_key(name), _args(arguments)
    command = next((a[k] for k in ("command", "cmd", "script") if isinstance(a.get(k), str)), "")
    if command and TEST_RE.search(command):
        return "test"
    programs = {tool_key(p) for p in shell.effects(command).programs} if command else set()
    programs |= {tool_key(command.split()[0])} if command.split() else set()
    programs.add(tool)
    if programs & SEARCHERS:
        return "search"
    if programs & LISTERS:
        return "listing"
    return "command"


def overlaps(a: tuple[int, int | None] | None, b: tuple[int, int | None] | None) -> bool:
    """Whether two line ranges share a line (None: the whole source)."""
    if a is None or b is None:
        return True
    a_last = a[1] if a[1] is not None else float("inf")
    b_last = b[1] if b[1] is not None else float("inf")
    return a[0] <= b_last and b[0] <= a_last


def looks_like_error(text: str | None, metadata: dict | None = None) -> bool:
    """Whether a tool output reports an error (or its metadata says so)."""
    if metadata and (metadata.get("is_error") is True or _int(metadata.get("exit_code")) not in (None, 0)):
        return True
    return bool(text) and ERROR_RE.search(text[:ERROR_SCAN_CHARS]) is not None


def result_kind(access: Access, outputs: list[str | None], metadata: list[dict | None]) -> str:
    """The kind of object a tool call's unit is, from what it touched and its outputs."""
    if any(looks_like_error(t, md) for t, md in zip(outputs, metadata)):
        return "error_context"
    if access.fetch:
        return "external_reference"
    if access.reads and access.source:
        return "file_context"
    return "tool_result"


def label_of(kind: str, name: str, access: Access, text: str | None) -> str:
    """The one line a stub shows of an object."""
    if access.source:
        what = access.source
        if access.lines:
            what += f" lines {access.lines[0]}-{access.lines[1] if access.lines[1] is not None else 'end'}"
        return f"{name} {what}"
    first = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return f"{name}: {first[:120]}" if name else first[:120]


# Agents that act in text (SWE-agent, mini-swe-agent): the assistant's message ends
# with one shell block, and the environment answers in the next (user) message.
# a fenced shell block, or SWE-agent's XML form (<command>...</command>): without the
# latter, the environment's answers to such an agent were user turns to paging, each
# a goal shift that demoted the task (bench-replay: the issue text at detail from the
# second call, 12 of the SWE-agent sessions' 16 information misses)
ACTION_RE = re.compile(r"(?:```(?P<lang>[A-Za-z]*)[ \t]*\n(?P<body>.*?)```"
                       r"|<command>(?P<xml>.*?)</command>)\s*$", re.DOTALL)
ACTION_LANGS = ("", "bash", "sh", "shell", "console")
SWE_COMMANDS = {"goto", "scroll_up", "scroll_down", "search_file", "search_dir", "find_file", "submit"}


def text_action(text: str | None) -> tuple[str, dict] | None:
    """The action an assistant's text ends with, as a tool call's (name, arguments),
    or None: a shell block (or a <command> element) of its own at the very end (a code answer in a chat has
    a language, or text after it). SWE-agent's open/create/edit name (or act on) a
    file; anything else is a shell command (all of the block: it may span lines)."""
    m = ACTION_RE.search(text or "")
    body = (m.group("body") if m.group("xml") is None else m.group("xml")) if m else None
    if not m or (m.group("lang") or "").lower() not in ACTION_LANGS or not body.strip():
        return None
    first = body.strip().splitlines()[0].strip()
    words = first.split()
    name = words[0]
    if name in ("open", "create") and len(words) >= 2:
        return name, {"path": words[1].strip("'\"")}
    if name in ("edit", "insert"):
        return "edit", {}
    if name in SWE_COMMANDS:
        return name, {"command": first}
    return "bash", {"command": body.strip()}  # a command may span lines
