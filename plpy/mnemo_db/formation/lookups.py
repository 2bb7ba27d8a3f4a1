"""What formation reads about a tenant's memories for each candidate (formation.Former.form).

`Lookups` asks the database once per candidate: its hash, whether admission has seen
it, its exact duplicate, the current facts of its subject and predicate, and its five
nearest memories (an HNSW search). `Batch` gives the same answers for every candidate
of an extract job from one statement (statements.BATCH) and the cosines between the
candidates (statements.PAIRS), read after the tenant's formation lock, so a job with
N candidates pays one search statement, not N (issue 43: formation costs in
proportion to what it forms; dedup and supersession per batch, not per message).

The candidates are formed one after another, and each sees what those before it
wrote: a memory admitted, a decision logged, a memory superseded. `Batch` keeps that
account (formed, logged, superseded) and answers from it where it is exact:

- seen: an earlier candidate of the batch with the same hash and a shared source
  message was logged (every outcome but "skipped" writes admission_log);
- nearest: the batch's five nearest memories, joined with the memories the batch
  formed before (their embedding is the candidate's vector, so pgvector's cosine
  between the two vectors is the cosine NEAREST would read), the five best kept;
- exact and current facts: the statement's answer while nothing the batch wrote can
  change it.

Where the account cannot say (one of a candidate's nearest or its exact duplicate
was superseded in the batch; a fact of the same predicate, or a memory with the same
hash, was formed before it; a memory whose content the server's redaction changed on
insert, whose stored hash then differs), that candidate asks the database itself,
as `Lookups` does: the same rows, at a query's cost, for the rare case.
"""

from __future__ import annotations

from .. import redact

NEAREST_K = 5  # statements.NEAREST's LIMIT


class Lookups:
    """One query per question and candidate; keeps no account."""

    def __init__(self, former, tenant: str):
        self.former, self.tenant = former, tenant

    def hash(self, k: int, c: dict) -> bytes:
        return self.former.execute("hash", [c["content"]])[0]["h"]

    def seen(self, k: int, h: bytes, src: list[int]) -> bool:
        return self.former.execute("seen", [self.tenant, h, src])[0]["seen"]

    def exact(self, k: int, h: bytes) -> int | None:
        rows = self.former.execute("exact", [self.tenant, h])
        return rows[0]["memory_id"] if rows else None

    def current_facts(self, k: int, c: dict) -> list[dict]:
        return list(self.former.execute("current_facts", [self.tenant, c["subject"], c["predicate"]]))

    def nearest(self, k: int, c: dict) -> list[dict]:
        return list(self.former.execute("nearest", [self.tenant, c["embedding"]]))

    # what form() wrote: nothing to keep when every answer is a fresh query
    def logged(self, h: bytes, src: list[int]) -> None:
        pass

    def formed(self, k: int, c: dict, h: bytes, mid: int, current: bool) -> None:
        pass

    def superseded(self, mid: int) -> None:
        pass


def _functional_fact(c: dict) -> bool:
    return bool(c["kind"] == "fact" and c.get("functional") and c.get("subject") and c.get("predicate"))


class Batch(Lookups):
    """The answers for a batch of candidates from one statement, kept exact by the
    account of what the batch wrote (see the module's docstring)."""

    def __init__(self, former, tenant: str, cands: list[dict], redacts: bool):
        super().__init__(former, tenant)
        self.redacts = redacts
        vecs = [c.get("embedding") for c in cands]
        fact = [_functional_fact(c) for c in cands]
        self.rows = former.execute("batch", [
            tenant, [c["content"] for c in cands],
            ["{" + ",".join(str(int(x)) for x in c["source_message_ids"] or []) + "}" for c in cands],
            vecs, [c["subject"] if f else None for c, f in zip(cands, fact, strict=True)],
            [c["predicate"] if f else None for c, f in zip(cands, fact, strict=True)]])
        # cosines to the candidates before each one: only needed once one was formed
        self.pairs = [r["cos"] for r in former.execute("pairs", [vecs])] if len(cands) > 1 else [[]]
        self.logs: list[tuple[bytes, set[int]]] = []
        self.memories: list[tuple[int, int, str, bytes]] = []  # (k, memory_id, kind, hash), current
        self.gone: set[int] = set()  # memories the batch superseded
        self.predicates: set[str] = set()  # of the facts the batch wrote
        self.hash_unknown = False  # a memory the batch wrote has a hash other than its candidate's

    def hash(self, k: int, c: dict) -> bytes:
        return self.rows[k]["h"]

    def seen(self, k: int, h: bytes, src: list[int]) -> bool:
        if self.rows[k]["seen"]:
            return True
        ids = set(src)
        return any(lh == h and ids & ls for lh, ls in self.logs)

    def exact(self, k: int, h: bytes) -> int | None:
        mid = self.rows[k]["exact"]
        if mid is not None and mid not in self.gone:
            return mid  # the lowest id: the batch's memories come after it
        if mid is not None or self.hash_unknown or any(mh == h for _, _, _, mh in self.memories):
            return super().exact(k, h)
        return None

    def current_facts(self, k: int, c: dict) -> list[dict]:
        r = self.rows[k]
        ids = r["fact_ids"] or []
        if c["predicate"] in self.predicates or any(i in self.gone for i in ids):
            return super().current_facts(k, c)
        if not ids:
            return []
        return [{"memory_id": i, "object": o, "valid_epoch": e, "provenance_type": p, "confidence": f}
                for i, o, e, p, f in zip(ids, r["fact_objects"], r["fact_epochs"], r["fact_provenances"],
                                         r["fact_confidences"], strict=True)]

    def nearest(self, k: int, c: dict) -> list[dict]:
        r = self.rows[k]
        ids = r["near_ids"] or []
        if any(i in self.gone for i in ids):
            return super().nearest(k, c)
        near = [{"memory_id": i, "kind": kd, "cosine": cos}
                for i, kd, cos in zip(ids, r["near_kinds"] or [], r["near_cos"] or [], strict=True)]
        mine = [{"memory_id": mid, "kind": kd, "cosine": self.pairs[k][j]}
                for j, mid, kd, _ in self.memories if mid not in self.gone and self.pairs[k][j] is not None]
        if not mine:
            return near
        # NEAREST's order: the distance ascending, so the cosine descending (stable: a
        # tie keeps the older memory first)
        return sorted(near + mine, key=lambda x: -x["cosine"])[:NEAREST_K]

    def logged(self, h: bytes, src: list[int]) -> None:
        if src:
            self.logs.append((h, set(src)))

    def formed(self, k: int, c: dict, h: bytes, mid: int, current: bool) -> None:
        if c["kind"] in ("fact", "preference") and c.get("subject") and c.get("predicate"):
            self.predicates.add(c["predicate"])  # its fact row, current or not
        if not current:
            return  # stored as superseded: no exact, nearest or current fact of anyone's
        if self.redacts and redact.redact_value(c["content"])[1]:
            # insert_memory redacts again and hashes what it stores
            self.hash_unknown = True
        self.memories.append((k, mid, c["kind"], h))

    def superseded(self, mid: int) -> None:
        self.gone.add(mid)
