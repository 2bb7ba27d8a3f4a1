#!/usr/bin/env bash
# make test-docker: the project's container, tested the way a user runs it.
#   1. builds the image with Docker, or Podman when no Docker engine answers
#   2. starts it on a free port with a named volume and waits until the deploy of the
#      first start has finished (docker/healthcheck.sh)
#   3. DATABASE_URL=<container> make test: two deploys from this checkout (they must
#      keep the server's own code), pgTAP, pytest, lint
#   4. restarts the container on the kept volume, then deploys once more from here;
#      after each, the server must still embed, count tokens and run pg_cron jobs
#   5. removes the container and the volume (the image stays, as a build cache)
# and prints one JSON line. ~20 min on 2 cores, most of it the first build and the tests.
# Build options: the host's pip settings travel into the build: PIP_INDEX_URL,
# PIP_EXTRA_INDEX_URL, PIP_TRUSTED_HOST, TORCH_INDEX_URL when set; pip's find-links,
# a local folder being served to the build over HTTP (torch then resolves as on the
# host unless TORCH_INDEX_URL is set); the CA bundle of MNEMO_CA_BUNDLE, PIP_CERT or
# SSL_CERT_FILE as the ca_bundle secret. MNEMO_ENGINE=docker|podman picks the engine,
# MNEMO_KEEP=1 keeps the container and volume for a look afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m[mnemo test-docker]\033[0m %s\n' "$*"; }
t0=$SECONDS
# The settings of the local cluster (exported by the Makefile) are not this server's.
unset MNEMO_LOCAL_CLUSTER MNEMO_PYTHON_PATH MNEMO_MODEL_DIR

engine=${MNEMO_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null; then engine=podman
  else echo "mnemo test-docker: no container engine (Docker or Podman) found" >&2; exit 1; fi
fi

# A port nobody listens on, outside the ephemeral range and the usual PostgreSQL ports:
# the first free one from a start derived from $1 (the same one again and again, so
# that a build argument naming it keeps the build cache), else random.
free_port() {
  python3 - "${1:-}" <<'PY'
import random, socket, sys, zlib
seed = sys.argv[1]
start = 20000 + zlib.crc32(seed.encode()) % 10000 if seed else None
for i in range(200):
    port = start + i if start and i < 20 else random.randint(20000, 29999)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
PY
}
port=$(free_port)
name=mnemo-test-$port volume=mnemo-test-$port-data image=${MNEMO_IMAGE:-mnemosyne:latest}
password=mnemo-test-$RANDOM
url="postgresql://postgres:$password@127.0.0.1:$port/mnemo"
image_py=/opt/mnemo/plpy:/opt/mnemo/pylib
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -z "${MNEMO_KEEP:-}" ]; then
    "$engine" rm -f "$name" >/dev/null 2>&1 || true
    "$engine" volume rm -f "$volume" >/dev/null 2>&1 || true
  else
    log "kept: container $name (port $port), volume $volume; DATABASE_URL=$url"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. build -------------------------------------------------------------------------
build=()
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST TORCH_INDEX_URL; do
  [ -n "${!v+set}" ] && build+=(--build-arg "$v=${!v}")
done
pip_links=${PIP_FIND_LINKS:-$( (python3 -m pip config get global.find-links || pip config get global.find-links) 2>/dev/null || true)}
links=()
for l in $pip_links; do
  l=${l#file://}
  if [ -d "$l" ]; then
    p=$(free_port "$l")
    python3 -m http.server --bind 127.0.0.1 --directory "$l" "$p" >/dev/null 2>&1 & pids+=($!)
    links+=("http://127.0.0.1:$p/")
    build+=(--network=host)
  else
    links+=("$l")
  fi
done
if [ ${#links[@]} -gt 0 ]; then
  build+=(--build-arg "PIP_FIND_LINKS=${links[*]}")
  [ -n "${TORCH_INDEX_URL+set}" ] || build+=(--build-arg TORCH_INDEX_URL=)
fi
ca=${MNEMO_CA_BUNDLE:-${PIP_CERT:-${SSL_CERT_FILE:-}}}
[ -n "$ca" ] && [ -f "$ca" ] && build+=(--secret "id=ca_bundle,src=$ca")
log "building $image with $engine (${build[*]})"
t=$SECONDS
"$engine" build "${build[@]}" -t "$image" . > "$work/build.log" 2>&1 || {
  tail -n 30 "$work/build.log" >&2; echo "mnemo test-docker: the build failed" >&2; exit 1; }
build_s=$((SECONDS - t))
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; pids=()

# --- 2. first start ------------------------------------------------------------------
wait_ready() {  # until the deploy has finished and the published port answers
  local deadline=$((SECONDS + 1200))
  until "$engine" exec "$name" mnemo-healthcheck >/dev/null 2>&1 \
        && psql "$url" -XtAc 'SELECT 1' >/dev/null 2>&1; do
    if [ "$("$engine" inspect -f '{{.State.Running}}' "$name")" != true ] || [ $SECONDS -gt $deadline ]; then
      "$engine" logs "$name" 2>&1 | tail -n 30 >&2
      echo "mnemo test-docker: the container never became ready" >&2; return 1
    fi
    sleep 3
  done
}
# The server runs its own code: the image's paths, an embedding, a token count, and
# pg_cron running the jobs in mnemo (a job's run recorded after the check started).
server_works() {
  local since
  since=$(psql "$url" -XtAc 'SELECT now()')
  psql "$url" -X -v ON_ERROR_STOP=1 -tA > "$work/check.out" 2>&1 <<SQL || { cat "$work/check.out" >&2; return 1; }
SELECT 'python_path=' || (mnemo_internal.setting('python_path') #>> '{}'),
       'embed_dims=' || vector_dims(mnemo.embed('the container works')),
       'tokens=' || mnemo.count_tokens('the container works'),
       'active_jobs=' || (SELECT count(*) FROM cron.job WHERE jobname LIKE 'mnemo-%' AND active);
SQL
  log "server: $(tr '|' ' ' < "$work/check.out")"
  grep -q "python_path=$image_py|embed_dims=384|tokens=[1-9][0-9]*|active_jobs=[1-9]" "$work/check.out" || return 1
  local deadline=$((SECONDS + 240))  # pg_cron starts a job at every minute
  until [ "$(psql "$url" -XtAc "SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid)
                                  WHERE j.jobname LIKE 'mnemo-%' AND d.start_time > '$since'")" -gt 0 ]; do
    [ $SECONDS -lt $deadline ] || { echo "mnemo test-docker: pg_cron ran no job in 4 minutes" >&2; return 1; }
    sleep 5
  done
}
log "starting $name on 127.0.0.1:$port"
"$engine" volume create "$volume" >/dev/null
t=$SECONDS
# On the host's network (Linux), listening on 127.0.0.1 only, the server reaches what the
# tests start on this machine's 127.0.0.1 (the fake helper LLM), as a local cluster does;
# MNEMO_DOCKER_NETWORK=bridge publishes the port instead (those tests then skip).
if [ "${MNEMO_DOCKER_NETWORK:-host}" = host ]; then
  net=(--network=host -e PGPORT="$port") args=(postgres -c listen_addresses=127.0.0.1)
else
  net=(-p "127.0.0.1:$port:5432") args=()
fi
"$engine" run -d --name "$name" -e POSTGRES_PASSWORD="$password" "${net[@]}" \
  -v "$volume:/var/lib/postgresql/data" "$image" "${args[@]}" >/dev/null
first_start=fail restart=fail redeploy=fail make_test=fail
wait_ready && server_works && first_start=ok
first_start_s=$((SECONDS - t))

# --- 3. the suite through DATABASE_URL ---------------------------------------------------
if [ $first_start = ok ]; then
  log "DATABASE_URL=<container> make test"
  t=$SECONDS
  DATABASE_URL=$url make --no-print-directory test 2>&1 | tee "$work/test.log" && make_test=ok
  test_s=$((SECONDS - t))
  # --- 4. restart on the kept volume, then one more deploy from this checkout ----------
  log "restart with the kept volume"
  "$engine" restart "$name" >/dev/null
  wait_ready && server_works && restart=ok
  log "DATABASE_URL=<container> make deploy"
  DATABASE_URL=$url make --no-print-directory deploy > "$work/deploy.log" 2>&1 \
    && server_works && redeploy=ok || tail -n 20 "$work/deploy.log" >&2
fi

# --- 5. summary ---------------------------------------------------------------------
"$engine" logs "$name" > "$work/server.log" 2>&1 || true
cron_fatal=$(grep -c 'database "mnemo" does not exist' "$work/server.log" || true)
pgtap=$(grep -m1 -o 'Files=[0-9]*, Tests=[0-9]*' "$work/test.log" 2>/dev/null || true)
pgtap_result=$(grep -m1 -o 'Result: [A-Z]*' "$work/test.log" 2>/dev/null || true)
pytest=$(grep -E '^[0-9]+ (passed|failed)|^=* *[0-9]+ (passed|failed)' "$work/test.log" 2>/dev/null | tail -n 1 | tr -d '=' | xargs || true)
result=fail
[ "$first_start $make_test $restart $redeploy $cron_fatal" = "ok ok ok ok 0" ] && result=pass
printf '{"result": "%s", "engine": "%s", "port": %s, "build_s": %s, "first_start": "%s", "first_start_s": %s, "make_test": "%s", "test_s": %s, "pgtap": "%s %s", "pytest": "%s", "restart": "%s", "redeploy": "%s", "init_cron_fatal": %s, "total_s": %s}\n' \
  "$result" "$engine" "$port" "$build_s" "$first_start" "$first_start_s" "$make_test" "${test_s:-0}" \
  "$pgtap" "${pgtap_result#Result: }" "$pytest" "$restart" "$redeploy" "$cron_fatal" "$((SECONDS - t0))"
[ $result = pass ]
