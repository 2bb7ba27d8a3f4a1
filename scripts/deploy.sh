#!/usr/bin/env bash
# Deploys Mnemosyne into $DATABASE_URL. Safe to run again and again:
#   1. sql/bootstrap.sql, settings, error codes     (idempotent)
#   2. the routines the schema names: sql/partitions/*.sql and the sql/functions files
#      marked "-- deploy: before the migrations" (policies and triggers call them)
#   3. sql/migrations/*.sql                         (each runs once, recorded with its hash;
#      a changed released migration stops the deploy before anything is loaded)
#   4. the other sql/functions/*.sql                (CREATE OR REPLACE, one transaction):
#      after the migrations, so that a migration drops an old signature first
#   5. on a Citus coordinator, sql/citus/*.sql: distribution of the schema (idempotent)
#   6. sql/grants.sql, server-side Python paths, month partitions, cron/*.sql
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must be set}"
log() { printf '\033[1m[mnemo deploy]\033[0m %s\n' "$*"; }
PSQL=(psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 --no-psqlrc)
q() { "${PSQL[@]}" -tA -c "$1"; }

"${PSQL[@]}" -c 'SET client_min_messages = warning' -f sql/bootstrap.sql -f sql/settings.sql -f sql/error_codes.sql
if [ -n "${MNEMO_HASH_PARTITIONS:-}" ] && [ -z "$(q "SELECT 1 FROM mnemo_internal.schema_migrations WHERE version = '0001_schema'")" ]; then
  q "UPDATE mnemo_internal.settings SET value = to_jsonb(${MNEMO_HASH_PARTITIONS}::integer) WHERE key = 'hash_partitions'" >/dev/null
fi

# A migration that ran is frozen: a file whose hash changed since is an error (add a
# new migration instead), found before anything else is loaded.
declare -A ran=() sums=()
while read -r v sum; do ran[$v]=$sum; done < <("${PSQL[@]}" -tA -F ' ' -c 'SELECT version, sha256 FROM mnemo_internal.schema_migrations')
# A revision listed in sql/migrations/revisions.txt (its comments alone changed) is
# accepted, and the ledger takes the file's new hash.
changed=() revised=()
for f in sql/migrations/*.sql; do
  v=$(basename "$f" .sql); sums[$v]=$(sha256sum "$f" | cut -c1-64)
  if [ -n "${ran[$v]:-}" ] && [ "${ran[$v]}" != "${sums[$v]}" ]; then
    if grep -qE "^$v ${ran[$v]} ${sums[$v]}( |\$)" sql/migrations/revisions.txt 2>/dev/null; then
      revised+=("$v")
    else
      changed+=("$v")
    fi
  fi
done
if [ ${#changed[@]} -gt 0 ]; then
  echo "mnemo deploy: migration ${changed[*]} changed since it ran; released migrations are frozen:" \
       "restore the file and add a new migration" >&2
  exit 1
fi
for v in "${revised[@]}"; do
  q "UPDATE mnemo_internal.schema_migrations SET sha256 = '${sums[$v]}' WHERE version = '$v'" >/dev/null
  log "migration $v: revised comments recorded (sql/migrations/revisions.txt)"
done

# Bodies are not checked at creation (check_function_bodies = off), so the files of a
# step load in any order, and before the tables of a first deploy exist; tests run them.
load_routines() {
  local args=(-1 -c 'SET client_min_messages = warning' -c 'SET check_function_bodies = off') f
  for f in "$@"; do args+=(-f "$f"); done
  "${PSQL[@]}" "${args[@]}"
}
early=(sql/partitions/*.sql $(grep -l '^-- deploy: before the migrations' sql/functions/*.sql))
load_routines "${early[@]}"

for f in sql/migrations/*.sql; do
  v=$(basename "$f" .sql)
  if [ -z "${ran[$v]:-}" ]; then
    log "migration $v"
    "${PSQL[@]}" -1 -c 'SET client_min_messages = warning' -f "$f" \
      -c "INSERT INTO mnemo_internal.schema_migrations (version, sha256) VALUES ('$v', '${sums[$v]}')" >/dev/null
  fi
done

late=()
for f in sql/functions/*.sql; do [[ " ${early[*]} " == *" $f "* ]] || late+=("$f"); done
load_routines "${late[@]}"
log "$(( ${#early[@]} + ${#late[@]} )) routine files loaded (${#early[@]} before the migrations)"

# On a Citus coordinator (the citus extension in this database): sql/citus/ spreads the
# schema over the workers, idempotently (mnemo_internal.citus_distribute; docs/operations.md,
# "On Citus"). Before the grants, which then reach the distributed tables and functions.
grant_opts=()
if [ "$(q "SELECT count(*) FROM pg_extension WHERE extname = 'citus'")" = 1 ]; then
  # grants touch reference tables that distributed ones reference: one connection per node
  grant_opts=(-c 'SET citus.multi_shard_modify_mode = sequential')
  load_routines sql/citus/*.sql
  "${PSQL[@]}" -c 'SET client_min_messages = warning' -c 'CALL mnemo_internal.citus_distribute()'
  # each node's own sequence of message ids (mnemo_internal.message_ids), after the
  # distribution has committed the schema it lives in on every node
  failed=$(q "SELECT string_agg(format('node %s: %s', nodeid, result), '; ')
    FROM run_command_on_all_nodes('SELECT mnemo_internal.citus_message_id_seq()') WHERE NOT success")
  [ -z "$failed" ] || { echo "mnemo deploy: mnemo_citus.message_id_seq: $failed" >&2; exit 1; }
  log "citus: $(q "SELECT count(*) FILTER (WHERE partmethod = 'h') || ' distributed tables, '
    || count(*) FILTER (WHERE partmethod = 'n') || ' reference tables' FROM pg_dist_partition AS d
    JOIN pg_class AS c ON c.oid = d.logicalrelid WHERE NOT c.relispartition"), $(q "SELECT count(*)
    FROM pg_dist_object WHERE classid = 'pg_proc'::regclass AND distribution_argument_index IS NOT NULL") functions delegated by tenant"
fi

# One transaction: the file revokes every privilege, then grants each one back; run
# statement by statement, the applications of a live server were refused the API
# (permission denied for function ...) between the two, at every deploy.
"${PSQL[@]}" -1 -c 'SET client_min_messages = warning' "${grant_opts[@]}" -f sql/grants.sql

# Where PL/Python finds the plpy/ package, its modules and the model, on the server's
# disk. A server whose code is already installed (a container, a server deployed from
# another machine) keeps its settings: the paths of this checkout mean nothing there.
# They are set when given (MNEMO_PYTHON_PATH / MNEMO_MODEL_DIR), or, with MNEMO_HOME,
# for the local cluster, a server whose python_path is empty, or one that already
# uses $MNEMO_HOME (a server on this machine: the plpy/ copy there is refreshed).
# The settings change only if a fresh backend can import mnemo_db and embed with them;
# a failure stops the deploy when the paths were given or the cluster is local.
setting() { q "SELECT value #>> '{}' FROM mnemo_internal.settings WHERE key = '$1'"; }
old_py=$(setting python_path); old_model=$(setting model_dir)
PY_PATH=${MNEMO_PYTHON_PATH:-}; MODEL_DIR=${MNEMO_MODEL_DIR:-}
strict=$PY_PATH$MODEL_DIR${MNEMO_LOCAL_CLUSTER:-}
if [ -z "$PY_PATH$MODEL_DIR" ] && [ -n "${MNEMO_HOME:-}" ] && { [ -n "${MNEMO_LOCAL_CLUSTER:-}" ] \
     || [ -z "$old_py" ] || [ "$old_py" = "$MNEMO_HOME/plpy:$MNEMO_HOME/pylib" ]; }; then
  PY_PATH=$MNEMO_HOME/plpy:$MNEMO_HOME/pylib; MODEL_DIR=$MNEMO_HOME/model
  mkdir -p "$MNEMO_HOME/plpy"
  rm -rf "$MNEMO_HOME/plpy/mnemo_db" && cp -r plpy/mnemo_db "$MNEMO_HOME/plpy/"
  find "$MNEMO_HOME/plpy" -name __pycache__ -prune -exec rm -rf {} +
  # compiled here: the server cannot write them, and compiled in each new backend
  # they cost its first call ~150 ms (the server's interpreter: scripts/install-python.sh)
  /usr/bin/python3 -m compileall -q "$MNEMO_HOME/plpy" >/dev/null
fi
PY_PATH=${PY_PATH:-$old_py}; MODEL_DIR=${MODEL_DIR:-$old_model}
sql_text() { printf "'%s'" "${1//\'/\'\'}"; }
if check=$("${PSQL[@]}" -1 -tA \
    -c "UPDATE mnemo_internal.settings SET value = to_jsonb($(sql_text "$PY_PATH")::text) WHERE key = 'python_path'" \
    -c "UPDATE mnemo_internal.settings SET value = to_jsonb($(sql_text "$MODEL_DIR")::text) WHERE key = 'model_dir'" \
    -c "SELECT vector_dims(mnemo.embed('deploy check'))" 2>&1); then
  log "server-side code: python_path=$PY_PATH model_dir=$MODEL_DIR"
else
  why=$(grep -m1 ERROR <<<"$check")
  if [ -n "$strict" ]; then
    echo "mnemo deploy: the server cannot run the code at python_path=$PY_PATH model_dir=$MODEL_DIR: $why" >&2
    exit 1
  fi
  echo "mnemo deploy: WARNING the server cannot run the code at python_path=$PY_PATH model_dir=$MODEL_DIR" \
       "($why); kept python_path=$old_py model_dir=$old_model. Install the code on the server and set" \
       "MNEMO_PYTHON_PATH / MNEMO_MODEL_DIR (docs/operations.md, "An existing server")" >&2
fi
db=$(q "SELECT current_database()")

months=$(q "SELECT value FROM mnemo_internal.settings WHERE key = 'message_partition_months_ahead'")
q "SELECT mnemo.create_message_partitions(current_date, $months)" >/dev/null

if [ "$(q "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_cron'")" = 1 ] \
   && [ "$(q "SELECT current_setting('cron.database_name', true) = current_database()")" = t ]; then
  "${PSQL[@]}" -c 'SET client_min_messages = warning' -c 'CREATE EXTENSION IF NOT EXISTS pg_cron' >/dev/null
  for f in cron/*.sql; do "${PSQL[@]}" -f "$f" >/dev/null; done
  log "pg_cron jobs scheduled: $(q "SELECT string_agg(jobname, ', ' ORDER BY jobname) FROM cron.job WHERE jobname LIKE 'mnemo-%'")"
else
  echo "mnemo deploy: WARNING pg_cron is not preloaded for database $db; jobs are not scheduled (run CALL mnemo.run_jobs() yourself)" >&2
fi
log "deployed into database $db"
