"""Unit tests of the lifecycle rules and the summariser (plpy/mnemo_db), no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from lifecycle_checks import check_levels, present
from mnemo_db import tokens
from mnemo_db.lifecycle import rules as lifecycle
from mnemo_db.lifecycle import summarize

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)

CODE = "\n".join(
    ["import os", "from pathlib import Path", "", "class TokenCache:",
     "    def __init__(self, ttl_seconds: int = 3600):", "        self.ttl = ttl_seconds",
     "        self.store = {}", "", "    def get(self, key):", "        value = self.store.get(key)",
     "        if value is None:", "            return None", "        return value[0]", "",
     "def refresh_token(client_id, secret_path='/etc/app/secret.key'):",
     "    raw = Path(secret_path).read_text()", "    return raw.strip() + os.environ['APP_SALT']"]
    + [f"    # step {i}: validate the payload and retry on HTTP-503 after {i * 250} ms" for i in range(12)])
LOG = "\n".join([f"2030-05-01 10:00:{i:02d} INFO worker-{i % 3} processed batch {i} in {40 + i} ms"
                 for i in range(50)]
                + ["2030-05-01 10:00:51 ERROR worker-2 E_TIMEOUT: upstream api.example.com timed out after 3000 ms",
                   "2030-05-01 10:00:52 INFO shutting down, 51 batches, 1 error"])
PROSE = " ".join([
    "We decided to keep all memory logic inside PostgreSQL so that any language can use it.",
    "The proxy at src/proxy/server.py forwards requests to the model and records every message.",
    "Compaction runs every 10 minutes and replaces the oldest span of history with a summary.",
    "The summary keeps file paths such as sql/functions/mnemo.run_sweep.sql and numbers like 131072.",
    "Users asked for the compaction ratio to stay above 5, which the log in compaction_log shows.",
    "Nothing else matters much for this paragraph, which only pads the text to a useful length.",
] * 3)


@pytest.mark.parametrize("text,kind", [(CODE, "file_context"), (LOG, "tool_result"), (PROSE, "note")])
def test_ladder_keeps_its_promises(text, kind):
    out = summarize.summarize_json(text, kind, "2030-05-01 10:00")
    assert {"detail", "stub"} <= set(out)
    check_levels(text, out)
    assert out["detail"]["tokens"] <= 0.45 * tokens.count(text)
    assert out["stub"]["text"].startswith(f"[{kind} | 2030-05-01 10:00 | ")


def test_structure_aware_selection():
    code = summarize.summarize_json(CODE, "file_context")["detail"]["text"]
    assert "import os" in code and "class TokenCache:" in code and "def refresh_token(" in code
    log = summarize.summarize_json(LOG, "tool_result")["detail"]["text"]
    assert "E_TIMEOUT" in log and log.splitlines()[0].startswith("2030-05-01 10:00:00")
    assert "shutting down" in log and "lines omitted]" in log


def test_losses_are_computed_exactly():
    out = summarize.summarize_json(LOG, "tool_result")
    for name in ("detail", "stub"):
        lv = out[name]
        source = summarize.entities(LOG)
        absent = [e for e in source if not present(e, lv["text"])]
        assert lv["losses"]["dropped_count"] == len(absent)
        assert set(lv["losses"]["dropped"]) <= set(absent) and len(lv["losses"]["dropped"]) == min(24, len(absent))
        kept = [e for e in source if present(e, lv["text"])]
        assert lv["losses"]["key_entities"] == kept[:24]
    # the top level lists its losses in source order; lower ones inherit that order first
    assert out["detail"]["losses"]["dropped"] == [e for e in summarize.entities(LOG)
                                                   if not present(e, out["detail"]["text"])][:24]


def test_short_text_stub_never_longer_than_full():
    for text in ("ok", "I live in Paris", "Use PostgreSQL for everything we build here."):
        out = summarize.summarize_json(text, "fact", "2030-05-01 10:00")
        assert set(out) == {"stub"}
        assert out["stub"]["tokens"] <= tokens.count(text)
        check_levels(text, out)


def _span(n: int) -> list[dict]:
    msgs = []
    for i in range(n):
        msgs += [
            {"role": "user", "content": f"Please check why job {i} failed in src/jobs/runner_{i}.py."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function",
                 "function": {"name": "shell", "arguments": f'{{"cmd": "tail -n 40 /var/log/job{i}.log"}}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": "shell", "content": LOG.replace("E_TIMEOUT", f"E_JOB{i}")},
            {"role": "assistant", "content": f"Job {i} timed out calling api.example.com; I raised the timeout "
                                             f"in src/jobs/runner_{i}.py to {5000 + i} ms and it passes now."},
        ]
    return msgs


def test_transcript_summary_of_a_span():
    full, levels = summarize.summarize_transcript(_span(6), "2030-05-01 10:00 to 2030-05-01 11:00")
    out = summarize.levels_json(levels)
    check_levels(full, out)
    assert full.startswith("user: Please check why job 0 failed")
    lowest = out.get("compact") or out["detail"]
    assert lifecycle.compaction_ratio(tokens.count(full), lowest["tokens"]) >= 5
    assert "user:" in out["detail"]["text"] and "tool shell:" in out["detail"]["text"]
    assert out["stub"]["text"].endswith("| 24 related]")


def test_utility_and_promotion_thresholds():
    base = {"memory_id": 1, "tier": "session", "kind": "fact", "access_count": 3,
            "relevance_accumulator": 1.5, "created_at": NOW - timedelta(hours=10)}
    # U = 0.5 * log2(4) / (1 + 0.01 * 10) = 0.909 > 0.3
    assert lifecycle.utility(1.5, 3, base["created_at"], NOW, 0.01) == pytest.approx(1 / 1.1)
    p = lifecycle.promotion(base, NOW)
    assert p.tier == "episodic" and p.expires_at == NOW + timedelta(days=90)
    assert lifecycle.promotion(dict(base, access_count=2, relevance_accumulator=1.0), NOW) is None
    old = dict(base, created_at=NOW - timedelta(hours=1000))  # U = 1/11 < 0.3
    assert lifecycle.promotion(old, NOW) is None
    epi = dict(base, tier="episodic", access_count=10, relevance_accumulator=8.0)
    assert lifecycle.promotion(epi, NOW).tier == "semantic"
    assert lifecycle.promotion(dict(epi, kind="preference"), NOW).tier == "procedural"
    assert lifecycle.promotion(dict(epi, tier="semantic"), NOW) is None


def test_demotion_and_expiry_rules():
    m = {"memory_id": 1, "tier": "episodic", "access_count": 1, "is_pinned": False,
         "created_at": NOW - timedelta(days=30), "last_accessed_at": NOW - timedelta(days=8)}
    d = lifecycle.demotion(m, NOW)  # 1 / 192 h = 0.0052 < 0.01
    assert d.action == "expire"
    assert lifecycle.demotion(dict(m, access_count=5), NOW) is None  # 0.026 >= 0.01
    assert lifecycle.demotion(dict(m, is_pinned=True), NOW) is None
    assert lifecycle.demotion(dict(m, last_accessed_at=NOW - timedelta(days=2)), NOW) is None  # not idle
    assert lifecycle.demotion(dict(m, tier="semantic"), NOW) is None  # phi 0: never
    params = dict(lifecycle.DEFAULT_DEMOTION, semantic={"phi": 0.01, "min_idle_hours": 24})
    dem = lifecycle.demotion(dict(m, tier="semantic"), NOW, params)
    assert dem.action == "demote" and dem.tier == "episodic"


def test_compaction_span_keeps_tool_results_with_their_call():
    rows = [{"role": r, "token_count": 100} for r in
            ["user", "assistant", "tool", "tool", "assistant", "user", "assistant", "tool", "assistant", "user"]]
    assert lifecycle.compaction_span(rows, 600) == 0  # 1000 <= 2 x 600
    k = lifecycle.compaction_span(rows, 300)  # remove 700: 7 rows, but row 7 is a tool result
    assert k == 8 and rows[k]["role"] != "tool"
    k = lifecycle.compaction_span(rows, 150)  # would reach the kept tail
    assert k <= len(rows) - 2 and rows[k]["role"] != "tool"
    # capped at 250 tokens, but cutting after row 1 would strand its two tool results
    assert lifecycle.compaction_span(rows, 300, max_span_tokens=250) == 4
