"""Rendezvous ports that clash between jobs on one host: a port in use is transient.

Two simulated 2-node jobs whose node 0 shares a host and whose first port is the same (as
for job ids a multiple of the port range apart): the second node 0 moves to the next port
of the sequence, its peer looks there too and never settles on the other job's store.
"""

from __future__ import annotations

import socket

import pytest

from slurm_ft.slurm import SlurmJob, rdzv_ports
from tests.integration.launch_cluster import ECHO, SimJob, free_port, slurm_env
from tests.support.waiting import wait_until

BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05"]
PORT_RANGE = (20000, 29999)


def echo(job_tmp, *extra: str) -> list[str]:
    return [str(ECHO), "--out", str(job_tmp / "out"), *extra]


@pytest.mark.timeout(120)
def test_two_jobs_with_clashing_ports_on_one_host_both_finish(tmp_path):
    port = free_port()
    # job a trains for 20 s: it must still hold its store when b's node 0 comes up, which
    # takes seconds on a loaded host (0.4 s of steps was over before b's launcher started)
    first_worker = echo(tmp_path / "a", "--steps", "100", "--step-time", "0.2")
    first = SimJob(tmp_path / "a", 2, BASE, first_worker, job_id="4242", port=port)
    second = SimJob(tmp_path / "b", 2, BASE, echo(tmp_path / "b"), job_id="14242", port=port)
    try:
        first.start()
        wait_until(lambda: f"listening on port {port}" in first.node(0).err(), 60, message="job a's store")
        second.start()
        assert second.wait(60) == [0, 0], second.dump()
        assert first.wait(60) == [0, 0], first.dump()
        assert f"rendezvous port {port} in use" in second.node(0).err()
        moved = rdzv_ports(SlurmJob.from_env(slurm_env("14242", 2, 0)), PORT_RANGE, port)[1]
        assert f"joined rendezvous store at 127.0.1.1:{moved}" in second.node(1).err()
        assert len(first.starts()) == len(second.starts()) == 2
    finally:
        first.kill()
        second.kill()


@pytest.mark.timeout(60)
def test_every_port_of_the_sequence_in_use_is_retryable_not_bad_input(tmp_path):
    port = free_port()
    ports = rdzv_ports(SlurmJob.from_env(slurm_env("4242", 2, 0)), PORT_RANGE, port)
    held = []
    try:
        for p in ports:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", p))
                s.listen()
            except OSError:
                s.close()  # someone else holds it: in use all the same
                continue
            held.append(s)
        job = SimJob(tmp_path, 2, BASE, echo(tmp_path), port=port).start(only=[0])
        assert job.wait(30) == [1], job.dump()
        err = job.node(0).err()
        assert f"every rendezvous port of this job is in use ({', '.join(map(str, ports))})" in err
        assert job.outcome()["reason"].startswith("no rendezvous port: every rendezvous port")
        job.assert_no_orphans()
    finally:
        for s in held:
            s.close()
