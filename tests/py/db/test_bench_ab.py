"""bench/ab.py loads a plpy/ tree into its backend: the compile code that runs there must
be that tree's (an A/B of two trees that both ran the deployed copy would report
"identical" and "no difference" whatever the change), and a path that is not a tree is
refused before anything runs."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import ab  # bench/ab.py


def server_notice(conn, expression: str, *imports: str) -> str:
    """str() of a PL/Python expression, evaluated in the connection's backend."""
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    body = "\n".join(["plpy.execute('SELECT mnemo_internal.py_bootstrap()')", *imports,
                      f"plpy.notice(str({expression}))"])
    conn.execute(f"DO $$\n{body}\n$$ LANGUAGE plpython3u")
    return notices[-1]


def backend_module_file(conn) -> str:
    return server_notice(conn, "mnemo_db.compile.compiler.__file__", "import mnemo_db.compile.compiler")


def server_reads(tree: Path) -> bool:
    """Whether the server's OS user can read the tree's compile module."""
    with ab.connect() as conn:
        path = repr(str(tree / "mnemo_db" / "compile" / "compiler.py"))
        return server_notice(conn, f"os.access({path}, os.R_OK)", "import os") == "True"


@pytest.fixture
def server_readable_tree():
    """A copy of plpy/ where the server's OS user can read it (pytest's tmp_path is
    private to the user running the tests)."""
    top = Path(tempfile.mkdtemp(prefix="mnemo-ab-"))
    try:
        tree = top / "plpy"
        shutil.copytree(ROOT / "plpy", tree, ignore=shutil.ignore_patterns("__pycache__"))
        for d, _, files in os.walk(top):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        if not server_reads(tree):
            pytest.skip("the server does not see this machine's files (DATABASE_URL elsewhere)")
        yield tree
    finally:
        shutil.rmtree(top)


def test_a_loaded_tree_is_the_code_that_runs(server_readable_tree):
    tree = server_readable_tree
    with ab.connect(str(tree)) as conn:
        assert backend_module_file(conn).startswith(str(tree.resolve()) + "/")
    with ab.connect() as conn:  # a plain connection keeps the deployed copy
        assert not backend_module_file(conn).startswith(str(tree.parent))


def test_a_tree_the_server_cannot_read_is_an_error_not_a_silent_fallback(tmp_path):
    tree = tmp_path / "private" / "plpy"
    shutil.copytree(ROOT / "plpy", tree, ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(tmp_path / "private", 0o700)
    if server_reads(tree):
        pytest.skip("the server runs as this OS user: nothing here is private to it")
    with pytest.raises(psycopg.Error, match="can the server's OS user read it"):
        ab.connect(str(tree))


def test_a_path_without_the_package_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a plpy/ tree"):
        ab.connect(str(tmp_path))
