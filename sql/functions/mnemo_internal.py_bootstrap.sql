-- mnemo_internal.py_bootstrap() -> void
-- PL/Python prelude, run once per backend: puts the directories of the python_path
-- setting (the plpy/ package and the modules installed for the server, set by the
-- deploy) on sys.path. Every PL/Python body that imports mnemo_db starts with
--     'mnemo_ready' in GD or plpy.execute('SELECT mnemo_internal.py_bootstrap()')
-- and then imports what it needs (tests/py/test_deploy.py checks the bodies).
-- The path is a row of mnemo_internal.settings, which only the owner can change: a
-- GUC would let any role point the server's Python at its own files.
-- Raises MN011 when python_path is not set or mnemo_db cannot be imported.
CREATE OR REPLACE FUNCTION mnemo_internal.py_bootstrap()
RETURNS void
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
if GD.get('mnemo_ready'):
    return
import sys
path = plpy.execute("SELECT mnemo_internal.setting('python_path') #>> '{}' AS p")[0]['p']
if not path:
    plpy.error('the python_path setting is empty', sqlstate='MN011',
               hint='Run the deploy (make up) with MNEMO_HOME or MNEMO_PYTHON_PATH set')
for d in reversed(path.split(':')):
    if d and d not in sys.path:
        sys.path.insert(0, d)
try:
    import mnemo_db  # noqa: F401
except ImportError as e:
    plpy.error(f'cannot import mnemo_db from python_path={path}: {e}', sqlstate='MN011')
GD['mnemo_ready'] = True
$$;

COMMENT ON FUNCTION mnemo_internal.py_bootstrap() IS
'Puts the python_path setting on sys.path for PL/Python (once per backend).';
