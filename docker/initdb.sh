#!/usr/bin/env bash
# First start of the container: create the mnemo database and deploy Mnemosyne.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" -d postgres -c 'CREATE DATABASE mnemo'
cd /opt/mnemosyne
DATABASE_URL="postgresql://$POSTGRES_USER@/mnemo?host=/var/run/postgresql" scripts/deploy.sh
