"""What a shell command reads and writes, the way coding agents write their commands:
chains (`cd repo && cat a.py | head -50`), several files in one command, commands over
several lines (a `\\`-continued line, a heredoc), output redirections. One parser for
paging (sources.tool_accesses: which tool calls read a file, for faults and
supersession) and for bench/replay.py (which model calls re-read a result).

A file read is what the agent sees of a named file: `cat`/`nl`/`less`/`more`/`bat` F
(all of it), `head` (its first N lines), `tail -n +K` (from line K), `sed -n 'A,Bp'`
(lines A to B), a `sed` script without -n (all of it, edited), and, partially (some
lines, not known which), `tail -n N` and `grep PATTERN F` on a named file. A later
stage of a pipeline narrows the read (`cat F | head -50`: lines 1-50; `| grep x`:
partial); any other stage (`wc`, `sort`, `python`) turns it into a command's output.
`grep -r` (and `rg`/`ag` over a directory) is a search, not a read. Output sent to a
file is no read (`cat a > b`: a write of b). Bad quoting is tolerated: the command is
then split on blanks.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# Programs that show a file whole (their options take no value but nl's few).
WHOLE_READERS = {"cat", "nl", "less", "more", "bat", "batcat"}
# Programs whose output is the text they are given, or nothing: no read, no command.
NEUTRAL = {"cd", "pushd", "popd", "echo", "printf", "true", ":", "export", "set", "clear", "pwd"}
SEARCHERS = {"grep", "egrep", "fgrep", "rg", "ag", "ack"}
WRITERS = {"rm", "touch", "mkdir", "truncate", "chmod"}
COPIERS = {"mv", "cp", "ln", "install"}
# Commands that change files the command does not name (the whole tree may differ).
GLOBAL_WRITE_RE = re.compile(
    r"^(?:(?:pip3?|uv|npm|yarn|pnpm|poetry|apt(?:-get)?|conda|gem|cargo) (?:install|add|remove|uninstall)\b"
    r"|git (?:apply|checkout|reset|stash|merge|pull|restore|switch|rebase|cherry-pick|am|revert)\b"
    r"|patch\b)")
PREFIXES = {"sudo", "time", "nohup", "command", "exec", "env"}
# options that take a value, per program (the value is the next word when not attached)
VALUE_OPTIONS = {
    "head": {"-n", "-c", "--lines", "--bytes"},
    "tail": {"-n", "-c", "--lines", "--bytes", "-s"},
    "nl": {"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"},
    "grep": {"-e", "-f", "-m", "-A", "-B", "-C", "-d", "-D", "--include", "--exclude", "--color"},
    "sed": {"-e", "-f", "-l"},
    "tee": set(),
}
VALUE_OPTIONS["egrep"] = VALUE_OPTIONS["fgrep"] = VALUE_OPTIONS["grep"]
VALUE_OPTIONS["rg"] = VALUE_OPTIONS["ag"] = VALUE_OPTIONS["grep"] | {"-g", "-t", "--glob", "--type"}
# grep options after which the output shows no line of the file (names, counts, nothing)
GREP_NO_LINES = {"-l", "-L", "-c", "-q", "--files-with-matches", "--files-without-match", "--count",
                 "--quiet", "-o"}
_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")
_SED_RANGE_RE = re.compile(r"^\s*(\d+)\s*(?:,\s*(\d+|\$)\s*)?\{?\s*p\s*\}?\s*$")
_OPERATORS = {"&&", "||", ";", "&", "|", "|&", "(", ")", ";;", "\n"}
_STDERR_RE = re.compile(r"(?<![\w-])[2-9]>>?\s*([^\s;&|()<>]+)")
_URL_RE = re.compile(r"https?://[^\s'\"<>]+")


@dataclass(frozen=True)
class FileRead:
    """A file the command shows: lines (first, last) inclusive, last None to the end;
    None: all of it. partial: some of its lines, not known which (lines is then None)."""
    path: str
    lines: tuple[int, int | None] | None = None
    partial: bool = False


@dataclass(frozen=True)
class ShellEffects:
    """What a command does: the files it shows, the files it writes, whether it changes
    files it does not name (an install, a git checkout), the URL it fetches (curl,
    wget), and whether any part runs something else (its output is a command's)."""
    reads: tuple[FileRead, ...] = ()
    writes: tuple[str, ...] = ()
    writes_everything: bool = False
    fetch: str | None = None
    runs: bool = False
    programs: tuple[str, ...] = field(default=())


def clean_path(p: str) -> str:
    p = p.strip().strip("'\"")
    return re.sub(r"/{2,}", "/", p.removeprefix("./"))


def logical_lines(command: str) -> str:
    """The command with `\\`-continued lines joined and heredoc bodies left out (their
    lines are data: what `cat > F <<EOF` writes is no command)."""
    text = re.sub(r"\\\r?\n", " ", command or "")
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for m in _HEREDOC_RE.finditer(line):
            end = m.group(2)
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            i += 1  # the delimiter
    return "\n".join(out)


def _tokens(text: str) -> list[str]:
    """Words and operators (newlines are operators), quotes removed; with bad quoting,
    the blanks and operators split it."""
    text = re.sub(r"(?<![\w-])\d*>&\d+|&>", " ", text)  # 2>&1, &> : no file
    text = re.sub(r"(?<![\w-])1(?=>)", "", text)  # 1> is >
    text = re.sub(r"<<-?\s*(['\"]?)[A-Za-z_][\w.-]*\1", " ", text)  # the heredoc's marker
    lex = shlex.shlex(text.replace("\n", " \x00 "), posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    try:
        words = list(lex)
    except ValueError:
        words = re.findall(r"&&|\|\||[;&|()<>]+|\x00|[^\s;&|()<>]+", text.replace("\n", " \x00 "))
    return ["\n" if w == "\x00" else w for w in words]


@dataclass
class _Simple:
    words: list[str]
    out: list[str]  # > and >> targets


def _pipelines(tokens: list[str]) -> list[list[_Simple]]:
    """The pipelines of a token list: lists of simple commands joined by |."""
    pipelines: list[list[_Simple]] = [[_Simple([], [])]]
    i = 0
    while i < len(tokens):
        w = tokens[i]
        if w in ("|", "|&"):
            pipelines[-1].append(_Simple([], []))
        elif w in _OPERATORS:
            pipelines.append([_Simple([], [])])
        elif w in (">", ">>", ">|", "<", "<>") or (set(w) <= set("<>|&") and w):
            target = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] not in _OPERATORS else None
            if target is not None:
                i += 1
                if ">" in w:
                    pipelines[-1][-1].out.append(target)
        else:
            pipelines[-1][-1].words.append(w)
        i += 1
    return [[s for s in p if s.words or s.out] for p in pipelines if any(s.words or s.out for s in p)]


def _program(words: list[str]) -> tuple[str, list[str]]:
    """The program's name (no directory) and its arguments, past VAR=x, sudo, timeout N."""
    k = 0
    while k < len(words):
        w = words[k]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", w) or w in PREFIXES:
            k += 1
        elif w == "timeout":
            k += 1
            while k < len(words) and (words[k].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", words[k])):
                k += 1
        else:
            break
    if k >= len(words):
        return "", []
    return words[k].rsplit("/", 1)[-1], words[k + 1:]


def _split_options(prog: str, args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """Options (each with its value, if it takes one) and operands; `--` ends options."""
    takes = VALUE_OPTIONS.get(prog, set())
    opts: dict[str, str | None] = {}
    operands: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            operands += args[k + 1:]
            break
        if a.startswith("-") and a != "-":
            name, _, value = a.partition("=")
            if name in takes and not value:
                value = args[k + 1] if k + 1 < len(args) else ""
                k += 1
            elif len(name) > 2 and name[:2] in takes and not name.startswith("--"):
                name, value = name[:2], name[2:]  # -n20
            opts[name] = value or None
        else:
            operands.append(a)
        k += 1
    return opts, operands


def _count(opts: dict[str, str | None], default: int) -> tuple[int | None, bool]:
    """head/tail's line count and whether it counts from the start (+K); None: bytes."""
    if "-c" in opts or "--bytes" in opts:
        return None, False
    for name in opts:
        if re.fullmatch(r"-\d+", name):  # head -20
            return int(name[1:]), False
    raw = opts.get("-n") or opts.get("--lines")
    if raw and re.fullmatch(r"[+-]?\d+", raw):
        return int(raw.lstrip("+-")), raw.startswith("+")
    return default, False


def _sed_lines(script: str) -> tuple[int, int | None] | None:
    """The lines a `sed -n` script prints: 'A,Bp', 'Ap', 'A,$p', several joined by ';'
    (their span); None when it prints something else."""
    spans = []
    for part in script.split(";"):
        if not part.strip():
            continue
        m = _SED_RANGE_RE.match(part)
        if not m:
            return None
        first = int(m.group(1))
        last = None if m.group(2) == "$" else int(m.group(2) or first)
        spans.append((first, last))
    if not spans:
        return None
    last_values = [s[1] for s in spans]
    return min(s[0] for s in spans), (None if None in last_values else max(v for v in last_values if v is not None))


def _narrow(r: FileRead, first: int, last: int | None) -> FileRead:
    """A read seen through a filter that keeps lines first..last of its output."""
    if r.partial:
        return r
    start = r.lines[0] if r.lines else 1
    end = r.lines[1] if r.lines else None
    lo = start + first - 1
    hi = start + last - 1 if last is not None else end
    if end is not None and hi is not None:
        hi = min(hi, end)
    return FileRead(r.path, (lo, hi))


class _Stage:
    """One simple command: what it reads of its named files, what it does to what it is piped."""

    def __init__(self, words: list[str]):
        self.prog, self.args = _program(words)
        self.opts, self.operands = _split_options(self.prog, self.args)
        self.reads: list[FileRead] = []
        self.writes: list[str] = []
        self.neutral = self.prog in NEUTRAL or not self.prog
        self.kind = "run"  # what it does to its input: "keep", "narrow", "partial" or "run"
        self.narrow: tuple[int, int | None] = (1, None)
        self._classify()

    def _classify(self) -> None:
        prog, opts, files = self.prog, self.opts, self.operands
        if prog in WHOLE_READERS:
            self.kind = "keep"
            self.reads = [FileRead(clean_path(f)) for f in files if f != "-"]
        elif prog in ("head", "tail"):
            n, from_start = _count(opts, 10)
            if n is None:
                self.kind, reads = "partial", [FileRead(clean_path(f), None, True) for f in files]
            elif prog == "head":
                self.kind, self.narrow = "narrow", (1, n)
                reads = [FileRead(clean_path(f), (1, n)) for f in files]
            elif from_start:
                self.kind, self.narrow = "narrow", (n, None)
                reads = [FileRead(clean_path(f), (n, None)) for f in files]
            else:
                self.kind, reads = "partial", [FileRead(clean_path(f), None, True) for f in files]
            self.reads = reads if "-f" not in opts else []
        elif prog == "sed":
            self._sed()
        elif prog in SEARCHERS:
            self._search()
        elif prog == "tee":
            self.kind, self.writes = "keep", [clean_path(f) for f in files]
        elif prog in WRITERS and files:
            self.writes = [clean_path(f) for f in files]
        elif prog in COPIERS and len(files) >= 2:
            self.writes = [clean_path(f) for f in (files if prog == "mv" else files[-1:])]
        elif prog == "perl" and any(o.startswith(("-i", "-pi")) for o in opts):
            self.writes = [clean_path(f) for f in files[1:]]

    def _sed(self) -> None:
        script = self.opts.get("-e") or (self.operands[0] if self.operands else "")
        files = self.operands[1:] if "-e" not in self.opts else self.operands
        if any(o.startswith("-i") or o == "--in-place" for o in self.opts):
            self.writes = [clean_path(f) for f in files]
            return
        if "-n" in self.opts or "--quiet" in self.opts:
            lines = _sed_lines(script)
            if lines is None:
                return
            self.kind, self.narrow = "narrow", (lines[0], lines[1])
            self.reads = [FileRead(clean_path(f), lines) for f in files]
        else:  # the file, edited on the way out
            self.kind = "keep"
            self.reads = [FileRead(clean_path(f)) for f in files]

    def _search(self) -> None:
        opts = self.opts
        if any(o in GREP_NO_LINES for o in opts):
            return
        files = self.operands if ("-e" in opts or "-f" in opts) else self.operands[1:]
        recursive = any(o in ("-r", "-R", "--recursive") or (o.startswith("-") and not o.startswith("--")
                        and ("r" in o or "R" in o) and o[1:].isalpha()) for o in opts)
        if self.prog in ("rg", "ag", "ack"):  # recursive on a directory: a named file only
            recursive = not files or not all(re.search(r"\.\w+$", f) and "*" not in f for f in files)
        if recursive:
            return
        self.kind = "partial"
        self.reads = [FileRead(clean_path(f), None, True) for f in files if f != "-"]


def effects(command: str) -> ShellEffects:
    """What a shell command reads, writes and fetches (module docstring)."""
    text = logical_lines(command or "")
    reads: list[FileRead] = []
    # what a stream other than stdout is sent to (2>err.log) is written, and shows nothing
    writes: list[str] = [clean_path(m) for m in _STDERR_RE.findall(text) if not m.startswith("/dev/")]
    text = _STDERR_RE.sub(" ", text)
    runs = everything = False
    programs: list[str] = []
    url = _URL_RE.search(text)
    fetch = None
    for pipeline in _pipelines(_tokens(text)):
        stages = [_Stage(s.words) for s in pipeline]
        redirected = [clean_path(t) for s in pipeline for t in s.out]
        writes += [t for t in redirected if not t.startswith("/dev/")]
        shown: list[FileRead] = []
        for k, st in enumerate(stages):
            programs.append(st.prog)
            writes += st.writes
            joined = " ".join([st.prog, *st.args])
            if GLOBAL_WRITE_RE.match(joined):
                everything = True
            if st.prog in ("curl", "wget") and url:
                fetch = url.group(0).rstrip(").,")
            if k > 0 and shown:  # what the earlier stages showed, through this one
                if st.kind == "narrow" and not st.reads:
                    shown = [_narrow(r, *st.narrow) for r in shown]
                elif st.kind == "partial" and not st.reads:
                    shown = [FileRead(r.path, None, True) for r in shown]
                elif st.kind == "keep" and not st.reads:
                    pass
                else:
                    shown = []
            shown += st.reads
            # a program of its own (not a reader, a filter, a writer or an echo)
            runs = runs or (st.kind == "run" and not (st.neutral or st.writes or st.reads))
        if not pipeline[-1].out:  # output sent to a file shows nothing
            reads += shown
    return ShellEffects(tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(writes)), everything, fetch,
                        runs, tuple(programs))


def numbered_lines(text: str) -> tuple[int, int] | None:
    """The line numbers an output shows as Claude Code's read does (`    12→text`), when
    at least two lines of it are such: (first, last); None otherwise."""
    nums = [int(n) for n in re.findall(r"(?m)^\s*(\d+)→", text or "")]
    return (min(nums), max(nums)) if len(nums) >= 2 else None
