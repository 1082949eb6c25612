"""--dry-run shows the environment the workers really get: a real launch's workers dump
their os.environ, a dry run with the same command line and environment prints its
worker environments, and the two are compared variable by variable."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import pytest

from slurm_ft.health.gpu import LIBRARY
from slurm_ft.launch.rendezvous.jobsecret import SECRET_ENV
from tests.integration.launch_cluster import LAUNCH, SimJob, clean_env, slurm_env
from tests.support import machines, procs

pytestmark = pytest.mark.timeout(120)

DUMP_ENV = """\
import json, os, sys
from pathlib import Path
Path(sys.argv[1], "env-rank" + os.environ["RANK"] + ".json").write_text(json.dumps(dict(os.environ)))
"""

# What only exists once the launcher runs, and so may differ: the dry run shows the
# builder's placeholder, the workers the real value. Everything else must be equal.
MASTER_PORT_PLACEHOLDER = "<chosen by node 0 each cycle>"
RUN_DIR_PLACEHOLDER = "<private run dir, made at start>"
SNAPSHOT_AREA_PLACEHOLDER = "<snapshot area in /dev/shm, made at start>"
PER_RUN = {
    "MASTER_PORT": "node 0 chooses a free port for every cycle",
    "SLURM_FT_WORKER_MONITOR": "the monitor slot, in the launcher's private run dir (made at start)",
    "SLURM_FT_STACK_FILE": "the stack file, in the same private run dir",
}

WORKER_HEADER = re.compile(r"^worker local_rank (\d+) rank (\d+):$")
VARIABLE = re.compile(r"^  ([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def dry_run_envs(stdout: str) -> dict[int, dict[str, str]]:
    """rank -> the variables the dry run prints for that worker."""
    out: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in stdout.splitlines():
        header = WORKER_HEADER.match(line)
        if header:
            current = out.setdefault(int(header.group(2)), {})
        elif current is not None and (var := VARIABLE.match(line)):
            current[var.group(1)] = var.group(2)
    return out


def assert_same_environment(
    launcher_env: dict[str, str], shown: dict[str, str], real: dict[str, str]
) -> None:
    """``real`` is the launcher's environment without the job secret, with exactly the
    variables the dry run ``shown`` laid over it; only :data:`PER_RUN` values differ."""
    expected_keys = (set(launcher_env) - {SECRET_ENV}) | set(shown)
    assert sorted(set(real) - expected_keys) == [], "variables a worker got that the dry run does not explain"
    assert sorted(expected_keys - set(real)) == [], "variables the dry run promises that a worker lacks"
    for key in sorted(shown):
        if key == "MASTER_PORT":
            assert shown[key] == MASTER_PORT_PLACEHOLDER and real[key].isdigit(), (key, shown[key], real[key])
        elif key == "SLURM_FT_SNAPSHOT_DIR":  # the node's snapshot area, made at the launcher's start
            assert shown[key] == SNAPSHOT_AREA_PLACEHOLDER, shown[key]
            assert real[key].startswith("/dev/shm/slurm-ft-snap."), real[key]
        elif key in PER_RUN:
            placeholder, _, tail = shown[key].partition("/")
            assert placeholder == RUN_DIR_PLACEHOLDER and real[key].endswith("/" + tail), (
                key,
                shown[key],
                real[key],
            )
        else:
            assert real[key] == shown[key], key
    for key in sorted(set(real) - set(shown)):
        assert real[key] == launcher_env[key], key


def _has_nvml() -> bool:
    try:
        ctypes.CDLL(LIBRARY)
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_nvml(), reason="a real NVML's GPUs are not in the fixture tree")
def test_one_node_dry_run_shows_every_variable_its_workers_get(tmp_path: Path) -> None:
    script = tmp_path / "dump_env.py"
    script.write_text(DUMP_ENV)
    out = tmp_path / "out"
    out.mkdir()
    machines.dgx_h100(tmp_path / "sys")
    env = clean_env()
    env.update(slurm_env("31", 1, 0))
    env.update(
        {
            "LC_ALL": "C.UTF-8",  # no locale coercion in the workers' interpreter (PEP 538)
            "SLURM_FT_HEALTH_SYSFS_ROOT": str(tmp_path / "sys"),  # NIC affinity has NICs to choose
            "UCX_NET_DEVICES": "mlx5_7:1",  # the job's own choice is kept
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",  # likewise
            SECRET_ENV: "s" * 40,  # never passed on to a worker
            procs.MARKER_VAR: procs.new_marker(),
        }
    )
    args = ["--nproc-per-node", "2", "--nic-affinity", "--health-checks", "none", "--max-restarts", "0"]
    args += ["--state-dir", str(tmp_path / "state"), str(script), str(out)]

    def launch(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*LAUNCH, *extra, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90
        )

    dry = launch("--dry-run")  # first: the real launch then runs the cycle the dry run names
    assert dry.returncode == 0, dry.stderr
    real = launch()
    assert real.returncode == 0, real.stderr
    shown = dry_run_envs(dry.stdout)
    assert sorted(shown) == [0, 1]
    assert shown[0]["NCCL_IB_HCA"].startswith("="), "the NIC affinity family is part of the comparison"
    for rank, variables in shown.items():
        got = json.loads((out / f"env-rank{rank}.json").read_text())
        assert_same_environment(env, variables, got)
    assert not procs.pids_with_marker(env[procs.MARKER_VAR])


def test_a_peers_dry_run_shows_every_variable_its_workers_get(tmp_path: Path) -> None:
    """Node 1 of two: MASTER_ADDR, the group rank and the job secret come from the job."""
    script = tmp_path / "dump_env.py"
    script.write_text(DUMP_ENV)
    out = tmp_path / "envs"
    out.mkdir()
    extra_env = {"LC_ALL": "C.UTF-8", SECRET_ENV: "t" * 40}
    launcher_args = ["--nproc-per-node", "2", "--health-checks", "none", "--max-restarts", "0"]
    job = SimJob(tmp_path, 2, launcher_args, [str(script), str(out)], job_id="32", extra_env=extra_env)
    env = clean_env()
    env.update(slurm_env(job.job_id, 2, 1))
    env.update(extra_env)
    same_as_node1 = ["--rdzv-port", str(job.port), "--state-dir", str(job.state), *launcher_args, *job.worker]
    dry = subprocess.run(
        [*job.launch, "--dry-run", *same_as_node1],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    job.start()
    try:
        assert job.wait(90) == [0, 0], job.dump()
        job.assert_no_orphans()
    finally:
        job.kill()
    shown = dry_run_envs(dry.stdout)
    assert sorted(shown) == [2, 3]
    for rank, variables in shown.items():
        got = json.loads((out / f"env-rank{rank}.json").read_text())
        assert_same_environment({**env, procs.MARKER_VAR: job.marker}, variables, got)
