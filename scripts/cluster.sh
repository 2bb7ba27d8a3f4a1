#!/usr/bin/env bash
# The throwaway local cluster: scripts/cluster.sh init|start|stop|status
# Lives in $MNEMO_HOME/pgdata, listens on 127.0.0.1:$MNEMO_PORT and a socket in
# $MNEMO_HOME/run, preloads pg_cron. initdb/postgres refuse to run as root, so as
# root they run as the 'postgres' user; otherwise as the current user.
set -euo pipefail
: "${MNEMO_HOME:?}" "${MNEMO_PORT:?}"
PGBIN=${PGBIN:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin}
DATA=$MNEMO_HOME/pgdata
RUN=$MNEMO_HOME/run
LOG=$MNEMO_HOME/postgres.log
log() { printf '\033[1m[mnemo cluster]\033[0m %s\n' "$*"; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# Memory settings sized to this machine at every start, in their own file (read last,
# so they win over the defaults above): shared_buffers a quarter of RAM (PostgreSQL's
# usual advice; a tenant's working set stays resident, where the OS page cache may
# be reclaimed under it) and effective_cache_size half of it.
memory_settings() {
  local kb mb
  kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || echo 2097152)
  mb=$(( kb / 1024 / 4 )); (( mb < 128 )) && mb=128; (( mb > 16384 )) && mb=16384
  cat > "$DATA/mnemo-memory.conf" <<CONF
# written by scripts/cluster.sh at every start: sized to this machine's $(( kb / 1024 )) MB of RAM
shared_buffers = ${mb}MB
effective_cache_size = $(( kb / 1024 / 2 ))MB
CONF
  [ "$(id -u)" = 0 ] && chown postgres: "$DATA/mnemo-memory.conf"
  grep -q "mnemo-memory.conf" "$DATA/postgresql.conf" ||
    echo "include_if_exists = 'mnemo-memory.conf'" >> "$DATA/postgresql.conf"
}

# What the server log may hold, in its own file written at every start (and reloaded
# into a running cluster): secrets are redacted before anything is stored, but a
# failing call is logged by PostgreSQL with its literals unless told otherwise.
#   log_min_error_statement = panic   a failing statement's text (its literals) is
#                                     never logged, only the error message
#   log_error_verbosity = terse       no DETAIL (a failing row's values), CONTEXT
#                                     (JSON input quoted by a parse error) or QUERY
#   log_parameter_max_length*  = 0    bind parameters never logged, on error or by
#                                     statement/duration logging
# A PostgreSQL message about a malformed typed value still quotes it (invalid input
# syntax for type uuid: "..."); docs/operations.md, "The server log", says how to drop errors
# from the log altogether.
log_settings() {
  cat > "$DATA/mnemo-logging.conf" <<CONF
# written by scripts/cluster.sh at every start: keep literals out of the server log
log_min_error_statement = panic
log_error_verbosity = terse
log_parameter_max_length = 0
log_parameter_max_length_on_error = 0
CONF
  [ "$(id -u)" = 0 ] && chown postgres: "$DATA/mnemo-logging.conf"
  grep -q "mnemo-logging.conf" "$DATA/postgresql.conf" ||
    echo "include_if_exists = 'mnemo-logging.conf'" >> "$DATA/postgresql.conf"
}

case "${1:-}" in
init)
  if [ -f "$DATA/PG_VERSION" ]; then log "cluster exists in $DATA"; exit 0; fi
  log "initdb in $DATA"
  mkdir -p "$DATA" "$RUN"
  [ "$(id -u)" = 0 ] && chown postgres: "$DATA" "$RUN" && touch "$LOG" && chown postgres: "$LOG"
  chmod 700 "$DATA"
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$DATA/postgresql.conf" <<CONF

# --- Mnemosyne local cluster ---
port = $MNEMO_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$RUN'
shared_preload_libraries = 'pg_cron'
cron.database_name = 'mnemo'
cron.use_background_workers = on
max_worker_processes = 32
max_connections = 200
work_mem = 16MB
maintenance_work_mem = 512MB
CONF
  ;;
start)
  log_settings
  if as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_pg "$PGBIN/pg_ctl" -D "$DATA" reload >/dev/null
    log "running on port $MNEMO_PORT"; exit 0
  fi
  memory_settings
  log "starting postgres on 127.0.0.1:$MNEMO_PORT"
  if ! as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null; then
    echo "mnemo cluster: postgres did not start; the end of $LOG says:" >&2
    tail -n 5 "$LOG" >&2
    echo "(port $MNEMO_PORT taken by another server? set MNEMO_PORT=...)" >&2
    exit 1
  fi
  if ! as_pg "$PGBIN/psql" -h "$RUN" -p "$MNEMO_PORT" -U postgres -d postgres -XtAc \
      "SELECT 1 FROM pg_database WHERE datname = 'mnemo'" | grep -q 1; then
    as_pg "$PGBIN/createdb" -h "$RUN" -p "$MNEMO_PORT" -U postgres mnemo
    log "created database mnemo"
  fi
  ;;
crash-restart)
  # Immediate-mode restart (no checkpoint: crash recovery on start, UNLOGGED tables
  # come back empty). Used by the working-memory crash test.
  as_pg "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null
  log "restarted after an immediate stop"
  ;;
stop)
  if [ -f "$DATA/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    log "stopped"
  else
    log "not running"
  fi
  ;;
status)
  as_pg "$PGBIN/pg_ctl" -D "$DATA" status
  ;;
*)
  echo "usage: $0 init|start|stop|status" >&2; exit 2 ;;
esac
