-- mnemo_internal.sweep_py(p_sweep, p_now, p_tenant_id, p_batch_size, p_state) -> jsonb
-- One batch of a lifecycle sweep whose decisions live in Python
-- (plpy/mnemo_db/lifecycle/sweeps.py for the statements, rules.py for the rules,
-- llm_summarize.py and summarize.py for the summaries):
--   promotion   memories whose utility U(m) passes their tier's threshold move up
--               (session -> episodic -> semantic / procedural), become global and
--               validated, with a memory_versions entry (docs/design.md §Lifecycle).
--   expiry      phase by phase: sessions idle too long or past expires_at expire;
--               session-tier memories of ended sessions get their grace TTL; memories
--               past expires_at are deactivated and archived (memory_archive); idle
--               memories whose activity D(m) is below their tier's floor expire or go
--               back to episodic (docs/design.md §Lifecycle).
--   summaries   memories without declared losses get detail / compact / stub levels
--               with token counts and declared losses, written by the helper LLM
--               (mnemo.set_helper_llm; docs/design.md §Fidelity ladder; JSON out, validated:
--               levels no longer than the one above, stub format, kept entities
--               present, declared losses absent) when one is configured and enabled,
--               else by the offline extractive summariser. An invalid reply is retried,
--               then that item is summarised offline; an unreachable helper is not
--               asked again in the run; secret memories are never sent; a helper
--               failure never fails the sweep. metadata.summary records the method
--               (helper_llm / offline); counts: helper_llm, offline, helper_fallbacks.
--   compaction  a session whose active history exceeds compaction_factor x its
--               context window has its oldest span (down to one window, tool results
--               kept with their calls) replaced by one summary message (role system,
--               turn -1); the span's messages are flagged is_compacted with
--               compacted_into = that message; a 'summary' memory holds the span at
--               four fidelities with declared losses (helper LLM or offline, as for
--               summaries; compaction_log.method helper_llm / extractive); the session
--               summary is updated; compaction_log records rho (docs/design.md §Lifecycle).
--   digests     per tenant whose memories changed since the last run: its global,
--               non-secret memories grouped by entity and by topic word; a group over
--               two or more sessions keeps one dated digest memory (source_key
--               digest:entity:<id> / digest:topic:<stem>), inserted, updated in place
--               with a memory_versions row, or archived when the group no longer
--               forms (plpy/mnemo_db/lifecycle/digests.py).
-- Called by mnemo.run_sweep, which commits after each batch. Returns {"rows", "done",
-- "state" (the cursor for the next batch), "counts"}. Writes: memories,
-- memory_versions, memory_archive, sessions, messages, compaction_log, jobs.
CREATE OR REPLACE FUNCTION mnemo_internal.sweep_py(
    p_sweep text,
    p_now timestamptz,
    p_tenant_id text,
    p_batch_size integer,
    p_state jsonb
) RETURNS jsonb
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
import json
from mnemo_db.lifecycle.sweeps import Sweeps
sweeps = GD.get('mnemo_sweeps') or GD.setdefault('mnemo_sweeps', Sweeps(plpy))
python = plpy.prepare('SELECT FROM mnemo_internal.sweeps() AS s WHERE s.sweep = $1 AND s.python', ['text'])
if not plpy.execute(python, [p_sweep]):
    plpy.error(f'sweep_py has no sweep {p_sweep!r}', sqlstate='MN001')
batch = getattr(sweeps, p_sweep + '_batch')
return batch(p_now, p_tenant_id, p_batch_size, json.loads(p_state or '{}'))
$$;

COMMENT ON FUNCTION mnemo_internal.sweep_py(text, timestamptz, text, integer, jsonb) IS
'One batch of the promotion, expiry, summaries, compaction or digests sweep (see mnemo.run_sweep).';
