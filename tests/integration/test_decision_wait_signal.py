"""A peer that receives SIGTERM while it waits for node 0's decision leaves at once (issue 45):
its store waits are no longer cut into 0.2 s slices to notice a signal, so the signal must
be noticed without them."""

from __future__ import annotations

import signal
import time

import pytest

from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from tests.integration.launch_cluster import ECHO, SimJob
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch

BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05"]


@pytest.mark.timeout(90)
def test_sigterm_while_waiting_for_the_decision_exits_143_within_the_look_period(tmp_path):
    # Node 2 of 3 never starts: node 0 waits for its join, node 1 for node 0's decision.
    job = SimJob(tmp_path, 3, BASE, [str(ECHO), "--out", str(tmp_path / "out"), "--forever"])
    job.start(only=[0, 1])
    try:
        wait_until(lambda: "joined rendezvous store" in job.node(1).err(), 60, message=job.dump())
        sealer = Sealer((job.state / "job_secret").read_bytes().strip())
        store = Client.connect(
            "127.0.0.1",
            job.port,
            Keys(f"{job.job_id}-a0", sealer.namespace),
            deadline=time.monotonic() + 30,
            op_timeout=10.0,
            abort=lambda: False,
            sleep=time.sleep,
            sealer=sealer,
        )
        wait_until(lambda: store.joined(0, [1]), 30, message="node 1's join\n" + job.dump())
        signalled = time.monotonic()
        job.node(1).proc.send_signal(signal.SIGTERM)
        wait_until(lambda: job.node(1).proc.poll() is not None, 10, message="node 1 exit\n" + job.dump())
        # Noticed within 50 ms; the exit then waits for its ack to node 0, which queues
        # behind the store wait it gave up on: at most one look period (1 s for 3 nodes).
        assert time.monotonic() - signalled < 3.0
        assert job.node(1).proc.returncode == 143
        assert "received SIGTERM between cycles; exiting 143" in job.node(1).err()
    finally:
        job.kill()
