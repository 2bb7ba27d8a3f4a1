-- 0027: compile_context finds the entities a query names, and their memories, by index.
-- It looked entities up by name alone (e.normalized = ANY(the query's words)), and
-- the only index by name leads with the kind: every entity of the tenant was read.
-- Their mentions came through a join that a generic plan started from the mentions:
-- every mention of the tenant was read (1,843 rows for the 103 wanted on a tenant of
-- 178 memories), a cost that grew with the tenant's memories at every compile.
-- Entities get an index by name; mentions one by entity and memory, which also
-- gives an entity's newest memories in order (the large-tenant pool reads those) and
-- replaces the one by entity alone.
CREATE INDEX IF NOT EXISTS entities_tenant_normalized_idx ON mnemo.entities (tenant_id, normalized);
CREATE INDEX IF NOT EXISTS entity_mentions_entity_memory_idx ON mnemo.entity_mentions (tenant_id, entity_id, memory_id);
DROP INDEX IF EXISTS mnemo.entity_mentions_entity_idx;
