#!/usr/bin/env bash
# A throwaway Citus cluster on this machine: scripts/citus.sh start|stop|status
# Three local clusters (scripts/cluster.sh each) under $MNEMO_HOME/citus/: the
# coordinator on $MNEMO_CITUS_PORT (default 55440) and two workers on the next two
# ports, each with Citus first in shared_preload_libraries, then pg_cron. pgvector,
# PL/Python and the model are on every node because the nodes share this machine's
# PostgreSQL and $MNEMO_HOME (pylib/, model/, the plpy/ copy). start also creates the
# citus extension on each node and registers the workers with the coordinator; the
# deploy (scripts/deploy.sh against the coordinator) then distributes the schema.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MNEMO_HOME:?}"
PGBIN=${PGBIN:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin}
BASE=${MNEMO_CITUS_PORT:-55440}
NODES=(coordinator:$BASE worker1:$((BASE + 1)) worker2:$((BASE + 2)))
log() { printf '\033[1m[mnemo citus]\033[0m %s\n' "$*"; }
node() { MNEMO_HOME=$MNEMO_HOME/citus/$1 MNEMO_PORT=$2 scripts/cluster.sh "${@:3}"; }
psql_at() { psql "postgresql://postgres@127.0.0.1:$1/${3:-mnemo}" -XtAq -v ON_ERROR_STOP=1 -c "$2"; }

# Settings in postgresql.auto.conf, read after postgresql.conf and its includes, so
# they win over cluster.sh's: Citus before pg_cron (Citus's own requirement), and
# three nodes' memory on one machine (cluster.sh sizes one server to a quarter of RAM).
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
CONF
  [ "$(id -u)" = 0 ] && chown postgres: "$data/postgresql.auto.conf"
  return 0
}

case "${1:-}" in
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
  echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
