-- mnemo_internal.py_bootstrap() -> void
-- PL/Python prelude, run once per backend by every PL/Python function before it
-- imports anything: puts the directories of mnemo.python_path (the plpy/ package and
-- the modules installed for the server, set by the deploy) on sys.path.
-- Raises MN011 when mnemo.python_path is not set or mnemo_db cannot be imported.
CREATE OR REPLACE FUNCTION mnemo_internal.py_bootstrap()
RETURNS void
LANGUAGE plpython3u
VOLATILE
SET search_path = pg_catalog, public, pg_temp
AS $$
if GD.get('mnemo_ready'):
    return
import sys
path = plpy.execute("SELECT current_setting('mnemo.python_path', true) AS p")[0]['p']
if not path:
    plpy.error('mnemo.python_path is not set', sqlstate='MN011',
               hint='Run the deploy (make up), or ALTER DATABASE ... SET mnemo.python_path')
for d in reversed(path.split(':')):
    if d and d not in sys.path:
        sys.path.insert(0, d)
try:
    import mnemo_db  # noqa: F401
except ImportError as e:
    plpy.error(f'cannot import mnemo_db from mnemo.python_path={path}: {e}', sqlstate='MN011')
GD['mnemo_ready'] = True
$$;

COMMENT ON FUNCTION mnemo_internal.py_bootstrap() IS
'Puts mnemo.python_path on sys.path for PL/Python (once per backend).';
