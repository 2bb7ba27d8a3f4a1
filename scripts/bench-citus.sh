#!/usr/bin/env bash
# make bench-citus [ARGS='--conversations 2 --calls 60']: bench/citus.py, the single node
# ($DATABASE_URL, deployed by make) against the local Citus cluster (scripts/citus.sh),
# which is started and deployed unless it runs already, and stopped afterwards if this
# script started it. Installs Citus if missing (scripts/install-citus.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MNEMO_HOME:?}" "${DATABASE_URL:?the single node}"
scripts/install-citus.sh
citus_url=$(scripts/citus.sh url)
if [ "$citus_url" = "$DATABASE_URL" ]; then
  echo "mnemo bench-citus: the single node and the coordinator are one server ($DATABASE_URL): set MNEMO_CITUS_PORT" >&2
  exit 2
fi
if ! scripts/citus.sh status >/dev/null 2>&1; then
  trap 'scripts/citus.sh stop' EXIT
fi
scripts/citus.sh start
# as make test-citus deploys (few hash partitions: each has its own shards); a
# deployed coordinator is only brought up to date
DATABASE_URL=$citus_url MNEMO_LOCAL_CLUSTER=1 MNEMO_HASH_PARTITIONS=${MNEMO_HASH_PARTITIONS:-2} scripts/deploy.sh
.venv/bin/python bench/citus.py --single "$DATABASE_URL" --citus "$citus_url" "$@"
