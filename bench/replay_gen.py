"""Long coding-agent sessions for bench/replay.py, generated deterministically.

Public coding-agent recordings are too short to put a 32k window under pressure; these
sessions run 300 to 2,000 model calls over real source files: the project's own tree
(src, plpy, bench, tests, scripts) and a few packages installed in .venv. The same seed
over the same files gives the same sessions, byte for byte.

A session is a task on one focus function, in phases of 25 to 120 calls. A phase has a
working set (the file being edited, a test file, one to three files beside it) and a
plan (written by the agent when the phase starts). Each call is one tool call of the
agent with a line of reasoning; the reasoning names identifiers of what it saw (mostly
the last results, sometimes older ones), as agents do. The actions, with the recurring
patterns agents show:

- read_file of a window of the focus file (re-reading the file being edited, mostly
  after an edit) or of a working-set file;
- edit_file of the focus file (the file changes: later reads show the new lines);
- bash: the phase's test command, run again and again (failing with a traceback into the
  focus file until the phase's fix, then passing), grep -rn for an identifier followed by
  opening a hit, ls of a directory;
- now and then, a re-read of a range read long before and not written since (what a
  paging system must keep or answer), and of one read a few calls back.

Between phases the user speaks (the next request). Output: the OpenAI-shaped JSONL that
bench/replay.py and `mnemo import` read (docs/replay.md), one session per line.

With --shell-reads, each read_file call is written as a shell command instead (`cd /repo
&& sed -n 'A,Bp' F`, `nl -ba F | sed -n ...`, `cat -n F | head | tail`), as agents that
act through a shell read (as_shell_reads).

Usage: bench/replay_gen.py OUT.jsonl [--sessions N] [--seed S] [--min-calls 300]
       [--max-calls 2000] [--packages psycopg,click,...] [--shell-reads]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_DIRS = ("src", "plpy", "bench", "tests", "scripts")
PACKAGES = ("psycopg", "click", "jinja2", "_pytest", "attr", "h11", "anyio")
NAMESPACE = uuid.UUID("0f6f1a3e-2b9c-4f57-8a43-5b1f0c9d7e21")
SYSTEM_PROMPT = (
    "You are a coding agent working in a Python repository. Solve the user's task with "
    "the tools: read_file(path, start_line, end_line) shows numbered lines; "
    "edit_file(path, old, new) replaces text; bash(command) runs a shell command (tests, "
    "grep, ls). Think briefly before each call, say what you found, and keep the tests "
    "passing. When the task is done, say so.")
ERRORS = ("AssertionError", "TypeError", "KeyError", "ValueError", "AttributeError",
          "IndexError", "RuntimeError")
# Re-reads of an unchanged range, per call: read more than 60 calls before (rare: pichay
# saw 0.025 % of evicted results asked for again), or 2 to 12 calls before (common).
OLD_REREAD = 0.001
RECENT_REREAD = 0.035
DEF_RE = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)|^\s*class\s+([A-Za-z_]\w*)")
WORD_RE = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{4,}\b")


def source_files(packages: tuple[str, ...]) -> list[Path]:
    """The pool: .py files of 40 to 4,000 lines, sorted (the order is part of the seed)."""
    roots = [ROOT / d for d in PROJECT_DIRS]
    site = sorted((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
    if site:
        roots += [site[0] / p for p in packages]
    out = []
    for r in roots:
        if r.is_dir():
            for f in sorted(r.rglob("*.py")):
                try:
                    n = f.read_text(encoding="utf-8").count("\n")
                except (UnicodeDecodeError, OSError):
                    continue
                if 40 <= n <= 4000:
                    out.append(f)
    return out


def shown(path: Path) -> str:
    """How the agent names a file: relative to the checkout, or site-packages/..."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        parts = path.parts
        return "/".join(parts[parts.index("site-packages"):]) if "site-packages" in parts else str(path)


@dataclass
class Read:
    path: str
    start: int
    end: int
    call: int
    version: int  # the file's edit count when read


@dataclass
class Phase:
    focus: Path
    test_command: str
    test_name: str
    related: list[Path]
    fixed_after: int  # edits of the focus file that fix the phase's failing test
    edits: int = 0


@dataclass
class State:
    rng: random.Random
    pool: list[Path]
    lines: dict[Path, list[str]] = field(default_factory=dict)
    versions: dict[Path, int] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # identifiers of recent results, newest last
    calls: int = 0
    pending_open: tuple[Path, int] | None = None  # a grep hit to open next

    def file(self, p: Path) -> list[str]:
        if p not in self.lines:
            self.lines[p] = p.read_text(encoding="utf-8").splitlines()
            self.versions[p] = 0
        return self.lines[p]

    def defs(self, p: Path) -> list[tuple[int, str]]:
        return [(i + 1, m.group(1) or m.group(2)) for i, line in enumerate(self.file(p))
                if (m := DEF_RE.match(line))]

    def by_path(self, name: str) -> Path:
        return next(p for p in self.lines if shown(p) == name)


class Generator:
    def __init__(self, seed: int, pool: list[Path]):
        self.s = State(random.Random(seed), pool)
        self.call_id = 0

    # -------------------------------------------------------------- messages
    def call(self, thought: str, name: str, args: dict, result: str) -> None:
        self.call_id += 1
        cid = f"call_{self.call_id:05d}"
        self.s.messages.append({"role": "assistant", "content": thought, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]})
        self.s.messages.append({"role": "tool", "tool_call_id": cid, "content": result})
        self.s.calls += 1
        self.s.seen += [w for w in WORD_RE.findall(result) if "_" in w or w[0].isupper()][-12:]
        self.s.seen = self.s.seen[-200:]

    def mention(self, old: bool = False) -> str:
        """An identifier the agent saw: a recent one, or (old) one from long before."""
        seen = self.s.seen
        if not seen:
            return "the code"
        if old and len(seen) > 60:
            return f"`{self.s.rng.choice(seen[:-40])}`"
        return f"`{self.s.rng.choice(seen[-24:])}`"

    # -------------------------------------------------------------- actions
    def read(self, p: Path, start: int, end: int, why: str) -> None:
        lines = self.s.file(p)
        start, end = max(1, start), min(len(lines), end)
        body = "\n".join(f"{i:6}\t{lines[i - 1]}" for i in range(start, end + 1))
        self.s.reads.append(Read(shown(p), start, end, self.s.calls, self.s.versions[p]))
        self.call(why, "read_file", {"path": shown(p), "start_line": start, "end_line": end},
                  f"{shown(p)} ({len(lines)} lines)\n{body}")

    def read_window(self, p: Path, around: int | None, why: str) -> None:
        n = len(self.s.file(p))
        size = self.s.rng.randint(60, 200)
        center = around or self.s.rng.randint(1, n)
        self.read(p, center - size // 3, center - size // 3 + size, why)

    def edit(self, ph: Phase) -> None:
        rng, lines = self.s.rng, self.s.file(ph.focus)
        defs = self.s.defs(ph.focus) or [(1, "module")]
        at, name = rng.choice(defs)
        i = min(len(lines) - 1, at + rng.randint(1, 6))
        old = lines[i]
        new = self._changed(old, rng)
        lines[i] = new
        self.s.versions[ph.focus] += 1
        ph.edits += 1
        lo, hi = max(1, i - 3), min(len(lines), i + 5)
        snippet = "\n".join(f"{k:6}\t{lines[k - 1]}" for k in range(lo, hi + 1))
        self.call(f"In `{name}` the line {i + 1} is the culprit; I change it.", "edit_file",
                  {"path": shown(ph.focus), "old": old, "new": new},
                  f"Edited {shown(ph.focus)}: line {i + 1}\n{snippet}")

    @staticmethod
    def _changed(line: str, rng: random.Random) -> str:
        nums = re.findall(r"\b\d+\b", line)
        if nums:
            n = rng.choice(nums)
            return line.replace(n, str(int(n) + rng.randint(1, 9)), 1)
        indent = line[:len(line) - len(line.lstrip())]
        if line.strip():
            return f"{line}  # checked: {rng.choice(['bound', 'order', 'none', 'type'])}"
        return f"{indent}pass"

    def run_tests(self, ph: Phase) -> None:
        # the same test on the same code prints the same output
        rng = random.Random(f"{ph.test_command}:{shown(ph.focus)}:{ph.edits}")
        total = rng.randint(8, 60)
        if ph.edits >= ph.fixed_after:
            out = (f"{'.' * total}{' ' * 4}[100%]\n{total} passed in {rng.randint(20, 900) / 100:.2f}s")
            self.call("Running the tests again.", "bash", {"command": ph.test_command}, out)
            return
        defs = self.s.defs(ph.focus) or [(1, "module")]
        at, name = defs[(ph.edits * 7 + len(ph.test_name)) % len(defs)]
        lines = self.s.file(ph.focus)
        err = ERRORS[len(name) % len(ERRORS)]
        value = 100 + (len(name) * 37 + ph.edits * 11) % 9000
        src = lines[min(len(lines), at + 1) - 1].strip()
        out = "\n".join([
            "============================= test session starts ==============================",
            f"collected {total} items", "",
            f"{ph.test_command.split()[-1]} {'.' * (total // 2)}F{'.' * (total - total // 2 - 1)}",
            "=================================== FAILURES ===================================",
            f"____________________________ {ph.test_name} ____________________________", "",
            f"    def {ph.test_name}():",
            f">       assert {name}(case) == {value}",
            f"{shown(ph.focus)}:{at + 1}: in {name}",
            f"    {src}",
            f"E   {err}: {name} returned {value - 1} (expected {value})",
            "=========================== short test summary info ============================",
            f"FAILED {ph.test_command.split()[-1]}::{ph.test_name} - {err}",
            f"1 failed, {total - 1} passed in {rng.randint(20, 900) / 100:.2f}s"])
        self.call("Running the phase's test to see where it stands.", "bash",
                  {"command": ph.test_command}, out)

    def grep(self, ph: Phase) -> None:
        rng = self.s.rng
        names = [n for _, n in self.s.defs(ph.focus)] or ["main"]
        word = rng.choice(names)
        scope = ph.focus.parent
        hits = []
        for p in self.s.pool:
            if p.parent != scope and scope not in p.parents:
                continue
            for i, line in enumerate(self.s.file(p), 1):
                if re.search(rf"\b{re.escape(word)}\b", line):
                    hits.append((p, i, line.strip()))
        hits = hits[:25]
        out = "\n".join(f"{shown(p)}:{i}:{text[:160]}" for p, i, text in hits) or "(no matches)"
        self.call(f"Where else is `{word}` used?", "bash",
                  {"command": f"grep -rn '{word}' {shown(scope)}"}, out)
        if hits:
            p, i, _ = rng.choice(hits)
            self.s.pending_open = (p, i)

    def ls(self, ph: Phase) -> None:
        d = ph.focus.parent
        names = sorted(x.name + ("/" if x.is_dir() else "") for x in d.iterdir()
                       if not x.name.startswith((".", "__pycache__")))
        self.call("Looking at the package's files.", "bash", {"command": f"ls {shown(d)}"},
                  "\n".join(names))

    def reread(self, old: bool) -> bool:
        """A re-read of a range read before and not written since: long ago (old) or a
        few calls back. False when there is none."""
        s = self.s
        valid = [r for r in s.reads if s.versions[s.by_path(r.path)] == r.version
                 and (s.calls - r.call > 60 if old else 2 <= s.calls - r.call <= 12)]
        if not valid:
            return False
        r = s.rng.choice(valid)
        why = (f"I need {r.path} lines {r.start}-{r.end} again, which I read earlier." if old
               else f"Back to {r.path} to check {self.mention()} once more.")
        self.read(s.by_path(r.path), r.start, r.end, why)
        return True

    # -------------------------------------------------------------- the session
    def phase(self, first: bool) -> Phase:
        rng, pool = self.s.rng, self.s.pool
        focus = rng.choice(pool)
        while not self.s.defs(focus):
            focus = rng.choice(pool)
        near = [p for p in pool if p.parent == focus.parent and p != focus]
        related = rng.sample(near, min(len(near), rng.randint(1, 3))) or [rng.choice(pool)]
        name = rng.choice(self.s.defs(focus))[1]
        tests = [p for p in pool if p.name.startswith("test_")]
        test_file = shown(rng.choice(tests)) if tests else "tests/test_main.py"
        ph = Phase(focus, f"python -m pytest -q -x {test_file}", f"test_{name.lower()}",
                   related, rng.randint(2, 6))
        request = (f"Task: `{name}` in {shown(focus)} gives wrong results; find out why and fix "
                   f"it. The failing test is {ph.test_name} in {test_file}." if first else
                   f"Thanks. Next: `{name}` in {shown(focus)} has a similar problem; fix it the "
                   f"same way and keep {test_file} passing.")
        self.s.messages.append({"role": "user", "content": request})
        plan = (f"Plan: 1. run {test_file} to see the failure; 2. read `{name}` in "
                f"{shown(focus)} and its callers ({', '.join(shown(p) for p in related)}); "
                f"3. fix and re-run the test; 4. grep for other uses.")
        self.run_tests(ph)
        self.s.messages[-2]["content"] = plan
        return ph

    def session(self, calls: int) -> list[dict]:
        rng = self.s.rng
        ph = self.phase(True)
        phase_end = self.s.calls + rng.randint(25, 120)
        while self.s.calls < calls:
            if self.s.calls >= phase_end:
                ph = self.phase(False)
                phase_end = self.s.calls + rng.randint(25, 120)
                continue
            if self.s.pending_open:
                p, line = self.s.pending_open
                self.s.pending_open = None
                self.read_window(p, line, f"Opening the hit in {shown(p)} at line {line}.")
                continue
            x = rng.random()
            if x < OLD_REREAD and self.reread(old=True):
                continue
            if x < OLD_REREAD + RECENT_REREAD and self.reread(old=False):
                continue
            if x < 0.27:
                self.read_window(ph.focus, None, f"Reading {shown(ph.focus)} around {self.mention()}.")
            elif x < 0.40:
                p = rng.choice(ph.related)
                self.read_window(p, None, f"{self.mention()} comes from {shown(p)}; reading it.")
            elif x < 0.56:
                self.edit(ph)
            elif x < 0.74:
                self.run_tests(ph)
            elif x < 0.84:
                self.grep(ph)
            elif x < 0.88:
                self.ls(ph)
            else:
                p = rng.choice(self.s.pool)
                self.read_window(p, None, f"Checking how {shown(p)} handles {self.mention(old=True)}.")
        self.s.messages.append({"role": "assistant", "content": "Done: the tests pass."})
        return self.s.messages


def generate(n: int, seed: int, min_calls: int, max_calls: int,
             packages: tuple[str, ...] = PACKAGES, limit: int | None = None) -> list[dict]:
    """n sessions as {"session_id", "messages", "metadata"} (the importer's JSONL lines);
    limit: only each session's first `limit` calls (the same calls as in the whole one)."""
    pool = source_files(packages)
    if not pool:
        raise SystemExit("no source files found for the generator")
    out = []
    for k in range(n):
        rng = random.Random(f"{seed}:{k}")
        calls = rng.randint(min_calls, max_calls)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        messages += Generator(rng.randrange(1 << 30), pool).session(min(calls, limit or calls))
        out.append({"session_id": str(uuid.uuid5(NAMESPACE, f"{seed}:{k}:{calls}")),
                    "messages": messages,
                    "metadata": {"source": "replay_gen", "seed": seed, "index": k, "calls": calls}})
    return out


# How a shell-acting agent (mini-swe-agent, Claude Code's Bash) writes a read of lines
# A-B of a file, taken in turn; nl and cat -n number the lines they show, sed does not.
SHELL_READS = (
    ("cd /repo && sed -n '{a},{b}p' {path}", False),
    ("nl -ba {path} | sed -n '{a},{b}p'", True),
    ("cat -n {path} | head -n {b} | tail -n +{a}", True),
    ("sed -n '{a},{b}p' {path} && echo '---'", False),
)
_NUMBERED_RE = re.compile(r"^ *(\d+)\t(.*)$")


def as_shell_reads(session: dict) -> dict:
    """The session with each read_file call written as a shell command of SHELL_READS
    (in turn), its result the lines the command shows (numbered or not): the same
    session as an agent that reads with cat, nl, sed and head acts it."""
    msgs = [dict(m) for m in session["messages"]]
    forms = 0
    for k, m in enumerate(msgs):
        fn = (m.get("tool_calls") or [{}])[0].get("function") or {}
        if fn.get("name") != "read_file" or k + 1 >= len(msgs):
            continue
        args = json.loads(fn["arguments"])
        form, numbered = SHELL_READS[forms % len(SHELL_READS)]
        forms += 1
        command = form.format(a=args["start_line"], b=args["end_line"], path=args["path"])
        m["tool_calls"] = [dict(m["tool_calls"][0], function={"name": "bash", "arguments": json.dumps(
            {"command": command})})]
        shown_lines = [_NUMBERED_RE.match(line) for line in msgs[k + 1]["content"].splitlines()[1:]]
        msgs[k + 1] = dict(msgs[k + 1], content="\n".join(
            x.group(0) if numbered else x.group(2) for x in shown_lines if x))
    return dict(session, messages=msgs, metadata=dict(session.get("metadata") or {}, reads="shell"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--min-calls", type=int, default=300)
    ap.add_argument("--max-calls", type=int, default=2000)
    ap.add_argument("--packages", default=",".join(PACKAGES))
    ap.add_argument("--shell-reads", action="store_true",
                    help="reads written as shell commands (cat -n, nl, sed -n, head) as_shell_reads")
    args = ap.parse_args(argv)
    sessions = generate(args.sessions, args.seed, args.min_calls, args.max_calls,
                        tuple(p for p in args.packages.split(",") if p))
    if args.shell_reads:
        sessions = [as_shell_reads(s) for s in sessions]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for s in sessions:
            f.write(json.dumps(s) + "\n")
    print(f"[replay_gen] {len(sessions)} sessions, "
          f"{sum(len(s['messages']) for s in sessions)} messages -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
