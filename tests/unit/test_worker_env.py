"""The one worker-environment builder: torchrun's variables, the cycle, hang detection, the
NCCL flight recorder and NIC affinity, each family only where it applies."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from slurm_ft import worker
from slurm_ft.launch.workers import env as wenv
from slurm_ft.launch.workers import torchversion
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.statedir import StateDir
from slurm_ft.topology.plan import Binding, Plan, RankPlacement

TOPO = Topology(node_rank=2, num_nodes=3, nproc_per_node=4, master_addr="n0")
CYCLE = wenv.CycleEnv(topo=TOPO, master_port=29400, restart_count=1, cycle=5)


def job(base: dict[str, str] | None = None, **kw: object) -> wenv.JobEnv:
    args: dict[str, object] = dict(
        base={"PATH": "/bin", "MASTER_PORT": "1"} if base is None else base,
        run_id="7-a0",
        max_restarts=3,
        forwarded=(int(signal.SIGTERM), int(signal.SIGUSR1)),
        python=True,
        state=StateDir(Path("/s")),
        run_dir="/dev/shm/slurm-ft-x",
        node_name="n2",
    )
    args.update(kw)
    return wenv.JobEnv(**args)  # type: ignore[arg-type]


def test_a_python_worker_gets_torchruns_variables_the_cycle_and_the_hang_detection():
    env = wenv.worker_env(job(), CYCLE, 3)
    assert env == {
        "PATH": "/bin",
        "RANK": "11",
        "LOCAL_RANK": "3",
        "WORLD_SIZE": "12",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "2",
        "GROUP_WORLD_SIZE": "3",
        "ROLE_RANK": "11",
        "ROLE_WORLD_SIZE": "12",
        "ROLE_NAME": "default",
        "MASTER_ADDR": "n0",
        "MASTER_PORT": "29400",  # the launcher's own MASTER_PORT is replaced
        "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_MAX_RESTARTS": "3",
        "TORCHELASTIC_RUN_ID": "7-a0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_ERROR_FILE": "/s/nodes/n2/cycle5-rank11.error.json",
        "SLURM_FT_CYCLE": "5",
        "SLURM_FT_CYCLE_INFO": "/s/cycles/cycle5.json",
        "OMP_NUM_THREADS": "1",
        worker.MONITOR_ENV: "/dev/shm/slurm-ft-x/rank11.slot",
        worker.SIGNALS_ENV: f"{int(signal.SIGTERM)},{int(signal.SIGUSR1)}",
        "PYTHONPATH": str(wenv.INJECT_DIR),
        "SLURM_FT_STACK_FILE": "/dev/shm/slurm-ft-x/rank11.stack",
        "SLURM_FT_STACK_SIGNAL": str(int(wenv.STACK_SIGNAL)),
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": "/s/nodes/n2/cycle5-nccl_trace_rank_",
    }
    assert (wenv.INJECT_DIR / "sitecustomize.py").is_file()
    assert TOPO.ranks == range(8, 12)
    assert env == {"PATH": "/bin", "MASTER_PORT": "1", **wenv.launcher_vars(job(), CYCLE, 3)}


def test_what_the_job_sets_itself_is_kept():
    base = {
        "OMP_NUM_THREADS": "8",
        "PYTHONPATH": "/mine",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
        "NCCL_IB_HCA": "=mlx5_9:1",
    }
    nics = RankPlacement(0, None, None, None, None, nics=("mlx5_0:1",), nic_reason="same NUMA node")
    plan = Plan(Binding.NONE, True, (nics,))
    one = wenv.CycleEnv(topo=Topology(0, 1, 1, "127.0.0.1"), master_port=5, restart_count=0, cycle=0)
    added = wenv.launcher_vars(job(base, placement=plan), one, 0)
    assert "OMP_NUM_THREADS" not in added and "TORCH_NCCL_DUMP_ON_TIMEOUT" not in added
    assert "NCCL_IB_HCA" not in added and added["UCX_NET_DEVICES"] == "mlx5_0:1"
    assert added["PYTHONPATH"] == f"{wenv.INJECT_DIR}{os.pathsep}/mine"  # first, the job's after it
    assert wenv.worker_env(job(base, placement=plan), one, 0)["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"


def test_a_command_worker_gets_no_stack_dump_and_one_worker_no_thread_limit():
    one = wenv.CycleEnv(topo=Topology(0, 1, 1, "127.0.0.1"), master_port=5, restart_count=0, cycle=0)
    added = wenv.launcher_vars(job(python=False), one, 0)
    assert not {"PYTHONPATH", "SLURM_FT_STACK_FILE", "SLURM_FT_STACK_SIGNAL", "OMP_NUM_THREADS"} & set(added)
    assert added[worker.MONITOR_ENV] == "/dev/shm/slurm-ft-x/rank0.slot"
    assert job(python=False).files(0) == wenv.RankFiles("/dev/shm/slurm-ft-x/rank0.slot", None)


def test_the_flight_recorder_is_named_as_the_workers_torch_reads_it():
    def recorder(version: tuple[int, int] | None, base: dict[str, str] | None = None) -> dict[str, str]:
        return wenv.flight_recorder_vars(job(base, torch_version=version), 5)

    trace = "/s/nodes/n2/cycle5-nccl_trace_rank_"
    new = {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": trace,
    }
    old = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace,
    }
    assert recorder((2, 13)) == recorder((2, 8)) == recorder(None) == new
    assert recorder((2, 7)) == recorder((1, 13)) == old
    # a value the job set under either name is the job's: nothing added beside it
    assert recorder((2, 13), {"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}) == {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": trace,
    }
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in recorder((2, 5), {"TORCH_FR_BUFFER_SIZE": "0"})
    # the trace prefix is the cycle's, under both names: a standby starts without it
    assert {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} <= wenv.CYCLE_VARS


def test_the_torch_version_is_read_off_its_metadata_directory():
    assert torchversion.version_in(["torch", "torch-2.13.0+cpu.dist-info", "numpy"]) == (2, 13)
    assert torchversion.version_in(["torch-2.7.1.dist-info", "torchgen"]) == (2, 7)
    assert torchversion.version_in(["torch-2.9.0a0+git1234.egg-info"]) == (2, 9)
    assert torchversion.version_in(["torch", "torchvision-0.20.0.dist-info"]) is None
    assert torchversion.version_in(["torch-2.7.1.dist-info", "torch-2.8.0.dist-info"]) is None


def test_the_torch_this_interpreter_imports_is_found_without_importing_it():
    import importlib.metadata

    major, minor = importlib.metadata.version("torch").split(".")[:2]
    assert torchversion.installed_torch() == (int(major), int(minor))
