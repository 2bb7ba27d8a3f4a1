"""scripts/deploy.sh points the server at its Python code and model only where that is
right (issue 25, defect 2). A server whose code is already installed (a container, a
server deployed from another machine) keeps its paths when a checkout deploys to it:
the checkout's folders do not exist there. Paths given explicitly are checked by a
fresh backend before the server is switched to them."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from conftest import DSN

ROOT = Path(__file__).resolve().parents[3]


def server_paths() -> tuple[str, str]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return conn.execute(
            "SELECT mnemo_internal.setting('python_path') #>> '{}', mnemo_internal.setting('model_dir') #>> '{}'"
        ).fetchone()


def set_server_paths(py_path: str, model_dir: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        for key, value in (("python_path", py_path), ("model_dir", model_dir)):
            conn.execute("UPDATE mnemo_internal.settings SET value = to_jsonb(%s::text) WHERE key = %s",
                         (value, key))


def embeds_in_a_fresh_backend() -> bool:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return conn.execute("SELECT vector_dims(mnemo.embed('a fresh backend'))").fetchone()[0] == 384


def deploy(**env: str) -> subprocess.CompletedProcess:
    """scripts/deploy.sh into the test database, as from another checkout: only the
    variables given here (none of the Makefile's local-cluster ones)."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("MNEMO_HOME", "MNEMO_LOCAL_CLUSTER", "MNEMO_PYTHON_PATH", "MNEMO_MODEL_DIR")}
    return subprocess.run([str(ROOT / "scripts" / "deploy.sh")], env={**base, "DATABASE_URL": DSN, **env},
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture()
def installed_paths():
    """The server's paths as deployed; put back whatever a test's deploy did to them."""
    before = server_paths()
    assert all(before), f"the server's code is not deployed: {before}"
    yield before
    set_server_paths(*before)


def test_a_deploy_from_another_checkout_keeps_the_servers_installed_code(installed_paths, tmp_path):
    client_home = tmp_path / "client-home"  # folders of a client the server does not see
    run = deploy(MNEMO_HOME=str(client_home))
    assert run.returncode == 0, run.stderr
    assert server_paths() == installed_paths
    assert embeds_in_a_fresh_backend()


def test_given_paths_the_server_cannot_use_are_refused_and_nothing_changes(installed_paths, tmp_path):
    run = deploy(MNEMO_PYTHON_PATH=str(tmp_path / "no-code"), MNEMO_MODEL_DIR=str(tmp_path / "no-model"))
    assert run.returncode != 0
    assert "cannot run the code" in run.stderr
    assert server_paths() == installed_paths
    assert embeds_in_a_fresh_backend()


def test_given_paths_the_server_can_use_are_set(installed_paths):
    py_path, model_dir = installed_paths
    # the same directories, spelt differently, so that the change shows
    given = (py_path + ":", model_dir.rstrip("/") + "/")
    run = deploy(MNEMO_PYTHON_PATH=given[0], MNEMO_MODEL_DIR=given[1])
    assert run.returncode == 0, run.stderr
    assert server_paths() == given
    assert embeds_in_a_fresh_backend()


def test_a_released_migration_that_changed_stops_the_deploy():
    """Issue 21 (4): editing a migration that has run was a warning, and the deploy went
    on with a schema the file no longer describes."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        (ran,) = conn.execute("SELECT sha256 FROM mnemo_internal.schema_migrations"
                              " WHERE version = '0001_schema'").fetchone()
        conn.execute("UPDATE mnemo_internal.schema_migrations SET sha256 = 'edited' WHERE version = '0001_schema'")
        try:
            run = deploy()
        finally:
            conn.execute("UPDATE mnemo_internal.schema_migrations SET sha256 = %s WHERE version = '0001_schema'",
                         (ran,))
    assert run.returncode == 1
    assert "migration 0001_schema changed since it ran" in run.stderr


def test_a_listed_comment_revision_of_a_released_migration_is_accepted():
    """A released migration whose comments alone were revised (sql/migrations/
    revisions.txt: the hash it ran with, the hash of the file now) deploys, and the
    ledger takes the new hash; an unlisted change still stops the deploy (above)."""
    lines = [ln.split() for ln in (ROOT / "sql/migrations/revisions.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    version, old, new = lines[-1][:3]
    assert new == hashlib.sha256((ROOT / f"sql/migrations/{version}.sql").read_bytes()).hexdigest()
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("UPDATE mnemo_internal.schema_migrations SET sha256 = %s WHERE version = %s", (old, version))
        run = deploy()
        (recorded,) = conn.execute("SELECT sha256 FROM mnemo_internal.schema_migrations WHERE version = %s",
                                   (version,)).fetchone()
        conn.execute("UPDATE mnemo_internal.schema_migrations SET sha256 = %s WHERE version = %s", (new, version))
    assert run.returncode == 0, run.stderr
    assert f"migration {version}: revised comments recorded" in run.stdout
    assert recorded == new


ROUTINES = sorted((ROOT / "sql" / "functions").glob("*.sql"))
PRELUDE = "'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')\n"


def test_routine_files_leave_signature_changes_to_the_migrations():
    """Issue 21 (4): the deploy runs the migrations first, so a routine file never
    drops an older signature of itself (a DO block on every deploy)."""
    assert [f.name for f in ROUTINES if re.search(r"^DO\b", f.read_text(), re.MULTILINE)] == []


def test_every_plpython_body_that_imports_mnemo_db_starts_with_the_prelude():
    bodies = [(f.name, body) for f in ROUTINES if "plpython3u" in f.read_text()
              for body in re.findall(r"^AS \$\$\n(.*?)^\$\$;", f.read_text(), re.MULTILINE | re.DOTALL)]
    assert len(bodies) >= 14
    assert [name for name, body in bodies if "mnemo_db" in body and not body.startswith(PRELUDE)
            and "py_bootstrap" not in name] == []


def test_each_listed_sweep_has_its_batch_and_its_pg_cron_job():
    """Issue 21 (2): the sweeps are listed once (mnemo_internal.sweeps()); run_sweep,
    sweep_py and cron/jobs.sql read that list, so none can miss a sweep."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('cron.job')").fetchone()[0] is None:
            pytest.skip("pg_cron is not installed in this database")
        rows = conn.execute(
            "SELECT s.sweep, s.python, j.command,"
            " to_regprocedure(format('mnemo_internal.sweep_%s(timestamptz, text, integer, jsonb)', s.sweep))"
            " IS NOT NULL FROM mnemo_internal.sweeps() AS s"
            " LEFT JOIN cron.job AS j ON j.jobname = 'mnemo-' || replace(s.sweep, '_', '-')").fetchall()
    from mnemo_db.lifecycle.sweeps import Sweeps
    assert len(rows) >= 9
    for sweep, python, command, sql_batch in rows:
        assert (command or "").startswith(f"CALL mnemo.run_sweep('{sweep}'"), sweep
        assert (hasattr(Sweeps, f"{sweep}_batch"), sql_batch) == ((True, False) if python else (False, True)), sweep


def test_applications_keep_the_api_while_a_deploy_runs(installed_paths):
    """grants.sql revokes every privilege of the project roles, then grants each back;
    a deploy runs it in one transaction, so neither an application nor the API routines (which run as mnemo_api_owner) is ever refused
    in between (run statement by statement, a live server's clients got 'permission
    denied for function' during every deploy)."""
    import threading

    refused: list[str] = []
    done = threading.Event()

    def watch() -> None:
        with psycopg.connect(DSN, autocommit=True) as conn:
            while not done.is_set():
                ok = conn.execute("SELECT has_function_privilege('mnemo_app', 'mnemo.embed(text)', 'EXECUTE') "
                                  "AND has_function_privilege('mnemo_api_owner', 'mnemo_internal.enter_tenant(text)', "
                                  "'EXECUTE')").fetchone()[0]
                if not ok:
                    refused.append("refused")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = deploy()
    finally:
        done.set()
        watcher.join()
    assert result.returncode == 0, result.stderr
    assert not refused, f"the API was refused {len(refused)} times during the deploy"
