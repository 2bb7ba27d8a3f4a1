"""The SQL of paging's database side (store.Pager), by name: segmentation, residency
changes, faults, the paging tools and the metrics. (The compile's reads of residency
are residency.STATEMENTS.)"""

OBJECT_COLUMNS = """o.object_id, o.kind, o.message_ids, o.first_turn, o.last_turn, o.source_key,
    lower(o.source_lines) AS line_first, upper(o.source_lines) - 1 AS line_last,
    o.source_lines IS NOT NULL AND upper_inf(o.source_lines) AS line_open,
    o.writes_source, o.label, o.token_count, o.is_open, o.memory_id, o.result_class,
    r.fidelity, r.pinned_until_turn, r.anchored"""
FROM_OBJECTS = """FROM mnemo.semantic_objects AS o
JOIN mnemo.object_residency AS r
    ON r.tenant_id = o.tenant_id AND r.session_id = o.session_id AND r.object_id = o.object_id"""

STATEMENTS = {
    "settings": ("SELECT mnemo_internal.setting('paging')::text AS v", []),
    "latest": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
               "AND o.memory_id IS NULL ORDER BY o.first_turn DESC, o.object_id DESC LIMIT 1"),
               ["text", "uuid"]),
    "by_id": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
              "AND o.object_id = $3"), ["text", "uuid", "bigint"]),
    "by_message": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                   "AND o.message_ids @> ARRAY[$3]::bigint[]"), ["text", "uuid", "bigint"]),
    "by_memory": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                  "AND o.memory_id = $3"), ["text", "uuid", "bigint"]),
    "by_call": (f"""SELECT {OBJECT_COLUMNS}, tc.name AS call_name {FROM_OBJECTS}
JOIN mnemo.tool_calls AS tc ON tc.tenant_id = o.tenant_id AND tc.session_id = o.session_id
    AND o.message_ids @> ARRAY[tc.message_id]
WHERE o.tenant_id = $1 AND o.session_id = $2 AND tc.tool_call_id = $3""", ["text", "uuid", "text"]),
    "by_source": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                  "AND o.source_key = $3 AND o.object_id <> $4 ORDER BY o.first_turn DESC, o.object_id DESC"),
                  ["text", "uuid", "text", "bigint"]),
    "by_output": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                  "AND o.output_hash = $3 AND o.object_id <> $4 ORDER BY o.first_turn DESC, o.object_id DESC LIMIT 1"),
                  ["text", "uuid", "bytea", "bigint"]),
    "latest_phase": (("SELECT o.object_id FROM mnemo.semantic_objects AS o WHERE o.tenant_id = $1 "
                     "AND o.session_id = $2 AND o.kind = 'conversation_phase' "
                     "ORDER BY o.first_turn DESC LIMIT 1"), ["text", "uuid"]),
    # the newest read of each of the 50 files read last
    "recent_sources": ("""SELECT r.object_id, r.source_key FROM (
    SELECT DISTINCT ON (o.source_key) o.object_id, o.source_key, o.first_turn FROM mnemo.semantic_objects AS o
    WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.source_key IS NOT NULL AND o.object_id <> $3
        AND NOT o.writes_source AND o.kind = 'file_context'
    ORDER BY o.source_key, o.first_turn DESC) AS r
ORDER BY r.first_turn DESC LIMIT 50""", ["text", "uuid", "bigint"]),
    "related": (f"""SELECT {OBJECT_COLUMNS} {FROM_OBJECTS}
JOIN mnemo.object_links AS l ON l.tenant_id = o.tenant_id AND l.dst_object_id = o.object_id
WHERE o.tenant_id = $1 AND o.session_id = $2 AND l.src_object_id = $3
    AND l.relation IN ('caused_by', 'depends_on', 'references')""", ["text", "uuid", "bigint"]),
    "open_file": (("SELECT o.source_key FROM mnemo.semantic_objects AS o WHERE o.tenant_id = $1 "
                  "AND o.session_id = $2 AND o.source_key IS NOT NULL AND o.kind <> 'external_reference' "
                  "ORDER BY o.first_turn DESC LIMIT 1"), ["text", "uuid"]),
    "objects": ((f"SELECT * FROM (SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 "
                "AND o.session_id = $2 ORDER BY o.first_turn DESC, o.object_id DESC LIMIT $3) AS o "
                "ORDER BY o.first_turn, o.object_id"), ["text", "uuid", "integer"]),
    "fidelities": ((f"SELECT r.fidelity, count(*) AS objects, coalesce(sum(o.token_count), 0) AS tokens "
                   f"{FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 GROUP BY r.fidelity"),
                   ["text", "uuid"]),
    "session_objects": ((f"SELECT {OBJECT_COLUMNS}, o.summary {FROM_OBJECTS} WHERE o.tenant_id = $1 "
                        "AND o.session_id = $2 AND o.memory_id IS NULL AND o.last_turn >= $3 "
                        "ORDER BY o.first_turn"), ["text", "uuid", "integer"]),
    "insert": ("""WITH o AS (
    INSERT INTO mnemo.semantic_objects (tenant_id, session_id, kind, message_ids, memory_id, first_turn,
        last_turn, source_key, source_lines, writes_source, label, token_count, is_open, result_class)
    VALUES ($1, $2, $3, $4, $5, $6, $6, $7,
        CASE WHEN $8::integer IS NULL THEN NULL ELSE int4range($8, $9, '[]') END, $10, $11, $12, $13, $15)
    RETURNING object_id)
INSERT INTO mnemo.object_residency (tenant_id, session_id, object_id, fidelity, pinned_until_turn, changed_turn)
SELECT $1, $2, o.object_id, 'full', $14, $6 FROM o RETURNING object_id""",
               ["text", "uuid", "text", "bigint[]", "bigint", "integer", "text", "integer", "integer",
                "boolean", "text", "integer", "boolean", "integer", "text"]),
    "append": ("""UPDATE mnemo.semantic_objects AS o SET message_ids = o.message_ids || $4, last_turn = $5,
    token_count = o.token_count + $6, kind = coalesce($7, o.kind), label = coalesce($8, o.label),
    output_hash = coalesce($9, o.output_hash)
WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.object_id = $3""",
               ["text", "uuid", "bigint", "bigint[]", "integer", "integer", "text", "text", "bytea"]),
    "close": (("UPDATE mnemo.semantic_objects AS o SET is_open = false WHERE o.tenant_id = $1 "
              "AND o.session_id = $2 AND o.object_id = $3"), ["text", "uuid", "bigint"]),
    "merge": ("""WITH gone AS (
    DELETE FROM mnemo.semantic_objects AS o WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.object_id = $4
    RETURNING o.message_ids, o.last_turn, o.token_count)
UPDATE mnemo.semantic_objects AS o SET message_ids = o.message_ids || gone.message_ids,
    last_turn = gone.last_turn, token_count = o.token_count + gone.token_count
FROM gone WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.object_id = $3""",
              ["text", "uuid", "bigint", "bigint"]),
    # The residency rows, their objects' sizes, then each change's fidelity_log row, one
    # INSERT ... VALUES a row: one INSERT ... SELECT from unnest joined to the UPDATE's
    # RETURNING (as before) Citus runs through the coordinator when the call runs there
    # (in a transaction block, or not delegated), sending its rows as COPY, which
    # row-level security refuses (0A000); so would it any INSERT ... SELECT into
    # fidelity_log, whose identity column keeps Citus from pushing one down.
    "change": ("""UPDATE mnemo.object_residency AS r SET fidelity = c.to_fidelity, changed_turn = $5, updated_at = now()
FROM unnest($3::bigint[], $4::text[]) AS c (object_id, to_fidelity)
WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.object_id = c.object_id
RETURNING r.object_id""", ["text", "uuid", "bigint[]", "text[]", "integer"]),
    "change_tokens": (("SELECT o.object_id, o.token_count FROM mnemo.semantic_objects AS o "
                       "WHERE o.tenant_id = $1 AND o.object_id = ANY ($2)"), ["text", "bigint[]"]),
    "change_log": ("""INSERT INTO mnemo.fidelity_log (tenant_id, session_id, object_id, from_fidelity, to_fidelity,
    trigger, pressure_zone, turn_index, token_count)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
                   ["text", "uuid", "bigint", "text", "text", "text", "text", "integer", "integer"]),
    "pin": (("UPDATE mnemo.object_residency AS r SET pinned_until_turn = greatest(r.pinned_until_turn, $4) "
            "WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.object_id = $3"),
            ["text", "uuid", "bigint", "integer"]),
    "anchor": (("UPDATE mnemo.object_residency AS r SET anchored = true "
               "WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.object_id = $3"), ["text", "uuid", "bigint"]),
    "annotate": (("UPDATE mnemo.semantic_objects AS o SET summary = coalesce($4, o.summary), "
                 "losses = coalesce($5, o.losses) WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.object_id = $3"),
                 ["text", "uuid", "bigint", "text", "text"]),
    "link": (("INSERT INTO mnemo.object_links (tenant_id, src_object_id, relation, dst_object_id) "
             "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"), ["text", "bigint", "text", "bigint"]),
    "fault": ("""INSERT INTO mnemo.fault_log (tenant_id, session_id, object_id, memory_id, fault_type, fidelity,
    turn_index, question, answer, answer_tokens, avoided_tokens, latency_ms, sources)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)""",
              ["text", "uuid", "bigint", "bigint", "text", "text", "integer", "text", "text", "integer",
               "integer", "real", "text[]"]),
    # The session's tool objects with more than $3 newer ones (ladder.aging decides):
    # n, how many are newer (1: the newest); written_after, whether a write came after
    # it (to its source, for a read; to anything, for a command's output).
    # (one scan of the session's objects: x carries every column the rows need)
    "aging": ("""WITH x AS (
    SELECT o.object_id, o.first_turn, o.source_key, o.kind, o.writes_source, o.result_class, o.message_ids,
        o.last_turn, row_number() OVER (ORDER BY o.first_turn DESC, o.object_id DESC) AS n
    FROM mnemo.semantic_objects AS o
    WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.kind <> 'conversation_phase' AND o.memory_id IS NULL),
w AS (
    SELECT o.source_key, max(o.first_turn) AS last_write FROM mnemo.semantic_objects AS o
    WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.writes_source GROUP BY o.source_key)
SELECT x.object_id, x.n, x.kind, r.fidelity, x.writes_source, x.source_key IS NOT NULL AS has_source, x.source_key,
    x.result_class, x.message_ids, x.last_turn,
    CASE WHEN x.source_key IS NULL THEN (SELECT max(w.last_write) FROM w) > x.first_turn
        ELSE EXISTS (SELECT FROM w WHERE w.source_key = x.source_key AND w.last_write > x.first_turn)
    END AS written_after
FROM x
JOIN mnemo.object_residency AS r ON r.tenant_id = $1 AND r.session_id = $2 AND r.object_id = x.object_id
WHERE x.n > $3 AND r.fidelity <> 'evicted' AND r.pinned_until_turn <= $4 AND NOT r.anchored
ORDER BY x.object_id""",
              ["text", "uuid", "integer", "integer"]),
    # A user message just embedded (its embed job), with the cosine to the user message
    # before it (the topic and goal shift): the message's own vector as the text alone
    # (its stored one, unless a name was prefixed to it), the previous one's stored
    # vector, else its text's. The phase it is in (see Pager.on_embedded).
    "embedded_user": ("""SELECT m.message_id, m.turn_index AS turn, m.content,
    1 - (CASE WHEN m.name IS NULL THEN m.embedding ELSE mnemo.embed(m.content) END
        <=> coalesce(p.embedding, mnemo.embed(p.content))) AS cosine
FROM mnemo.messages AS m
CROSS JOIN LATERAL (
    SELECT p.embedding, p.content FROM mnemo.messages AS p
    WHERE p.tenant_id = $1 AND p.session_id = $2 AND p.role = 'user' AND p.turn_index < m.turn_index
        AND coalesce(p.content, '') <> ''
    ORDER BY p.turn_index DESC LIMIT 1) AS p
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.message_id = ANY ($3) AND m.role = 'user'
    AND m.embedding IS NOT NULL
ORDER BY m.turn_index""", ["text", "uuid", "bigint[]"]),
    # A phase's messages before and from a turn: where a topic shift splits it.
    "split_point": ("""SELECT coalesce(array_agg(m.message_id ORDER BY m.turn_index) FILTER (WHERE m.turn_index < $4),
        '{}') AS before_ids,
    coalesce(sum(m.token_count) FILTER (WHERE m.turn_index < $4), 0)::integer AS before_tokens,
    max(m.turn_index) FILTER (WHERE m.turn_index < $4) AS before_last,
    coalesce(array_agg(m.message_id ORDER BY m.turn_index) FILTER (WHERE m.turn_index >= $4), '{}') AS after_ids,
    coalesce(sum(m.token_count) FILTER (WHERE m.turn_index >= $4), 0)::integer AS after_tokens
FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.message_id = ANY ($3)""",
                    ["text", "uuid", "bigint[]", "integer"]),
    "split": ("""UPDATE mnemo.semantic_objects AS o SET message_ids = $4, last_turn = $5, token_count = $6,
    is_open = false
WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.object_id = $3""",
              ["text", "uuid", "bigint", "bigint[]", "integer", "integer"]),
    "last_turn": (("UPDATE mnemo.semantic_objects AS o SET last_turn = $4 WHERE o.tenant_id = $1 "
                   "AND o.session_id = $2 AND o.object_id = $3"), ["text", "uuid", "bigint", "integer"]),
    # the objects started from a turn on that a phase was the parent of: the new phase's
    "reparent": ("""UPDATE mnemo.object_links AS l SET src_object_id = $4
WHERE l.tenant_id = $1 AND l.src_object_id = $3 AND l.relation = 'parent_of' AND l.dst_object_id IN (
    SELECT o.object_id FROM mnemo.semantic_objects AS o
    WHERE o.tenant_id = $1 AND o.session_id = $2 AND o.first_turn >= $5)""",
                 ["text", "uuid", "bigint", "bigint", "integer"]),
    # Each object's best cosine to a user message ($3, just embedded) as its text alone:
    # its stored vector, unless a name was prefixed to it (as embedded_user). Not its
    # text encoded again: a job handed the vector by a compile (the proxy's) encoded
    # nothing, so this backend does not have it at hand.
    "goal_matches": ("""SELECT o.object_id, max(1 - (m.embedding <=> g.vector)) AS cosine
FROM (SELECT CASE WHEN u.name IS NULL THEN u.embedding ELSE mnemo.embed(u.content) END AS vector
    FROM mnemo.messages AS u WHERE u.tenant_id = $1 AND u.message_id = $3) AS g
CROSS JOIN mnemo.semantic_objects AS o
JOIN mnemo.messages AS m ON m.tenant_id = o.tenant_id AND m.message_id = ANY (o.message_ids)
WHERE o.tenant_id = $1 AND o.session_id = $2 AND m.embedding IS NOT NULL
GROUP BY o.object_id""", ["text", "uuid", "bigint"]),
    # updated_at = excluded.updated_at (its default, now()): Citus takes only IMMUTABLE functions
    # in ON CONFLICT DO UPDATE SET
    "state": ("""INSERT INTO mnemo.paging_state AS s (tenant_id, session_id, zone, goal_turn)
VALUES ($1, $2, coalesce($3, 'normal'), coalesce($4, -1))
ON CONFLICT (tenant_id, session_id) DO UPDATE SET zone = coalesce($3, s.zone),
    goal_turn = coalesce($4, s.goal_turn), updated_at = excluded.updated_at""",
              ["text", "uuid", "text", "integer"]),
    "zone": ("SELECT s.zone FROM mnemo.paging_state AS s WHERE s.tenant_id = $1 AND s.session_id = $2",
             ["text", "uuid"]),
    "session": ("SELECT s.turn_count FROM mnemo.sessions AS s WHERE s.tenant_id = $1 AND s.session_id = $2",
                ["text", "uuid"]),
    "contents": ("""SELECT m.message_id, m.role, m.name, m.tool_calls::text AS tool_calls,
    coalesce(convert_from(a.bytes, 'UTF8'), m.content) AS content
FROM mnemo.messages AS m
LEFT JOIN mnemo.artifacts AS a ON a.tenant_id = m.tenant_id AND a.artifact_id = m.artifact_id
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.message_id = ANY ($3) AND m.sensitivity <> 'secret'
ORDER BY m.turn_index""", ["text", "uuid", "bigint[]"]),
    # whether the session read lines of a file again that it had read, with no write to
    # the file between the two reads (ladder's cold_reads)
    "rereads": ("""SELECT EXISTS (
    SELECT FROM mnemo.semantic_objects AS a
    JOIN mnemo.semantic_objects AS b ON b.tenant_id = a.tenant_id AND b.session_id = a.session_id
        AND b.source_key = a.source_key AND b.first_turn > a.first_turn AND NOT b.writes_source
    WHERE a.tenant_id = $1 AND a.session_id = $2 AND a.kind <> 'external_reference' AND NOT a.writes_source
        AND (a.source_lines IS NULL OR b.source_lines IS NULL OR a.source_lines && b.source_lines)
        AND NOT EXISTS (
            SELECT FROM mnemo.semantic_objects AS w
            WHERE w.tenant_id = a.tenant_id AND w.session_id = a.session_id AND w.source_key = a.source_key
                AND w.writes_source AND w.first_turn >= a.first_turn AND w.first_turn <= b.first_turn)
) AS rereads""", ["text", "uuid"]),
    # what the assistant wrote after a turn (its text and its calls): the names it uses
    "said_since": ("""SELECT m.turn_index, coalesce(m.content, '') || ' ' || coalesce(m.tool_calls::text, '') AS text,
    m.content
FROM mnemo.messages AS m
WHERE m.tenant_id = $1 AND m.session_id = $2 AND m.role = 'assistant' AND m.turn_index > $3
    AND m.sensitivity <> 'secret'
ORDER BY m.turn_index""", ["text", "uuid", "integer"]),
    "memory": (("SELECT m.memory_id, m.kind, m.content_full, m.tokens_full FROM mnemo.memories AS m "
               "WHERE m.tenant_id = $1 AND m.memory_id = $2 AND m.sensitivity <> 'secret'"), ["text", "bigint"]),
    "previous": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                  "AND o.memory_id IS NULL AND (o.first_turn, o.object_id) < ($3, $4) "
                  "ORDER BY o.first_turn DESC, o.object_id DESC LIMIT 1"), ["text", "uuid", "integer", "bigint"]),
    "all_objects": ((f"SELECT {OBJECT_COLUMNS} {FROM_OBJECTS} WHERE o.tenant_id = $1 AND o.session_id = $2 "
                    "AND o.memory_id IS NULL ORDER BY o.first_turn"), ["text", "uuid"]),
    # memory_query beyond the session: the tenant's memories and other sessions' history
    # that best match the question (mnemo.search: hybrid, never a secret), each with
    # what decides whether this reader may see it (Pager.elsewhere).
    "reader": (("SELECT s.channel, s.agent_id, coalesce(t.config ->> 'recall_scope', 'tenant') AS scope "
                "FROM mnemo.sessions AS s JOIN mnemo.tenants AS t ON t.tenant_id = s.tenant_id "
                "WHERE s.tenant_id = $1 AND s.session_id = $2"), ["text", "uuid"]),
    "elsewhere": ("""SELECT f.source AS ref, f.content AS text, coalesce(m.sensitivity, x.sensitivity) AS sensitivity,
    m.kind AS memory_kind, ss.session_id, ss.channel, ss.agent_id
FROM mnemo.search($1, $3, jsonb_build_object('limit', $4)) AS f
LEFT JOIN mnemo.memories AS m ON f.source LIKE 'mem:%' AND m.tenant_id = $1
    AND m.memory_id = substr(f.source, 5)::bigint
LEFT JOIN mnemo.messages AS x ON f.source LIKE 'msg:%' AND x.tenant_id = $1
    AND x.message_id = substr(f.source, 5)::bigint AND x.session_id = f.session_id
LEFT JOIN mnemo.sessions AS ss ON f.source LIKE 'msg:%' AND ss.tenant_id = $1 AND ss.session_id = f.session_id
WHERE f.session_id IS DISTINCT FROM $2 OR f.source LIKE 'mem:%'""", ["text", "uuid", "text", "integer"]),
    # a turn of another session by its id (memory_restore of a recalled turn, or of one
    # a memory stands in for), with what Store.may_see needs
    "recalled": ("""SELECT x.role, x.name, coalesce(convert_from(a.bytes, 'UTF8'), x.content) AS text,
    x.sensitivity, ss.channel, ss.agent_id
FROM mnemo.messages AS x
JOIN mnemo.sessions AS ss ON ss.tenant_id = x.tenant_id AND ss.session_id = x.session_id
LEFT JOIN mnemo.artifacts AS a ON a.tenant_id = x.tenant_id AND a.artifact_id = x.artifact_id
WHERE x.tenant_id = $1 AND x.message_id = $3 AND x.session_id <> $2""", ["text", "uuid", "bigint"]),
    "helper": ("SELECT mnemo_internal.helper_answer($1::jsonb)::text AS reply", ["text"]),
    "raise": ("SELECT mnemo_internal.raise_error($1, $2, $3)", ["text", "text", "text"]),
    # Per compile of the span: what it sent (memory, summary and history tokens) and
    # the session's whole active history then (what sending everything would cost).
    # A degradation is a transition down the ladder, an eviction one to stub or evicted
    # (what the model could fault on); a micro-fault failed when the model restored
    # the same object afterwards.
    "metrics": ("""WITH span AS (
    SELECT $1::text AS tenant_id, $2::uuid AS session_id,
        coalesce($3::timestamptz, '-infinity') AS since, coalesce($4::timestamptz, 'infinity') AS until),
compiles AS (
    SELECT c.tokens_used AS sent, (
        SELECT sum(m.token_count) FROM mnemo.messages AS m
        WHERE m.tenant_id = c.tenant_id AND m.session_id = c.session_id AND m.created_at <= c.created_at
            AND NOT m.is_pruned) AS full_tokens
    FROM mnemo.context_log AS c, span
    WHERE c.tenant_id = span.tenant_id AND (span.session_id IS NULL OR c.session_id = span.session_id)
        AND c.created_at >= span.since AND c.created_at < span.until),
moves AS (
    SELECT
        count(*) FILTER (WHERE array_position($5, f.to_fidelity) > array_position($5, f.from_fidelity)) AS degradations,
        count(*) FILTER (WHERE f.to_fidelity IN ('stub', 'evicted') AND f.from_fidelity NOT IN ('stub', 'evicted'))
            AS evictions
    FROM mnemo.fidelity_log AS f, span
    WHERE f.tenant_id = span.tenant_id AND (span.session_id IS NULL OR f.session_id = span.session_id)
        AND f.object_id IS NOT NULL AND f.created_at >= span.since AND f.created_at < span.until),
faults AS (
    SELECT
        count(*) FILTER (WHERE x.fault_type = 'reread') AS reread_faults,
        count(*) FILTER (WHERE x.fault_type = 'restore') AS restore_faults,
        count(*) FILTER (WHERE x.fault_type = 'micro') AS micro_faults,
        count(*) FILTER (WHERE x.fault_type = 'micro' AND EXISTS (
            SELECT FROM mnemo.fault_log AS y WHERE y.tenant_id = x.tenant_id AND y.session_id = x.session_id
                AND y.object_id = x.object_id AND y.fault_type = 'restore' AND y.fault_id > x.fault_id))
            AS micro_then_restored,
        sum(greatest(x.avoided_tokens - x.answer_tokens, 0)) FILTER (WHERE x.fault_type = 'micro') AS micro_saved
    FROM mnemo.fault_log AS x, span
    WHERE x.tenant_id = span.tenant_id AND (span.session_id IS NULL OR x.session_id = span.session_id)
        AND x.created_at >= span.since AND x.created_at < span.until)
SELECT (SELECT count(*) FROM compiles) AS compiles, (SELECT sum(sent) FROM compiles)::bigint AS sent_tokens,
    (SELECT sum(full_tokens) FROM compiles)::bigint AS full_tokens, moves.*, faults.*
FROM moves, faults""", ["text", "uuid", "timestamptz", "timestamptz", "text[]"]),
}
