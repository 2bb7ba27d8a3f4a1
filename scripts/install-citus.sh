#!/usr/bin/env bash
# Installs Citus 13.2.2 (the newest line for PostgreSQL 15) for make test-citus, unless the
# server already has it. On real machines install Citus's own apt package
# (postgresql-15-citus-13.2) or run its container image instead: this script is the
# fallback for machines that reach no Citus repository, and builds the extension from the
# source archive in $MNEMO_CITUS_SRC (default ../shared/vendor/citus, beside the checkout):
# citus-13.2.2.tar.gz, github.com/citusdata/citus tag v13.2.2, AGPL-3.0. ~2-4 min on 2 cores.
# Needs root (apt-get for the build headers, make install into PostgreSQL's directories).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1m[mnemo citus]\033[0m %s\n' "$*"; }
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config}
VERSION=13.2.2
if [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ] \
   && grep -qx "default_version = '${VERSION%.*}-[0-9]*'" "$("$PG_CONFIG" --sharedir)/extension/citus.control" 2>/dev/null; then
  log "citus $(grep default_version "$("$PG_CONFIG" --sharedir)/extension/citus.control" | cut -d"'" -f2) installed"
  exit 0
fi
src=${MNEMO_CITUS_SRC:-../shared/vendor/citus}
archive=$src/citus-$VERSION.tar.gz
if [ ! -f "$archive" ]; then
  echo "mnemo citus: no $archive; install Citus's package (postgresql-15-citus-13.2) or set MNEMO_CITUS_SRC" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "mnemo citus: building Citus needs root (sudo make test-citus), or install postgresql-15-citus-13.2" >&2
  exit 1
fi
log "building Citus $VERSION from $archive (~2-4 min)"
export DEBIAN_FRONTEND=noninteractive
dpkg -s libzstd-dev liblz4-dev libkrb5-dev "postgresql-server-dev-${PG_MAJOR:-15}" >/dev/null 2>&1 \
  || { apt-get update -q >/dev/null; apt-get install -y -q libzstd-dev liblz4-dev libkrb5-dev "postgresql-server-dev-${PG_MAJOR:-15}" >/dev/null; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar xzf "$archive" -C "$work"
cd "$work/citus-$VERSION"
# PostgreSQL 15.20 exports have_createdb_privilege(), which Citus 13.2.2 also defines
# for older 15.x: guard Citus's copy by the minor version.
python3 - <<'PY'
p = 'src/include/pg_version_compat.h'
s = open(p).read()
if 'PG_VERSION_NUM < 150020' not in s:
    a = s.index('static inline bool\nhave_createdb_privilege(void)')
    b = s.index('typedef bool TU_UpdateIndexes;')
    open(p, 'w').write(s[:a] + '#if PG_VERSION_NUM < 150020\n' + s[a:b] + '#endif\n\n' + s[b:])
PY
./configure --without-libcurl PG_CONFIG="$PG_CONFIG" >/dev/null
make -j"$(nproc)" >/dev/null 2>&1
make install >/dev/null
log "citus $VERSION installed"
