"""Token counting with OpenAI's o200k_base encoding (GPT-4o, GPT-4.1, o-series, GPT-5).

o200k_base is tiktoken's byte-pair encoding: the encoding's regular expression splits
a text into pieces; a piece that is in the vocabulary is one token, any other is split
into its bytes, and the adjacent pair of lowest rank that is in the vocabulary is merged
again and again (leftmost first on a tie) until no pair is; each part left is a token.
A count needs nothing but the rank of a byte string, so the 200k ranks are kept in a
hash table in a file (TABLE, written once from the vocabulary that the quicktok package
ships: build_table) that each backend maps. Its pages are the page cache's, shared by
all backends, and nothing is parsed at load: a backend is ready at once with little
memory of its own, where a tokenizer library builds its vocabulary map in each process
(quicktok, tiktoken). The merging runs in Python (slower per token than those: counts
are computed once, at write time, and stored with each row), with a cache of recent
short pieces (figures: docs/performance.md, "Token counts").
tests/py/unit/test_tokens.py checks the counts against quicktok, which gives tiktoken's ids,
on real corpora and every Unicode code point, and the table against OpenAI's published
hash of the vocabulary.
"""

from __future__ import annotations

import functools
import heapq
import json
import mmap
import os
import struct
import zlib

from .recent import Recent, digest

ENCODING = "o200k_base"
# Per-message framing overhead of the chat format (role, separators), as in OpenAI's
# token-counting guide: 3 tokens per message, +1 when a name is given.
MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1
# A non-text content part (image, audio, file) is charged a flat amount: the real
# cost depends on the provider and detail level, which are unknown at write time.
NON_TEXT_PART_TOKENS = 85

# o200k_base's pre-tokenizer, as tiktoken defines it (tiktoken_ext/openai_public.py).
PATTERN_ALTERNATIVES = (
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
)
PATTERN = "|".join(PATTERN_ALTERNATIVES)
VOCABULARY_SIZE = 199998  # mergeable ranks (the two special tokens are never counted)

# The table, beside this module (written by the install: python -m mnemo_db.tokens).
# Layout, little-endian: MAGIC, u32 slot count (a power of two), u32 token count; the
# slots, (u32 offset of the token in the file, u32 rank) each, 0xFFFFFFFF when empty,
# found by crc32(token bytes) with linear probing; then each token as u8 length + bytes.
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "o200k_base.table")
MAGIC = b"MNBPE\x00\x00\x01"
HEADER = len(MAGIC) + 8
EMPTY = 0xFFFFFFFF
SLOT = struct.Struct("<II")
# Pieces of at most this many characters are cached with their count (most pieces are
# words that recur); longer ones are not kept alive by the cache.
CACHED_PIECE_CHARS = 40
CACHE_SIZE = 8192

_count = None
# A compile counts the same texts as the one before it (an agent compiles its session
# before every model call: each history message at each fidelity, each candidate's
# line): the counts of the last RECENT_TEXTS texts of RECENT_TEXT_CHARS or more are
# kept by digest (16 bytes each, not the text). A long coding session's compile spent
# half its time counting them again.
RECENT_TEXT_CHARS = 48
RECENT_TEXTS = 16384
_recent = Recent(RECENT_TEXTS)


def source_vocabulary() -> str:
    """quicktok's o200k vocabulary file (found without importing quicktok)."""
    import importlib.util

    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the quicktok package (o200k vocabulary) is not installed")
    return os.path.join(spec.submodule_search_locations[0], "data", "o200k.vocab")


def read_vocabulary(path: str) -> list[tuple[bytes, int]]:
    """(token bytes, rank) of quicktok's vocabulary file: u32 count, then per token
    u16 length, the bytes, u32 rank (little-endian)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,), pos, out = struct.unpack_from("<I", data), 4, []
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, pos)
        token = data[pos + 2:pos + 2 + length]
        (rank,) = struct.unpack_from("<I", data, pos + 2 + length)
        out.append((token, rank))
        pos += length + 6
    if pos != len(data) or n != VOCABULARY_SIZE:
        raise ValueError(f"{path}: not an o200k vocabulary ({n} tokens, {len(data) - pos} bytes left)")
    return out


def table_bytes(source: str | None = None) -> bytes:
    """The rank table (see TABLE) of quicktok's vocabulary."""
    vocab = read_vocabulary(source or source_vocabulary())
    slots_n = 1 << (2 * len(vocab) - 1).bit_length()  # load factor <= 0.5
    mask = slots_n - 1
    slots = bytearray(b"\xff" * (SLOT.size * slots_n))
    blob = bytearray()
    blob_start = HEADER + len(slots)
    for token, rank in vocab:
        h = zlib.crc32(token) & mask
        while SLOT.unpack_from(slots, SLOT.size * h)[0] != EMPTY:
            h = (h + 1) & mask
        SLOT.pack_into(slots, SLOT.size * h, blob_start + len(blob), rank)
        blob += bytes([len(token)]) + token
    return MAGIC + struct.pack("<II", slots_n, len(vocab)) + slots + blob


def build_table(path: str = TABLE) -> str:
    """Writes the rank table under a temporary name renamed into place, so that a
    backend never maps half a table."""
    data = table_bytes()  # first: a missing vocabulary leaves no empty file behind
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def table_is_current(path: str = TABLE) -> bool:
    """The table exists, has this layout, and is not older than its source."""
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return False
        return os.path.getmtime(path) >= os.path.getmtime(source_vocabulary())
    except OSError:
        return False


def _load_table(path: str) -> mmap.mmap | bytes:
    """The table, mapped read-only; written first when it is missing or stale (the
    install writes it: a backend that cannot write beside this module builds it in
    its own memory instead, ~0.5 s and 6 MB, the same counts)."""
    if not table_is_current(path):
        try:
            build_table(path)
        except OSError:
            return table_bytes()
    with open(path, "rb") as f:
        table = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if struct.unpack_from("<I", table, len(MAGIC) + 4)[0] != VOCABULARY_SIZE:
        raise ValueError(f"{path} is not an o200k rank table")
    return table


def _make_counter(table: mmap.mmap | bytes):
    """count(text) over a rank table."""
    import regex

    (slots_n,) = struct.unpack_from("<I", table, len(MAGIC))
    mask, slot, crc32 = slots_n - 1, SLOT.unpack_from, zlib.crc32

    def rank(b: bytes) -> int | None:
        h = crc32(b) & mask
        n = len(b)
        while True:
            offset, r = slot(table, HEADER + 8 * h)
            if offset == EMPTY:
                return None
            if table[offset] == n and table[offset + 1:offset + 1 + n] == b:
                return r
            h = (h + 1) & mask

    def piece_tokens(piece: str) -> int:
        b = piece.encode("utf-8")
        if rank(b) is not None:
            return 1
        # Byte-pair merging over a linked list of part boundaries, with the candidate
        # pairs in a heap keyed (rank, start): the pop order is tiktoken's (lowest
        # rank, leftmost), in O(n log n) where a long hostile piece would make a
        # rescan of all pairs per merge quadratic. A heap entry is stale once one of
        # its three boundaries is gone; boundaries are only ever removed, so an entry
        # whose boundaries are still adjacent still spans the same bytes.
        n = len(b)
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n))
        heap = [(r, i, i + 1, i + 2) for i in range(n - 1) if (r := rank(b[i:i + 2])) is not None]
        heapq.heapify(heap)
        parts = n
        while heap:
            _, s, m, e = heapq.heappop(heap)
            if nxt[s] != m or nxt[m] != e:
                continue
            nxt[s], nxt[m] = e, -1
            parts -= 1
            if e < n:
                prv[e] = s
                if (r := rank(b[s:nxt[e]])) is not None:
                    heapq.heappush(heap, (r, s, e, nxt[e]))
            if (p := prv[s]) >= 0 and (r := rank(b[p:e])) is not None:
                heapq.heappush(heap, (r, p, s, e))
        return parts

    cached = functools.lru_cache(maxsize=CACHE_SIZE)(piece_tokens)

    def tokens_of(piece: str) -> int:
        return cached(piece) if len(piece) <= CACHED_PIECE_CHARS else piece_tokens(piece)

    findall = regex.compile(PATTERN).findall

    def count(text: str) -> int:
        return sum(map(tokens_of, findall(text)))

    return count


def count(text: str | None) -> int:
    """o200k_base tokens of a text (tiktoken's encode_ordinary: special-token text
    such as <|endoftext|> counts as ordinary text)."""
    global _count
    if not text:
        return 0
    if _count is None:
        _count = _make_counter(_load_table(TABLE))
    if len(text) < RECENT_TEXT_CHARS:
        return _count(text)
    key = digest(text)
    n = _recent.get(key)
    return n if n is not None else _recent.put(key, _count(text))


def count_line_text(text: str) -> int:
    """Tokens of the text part of a memory-block line (compile.packing.full_line): the space
    after the item's label, the text and the newline. A line is
    f"{label} {text}\n" with a label ending in "]" (compile.packing.item_label), and o200k's
    pre-tokenizer always splits between that "]" and the space (no pattern takes a
    space after punctuation), so the line costs count(label) + count_line_text(text)
    exactly. The text part is counted once, when a row is written (the line_tokens
    columns, mnemo_internal.line_tokens), instead of at every compile."""
    return count(f" {text}\n")


def content_text(content) -> str:
    """The text of an OpenAI message content: a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
    )


def count_message(message: dict) -> int:
    """Tokens an OpenAI chat message costs in a prompt."""
    content = message.get("content")
    n = MESSAGE_OVERHEAD + count(content_text(content))
    if isinstance(content, list):
        n += NON_TEXT_PART_TOKENS * sum(
            1 for p in content if isinstance(p, dict) and p.get("type") != "text"
        )
    if message.get("name"):
        n += NAME_OVERHEAD + count(message["name"])
    if message.get("tool_calls"):
        n += count(json.dumps(message["tool_calls"], separators=(",", ":")))
    if message.get("tool_call_id"):
        n += count(message["tool_call_id"])
    return n


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else TABLE
    if table_is_current(target):
        print(f"{target} is current")
    else:
        print(f"wrote {build_table(target)}")
