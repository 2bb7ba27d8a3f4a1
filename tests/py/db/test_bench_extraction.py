"""make bench-extraction (bench/extraction.py) on a tiny slice of LoCoMo: it runs end to
end, offline and with a helper LLM (the local fake one), and its last line is the JSON
it promises; its well-formedness rules catch what they say they catch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DSN
from fake_llm import responder, serve, server_reaches

ROOT = Path(__file__).resolve().parents[2].parent
sys.path.insert(0, str(ROOT / "bench"))
import extraction  # bench/extraction.py

DATA = extraction.DATA
FIELDS = {"recall", "own_life_recall", "own_observations", "own_recalled", "precision", "memories_per_turn", "well_formed", "malformed_by_rule", "kinds",
          "observations", "recalled", "memories", "precise", "turns", "seconds"}


def run_bench(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "extraction.py"), "--data", str(DATA),
                          "--conversations", "1", "--sessions", "1", *args],
                         env={**os.environ, "DATABASE_URL": DSN}, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_data = pytest.mark.skipif(not Path(DATA).exists(), reason="LoCoMo (shared/bench) is not beside the checkout")


@needs_data
def test_offline_run_ends_with_the_json_line():
    line = run_bench()
    assert line["conversations"] == 1 and line["sessions"] == 1 and line["helper_llm"] is None
    off = line["offline"]
    assert FIELDS <= off.keys()
    assert off["turns"] > 10 and off["observations"] > 0 and off["memories"] > 0
    assert 0 <= off["recall"] <= 1 and 0 <= off["precision"] <= 1 and 0 <= off["well_formed"] <= 1
    assert off["recall"] == round(off["recalled"] / off["observations"], 4)
    assert off["memories_per_turn"] == round(off["memories"] / off["turns"], 3)
    assert 0 < off["own_observations"] <= off["observations"] and off["own_recalled"] <= off["recalled"]
    assert off["own_life_recall"] == round(off["own_recalled"] / off["own_observations"], 4)


def numbered_turns(body: dict) -> list[tuple[int, str]]:
    prompt = body["messages"][-1]["content"]
    return [(int(n), text) for n, text in re.findall(r"^\[(\d+)\] (?:\S+ \d\d:\d\d )?[^:]+: (.+)$", prompt, re.MULTILINE)]


@needs_data
def test_a_helper_llm_run_is_reported_beside_the_offline_one():
    def reply(body):  # one fact per turn that says something about its speaker
        return {"memories": [{"kind": "fact", "content": text, "source": [n], "utility": 0.9}
                             for n, text in numbered_turns(body) if re.search(r"\bI\b", text)]}
    srv = serve(responder("good", reply))
    try:
        if not server_reaches(DSN, srv.server_address[1]):
            pytest.skip("the server cannot reach this machine's 127.0.0.1, where the fake LLM listens")
        line = run_bench("--llm-url", f"http://127.0.0.1:{srv.server_address[1]}/v1")
    finally:
        srv.shutdown()
    assert srv.requests, "the helper LLM was never asked"
    assert FIELDS <= line["offline"].keys() and FIELDS <= line["helper_llm"].keys()
    assert line["helper_llm"]["memories"] > 0


@pytest.mark.parametrize("content, source, rules", [
    ("Task (The assistant): ist and Trello are both excellent choices",
     "Todoist and Trello are both excellent choices", ["broken_word"]),
    ("The user still need to pick up the kids", "I still need to pick up the kids", ["agreement"]),
    ("The user would like to get through The user's commute", "I would like to get through my commute",
     ["capitalised_reference"]),
    ("Ana said my dog is ill", "My dog is ill", ["first_person"]),
    ("The user still needs to pick up the kids", "I still need to pick up the kids", []),
    ("Seeing Ana relax helps Bo sleep, and Ana and Bo go hiking", "...", []),
    ("Ana goes running and tries to cook", "I go running and I try to cook", []),
])
def test_well_formedness_rules(content, source, rules):
    got = extraction.malformations(content, source, ["Ana", "Bo"])
    assert sorted({r.split(":")[0] for r in got}) == rules, got


def test_the_date_a_memory_was_said_is_not_a_broken_word():
    assert extraction.malformations("Maybe Nate will write a screenplay. (said 12 May 2022)",
                                    "Maybe I will write a screenplay", ["Nate"]) == []
