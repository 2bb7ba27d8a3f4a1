#!/usr/bin/env bash
# Container health (compose and the Dockerfile's HEALTHCHECK): ready once the deploy of
# the first start has finished and the server is up for clients. It asks over TCP, which
# the entrypoint's temporary init server does not listen on, whether every migration
# this image ships is recorded.
set -eu
versions=$(cd /opt/mnemosyne/sql/migrations && ls -- *.sql | sed 's/\.sql$//' | paste -sd, -)
want=$(tr , '\n' <<<"$versions" | wc -l)
got=$(PGPASSWORD=${POSTGRES_PASSWORD:-} psql -X -h 127.0.0.1 -p "${PGPORT:-5432}" -U "${POSTGRES_USER:-postgres}" \
      -d mnemo -tAc "SELECT count(*) FROM mnemo_internal.schema_migrations WHERE version = ANY ('{$versions}')")
[ "$got" = "$want" ]
