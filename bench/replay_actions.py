"""bench/replay.py's reading of a recording: the identifiers a text names, and what
each tool call or shell command did (an Action: the file it read or wrote, the lines,
whether it wrote anything). See docs/replay.md."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))
from mnemo_db.paging import shell, sources  # the paging's own reading of a command

# ------------------------------------------------------------------ identifiers
# What counts as an identifier (information misses). Each pattern is searched in a
# message's text; matches are stripped of surrounding punctuation.
IDENTIFIER_PATTERNS = {
    "path": r"(?<![\w/.-])(?:[\w.-]+/)+[\w.-]*\w|\b[\w-]+\.(?:py|pyi|js|ts|tsx|jsx|go|rs|rb|java|c|h"
            r"|cc|cpp|hpp|sql|sh|md|rst|txt|toml|yaml|yml|json|cfg|ini|html|css|pl|php|lock)\b",
    "dotted": r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b",
    "camel": r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+(?:[A-Z][a-z0-9]*)+\b",
    "snake": r"\b_*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b",
    "error_code": r"\b[A-Z]{1,5}\d{2,5}\b",
    "number": r"(?<![\w.])(?:0x[0-9a-fA-F]{3,}|\d{3,}(?:\.\d+)?)(?![\w])",
}
_IDENTIFIER_RE = re.compile("|".join(f"(?:{p})" for p in IDENTIFIER_PATTERNS.values()))
# Words of ordinary prose that the camel pattern would take (iPhone-like words are rare
# in agent transcripts; these come from the SWE-agent trajectories' own prose).
_NOT_IDENTIFIERS = frozenset({"e.g", "i.e", "etc.", "vs."})


def identifiers(text: str) -> set[str]:
    """Paths (a/b/c, name.ext), dotted names (a.b.c), CamelCase and camelCase,
    snake_case (at least one underscore), error codes (1-5 capitals and 2-5 digits:
    E501, MN012) and numbers of 3 digits or more (hex from 0x and 3 digits), as
    IDENTIFIER_PATTERNS spells them; 'e.g'-like abbreviations left out."""
    out = set()
    for m in _IDENTIFIER_RE.finditer(text):
        s = m.group(0).strip(".-/")
        if len(s) >= 3 and s not in _NOT_IDENTIFIERS:
            out.add(s)
    return out


# ------------------------------------------------------------------ actions
@dataclass(frozen=True)
class Action:
    """What one tool call (or one command written in the text) does to the world:
    reads a file (path, line range or None for all), writes one ('*': unknown, all),
    runs a command whose output is its result (key: the command), or something else
    (submitting, interactive input) that is never a re-read. A partial read shows
    some lines of the file, not known which (a grep's matches, tail's last lines):
    only the same command read again re-reads it (`command`, the shell command a
    read came from)."""

    kind: str  # "read" | "write" | "command" | "other"
    key: str
    start: int | None = None
    end: int | None = None
    partial: bool = False
    command: str = field(default="", compare=False)


READ_TOOLS = {"readfile", "read", "view", "viewfile", "cat", "open", "openfile"}
WRITE_TOOLS = {"edit", "editfile", "writefile", "write", "create", "createfile", "insert",
               "applypatch", "strreplace", "replace", "multiedit"}
SCROLL_TOOLS = {"goto", "scrolldown", "scrollup"}
OTHER_TOOLS = {"submit", "exit", "exitforfeit", "connectstart", "connectsendline",
               "connectstop", "setcursors", "think"}
SHELL_TOOLS = {"bash", "shell", "run", "execute", "terminal", "runcommand", "executecommand"}
EDITOR_TOOLS = {"strreplaceeditor", "strreplacebasededittool", "texteditor"}
# the line numbers an observation shows: SWE-agent's 'N:', cat -n's 'N<tab>', nl's
# 'N  text', Claude Code's 'N→'
_NUMBERED_LINE = re.compile(r"^\s*(\d+)(?::|\t|\s*\||→)", re.MULTILINE)


def norm_path(p: str) -> str:
    return shell.clean_path(p)


def same_path(a: str, b: str) -> bool:
    """One file named two ways (relative and absolute, as SWE-agent's observations do)."""
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def shown_range(observation: str) -> tuple[int | None, int | None]:
    """The line numbers an observation shows (SWE-agent's 'N:', cat -n's 'N<tab>',
    Claude Code's 'N→')."""
    nums = [int(n) for n in _NUMBERED_LINE.findall(observation or "")]
    return (min(nums), max(nums)) if len(nums) >= 2 else (None, None)


def shell_actions(cmd: str) -> list[Action]:
    """A shell command's actions, as the paging's parser reads it (shell.effects): its
    writes (an install or a git checkout: '*'), its reads, and, when some part of it
    runs a program of its own and it writes nothing, the command (keyed by its text);
    a command that does none of these (`echo`): the command."""
    eff = shell.effects(cmd)
    key = " ".join(cmd.split())
    out = [Action("write", p) for p in eff.writes]
    if eff.writes_everything:
        out.append(Action("write", "*"))
    for r in eff.reads:
        start, end = r.lines if r.lines else (None, None)
        out.append(Action("read", r.path, start, end, r.partial, key))
    # a command that writes makes its own output stale: running it again re-reads nothing
    if not out or ((eff.runs or eff.fetch) and not (eff.writes or eff.writes_everything)):
        out.append(Action("command", key))
    return out


def swe_command_actions(command: str, current_file: str | None) -> list[Action]:
    """A SWE-agent command as Actions: its own commands by their first line, a shell
    command whole (it may span lines)."""
    line = command.strip().split("\n", 1)[0] if command.strip() else ""
    words = line.split()
    if not words:
        return [Action("other", "")]
    name, args = words[0], words[1:]
    if name == "open" and args:
        start = int(args[1]) if len(args) > 1 and args[1].isdigit() else None
        return [Action("read", norm_path(args[0]), start, start)]
    if sources.tool_key(name) in SCROLL_TOOLS:
        return [Action("read", current_file or "*")]
    if name == "create" and args:
        return [Action("write", norm_path(args[0]))]
    if name in ("edit", "insert"):
        path = next((a for a in args if not re.fullmatch(r"[\d:]+", a)), None)
        return [Action("write", norm_path(path) if path else current_file or "*")]
    if sources.tool_key(name) in OTHER_TOOLS or name.startswith("connect_"):
        return [Action("other", line)]
    if name in ("find_file", "search_dir", "search_file", "decompile", "disassemble"):
        return [Action("command", " ".join(words))]
    return shell_actions(command)


def call_actions(name: str, arguments: str, current_file: str | None,
                 observation: str | None = None) -> list[Action]:
    """A tool call as Actions (SWE-agent's function-calling tools, the usual editor and
    shell tools of other agents, Claude Code's, and bench/replay_gen.py's). Tool names
    match as the paging's do (sources.tool_key: Read is read, str_replace_editor is
    strreplaceeditor). A call whose observation is Claude Code's numbered read
    (`    12→text`) and that names a path reads that file."""
    try:
        args = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        args = {"_": arguments}
    if not isinstance(args, dict):
        args = {"_": args}
    tool = sources.tool_key(name)
    path = next((args[k] for k in sources.PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
    path = norm_path(path) if path else None
    command = args.get("command") if isinstance(args.get("command"), str) else None
    if tool in SHELL_TOOLS and command is not None:
        return shell_actions(command)
    if tool in EDITOR_TOOLS:
        if command == "view" and path:
            rng = args.get("view_range") or [None, None]
            end = rng[1] if len(rng) > 1 and rng[1] not in (None, -1) else None
            return [Action("read", path, rng[0], end)]
        return [Action("write", path or "*")]
    if tool == "open" and path:
        line = args.get("line_number")
        return [Action("read", path, line, line)]
    numbered = shell.numbered_lines(observation or "")
    if (tool in READ_TOOLS or numbered) and path:
        start = args.get("start_line") or args.get("offset")
        end = args.get("end_line") or (start + args["limit"] if start and args.get("limit") else None)
        return [Action("read", path, *(numbered or (start, end)))]
    if tool in SCROLL_TOOLS:
        return [Action("read", current_file or "*")]
    if tool in WRITE_TOOLS:
        return [Action("write", path or current_file or "*")]
    if tool in OTHER_TOOLS or tool.startswith("connect"):
        return [Action("other", name)]
    return [Action("command", f"{name} {json.dumps(args, sort_keys=True)}")]


_COMMAND_IN_TEXT = re.compile(r"<command>\s*(.*?)\s*</command>|```[\w-]*\n(.*?)```", re.DOTALL)


def text_command(content: str) -> str | None:
    """The command a text-acting agent (SWE-agent without function calling) wrote: the
    last <command> block or fenced block of its message."""
    found = [a or b for a, b in _COMMAND_IN_TEXT.findall(content or "")]
    return found[-1].strip() if found else None
