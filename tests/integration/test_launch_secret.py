"""The job secret end to end: two launchers over a real TCPStore, an outsider with a raw
store client writing a failure and a halt, and the secret nowhere to be read."""

from __future__ import annotations

import datetime
import subprocess

import pytest

from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV
from slurm_ft.launch.rendezvous.protocol import Keys, encode_failure
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.records import Failure, FailureKind
from tests.integration.launch_cluster import LAUNCH, SimJob, clean_env, slurm_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

SECRET = "9f2c1e7a5b3d4f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718"
BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05", "--no-python"]
# A lean worker: its whole environment to a file, then wait for the test's go.
WORKER = 'env > "$0/env.$RANK"; while [ ! -e "$0/go" ]; do sleep 0.05; done'


def _outsider(port: int):
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=5), use_libuv=True)


def test_forged_failure_and_halt_are_ignored_and_the_secret_is_never_shown(tmp_path):
    job = SimJob(tmp_path, 2, BASE, ["/bin/sh", "-c", WORKER, str(tmp_path)], extra_env={SECRET_ENV: SECRET})
    try:
        job.start()
        wait_until(lambda: all((tmp_path / f"env.{r}").exists() for r in (0, 1)), 60, message="workers")
        keys = Keys(f"{job.job_id}-a0", Sealer(SECRET.encode()).namespace)
        out = _outsider(job.port)
        forged = Failure(kind=FailureKind.WORKER, node="node1", node_rank=1, time=0.0, rank=1, exit_code=9)
        for k in (keys, Keys(f"{job.job_id}-a0")):  # the real keys, and what an outsider would guess
            out.set(k.failure(0), encode_failure(forged))
            out.set(k.halt(0), "1")
        ignored = f"ignored a value of store key {keys.failure(0)} that is not sealed with this job's secret"
        for k in (0, 1):
            wait_until(lambda k=k: ignored in job.node(k).err(), 20, message=f"node{k} reporting the forgery")
        (tmp_path / "go").touch()
        assert job.wait(60) == [0, 0], job.dump()
        for k in (0, 1):
            err = job.node(k).err()
            assert err.count(ignored) == 1, err
            assert "rendezvous store authenticated: job secret from SLURM_FT_JOB_SECRET" in err
        assert job.outcome()["exit_code"] == 0
        readable = [job.node(k).err() + job.node(k).out() for k in (0, 1)]
        readable += [p.read_text(errors="replace") for p in job.state.rglob("*") if p.is_file()]
        envs = [(tmp_path / f"env.{r}").read_text() for r in (0, 1)]
        assert not [text for text in readable + envs if SECRET in text]
        assert SECRET_ENV not in "".join(envs)
        # the launcher's own settings stay its own (clean_env sets neither)
        assert "RES_OPTIONS=" not in "".join(envs) and "TORCH_CPP_LOG_LEVEL=" not in "".join(envs)
    finally:
        job.kill()


def test_dry_run_names_the_source_not_the_secret(tmp_path):
    env = clean_env()
    env.update(slurm_env("99", 2, 0))
    env[SECRET_ENV] = SECRET
    args = ["--dry-run", "--nproc-per-node", "1", "--state-dir", str(tmp_path / "s"), "--no-python", "true"]
    p = subprocess.run([*LAUNCH, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "rendezvous authentication: job secret from SLURM_FT_JOB_SECRET (not shown)" in p.stdout
    assert SECRET not in p.stdout + p.stderr and SECRET_ENV + "=" not in p.stdout
