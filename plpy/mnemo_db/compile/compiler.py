"""The Compiler: compile_context inside PL/Python. It prepares the statements once
per backend, embeds the query on a thread while the phases read, and runs the phases
(phases.py) in turn, timing each (the report's timings_ms)."""

from __future__ import annotations

import functools
import gc
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import embedding
from ..paging import residency
from . import phases
from .packing import count_lines_split
from .rows import dumps
from .statements import SHARD_READS, STATEMENTS, TENANT_STATEMENTS, for_tenant, on_shards

# The switch interval the compile's threads run under: the embedding thread needs the
# GIL to start the encoder and to hand back its output, and with Python's default
# it waited behind the compile's own Python work (docs/performance.md).
SWITCH_INTERVAL_S = 0.0002
# Plans of statements prepared per tenant (statements.TENANT_STATEMENTS) kept per backend.
TENANT_PLANS = 64
# Plans of statements prepared for a shard group's shards (Citus) kept per backend.
SHARD_PLANS = 128
# On Citus: the shard of the tenant's hash of mnemo.sessions, if this node holds it (a
# tenant's co-located shards move together: where this one is, all are).
LOCAL_GROUP = """
SELECT s.shardid FROM pg_dist_shard AS s
WHERE s.logicalrelid = 'mnemo.sessions'::regclass
    AND worker_hash($1) BETWEEN s.shardminvalue::integer AND s.shardmaxvalue::integer
    AND EXISTS (SELECT FROM pg_dist_placement AS p WHERE p.shardid = s.shardid
        AND p.groupid = (SELECT g.groupid FROM pg_dist_local_group AS g))
"""
# A backend's first compiles plan their statements for the tenant at hand (custom
# plans, mnemo_internal.compile_context's plan_cache_mode): the other tenants' hash
# partitions are pruned at planning, so a new backend plans less and keeps less.
# Each such compile plans anew. From this many on, the backend has shown that it
# lives long: it switches to generic plans, built once over every partition and
# reused. Custom planning has then cost about what the generic build does, so a
# backend never pays much more than twice the better of the two (ski rental; the
# costs: docs/performance.md, "Figures behind code comments").
GENERIC_PLANS_AFTER = 20
# The compiles that build a backend's caches (its first: the compiler's first plans and
# the catalog entries behind them; the first with generic plans) free more than they
# keep: parse trees, planner scratch. glibc keeps freed heap pages for the life of the
# backend unless asked; handing them back after these two compiles lowers a backend's
# resident memory for little time, twice a backend (docs/performance.md).
TRIM_AFTER_COMPILES = (1, GENERIC_PLANS_AFTER + 1)


class Stopwatch:
    """Milliseconds spent in each phase of a compile (the report's timings_ms)."""

    def __init__(self):
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = round((now - self.last) * 1000.0, 2)
        self.last = now


class PlpyDatabase:
    """phases.Database over PL/Python: the statements prepared once per backend.

    On Citus, a compile that runs on the node holding its tenant's shards (a call
    delegated to the tenant's worker) reads them there directly (use_shards): each
    statement of statements.SHARD_READS is prepared once per shard group with the
    shards' names in its text. Through Citus every statement was planned as a
    distributed query, deparsed for its shard and planned again at every call, and
    only with custom plans (a generic one leaves the tenant a parameter, which Citus
    cannot route); on the shards it is planned once, as on one server, and after
    GENERIC_PLANS_AFTER compiles keeps a generic plan as the single node does. The
    shards have their tables' row-level security (mnemo_internal.citus_local_shards
    checks it) and every statement names its tenant, so a compile reads the same rows;
    writes go through Citus. docs/operations.md, "On Citus"."""

    def __init__(self, plpy, citus: bool = False):
        self.plpy = plpy
        self.Error = plpy.SPIError
        self.plans = {name: plpy.prepare(text, types)
                      for name, (text, types) in (STATEMENTS | residency.STATEMENTS).items()}
        self.tenant_plans: dict[tuple, Any] = {}  # least recently used first
        self.citus = citus
        if citus:
            self.local_group = plpy.prepare(LOCAL_GROUP, ["text"])
            self.local_shards = plpy.prepare("SELECT mnemo_internal.citus_local_shards($1) AS shards", ["text"])
            # the shard statements' plan mode while they run: the nested reads through
            # Citus (the routines they call) stay custom
            self.generic_mode = plpy.prepare("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
            self.custom_mode = plpy.prepare("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)")
        self.groups: dict[int, dict[str, str]] = {}  # a shard group's {table: shard}, by its sessions shard
        self.shard_plans: dict[tuple, Any] = {}  # least recently used first
        self.group: int | None = None  # this compile's shard group (None: through Citus)
        self.generic = False  # whether this compile's shard statements take generic plans

    def use_shards(self, tenant_id: str | None, generic: bool) -> None:
        """On Citus, before a compile: reads the tenant's shards directly if this node
        holds them (checked at every compile: a rebalance may have moved them)."""
        self.group, self.generic = None, generic
        if not self.citus or tenant_id is None:
            return
        found = self.plpy.execute(self.local_group, [tenant_id])
        if not found:
            return
        group = found[0]["shardid"]
        if group not in self.groups:
            shards = self.plpy.execute(self.local_shards, [tenant_id])  # no row: not all here
            if not shards or shards[0]["shards"] is None:
                return
            self.groups[group] = json.loads(shards[0]["shards"])
        self.group = group

    def done(self) -> None:
        """After a compile: the next one resolves its shards again."""
        self.group = None

    def _cached(self, cache: dict, limit: int, key: tuple, make):
        plan = cache.pop(key, None)
        if plan is None:
            plan = make()
            if len(cache) >= limit:
                del cache[next(iter(cache))]  # the least recently used
        cache[key] = plan
        return plan

    def _execute(self, plan, args: list):
        if not self.generic:
            return self.plpy.execute(plan, args)
        self.plpy.execute(self.generic_mode)
        try:
            return self.plpy.execute(plan, args)
        finally:
            self.plpy.execute(self.custom_mode)

    def run(self, statement: str, args: list):
        if self.group is None or statement not in SHARD_READS:
            return self.plpy.execute(self.plans[statement], args)
        shards = self.groups[self.group]

        def make():
            text, types = (STATEMENTS | residency.STATEMENTS)[statement]
            return self.plpy.prepare(on_shards(text, shards), types)
        return self._execute(self._cached(self.shard_plans, SHARD_PLANS, (statement, self.group), make), args)

    def run_for_tenant(self, statement: str, tenant_id: str, args: list):
        group = self.group if statement in SHARD_READS else None
        text, types = TENANT_STATEMENTS[statement]
        text = for_tenant(text, self.plpy.quote_literal(tenant_id))

        def make():
            return self.plpy.prepare(text if group is None else on_shards(text, self.groups[group]), types)
        plan = self._cached(self.tenant_plans, TENANT_PLANS, (statement, tenant_id, group), make)
        return self.plpy.execute(plan, args) if group is None else self._execute(plan, args)


class Compiler:
    """One per backend (GD['mnemo_compiler']): the body of mnemo.compile_context_bundle."""

    def __init__(self, plpy):
        # Not on Citus: there a generic plan leaves the tenant a parameter, and Citus
        # cannot plan most of the statements so ("could not create distributed plan");
        # the statements read from the tenant's shards may (PlpyDatabase).
        citus = plpy.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus")[0]["citus"]
        self.may_go_generic = not citus
        self.db = PlpyDatabase(plpy, citus)
        # The query is embedded on a thread while the statements before the candidate
        # query run (onnxruntime and tokenizers release the GIL): the embedding is the
        # largest single cost of a compile, and this way it mostly hides behind them.
        self.embedder = embedding.server_embedder(plpy)  # loads the model in this backend
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemo-embed")
        self.count_lines = functools.partial(count_lines_split, executor=self.pool)
        self.generic_plans = plpy.prepare("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        self.compiles = 0
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # Everything loaded so far (model, tokenizer, modules) lives as long as the
        # backend: out of the garbage collector's sight, a full collection no longer
        # walks it (docs/performance.md: the latency tail).
        gc.freeze()

    def start(self, query: str) -> embedding.PendingEmbedding:
        """Starts embedding the query on the pool's thread (embedding.Embedder.start:
        tokenized here, the thread runs only the encoder, without the GIL) and returns
        once the encoder runs (phases.QueryEmbedder)."""
        return self.embedder.start(query, self.pool)

    def embed(self, texts: list[str]):
        return self.embedder.embed(texts)

    def compile(self, tenant_id: str, session_id: str, query: str | None, options_json: str | None,
                messages_only: bool = False) -> str:
        """The bundle as JSON text (the messages alone if messages_only)."""
        watch = Stopwatch()
        self.compiles += 1
        generic = self.compiles > GENERIC_PLANS_AFTER
        if generic and self.may_go_generic:
            self.db.plpy.execute(self.generic_plans)  # until this call returns (is_local)
        self.db.use_shards(tenant_id, generic)
        try:
            done = phases.run(self.db, tenant_id, session_id, query, options_json, self, self.count_lines,
                              watch.lap, watch.elapsed_ms)
        finally:
            self.db.done()
        bundle, report = done.bundle, done.bundle["report"]
        report["timings_ms"] = watch.laps
        report["context_id"] = done.context_id
        report["session_id"] = session_id
        report["latency_ms"] = round(done.latency_ms, 3)
        if self.compiles in TRIM_AFTER_COMPILES:
            embedding.release_freed_memory()
        return dumps(bundle["messages"] if messages_only else bundle)
