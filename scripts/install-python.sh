#!/usr/bin/env bash
# Builds the two Python environments Mnemosyne needs. Re-runs are quick: each step
# is skipped when its stamp matches the inputs.
#   .venv/            client, CLI, tests, benchmarks, and the reference embedding
#                     model (sentence-transformers on torch, CPU build)
#   $MNEMO_HOME/pylib modules that PL/Python imports inside the server (onnxruntime,
#                     tokenizers, regex; quicktok for its o200k vocabulary, from which
#                     plpy/mnemo_db/o200k_base.table is written: mnemo_db.tokens), and
#   $MNEMO_HOME/model the ONNX export of all-MiniLM-L6-v2 the server embeds with (its
#                     int8 weights: scripts/export_onnx.py).
# Both use the server's own interpreter (/usr/bin/python3) so that compiled wheels
# match the ABI of PL/Python.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MNEMO_HOME:?MNEMO_HOME must be set (the Makefile sets it)}"
PY=/usr/bin/python3
log() { printf '\033[1m[mnemo python]\033[0m %s\n' "$*"; }

venv_stamp=.venv/.mnemo-stamp
want_venv=$(sha256sum pyproject.toml scripts/install-python.sh | sha256sum | cut -c1-16)
if [ "$(cat "$venv_stamp" 2>/dev/null)" != "$want_venv" ]; then
  log "creating .venv with $($PY --version)"
  $PY -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  # torch first, pinned: the local CPU wheel. Anything else pulls CUDA packages.
  log "installing torch 2.13.0 (CPU) for the reference embedding model"
  .venv/bin/pip install -q torch==2.13.0
  log "installing the client package with its dev/test extras"
  .venv/bin/pip install -q -e '.[dev]'
  echo "$want_venv" > "$venv_stamp"
else
  log ".venv up to date"
fi

pylib_stamp=$MNEMO_HOME/pylib/.mnemo-stamp
want_pylib=$(sha256sum plpy/requirements.txt | cut -c1-16)
if [ "$(cat "$pylib_stamp" 2>/dev/null)" != "$want_pylib" ]; then
  log "installing PL/Python modules into $MNEMO_HOME/pylib"
  rm -rf "$MNEMO_HOME/pylib"
  .venv/bin/pip install -q --target "$MNEMO_HOME/pylib" -r plpy/requirements.txt
  echo "$want_pylib" > "$pylib_stamp"
else
  log "PL/Python modules up to date"
fi

m="$MNEMO_HOME/model"
if [ ! -f "$m/model.int8.onnx" ] || [ scripts/export_onnx.py -nt "$m/model.int8.onnx" ]; then
  log "exporting all-MiniLM-L6-v2 to ONNX in $m (model.onnx, and model.int8.onnx for the server)"
  .venv/bin/python scripts/export_onnx.py "$m"
  rm -f "$m"/model.prepacked.onnx* "$m"/model.mapped.onnx*  # the server model before int8
else
  log "ONNX model present"
fi
probe="$m/model.int8.onnx.probe"
# again after a new export or a new onnxruntime
if [ ! -f "$probe" ] || [ "$m/model.int8.onnx" -nt "$probe" ] || [ "$pylib_stamp" -nt "$probe" ]; then
  log "writing the server model's probe ($probe)"
  PYTHONPATH="plpy:$MNEMO_HOME/pylib" .venv/bin/python -m mnemo_db.embedding "$m"
fi
PYTHONPATH="plpy:$MNEMO_HOME/pylib" .venv/bin/python -m mnemo_db.tokens | sed 's/^/[mnemo python] /'
