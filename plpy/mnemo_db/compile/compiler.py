"""The Compiler: compile_context inside PL/Python. It prepares the statements once
per backend, embeds the query on a thread while the phases read, and runs the phases
(phases.py) in turn, timing each (the report's timings_ms)."""

from __future__ import annotations

import functools
import gc
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import embedding
from ..paging import residency
from . import phases
from .packing import count_lines_split
from .rows import dumps
from .statements import STATEMENTS, TENANT_STATEMENTS, for_tenant

# The switch interval the compile's threads run under: the embedding thread needs the
# GIL to start the encoder and to hand back its output, and with Python's default
# it waited behind the compile's own Python work (docs/performance.md).
SWITCH_INTERVAL_S = 0.0002
# Plans of statements prepared per tenant (statements.TENANT_STATEMENTS) kept per backend.
TENANT_PLANS = 64
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
    """phases.Database over PL/Python: the statements prepared once per backend."""

    def __init__(self, plpy):
        self.plpy = plpy
        self.Error = plpy.SPIError
        self.plans = {name: plpy.prepare(text, types)
                      for name, (text, types) in (STATEMENTS | residency.STATEMENTS).items()}
        self.tenant_plans: dict[tuple[str, str], Any] = {}  # least recently used first

    def run(self, statement: str, args: list):
        return self.plpy.execute(self.plans[statement], args)

    def run_for_tenant(self, statement: str, tenant_id: str, args: list):
        key = (statement, tenant_id)
        plan = self.tenant_plans.pop(key, None)
        if plan is None:
            text, types = TENANT_STATEMENTS[statement]
            plan = self.plpy.prepare(for_tenant(text, self.plpy.quote_literal(tenant_id)), types)
            if len(self.tenant_plans) >= TENANT_PLANS:
                del self.tenant_plans[next(iter(self.tenant_plans))]  # the least recently used
        self.tenant_plans[key] = plan
        return self.plpy.execute(plan, args)


class Compiler:
    """One per backend (GD['mnemo_compiler']): the body of mnemo.compile_context_bundle."""

    def __init__(self, plpy):
        self.db = PlpyDatabase(plpy)
        # The query is embedded on a thread while the statements before the candidate
        # query run (onnxruntime and tokenizers release the GIL): the embedding is the
        # largest single cost of a compile, and this way it mostly hides behind them.
        self.embedder = embedding.server_embedder(plpy)  # loads the model in this backend
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemo-embed")
        self.count_lines = functools.partial(count_lines_split, executor=self.pool)
        self.generic_plans = plpy.prepare("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
        # Not on Citus: there a generic plan leaves the tenant a parameter, and Citus
        # cannot plan most of the statements so ("could not create distributed plan").
        self.may_go_generic = not plpy.execute(
            "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus")[0]["citus"]
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
        if self.compiles > GENERIC_PLANS_AFTER and self.may_go_generic:
            self.db.plpy.execute(self.generic_plans)  # until this call returns (is_local)
        done = phases.run(self.db, tenant_id, session_id, query, options_json, self, self.count_lines,
                          watch.lap, watch.elapsed_ms)
        bundle, report = done.bundle, done.bundle["report"]
        report["timings_ms"] = watch.laps
        report["context_id"] = done.context_id
        report["session_id"] = session_id
        report["latency_ms"] = round(done.latency_ms, 3)
        if self.compiles in TRIM_AFTER_COMPILES:
            embedding.release_freed_memory()
        return dumps(bundle["messages"] if messages_only else bundle)
