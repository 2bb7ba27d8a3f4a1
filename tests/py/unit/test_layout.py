"""plpy/ stays readable: each package keeps its SQL in its statements.py, and no
module grows past what a reader takes in at once (issue 41: extract.py had reached
777 lines, paging/store.py 711)."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
PLPY = ROOT / "plpy" / "mnemo_db"
MAX_LINES = 700


def test_no_module_is_over_700_lines():
    long = {str(p.relative_to(ROOT)): n for p in PLPY.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_each_package_that_runs_sql_has_its_statements_module():
    for package in ("compile", "paging", "formation", "lifecycle"):
        assert (PLPY / package / "statements.py").is_file(), package
