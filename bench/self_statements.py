"""What a user says about themselves, against a labelled set (make bench-self-statements).

bench/data/self_statements.jsonl holds one line per statement: its text, who says it
(`user`: to an AI assistant; `assistant`: the AI, an agent narrating its work), a
category (health, diet, relation, biography, preference, instruction; procedure and
chitchat for the lines that must form nothing), whether it should form a memory
(`memory`) and the kinds that would be right (`kinds`). `split` is `dev` (the lines the
rules were tuned on) or `holdout` (written with them, never looked at while tuning:
the honest figure).

Each statement is said in a two-turn chat (a user line and the assistant's "Noted.";
an assistant line answers "Please fix the failing test in utils.py."), the offline
extractor (plpy/mnemo_db/formation/extract.py) reads it, and admission control
(admission.py) scores its candidates as a fresh tenant's would (nothing to be near,
said now). A statement forms a memory when one of its candidates is admitted:

- recall: the share of the statements that should form a memory which form one of a
  right kind;
- precision: the share of the statements that form a memory which should, of a right
  kind (an agent's step that forms a decision, or small talk that forms anything,
  counts against it).

Runs without a database. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plpy"))
from mnemo_db.formation import admission, extract

DATA = Path(__file__).resolve().parent / "data" / "self_statements.jsonl"
SAID = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
AGENT_TASK = "Please fix the failing test in utils.py."


def formed(item: dict) -> list[str]:
    """The kinds of the memories the statement forms (admitted candidates of its turn)."""
    if item["role"] == "assistant":
        turns = [("user", AGENT_TASK), ("assistant", item["text"])]
    else:
        turns = [("user", item["text"]), ("assistant", "Noted.")]
    messages = [{"message_id": i + 1, "role": role, "name": None, "content": text, "created_at": SAID,
                 "session_id": "s"} for i, (role, text) in enumerate(turns)]
    own = 2 if item["role"] == "assistant" else 1
    return [c["kind"] for c in extract.extract(messages)
            if own in c["source_message_ids"] and admission.score(c, None, SAID)["admitted"]]


def evaluate(items: list[dict]) -> dict:
    """Recall, precision and the lines each got wrong."""
    tp = should = formed_any = 0
    by_category: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrong = []
    for item in items:
        kinds = formed(item)
        right = item["memory"] and any(k in item["kinds"] for k in kinds)
        should += item["memory"]
        formed_any += bool(kinds)
        tp += right
        by_category[item["category"]][0] += right if item["memory"] else not kinds
        by_category[item["category"]][1] += 1
        if right != item["memory"] or (kinds and not item["memory"]):
            wrong.append({"text": item["text"], "expected": item["kinds"], "formed": kinds})
    return {"lines": len(items), "recall": round(tp / max(should, 1), 4),
            "precision": round(tp / max(formed_any, 1), 4),
            "correct_by_category": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_category.items())}, "wrong": wrong}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--split", choices=("dev", "holdout", "all"), default="all",
                    help="which lines to score (all: each split apart)")
    ap.add_argument("--show", action="store_true", help="print the lines each split got wrong")
    args = ap.parse_args()
    items = [json.loads(x) for x in Path(args.data).read_text(encoding="utf-8").splitlines() if x.strip()]
    line = {}
    for split in (("dev", "holdout") if args.split == "all" else (args.split,)):
        r = evaluate([x for x in items if x["split"] == split])
        wrong = r.pop("wrong")
        print(f"{split}: {r['lines']} lines  recall {r['recall']:.3f}  precision {r['precision']:.3f}  "
              f"{r['correct_by_category']}", flush=True)
        if args.show:
            for w in wrong:
                print(f"  wrong: {w['text']!r} expected {w['expected'] or 'nothing'}, formed {w['formed'] or 'nothing'}")
        line[split] = r
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
