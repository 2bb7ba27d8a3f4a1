"""Extraction quality on LoCoMo's human observations (make bench-extraction).

Every session of locomo10.json comes with human-written `observation` facts about each
speaker, each citing the dia_ids of its evidence turns: what a careful note-taker
wrote down. The conversations are imported with mnemosyne.importers (the LoCoMo
reader: speaker A is the user, speaker B the assistant, both named), the extract job
runs over every session, and the memories it admitted are compared with the
observations:

- fact recall: the share of observations matched by a memory, where a memory matches
  an observation when its source turns overlap the observation's evidence and the
  cosine of their embeddings (the deployed model, mnemo.embed_batch) is at least
  MATCH_COSINE;
- precision: the share of memories that match some observation, or are a decision,
  task, open loop, instruction or preference whose content is supported by its source
  turns (cosine to their text at least MATCH_COSINE): the observations only list
  facts about the speakers, so typed memories are judged against what was said;
- own-life recall: fact recall on the observations about the speaker's own life
  (own_life): those a speaker told about themselves, which the issue asks to be always
  caught (issue 42); the rest are what a speaker said about the other, or of them;
- memories per turn (the observations: about 0.43 per turn);
- well-formedness: the share of memories that break none of the rules of
  `malformations` (a cut word, a third-person subject with a bare verb, a
  capitalised "The user" inside a sentence, an untranslated "I"/"my"/"me").

MATCH_COSINE = 0.5: with all-MiniLM-L6-v2, an observation and the turn it cites
(the same fact, in other words) have a median cosine of about 0.6, and the same
observation and the other turns of its speaker in that session about 0.2, with few of
them above 0.45; `--calibrate` prints those figures again for the data given. 0.5
sits between the two, so a match says the same thing, not only the same topic.

Runs offline (the tenant's formation method set to offline); with a helper LLM
configured (or --llm-url given: configured for the run, removed afterwards) it runs
again with the helper LLM, on fresh tenants (xbench_RUN_METHOD_SAMPLE; --rescore RUN
scores them again, for instance with changed rules). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
from locomo import DATA, norm_evidence

from mnemosyne import connect, default_dsn, importers

DSN = default_dsn()
MATCH_COSINE = 0.5
TYPED_KINDS = ("decision", "task", "open_loop", "instruction", "preference")

# Words a third-person subject never takes in the present tense (its -s form is correct).
BARE_VERBS = frozenset([
    "am", "are", "need", "want", "have", "do", "go", "like", "look", "make", "take", "get", "feel",
    "think", "know", "live", "work", "enjoy", "hope", "try", "wish", "miss", "say", "tell", "see",
    "find", "keep", "start", "mean", "believe", "prefer", "hate", "agree", "remember", "forget",
    "play", "write", "paint", "cook", "teach", "study", "watch", "visit",
])
# Words between a subject and its verb.
ADVERBS = r"(?:still|really|just|also|usually|always|never|often|sometimes|now|only|even|actually|definitely|truly)"
# A subject after these is an object, with a bare infinitive ("helps Ana relax") or a noun
# ("gives Ana love"), or a question ("does Ana go").
NOT_SUBJECT_BEFORE = frozenset([
    "help", "helps", "helped", "helping", "make", "makes", "made", "making", "let", "lets", "letting",
    "watch", "watched", "watching", "see", "saw", "seeing", "hear", "heard", "hearing", "have", "has",
    "had", "do", "does", "did", "will", "would", "can", "could", "should", "may", "might", "must",
    "to", "and", "&", "or", "with", "give", "gives", "gave", "giving", "show", "shows", "showed",
    "send", "sends", "sent", "bring", "brings", "brought", "offer", "offers", "offered", "tell",
    "tells", "told",
])
INFLECTIONS = ("s", "es", "ed", "d", "ing", "'s", "’s", "n't", "ly", "er", "est")
REWRITE_WORDS = frozenset([
    "the", "user", "assistant", "is", "has", "was", "does", "their", "them", "themselves", "they",
    "said", "on", "task", "open", "loop", "instruction", "decision", "request", "from", "asked", "due",
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december",
])
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")


def malformations(content: str, source: str, names: list[str]) -> list[str]:
    """The well-formedness rules a memory breaks (none: well formed).

    - broken_word: a word of the memory that is not in its source turns but is a
      piece of one of their words ("ist" of "Todoist"), not an inflection of it;
    - agreement: a third-person singular subject (a speaker's name, the user, the
      assistant, he, she) followed, past adverbs, by a bare present verb ("The user
      need", "Ana look"), unless it is the object of a verb that takes a bare
      infinitive ("helps Ana relax"), part of a plural ("Ana and Bo go") or a question;
    - capitalised_reference: "The user" / "The assistant" inside a sentence;
    - first_person: an untranslated "I", "my", "me" or "myself" outside quotes.
    """
    out = []
    src = {w.lower() for w in _WORD.findall(source)}
    allowed = src | REWRITE_WORDS | {w.lower() for n in names for w in n.split()}
    for w in {w.lower() for w in _WORD.findall(content)}:
        if len(w) < 2 or w in allowed:
            continue
        for s in src:
            if len(s) > len(w) and (s.startswith(w) or s.endswith(w)):
                rest = s[len(w):] if s.startswith(w) else s[:-len(w)]
                if rest not in INFLECTIONS and not (s.startswith(w) and w + rest in src and rest in INFLECTIONS):
                    out.append(f"broken_word:{w}<{s}")
                    break
    subjects = "|".join([re.escape(n) for n in names] + ["the user", "the assistant", "he", "she"])
    for m in re.finditer(rf"(?i)\b({subjects})\s+(?:{ADVERBS}\s+)*([a-z]+)\b", content):
        before = (re.findall(r"[\w&']+", content[:m.start()]) or [""])[-1].lower()
        verb = m.group(2).lower()
        if verb in BARE_VERBS and before not in NOT_SUBJECT_BEFORE and not re.match(
                r"(?i)\s+and\b", content[m.end(1):]):
            out.append(f"agreement:{m.group(1)} {verb}")
    unquoted = re.sub(r"\"[^\"]*\"|“[^”]*”", " ", content)
    for m in re.finditer(r"\bThe (?:user|assistant)\b", unquoted):
        head = unquoted[:m.start()].rstrip()
        if head and head[-1] not in ".!?:(\n":
            out.append("capitalised_reference")
            break
    if re.search(r"\b(?:I|I'm|I've|I'd|I'll|my|me|myself)\b(?!-)", unquoted):
        out.append("first_person")
    return out


def own_life(text: str, speaker: str, other: str, evidence_speakers: list[str]) -> bool:
    """An observation about its speaker's own life: what the speaker told about
    themselves. Its evidence is only the speaker's own turns (not what the other speaker
    said of them), and it names its speaker but not the other speaker (not "Deborah
    offered support to Jolene", "Both Maria and John agree ..."): about the speaker,
    their body, family, pets, work, likings and doings, not about the two of them.
    The rule reads the observation and who spoke, never the wording of the turns, so the
    extractor cannot meet it by its own surface rules."""
    first, other_first = speaker.split()[0], other.split()[0]
    return (bool(evidence_speakers) and all(s == speaker for s in evidence_speakers)
            and re.search(rf"\b{re.escape(first)}\b", text) is not None
            and re.search(rf"\b{re.escape(other_first)}\b", text) is None)


class Embedder:
    """Embeddings from the deployed model (mnemo.embed_batch), unit length, cached."""

    def __init__(self, conn: psycopg.Connection):
        self.conn, self.cache = conn, {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        for i in range(0, len(todo), 64):
            chunk = todo[i:i + 64]
            rows = self.conn.execute("SELECT v::text FROM unnest(mnemo.embed_batch(%s::text[]))"
                                     " WITH ORDINALITY AS e (v, i) ORDER BY i", (chunk,)).fetchall()
            for t, (v,) in zip(chunk, rows, strict=True):
                x = np.array(json.loads(v), dtype=np.float32)
                self.cache[t] = x / (np.linalg.norm(x) or 1.0)
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)


def select(parsed: importers.Parsed, conversations: int, sessions: int) -> dict[str, importers.Parsed]:
    """sample_id -> its first `sessions` sessions (0: all), for the first `conversations`."""
    out: dict[str, importers.Parsed] = {}
    for s in parsed.sessions:
        sample = s.params["metadata"]["sample_id"]
        if sample not in out:
            if len(out) == conversations:
                continue
            out[sample] = importers.Parsed("locomo", [])
        if not sessions or len(out[sample].sessions) < sessions:
            out[sample].sessions.append(s)
    return out


def observations(sample: dict, numbers: set[int]) -> list[tuple[str, str, set[str]]]:
    """(speaker, text, evidence dia_ids) of the observations of these sessions."""
    out = []
    for key, by_speaker in (sample.get("observation") or {}).items():
        n = int(re.match(r"session_(\d+)_observation", key).group(1))
        if n not in numbers:
            continue
        for speaker, facts in by_speaker.items():
            for text, evidence in facts:
                ev = set(norm_evidence(evidence if isinstance(evidence, list) else [evidence]))
                if ev:
                    out.append((speaker, text, ev))
    return out


def extract_tenant(db, conn, tenant: str, part: importers.Parsed, method: str) -> float:
    """Imports the sessions into a new tenant and runs the extract job's body on each
    (seconds). The import's queued jobs are dropped: message embeddings play no part
    here, and the queue is shared with whatever else runs on the server."""
    part.tenant = {"config": {"formation": {"method": "off"}}}
    importers.run_import(db, tenant, part, create_tenant=True)
    conn.execute("DELETE FROM mnemo.jobs WHERE tenant_id = %s AND status = 'queued'", (tenant,))
    conn.execute("UPDATE mnemo.tenants SET config = jsonb_set(config, '{formation}', %s::jsonb)"
                 " WHERE tenant_id = %s", (json.dumps({"method": method}), tenant))
    t0 = time.perf_counter()
    for s in part.sessions:
        payload: dict | None = {"session_id": str(s.session_id)}
        while payload:
            got = conn.execute("SELECT mnemo_internal.extract(%s, %s::jsonb)",
                               (tenant, json.dumps(payload))).fetchone()[0]
            payload = got.get("continue")
    return time.perf_counter() - t0


def score(conn, embed: Embedder, tenant: str, sample: dict, part: importers.Parsed) -> dict:
    turns = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT message_id, metadata ->> 'dia_id', content FROM mnemo.messages WHERE tenant_id = %s",
        (tenant,))}
    text_of = {dia: text for dia, text in turns.values()}
    # Every memory the extraction left current, active or not: the expiry sweep soon
    # retires a conversation from 2023 as inactive, which says nothing of its extraction.
    mems = [(kind, content, {turns[i][0] for i in src if i in turns}) for kind, content, src in conn.execute(
        "SELECT kind, content_full, source_message_ids FROM mnemo.memories WHERE tenant_id = %s"
        " AND superseded_by IS NULL ORDER BY memory_id", (tenant,))]
    obs = observations(sample, {s.params["metadata"]["session"] for s in part.sessions})
    conv = sample["conversation"]
    names = sorted({conv["speaker_a"], conv["speaker_b"]})
    said_by = {t["dia_id"]: t["speaker"] for _, _, ts in importers.locomo_sessions(conv) for t in ts}
    own = [own_life(text, speaker, names[1] if speaker == names[0] else names[0], [said_by.get(d) for d in ev])
           for speaker, text, ev in obs]
    mv, ov = embed([m[1] for m in mems]), embed([o[1] for o in obs])
    sims = mv @ ov.T if len(mems) and len(obs) else np.zeros((len(mems), len(obs)))
    overlap = np.array([[bool(m[2] & o[2]) for o in obs] for m in mems], dtype=bool).reshape(sims.shape)
    match = overlap & (sims >= MATCH_COSINE)
    supported = []
    for (kind, content, dias), row in zip(mems, match, strict=True):
        ok = bool(row.any())
        if not ok and kind in TYPED_KINDS and dias:
            source = " ".join(text_of[d] for d in sorted(dias))
            ok = float(embed([content])[0] @ embed([source])[0]) >= MATCH_COSINE
        supported.append(ok)
    bad = []
    for kind, content, dias in mems:
        rules = malformations(content, " ".join(text_of[d] for d in dias), names)
        if rules:
            bad.append({"kind": kind, "content": content[:160], "rules": rules})
    hit = match.any(axis=0) if len(mems) else np.zeros(len(obs), dtype=bool)
    return {"observations": len(obs), "recalled": int(hit.sum()),
            "own_observations": sum(own), "own_recalled": int(sum(h for h, o in zip(hit, own, strict=True) if o)),
            "memories": len(mems), "precise": sum(supported), "turns": len(turns),
            "malformed": bad, "kinds": [m[0] for m in mems],
            "missed": [o[1] for o, h in zip(obs, hit, strict=True) if not h],
            "unsupported": [m[1] for m, ok in zip(mems, supported, strict=True) if not ok]}


def summarise(parts: list[dict], seconds: float) -> dict:
    total = {k: sum(p[k] for p in parts) for k in ("observations", "recalled", "own_observations", "own_recalled",
                                                  "memories", "precise", "turns")}
    malformed = [b for p in parts for b in p["malformed"]]
    rules: dict[str, int] = {}
    for b in malformed:
        for r in {r.split(":")[0] for r in b["rules"]}:
            rules[r] = rules.get(r, 0) + 1
    kinds: dict[str, int] = {}
    for p in parts:
        for k in p["kinds"]:
            kinds[k] = kinds.get(k, 0) + 1
    return {
        "recall": round(total["recalled"] / max(total["observations"], 1), 4),
        "own_life_recall": round(total["own_recalled"] / max(total["own_observations"], 1), 4),
        "precision": round(total["precise"] / max(total["memories"], 1), 4),
        "memories_per_turn": round(total["memories"] / max(total["turns"], 1), 3),
        "well_formed": round(1 - len(malformed) / max(total["memories"], 1), 4),
        "malformed_by_rule": rules, "kinds": kinds, **total, "seconds": round(seconds, 1),
        "examples": {"malformed": malformed, "missed": [x for p in parts for x in p["missed"]],
                     "unsupported": [x for p in parts for x in p["unsupported"]]},
    }


def calibrate(conn, embed: Embedder, samples: list[dict]) -> dict:
    """Cosine of observations to their own evidence turns and to the speaker's other turns."""
    own, other = [], []
    for sample in samples:
        for number, _, turns in importers.locomo_sessions(sample["conversation"]):
            tv = embed([importers.locomo_turn_text(t) for t in turns])
            for speaker, text, ev in observations(sample, {number}):
                cos = tv @ embed([text])[0]
                for t, c in zip(turns, cos, strict=True):
                    if t["speaker"] == speaker:
                        (own if t["dia_id"] in ev else other).append(float(c))

    def q(xs, p):
        return round(sorted(xs)[int(p * (len(xs) - 1))], 3) if xs else None
    return {"own_evidence": {"median": q(own, .5), "p10": q(own, .1), "n": len(own)},
            "other_turns": {"median": q(other, .5), "p90": q(other, .9), "p95": q(other, .95), "n": len(other)},
            "other_above_threshold": round(sum(c >= MATCH_COSINE for c in other) / max(len(other), 1), 4),
            "own_above_threshold": round(sum(c >= MATCH_COSINE for c in own) / max(len(own), 1), 4)}


def helper_configured(conn) -> bool:
    return bool(conn.execute("SELECT count(*) FROM mnemo_internal.helper_llm WHERE enabled").fetchone()[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA, help="locomo10.json")
    ap.add_argument("--conversations", type=int, default=10, help="how many of the conversations")
    ap.add_argument("--sessions", type=int, default=0, help="sessions per conversation (0: all)")
    ap.add_argument("--llm-url", help="an OpenAI-compatible endpoint to configure as the helper LLM for the run")
    ap.add_argument("--llm-model", default="gpt-4o-mini")
    ap.add_argument("--rescore", metavar="RUN",
                    help="score the memories an earlier run (its id: xbench_RUN_...) left, extracting nothing")
    ap.add_argument("--examples", help="append every malformed, missed and unsupported item to this file (JSON)")
    ap.add_argument("--calibrate", action="store_true", help="print the cosine figures behind MATCH_COSINE")
    args = ap.parse_args()
    path = Path(args.data)
    raw = {s["sample_id"]: s for s in json.loads(path.read_text(encoding="utf-8"))}
    parts = select(importers.read_locomo(path), args.conversations, args.sessions)
    run = args.rescore or uuid.uuid4().hex[:6]
    line: dict = {"match_cosine": MATCH_COSINE, "conversations": len(parts),
                  "sessions": sum(len(p.sessions) for p in parts.values())}
    with connect(DSN) as db, psycopg.connect(DSN, autocommit=True) as conn:
        embed = Embedder(conn)
        if args.calibrate:
            line["calibration"] = calibrate(conn, embed, [raw[s] for s in parts])
            print("calibration:", json.dumps(line["calibration"]), flush=True)
        configured_here = False
        try:
            if args.llm_url:
                conn.execute("SELECT mnemo.set_helper_llm(%s, %s, NULL, 60, 2, 1)", (args.llm_url, args.llm_model))
                configured_here = True
            methods = ["offline"] + (["helper_llm"] if helper_configured(conn) else [])
            for method in methods:
                results, seconds = [], 0.0
                for sample_id, part in parts.items():
                    tenant = f"xbench_{run}_{method}_{sample_id}"
                    if not args.rescore:
                        seconds += extract_tenant(db, conn, tenant, part, method)
                    results.append(score(conn, embed, tenant, raw[sample_id], part))
                    print(f"{method} {sample_id}: {results[-1]['memories']} memories,"
                          f" {results[-1]['recalled']}/{results[-1]['observations']} observations", flush=True)
                line[method] = summarise(results, seconds)
                s = line[method]
                print(f"\n{method}: recall {s['recall']:.3f}  own-life recall {s['own_life_recall']:.3f}"
                      f" ({s['own_recalled']}/{s['own_observations']})  precision {s['precision']:.3f}  "
                      f"memories/turn {s['memories_per_turn']:.3f}  well-formed {s['well_formed']:.3f}  "
                      f"{s['malformed_by_rule']}  {s['kinds']}", flush=True)
                for b in s["examples"]["malformed"][:5]:
                    print(f"  malformed {b['rules']}: {b['content']}")
                for x in s["examples"]["missed"][:5]:
                    print(f"  missed: {x}")
                for x in s["examples"]["unsupported"][:5]:
                    print(f"  unsupported: {x[:160]}")
                if args.examples:
                    with open(args.examples, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"method": method, **s["examples"]}) + "\n")
            line["helper_llm"] = line.get("helper_llm")
        finally:
            if configured_here:
                conn.execute("SELECT mnemo.set_helper_llm(NULL)")
    for m in ("offline", "helper_llm"):
        if line.get(m):
            line[m].pop("examples")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
