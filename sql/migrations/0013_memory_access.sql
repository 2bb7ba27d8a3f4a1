-- 0013: the memories' access statistics in a table of their own (issue 3, the read
-- path's latency under load).
-- access_count and last_accessed_at (the frequency and freshness of the retrieval
-- score, promotion's and demotion's inputs) are bumped by the 'access' sweep for
-- every memory a compile sent: thousands of row updates a minute on a busy server.
-- On mnemo.memories each bump wrote a new version of a ~2.2 kB row (its vector
-- inline), and a page has room for one: when two memories of a page were bumped in
-- one batch, the second update was not HOT and added an entry to every one of the
-- table's 13 indexes, the HNSW graph's included (~9 % of the bumps on the bench
-- corpus, most of a fold's ~270 ms per 470 compiles, in bursts that compiles running
-- beside them paid for). Here a row is ~60 bytes under one index: a bump is a HOT
-- update of a narrow row, or the insertion of one. A memory without a row here has
-- never been sent (access_count 0, last_accessed_at NULL); its row goes with it.
CREATE TABLE mnemo.memory_access (
    tenant_id text NOT NULL,
    memory_id bigint NOT NULL,
    access_count integer NOT NULL DEFAULT 0 CHECK (access_count >= 0),
    last_accessed_at timestamptz,
    PRIMARY KEY (tenant_id, memory_id),
    FOREIGN KEY (tenant_id, memory_id) REFERENCES mnemo.memories ON DELETE CASCADE
) PARTITION BY HASH (tenant_id);
COMMENT ON TABLE mnemo.memory_access IS
'Access statistics of memories (times sent by compile_context, last sent), kept by the access sweep.';

SELECT
    mnemo_internal.create_hash_partitions(
        'mnemo.memory_access',
        (
            SELECT value::integer FROM mnemo_internal.settings
            WHERE key = 'hash_partitions'
        )
    );

ALTER TABLE mnemo.memory_access ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mnemo.memory_access
USING (tenant_id = (SELECT mnemo_internal.current_tenant_id()))
WITH CHECK (tenant_id = (SELECT mnemo_internal.current_tenant_id()));

INSERT INTO mnemo.memory_access (tenant_id, memory_id, access_count, last_accessed_at)
SELECT
    m.tenant_id,
    m.memory_id,
    m.access_count,
    m.last_accessed_at
FROM mnemo.memories AS m
WHERE m.access_count > 0 OR m.last_accessed_at IS NOT NULL;

ALTER TABLE mnemo.memories DROP COLUMN access_count, DROP COLUMN last_accessed_at;
