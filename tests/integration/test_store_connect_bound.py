"""A store whose process is frozen still accepts connections in its kernel and never
answers; torch's TCPStore client constructor then waits for ever. The launcher's connect
must still give up at its deadline (a follower of a frozen successor, a peer of a node 0
frozen at start)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.torch]

# Runs in a child that ends with os._exit: the abandoned connection thread must not be
# woken by the listening socket's close during interpreter teardown.
PROBE = """
import os, socket, time
from slurm_ft.launch.rendezvous import stores
silent = socket.socket()
silent.bind(("127.0.0.1", 0))
silent.listen(16)  # accepts in the kernel, never answers: a frozen store host
port = silent.getsockname()[1]
start = time.monotonic()
try:
    stores.connect("127.0.0.1", port, deadline=start + 3.0, op_timeout=1.0,
                   abort=lambda: False, sleep=time.sleep, attempt=1.0)
    outcome = "connected"
except stores.StoreLost:
    outcome = "lost"
print(outcome, round(time.monotonic() - start, 2), flush=True)
os._exit(0)
"""


@pytest.mark.timeout(120)
def test_connect_to_a_store_that_never_answers_ends_at_its_deadline():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=90)
    outcome, took = done.stdout.split()
    assert outcome == "lost", done.stderr[-2000:]
    # deadline 3 s, plus at most one attempt's grace (1 s) and the last attempt's slice
    assert 3.0 <= float(took) <= 3.0 + 1.0 + 1.0 + 1.5, done.stdout
