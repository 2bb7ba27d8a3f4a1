"""What compile_context's statements return, as the phases take it: the HISTORY row
as messages, the CANDIDATE_POOL and MESSAGE_SEGMENTS rows as a retrieval.CandidatePool,
the CANDIDATE_ROWS row as candidates; and the JSON that goes back out."""

from __future__ import annotations

import json

import numpy as np
import orjson

from .. import embedding
from ..timestamps import utc_datetime
from .policy import CHANNEL_SENSITIVITY
from .retrieval import CandidatePool, MessagePart, bm25, holding, message_pool


def _ints(values) -> np.ndarray:
    return np.asarray(values or [], dtype=np.int64)


def _sent(data: bytes | None, dtype: str) -> np.ndarray:
    """Values PostgreSQL sent concatenated (int8send and the like: big-endian)."""
    return np.frombuffer(data or b"", dtype=">" + dtype).astype(dtype)


def message_part(r: dict) -> MessagePart:
    """A MESSAGE_SEGMENTS row as a MessagePart."""
    embedded = _sent(r["embedded"], "u1").astype(bool)
    # codes x scale is the vector: the cosine on the codes takes its norm / scale
    with np.errstate(divide="ignore", invalid="ignore"):
        norms = _sent(r["embedding_norm"], "f8")[embedded] / _sent(r["embedding_scale"], "f4")
    return MessagePart(
        message_ids=_sent(r["message_ids"], "i8"), session_ids=[str(x) for x in r["session_ids"]],
        session_pos=_sent(r["session_pos"], "i4"), session_visible=np.asarray(r["session_visible"], dtype=bool),
        turn_index=_sent(r["turn_index"], "i4"), created_epoch=_sent(r["created_epoch"], "f8"),
        token_count=_sent(r["token_count"], "i4"), stub_tokens=_sent(r["stub_tokens"], "i4"),
        doc_length=_sent(r["doc_length"], "i4"),
        sensitivities=list(r["sensitivities"]), sensitivity_pos=_sent(r["sensitivity_pos"], "i4"),
        speakers=list(r["speakers"]), speaker_pos=_sent(r["speaker_pos"], "i4"),
        roles=list(r["roles"]), role_pos=_sent(r["role_pos"], "i4"),
        embedded=embedded, norms=norms, vectors=embedding.from_int8_codes(r["embeddings"], len(norms)),
        hit_rows=_ints(r["hit_rows"]), hit_terms=_ints(r["hit_terms"]),
        session_scoped_out=np.asarray(r["session_scoped_out"], dtype=bool))


def candidate_pool(r: dict, segments: list[dict], channel: str, as_of_epoch: float | None,
                   exclude: list[int], words: list[str], roles: frozenset[str] = frozenset()) -> CandidatePool:
    """The CANDIDATE_POOL row (memories) and the MESSAGE_SEGMENTS rows as a
    CandidatePool (words: the query's, query_words; roles: those its grammatical
    person names, retrieval.asker_roles).

    Two kinds of looked-up lexeme count for no BM25: the time words' (not the
    query's own: they only mark the lines that date something, `dated`), and, in a
    message, the name of a speaker the query names. A message's speaker is who said
    it (the tag match); a name in its text is mostly the person it is said to
    ("Thanks, Melanie!"), so counting it ranked the replies to that person over
    what the person said."""
    avgdl = r["avgdl"]
    lexemes = list(r["lexemes"] or ())
    own = set(r["query_lexemes"] or ())
    idf = np.asarray(r["idf"] or [], dtype=np.float64)
    time_terms = np.array([k for k, x in enumerate(lexemes) if x not in own], dtype=np.int64)
    idf[time_terms] = 0.0
    parts = [message_part(x) for x in segments]
    speakers = {s for p in parts for s in p.speakers} - {""}
    names = {x for w, lx in zip(words, r["word_lexemes"] or ()) if w in speakers for x in (lx or "").split()}
    message_idf = np.where([x in names for x in lexemes], 0.0, idf) if names else idf
    mem_ids = _ints(r["mem_ids"])
    n_mem = len(mem_ids)
    mem_embedded = np.asarray(r["mem_embedded"] or [], dtype=bool)
    n_mem_vectors = int(mem_embedded.sum())
    msg = message_pool(parts, message_idf, avgdl, CHANNEL_SENSITIVITY[channel], as_of_epoch, exclude, words,
                       time_terms, roles)
    n_msg = len(msg["message_ids"])

    def arr(name: str, dtype, messages=None) -> np.ndarray:
        """Memories then messages; a signal messages lack is zero for them."""
        return np.concatenate([np.asarray(r["mem_" + name] or [], dtype=dtype),
                               messages if messages is not None else np.zeros(n_msg, dtype)])

    return CandidatePool(
        memory_ids=mem_ids, message_ids=msg["message_ids"], message_created=msg["message_created"],
        same_session=msg["same_session"], message_turn=msg["message_turn"], floor_tokens=arr("floor", np.int64, msg["floor_tokens"]),
        bm25=np.concatenate([bm25(n_mem, r["mem_hit_rows"], r["mem_hit_terms"], idf,
                                  r["mem_doc_length"] or [], avgdl), msg["bm25"]]),
        tag_match=arr("tag", bool, msg["tag_match"]), trigram=arr("trgm", np.float64),
        pinned=arr("pinned", bool), access_count=arr("access", np.int64), is_global=arr("global", bool),
        embedded=np.concatenate([np.flatnonzero(mem_embedded), n_mem + msg["embedded"]]),
        vectors=[embedding.from_pgvector_bytes(r["mem_embeddings"], n_mem_vectors)] + msg["vectors"],
        vector_rows=np.concatenate([np.arange(n_mem_vectors), n_mem_vectors + msg["vector_rows"]]),
        norms=np.concatenate([np.asarray(r["mem_norm"] or [], dtype=np.float64)[mem_embedded], msg["norms"]]),
        scope_hidden=msg["scope_hidden"], speakers=frozenset(speakers), other_role=msg["other_role"],
        dated=np.concatenate([holding(n_mem, r["mem_hit_rows"], r["mem_hit_terms"], time_terms), msg["dated"]]),
        event_epoch=np.concatenate([np.asarray(r["mem_valid_from"] or [], dtype=np.float64),
                                    msg["message_created"]]))


def dumps(value) -> str:
    """JSON text (UTF-8) of a report part or the bundle; a timestamp as its str()
    form. orjson (~8x faster) unless the value holds what it cannot write: an integer
    beyond 64 bits, which a stored message's content parts or tool calls may carry
    (jsonb keeps any number) and which goes back out unchanged."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()
    except TypeError:
        return json.dumps(value, ensure_ascii=False, default=str)


def loads_stored(text: str | None):
    """A message's own JSON as the caller stored it (content parts, tool calls): the
    standard library keeps every number as written (orjson turns an integer beyond
    64 bits into a float and rejects one beyond a double's range), so the message goes
    back out verbatim and costs what its stored token count says."""
    return json.loads(text) if text else None


def history_messages(r: dict) -> list[dict]:
    """The HISTORY row (aligned arrays) as messages, oldest first, as
    the decide phase takes them."""
    if r["message_id"] is None:
        return []
    return [{
        "message_id": mid, "turn_index": turn, "role": role, "content": content,
        "content_parts": loads_stored(parts), "name": name, "tool_calls": loads_stored(calls),
        "tool_call_id": call_id, "token_count": tokens_, "sensitivity": sensitivity,
        "artifact_id": artifact, "created_at": utc_datetime(epoch),
        "levels": orjson.loads(levels) if levels else None,
    } for mid, turn, role, content, parts, name, calls, call_id, tokens_, sensitivity, artifact, epoch, levels
        in zip(r["message_id"], r["turn_index"], r["role"], r["content"], r["content_parts"], r["name"],
               r["tool_calls"], r["tool_call_id"], r["token_count"], r["sensitivity"], r["artifact_id"],
               r["created_epoch"], r["levels"], strict=True)]


def candidates(r: dict, fused: list[dict]) -> list[dict]:
    """The fused candidates with their CANDIDATE_ROWS row (aligned arrays), as the
    decide phase takes them; a candidate deleted since the pool was read is left out."""
    at = {source: i for i, source in enumerate(r["source"] or ())}
    full_tokens, detail_tokens, compact_tokens, stub_tokens = (
        r["full_tokens"], r["detail_tokens"], r["compact_tokens"], r["stub_tokens"])
    out = []
    for c in fused:
        i = at.get(c["source"])
        if i is None:
            continue  # deleted since the pool was read
        levels = None
        if r["content_detail"][i] or r["content_stub"][i]:
            losses = orjson.loads(r["losses"][i] or "{}")
            levels = {name: {"text": r[f"content_{name}"][i], "losses": losses.get(name, {})}
                      for name in ("detail", "compact", "stub") if r[f"content_{name}"][i]}
        out.append({
            "source": c["source"], "id": c["id"], "created_epoch": c["created_epoch"],
            "kind": r["kind"][i], "text": r["text"][i] or "",
            "levels": levels, "relevance": c["relevance"], "cosine": c.get("cosine"),
            "match": c.get("match"),
            "sensitivity": r["sensitivity"][i], "is_pinned": c["is_pinned"],
            "access_count": c["access_count"],
            "last_accessed_at": utc_datetime(r["accessed_epoch"][i]),
            "created_at": utc_datetime(r["created_epoch"][i]),
            "confidence": r["confidence"][i], "provenance_type": r["provenance_type"][i],
            "role": r["role"][i], "name": r["name"][i],
            "retrievers": c["retrievers"],
            "text_tokens": (full_tokens[i], detail_tokens[i], compact_tokens[i], stub_tokens[i]),
            # a memory's source messages (msg:N), bundle.repeats_history
            "derived_from": frozenset(f"msg:{m}" for m in r["derived_from"][i].split()) if r["derived_from"][i]
            else frozenset(),
            # the value it replaced and the day that one stopped holding (updates.py)
            "earlier": (r["earlier_text"][i], utc_datetime(r["earlier_until_epoch"][i]))
            if r["earlier_text"][i] else None,
        })
    return out


def previous_items(r: dict) -> list[tuple[str, str | None]]:
    """The memory items of the session's previous context (CANDIDATE_POOL selects
    them), in their order, as (source, fidelity)."""
    return [(i["source"], i.get("fidelity")) for i in orjson.loads(r["previous_items"] or "[]")]
