-- 0014: the relevance accumulator R_acc(m) of docs/design.md §Lifecycle (the running sum of the
-- scores a memory was retrieved with) moves to mnemo.memory_access, beside the
-- access count it is averaged over (issue 20, defect 4). On mnemo.memories it was
-- read by promotion but written by nothing, so U(m) was 0 and no memory was ever
-- promoted. The 'access' sweep (mnemo_internal.sweep_access) now adds the score of
-- each context a memory was sent in, in the same statement that counts the access.
-- r̄ = R_acc / a is a mean of scores in [0, 1] (the sweep clamps each one), so the
-- sum never exceeds the count: a CHECK keeps it so, whoever writes the row.
ALTER TABLE mnemo.memory_access
ADD COLUMN relevance_accumulator double precision NOT NULL DEFAULT 0,
ADD CONSTRAINT memory_access_relevance_accumulator_check
CHECK (relevance_accumulator >= 0 AND relevance_accumulator <= access_count);
COMMENT ON COLUMN mnemo.memory_access.relevance_accumulator IS
'Sum of the compile scores (each in [0, 1]) the memory was sent with: R_acc of docs/design.md §Lifecycle.';

-- Values set by hand before (nothing else wrote them), within the new bounds.
UPDATE mnemo.memory_access AS a
SET relevance_accumulator = least(greatest(m.relevance_accumulator, 0), a.access_count)
FROM mnemo.memories AS m
WHERE m.tenant_id = a.tenant_id AND m.memory_id = a.memory_id AND m.relevance_accumulator > 0;

-- Dropped from the partitioned parent, so from every leaf with it (a leaf's
-- inherited column cannot be dropped on its own, nor kept).
ALTER TABLE mnemo.memories DROP COLUMN relevance_accumulator;
