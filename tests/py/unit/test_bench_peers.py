"""bench/peers.py's scoring on a tiny fixture: what a peer stores for a turn, recall@k of
its ranked results, and the packing of its results into a token budget. The peers
themselves (Mem0, LangGraph) live in .venv-peers and are not needed here: the harness
imports them only when it runs them."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import locomo  # bench/locomo.py
import peers  # bench/peers.py
from mnemo_db import tokens

SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "Look at this.",
             "blip_caption": "a photo of a lake"},
        ],
        "session_2_date_time": "9:00 am on 9 May, 2023",
        "session_2": [{"speaker": "Caroline", "dia_id": "D2:1", "text": "I painted a sunrise."}],
    },
    "qa": [],
}


def test_a_peer_stores_the_text_mnemosyne_embeds_in_recording_order():
    assert list(peers.turns_of(SAMPLE)) == [
        ("D1:1", "user", "Caroline", "Caroline: I went to a support group."),
        ("D1:2", "assistant", "Melanie", "Melanie: Look at this. [shares a photo of a lake]"),
        ("D2:1", "user", "Caroline", "Caroline: I painted a sunrise."),
    ]


def test_recall_at_k_counts_only_the_first_k_results():
    ranked = [f"D9:{i}" for i in range(20)]
    ranked[3], ranked[10] = "D1:3", "D2:5"
    scores = locomo.Scores()
    scores.add("peer", "@10", 4, {"D1:3", "D2:5"}, peers.recall_at(ranked, 10))
    scores.add("peer", "@10", 1, {"D2:5"}, peers.recall_at(ranked, 10))
    scores.add("peer", "@10", 5, {"D1:3"}, peers.recall_at(ranked, 10))  # adversarial: left out
    assert scores.mean("peer", "@10") == 0.25
    assert scores.mean("peer", "@10", (1, 2, 3, 4, 5)) == 0.5


def test_packing_follows_rank_skips_what_does_not_fit_and_never_exceeds_the_budget():
    short, long_ = "Caroline: yes.", "Melanie: " + "a very long answer " * 40
    ranked = [("D1:1", short), ("D1:2", long_), ("D1:3", short), ("D1:4", short)]
    line = tokens.count(short + "\n")
    assert tokens.count(long_ + "\n") > line
    got, used = peers.pack(ranked, 2 * line)
    assert (got, used) == ({"D1:1", "D1:3"}, 2 * line)  # the long one skipped, not a stop
    got, used = peers.pack(ranked, 2 * line - 1)
    assert (got, used) == ({"D1:1"}, line)
    assert peers.pack(ranked, 0) == (set(), 0)
    everything = sum(tokens.count(t + "\n") for _, t in ranked)
    assert peers.pack(ranked, everything) == ({"D1:1", "D1:2", "D1:3", "D1:4"}, everything)
