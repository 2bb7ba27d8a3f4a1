"""`mnemo`: Mnemosyne at the terminal. Every command calls the SQL API through
:class:`mnemosyne.Client`; it works against the local cluster by default
(postgresql://postgres@127.0.0.1:$MNEMO_PORT/mnemo, port 55432) and DATABASE_URL
(or --database-url) when given. Errors print the project's message and hint, with
no traceback, and exit with status 1.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import psycopg
import typer
from rich import box
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import importers
from .client import Client, connect, default_dsn
from .errors import MnemoError

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

# C0/C1 control characters (ESC and CSI start terminal commands) and bidi overrides
# (they reorder what is shown); \t and \n stay, a table or panel lays them out.
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape(text: str) -> str:
    """Stored text as a terminal may show it: rich markup escaped, and control characters
    written as Python escapes (an agent id is whatever a caller sent, ESC included)."""
    return escape_markup(_UNSHOWABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text))



def _example(*lines: str) -> str:
    """The epilog of a command's --help (markdown): its examples."""
    return "**Example**\n\n" + "\n\n".join(f"`$ {x}`" for x in lines)


app = typer.Typer(
    name="mnemo", no_args_is_help=True, add_completion=False, rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
    help="Mnemosyne, the memory manager for LLM agents that lives inside PostgreSQL.",
    epilog=_example("mnemo status", "mnemo import session.jsonl --tenant acme",
                    "DATABASE_URL=postgresql://... mnemo tenants"))
jobs_app = typer.Typer(no_args_is_help=False, rich_markup_mode="markdown",
                       help="The job queue: list, retry failed jobs, run due jobs now.",
                       epilog=_example("mnemo jobs", "mnemo jobs retry", "mnemo jobs run"))
app.add_typer(jobs_app, name="jobs")
keys_app = typer.Typer(no_args_is_help=True, rich_markup_mode="markdown",
                       help="API keys: the key a request to `mnemo serve` or `mnemo mcp --transport http` "
                            "presents is its tenant. Only a hash is stored; the secret is shown once.",
                       epilog=_example("mnemo keys create acme --label ci", "mnemo keys list acme",
                                       "mnemo keys revoke acme 3f2a9c0d1b7e"))
app.add_typer(keys_app, name="keys")
_state: dict[str, str] = {}


@app.callback()
def _root(database_url: Annotated[str | None, typer.Option(
        "--database-url", "-d", help="PostgreSQL URL (default: DATABASE_URL, else the local cluster)",
        show_default=False)] = None) -> None:
    _state["dsn"] = database_url or default_dsn()


def fail(message: str, hint: str | None = None, code: str | None = None,
         detail: str | None = None) -> None:
    err.print(f"[bold red]error[/bold red]{f' [{code}]' if code else ''}: {escape(message)}")
    if detail:
        err.print(f"[dim]detail:[/dim] {escape(detail)}")
    if hint:
        err.print(f"[yellow]hint:[/yellow] {escape(hint)}")
    raise typer.Exit(1)


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turns the errors a command can meet into a message and a hint (no traceback)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MnemoError as e:
            fail(e.message, e.hint, e.sqlstate, e.detail)
        except psycopg.OperationalError as e:
            # libpq's reason ("Connection refused", "password authentication failed") with
            # its advice, on one line
            reason = " ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
            fail(f"cannot connect to {_safe_dsn()}: {reason}",
                 "Start the local cluster with `make up`, or point DATABASE_URL at a server "
                 "where Mnemosyne is deployed.")
        except psycopg.errors.InsufficientPrivilege as e:
            fail(e.diag.message_primary or str(e), "This command needs the database owner's role.")
        except psycopg.errors.UndefinedFunction as e:
            fail(e.diag.message_primary or str(e),
                 "Is Mnemosyne deployed (and up to date) in this database? Run `make deploy`.")
        except psycopg.Error as e:
            fail(e.diag.message_primary or str(e), e.diag.message_hint, e.sqlstate)
        except importers.ImportFormatError as e:
            fail(str(e), f"Formats: {', '.join(importers.FORMATS)} (--format chooses one).")
        except OSError as e:
            fail(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    return run


def command(parent: typer.Typer = app, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        return parent.command(**kw)(handled(fn))
    return register


def _safe_dsn() -> str:
    return psycopg.conninfo.make_conninfo(_state.get("dsn") or default_dsn(), password="***") \
        if "password" in psycopg.conninfo.conninfo_to_dict(_state.get("dsn") or default_dsn()) \
        else (_state.get("dsn") or default_dsn())


def client() -> Client:
    return connect(_state.get("dsn") or default_dsn())


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str, ensure_ascii=False) + "\n")


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def when(value: Any) -> str:
    """A time to the minute (its seconds and zone are noise in a table); month, day and
    time alone on a terminal narrower than 100 columns, to leave the content room."""
    if value is None:
        return "-"
    return str(value)[5:16] if out.width < 100 else str(value)[:16]


def short(text: Any, width: int = 90) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= width else s[: width - 1] + "…"


TIME_COLUMNS = ("last message", "when", "last start", "updated", "run after", "created", "expires", "last used")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A table readable at 80 columns (a pipe, no terminal): headers are never cut
    (each column at least its header's width), times stay on one line, and the
    content columns fold, ids included; no vertical rules, to leave them the room."""
    t = Table(title=escape(title), title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    for c in columns:
        t.add_column(c, overflow="fold", min_width=len(c), no_wrap=c in TIME_COLUMNS)
    for r in rows:
        t.add_row(*[escape("-" if v is None else str(v)) for v in r])
    return t


def find_tenant(m: Client, session_id: uuid.UUID) -> str:
    """The tenant that holds a session (the caller sees it through list_tenants)."""
    for t in m.list_tenants():
        if m.list_sessions(t["tenant_id"], session_id=session_id):
            return t["tenant_id"]
    fail(f"no tenant holds session {session_id}", "Pass --tenant, or see `mnemo sessions`.", "MN003")
    raise AssertionError  # fail() raises


def session_uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"{value!r} is not a session id (a UUID)", "`mnemo sessions TENANT` lists them.", "MN001")
        raise


# ------------------------------------------------------------------------- status
@command(epilog=_example("mnemo status", "mnemo status --tenant acme --json"))
def status(tenant: Annotated[str | None, typer.Option(help="also this tenant's memory_stats")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The cluster: server, extensions, schema version, job queue, each background job's
    last run, table sizes per plane and the embedding model."""
    with client() as m:
        st = m.status()
        jobs = m.lifecycle_status()
        stats = m.memory_stats(tenant) if tenant else None
    if as_json:
        print_json({"status": st, "lifecycle": jobs, **({"memory_stats": stats} if stats else {})})
        return
    emb = st["embedding"]
    lines = [
        f"[bold]server[/bold]     PostgreSQL {st['server']}, database {st['database']} as {st['user']}",
        f"[bold]url[/bold]        {escape(_safe_dsn())}",
        f"[bold]schema[/bold]     {st['schema']['latest']} ({st['schema']['migrations']} migrations)",
        "[bold]extensions[/bold] " + ", ".join(f"{k} {v}" for k, v in st["extensions"].items()),
        f"[bold]embedding[/bold]  {emb['model']} "
        + (f"loaded, {emb['dims']} dimensions" if "dims" in emb else f"[red]failed: {escape(emb['error'])}[/red]"),
        f"[bold]tenants[/bold]    {st['tenants']}",
    ]
    out.print(Panel("\n".join(lines), title="Mnemosyne", title_align="left"))
    q = st["jobs"]
    out.print(table("Job queue", ["queued", "due now", "failed", "done", "oldest queued"],
                    [[q["queued"], q["due"], q["failed"], q["done"], when(q["oldest_queued"])]]))
    out.print(table("Background jobs (lifecycle_status)",
                    ["job", "schedule", "last start", "took", "status", "rows", "last error"],
                    [[j["job"], j["schedule"], when(j["last_start"]),
                      None if j["duration"] is None else f"{j['duration'].total_seconds():.2f} s",
                      j["status"], j["rows_touched"], short(j["last_error"], 50) or None] for j in jobs]))
    out.print(table("Sizes per plane", ["plane", "total", "largest tables"],
                    [[plane, human_bytes(t.get("total")), ", ".join(
                        f"{k} {human_bytes(v)}" for k, v in sorted(
                            ((k, v) for k, v in t.items() if k != "total"),
                            key=lambda kv: -(kv[1] or 0))[:4])]
                     for plane, t in st["sizes"].items()]))
    if stats:
        mem, msg = stats["memories"], stats["messages"]
        out.print(table(f"Tenant {tenant}", ["memories", "by tier", "messages", "tokens", "jobs queued/failed"],
                        [[mem["current"], ", ".join(f"{k} {v}" for k, v in mem["by_tier"].items()),
                          msg["count"], msg["tokens"], f"{stats['jobs']['queued']}/{stats['jobs']['failed']}"]]))


# ------------------------------------------------------------------------ tenants
@command(epilog=_example("mnemo tenants", "mnemo tenants --create acme"))
def tenants(create: Annotated[str | None, typer.Option(help="create this tenant first (idempotent)")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The tenants, with their sessions, messages and memories."""
    with client() as m:
        if create:
            m.create_tenant(create)
        rows = m.list_tenants()
    if as_json:
        print_json(rows)
        return
    out.print(table("Tenants", ["tenant", "sessions (active)", "messages", "memories", "last message"],
                    [[r["tenant_id"], f"{r['sessions']} ({r['active_sessions']})", r["messages"],
                      r["memories"], when(r["last_message_at"])] for r in rows]))


@command(epilog=_example("mnemo sessions acme", "mnemo sessions --status active"))
def sessions(tenant: Annotated[str | None, typer.Argument(help="tenant (default: every tenant)")] = None,
             status_: Annotated[str | None, typer.Option("--status", help="active, paused, closed or expired")] = None,
             limit: Annotated[int, typer.Option(help="at most this many per tenant")] = 50,
             as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """A tenant's sessions (or every tenant's), newest activity first."""
    with client() as m:
        names = [tenant] if tenant else [t["tenant_id"] for t in m.list_tenants()]
        rows = [{"tenant_id": t, **r} for t in names for r in m.list_sessions(t, status=status_, limit=limit)]
    if as_json:
        print_json(rows)
        return
    columns = ["session", "agent", "channel", "status", "messages", "tokens", "last message"]
    cells = [[r["session_id"], r["agent_id"], r["channel"], r["status"], r["messages"], r["tokens"],
              when(r["last_message_at"])] for r in rows]
    if tenant:
        out.print(table(f"Sessions of {tenant}", columns, cells))
    else:
        out.print(table("Sessions", ["tenant", *columns], [[r["tenant_id"], *c] for r, c in zip(rows, cells,
                                                                                              strict=True)]))


# --------------------------------------------------------------------------- show
@command(epilog=_example("mnemo show 3b0c8f8e-0d5e-4c43-9a0e-5f1e2b7c9d11",
                         "mnemo show 3b0c8f8e-0d5e-4c43-9a0e-5f1e2b7c9d11 --query 'where do I live?' --budget 2000"))
def show(session: Annotated[str, typer.Argument(help="session id")],
         tenant: Annotated[str | None, typer.Option(help="its tenant (default: found)")] = None,
         query: Annotated[str | None, typer.Option(help="retrieve for this (default: the last user message)")] = None,
         budget: Annotated[int | None, typer.Option(help="token budget (default: the session's window)")] = None,
         as_json: Annotated[bool, typer.Option("--json", help="print the whole bundle as JSON")] = False) -> None:
    """The compiled context of a session as the model would receive it: each message,
    then each item with its fidelity, tokens and source id, the omissions with their
    reasons and the per-phase timings. Nothing is logged: showing a context does not
    count as using its memories."""
    sid = session_uuid(session)
    with client() as m:
        tenant = tenant or find_tenant(m, sid)
        options: dict[str, Any] = {"log": False}
        if budget is not None:
            options["budget"] = budget
        bundle = m.compile_context_bundle(tenant, sid, query, **options)
    if as_json:
        print_json(bundle)
        return
    report = bundle["report"]
    for msg in bundle["messages"]:
        body = msg.get("content")
        if not isinstance(body, str):
            body = json.dumps(body, ensure_ascii=False) if body is not None else ""
        if msg.get("tool_calls"):
            body += "".join(f"\n→ {c['function']['name']}({c['function']['arguments']}) [{c['id']}]"
                            for c in msg["tool_calls"])
        title = msg["role"] + (f" · {msg['name']}" if msg.get("name") else "") + (
            f" · answers {msg['tool_call_id']}" if msg.get("tool_call_id") else "")
        out.print(Panel(escape(body), title=escape(title), title_align="left",
                        border_style={"system": "blue", "user": "green", "assistant": "magenta"}.get(
                            msg["role"], "yellow")))
    out.print(table("Items", ["source", "section", "kind", "fidelity", "tokens", "score"],
                    [[i.get("source"), i.get("section"), i.get("kind"), i.get("fidelity"), i.get("tokens"),
                      i.get("score")] for i in report.get("items", [])]))
    if report.get("omissions"):
        out.print(table("Omissions", ["source", "reason", "detail"],
                        [[o.get("source") or ", ".join(map(str, o.get("candidates", []))), o.get("reason"),
                          short(json.dumps({k: v for k, v in o.items() if k not in ("source", "reason")}), 60)]
                         for o in report["omissions"]]))
    tok, b = report.get("tokens", {}), report.get("budget", {})
    out.print(f"[bold]tokens[/bold] {tok.get('total')} of {b.get('available')} available "
              f"(system {tok.get('system')}, memory {tok.get('memory')}, summary {tok.get('summary')}, "
              f"history {tok.get('history')}); task type {report.get('task_type')}, channel {report.get('channel')}")
    out.print("[bold]timings[/bold] " + ", ".join(f"{k} {v} ms" for k, v in report.get("timings_ms", {}).items()))


# ------------------------------------------------------------------------- search
@command(epilog=_example("mnemo search acme 'deploy target'", "mnemo search acme postgres --memories --limit 5"))
def search(tenant: Annotated[str, typer.Argument(help="tenant")],
           query: Annotated[str, typer.Argument(help="what to look for")],
           limit: Annotated[int, typer.Option(help="results (1 to 100)")] = 10,
           memories: Annotated[bool, typer.Option("--memories", help="memories only")] = False,
           messages: Annotated[bool, typer.Option("--messages", help="messages only")] = False,
           as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Hybrid search (embeddings and full text) over a tenant's memories and messages,
    with the scores: score = 0.7 cosine + 0.3 lexical / best lexical."""
    sources = None if memories == messages else ["memories"] if memories else ["messages"]
    with client() as m:
        rows = m.search(tenant, query, limit=limit, sources=sources)
    if as_json:
        print_json(rows)
        return
    out.print(table(f"Search {query!r} in {tenant}", ["score", "cosine", "lexical", "source", "kind", "content"],
                    [[f"{r['score']:.3f}", f"{r['cosine']:.3f}", f"{r['lexical']:.3f}", r["source"], r["kind"],
                      short(r["content"])] for r in rows]))


# ------------------------------------------------------------ the explicit memory API
@command(epilog=_example("mnemo remember acme 'The deploy target is Fly.io' --kind fact",
                         "mnemo remember acme 'Always run the tests before pushing' --kind instruction --pin"))
def remember(tenant: Annotated[str, typer.Argument(help="tenant")],
             content: Annotated[str, typer.Argument(help="what to remember")],
             kind: Annotated[str, typer.Option(help="fact, preference, instruction, decision, task, note, ...")] = "note",
             session: Annotated[str | None, typer.Option(help="the session it belongs to")] = None,
             tag: Annotated[list[str] | None, typer.Option(help="a tag (repeatable)")] = None,
             pin: Annotated[bool, typer.Option(help="always in context")] = False) -> None:
    """Store a memory directly (the same text again returns the same id)."""
    options: dict[str, Any] = {}
    if tag:
        options["tags"] = tag
    if pin:
        options["pinned"] = True
    with client() as m:
        mid = m.remember(tenant, content, kind=kind, session_id=session and session_uuid(session),
                         options=options)
    out.print(f"remembered [bold]mem:{mid}[/bold]")


@command(epilog=_example("mnemo forget acme 42", "mnemo forget acme --contains 'deploy target'",
                         "mnemo forget acme --all --yes"))
def forget(tenant: Annotated[str, typer.Argument(help="tenant")],
           memory_id: Annotated[int | None, typer.Argument(help="memory id (mem:N)")] = None,
           contains: Annotated[str | None, typer.Option(help="memories whose text contains this")] = None,
           kind: Annotated[str | None, typer.Option(help="memories of this kind")] = None,
           entity: Annotated[str | None, typer.Option(help="memories that mention this entity")] = None,
           all_: Annotated[bool, typer.Option("--all", help="every memory of the tenant")] = False,
           yes: Annotated[bool, typer.Option("--yes", help="no confirmation for --all")] = False) -> None:
    """Erase memories (by id or by filter) with what derives from them."""
    flt = {k: v for k, v in (("contains", contains), ("kind", kind), ("entity", entity)) if v}
    if all_:
        if not yes:
            typer.confirm(f"Erase every memory of {tenant}?", abort=True)
        flt["all"] = True
    if memory_id is None and not flt:
        fail("nothing to forget: give a memory id or a filter", "e.g. mnemo forget acme 42, or --contains TEXT",
             "MN001")
    with client() as m:
        n = m.forget(tenant, memory_id, filter=flt or None)
    out.print(f"forgot {n} memor{'y' if n == 1 else 'ies'}")


@command(epilog=_example("mnemo decisions acme", "mnemo decisions acme 'which database?' --limit 5"))
def decisions(tenant: Annotated[str, typer.Argument(help="tenant")],
              query: Annotated[str | None, typer.Argument(help="best match first (default: newest first)")] = None,
              limit: Annotated[int, typer.Option(help="at most this many (1 to 200)")] = 20,
              as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Decisions with their rationale and alternatives."""
    with client() as m:
        rows = m.query_decisions(tenant, query, limit=limit)
    if as_json:
        print_json(rows)
        return
    out.print(table("Decisions", ["id", "decision", "rationale", "alternatives", "when", "score"],
                    [[f"mem:{d['memory_id']}", short(d["decision"], 60), short("; ".join(d["rationale"] or []), 50),
                      short("; ".join(d["alternatives"] or []), 40), when(d["created_at"]), d["score"]]
                     for d in rows]))


# ------------------------------------------------------------------ import / export
@command(name="import", epilog=_example(
    "mnemo import marshmallow-code__marshmallow-1867.traj --tenant demo",
    "mnemo import ~/.claude/projects/myrepo/0b9c….jsonl --tenant me",
    "mnemo import acme.jsonl   # what mnemo export wrote: its tenant"))
def import_(file: Annotated[Path, typer.Argument(help="the file to import", exists=True, dir_okay=False)],
            tenant: Annotated[str | None, typer.Option(help="into this tenant (an export's own by default)")] = None,
            fmt: Annotated[str | None, typer.Option("--format", help=f"one of {', '.join(importers.FORMATS)} "
                                                    "(default: detected)")] = None,
            create_tenant: Annotated[bool, typer.Option(help="create --tenant when it does not exist "
                                                        "(an export's own tenant always is)")] = False) -> None:
    """Import conversations: OpenAI-shaped JSONL, a Claude Code session log, a
    SWE-agent .traj, LoCoMo's JSON, or what `mnemo export` wrote. Idempotent and
    resumable: run it again and it records only what is missing. A bad message
    stops it: nothing of its batch of 100 is kept, and the error says what was."""
    from .errors import UnknownTenant

    parsed = importers.read(file, fmt)
    own = (parsed.tenant or {}).get("tenant_id")
    create_tenant = create_tenant or (own is not None and tenant in (None, own))
    tenant = tenant or own
    if not tenant:
        fail("which tenant? this file names none", "Pass --tenant NAME.", "MN001")
    try:
        with client() as m, Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                                     transient=False, disable=not err.is_terminal) as bar:
            task = bar.add_task(f"{parsed.format} → {tenant}", total=parsed.message_count)
            summary = importers.run_import(m, tenant, parsed, progress=lambda n: bar.advance(task, n),
                                           create_tenant=create_tenant)
    except UnknownTenant:
        fail(f"unknown tenant {tenant!r}; nothing was imported",
             "Pass --create-tenant to create it, or see `mnemo tenants` for the names.", "MN002")
    except importers.ImportStopped as e:
        code = getattr(e.error, "sqlstate", None)
        kept = e.summary.messages_recorded
        fail(f"{getattr(e.error, 'message', e.error)} (session {e.session})",
             f"Recorded before the error: {kept} message{'' if kept == 1 else 's'}"
             + (f", of which {e.kept} in session {e.session}" if e.kept else "")
             + "; nothing of the batch with the bad message. Fix the file and run the same command again: "
             "it goes on after what was recorded.", code)
    out.print(
        f"imported [bold]{file.name}[/bold] ({summary.format}) into [bold]{tenant}[/bold]: "
        f"{summary.messages_recorded} messages recorded, {summary.messages_skipped} already there; "
        f"sessions: {summary.sessions_new} new, {summary.sessions_resumed} resumed, "
        f"{summary.sessions_complete} complete"
        + (f"; {summary.memories} memories" if summary.memories else ""))


@command(epilog=_example("mnemo export acme > acme.jsonl", "mnemo export acme -o acme.jsonl"))
def export(tenant: Annotated[str, typer.Argument(help="tenant")],
           output: Annotated[Path | None, typer.Option("--output", "-o", help="file (default: stdout)")] = None
           ) -> None:
    """Export a tenant as JSON lines (sessions, messages with full tool outputs,
    explicit memories) that `mnemo import` reads back."""
    with client() as m:
        lines = m.export_tenant(tenant)
    text = "".join(json.dumps(x, ensure_ascii=False, default=str) + "\n" for x in lines)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        err.print(f"wrote {len(lines)} lines to {output}")


# --------------------------------------------------------------------------- jobs
@jobs_app.callback(invoke_without_command=True)
def _jobs_default(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        handled(jobs_list)()


@command(jobs_app, name="list", epilog=_example("mnemo jobs list --status failed", "mnemo jobs list --tenant acme"))
def jobs_list(status_: Annotated[str | None, typer.Option("--status", help="queued, done or failed")] = None,
              tenant: Annotated[str | None, typer.Option(help="one tenant's")] = None,
              limit: Annotated[int, typer.Option(help="at most this many")] = 50,
              as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The job queue across tenants, failed jobs first, with their last error."""
    with client() as m:
        rows = m.list_jobs(status=status_, tenant_id=tenant, limit=limit)
    if as_json:
        print_json(rows)
        return
    out.print(table("Jobs", ["id", "tenant", "kind", "status", "tries", "run after", "updated", "last error"],
                    [[r["job_id"], r["tenant_id"], r["kind"], r["status"], r["tries"], when(r["run_after"]),
                      when(r["updated_at"]), short(r["last_error"], 60) or None] for r in rows]))


@command(jobs_app, name="retry", epilog=_example("mnemo jobs retry", "mnemo jobs retry 17 18", "mnemo jobs retry --tenant acme"))
def jobs_retry(job_ids: Annotated[list[int] | None, typer.Argument(help="these failed jobs (default: all)")] = None,
               tenant: Annotated[str | None, typer.Option(help="one tenant's failed jobs")] = None) -> None:
    """Queue failed jobs again (tries reset), to run on the runner's next pass."""
    with client() as m:
        n = m.retry_jobs(tenant, job_ids or None)
    out.print(f"queued {n} failed job{'' if n == 1 else 's'} again")


@command(jobs_app, name="run", epilog=_example("mnemo jobs run", "mnemo jobs run --batches 10"))
def jobs_run(batches: Annotated[int, typer.Option(help="at most this many batches")] = 100,
             batch_size: Annotated[int, typer.Option(help="jobs per batch")] = 64,
             worker: Annotated[int, typer.Option(help="runner id: pg_cron's is 0, and runs of one id "
                                                 "never overlap")] = 1) -> None:
    """Run the due jobs now (pg_cron does it every minute), beside pg_cron's runner."""
    with client() as m:
        before = m.status()["jobs"]["due"]
        m.run_jobs(batch_size=batch_size, max_batches=batches, worker=worker)
        after = m.status()["jobs"]
    out.print(f"ran due jobs: {before} due before, {after['due']} due now, {after['failed']} failed in all")


# --------------------------------------------------------------------------- keys
@command(keys_app, name="create", epilog=_example("mnemo keys create acme --label ci --expires-in-days 90"))
def keys_create(tenant: Annotated[str, typer.Argument(help="tenant the key acts for")],
                label: Annotated[str | None, typer.Option(help="what the key is for")] = None,
                expires_in_days: Annotated[float | None, typer.Option(help="expires after this many days "
                                                                      "(default: never)")] = None,
                as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Create an API key for a tenant and print its secret, this once."""
    from datetime import UTC, datetime, timedelta

    expires = datetime.now(UTC) + timedelta(days=expires_in_days) if expires_in_days is not None else None
    with client() as m:
        key = m.create_api_key(tenant, label, expires)
    if as_json:
        print_json(key)
        return
    out.print(key["secret"])
    err.print(f"key {key['key_id']} for tenant {tenant}"
              + (f", expires {when(key['expires_at'])}" if key.get("expires_at") else "")
              + ": the secret above is shown only now (only its hash is stored).")


@command(keys_app, name="list", epilog=_example("mnemo keys list acme"))
def keys_list(tenant: Annotated[str, typer.Argument(help="tenant")],
              as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """A tenant's API keys and their state (no secrets)."""
    with client() as m:
        rows = m.list_api_keys(tenant)
    if as_json:
        print_json(rows)
        return
    out.print(table(f"API keys of {tenant}", ["key id", "label", "state", "created", "expires", "last used"],
                    [[r["key_id"], short(r["label"], 24) or None, r["state"], when(r["created_at"]),
                      when(r["expires_at"]), when(r["last_used_at"])] for r in rows]))


@command(keys_app, name="revoke", epilog=_example("mnemo keys revoke acme 3f2a9c0d1b7e"))
def keys_revoke(tenant: Annotated[str, typer.Argument(help="tenant")],
                key_id: Annotated[str, typer.Argument(help="the key's id (mnemo keys list)")]) -> None:
    """Revoke an API key: requests presenting it are refused from now on."""
    with client() as m:
        r = m.revoke_api_key(tenant, key_id)
    out.print(f"revoked key {r['key_id']} of tenant {tenant} at {when(r['revoked_at'])}")


# ---------------------------------------------------------------------------- mcp
@command(epilog=_example("mnemo mcp --tenant me --agent claude-code",
                         "mnemo mcp --transport http --port 8765",
                         "mnemo mcp --transport http --port 8765 --tenant me   # local, one user, no key"))
def mcp(transport: Annotated[str, typer.Option(help="stdio or http (streamable HTTP)")] = "stdio",
        host: Annotated[str, typer.Option(help="HTTP: address to listen on")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="HTTP: port")] = 8765,
        tenant: Annotated[str | None, typer.Option(envvar="MNEMO_TENANT", help="default tenant")] = None,
        session: Annotated[str | None, typer.Option(envvar="MNEMO_SESSION", help="default session")] = None,
        agent: Annotated[str, typer.Option(envvar="MNEMO_AGENT", help="default agent id")] = "mcp",
        channel: Annotated[str, typer.Option(envvar="MNEMO_CHANNEL", help="default channel")] = "private",
        trusted_gateway: Annotated[bool, typer.Option(
            help="HTTP: behind a gateway that authenticates callers; a request without a key acts "
                 "for its X-Mnemo-Tenant header")] = False) -> None:
    """Serve Mnemosyne's MCP tools over stdio or streamable HTTP: memory_record_event,
    memory_build_acb, memory_get_artifact, memory_query_decisions, memory_stats,
    memory_search, memory_query, memory_restore, memory_release, memory_objects. Over HTTP every
    request presents an API key (`mnemo keys create`), which is its tenant; with
    --tenant on a loopback address, requests without a key act for that tenant
    (one local user). Session, agent and channel come from here or from each call."""
    from .mcp_server import Identity, serve

    if transport not in ("stdio", "http"):
        fail(f"unknown transport {transport!r}", "--transport stdio or --transport http", "MN001")
    mode = edge_mode(host, tenant, trusted_gateway) if transport == "http" else "local"
    serve(_state.get("dsn") or default_dsn(),
          Identity(tenant, session and str(session_uuid(session)), agent, channel),
          transport, host, port, mode)


def edge_mode(host: str, tenant: str | None, trusted_gateway: bool) -> str:
    """The network surface's mode (mnemosyne.edge): gateway, local (a default tenant
    without a key, loopback only) or keys."""
    from .edge import is_loopback

    if trusted_gateway:
        return "gateway"
    if tenant is None:
        return "keys"
    if not is_loopback(host):
        fail(f"--tenant {tenant} without an API key would serve that tenant to anyone who reaches {host}",
             "Use API keys (mnemo keys create TENANT) and leave --tenant out, listen on 127.0.0.1, "
             "or run behind an authenticating gateway with --trusted-gateway.", "MN001")
    return "local"


# ---------------------------------------------------------------------------- serve
@command(epilog=_example(
    "mnemo serve --tenant me",
    "mnemo serve --host 0.0.0.0 --port 8080 --openai-api-key $OPENAI_API_KEY   # API keys per tenant",
    "MNEMO_ANTHROPIC_BASE_URL=https://api.anthropic.com mnemo serve --tenant me"))
def serve(host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
          port: Annotated[int, typer.Option(help="port")] = 8080,
          openai_base_url: Annotated[str | None, typer.Option(
              envvar="MNEMO_OPENAI_BASE_URL", help="OpenAI-compatible upstream, with /v1",
              show_default="https://api.openai.com/v1")] = None,
          anthropic_base_url: Annotated[str | None, typer.Option(
              envvar="MNEMO_ANTHROPIC_BASE_URL", help="Anthropic upstream",
              show_default="https://api.anthropic.com")] = None,
          openai_api_key: Annotated[str | None, typer.Option(
              envvar="MNEMO_OPENAI_API_KEY", help="upstream key for clients using a proxy key",
              show_default=False)] = None,
          anthropic_api_key: Annotated[str | None, typer.Option(
              envvar="MNEMO_ANTHROPIC_API_KEY", help="upstream key for clients using a proxy key",
              show_default=False)] = None,
          tenant: Annotated[str | None, typer.Option(
              envvar="MNEMO_TENANT", help="local single-user mode (loopback only): the tenant of "
              "requests without an API key")] = None,
          trusted_gateway: Annotated[bool, typer.Option(
              help="behind a gateway that authenticates callers: a request without an API key acts "
                   "for its X-Mnemo-Tenant header")] = False,
          max_body_mb: Annotated[float, typer.Option(help="larger request bodies get 413")] = 16.0,
          max_concurrent: Annotated[int, typer.Option(help="requests in flight per tenant; more get 429")] = 32,
          agent: Annotated[str, typer.Option(envvar="MNEMO_AGENT", help="default agent id")] = "proxy",
          channel: Annotated[str, typer.Option(envvar="MNEMO_CHANNEL", help="default channel")] = "private",
          context_window: Annotated[int | None, typer.Option(
              help="context window for every model (default: by model name)")] = None,
          memory_tokens: Annotated[int | None, typer.Option(
              envvar="MNEMO_MEMORY_TOKENS", help="at most this many tokens of memories per call "
              "(default: the tenant's memory_cap, 2,048 unless its config says otherwise)")] = None,
          db_pool: Annotated[int, typer.Option(help="database connections at most")] = 8) -> None:
    """The transparent proxy: OpenAI chat completions and Anthropic messages with
    Mnemosyne's memory, every other path passed through. Point OPENAI_BASE_URL at
    http://HOST:PORT/v1 or ANTHROPIC_BASE_URL at http://HOST:PORT, with an API key of
    Mnemosyne's (`mnemo keys create TENANT`) as the client's API key: the key is the
    tenant, and the proxy calls upstream with --openai-api-key / --anthropic-api-key.
    With --tenant on a loopback address, requests without a key act for that tenant."""
    import logging

    import uvicorn

    from .proxy import Config, create_app

    mode = edge_mode(host, tenant, trusted_gateway)
    config = Config.from_env(
        _state.get("dsn") or default_dsn(), openai_base_url=openai_base_url,
        anthropic_base_url=anthropic_base_url, openai_api_key=openai_api_key,
        anthropic_api_key=anthropic_api_key, mode=mode, default_tenant=tenant, default_agent=agent,
        default_channel=channel, context_window=context_window, memory_tokens=memory_tokens,
        db_pool_size=db_pool, max_body_bytes=int(max_body_mb * 1024 * 1024), max_concurrent=max_concurrent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    err.print(f"mnemo proxy on http://{host}:{port} (OpenAI: {config.openai_base_url}, "
              f"Anthropic: {config.anthropic_base_url})")
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
