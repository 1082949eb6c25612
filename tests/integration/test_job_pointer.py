"""A job id is enough to find a job whose launchers were given their own state dir
(issue #46): node 0 leaves a pointer in its owner's home, ``slurm-ft-report JOBID`` and
``slurm-ft-logs JOBID`` follow it from any directory, and a pointer anyone else could have
written is not followed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.launch_cluster import ECHO, SimJob, clean_env

ARGS = ["--nproc-per-node", "1", "--health-checks", "none", "--applog-prefix"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished one-node job 4243 with its state dir at ``<tmp>/state`` (not the
    default ``<submit dir>/.slurm_ft/4243``), and the pointers' directory."""
    tmp = tmp_path_factory.mktemp("pointer")
    xdg = tmp / "xdg"
    pointers = xdg / "slurm-ft" / "jobs"
    pointers.mkdir(parents=True)
    for k in range(1, 1001):  # older jobs' pointers: the oldest one goes
        (pointers / f"{k}.json").write_text("{}")
    args = [*ARGS, str(tmp / "job.log")]
    sim = SimJob(tmp, 1, args, [str(ECHO), "--out", str(tmp / "out")], job_id="4243")
    sim.extra_env["XDG_STATE_HOME"] = str(xdg)
    sim.start()
    try:
        assert sim.wait(60) == [0], sim.dump()
    finally:
        sim.kill()
    return sim.state, pointers


def command(name: str, *args: str, xdg: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**clean_env(), "XDG_STATE_HOME": str(xdg)}
    return subprocess.run(
        [sys.executable, "-m", f"slurm_ft.cli.{name}", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_node0_leaves_a_private_pointer_and_keeps_the_newest_thousand(job: tuple[Path, Path]) -> None:
    state, pointers = job
    path = pointers / "4243.json"
    assert json.loads(path.read_text()) == {"job": "4243", "state_dir": str(state), "cluster": None}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (pointers / "1.json").exists() and (pointers / "2.json").exists()
    assert len(os.listdir(pointers)) == 1000


def test_report_and_logs_find_the_job_by_its_id_from_anywhere(job: tuple[Path, Path], tmp_path: Path) -> None:
    state, pointers = job
    xdg = pointers.parent.parent
    done = command("report", "4243", "--json", xdg=xdg, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cycles"][0]["outcome"] == "succeeded"
    done = command("logs", "--list", "4243", xdg=xdg, cwd=tmp_path)
    assert done.returncode == 0 and f"cycles in {state}" in done.stdout, done.stderr
    # --state-dir still overrides, and a job without a pointer is still unknown
    done = command("report", "--state-dir", str(tmp_path), xdg=xdg, cwd=tmp_path)
    assert done.returncode == 2 and "holds no slurm-ft records" in done.stderr
    done = command("logs", "4244", xdg=xdg, cwd=tmp_path)
    assert done.returncode == 2 and "unknown job 4244" in done.stderr


def test_a_pointer_others_could_have_written_is_not_followed(job: tuple[Path, Path], tmp_path: Path) -> None:
    state, pointers = job
    forged = tmp_path / "xdg" / "slurm-ft" / "jobs"
    forged.mkdir(parents=True)
    (forged / "4243.json").write_text((pointers / "4243.json").read_text())
    (forged / "4243.json").chmod(0o666)
    done = command("report", "4243", xdg=tmp_path / "xdg", cwd=tmp_path)
    assert done.returncode == 2 and f"state dir {tmp_path}/.slurm_ft/4243 does not exist" in done.stderr
    (forged / "4243.json").chmod(0o600)
    (forged / "4243.json").write_text(json.dumps({"job": "4244", "state_dir": str(state)}))
    done = command("report", "4243", xdg=tmp_path / "xdg", cwd=tmp_path)
    assert done.returncode == 2, "a pointer that names another job leads nowhere"
