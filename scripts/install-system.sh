#!/usr/bin/env bash
# Installs the system packages Mnemosyne needs on Debian 12 (as root), and builds
# pgvector 0.8 from Debian's source package (Debian 12 ships no binary package).
# Safe to re-run: every step is skipped when its result is already present.
set -euo pipefail

PGV=${PG_MAJOR:-15}
log() { printf '\033[1m[mnemo install]\033[0m %s\n' "$*"; }

need=()
for p in "postgresql-$PGV" "postgresql-$PGV-cron" "postgresql-plpython3-$PGV" \
         "postgresql-$PGV-pgtap" libtap-parser-sourcehandler-pgtap-perl \
         "postgresql-server-dev-$PGV" postgresql-contrib dpkg-dev build-essential python3-venv; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done

if [ "$(id -u)" != 0 ] && { [ ${#need[@]} -gt 0 ] || [ ! -f "/usr/share/postgresql/$PGV/extension/vector.control" ]; }; then
  echo "mnemo install: missing system packages (${need[*]:-pgvector}); run 'make up' as root once" >&2
  exit 1
fi

if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
else
  log "system packages present"
fi

if [ -f "/usr/share/postgresql/$PGV/extension/vector.control" ] \
   && ls "/usr/share/postgresql/$PGV/extension/" | grep -q '^vector--0\.8'; then
  log "pgvector present"
else
  # Source-only entry for the newer Debian release: never a 'deb' line (that would
  # upgrade libc and half the system to trixie).
  src=/etc/apt/sources.list.d/mnemo-trixie-src.sources
  if [ ! -f "$src" ]; then
    log "adding deb-src entry for trixie (source packages only)"
    cat > "$src" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -q
  fi
  work=$(mktemp -d)
  log "building pgvector from Debian's source package in $work"
  (cd "$work" && apt-get source -q pgvector >/dev/null \
     && cd pgvector-*/ && make -s PG_CONFIG="/usr/lib/postgresql/$PGV/bin/pg_config" \
     && make -s install PG_CONFIG="/usr/lib/postgresql/$PGV/bin/pg_config")
  rm -rf "$work"
  log "pgvector installed"
fi
