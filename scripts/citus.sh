#!/usr/bin/env bash
# A throwaway Citus cluster on this machine:
#   scripts/citus.sh start|stop|status|url|add-worker [K]|remove-worker K
# Three local clusters (scripts/cluster.sh each) under $MNEMO_HOME/citus/: the
# coordinator on $MNEMO_CITUS_PORT (default 55440) and two workers on the next two
# ports, each with Citus first in shared_preload_libraries, then pg_cron. pgvector,
# PL/Python and the model are on every node because the nodes share this machine's
# PostgreSQL and $MNEMO_HOME (pylib/, model/, the plpy/ copy). start also creates the
# citus extension on each node and registers the workers with the coordinator; the
# deploy (scripts/deploy.sh against the coordinator) then distributes the schema.
# add-worker grows a running cluster by worker K (default: the next one) on port
# $MNEMO_CITUS_PORT + K, registered but holding no shard until a rebalance moves
# some there: SELECT citus_rebalance_start(shard_transfer_mode => 'block_writes')
# (why block_writes: docs/operations.md, "On Citus"); remove-worker K drains it (its
# shards move to the other workers), unregisters, stops and deletes it. start, stop
# and status cover every worker under $MNEMO_HOME/citus/.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MNEMO_HOME:?}"
PGBIN=${PGBIN:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin}
BASE=${MNEMO_CITUS_PORT:-55440}
NODES=(coordinator:$BASE worker1:$((BASE + 1)) worker2:$((BASE + 2)))
# the workers added by add-worker (worker3, ...), by their directories
ADDED=()
for d in "$MNEMO_HOME"/citus/worker*; do
  k=${d##*/worker}
  [[ -d $d && $k =~ ^[0-9]+$ ]] && (( k > 2 )) && ADDED+=("$k")
done
mapfile -t ADDED < <(printf '%s\n' "${ADDED[@]}" | sort -n | grep .)
for k in "${ADDED[@]}"; do NODES+=("worker$k:$((BASE + k))"); done
log() { printf '\033[1m[mnemo citus]\033[0m %s\n' "$*"; }
node() { MNEMO_HOME=$MNEMO_HOME/citus/$1 MNEMO_PORT=$2 scripts/cluster.sh "${@:3}"; }
psql_at() { psql "postgresql://postgres@127.0.0.1:$1/${3:-mnemo}" -XtAq -v ON_ERROR_STOP=1 -c "$2"; }

# Settings in postgresql.auto.conf, read after postgresql.conf and its includes, so
# they win over cluster.sh's: Citus before pg_cron (Citus's own requirement), and
# three nodes' memory on one machine (cluster.sh sizes one server to a quarter of RAM).
# wal_level = logical: add-worker copies the reference tables to a new worker by
# logical replication, so that the writes that touch them (every tenant's, through
# the foreign keys to mnemo.tenants) go on meanwhile.
citus_settings() {
  local data=$MNEMO_HOME/citus/$1/pgdata kb
  kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 2097152)
  cat > "$data/postgresql.auto.conf" <<CONF
# written by scripts/citus.sh: a node of the local Citus cluster
shared_preload_libraries = 'citus,pg_cron'
shared_buffers = $(( kb / 1024 / 16 ))MB
effective_cache_size = $(( kb / 1024 / 6 ))MB
citus.node_conninfo = 'sslmode=disable'
max_prepared_transactions = 100
# few shards for a test cluster on one machine (each table and partition has this many)
citus.shard_count = ${MNEMO_CITUS_SHARDS:-4}
max_locks_per_transaction = 1024
wal_level = logical
CONF
  [ "$(id -u)" = 0 ] && chown postgres: "$data/postgresql.auto.conf"
  return 0
}

# The database-level settings the deploy gave every node then (citus_distribute's
# ALTER DATABASE ... SET, run on all nodes), copied from the coordinator to a new one:
# Citus's node activation brings the objects (extensions, roles, schema, functions,
# metadata), not these.
copy_database_settings() {
  local port=$1 setting
  while IFS= read -r setting; do
    [ -n "$setting" ] || continue
    psql_at "$port" "ALTER DATABASE mnemo SET ${setting%%=*} = '$(sed "s/'/''/g" <<<"${setting#*=}")'"
  done < <(psql_at "$BASE" "SELECT unnest(s.setconfig) FROM pg_db_role_setting AS s
    JOIN pg_database AS d ON d.oid = s.setdatabase WHERE d.datname = 'mnemo' AND s.setrole = 0")
}

case "${1:-}" in
add-worker)
  psql_at "$BASE" "SELECT 1" >/dev/null || { echo "mnemo citus: the coordinator (port $BASE) is not running: scripts/citus.sh start" >&2; exit 1; }
  k=${2:-3}
  [ $# -ge 2 ] || [ ${#ADDED[@]} = 0 ] || k=$(( ADDED[-1] + 1 ))
  [[ $k =~ ^[0-9]+$ ]] && (( k >= 3 )) || { echo "mnemo citus: add-worker K: K is a worker number (3, 4, ...)" >&2; exit 2; }
  name=worker$k port=$((BASE + k))
  node "$name" "$port" init >/dev/null
  citus_settings "$name"
  node "$name" "$port" start | sed "s/^/[$name] /"
  psql_at "$port" "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS citus"
  if [ -z "$(psql_at "$BASE" "SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port")" ]; then
    # before it is registered: a worker with Citus's metadata refuses ALTER DATABASE
    # (the deploy's run_command_on_all_nodes reaches it from then on)
    copy_database_settings "$port"
    # citus_add_node activates the node: it creates the distributed objects there and
    # syncs the metadata, so that it can take shards and delegated calls
    psql_at "$BASE" "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null
  fi
  # the API role parses delegated calls here (mnemo_internal.citus_distribute): the
  # coordinator's grants leave it out, so it gets its USAGE on this node alone
  psql_at "$port" "SET citus.enable_ddl_propagation = off; DO \$\$ BEGIN
    IF to_regnamespace('mnemo_citus') IS NOT NULL THEN GRANT USAGE ON SCHEMA mnemo_citus TO mnemo_app; END IF;
    END \$\$"
  # and its own sequence of message ids (mnemo_internal.message_ids), as a deploy makes
  psql_at "$port" "SELECT mnemo_internal.citus_message_id_seq()
    WHERE to_regprocedure('mnemo_internal.citus_message_id_seq()') IS NOT NULL" >/dev/null
  # the reference tables too, now and online (force_logical: all have a primary key
  # and are logged); else the rebalance's first step copies them with block_writes,
  # and every tenant's writes wait for it
  psql_at "$BASE" "SELECT replicate_reference_tables('force_logical')" >/dev/null
  log "$name on 127.0.0.1:$port registered; shards per worker: $(psql_at "$BASE" "SELECT string_agg(n.nodeport || ' ' ||
    (SELECT count(*) FROM pg_dist_placement AS p WHERE p.groupid = n.groupid), ', ' ORDER BY n.nodeport)
    FROM pg_dist_node AS n WHERE n.groupid <> 0 AND n.noderole = 'primary'") (citus_rebalance_start spreads them)"
  ;;
remove-worker)
  k=${2:?usage: $0 remove-worker K}
  [[ $k =~ ^[0-9]+$ ]] && (( k >= 3 )) || { echo "mnemo citus: remove-worker K: K is an added worker (3, 4, ...)" >&2; exit 2; }
  port=$((BASE + k))
  if [ -n "$(psql_at "$BASE" "SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port")" ]; then
    # its shards to the other workers, then the deferred drops of the moved shards,
    # then off the node list. block_writes: the working memory is UNLOGGED, which
    # logical replication (the default mode) cannot move; each shard group's writes
    # wait while it is copied. Then the others even by shard count: the default
    # strategy (by disk size) may leave most groups of a small cluster on one worker
    psql_at "$BASE" "SELECT citus_drain_node('127.0.0.1', $port, 'block_writes', 'by_shard_count')" >/dev/null
    psql_at "$BASE" "CALL citus_cleanup_orphaned_resources()"
    psql_at "$BASE" "SELECT citus_remove_node('127.0.0.1', $port)" >/dev/null
    psql_at "$BASE" "SELECT rebalance_table_shards(rebalance_strategy => 'by_shard_count',
      shard_transfer_mode => 'block_writes')" >/dev/null
    psql_at "$BASE" "CALL citus_cleanup_orphaned_resources()"
    log "worker$k (port $port) drained and removed"
  fi
  # a worker's directory is its membership (start and stop go by the directories):
  # drained, it holds nothing
  if [ -d "$MNEMO_HOME/citus/worker$k" ]; then
    node "worker$k" "$port" stop | sed "s/^/[worker$k] /"
    rm -rf "${MNEMO_HOME:?}/citus/worker$k"
  fi
  ;;
start)
  for n in "${NODES[@]}"; do
    name=${n%%:*} port=${n##*:}
    node "$name" "$port" init >/dev/null
    citus_settings "$name"
    node "$name" "$port" start | sed "s/^/[$name] /"
    psql_at "$port" "SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS citus"
  done
  psql_at "$BASE" "SELECT citus_set_coordinator_host('127.0.0.1', $BASE)" >/dev/null
  for n in "${NODES[@]:1}"; do
    port=${n##*:}
    psql_at "$BASE" "SELECT citus_add_node('127.0.0.1', $port) WHERE NOT EXISTS
      (SELECT FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port)" >/dev/null
  done
  log "coordinator 127.0.0.1:$BASE, workers: $(psql_at "$BASE" "SELECT string_agg(nodeport::text, ', ' ORDER BY nodeport) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0") ($(psql_at "$BASE" "SELECT citus_version()" | cut -d, -f1))"
  ;;
stop)
  for n in "${NODES[@]}"; do
    name=${n%%:*}
    [ -d "$MNEMO_HOME/citus/$name" ] && node "$name" "${n##*:}" stop | sed "s/^/[$name] /"
  done
  ;;
status)
  rc=0
  for n in "${NODES[@]}"; do
    name=${n%%:*}
    printf '%s (port %s): ' "$name" "${n##*:}"
    node "$name" "${n##*:}" status 2>&1 | head -1 || rc=3
  done
  exit $rc
  ;;
url)
  echo "postgresql://postgres@127.0.0.1:$BASE/mnemo"
  ;;
*)
  echo "usage: $0 start|stop|status|url|add-worker [K]|remove-worker K" >&2; exit 2 ;;
esac
