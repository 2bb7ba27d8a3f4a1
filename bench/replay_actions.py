"""bench/replay.py's reading of a recording: the identifiers a text names, and what
each tool call or shell command did (an Action: the file it read or wrote, the lines,
whether it wrote anything). See docs/replay.md."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

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
    (submitting, interactive input) that is never a re-read."""

    kind: str  # "read" | "write" | "command" | "other"
    key: str
    start: int | None = None
    end: int | None = None


READ_TOOLS = {"read_file", "read", "view", "view_file", "cat", "open", "open_file"}
WRITE_TOOLS = {"edit", "edit_file", "write_file", "write", "create", "create_file", "insert",
               "apply_patch", "str_replace", "replace", "multiedit", "multi_edit"}
SCROLL_TOOLS = {"goto", "scroll_down", "scroll_up"}
OTHER_TOOLS = {"submit", "exit", "exit_forfeit", "connect_start", "connect_sendline",
               "connect_stop", "set_cursors", "think"}
SHELL_TOOLS = {"bash", "shell", "run", "execute", "terminal", "run_command", "execute_command"}
EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "text_editor"}
_NUMBERED_LINE = re.compile(r"^\s*(\d+)(?::|\t|\s*\|)", re.MULTILINE)
_SHELL_WRITE = re.compile(
    r"(?<![0-9&])>>?\s*(?!&)(\S+)|\bsed\s+-i\S*\s.*?(\S+)\s*$|\b(?:rm|touch|mkdir|tee)\s+(?:-\S+\s+)*(\S+)"
    r"|\b(?:mv|cp)\s+(?:-\S+\s+)*\S+\s+(\S+)")
_SHELL_GLOBAL_WRITE = re.compile(r"\b(?:pip3?|uv|npm|apt(?:-get)?|poetry)\s+(?:install|add)\b"
                                 r"|\bgit\s+(?:apply|checkout|reset|stash|commit|merge|pull)\b"
                                 r"|\bpatch\b")


def norm_path(p: str) -> str:
    p = p.strip().strip("'\"")
    return p.removeprefix("./")


def same_path(a: str, b: str) -> bool:
    """One file named two ways (relative and absolute, as SWE-agent's observations do)."""
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def shown_range(observation: str) -> tuple[int | None, int | None]:
    """The line numbers an observation shows (SWE-agent's 'N:', cat -n's 'N<tab>')."""
    nums = [int(n) for n in _NUMBERED_LINE.findall(observation or "")]
    return (min(nums), max(nums)) if len(nums) >= 2 else (None, None)


def shell_action(cmd: str) -> Action:
    """A shell command as a read of one file, a write, or a command."""
    cmd = " ".join(cmd.split())
    single = not re.search(r"[|;&]|\$\(", cmd)
    try:
        words = shlex.split(cmd)
    except ValueError:
        words = cmd.split()
    if not words:
        return Action("other", "")
    m = _SHELL_WRITE.search(cmd)
    if m:
        target = next(g for g in m.groups() if g)
        return Action("write", norm_path(target) if single else "*")
    if _SHELL_GLOBAL_WRITE.search(cmd):
        return Action("write", "*")
    args = [w for w in words[1:] if not w.startswith("-")]
    if single and words[0] in ("cat", "nl", "less", "more", "bat") and len(args) == 1:
        return Action("read", norm_path(args[0]))
    if single and words[0] == "head" and args:
        n = re.search(r"-n\s*(\d+)|-(\d+)\b", cmd)
        end = int(next(g for g in n.groups() if g)) if n else 10
        return Action("read", norm_path(args[-1]), 1, end)
    sed = re.fullmatch(r"sed -n '?(\d+),(\d+)p'? (\S+)", cmd)
    if sed:
        return Action("read", norm_path(sed.group(3)), int(sed.group(1)), int(sed.group(2)))
    return Action("command", cmd)


def swe_command_action(line: str, current_file: str | None) -> Action:
    """A SWE-agent command (its first line) as an Action."""
    words = line.split()
    if not words:
        return Action("other", "")
    name, args = words[0], words[1:]
    if name == "open" and args:
        start = int(args[1]) if len(args) > 1 and args[1].isdigit() else None
        return Action("read", norm_path(args[0]), start, start)
    if name in SCROLL_TOOLS:
        return Action("read", current_file or "*")
    if name == "create" and args:
        return Action("write", norm_path(args[0]))
    if name in ("edit", "insert"):
        path = next((a for a in args if not re.fullmatch(r"[\d:]+", a)), None)
        return Action("write", norm_path(path) if path else current_file or "*")
    if name in OTHER_TOOLS or name.startswith("connect_"):
        return Action("other", line)
    if name in ("find_file", "search_dir", "search_file", "decompile", "disassemble"):
        return Action("command", " ".join(words))
    return shell_action(line)


def call_action(name: str, arguments: str, current_file: str | None) -> Action:
    """A tool call as an Action (SWE-agent's function-calling tools, the usual editor and
    shell tools of other agents, and bench/replay_gen.py's)."""
    try:
        args = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        args = {"_": arguments}
    if not isinstance(args, dict):
        args = {"_": args}
    path = args.get("path") or args.get("file_path") or args.get("file") or args.get("filename")
    path = norm_path(str(path)) if path else None
    if name in SHELL_TOOLS and isinstance(args.get("command"), str):
        return shell_action(args["command"])
    if name in EDITOR_TOOLS:
        if args.get("command") == "view" and path:
            rng = args.get("view_range") or [None, None]
            end = rng[1] if len(rng) > 1 and rng[1] not in (None, -1) else None
            return Action("read", path, rng[0], end)
        return Action("write", path or "*")
    if name == "open" and path:
        line = args.get("line_number")
        return Action("read", path, line, line)
    if name in READ_TOOLS and path:
        start = args.get("start_line") or args.get("offset")
        end = args.get("end_line") or (start + args["limit"] if start and args.get("limit") else None)
        return Action("read", path, start, end)
    if name in SCROLL_TOOLS:
        return Action("read", current_file or "*")
    if name in WRITE_TOOLS:
        return Action("write", path or current_file or "*")
    if name in OTHER_TOOLS or name.startswith("connect_"):
        return Action("other", name)
    return Action("command", f"{name} {json.dumps(args, sort_keys=True)}")


_COMMAND_IN_TEXT = re.compile(r"<command>\s*(.*?)\s*</command>|```[\w-]*\n(.*?)```", re.DOTALL)


def text_command(content: str) -> str | None:
    """The command a text-acting agent (SWE-agent without function calling) wrote: the
    last <command> block or fenced block of its message."""
    found = [a or b for a, b in _COMMAND_IN_TEXT.findall(content or "")]
    return found[-1].strip() if found else None
