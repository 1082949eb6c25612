"""Node 0's open-files limit against the store connections of a big job (issue 45).

Real launcher processes started with the limits Slurm would hand them (``setrlimit`` in
the child before it runs): a soft limit of 1,024 under a high hard limit is raised and the
store keeps accepting past 1,024 connections; a hard limit too low for the job is said in
one line, exit 2, before any worker starts.
"""

from __future__ import annotations

import datetime
import re
import resource
import socket
from pathlib import Path

import pytest

from slurm_ft.launch.rendezvous.background import STORE_CONNECTIONS
from slurm_ft.launch.rendezvous.openfiles import needed
from tests.integration.launch_cluster import ECHO, SimJob
from tests.support.waiting import wait_until

NODE0 = "127.0.1.1"


def _limits(soft: int, hard: int):  # type: ignore[no-untyped-def]
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def _soft_limit(pid: int) -> int:
    text = Path(f"/proc/{pid}/limits").read_text()
    found = re.search(r"^Max open files\s+(\d+)\s+(\d+)", text, re.M)
    assert found, text
    return int(found.group(1))


def test_hard_limit_too_low_is_one_line_and_exit_2(tmp_path: Path) -> None:
    n = 2048
    need = needed(n, STORE_CONNECTIONS)
    job = SimJob(tmp_path, n, ["--nproc-per-node", "1"], [str(ECHO), "hi"], preexec_fn=_limits(1024, 4096))
    job.start(only=[0])
    try:
        assert job.wait(60) == [2], job.dump()
    finally:
        job.kill()
    lines = job.node(0).err().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("slurm-ft-launch: error: node 0 needs "), lines
    assert f"needs {need} open files" in lines[0] and f"ulimit -n {need}" in lines[0], lines
    assert "open-files limit is 4096" in lines[0], lines
    assert "hi" not in job.node(0).out()  # no worker ran
    assert not (job.state / "cycles").exists()
    job.assert_no_orphans()


def test_soft_limit_is_raised_and_node0_accepts_past_it(tmp_path: Path) -> None:
    """Node 0 of a 400-node job starts with soft 1,024: it raises the limit, and the store
    still answers a client once 1,100 other connections are held to it."""
    own_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 65536 if own_hard == resource.RLIM_INFINITY else min(65536, own_hard)
    if hard < 4096:
        pytest.skip(f"this test runner's hard open-files limit is {hard}")
    job = SimJob(tmp_path, 400, ["--nproc-per-node", "1"], [str(ECHO), "hi"], preexec_fn=_limits(1024, hard))
    job.start(only=[0])
    held: list[socket.socket] = []
    try:
        wait_until(lambda: "listening on port" in job.node(0).err(), 60, message="node 0's store")
        assert f"open-files limit raised from 1024 to {hard}" in job.node(0).err()
        assert _soft_limit(job.node(0).proc.pid) == hard
        for _ in range(1100):
            held.append(socket.create_connection((NODE0, job.port), timeout=10))
        import torch.distributed as dist

        store = dist.TCPStore(NODE0, job.port, None, False, datetime.timedelta(seconds=20), use_libuv=True)
        store.set("scale-test/probe", "1")
        assert store.get("scale-test/probe") == b"1"
        assert job.node(0).proc.poll() is None, job.dump()
    finally:
        for s in held:
            s.close()
        job.kill()
    job.assert_no_orphans()
