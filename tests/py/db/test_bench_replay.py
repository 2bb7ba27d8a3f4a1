"""bench/replay.py on crafted sessions with known figures: re-reads (and what a write in
between changes), faults of the naive baselines counted by hand, a file evicted by
compile_context and read again counted as one fault, identifiers, SWE-agent's text
commands, the generator's determinism, and the JSON line's fields."""

import io
import json
import sys
import uuid
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import replay  # bench/replay.py
import replay_gen  # bench/replay_gen.py


def file_lines(name: str, n: int, start: int = 1) -> str:
    """A read_file result: n numbered lines, distinct per file."""
    return f"{name}\n" + "\n".join(
        f"{i:6}\tdef {name.replace('.', '_')}_helper_{i}(x): return x * {i} + {len(name)}"
        for i in range(start, start + n))


def write_session(path: Path, calls: list[tuple[str, dict, str]]) -> Path:
    """A session in the bench's JSONL: one tool call per model call, then a last reply."""
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test in the parser."}]
    for n, (name, args, result) in enumerate(calls):
        msgs.append({"role": "assistant", "content": f"Step {n}.", "tool_calls": [
            {"id": f"c{n}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
    msgs.append({"role": "assistant", "content": "Done."})
    path.write_text(json.dumps({"messages": msgs}) + "\n")
    return path


def read_a(start=1, end=40):
    return ("read_file", {"path": "a.py", "start_line": start, "end_line": end},
            file_lines("a.py", end - start + 1, start))


def echo(k: int, size: int = 3):
    return ("bash", {"command": f"echo step-{k}"},
            "\n".join(f"output {k} line {j}: value_{k}_{j} = {k * 1000 + j}" for j in range(size)))


def analysis_of(tmp_path, calls) -> replay.Analysis:
    return replay.Analysis(replay.load([write_session(tmp_path / "s.jsonl", calls)])[0])


def figures(tmp_path, calls, policies, window=32000) -> dict:
    lanes = replay.make_lanes(policies, [window], None, "t")
    recs = replay.load([write_session(tmp_path / "s.jsonl", calls)])
    result = replay.run(recs, lanes, None, log=lambda s: None)
    return result["groups"]["s.jsonl"][str(window)]


def test_a_reread_counts_only_without_a_write_in_between(tmp_path):
    a = analysis_of(tmp_path, [
        read_a(1, 40), read_a(30, 60),          # overlapping range: a re-read
        read_a(100, 140),                         # no overlap: not one
        echo(1), echo(1),                         # the same command, nothing written: a re-read
        ("edit_file", {"path": "a.py", "old": "x", "new": "y"}, "Edited a.py"),
        read_a(1, 40), echo(1)])                  # after the write: neither is a re-read
    counts = [len(a.rereads(c)) for c in a.calls]
    assert counts == [0, 1, 0, 0, 1, 0, 0, 0, 0]
    assert a.rereads(a.calls[1]) == [(a.calls[1].actions[0], [a.calls[0].index + 1])]


def test_naive_baselines_on_known_numbers(tmp_path):
    # call 0 reads a.py, calls 1-9 run other commands, call 10 reads a.py again: 10 calls
    # later, so stub8 had stubbed it (a fault), the oracle kept it (it is re-read)
    calls = [read_a(), *[echo(k) for k in range(1, 10)], read_a()]
    f = figures(tmp_path, calls, ["stub8", "oracle"])
    stub8, oracle = f["stub8"], f["oracle"]
    assert stub8["calls"] == oracle["calls"] == 12  # 11 tool calls and the last reply
    assert stub8["rereads"] == oracle["rereads"] == 1
    # stub8 stubs call j's result at call k > j + 8: j = 0, 1, 2 at calls 9, 10, 11
    assert (stub8["faults"], stub8["evictions"], stub8["fault_rate"]) == (1, 3, 0.33333)
    # the oracle stubs every result older than the previous call but the re-read one
    assert (oracle["faults"], oracle["evictions"]) == (0, 9)
    assert oracle["reduction"] > 0 and stub8["reduction"] > 0
    assert stub8["full_tokens"] == oracle["full_tokens"]


def test_an_evicted_file_read_again_is_one_fault_of_compile_context(tmp_path, db):
    # a small window: the first read (about 900 tokens) cannot stay in full behind ten
    # results as large; the last call reads it again
    calls = [read_a(1, 60), *[echo(k, 60) for k in range(1, 10)], read_a(1, 60)]
    write_session(tmp_path / "s.jsonl", calls)
    lanes = replay.make_lanes(["mnemo", "oracle"], [7000], db, uuid.uuid4().hex[:8])
    result = replay.run(replay.load([tmp_path / "s.jsonl"]), lanes, None, between=None,
                        log=lambda s: None, show_faults=True)
    mnemo = result["groups"]["s.jsonl"]["7000"]["mnemo"]
    assert mnemo["rereads"] == 1 and mnemo["faults"] == 1
    # what --show-faults says of it: a file read 10 calls back, below full, in a zone of paging's
    fault = mnemo["fault_analysis"]["file read"]
    assert (fault["count"], fault["distance_p50"]) == (1, 10)
    assert set(fault["fidelity"]) <= {"detail", "compact", "stub", "summarised", "evicted"}  # not redacted
    assert set(fault["zone"]) | set(fault["zone_left"]) <= {"normal", "caution", "warning", "critical", "emergency"}
    assert mnemo["evictions"] >= 1 and mnemo["reduction"] > 0.3
    assert mnemo["over_window"] == 0 and mnemo["skipped"] == 0
    assert mnemo["compile_ms_p50"] > 0
    assert result["groups"]["s.jsonl"]["7000"]["oracle"]["faults"] == 0


def test_identifiers_take_paths_names_codes_and_long_numbers():
    got = replay.identifiers(
        "See src/app/parser.py and setup.cfg: parse_date raised ValueError (E501) in "
        "json.loads at line 1474, not 12; MyParser.run_once returned 0x1f4; e.g. done.")
    assert {"src/app/parser.py", "setup.cfg", "parse_date", "ValueError", "E501",
            "json.loads", "1474", "MyParser.run_once", "0x1f4"} <= got
    assert not {"12", "e.g", "done", "See"} & got


def test_information_misses_of_a_stubbed_result(tmp_path):
    # the last reply names an identifier only the first result held: stub8 stubbed it
    calls = [("bash", {"command": "grep -rn parse ."}, "src/core/tokenizer_impl.py:88: found"),
             *[echo(k) for k in range(1, 10)]]
    write_session(tmp_path / "s.jsonl", calls)
    text = (tmp_path / "s.jsonl").read_text().replace(
        '"content": "Done."', '"content": "Fix in src/core/tokenizer_impl.py."')
    (tmp_path / "s.jsonl").write_text(text)
    lanes = replay.make_lanes(["stub8", "oracle"], [32000], None, "t")
    result = replay.run(replay.load([tmp_path / "s.jsonl"]), lanes, None, log=lambda s: None)
    f = result["groups"]["s.jsonl"]["32000"]
    assert (f["stub8"]["candidates"], f["stub8"]["misses"], f["stub8"]["absent"]) == (1, 1, 1)
    assert (f["oracle"]["candidates"], f["oracle"]["misses"]) == (1, 1)


def test_swe_agent_text_commands_and_the_open_file():
    a = replay.Analysis(replay.Recording("g", "t", None, [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "Open it.\n```\nopen src/fields.py 1474\n```"},
        {"role": "user", "content": "[File: /repo/src/fields.py (2000 lines total)]\n"
                                    "1424:a\n1523:b\n(Open file: /repo/src/fields.py)"},
        {"role": "assistant", "content": "<command>\nedit 1475:1475\nreturn x\nend_of_edit\n</command>"},
        {"role": "user", "content": "File updated.\n(Open file: /repo/src/fields.py)"},
        {"role": "assistant", "content": "```\ngoto 1480\n```"},
        {"role": "user", "content": "1430:a\n1529:b"},
    ], [], {}))
    assert a.calls[0].actions == [replay.Action("read", "src/fields.py", 1424, 1523)]
    assert a.calls[1].actions == [replay.Action("write", "/repo/src/fields.py")]
    assert a.calls[2].actions == [replay.Action("read", "/repo/src/fields.py", 1430, 1529)]
    assert a.rereads(a.calls[2]) == []  # the edit in between


def test_the_generator_is_deterministic_and_long(tmp_path):
    one = replay_gen.generate(1, 5, 300, 300, limit=120)
    assert one == replay_gen.generate(1, 5, 300, 300, limit=120)
    msgs = one[0]["messages"]
    assert sum(1 for m in msgs if m["role"] == "assistant") == 121  # 120 calls and the last reply
    assert {"read_file", "edit_file", "bash"} <= {
        m["tool_calls"][0]["function"]["name"] for m in msgs if m.get("tool_calls")}
    # its prefix is the same as the longer session's
    longer = replay_gen.generate(1, 5, 300, 300, limit=150)[0]["messages"]
    assert longer[:len(msgs) - 1] == msgs[:-1]


@pytest.mark.parametrize("policies", ["stub8,oracle"])
def test_the_json_line(tmp_path, policies):
    write_session(tmp_path / "s.jsonl", [read_a(), echo(1), read_a()])
    out = io.StringIO()
    with redirect_stdout(out):
        replay.main([str(tmp_path / "s.jsonl"), "--policies", policies, "--windows", "32000,128000",
                     "--quiet"])
    lines = out.getvalue().strip().splitlines()
    line = json.loads(lines[-1])
    assert line["bench"] == "replay" and set(line["groups"]) == {"s.jsonl"}
    g = line["groups"]["s.jsonl"]
    assert (g["sessions"], g["model_calls"]) == (1, 4)
    for w in ("32000", "128000"):
        for p in ("stub8", "oracle"):
            assert {"calls", "full_tokens", "sent_tokens", "reduction", "rereads", "faults",
                    "evictions", "fault_rate", "faults_per_call", "candidates", "misses",
                    "absent", "miss_rate", "over_window"} <= set(g[w][p])


def shell(command: str, result: str):
    return ("bash", {"command": command}, result)


def test_shell_reads_as_agents_write_them(tmp_path):
    a = analysis_of(tmp_path, [
        shell("cd /repo && cat a.py | head -50", file_lines("a.py", 50)),
        shell("sed -n '30,60p' a.py", file_lines("a.py", 31, 30)),      # overlaps: a re-read
        shell("grep -rn helper .", "a.py:3: def a_py_helper_3"),         # a search, no read
        shell("grep -n helper a.py", "3: def a_py_helper_3"),            # some lines of a.py: a re-read
        shell("echo done", "done"),                                       # a command, nothing read
        shell("cat > a.py <<'EOF'\ncat b.py\nEOF", ""),                   # a write (the body is data)
        shell("cd /repo &&\\\n  nl -ba a.py", file_lines("a.py", 10)),   # after the write: no re-read
    ])
    kinds = [[(x.kind, x.key, x.start, x.end, x.partial) for x in c.actions] for c in a.calls[:7]]
    assert kinds[0] == [("read", "a.py", 1, 50, False)]
    assert kinds[1] == [("read", "a.py", 30, 60, False)]
    assert kinds[2] == [("command", "grep -rn helper .", None, None, False)]
    assert kinds[3] == [("read", "a.py", None, None, True)]
    assert kinds[4] == [("command", "echo done", None, None, False)]
    assert kinds[5] == [("write", "a.py", None, None, False)]
    assert kinds[6] == [("read", "a.py", 1, 10, False)]
    assert [len(a.rereads(c)) for c in a.calls[:7]] == [0, 1, 0, 1, 0, 0, 0]


def test_claude_codes_numbered_reads_and_multi_line_text_commands(tmp_path):
    numbered = "\n".join(f"{i:6}→line {i} of b.py" for i in range(20, 41))
    a = analysis_of(tmp_path, [
        ("Read", {"file_path": "/repo/b.py", "offset": 20, "limit": 21}, numbered),
        ("Read", {"file_path": "/repo/b.py"}, "\n".join(f"{i:6}→line {i} of b.py" for i in range(1, 31))),
    ])
    assert a.calls[0].actions == [replay.Action("read", "/repo/b.py", 20, 40)]
    assert a.calls[1].actions == [replay.Action("read", "/repo/b.py", 1, 30)]
    assert len(a.rereads(a.calls[1])) == 1
    # a text-acting agent's command over several lines reads every file it names
    t = replay.Analysis(replay.Recording("g", "t", None, [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "```bash\ncd /repo && \\\n  cat a.py b.py\n```"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "```bash\nhead -n 5 b.py\n```"},
        {"role": "user", "content": "b"},
    ], [], {}))
    assert [x.key for x in t.calls[0].actions] == ["a.py", "b.py"]
    assert t.rereads(t.calls[1]) == [(replay.Action("read", "b.py", 1, 5), [2])]


def test_show_faults_aggregates_kind_distance_fidelity_and_zone(tmp_path):
    # stub8 stubs what is more than 8 calls old: the test run, the ls, the file read and
    # the error of calls 0-3 are each re-read 10 calls later (calls 10-13)
    test_out = "tests/test_a.py ..F\nFAILED tests/test_a.py::test_x - AssertionError"
    calls = [shell("python -m pytest tests/test_a.py", test_out),
             shell("ls src", "a.py\nb.py\nc.py"),
             shell("cat src/a.py", file_lines("a.py", 20)),
             shell("python run.py", "Traceback (most recent call last):\nValueError: bad"),
             *[echo(k) for k in range(1, 7)],
             shell("python -m pytest tests/test_a.py", test_out),
             shell("ls src", "a.py\nb.py\nc.py"),
             shell("sed -n '5,9p' src/a.py", file_lines("a.py", 5, 5)),
             shell("python run.py", "Traceback (most recent call last):\nValueError: bad")]
    write_session(tmp_path / "s.jsonl", calls)
    lanes = replay.make_lanes(["stub8", "oracle"], [32000], None, "t")
    logged: list[str] = []
    result = replay.run(replay.load([tmp_path / "s.jsonl"]), lanes, None, log=logged.append, show_faults=True)
    stub8 = result["groups"]["s.jsonl"]["32000"]["stub8"]
    assert stub8["faults"] == 4
    fa = stub8["fault_analysis"]
    assert {k: (v["count"], v["distance_p50"]) for k, v in fa.items()} == {
        "test output": (1, 10), "ls": (1, 10), "file read": (1, 10), "error": (1, 10), "all": (4, 10)}
    assert fa["all"]["fidelity"] == {"stub": 4} and fa["all"]["zone"] == {"-": 4}
    assert result["groups"]["s.jsonl"]["32000"]["oracle"]["fault_analysis"] == {}
    assert any(line.startswith("[32000] stub8 s.jsonl: faults by kind") for line in logged)
    assert any("file read" in line and "stub:1" in line for line in logged)


def test_a_session_read_through_the_shell_re_reads_what_it_did_through_read_file(tmp_path):
    # the same generated session, its reads written as cd && sed -n, nl | sed, cat -n | head | tail
    tools = replay_gen.generate(1, 5, 300, 300, limit=120)[0]
    shell_session = replay_gen.as_shell_reads(tools)
    assert any("nl -ba" in json.dumps(m.get("tool_calls")) for m in shell_session["messages"])
    got = []
    for name, session in (("tools", tools), ("shell", shell_session)):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(session) + "\n")
        a = replay.Analysis(replay.load([tmp_path / f"{name}.jsonl"])[0])
        got.append(([[(x.kind, x.key, x.start, x.end) for x in c.actions if x.kind == "read"] for c in a.calls],
                    [len(a.rereads(c)) for c in a.calls]))
    assert got[0] == got[1] and sum(got[0][1]) > 10


def test_bounds_hold_a_result_until_its_last_re_read(tmp_path):
    """bench/replay_bounds.py on a crafted session, its sums counted by hand: a.py read
    at call 0 and again at call 3 (a re-read, 3 calls after), echoes between. Foresight
    holds the first read in full at calls 1-3 only; LRU-2 holds each call's result for
    two calls and misses the re-read; LRU-3 catches it."""
    import replay_bounds

    a = analysis_of(tmp_path, [read_a(), echo(1), echo(2), read_a(), echo(4)])
    got = replay_bounds.bounds(a, None, [2, 3])
    read0 = a.calls[0].index + 1  # the first read's result
    assert got["rereads"] == 1 and got["lru2_faults"] == 1 and got["lru3_faults"] == 0
    # bare = floor + the pending re-read's tokens at calls 1, 2, 3 (call 1: its new input)
    assert got["bare"] == got["floor"] + 2 * a.tokens[read0]
    results = {c.number: c.index + 1 for c in a.calls[:5]}
    lru2 = sum(a.tokens[results[k]] for n in range(1, 6) for k in range(max(0, n - 2), n - 1))
    assert got["lru2"] == got["floor"] + lru2
    assert got["lru2+foresight"] == got["lru2"] + a.tokens[read0]  # held at call 3 as well
    f = replay_bounds.figures(dict(got, sessions=1), [2, 3])
    assert f["ceiling"] >= f["foresight_bare"] >= f["foresight_stubs"] >= f["foresight_whole"]
