"""Node 0's open-files limit against the store connections of a big job (issue 45).

Node 0 is a real launcher process started with the limits Slurm would hand it
(``setrlimit`` in the child before it runs): with a soft limit of 1,024 under a hard one
of 65,536 it raises the limit and rendezvouses 2,048 launchers (the 2,047 peers: threads
of a few processes running our connect, join and decision code, ``scale_peers.py``); a
hard limit too low for the job is said in one line, exit 2, before any worker starts.
"""

from __future__ import annotations

import itertools
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.rendezvous.background import STORE_CONNECTIONS
from slurm_ft.launch.rendezvous.openfiles import needed
from tests.integration.launch_cluster import ECHO, SimJob, clean_env
from tests.support.waiting import wait_until

N = 2048
PEER_PROCESSES = 8  # 256 launchers each: 512 to a process took minutes to connect (the GIL)
PEERS = Path(__file__).with_name("scale_peers.py")


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
    need = needed(N, STORE_CONNECTIONS)
    job = SimJob(tmp_path, N, ["--nproc-per-node", "1"], [str(ECHO), "hi"], preexec_fn=_limits(1024, 4096))
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


@pytest.mark.heavy  # 2,047 launchers' threads: the other worker's launchers miss heart-beats beside it
@pytest.mark.timeout(300)
def test_soft_limit_is_raised_and_node0_rendezvouses_2048_launchers(tmp_path: Path) -> None:
    """8 s on the shared 2-core machine; 41 s before the launchers gave torch's reverse
    lookup of each connection one second (resolver.py, docs/design/scale.md)."""
    own_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 65536 if own_hard == resource.RLIM_INFINITY else min(65536, own_hard)
    if hard < needed(N, STORE_CONNECTIONS):
        pytest.skip(f"this test runner's hard open-files limit is {hard}")
    secret = {"SLURM_FT_JOB_SECRET": "the 2,048-launcher test's job secret, 32+ bytes"}
    quiet = {"SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": "600"}  # the peers beat once: none counts as lost
    job = SimJob(
        tmp_path,
        N,
        ["--nproc-per-node", "1"],
        [str(ECHO)],
        preexec_fn=_limits(1024, hard),
        extra_env={**secret, **quiet},
    )
    job.start(only=[0])
    peers: list[subprocess.Popen[bytes]] = []
    try:
        wait_until(lambda: "listening on port" in job.node(0).err(), 60, message="node 0's store")
        assert f"open-files limit raised from 1024 to {hard}" in job.node(0).err()
        assert _soft_limit(job.node(0).proc.pid) == hard
        env = {**clean_env(), **secret, "TORCH_CPP_LOG_LEVEL": "FATAL"}
        bounds = [1 + k * (N - 1) // PEER_PROCESSES for k in range(PEER_PROCESSES + 1)]
        for a, b in itertools.pairwise(bounds):
            cmd = [sys.executable, str(PEERS), "4242-a0", str(job.port), str(N), str(a), str(b)]
            peers.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        docs = [json.loads(p.communicate(timeout=240)[0].decode().splitlines()[-1]) for p in peers]
        assert [e for d in docs for e in d["errors"]] == []
        assert sum(d["held"] for d in docs) == N - 1  # every peer holds node 0's run decision for all N
        wait_until(lambda: "rank 0: done" in job.node(0).out(), 60, message="node 0's worker")
        assert job.node(0).proc.poll() is None, job.dump()
    finally:
        for p in peers:
            if p.poll() is None:
                p.kill()
                p.wait()
        job.kill()
    job.assert_no_orphans()
