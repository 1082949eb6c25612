"""torchrun and ft_launcher command lines, only the command name changed, under sbatch + srun.

One job, two steps, each a real 2-node gloo training: the PyTorch multinode tutorial's
torchrun line (head node address found the tutorial's way), then an ft_launcher line
built from its documented options and a `fault_tolerance:` YAML.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "tutorial_train.py"

BATCH = """#!/bin/bash
#SBATCH --job-name=ft-compat
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm.out
#SBATCH --time=5
export GLOO_SOCKET_IFNAME=lo
# settings that are not part of the command lines: no NICs or GPUs on the test cluster
export SLURM_FT_HEALTH_CHECKS=none
# the unmodified tutorial trainer can hang for ever at exit (torch's gloo teardown, see the
# test): a hang is judged after 30 s of silence instead of the default 1800 s
export SLURM_FT_HANG_TIMEOUT=30

# --- the tutorial's batch script (multinode.slurm), torchrun -> slurm-ft-launch ---
nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
nodes_array=($nodes)
head_node=${nodes_array[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
echo Node IP: $head_node_ip
export LOGLEVEL=INFO
srun slurm-ft-launch --nnodes 2 --nproc_per_node 1 --rdzv_id $RANDOM --rdzv_backend c10d \\
    --rdzv_endpoint $head_node_ip:29500 train.py 50 10
echo "torchrun line exit $?"

# --- an ft_launcher line (documented options), ft_launcher -> slurm-ft-launch ---
MASTER_ADDR=$head_node MASTER_PORT=29501 NUM_NODES=$SLURM_JOB_NUM_NODES NUM_GPUS_PER_NODE=1
rm -f snapshot.pt
srun slurm-ft-launch --rdzv_backend=c10d --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} \\
    --nnodes=${NUM_NODES} --nproc-per-node=${NUM_GPUS_PER_NODE} --max-restarts=3 \\
    --ft-cfg-path ft_config.yaml --ft-per-cycle-applog-prefix=$PWD/logs/ft.log \\
    train.py 50 10
echo "ft_launcher line exit $?"
"""

FT_CONFIG = """fault_tolerance:
  checkpoint_iteration_file: {work}/latest_checkpointed_iteration.txt
  max_no_progress_cycles: 3
  min_progress_iterations: 1
  restart_policy: any-failed
"""


@pytest.mark.timeout(300)
def test_torchrun_and_ft_launcher_lines_train_on_two_nodes(slurm_cluster):
    work = slurm_cluster.workdir("compat-lines")
    shutil.copy(TRAINER, work / "train.py")
    slurm_cluster.write(work / "train.py", TRAINER.read_text())
    slurm_cluster.write(work / "ft_config.yaml", FT_CONFIG.format(work=work))
    slurm_cluster.write(work / "job.sbatch", BATCH, mode=0o755)
    (work / "logs").mkdir()
    shutil.chown(work / "logs", slurm_cluster.user)
    job = slurm_cluster.sbatch(work / "job.sbatch", env=slurm_cluster.job_env())
    fields = slurm_cluster.wait_final(job, timeout=280)
    out = job.output()
    assert fields["JobState"] == "COMPLETED", out
    assert "torchrun line exit 0" in out and "ft_launcher line exit 0" in out, out
    assert "slurm-ft-launch: error" not in out, out
    run = f"{job.job_id}-a0"
    for rank in (0, 1):
        assert out.count(f"[RANK{rank}] world 2 group {rank} run {run}: trained 50 epochs") == 1, out
    # This trainer is the tutorial's, unmodified: under torch 2.x a gloo rank that finished
    # may still die of SIGABRT at interpreter exit, or hang there for ever (DDP's reducer,
    # freed after destroy_process_group, destroys the group holding the GIL that a gloo
    # thread waits for: docs, quick start), which the launcher restarts like any failure or
    # hang; the trainer then resumes from its snapshot, and may end the same way again. So
    # one cycle, then at most --max-restarts=3 more, each one resumed.
    cycle_logs = sorted((work / "logs").glob("ft_cycle*.log"))
    assert 1 <= len(cycle_logs) <= 4, cycle_logs
    ft_log = cycle_logs[0].read_text()
    for rank in (0, 1):
        assert f"{rank}: [RANK{rank}] world 2 group {rank} run {run}: trained 50 epochs" in ft_log
    for later in cycle_logs[1:]:
        assert "resuming from snapshot" in later.read_text(), later.read_text()
    slurm_cluster.assert_no_user_processes()
