"""Paging's reading of shell commands (mnemo_db.paging.shell), the one parser paging and
bench/replay.py share: what agents' commands read and write, the negative cases, and
what paging keeps of it (sources.tool_accesses, sources.text_action)."""

from __future__ import annotations

import pytest
from mnemo_db.paging import shell, sources
from mnemo_db.paging.shell import FileRead


def reads(command: str) -> list[tuple]:
    return [(r.path, r.lines, r.partial) for r in shell.effects(command).reads]


@pytest.mark.parametrize(("command", "expected"), [
    ("cat src/a.py", [("src/a.py", None, False)]),
    ("cat -n ./src/a.py", [("src/a.py", None, False)]),
    ("nl -ba a.py", [("a.py", None, False)]),
    ("head a.py", [("a.py", (1, 10), False)]),
    ("head -n 30 a.py", [("a.py", (1, 30), False)]),
    ("head -n30 a.py", [("a.py", (1, 30), False)]),
    ("head -40 a.py", [("a.py", (1, 40), False)]),
    ("tail -n 20 build.log", [("build.log", None, True)]),
    ("tail -n +120 a.py", [("a.py", (120, None), False)]),
    ("sed -n '100,140p' src/a.py", [("src/a.py", (100, 140), False)]),
    ("sed -n 5p a.py", [("a.py", (5, 5), False)]),
    ("sed -n '10,20p;40,45p' a.py", [("a.py", (10, 45), False)]),
    ("grep -n 'def parse' src/a.py", [("src/a.py", None, True)]),
    ("grep -e x -e y a.py b.py", [("a.py", None, True), ("b.py", None, True)]),
])
def test_one_reader_on_named_files(command, expected):
    assert reads(command) == expected


@pytest.mark.parametrize(("command", "expected"), [
    # several files in one command
    ("cat a.py b.py", [("a.py", None, False), ("b.py", None, False)]),
    ("head -n 5 a.py b.py", [("a.py", (1, 5), False), ("b.py", (1, 5), False)]),
    # chains and pipes: cd and echo are nothing, a later stage narrows the read
    ("cd /repo && cat a.py | head -50", [("a.py", (1, 50), False)]),
    ("cd /repo; echo '---'; sed -n '10,30p' a.py", [("a.py", (10, 30), False)]),
    ("sed -n '100,200p' a.py | head -n 20", [("a.py", (100, 119), False)]),
    ("cat -n a.py | sed -n '5,9p'", [("a.py", (5, 9), False)]),
    ("cat a.py | grep foo", [("a.py", None, True)]),
    ("cat a.py 2>/dev/null || echo missing", [("a.py", None, False)]),
    # several lines: a continued line, a multi-line script
    ("cat a.py \\\n    b.py", [("a.py", None, False), ("b.py", None, False)]),
    ("cd /repo\nhead -n 3 a.py\ncat b.py", [("a.py", (1, 3), False), ("b.py", None, False)]),
    # bad quoting: split on blanks, the file still found
    ("cat 'a.py", [("a.py", None, False)]),
])
def test_chains_pipes_several_files_and_lines(command, expected):
    assert reads(command) == expected


@pytest.mark.parametrize("command", [
    "grep -r parse .", "grep -rn 'def x' src/", "grep -Rl x src", "rg parse", "rg parse src",
    "grep -l foo a.py",  # names only: no line of the file
    "echo cat a.py", "ls -la", "python a.py | head -50", "cat a.py | wc -l",
    "find . -name '*.py' | xargs cat",
    "cat a.py > b.py",  # what it shows goes to a file
    "tail -f server.log",
])
def test_what_is_no_read(command):
    assert shell.effects(command).reads == ()


def test_searches_and_programs_run_echo_does_not():
    assert shell.effects("grep -r x .").runs
    assert shell.effects("python -m pytest tests/ | tail -5").runs
    assert not shell.effects("echo done").runs
    assert not shell.effects("cd /repo && cat a.py").runs
    assert shell.effects("ls; cat a.py").runs  # ls's listing is a command's output


@pytest.mark.parametrize(("command", "written"), [
    ("cat > src/new.py <<'EOF'\nimport os\ncat secret.txt\nEOF", ("src/new.py",)),
    ("cat <<EOF > notes.md\n# cat a.py\nEOF", ("notes.md",)),
    ("echo x >> log.txt", ("log.txt",)),
    ("sed -i 's/a/b/' a.py b.py", ("a.py", "b.py")),
    ("python run.py 2> err.log", ("err.log",)),
    ("mv old.py new.py", ("old.py", "new.py")),
    ("cp a.py backup/a.py", ("backup/a.py",)),
    ("rm -f a.py && touch b.py", ("a.py", "b.py")),
    ("cat a.py | tee copy.py", ("copy.py",)),
])
def test_writes(command, written):
    eff = shell.effects(command)
    assert eff.writes == written
    assert "secret.txt" not in {r.path for r in eff.reads}  # a heredoc's line is no command


def test_a_heredoc_body_is_data_and_the_lines_after_it_are_commands():
    eff = shell.effects("cat > t.py <<EOF\nprint(1)\nEOF\npython t.py\ncat out.txt")
    assert eff.writes == ("t.py",) and eff.runs
    assert eff.reads == (FileRead("out.txt"),)


def test_installs_and_git_checkouts_write_everything():
    assert shell.effects("pip install -e .").writes_everything
    assert shell.effects("cd /repo && git checkout -- a.py").writes_everything
    assert not shell.effects("git diff").writes_everything


def test_claude_codes_numbered_read_output():
    out = "     1→import os\n     2→\n     3→def main():\n"
    assert shell.numbered_lines(out) == (1, 3)
    assert shell.numbered_lines("12→ only one line") is None
    assert shell.numbered_lines("1: a\n2: b") is None


def test_paging_keeps_reads_of_known_lines_and_every_write():
    acc = sources.tool_accesses("Bash", {"command": "cd /repo && cat a.py b.py | head -20; grep -n x c.py"})
    assert [(a.source, a.lines, a.reads) for a in acc] == [("a.py", (1, 20), True), ("b.py", (1, 20), True)]
    acc = sources.tool_accesses("bash", {"command": "sed -i 's/x/y/' a.py && cat a.py"})
    assert [(a.source, a.writes, a.reads) for a in acc] == [("a.py", True, False), ("a.py", False, True)]
    assert sources.tool_accesses("bash", {"command": "grep -rn parse ."}) == []
    assert sources.tool_accesses("bash", {"command": "curl -s https://example.org/x"})[0].fetch
    assert sources.tool_accesses("Read", {"file_path": "/r/a.py", "offset": 10, "limit": 5}) == [
        sources.Access(source="/r/a.py", lines=(10, 14), reads=True)]


def test_a_text_action_is_its_whole_shell_block():
    name, args = sources.text_action("Look at both.\n```bash\ncd /repo && \\\n  cat a.py\nnl b.py\n```")
    assert name == "bash"
    assert [a.source for a in sources.tool_accesses(name, args)] == ["a.py", "b.py"]


def test_a_text_action_in_swe_agents_xml_form_is_read():
    """SWE-agent's xml templates write the action as <command>...</command>: paging
    took the environment's answers to it for user turns (goal shifts)."""
    assert sources.text_action("Open it.\n<command>\nopen src/a.py\n</command>\n") == ("open", {"path": "src/a.py"})
    name, args = sources.text_action("Run it.\n<command>\npython reproduce.py\n</command>")
    assert (name, args) == ("bash", {"command": "python reproduce.py"})
    assert sources.text_action("Done.\n<command>\n</command>\nand then more") is None
