"""The NIC monitor on a real kernel link: a veth pair taken down while the monitor samples it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.netns import IP, ip, operstate, veth_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("nicmonitor_probe.py")


def test_link_taken_down_while_sampling_is_a_fatal_named_event(netns):
    a, b = "mon-a", "mon-b"
    veth_up(netns, a, b, "10.214.0")
    wait_until(lambda: operstate(netns, a) == "up", 10, message=f"{a} operstate up")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [IP, "netns", "exec", netns, sys.executable, str(PROBE), a],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else "no output"
        assert json.loads(first) == {"up": {a: True}}
        assert ip("-n", netns, "link", "set", a, "down").returncode == 0
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, err
    (event,) = [json.loads(line) for line in out.splitlines()]
    assert event == {"port": a, "change": "down", "message": f"NIC {a} went down (operstate down, carrier -)"}
