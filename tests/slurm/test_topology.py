"""The SLURM_* contract on a real allocation: every node derives the same topology."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def test_two_node_step_derives_ranks_master_and_one_port(slurm_cluster):
    work = slurm_cluster.workdir("topology")
    script = slurm_cluster.write(
        work / "topology.sbatch",
        "#!/bin/bash\n"
        "#SBATCH -N 2\n"
        "#SBATCH -o slurm.out\n"
        "srun --ntasks-per-node=1 -o 'node-%n.json' python -m slurm_ft.cli.topology --json\n",
    )
    job = slurm_cluster.sbatch(script)
    fields = slurm_cluster.wait_final(job, timeout=60)
    assert fields["JobState"] == "COMPLETED", job.output()
    records = [json.loads((work / f"node-{k}.json").read_text()) for k in (0, 1)]
    assert [r["node_rank"] for r in records] == [0, 1]
    assert {r["node_name"] for r in records} == {"node1", "node2"}
    assert all(r["master_addr"] == "node1" for r in records)
    assert all(r["num_nodes"] == 2 for r in records)
    assert records[0]["rdzv_port"] == records[1]["rdzv_port"]
    assert records[0]["job_key"] == job.job_id
    slurm_cluster.assert_no_user_processes()
