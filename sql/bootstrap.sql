-- Bootstrap, run on every deploy before anything else: extensions, schemas, the
-- application role, the migration ledger and deploy-time settings. Idempotent.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS pgcrypto;
CREATE EXTENSION IF NOT EXISTS plpython3u;

-- mnemo: the public API and the data tables; mnemo_internal: helpers and ledgers.
CREATE SCHEMA IF NOT EXISTS mnemo;
CREATE SCHEMA IF NOT EXISTS mnemo_internal;
REVOKE ALL ON SCHEMA mnemo_internal FROM public;

-- Applications log in as a member of mnemo_app (docs/architecture.md, "Tenants, roles and security").
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mnemo_app') THEN
        CREATE ROLE mnemo_app NOLOGIN;
    END IF;
    -- The API routines run as this role (sql/grants.sql): it holds the table
    -- privileges the application role does not, and row-level security binds it.
    -- No one logs in as it or is granted it.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mnemo_api_owner') THEN
        CREATE ROLE mnemo_api_owner NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
    END IF;
END
$$;

-- Run-once migrations are recorded here with the hash of the file that ran.
CREATE TABLE IF NOT EXISTS mnemo_internal.schema_migrations (
    version text PRIMARY KEY,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Deploy-time and runtime settings (key -> jsonb). Defaults live in
-- sql/settings.sql; an operator changes them with mnemo.set_setting().
CREATE TABLE IF NOT EXISTS mnemo_internal.settings (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    description text NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The project's SQLSTATEs, one class 'MN'. Filled by sql/error_codes.sql; the Python
-- client maps each code to an exception class (a test checks the two agree).
CREATE TABLE IF NOT EXISTS mnemo_internal.error_codes (
    sqlstate text PRIMARY KEY CHECK (sqlstate ~ '^MN[0-9]{3}$'),
    name text NOT NULL UNIQUE,
    description text NOT NULL
);
