"""Consistency checks over a set of tenants (issue 20): after any sequence of API calls,
successful or refused, the data must hold together. Used by tests/py/db/test_fuzz.py and
bench/trust/fuzz.py after fuzzing, and usable after any other run.

Each check is one query over the tenants whose id is LIKE the given pattern and
returns the rows that break it (at most a few per check). `violations(conn, pattern)`
runs them all: {check name: [rows]} for the checks that found something.
"""

from __future__ import annotations

import psycopg

# A message m superseded when a client rewrote its history (sync_messages: compacted,
# and no longer in its transcript) gave its call ids up for the rewritten turn.
SUPERSEDED_BY_REWIND = """(m.is_compacted AND EXISTS (SELECT FROM mnemo.transcripts AS t
                WHERE t.tenant_id = m.tenant_id AND t.session_id = m.session_id
                    AND m.message_id <> ALL (t.message_ids)))"""

# A compaction's summary message (the compaction sweep, lifecycle.sweeps: turn -1, a
# system message in place of the span it summarizes; its summary memory is what is
# embedded and recalled). pg_cron's sweep may compact a fuzzed session at any time.
COMPACTION_SUMMARY = "(m.turn_index = -1 AND m.role = 'system' AND m.metadata ? 'compaction')"

def dangling(parent: str, key: str, refs: list[str]) -> str:
    """The rows of other tables that name a row of mnemo.<parent> (by tenant_id and
    key) that does not exist. A ref is "table" (its column <key>) or "table.column";
    a trailing "?" marks a nullable reference, whose NULL names nothing."""
    parts = []
    for ref in refs:
        nullable = ref.endswith("?")
        table, _, column = ref.rstrip("?").partition(".")
        label = table + ("." + column.split("_")[0] if column else "")  # memory_links.src
        parts.append(f"SELECT '{label}' AS tbl, tenant_id, {column or key} AS {key} FROM mnemo.{table}"
                     + (f" WHERE {column or key} IS NOT NULL" if nullable else ""))
    union = "\n            UNION ALL ".join(parts)
    return f"""
        SELECT x.tbl, x.tenant_id, x.{key} FROM (
            {union}
        ) AS x
        WHERE x.tenant_id LIKE $1 AND NOT EXISTS (SELECT FROM mnemo.{parent} AS p
            WHERE p.tenant_id = x.tenant_id AND p.{key} = x.{key})
    """


# name -> query ($1: tenant_id LIKE pattern). Every query returns offending rows.
CHECKS = {
    # turns: a session's messages are numbered 0..n-1 without gap or repeat, and n is
    # the session's turn_count (compaction summaries aside)
    "gapless_turns": f"""
        SELECT s.tenant_id, s.session_id, s.turn_count, count(m.message_id) AS messages,
            count(DISTINCT m.turn_index) AS distinct_turns, min(m.turn_index) AS first, max(m.turn_index) AS last
        FROM mnemo.sessions AS s
        LEFT JOIN mnemo.messages AS m ON m.tenant_id = s.tenant_id AND m.session_id = s.session_id
            AND NOT {COMPACTION_SUMMARY}
        WHERE s.tenant_id LIKE $1
        GROUP BY s.tenant_id, s.session_id, s.turn_count
        HAVING count(m.message_id) <> s.turn_count OR count(DISTINCT m.turn_index) <> count(m.message_id)
            OR (count(m.message_id) > 0 AND (min(m.turn_index) <> 0 OR max(m.turn_index) <> count(m.message_id) - 1))
    """,
    "messages_without_session": """
        SELECT m.tenant_id, m.message_id FROM mnemo.messages AS m WHERE m.tenant_id LIKE $1
            AND NOT EXISTS (SELECT FROM mnemo.sessions AS s WHERE s.tenant_id = m.tenant_id
                AND s.session_id = m.session_id)
    """,
    "sessions_without_prompt": """
        SELECT s.tenant_id, s.session_id FROM mnemo.sessions AS s WHERE s.tenant_id LIKE $1
            AND s.system_prompt_hash IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.system_prompts AS p
                WHERE p.tenant_id = s.tenant_id AND p.prompt_hash = s.system_prompt_hash)
    """,
    "sessions_without_parent": """
        SELECT s.tenant_id, s.session_id FROM mnemo.sessions AS s WHERE s.tenant_id LIKE $1
            AND s.parent_session_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.sessions AS p
                WHERE p.tenant_id = s.tenant_id AND p.session_id = s.parent_session_id)
    """,
    # tool calls: each row belongs to the assistant message that issued it (and is in
    # its tool_calls), its result is a tool message answering it; each issued call
    # has its row, each tool message its call
    "tool_calls_without_message": """
        SELECT tc.tenant_id, tc.session_id, tc.tool_call_id FROM mnemo.tool_calls AS tc WHERE tc.tenant_id LIKE $1
            AND NOT EXISTS (SELECT FROM mnemo.messages AS m WHERE m.tenant_id = tc.tenant_id
                AND m.message_id = tc.message_id AND m.session_id = tc.session_id AND m.role = 'assistant'
                AND m.turn_index = tc.turn_index
                AND m.tool_calls @> jsonb_build_array(jsonb_build_object('id', tc.tool_call_id)))
    """,
    "tool_calls_with_missing_result": """
        SELECT tc.tenant_id, tc.session_id, tc.tool_call_id FROM mnemo.tool_calls AS tc WHERE tc.tenant_id LIKE $1
            AND tc.result_message_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.messages AS m
                WHERE m.tenant_id = tc.tenant_id AND m.message_id = tc.result_message_id
                    AND m.session_id = tc.session_id AND m.role = 'tool' AND m.tool_call_id = tc.tool_call_id)
    """,
    "issued_calls_without_row": f"""
        SELECT m.tenant_id, m.message_id, c ->> 'id' AS call FROM mnemo.messages AS m
        CROSS JOIN LATERAL jsonb_array_elements(m.tool_calls) AS c
        WHERE m.tenant_id LIKE $1 AND m.tool_calls IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.tool_calls AS tc
            WHERE tc.tenant_id = m.tenant_id AND tc.session_id = m.session_id
                AND tc.tool_call_id = c ->> 'id' AND tc.message_id = m.message_id)
            AND NOT {SUPERSEDED_BY_REWIND}
    """,
    "tool_messages_without_call": f"""
        SELECT m.tenant_id, m.message_id, m.tool_call_id FROM mnemo.messages AS m
        WHERE m.tenant_id LIKE $1 AND m.role = 'tool' AND NOT EXISTS (SELECT FROM mnemo.tool_calls AS tc
            WHERE tc.tenant_id = m.tenant_id AND tc.session_id = m.session_id
                AND tc.tool_call_id = m.tool_call_id AND tc.result_message_id = m.message_id)
            AND NOT {SUPERSEDED_BY_REWIND}
    """,
    # artifacts: a message's artifact exists and points back; an artifact's message
    # and session exist
    "messages_with_missing_artifact": """
        SELECT m.tenant_id, m.message_id, m.artifact_id FROM mnemo.messages AS m
        WHERE m.tenant_id LIKE $1 AND m.artifact_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.artifacts AS a
            WHERE a.tenant_id = m.tenant_id AND a.artifact_id = m.artifact_id AND a.message_id = m.message_id)
    """,
    "artifacts_without_owner": """
        SELECT a.tenant_id, a.artifact_id FROM mnemo.artifacts AS a WHERE a.tenant_id LIKE $1
            AND ((a.message_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.messages AS m
                    WHERE m.tenant_id = a.tenant_id AND m.message_id = a.message_id AND m.artifact_id = a.artifact_id))
                OR (a.session_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
                    WHERE s.tenant_id = a.tenant_id AND s.session_id = a.session_id))
                OR a.byte_size <> octet_length(a.bytes) OR a.sha256 <> sha256(a.bytes))
    """,
    # memories: their session, their sources, what superseded them exist
    "memories_with_missing_refs": """
        SELECT m.tenant_id, m.memory_id FROM mnemo.memories AS m WHERE m.tenant_id LIKE $1
            AND ((m.session_id IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
                    WHERE s.tenant_id = m.tenant_id AND s.session_id = m.session_id))
                OR (m.superseded_by IS NOT NULL AND NOT EXISTS (SELECT FROM mnemo.memories AS n
                    WHERE n.tenant_id = m.tenant_id AND n.memory_id = m.superseded_by))
                -- every source id among the tenant's messages (not an EXISTS over unnest:
                -- Citus refuses a correlated subquery whose FROM has a set-returning function)
                OR NOT m.source_message_ids <@ ARRAY(SELECT g.message_id FROM mnemo.messages AS g
                    WHERE g.tenant_id = m.tenant_id AND g.message_id = ANY (m.source_message_ids)))
    """,
    # a decision has its decision row, a task or open loop its task row
    "memories_without_payload": """
        SELECT m.tenant_id, m.memory_id, m.kind FROM mnemo.memories AS m WHERE m.tenant_id LIKE $1
            AND ((m.kind = 'decision' AND NOT EXISTS (SELECT FROM mnemo.memory_decisions AS d
                    WHERE d.tenant_id = m.tenant_id AND d.memory_id = m.memory_id))
                OR (m.kind IN ('task', 'open_loop') AND NOT EXISTS (SELECT FROM mnemo.memory_tasks AS t
                    WHERE t.tenant_id = m.tenant_id AND t.memory_id = m.memory_id)))
    """,
    "memory_rows_without_memory": dangling("memories", "memory_id", [
        "memory_facts", "memory_decisions", "memory_tasks", "memory_versions", "memory_access",
        "entity_mentions", "entity_edges?", "memory_links.src_memory_id", "memory_links.dst_memory_id",
        "working_memory?", "admission_log?", "fault_log?", "fidelity_log?", "semantic_objects?"]),
    "entity_rows_without_entity": dangling("entities", "entity_id", [
        "entity_mentions", "entity_aliases", "entity_edges.src_entity_id", "entity_edges.dst_entity_id",
        "memory_facts.subject_entity_id?", "memory_facts.object_entity_id?"]),
    # jobs: what a job is about exists; a message with text has its embedding or a
    # queued / finished embed job
    "jobs_without_target": """
        SELECT j.tenant_id, j.job_id, j.kind, j.dedup_key FROM mnemo.jobs AS j WHERE j.tenant_id LIKE $1
            AND j.status = 'queued' AND (
                (j.dedup_key LIKE 'message:%' AND NOT EXISTS (SELECT FROM mnemo.messages AS m
                    WHERE m.tenant_id = j.tenant_id AND m.message_id = substr(j.dedup_key, 9)::bigint))
                OR (j.dedup_key LIKE 'memory:%' AND NOT EXISTS (SELECT FROM mnemo.memories AS m
                    WHERE m.tenant_id = j.tenant_id AND m.memory_id = substr(j.dedup_key, 8)::bigint))
                OR (j.dedup_key LIKE 'session:%' AND NOT EXISTS (SELECT FROM mnemo.sessions AS s
                    WHERE s.tenant_id = j.tenant_id AND s.session_id::text = substr(j.dedup_key, 9))))
    """,
    "messages_never_embedded": f"""
        SELECT m.tenant_id, m.message_id FROM mnemo.messages AS m WHERE m.tenant_id LIKE $1
            AND coalesce(m.content, '') <> '' AND m.embedding IS NULL AND NOT {COMPACTION_SUMMARY} AND NOT EXISTS (SELECT FROM mnemo.jobs AS j
                WHERE j.tenant_id = m.tenant_id AND j.kind = 'embed' AND j.dedup_key = 'message:' || m.message_id)
    """,
    "context_log_without_session": """
        SELECT c.tenant_id, c.context_id FROM mnemo.context_log AS c WHERE c.tenant_id LIKE $1
            AND NOT EXISTS (SELECT FROM mnemo.sessions AS s WHERE s.tenant_id = c.tenant_id
                AND s.session_id = c.session_id)
    """,
    # every tenant-owned row belongs to a tenant that exists
    "rows_without_tenant": """
        SELECT x.tbl, x.tenant_id FROM (
            SELECT DISTINCT 'sessions' AS tbl, tenant_id FROM mnemo.sessions
            UNION ALL SELECT DISTINCT 'messages', tenant_id FROM mnemo.messages
            UNION ALL SELECT DISTINCT 'memories', tenant_id FROM mnemo.memories
            UNION ALL SELECT DISTINCT 'artifacts', tenant_id FROM mnemo.artifacts
        ) AS x
        WHERE x.tenant_id LIKE $1 AND NOT EXISTS (SELECT FROM mnemo.tenants AS t WHERE t.tenant_id = x.tenant_id)
    """,
}


def violations(conn: psycopg.Connection, pattern: str, limit: int = 5) -> dict[str, list[tuple]]:
    """{check: up to `limit` offending rows} for every check that found something in
    the tenants whose id is LIKE `pattern`."""
    found = {}
    for name, query in CHECKS.items():
        # ($1 becomes psycopg's placeholder; the queries' own % signs are literal)
        query = query.replace("%", "%%").replace("$1", "%(pattern)s")
        rows = conn.execute(f"SELECT * FROM ({query}) AS v LIMIT {int(limit)}",
                            {"pattern": pattern}).fetchall()
        if rows:
            found[name] = rows
    return found
