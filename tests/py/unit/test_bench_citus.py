"""bench/citus.py's arithmetic (make bench-citus): the projection of calls/s for N
workers from the CPU a call costs its worker and the coordinator, and the CPU a
server used, counted with the children that exited in between (reaped by the
postmaster), so that the per-call figure cannot go negative or lose them."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import citus  # bench/citus.py


def test_projection_grows_with_the_workers_until_the_coordinator_caps_it():
    # a worker's call 20 ms on 2 cores: 100 calls/s a worker; the coordinator's 1 ms on
    # 4 cores: 4000 calls/s, reached at 40 workers
    p = citus.projection(1.0, 20.0, 10.0, 2, 4, workers=(1, 2, 8, 32, 40, 64))
    assert p["calls_per_s"] == {"1": 100.0, "2": 200.0, "8": 800.0, "32": 3200.0, "40": 4000.0, "64": 4000.0}
    assert p["single_node_calls_per_s"] == 200.0
    assert p["coordinator_cap_calls_per_s"] == 4000.0
    assert p["coordinator_bound_from"] == 40


def test_projection_without_coordinator_cpu_has_no_cap():
    p = citus.projection(0.0, 25.0, 10.0, 4, 4, workers=(1, 1000))
    assert p["calls_per_s"] == {"1": 160.0, "1000": 160000.0}
    assert p["coordinator_cap_calls_per_s"] is None and p["coordinator_bound_from"] is None


def test_node_cpu_keeps_the_cpu_of_a_child_that_exited(tmp_path):
    # this process as the 'postmaster': a child burns CPU and exits (reaped by
    # subprocess.run) between the two readings, as a Citus connection or a pg_cron
    # run does between the bench's
    (tmp_path / "postmaster.pid").write_text(f"{os.getpid()}\n")
    before = citus.node_cpu(tmp_path)
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert citus.node_cpu(tmp_path) - before >= 0.45
