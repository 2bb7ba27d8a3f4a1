# Mnemosyne on the official PostgreSQL image: pgvector, pg_cron, PL/Python, pgTAP, the
# in-database Python modules and the ONNX embedding model, and the schema, deployed by
# an init script on first start (docker/initdb.sh).
#   docker build -t mnemosyne . && docker run -p 5432:5432 -e POSTGRES_PASSWORD=secret mnemosyne
# Behind a mirror or a TLS-intercepting proxy (all optional):
#   --build-arg PIP_INDEX_URL=... PIP_EXTRA_INDEX_URL=... PIP_TRUSTED_HOST=... PIP_FIND_LINKS=...
#   --build-arg TORCH_INDEX_URL=...   where the CPU build of torch comes from (PyTorch's CPU
#                                     index by default; empty: from the package indexes above)
#   --secret id=ca_bundle,src=/path/to/ca.pem   CA certificates pip trusts besides its own
FROM postgres:15-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      postgresql-15-pgvector postgresql-15-cron postgresql-plpython3-15 postgresql-15-pgtap python3-venv \
 && rm -rf /var/lib/apt/lists/*

# Server-side modules (onnxruntime, tokenizers, regex, quicktok's vocabulary) and the ONNX export of
# all-MiniLM-L6-v2, before the rest of the code so that this slow layer stays cached.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
ARG PIP_FIND_LINKS=
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /opt/mnemosyne
COPY docker/build-python.sh docker/
COPY plpy/requirements.txt plpy/
COPY scripts/export_onnx.py scripts/
RUN --mount=type=secret,id=ca_bundle docker/build-python.sh /opt/mnemo

# The code the server runs (read-only to it) and what the deploy loads.
COPY plpy ./plpy
COPY scripts ./scripts
COPY sql ./sql
COPY cron ./cron
RUN mkdir -p /opt/mnemo/plpy && cp -r plpy/mnemo_db /opt/mnemo/plpy/ && python3 -m compileall -q /opt/mnemo/plpy
# The server model's probe (plpy/mnemo_db/embedding.py) and the token counter's o200k
# table, a file every backend maps instead of copying (tokens.py).
RUN PYTHONPATH=/opt/mnemo/plpy:/opt/mnemo/pylib python3 -m mnemo_db.embedding /opt/mnemo/model \
 && PYTHONPATH=/opt/mnemo/plpy:/opt/mnemo/pylib python3 -m mnemo_db.tokens
COPY docker/initdb.sh /docker-entrypoint-initdb.d/50-mnemosyne.sh
COPY docker/healthcheck.sh /usr/local/bin/mnemo-healthcheck

# The entrypoint creates POSTGRES_DB; the deploy points the server at the image's code.
ENV POSTGRES_DB=mnemo MNEMO_PYTHON_PATH=/opt/mnemo/plpy:/opt/mnemo/pylib MNEMO_MODEL_DIR=/opt/mnemo/model
HEALTHCHECK --interval=5s --start-period=600s CMD ["mnemo-healthcheck"]
