"""`make up`'s last step: load a short sample conversation and show what Mnemosyne holds.

Idempotent: the sample lives in tenant 'demo' under a fixed session id and is
loaded only once, so running it again changes nothing.
"""

from __future__ import annotations

import os
import time
import uuid

from . import connect

SESSION = uuid.UUID("00000000-0000-4000-8000-00000000d3e0")
README = "# acme-billing\n\nInvoicing service for ACME: turns usage events into monthly invoices.\n" + "\n".join(
    f"- module {i}: handles step {i} of the invoicing pipeline" for i in range(4000)
)

CONVERSATION: list[tuple[str, dict]] = [
    ("message", {"role": "user", "content": "I'm Dana. Please help me onboard onto the acme-billing repo."}),
    ("message", {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_ls", "type": "function", "function": {"name": "fs.list_root", "arguments": "{}"}},
        {"id": "call_readme", "type": "function",
         "function": {"name": "fs.read_file", "arguments": '{"path": "README.md"}'}}]}),
    ("message", {"role": "tool", "tool_call_id": "call_ls", "content": "README.md\npackage.json\nsrc/\ntests/"}),
    ("message", {"role": "tool", "tool_call_id": "call_readme", "content": README}),
    ("message", {"role": "assistant", "content":
        "acme-billing is ACME's invoicing service: it turns usage events into monthly invoices."}),
    ("decision", {"decision": "Store invoices in PostgreSQL, not in S3 files",
                  "rationale": ["transactions across invoice lines"], "alternatives": ["S3 + JSON"]}),
    ("message", {"role": "user", "content": "Great. I prefer short answers with code examples."}),
]


def wait_for_jobs(c, timeout_s: float = 60.0) -> None:
    """Let the job runner (pg_cron, or this call) embed the sample."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        c.run_jobs()  # returns at once when pg_cron's runner is busy with them
        if not c._call("SELECT count(*) FROM mnemo.jobs WHERE tenant_id = 'demo' AND status = 'queued'", {}):
            return
        time.sleep(0.5)
    print("[mnemo demo] jobs still queued; is the job runner (pg_cron) running?")


def main() -> None:
    dsn = os.environ["DATABASE_URL"]
    with connect(dsn) as c:
        c.create_tenant("demo", "Sample tenant of make up")
        fresh = c._call(
            "SELECT NOT EXISTS (SELECT FROM mnemo.sessions WHERE tenant_id = 'demo' AND session_id = %(s)s)",
            {"s": SESSION})
        if fresh:
            c.start_session("demo", session_id=SESSION, agent_id="onboarding-agent",
                            model="gpt-4o", context_window=16000,
                            system_prompt="You are a senior engineer helping a colleague onboard.")
            for kind, body in CONVERSATION:
                if kind == "message":
                    c.record_message("demo", SESSION, body)
                else:
                    c.record_event("demo", SESSION, kind, body)
            print("[mnemo demo] loaded the sample conversation into tenant 'demo'")
        else:
            print("[mnemo demo] sample conversation already loaded (nothing changed)")
        wait_for_jobs(c)
        with c.conn.cursor() as cur:
            cur.execute(
                """SELECT turn_index, role, token_count, artifact_id, embedding IS NOT NULL,
                          left(regexp_replace(coalesce(content, tool_calls::text), '\\s+', ' ', 'g'), 70)
                   FROM mnemo.messages WHERE tenant_id = 'demo' AND session_id = %s
                   ORDER BY turn_index""", (SESSION,))
            rows = cur.fetchall()
            print(f"\nSession {SESSION} (tenant demo): {len(rows)} messages")
            print(f"{'turn':>4}  {'role':<9} {'tokens':>6}  {'artifact':>8}  emb  content")
            for turn, role, tokens, art, emb, text in rows:
                print(f"{turn:>4}  {role:<9} {tokens:>6}  {art or '':>8}  {'yes' if emb else 'no ':<3}  {text}")
            cur.execute("""SELECT kind, left(content_full, 70), embedding IS NOT NULL FROM mnemo.memories
                           WHERE tenant_id = 'demo' ORDER BY memory_id""")
            print("\nMemories:")
            for kind, text, emb in cur.fetchall():
                print(f"  [{kind}] {text!r} (embedded: {'yes' if emb else 'no'})")
            cur.execute("""SELECT status, count(*) FROM mnemo.jobs WHERE tenant_id = 'demo'
                           GROUP BY status ORDER BY status""")
            print("\nJobs: " + ", ".join(f"{n} {s}" for s, n in cur.fetchall()))
        # The read path: what the agent would send next, within a 1,500-token budget
        # (log: false, so that running make up again still changes nothing).
        question = "what is this project for?"
        bundle = c.compile_context_bundle("demo", SESSION, question, budget=1500, log=False)
        report = bundle["report"]
        print(f"\ncompile_context({question!r}, budget 1500): {len(bundle['messages'])} messages,"
              f" {report['tokens']['total']} tokens (task {report['task_type']})")
        items = {i["source"]: i for i in report["items"]}
        for m in bundle["messages"]:
            text = " ".join(str(m.get("content") or m.get("tool_calls")).split())[:90]
            print(f"  {m['role']:<9} {text}")
        print("  fidelities: " + ", ".join(f"{s} {i['fidelity']}" for s, i in items.items()))
        print("\nTry: make psql, then  SELECT mnemo.compile_context('demo', "
              f"'{SESSION}', 'what did we decide?');")


if __name__ == "__main__":
    main()
