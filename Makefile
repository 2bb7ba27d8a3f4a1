# Mnemosyne. `make up` brings it up and shows it working; `make test` runs the tests.
# With DATABASE_URL set, everything targets that server and no local cluster starts.
SHELL := /bin/bash
.DEFAULT_GOAL := help

MNEMO_HOME ?= $(shell scripts/mnemo-home.sh)
MNEMO_PORT ?= 55432
LOCAL_URL := postgresql://postgres@127.0.0.1:$(MNEMO_PORT)/mnemo
export MNEMO_HOME MNEMO_PORT
ifeq ($(strip $(DATABASE_URL)),)
  export DATABASE_URL := $(LOCAL_URL)
  export MNEMO_LOCAL_CLUSTER := 1
  LOCAL := 1
else
  unexport MNEMO_LOCAL_CLUSTER
endif
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: help up down psql test deploy setup system python cluster sample \
        test-sql test-py test-unit lint test-docker test-citus bench-embed bench-locomo bench-longmemeval \
        bench-extraction bench-self-statements \
        bench-context bench-ab bench-trust bench-peers bench-replay bench-proxy bench-first-compile bench-ingest \
        bench-citus bench-floors bench-formation clean

help:
	@echo "make up          install what is missing, start the local cluster, deploy, show a sample"
	@echo "make test        the same setup, deploy twice, pgTAP + pytest + sqlfluff"
	@echo "make down        stop the local cluster;  make psql: psql on it"
	@echo "make test-citus  the suite on a local Citus cluster: coordinator + 2 workers (ARGS=--smoke: a few minutes)"
	@echo "make test-docker build the image, run it, make test against it, restart, redeploy (~20 min)"
	@echo "make bench-embed embedding benchmark"
	@echo "make bench-locomo LoCoMo evidence recall vs last-n, vector and full-text baselines"
	@echo "make bench-longmemeval the same on LongMemEval_S: evidence per budget, recall_any/all@5/10 per type"
	@echo "make bench-extraction extraction vs LoCoMo's human observations: recall, precision, memories/turn"
	@echo "make bench-self-statements what a user says about themselves (labelled set): recall, precision; no server"
	@echo "make bench-context compile_context latency at scale (1,000 tenants, 1M messages)"
	@echo "make bench-first-compile a session's first compile over a freshly written 500-turn history vs warm"
	@echo "make bench-ab ARGS='main=/tmp/main/plpy new=plpy'  same output? faster? (on the bench-context corpus)"
	@echo "make bench-trust reliability suite: isolation, fuzz, secrets, load, crash (one JSON line)"
	@echo "make bench-peers Mnemosyne beside Mem0 and LangGraph on LoCoMo (own venv: .venv-peers)"
	@echo "make bench-replay recorded agent sessions replayed at 32k/128k: reduction, faults, misses"
	@echo "make bench-proxy the proxy before a model-like provider (0.5 s to first token, 50 tokens/s), 1/8/32 sessions x 20 turns: added TTFB, CPU per call, job lag (one JSON line)"
	@echo "make bench-citus a single node against coordinator + 2 workers (scripts/citus.sh): compile p50/p95, CPU per call split, ingest, projection for N workers, a rebalance under writes (one JSON line)"
	@echo "make bench-ingest record_message / record_messages vs a raw INSERT, 1 and 8 connections; mnemo import (ARGS=--profile 600: where the time goes)"
	@echo "make bench-formation an extract job's CPU with its memory lookups per batch vs per candidate (one JSON line)"
	@echo "make bench-floors issue 43's floors: the product table's own INSERT vs a raw one (each index's cost), PostgreSQL's work a managed call, a bare relay (one JSON line)"
	@echo "DATABASE_URL=... make up|test   use an existing server instead of the local cluster"

system:
	@if [ "$$(id -u)" = 0 ]; then scripts/install-system.sh; \
	 else echo "[mnemo] not root: skipping apt/pgvector install (run 'sudo make system' once)"; fi

python: system
	@scripts/install-python.sh

cluster: system
ifdef LOCAL
	@scripts/cluster.sh init
	@scripts/cluster.sh start
endif

setup: python cluster

deploy: setup
	@scripts/deploy.sh

up: deploy
	@$(PY) -m mnemosyne.demo

down:
	@scripts/cluster.sh stop

psql:
	@psql "$(DATABASE_URL)"

test: deploy
	@echo "[mnemo test] second deploy (re-runs must be harmless)"
	@scripts/deploy.sh
	@$(MAKE) --no-print-directory test-sql test-py lint

test-sql:
	@echo "[mnemo test] pgTAP"
	@psql "$(DATABASE_URL)" -Xqc 'SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS pgtap'
	@pg_prove --dbname "$(DATABASE_URL)" --ext .sql -r tests/sql

test-py:
	@echo "[mnemo test] pytest"
	@$(PY) -m pytest -q tests/py

# The tests that need no database (tests/py/unit/).
test-unit:
	@$(PY) -m pytest -q tests/py/unit

# Citus (scripts/test-citus.sh): builds Citus if missing, three local clusters, deploy, suite.
test-citus: python
	@scripts/test-citus.sh $(ARGS)

# The container route (Docker or Podman): see scripts/test-docker.sh. Not part of .ci/run.
test-docker:
	@scripts/test-docker.sh

lint:
	@echo "[mnemo test] sqlfluff + ruff"
	@$(VENV)/bin/sqlfluff lint sql/ cron/ --dialect postgres --processes 2 --disable-progress-bar
	@$(VENV)/bin/ruff check src plpy tests bench scripts

bench-embed: deploy
	@$(PY) bench/embed.py

# ARGS: --conversations N --questions N --baseline-plpy DIR (see bench/locomo.py)
bench-locomo: deploy
	@$(PY) bench/locomo.py $(ARGS)

# ARGS: --questions N (spread over the types) --types T1,T2 --data PATH --recall-index
# --baseline-plpy DIR (another build's plpy/ copy, scored beside this one; see bench/longmemeval.py)
bench-longmemeval: deploy
	@$(PY) bench/longmemeval.py $(ARGS)

# ARGS: --conversations N --sessions N --llm-url URL --calibrate (see bench/extraction.py)
bench-extraction: deploy
	@$(PY) bench/extraction.py $(ARGS)

# bench/data/self_statements.jsonl through the offline extractor: no server needed.
bench-self-statements: python
	@$(PY) bench/self_statements.py $(ARGS)

# First run builds the corpus (resumable); later runs only measure. ARGS=--small: 50 tenants.
bench-context: deploy
	@$(PY) bench/context.py $(ARGS)

# Two plpy/ trees on the bench-context corpus: identical contexts, then interleaved timing.
# ARGS: --histories N (LongMemEval histories, default 16; see bench/first_compile.py)
bench-first-compile: deploy
	@$(PY) bench/first_compile.py $(ARGS)

bench-ab: deploy
	@$(PY) bench/ab.py $(ARGS)

# Isolation matrix, fuzz (100k inputs), secrets scan, 32-client load, postmaster kills.
bench-trust: deploy
	@$(PY) bench/trust.py $(ARGS)

# Mem0 and LangGraph live in .venv-peers, so the project's own dependencies stay lean.
bench-peers: deploy
	@scripts/install-peers.sh
	@.venv-peers/bin/python bench/peers.py $(ARGS)

# Recorded agent sessions replayed as a proxy sees them (bench/replay.py; docs/replay.md):
# the shared SWE-agent trajectories and one generated long session's first 100 calls.
REPLAY_ARGS ?= --generated 1 --max-calls 100
bench-replay: deploy
	@$(PY) bench/replay.py $(REPLAY_ARGS) $(ARGS)

# ARGS: --levels 1,8,32 --rounds 20 --first-delay 0.5 --tokens-per-s 50 --relay (see bench/proxy.py)
bench-proxy: deploy
	@$(PY) bench/proxy.py $(ARGS)

# ARGS: --messages N --workers 1,8 --batch TURNS --import-conversations N --profile N (see bench/ingest.py)
bench-ingest: deploy
	@$(PY) bench/ingest.py $(ARGS)

# Floors under issue 43's goals: the table's own INSERT against a raw one, PostgreSQL's
# work a managed call without the proxy, a bare relay. ARGS: --parts ingest,call,relay
# --messages N --history N --calls N --relay-calls N (see bench/floors.py)
bench-floors: deploy
	@$(PY) bench/floors.py $(ARGS)

# An extract job's lookups per batch against per candidate, in one run (ABBA, rolled
# back). ARGS: --pool N --sessions N --reps N (see bench/formation.py)
bench-formation: deploy
	@$(PY) bench/formation.py $(ARGS)

# ARGS: --conversations N --calls N --writers N --no-rebalance (see bench/citus.py)
bench-citus: deploy
	@scripts/bench-citus.sh $(ARGS)

clean: down
	rm -rf "$(MNEMO_HOME)" $(VENV)
