#!/usr/bin/env bash
# First start of the container. The official entrypoint runs this as the postgres user,
# on a temporary server that listens only on its socket, after creating POSTGRES_DB
# (mnemo in this image). In this order: the mnemo database exists; pg_cron is preloaded
# for it (set here, not on the command line, so that its launcher never starts before
# the database exists); Mnemosyne is deployed, with the settings pointing at the image's
# own code in /opt/mnemo (MNEMO_PYTHON_PATH / MNEMO_MODEL_DIR), which stays read-only.
set -euo pipefail
psql=(psql -X -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password -d postgres)
if [ -z "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'mnemo'")" ]; then
  "${psql[@]}" -qc 'CREATE DATABASE mnemo'
fi
cat >> "$PGDATA/postgresql.conf" <<'CONF'

# --- Mnemosyne (docker/initdb.sh) ---
shared_preload_libraries = 'pg_cron'
cron.database_name = 'mnemo'
cron.use_background_workers = on
max_worker_processes = 32
CONF
pg_ctl -D "$PGDATA" -m fast -w restart
cd /opt/mnemosyne
DATABASE_URL="postgresql://$POSTGRES_USER@/mnemo?host=/var/run/postgresql&port=${PGPORT:-5432}" scripts/deploy.sh
