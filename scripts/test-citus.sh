#!/usr/bin/env bash
# make test-citus [ARGS=--smoke]: the suite on a local Citus cluster (scripts/citus.sh):
# installs Citus if missing (scripts/install-citus.sh), starts the coordinator and two
# workers, deploys twice to the coordinator, runs pgTAP and pytest against it, stops.
#   --smoke   tests/py/db/test_citus.py and the isolation tests only (a few minutes)
#   --keep    leave the cluster running afterwards
# Tests that cannot hold on Citus skip with their reason (README, "On Citus").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MNEMO_HOME:?}"
smoke='' keep=''
for a in "$@"; do case $a in --smoke) smoke=1 ;; --keep) keep=1 ;; *) echo "unknown $a" >&2; exit 2 ;; esac; done
scripts/install-citus.sh
export DATABASE_URL; DATABASE_URL=$(scripts/citus.sh url)
# the nodes share this checkout's $MNEMO_HOME (pylib/, model/, plpy/): the deploy refreshes it
export MNEMO_LOCAL_CLUSTER=1 MNEMO_HASH_PARTITIONS=${MNEMO_HASH_PARTITIONS:-2}
[ -n "$keep" ] || trap 'scripts/citus.sh stop' EXIT
scripts/citus.sh start
scripts/deploy.sh
echo "[mnemo test-citus] second deploy (re-runs must be harmless)"
scripts/deploy.sh
if [ -n "$smoke" ]; then
  .venv/bin/python -m pytest -q tests/py/db/test_citus.py tests/py/db/test_isolation.py
else
  psql "$DATABASE_URL" -Xqc 'SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS pgtap'
  rc=0
  # the pgTAP files of tests/citus-skips.txt are left out, with their reason
  skips=$(grep -E '^tests/sql/' tests/citus-skips.txt || true)
  [ -z "$skips" ] || printf '%s\n' "$skips" | sed 's/^\([^ ]*\)  */[mnemo test-citus] skip \1: /'
  mapfile -t files < <(ls tests/sql/*.sql | grep -vxF -f <(printf '%s\n' "$skips" | cut -d' ' -f1))
  pg_prove --dbname "$DATABASE_URL" "${files[@]}" || rc=1
  .venv/bin/python -m pytest -q tests/py || rc=1
  exit $rc
fi
