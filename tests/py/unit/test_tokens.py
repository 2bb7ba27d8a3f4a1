"""mnemo_db.tokens: the mapped rank table and the Python merging give the counts the
former token counter gave (quicktok, whose ids are tiktoken's), on real corpora, every
Unicode code point and hostile strings; and the table is OpenAI's o200k vocabulary."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import struct
from pathlib import Path

import pytest
import quicktok
from hypothesis import given, settings
from hypothesis import strategies as st
from mnemo_db import tokens

SHARED = Path(os.environ.get("MNEMO_SHARED", Path(__file__).resolve().parents[3].parent / "shared")) / "bench"
# tiktoken_ext/openai_public.py: the sha256 of o200k_base.tiktoken
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@pytest.fixture(scope="module")
def reference():
    return quicktok.get_encoding("o200k_base").count


def mismatches(texts, reference) -> list[tuple[str, int, int]]:
    return [(t[:80], tokens.count(t), reference(t)) for t in texts if tokens.count(t) != reference(t)]


def table_entries(table: bytes) -> list[tuple[bytes, int]]:
    (slots_n,) = struct.unpack_from("<I", table, len(tokens.MAGIC))
    out = []
    for i in range(slots_n):
        offset, rank = tokens.SLOT.unpack_from(table, tokens.HEADER + tokens.SLOT.size * i)
        if offset != tokens.EMPTY:
            out.append((table[offset + 1:offset + 1 + table[offset]], rank))
    return out


def test_table_holds_openai_o200k_vocabulary():
    """The table, written back in tiktoken's file format (base64 token, rank), hashes
    to the sha256 tiktoken checks o200k_base.tiktoken against."""
    tokens.count("load the table")
    table = Path(tokens.TABLE).read_bytes()
    entries = sorted(table_entries(table), key=lambda e: e[1])
    assert len(entries) == tokens.VOCABULARY_SIZE
    text = b"".join(base64.b64encode(tok) + b" " + str(rank).encode() + b"\n" for tok, rank in entries)
    assert hashlib.sha256(text).hexdigest() == O200K_SHA256
    assert table == tokens.table_bytes()  # what a backend builds in memory is the same


def locomo_texts() -> list[str]:
    path = SHARED / "locomo" / "locomo10.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    out = []
    for sample in json.loads(path.read_text()):
        for turns in sample["conversation"].values():
            if isinstance(turns, list):
                out += [t.get("text", "") for t in turns] + [t["blip_caption"] for t in turns if t.get("blip_caption")]
        out += [str(q.get(k, "")) for q in sample.get("qa", []) for k in ("question", "answer")]
    return out


def trajectory_texts() -> list[str]:
    files = glob.glob(str(SHARED / "traj" / "**" / "*.traj"), recursive=True)
    if not files:
        pytest.skip(f"no trajectories under {SHARED / 'traj'}")
    out: list[str] = []

    def walk(x):
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)
    for f in files:
        walk(json.loads(Path(f).read_text()))
    return out


def test_counts_match_on_every_locomo_turn(reference):
    texts = locomo_texts()
    assert len(texts) > 5000
    assert mismatches(texts, reference) == []


def test_counts_match_on_agent_trajectories(reference):
    """Every string of the SWE-agent trajectories: code, diffs, shell output, JSON."""
    texts = trajectory_texts()
    assert sum(map(len, texts)) > 1_000_000
    assert mismatches(texts, reference) == []


# Planes 0-3 and the tags and variation selectors of plane 14 hold every assigned code
# point (and the next Unicode versions' new ones); the rest is unassigned or private
# use, one class for any pre-tokenizer, so a sample of it suffices.
CODE_POINTS = [*range(0x40000), *range(0xE0000, 0xE1000), *range(0x40000, 0x110000, 97)]


def test_counts_match_on_every_code_point(reference):
    """Each code point after a lowercase letter, a capital, a digit and a space, and
    before a letter: whether it continues a word, a run of capitals, a number or a run
    of spaces or punctuation, or prefixes a word (alone, or after a run of its own
    kind: the last space of a run goes with the word), is decided by the pre-tokenizer's
    character classes, which must agree with the reference's."""
    contexts = ["a{0}", "A{0}", "1{0}", " {0}", "{0}a", "{0}{0}a"]
    for start in range(0, len(CODE_POINTS), 8192):
        chars = [chr(c) for c in CODE_POINTS[start:start + 8192] if not 0xD800 <= c < 0xE000]
        texts = [ctx.format(ch) for ch in chars for ctx in contexts]
        # a block's counts are compared together (fast), then one by one where they differ
        if sum(map(tokens.count, texts)) != sum(map(reference, texts)):
            assert mismatches(texts, reference) == []


HOSTILE = [
    "a" * 100_000,  # one piece of 100k bytes: the merging is not quadratic
    "aB" * 30_000,
    "\u00e9" * 20_000,
    "1234567890" * 5_000,
    " " * 10_000 + "x",
    "\n" * 5_000 + " \t\r\n" * 1000,
    "<|endoftext|> and <|endofprompt|> are ordinary text here",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466" * 500,  # ZWJ emoji family
    "e\u0301\u0302\u0303\u0304" * 2000,  # stacked combining marks
    "\U0001F600\U0001F680\u4e2d\u6587\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
    "'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd '\u017f \u212a",
    "\x00\x01\x1c\x1d\x1e\x1f\x7f\x85\xa0\u1680\u2028\u2029\u3000\ufeff\ufffd",
    "".join(chr(c) for c in range(0x20, 0x3000)),
    "SGVsbG8gV29ybGQhIFRoaXMgaXMgYmFzZTY0" * 300,
    '{"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\\"q\\": 1}"}}]}',
]


def test_counts_match_on_hostile_strings(reference):
    assert mismatches(HOSTILE, reference) == []


# Assigned code points only: where a later Unicode assigned one (U+3D000: a letter to
# the pinned regex module, unassigned to quicktok's tables), the two tokenizers' Unicode
# versions split it differently; neither is o200k's "true" count.
@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cn", "Cs")), max_size=300))
def test_counts_match_on_generated_text(text):
    assert tokens.count(text) == quicktok.get_encoding("o200k_base").count(text)


def test_cached_and_uncached_pieces_count_alike(reference):
    """A piece counted again comes from the cache: the second pass equals the first."""
    text = "supercalifragilisticexpialidocious " * 3 + "x" * (tokens.CACHED_PIECE_CHARS + 5)
    assert tokens.count(text) == tokens.count(text) == reference(text)
