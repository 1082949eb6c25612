"""slurm-ft-healthcheck as Slurm's HealthCheckProgram on the local multi-node cluster.

slurmd runs the program with no arguments and only SLURMD_NODENAME in its environment,
so its settings come from the system file /etc/slurm-ft/healthcheck.yaml. One path per
node (``%n``) lets one node fail while the others pass on this single machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.cli.healthcheck import DEFAULT_CONFIG
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

PROGRAM = Path(sys.executable).parent / "slurm-ft-healthcheck"
BAD_NODE = "node3"


@pytest.fixture
def system_config():
    """Install /etc/slurm-ft/healthcheck.yaml for the test, then put back what was there."""
    path = Path(DEFAULT_CONFIG)
    before = path.read_bytes() if path.exists() else None
    made_dir = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        if before is None:
            path.unlink(missing_ok=True)
            if made_dir:
                path.parent.rmdir()
        else:
            path.write_bytes(before)


def scontrol(*args: str) -> None:
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"scontrol {' '.join(args)}: {done.stderr.strip()}"


def test_failing_node_is_drained_jobs_avoid_it_and_it_is_resumed(slurm_cluster, system_config, tmp_path):
    cluster = slurm_cluster
    scratch = tmp_path / "scratch"
    for node in cluster.nodes:
        if node != BAD_NODE:
            (scratch / node).mkdir(parents=True)
    system_config.write_text(
        "slurm_ft:\n"
        "  health:\n"
        "    checks: [storage]\n"
        "    discover_mounts: false\n"
        f"    paths: ['{scratch}/%n']\n"
        "    deadline: 5\n"
        "    drain: true\n"
    )
    reason = f"slurm-ft: storage:{scratch}/{BAD_NODE}: does not exist"
    admin_node = "node4"

    def fields(node: str) -> dict[str, str]:
        return cluster.node_fields(node)

    def drained_by_us() -> bool:
        f = fields(BAD_NODE)
        return "DRAIN" in f.get("State", "") and f.get("Reason", "").startswith(reason)

    try:
        cluster.set_extra_conf(
            [f"HealthCheckProgram={PROGRAM}", "HealthCheckInterval=5", "HealthCheckNodeState=ANY"]
        )
        wait_until(drained_by_us, 60, interval=0.5, message=f"{BAD_NODE} drained with our reason")
        for node in cluster.nodes:
            if node != BAD_NODE:
                assert "DRAIN" not in fields(node).get("State", ""), fields(node)

        work = cluster.workdir("healthcheck")
        script = cluster.write(
            work / "three.sbatch",
            "#!/bin/bash\n#SBATCH -N 3\n#SBATCH -o slurm.out\n"
            "srun -l /bin/true\necho nodes=$SLURM_JOB_NODELIST\n",
        )
        # runuser lives in /usr/sbin, which the fixture's job PATH lacks; sbatch needs it found.
        path = f"{cluster.venv_bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        job = cluster.sbatch(script, env=cluster.job_env(PATH=path))
        done = cluster.wait_final(job, timeout=90)
        assert done["JobState"] == "COMPLETED", job.output()
        assert done["NodeList"] == "node[1-2,4]", done["NodeList"]
        assert "nodes=node[1-2,4]" in job.output()

        # A drain someone else set is never touched, not even by a healthy pass.
        scontrol("update", f"NodeName={admin_node}", "State=DRAIN", "Reason=admin: bad DIMM")
        (scratch / BAD_NODE).mkdir()
        wait_until(
            lambda: "DRAIN" not in fields(BAD_NODE).get("State", "DRAIN"),
            60,
            interval=0.5,
            message=f"{BAD_NODE} resumed by the healthy pass",
        )
        admin = fields(admin_node)
        assert "DRAIN" in admin.get("State", ""), admin
        assert admin.get("Reason", "").startswith("admin: bad DIMM"), admin
    finally:
        cluster.set_extra_conf([])
        cluster.resume_all()
    cluster.wait_nodes_idle(60)
    cluster.assert_no_user_processes()
