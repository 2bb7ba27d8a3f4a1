"""Isolation matrix: a login role bound to tenant A attacks tenant B.

The role calls every routine it may execute (read from the catalog with
has_function_privilege, so a new routine cannot be forgotten) with B's tenant and
B's session, message, tool call, artifact and memory ids, and with A's tenant and
B's ids. Then it runs SELECT, INSERT, UPDATE, DELETE, COPY TO/FROM and TRUNCATE on
every table and every partition of the project's schemas (pg_class, pg_inherits).

A leak is any of B's data in what the role gets back (results, errors, notices: B's
rows carry a canary string), or any change to B's rows or to the tables no tenant
owns (a fingerprint of them, taken as the owner, moves). Every direct write the role
gets through (a statement that is not refused) is counted too: applications write
only through the API (sql/grants.sql). Both goals are 0.

``matrix(dsn, ...)`` is shared by tests/py/db/test_isolation.py (one id set, two
contexts) and ``run(dsn, args)`` for make bench-trust (more id sets, every context,
and the job runner run over what the role queued before the last fingerprint).
"""

from __future__ import annotations

import json
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from .background import cron_paused

SCHEMAS = ("mnemo", "mnemo_internal", "mnemo_archive")

# What the role tries under: as it logs in; after setting mnemo.tenant_id to B (the
# setting an unbound service role acts by); after SET ROLE mnemo_app (an unbound role
# it is a member of).
CONTEXTS = {
    "login": [],
    "tenant setting": ["SELECT set_config('mnemo.tenant_id', %(b)s, false)"],
    "set role": ["SET ROLE mnemo_app"],
}

ROUTINES = """
SELECT p.oid::regprocedure::text AS sig, p.pronamespace::regnamespace::text AS schema, p.proname,
    p.prokind,
    ARRAY(SELECT u.n FROM unnest(p.proargnames, coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
        AS u (n, m) WHERE u.m IN ('i', 'b', 'v')) AS names,
    ARRAY(SELECT format_type(u.t, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY AS u (t, i) ORDER BY u.i)
        AS types,
    p.pronargs - p.pronargdefaults AS required
FROM pg_proc AS p
WHERE p.pronamespace::regnamespace::text = ANY (%(schemas)s)
    AND has_function_privilege(%(role)s, p.oid, 'EXECUTE')
ORDER BY p.proname = 'forget', 1  -- forget last: the others still find A's memories
"""

RELATIONS = """
SELECT c.oid::regclass::text AS rel, c.relkind::text AS kind,
    coalesce(pg_partition_root(c.oid)::regclass::text, c.oid::regclass::text) AS tree,
    EXISTS (SELECT FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
        AND NOT a.attisdropped) AS has_tenant,
    -- the columns a copy of a row must carry (the others have defaults: fresh ids)
    ARRAY(SELECT a.attname::text FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0
        AND NOT a.attisdropped AND NOT a.atthasdef AND a.attgenerated = '' AND a.attidentity = ''
        ORDER BY a.attnum) AS copied,
    (SELECT a.attname FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0
        AND NOT a.attisdropped ORDER BY a.attnum LIMIT 1) AS first_column
FROM pg_class AS c
WHERE c.relnamespace::regnamespace::text = ANY (%(schemas)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
ORDER BY 3, c.relispartition, 1
"""

# Leaf tables, fingerprinted as the owner: B's rows of each tenant table, every row of
# the others. xmin is part of it, so a rewrite of a row to the same values counts.
LEAVES = """
SELECT c.oid::regclass::text AS rel,
    EXISTS (SELECT FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
        AND NOT a.attisdropped) AS has_tenant
FROM pg_class AS c
WHERE c.relnamespace::regnamespace::text = ANY (%(schemas)s) AND c.relkind = 'r'
ORDER BY 1
"""


@dataclass
class Figures:
    routines: int = 0
    relations: int = 0
    partitions: int = 0
    calls: int = 0
    statements: int = 0
    refused: int = 0
    leaks: int = 0
    writes: int = 0
    details: list[str] = field(default_factory=list)

    def leak(self, what: str) -> None:
        self.leaks += 1
        self.details.append("LEAK " + what)

    def write(self, what: str) -> None:
        self.writes += 1
        self.details.append("WRITE " + what)


# ---------------------------------------------------------------- the two tenants
def _seed(owner: psycopg.Connection, tenant: str, canary: str, id_sets: int) -> list[dict]:
    """Gives a tenant id_sets sessions, each with messages, a tool call and its result,
    an artifact, memories of several kinds (a fact, a decision, a task, a corrected
    note, entities), a logged compile; B's text carries the canary. Returns the ids."""
    owner.execute("SELECT mnemo.create_tenant(%s)", (tenant,))
    sets = []
    for k in range(id_sets):
        def call(q: str, *a):
            return owner.execute(q, a).fetchone()[0]
        sid = call("SELECT mnemo.start_session(%s, p_agent_id => %s, p_metadata => %s)",
                   tenant, f"agent {canary}", json.dumps({"note": canary}))
        msg = call("SELECT mnemo.record_message(%s, %s, %s)", tenant, sid,
                   json.dumps({"role": "user", "content": f"The vault code is {canary}-{k}. Alice lives in Oslo."}))
        call_id = f"call_{canary[-6:]}_{k}"
        call("SELECT mnemo.record_message(%s, %s, %s)", tenant, sid, json.dumps({
            "role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"/{canary}"})}}]}))
        call("SELECT mnemo.record_message(%s, %s, %s)", tenant, sid, json.dumps({
            "role": "tool", "tool_call_id": call_id, "content": f"{canary} vault line"}))
        art = call("SELECT mnemo.record_event(%s, %s, 'artifact', %s)", tenant, sid,
                   json.dumps({"text": f"{canary} vault line\n" * 4000}))["artifact_id"]
        fact = call("SELECT mnemo.remember(%s, %s, 'fact', %s, %s)", tenant, f"Alice's vault code is {canary}",
                    sid, json.dumps({"fact": {"subject": "Alice", "predicate": "vault_code", "object": canary},
                                     "entities": [f"Vault {canary}"]}))
        decision = call("SELECT mnemo.record_event(%s, %s, 'decision', %s)", tenant, sid, json.dumps(
            {"decision": f"Keep the vault at {canary}", "rationale": [canary], "alternatives": ["none"]}))
        call("SELECT mnemo.record_event(%s, %s, 'task_update', %s)", tenant, sid,
             json.dumps({"title": f"Rotate {canary}", "status": "open"}))
        note = call("SELECT mnemo.remember(%s, %s, 'note', %s)", tenant, f"Vault note {canary} {k}", sid)
        corrected = call("SELECT mnemo.correct(%s, %s, %s, 'probe')", tenant, note, f"Vault note {canary} {k}b")
        call("SELECT mnemo.compile_context(%s, %s, 'what is the vault code?')", tenant, sid)
        sets.append({"session": str(sid), "message": msg, "tool_call": call_id, "artifact": art,
                     "memories": [fact, decision["memory_id"], note, corrected]})
    return sets


def _drain_jobs(owner: psycopg.Connection, tenants: list[str]) -> None:
    """Runs the tenants' queued jobs to the end (a runner already holding some, such
    as pg_cron's, finishes them in its own time)."""
    deadline = time.monotonic() + 600
    while owner.execute("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = ANY (%s) AND status = 'queued'",
                        (tenants,)).fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError("jobs of the isolation tenants did not drain in 10 minutes")
        owner.execute("CALL mnemo.run_jobs(64, 50, 7)")
        time.sleep(0.2)


def _fingerprint(owner: psycopg.Connection, leaves: list[tuple[str, bool]], tenant_b: str) -> dict[str, str]:
    parts = []
    for rel, has_tenant in leaves:
        where = sql.SQL("WHERE x.tenant_id = {}").format(sql.Literal(tenant_b)) if has_tenant else sql.SQL("")
        parts.append(sql.SQL(
            "SELECT {name}, md5(coalesce(string_agg(x.xmin::text || ':' || x::text, '|' ORDER BY x::text), ''))"
            " FROM {rel} AS x {where}").format(name=sql.Literal(rel), rel=sql.SQL(rel), where=where))
    return dict(owner.execute(sql.SQL(" UNION ALL ").join(parts)).fetchall())


# ---------------------------------------------------------------- routines
def _argument(name: str, typ: str, tenant: str, ids: dict, variant: int, canary: str, role: str):
    """The value the role passes for one parameter: B's ids wherever an id fits."""
    mems, sess = ids["memories"], ids["session"]

    def pick(options: list):
        return options[variant % len(options)]

    by_name = {
        "p_tenant_id": tenant,
        "p_session_id": sess, "p_parent_session_id": sess,
        "p_memory_id": pick(mems), "p_artifact_id": ids["artifact"],
        "p_message": json.dumps(pick([
            {"role": "user", "content": "probe"},
            {"role": "tool", "tool_call_id": ids["tool_call"], "content": "probe"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": ids["tool_call"], "type": "function",
                                                                   "function": {"name": "f", "arguments": "{}"}}]}])),
        "p_options": json.dumps(pick([
            {}, {"session_id": sess, "source_message_ids": [ids["message"]], "memory_ids": mems,
                 "include_superseded": True, "budget": 4000},
            {"fact": {"subject": "Alice", "predicate": "vault_code", "object": "x"}, "session_id": sess}])),
        "p_filter": json.dumps(pick([{"memory_ids": mems}, {"session_id": sess},
                                     {"source_message_ids": [ids["message"]]}, {"contains": "vault"}])),
        "p_refs": [f"mem:{mems[0]}", f"msg:{ids['message']}", f"art:{ids['artifact']}"],
        "p_kind": pick(["message", "tool_call", "tool_result", "decision", "task_update", "artifact", "fact"]),
        "p_content": "probe vault",
        "p_query": "what is the vault code?",
        "p_role": role,
    }
    if name == "p_content" and typ == "jsonb":
        return json.dumps({"text": "probe", "tool": "read_file", "tool_call_id": ids["tool_call"],
                           "decision": "probe", "title": "probe", "status": "open"})
    if name in by_name:
        return by_name[name]
    if not name and typ == "text":
        return tenant  # an unnamed text parameter: most likely a tenant
    return {"text": "probe", "text[]": ["probe"], "integer": 1000, "bigint": mems[0], "bigint[]": [ids["message"]],
            "boolean": True, "real": 1.0, "numeric": 1, "jsonb": "{}", "uuid": sess, "name": role,
            "timestamp with time zone": None, "regclass": "mnemo.messages", "tsvector[]": None,
            "vector": None, "bytea": None, "date": None}.get(typ)


def _scan(text: str, canary: str) -> bool:
    return canary in text


def _probe_routine(app: psycopg.Connection, f: Figures, routine: tuple, role: str, tenant_a: str, tenant_b: str,
                   id_sets: list[dict], canary: str, notices: list[str], context: str) -> None:
    sig, schema, proname, kind, names, types, required = routine
    if len(names) != len(types) or not all(names):
        names = [""] * len(types)  # unnamed parameters: passed by position
    # pass every parameter without a default, and every one that can carry an id (by
    # name; a routine with unnamed parameters gets the ones without a default)
    carried = [(n, t) for i, (n, t) in enumerate(zip(names, types, strict=True))
               if i < required or n in ("p_session_id", "p_parent_session_id", "p_memory_id", "p_artifact_id",
                                        "p_options", "p_filter", "p_refs", "p_message", "p_kind")]
    variants = 7 if any(n in ("p_kind", "p_message", "p_options", "p_filter") for n, _ in carried) else 1
    for tenant in (tenant_b, tenant_a):
        for ids in id_sets:
            for v in range(variants):
                values = [_argument(n, t, tenant, ids, v, canary, role) for n, t in carried]
                call = sql.SQL("{verb} {schema}.{name}({args})").format(
                    verb=sql.SQL("CALL" if kind == "p" else "SELECT"), schema=sql.Identifier(schema),
                    name=sql.Identifier(proname),
                    args=sql.SQL(", ").join(
                        sql.SQL("{} => {}::{}").format(sql.Identifier(n), sql.Placeholder(), sql.SQL(t)) if n
                        else sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(t)) for n, t in carried))
                f.calls += 1
                out = _run(app, call, values, f)
                if _scan(out + "".join(notices), canary):
                    f.leak(f"{sig} for {tenant} ({context}): {out[:200]}")
                notices.clear()


def _run(app: psycopg.Connection, stmt, params=None, f: Figures | None = None) -> str:
    try:
        cur = app.execute(stmt, params)
        return repr(cur.fetchall()) if cur.description else ""
    except psycopg.Error as e:
        if f is not None:
            f.refused += 1
        d = e.diag
        return " ".join(str(x) for x in (e.sqlstate, d.message_primary, d.message_detail, d.message_hint,
                                          d.context) if x)


def _leaking_rows(app: psycopg.Connection, stmt, f: Figures, needles: list[str]) -> str | None:
    """Reads every row stmt returns, one at a time (a table of a busy database may
    hold gigabytes), and returns the first that shows a needle (its repr, cut), None
    when none does or the statement is refused. The rows are read to the end: the
    connection is free for the next statement."""
    found = None
    try:
        for row in app.cursor().stream(stmt):
            if found is None and any(n in (text := repr(row)) for n in needles):
                found = text[:200]
    except psycopg.Error:
        f.refused += 1
    return found


def _copy_shows(app: psycopg.Connection, r: sql.SQL, f: Figures, needles: list[bytes]) -> bool:
    """Whether COPY r TO STDOUT shows a needle, read a chunk at a time (each chunk with
    the end of the one before it, so a needle across two chunks is seen), to the end."""
    longest, shows, tail = max(map(len, needles)), False, b""
    try:
        with app.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(r)) as copy:
            for chunk in copy:
                data = tail + bytes(chunk)
                shows = shows or any(n in data for n in needles)
                tail = data[-longest:]
    except psycopg.Error:
        f.refused += 1
    return shows


# ---------------------------------------------------------------- tables
def _copy_row(r: sql.SQL, columns: list[str], tenant: str | None) -> sql.Composed:
    """INSERT of a copy of a row the role can see (fresh ids), into tenant (if given)."""
    values = [sql.Literal(tenant) if tenant is not None and c == "tenant_id" else sql.Identifier(c)
              for c in columns]
    return sql.SQL("INSERT INTO {r} ({cols}) SELECT {vals} FROM {r} LIMIT 1").format(
        r=r, cols=sql.SQL(", ").join(map(sql.Identifier, columns)), vals=sql.SQL(", ").join(values))


def _probe_relation(app: psycopg.Connection, f: Figures, rel: str, kind: str, has_tenant: bool, copied: list[str],
                    first: str, tenant_b: str, canary: str, context: str) -> None:
    r, col = sql.SQL(rel), sql.Identifier(first)
    b = sql.Literal(tenant_b)
    reads = [sql.SQL("SELECT * FROM {}").format(r)]
    copies = [_copy_row(r, copied, None)] if copied else []
    if has_tenant:
        writes = copies + [
            _copy_row(r, copied, tenant_b),
            sql.SQL("UPDATE {r} SET tenant_id = {b}").format(r=r, b=b),
            sql.SQL("UPDATE {r} SET tenant_id = tenant_id WHERE tenant_id = {b}").format(r=r, b=b),
            sql.SQL("UPDATE {r} SET tenant_id = tenant_id WHERE ctid = '(0,0)'").format(r=r),
            sql.SQL("DELETE FROM {r} WHERE tenant_id = {b}").format(r=r, b=b),
            sql.SQL("DELETE FROM {r} WHERE ctid = '(0,0)'").format(r=r),
        ]
    else:
        writes = copies + [
            sql.SQL("INSERT INTO {r} DEFAULT VALUES").format(r=r),
            sql.SQL("UPDATE {r} SET {c} = {c}").format(r=r, c=col),
            sql.SQL("DELETE FROM {r} WHERE ctid = '(0,0)'").format(r=r),
        ]
    writes.append(sql.SQL("TRUNCATE {}").format(r))
    where = f"{rel} ({context})"
    needles = [canary, repr(tenant_b)] if has_tenant else [canary]
    for stmt in reads:
        f.statements += 1
        out = _leaking_rows(app, stmt, f, needles)
        if out is not None:
            f.leak(f"{stmt.as_string(app)} ({context}): {out}")
    if kind == "r":
        f.statements += 1
        if _copy_shows(app, r, f, [canary.encode()] + ([tenant_b.encode()] if has_tenant else [])):
            f.leak(f"COPY {where} TO STDOUT")
    for stmt in writes:
        f.statements += 1
        try:
            app.execute(stmt)
            f.write(f"{stmt.as_string(app)} ({context})")
        except psycopg.Error:
            f.refused += 1
    f.statements += 1
    try:
        cols = sql.SQL("(tenant_id)") if has_tenant else sql.SQL("")
        with app.cursor().copy(sql.SQL("COPY {} {} FROM STDIN").format(r, cols)) as copy:
            copy.write((tenant_b + "\n") if has_tenant else "\n")
        f.write(f"COPY {where} FROM STDIN")
    except psycopg.Error:
        f.refused += 1


# ---------------------------------------------------------------- the matrix
def _enter(app: psycopg.Connection, context: str, tenant_b: str) -> None:
    for setup in CONTEXTS[context]:
        app.execute(setup, {"b": tenant_b})


def _leave(app: psycopg.Connection) -> None:
    app.execute("RESET ROLE")
    app.execute("RESET mnemo.tenant_id")


@contextmanager
def bound_login(owner: psycopg.Connection, dsn: str, tenant: str, weaken: tuple[str, ...] = (),
                undo: tuple[str, ...] = ()):
    """A fresh LOGIN role, member of mnemo_app, bound to tenant; yields (role, conninfo).
    weaken (run as the owner before, undo after, with {role} replaced) lets a test
    break the grants on purpose. The role is dropped afterwards."""
    role, password = f"iso_role_{secrets.token_hex(4)}", secrets.token_urlsafe(18)
    ident = sql.Identifier(role)
    owner.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE mnemo_app").format(ident, sql.Literal(password)))
    try:
        owner.execute("SELECT mnemo.bind_role(%s, %s)", (role, tenant))
        for q in weaken:
            owner.execute(sql.SQL(q).format(role=ident))
        yield role, make_conninfo(dsn, user=role, password=password)
    finally:
        for q in undo:
            owner.execute(sql.SQL(q).format(role=ident))
        owner.execute("DELETE FROM mnemo_internal.role_tenants WHERE role_name = %s", (role,))
        owner.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        owner.execute(sql.SQL("DROP ROLE {}").format(ident))


def matrix(dsn: str, id_sets: int = 1, contexts: tuple[str, ...] = ("login", "tenant setting"),
           partition_contexts: tuple[str, ...] = ("login",), run_jobs: bool = True,
           trees: tuple[str, ...] | None = None, weaken: tuple[str, ...] = (),
           undo: tuple[str, ...] = ()) -> Figures:
    """Runs the matrix with a fresh role bound to a fresh tenant A against a fresh B;
    trees limits the tables to those partition trees."""
    f = Figures()
    tag = secrets.token_hex(4)
    canary = f"ISOCANARY{secrets.token_hex(6)}"
    tenant_a, tenant_b = f"iso_a_{tag}", f"iso_b_{tag}"
    with psycopg.connect(dsn, autocommit=True) as owner:
        _seed(owner, tenant_a, f"a{tag}", id_sets)  # A's text has no canary
        ids_b = _seed(owner, tenant_b, canary, id_sets)
        _drain_jobs(owner, [tenant_a, tenant_b])
        leaves = owner.execute(LEAVES, {"schemas": list(SCHEMAS)}).fetchall()
        with bound_login(owner, dsn, tenant_a, weaken, undo) as (role, conninfo), \
                psycopg.connect(conninfo, autocommit=True) as app:
            before = _fingerprint(owner, leaves, tenant_b)

            def check(what: str) -> None:
                nonlocal before
                after = _fingerprint(owner, leaves, tenant_b)
                for rel in sorted(k for k in after if after[k] != before.get(k)):
                    f.leak(f"{rel} changed after {what}")
                before = after

            notices: list[str] = []
            app.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
            app.execute("SET statement_timeout = '120s'")
            routines = owner.execute(ROUTINES, {"schemas": list(SCHEMAS), "role": role}).fetchall()
            f.routines = len(routines)
            for routine in routines:
                for context in contexts:
                    _enter(app, context, tenant_b)
                    _probe_routine(app, f, routine, role, tenant_a, tenant_b, ids_b, canary, notices, context)
                    _leave(app)
                check(f"routine {routine[0]}")
            relations = [r for r in owner.execute(RELATIONS, {"schemas": list(SCHEMAS)}).fetchall()
                         if trees is None or r[2] in trees]
            f.relations = len(relations)
            f.partitions = sum(1 for r in relations if r[0] != r[2])
            tree = None
            for rel, kind, root, has_tenant, copied, first in relations:
                if tree is not None and root != tree:
                    check(f"statements on {tree}")
                tree = root
                for context in (contexts if rel == root else partition_contexts):
                    _enter(app, context, tenant_b)
                    _probe_relation(app, f, rel, kind, has_tenant, copied, first, tenant_b, canary, context)
                    _leave(app)
            check(f"statements on {tree}")
            if run_jobs:
                # what the role queued runs as the owner, outside row-level security
                _drain_jobs(owner, [tenant_a, tenant_b])
                check("the job runner")
    return f


def report(f: Figures, seconds: float) -> dict:
    leaks = [d for d in f.details if d.startswith("LEAK")]
    for line in leaks[:40] + [d for d in f.details if not d.startswith("LEAK")][:20]:
        print("  " + line[:300])
    print(f"isolation: {f.routines} routines executable by the role, {f.calls} calls; "
          f"{f.relations} tables and partitions ({f.partitions} partitions), {f.statements} statements; "
          f"{f.refused} refused; leaks {f.leaks}; direct writes {f.writes}  ({seconds:.1f} s)", flush=True)
    return {"passed": f.leaks == 0 and f.writes == 0, "leaks": f.leaks, "direct_writes": f.writes,
            "routines": f.routines, "calls": f.calls, "relations": f.relations, "partitions": f.partitions,
            "statements": f.statements, "refused": f.refused}


def run(dsn: str, args) -> dict:
    t0 = time.monotonic()
    with cron_paused(dsn):
        f = matrix(dsn, id_sets=3, contexts=tuple(CONTEXTS), partition_contexts=tuple(CONTEXTS))
    return report(f, time.monotonic() - t0)

