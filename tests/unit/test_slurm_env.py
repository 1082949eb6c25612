"""SlurmJob.from_env, rdzv_port and ``python -m slurm_ft.cli.topology`` on made and captured environments."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from slurm_ft.hostlist import expand
from slurm_ft.slurm import (
    SlurmEnvError,
    SlurmJob,
    launcher_placement_problem,
    parse_tasks_per_node,
    rdzv_port,
    rdzv_ports,
)

pytestmark = pytest.mark.timeout(60)

ENV_DUMPS = Path(__file__).resolve().parents[1] / "data" / "slurm_env"
PORTS = (20000, 29999)


def batch_env(**changes: str | None) -> dict[str, str]:
    """The batch shell of ``sbatch -N2 --ntasks-per-node=1`` on node[1-2], as Slurm 22.05 sets it."""
    env = {
        "SLURM_JOB_ID": "41",
        "SLURM_JOBID": "41",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": "node1",
        "SLURM_TASKS_PER_NODE": "1(x2)",
        "SLURM_CPUS_ON_NODE": "4",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_SUBMIT_DIR": "/home/u/run",
        "PATH": "/usr/bin:/bin",
    }
    return _apply(env, changes)


def step_env(node_rank: int = 0, **changes: str | None) -> dict[str, str]:
    """One task of ``srun --ntasks-per-node=2`` inside that batch job (4 tasks on 2 nodes)."""
    env = batch_env()
    env.update(
        {
            "SLURM_STEP_ID": "0",
            "SLURM_STEPID": "0",
            "SLURM_STEP_NODELIST": "node[1-2]",
            "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
            "SLURM_TASKS_PER_NODE": "2(x2)",
            "SLURM_NTASKS": "4",
            "SLURM_NODEID": str(node_rank),
            "SLURMD_NODENAME": f"node{node_rank + 1}",
            "SLURM_PROCID": str(2 * node_rank + 1),
            "SLURM_LOCALID": "1",
            "SLURM_GPUS_ON_NODE": "2",
        }
    )
    return _apply(env, changes)


def _apply(env: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# --- valid environments -------------------------------------------------------------------


def test_batch_shell() -> None:
    job = SlurmJob.from_env(batch_env())
    assert job == SlurmJob(
        standalone=False,
        job_id="41",
        array_job_id=None,
        array_task_id=None,
        attempt=0,
        num_nodes=2,
        node_rank=0,
        node_name="node1",
        hosts=("node1", "node2"),
        tasks_per_node=(1, 1),
        cpus_on_node=4,
        gpus_on_node=None,
        procid=0,
        localid=0,
        ntasks=2,
        submit_dir="/home/u/run",
        step_id=None,
    )
    assert job.master_addr == "node1"
    assert job.job_key == "41"
    assert job.hostlist == "node[1-2]"
    assert job.local_tasks == 1


def test_job_is_frozen() -> None:
    job = SlurmJob.from_env(batch_env())
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.node_rank = 1  # type: ignore[misc]


def test_step_task_on_second_node() -> None:
    job = SlurmJob.from_env(step_env(1))
    assert (job.node_rank, job.node_name, job.num_nodes) == (1, "node2", 2)
    assert job.hosts == ("node1", "node2")
    assert job.master_addr == "node1"
    assert job.tasks_per_node == (2, 2)
    assert (job.procid, job.localid, job.ntasks) == (3, 1, 4)
    assert job.gpus_on_node == 2
    assert job.step_id == "0"
    assert job.local_tasks == 2


def test_step_on_fewer_nodes_than_the_job_uses_the_step() -> None:
    # Job on node[1-4]; this step runs on node[3-4] only, and SLURM_NODEID counts within it.
    env = step_env(
        1,
        SLURM_JOB_NODELIST="node[1-4]",
        SLURM_NODELIST="node[1-4]",
        SLURM_JOB_NUM_NODES="4",
        SLURM_STEP_NODELIST="node[3-4]",
        SLURMD_NODENAME="node4",
    )
    job = SlurmJob.from_env(env)
    assert job.hosts == ("node3", "node4")
    assert (job.num_nodes, job.node_rank, job.node_name, job.master_addr) == (2, 1, "node4", "node3")


def test_step_without_step_counts_falls_back_to_what_srun_sets() -> None:
    env = step_env(1, SLURM_STEP_NUM_NODES=None, SLURM_STEP_TASKS_PER_NODE=None, SLURM_STEP_NUM_TASKS=None)
    env["SLURM_NNODES"] = "2"
    job = SlurmJob.from_env(env)
    assert (job.num_nodes, job.tasks_per_node, job.ntasks) == (2, (2, 2), 4)


def test_node_count_falls_back_to_nnodes_then_to_the_list() -> None:
    assert SlurmJob.from_env(batch_env(SLURM_JOB_NUM_NODES=None)).num_nodes == 2
    job = SlurmJob.from_env(batch_env(SLURM_JOB_NUM_NODES=None, SLURM_NNODES=None))
    assert job.num_nodes == 2


def test_job_nodelist_falls_back_to_slurm_nodelist() -> None:
    job = SlurmJob.from_env(batch_env(SLURM_JOB_NODELIST=None))
    assert job.hosts == ("node1", "node2")


def test_array_task_and_requeue() -> None:
    env = batch_env(
        SLURM_JOB_ID="107",
        SLURM_ARRAY_JOB_ID="100",
        SLURM_ARRAY_TASK_ID="7",
        SLURM_RESTART_COUNT="3",
    )
    job = SlurmJob.from_env(env)
    assert (job.job_id, job.array_job_id, job.array_task_id, job.attempt) == ("107", "100", 7, 3)
    assert job.job_key == "100_7"


def test_tasks_per_node_with_repeats() -> None:
    env = batch_env(
        SLURM_JOB_NODELIST="n[1-4]",
        SLURM_JOB_NUM_NODES="4",
        SLURM_TASKS_PER_NODE="2(x3),1",
        SLURMD_NODENAME="n1",
    )
    job = SlurmJob.from_env(env)
    assert job.tasks_per_node == (2, 2, 2, 1)
    assert job.ntasks == 7  # no SLURM_NTASKS in a batch shell without -n: the sum


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", (1,)), ("2(x3),1", (2, 2, 2, 1)), ("4(x2)", (4, 4)), ("1,2,3", (1, 2, 3)), ("8(x1)", (8,))],
)
def test_parse_tasks_per_node(text: str, expected: tuple[int, ...]) -> None:
    assert parse_tasks_per_node("V", text, 10) == expected


def test_missing_optional_variables_have_defaults() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "a,b", "SLURM_NODEID": "1"}
    job = SlurmJob.from_env(env)
    assert (job.node_rank, job.node_name, job.num_nodes, job.attempt) == (1, "b", 2, 0)
    assert job.tasks_per_node == ()
    assert (job.procid, job.localid, job.ntasks) == (0, 0, 2)
    assert (job.cpus_on_node, job.gpus_on_node, job.submit_dir) == (None, None, None)
    assert job.local_tasks == 1


def test_node_found_by_name_when_there_is_no_node_id() -> None:
    job = SlurmJob.from_env(batch_env(SLURM_NODEID=None, SLURMD_NODENAME="node2"))
    assert (job.node_rank, job.node_name) == (1, "node2")


def test_allocation_shell_without_node_variables() -> None:
    # salloc's shell runs on the login node: no SLURMD_NODENAME, no SLURM_NODEID.
    job = SlurmJob.from_env(batch_env(SLURM_NODEID=None, SLURMD_NODENAME=None), hostname="login1")
    assert (job.node_rank, job.node_name, job.master_addr) == (0, "login1", "node1")


def test_ip_address_lists_of_simulated_runs() -> None:
    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NODELIST": "127.0.1.[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NODEID": "2",
        "SLURMD_NODENAME": "sim3",
    }
    job = SlurmJob.from_env(env)
    assert job.hosts == ("127.0.1.1", "127.0.1.2", "127.0.1.3")
    assert (job.master_addr, job.node_name, job.node_rank) == ("127.0.1.1", "sim3", 2)


def test_standalone() -> None:
    job = SlurmJob.from_env({"PATH": "/bin", "SLURM_NODEID": "7"}, hostname="laptop")
    assert job.standalone
    assert (job.job_id, job.array_job_id, job.array_task_id, job.attempt) == (None, None, None, 0)
    assert (job.num_nodes, job.node_rank, job.node_name) == (1, 0, "laptop")
    assert job.hosts == ("127.0.0.1",)
    assert job.master_addr == "127.0.0.1"
    assert job.job_key == "standalone"
    assert job.tasks_per_node == (1,)
    assert (job.procid, job.localid, job.ntasks) == (0, 0, 1)


def test_standalone_name_defaults_to_the_short_hostname() -> None:
    import socket

    assert SlurmJob.from_env({}).node_name == socket.gethostname().split(".")[0]


def test_from_env_reads_only_the_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "999")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "zz[1-9]")
    assert SlurmJob.from_env({}, hostname="h").standalone
    assert SlurmJob.from_env(batch_env()).hosts == ("node1", "node2")


# --- invalid environments -----------------------------------------------------------------

INVALID = [
    ("rank_too_big", batch_env(SLURM_NODEID="2"), "SLURM_NODEID='2' is outside [0, 2)"),
    ("step_rank_too_big", step_env(0, SLURM_NODEID="5"), "SLURM_NODEID='5' is outside [0, 2)"),
    ("rank_not_int", batch_env(SLURM_NODEID="one"), "SLURM_NODEID='one' is not a non-negative integer"),
    ("rank_negative", batch_env(SLURM_NODEID="-1"), "SLURM_NODEID='-1' is not a non-negative integer"),
    ("rank_empty", batch_env(SLURM_NODEID=""), "SLURM_NODEID='' is not a non-negative integer"),
    ("job_id_not_int", batch_env(SLURM_JOB_ID="12a"), "SLURM_JOB_ID='12a' is not a non-negative integer"),
    ("job_id_empty", batch_env(SLURM_JOB_ID=""), "SLURM_JOB_ID='' is not a non-negative integer"),
    (
        "unicode_digits",
        batch_env(SLURM_JOB_NUM_NODES="\u0662"),
        "SLURM_JOB_NUM_NODES='\u0662' is not a non-negative integer",
    ),
    ("nodes_not_int", batch_env(SLURM_JOB_NUM_NODES="2.0"), "SLURM_JOB_NUM_NODES='2.0' is not a"),
    ("nnodes_not_int", batch_env(SLURM_JOB_NUM_NODES=None, SLURM_NNODES="x"), "SLURM_NNODES='x' is not a"),
    ("zero_nodes", batch_env(SLURM_JOB_NUM_NODES="0"), "SLURM_JOB_NUM_NODES='0' must be at least 1"),
    (
        "count_mismatch",
        batch_env(SLURM_JOB_NUM_NODES="3"),
        "SLURM_JOB_NUM_NODES='3' but SLURM_JOB_NODELIST='node[1-2]' names 2 hosts",
    ),
    (
        "step_count_mismatch",
        step_env(0, SLURM_STEP_NUM_NODES="1"),
        "SLURM_STEP_NUM_NODES='1' but SLURM_STEP_NODELIST='node[1-2]' names 2 hosts",
    ),
    (
        "bad_hostlist",
        batch_env(SLURM_JOB_NODELIST="node[2-1]"),
        "SLURM_JOB_NODELIST='node[2-1]': invalid hostlist 'node[2-1]': range 2-1 is reversed",
    ),
    (
        "unbalanced_hostlist",
        step_env(0, SLURM_STEP_NODELIST="node[1-2"),
        "SLURM_STEP_NODELIST='node[1-2': invalid hostlist",
    ),
    (
        "huge_hostlist",
        batch_env(SLURM_JOB_NODELIST="n[0-999999999]"),
        "SLURM_JOB_NODELIST='n[0-999999999]': hostlist 'n[0-999999999]' stands for more than 65536",
    ),
    ("empty_hostlist", batch_env(SLURM_JOB_NODELIST=","), "SLURM_JOB_NODELIST=',' names no hosts"),
    (
        "no_hostlist",
        batch_env(SLURM_JOB_NODELIST=None, SLURM_NODELIST=None),
        "SLURM_JOB_ID='41' is set but SLURM_JOB_NODELIST is not",
    ),
    (
        "tasks_garbage",
        batch_env(SLURM_TASKS_PER_NODE="2(3)"),
        "SLURM_TASKS_PER_NODE='2(3)': '2(3)' is not N or N(xM)",
    ),
    ("tasks_empty", batch_env(SLURM_TASKS_PER_NODE=""), "SLURM_TASKS_PER_NODE='': '' is not N or N(xM)"),
    (
        "tasks_zero",
        batch_env(SLURM_TASKS_PER_NODE="0(x2)"),
        "SLURM_TASKS_PER_NODE='0(x2)': '0(x2)' must count at least one task",
    ),
    (
        "tasks_too_few_nodes",
        batch_env(SLURM_TASKS_PER_NODE="1"),
        "SLURM_TASKS_PER_NODE='1' lists 1 nodes, not 2",
    ),
    (
        "tasks_too_many_nodes",
        batch_env(SLURM_TASKS_PER_NODE="1(x999999999999)"),
        "SLURM_TASKS_PER_NODE='1(x999999999999)' lists more than 2 nodes",
    ),
    (
        "step_tasks_garbage",
        step_env(0, SLURM_STEP_TASKS_PER_NODE="2(x2"),
        "SLURM_STEP_TASKS_PER_NODE='2(x2': '2(x2' is not N or N(xM)",
    ),
    ("restart_not_int", batch_env(SLURM_RESTART_COUNT="a"), "SLURM_RESTART_COUNT='a' is not a"),
    (
        "array_task_not_int",
        batch_env(SLURM_ARRAY_JOB_ID="4", SLURM_ARRAY_TASK_ID="x"),
        "SLURM_ARRAY_TASK_ID='x'",
    ),
    (
        "array_task_missing",
        batch_env(SLURM_ARRAY_JOB_ID="4"),
        "SLURM_ARRAY_JOB_ID='4' is set but SLURM_ARRAY_TASK_ID is not",
    ),
    (
        "array_job_missing",
        batch_env(SLURM_ARRAY_TASK_ID="4"),
        "SLURM_ARRAY_TASK_ID='4' is set but SLURM_ARRAY_JOB_ID is not",
    ),
    ("cpus_not_int", batch_env(SLURM_CPUS_ON_NODE="4x"), "SLURM_CPUS_ON_NODE='4x' is not a"),
    ("gpus_not_int", step_env(0, SLURM_GPUS_ON_NODE="two"), "SLURM_GPUS_ON_NODE='two' is not a"),
    ("ntasks_zero", step_env(0, SLURM_STEP_NUM_TASKS="0"), "SLURM_STEP_NUM_TASKS='0' must be at least 1"),
    ("procid_too_big", step_env(1, SLURM_PROCID="4"), "SLURM_PROCID='4' is outside [0, 4)"),
    (
        "localid_too_big",
        step_env(1, SLURM_LOCALID="2"),
        "SLURM_LOCALID='2' is outside [0, 2) (node 1 of SLURM_STEP_TASKS_PER_NODE='2(x2)')",
    ),
    (
        "name_not_in_list",
        batch_env(SLURM_NODEID=None, SLURMD_NODENAME="node9"),
        "SLURMD_NODENAME='node9' is not in SLURM_JOB_NODELIST='node[1-2]' and SLURM_NODEID is not set",
    ),
]


@pytest.mark.parametrize(("env", "message"), [(e, m) for _, e, m in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_environment(env: dict[str, str], message: str) -> None:
    with pytest.raises(SlurmEnvError) as info:
        SlurmJob.from_env(env)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_messages_of_huge_values_stay_short() -> None:
    nodelist = ",".join(f"host{i}" for i in range(5000))
    with pytest.raises(SlurmEnvError) as info:
        SlurmJob.from_env(batch_env(SLURM_JOB_NODELIST=nodelist))
    assert len(str(info.value)) < 300
    with pytest.raises(SlurmEnvError) as info:
        SlurmJob.from_env(batch_env(SLURM_TASKS_PER_NODE="1," * 5000 + "x"))
    assert len(str(info.value)) < 300
    with pytest.raises(SlurmEnvError) as info:
        SlurmJob.from_env(batch_env(SLURM_JOB_ID="9" * 5000 + "x"))
    assert len(str(info.value)) < 300


# --- rdzv_port ----------------------------------------------------------------------------


def test_rdzv_port_is_deterministic_and_in_range() -> None:
    job = SlurmJob.from_env(batch_env())
    assert rdzv_port(job, PORTS) == rdzv_port(SlurmJob.from_env(step_env(1)), PORTS) == 20041
    for job_id in (0, 1, 9999, 10000, 123456789, 2**40):
        port = rdzv_port(SlurmJob.from_env(batch_env(SLURM_JOB_ID=str(job_id))), PORTS)
        assert PORTS[0] <= port <= PORTS[1]
    assert rdzv_port(SlurmJob.from_env(batch_env(SLURM_JOB_ID="7")), (30000, 30000)) == 30000


def test_rdzv_port_same_on_every_node_of_a_step() -> None:
    ports = {rdzv_port(SlurmJob.from_env(step_env(rank)), PORTS) for rank in (0, 1)}
    assert len(ports) == 1


def test_rdzv_port_differs_between_neighbouring_jobs() -> None:
    ports = [rdzv_port(SlurmJob.from_env(batch_env(SLURM_JOB_ID=str(i))), PORTS) for i in range(5000, 15000)]
    assert len(set(ports)) == len(ports)


def test_rdzv_port_differs_between_array_tasks() -> None:
    # Each array task has its own SLURM_JOB_ID; tasks of one array may share a node.
    ports = {
        rdzv_port(
            SlurmJob.from_env(
                batch_env(SLURM_JOB_ID=str(300 + t), SLURM_ARRAY_JOB_ID="300", SLURM_ARRAY_TASK_ID=str(t))
            ),
            PORTS,
        )
        for t in range(64)
    }
    assert len(ports) == 64


def test_rdzv_port_override_and_standalone() -> None:
    job = SlurmJob.from_env(batch_env())
    assert rdzv_port(job, PORTS, 29500) == 29500
    standalone = SlurmJob.from_env({}, hostname="h")
    assert rdzv_port(standalone, PORTS) == 20000
    assert rdzv_port(standalone, PORTS, 12345) == 12345


@pytest.mark.parametrize(
    ("port_range", "override", "message"),
    [
        ((30000, 20000), None, "port range 30000-20000"),
        ((0, 10), None, "port range 0-10"),
        ((20000, 70000), None, "port range 20000-70000"),
        (PORTS, 0, "rendezvous port 0"),
        (PORTS, 65536, "rendezvous port 65536"),
    ],
)
def test_rdzv_port_rejects_impossible_ports(
    port_range: tuple[int, int], override: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        rdzv_port(SlurmJob.from_env(batch_env()), port_range, override)


# --- python -m slurm_ft.cli.topology -------------------------------------------------------------


def run_main(env: dict[str, str], *args: str, hashseed: str = "0") -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SLURMD_"))}
    base.update(env, PYTHONHASHSEED=hashseed)
    return subprocess.run(
        [sys.executable, "-m", "slurm_ft.cli.topology", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_main_prints_one_line() -> None:
    proc = run_main(step_env(1))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == (
        "node_rank=1 num_nodes=2 node_name=node2 master_addr=node1 rdzv_port=20041 "
        "hosts=node[1-2] job_key=41 attempt=0\n"
    )


def test_main_json_and_port_does_not_depend_on_hash_seed() -> None:
    outs = [json.loads(run_main(step_env(0), "--json", hashseed=seed).stdout) for seed in ("1", "2")]
    assert outs[0] == outs[1]
    assert outs[0]["rdzv_port"] == 20041
    assert outs[0]["hosts"] == "node[1-2]"
    assert outs[0]["tasks_per_node"] == [2, 2]
    assert list(outs[0])[:8] == [
        "node_rank",
        "num_nodes",
        "node_name",
        "master_addr",
        "rdzv_port",
        "hosts",
        "job_key",
        "attempt",
    ]


def test_main_standalone_and_override() -> None:
    proc = run_main({}, "--rdzv-port", "29400")
    assert proc.returncode == 0
    assert "node_rank=0 num_nodes=1 " in proc.stdout
    assert "master_addr=127.0.0.1 rdzv_port=29400 hosts=127.0.0.1 job_key=standalone attempt=0" in proc.stdout
    proc = run_main({"SLURM_FT_LAUNCH_RDZV_PORT_RANGE": "31000-31999", **batch_env()})
    assert "rdzv_port=31041 " in proc.stdout


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (batch_env(SLURM_NODEID="2"), "slurm-ft: SLURM_NODEID='2' is outside [0, 2)"),
        (batch_env(SLURM_JOB_NODELIST="n[1-2"), "slurm-ft: SLURM_JOB_NODELIST='n[1-2': invalid hostlist"),
        (
            {"SLURM_FT_LAUNCH_RDZV_PORT_RANGE": "x"},
            "slurm-ft: environment variable SLURM_FT_LAUNCH_RDZV_PORT_RANGE: expected",
        ),
    ],
)
def test_main_bad_input_is_one_line_and_exit_2(env: dict[str, str], line: str) -> None:
    proc = run_main(env)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(line)
    assert proc.stderr.count("\n") == 1


# --- environments captured on the local cluster ------------------------------------------


def parse_env_dump(path: Path) -> dict[str, str]:
    """``env`` output: KEY=VALUE lines; lines not starting a new variable continue a value."""
    env: dict[str, str] = {}
    last: str | None = None
    for line in path.read_text().splitlines():
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*(?:%%)?)=(.*)", line)
        if m:
            last = m.group(1)
            env[last] = m.group(2)
        elif last is not None:
            env[last] += "\n" + line
    return env


def env_dumps() -> dict[str, dict[str, str]]:
    return {p.stem: parse_env_dump(p) for p in sorted(ENV_DUMPS.glob("*.env"))}


@pytest.fixture(scope="module")
def dumps() -> dict[str, SlurmJob]:
    found = env_dumps()
    if not found:
        pytest.skip(f"no *.env dumps in {ENV_DUMPS} (captured from the local cluster by the lead)")
    return {name: SlurmJob.from_env(env) for name, env in found.items()}


def test_every_dump_parses(dumps: dict[str, SlurmJob]) -> None:
    for name, job in dumps.items():
        assert not job.standalone, name
        assert job.hosts[job.node_rank] == job.node_name, name
        assert PORTS[0] <= rdzv_port(job, PORTS) <= PORTS[1]


def test_dump_names_match_the_node(dumps: dict[str, SlurmJob]) -> None:
    for name, job in dumps.items():
        m = re.fullmatch(r"(.*)_(node\d+)", name)
        if m:
            assert job.node_name == m.group(2), name


def test_batch_dumps_are_node_rank_0(dumps: dict[str, SlurmJob]) -> None:
    batch = {n: j for n, j in dumps.items() if n.startswith("batch_")}
    if not batch:
        pytest.skip("no batch_*.env dump")
    for name, job in batch.items():
        assert job.step_id is None, name
        assert (job.node_rank, job.master_addr) == (0, job.node_name), name
        assert job.num_nodes == len(job.hosts) == len(job.tasks_per_node)


def test_step_dumps_of_one_step_agree(dumps: dict[str, SlurmJob]) -> None:
    """``<kind>_node<N>.env`` from one srun: ranks 0..n-1, one master, one port, one list."""
    steps: dict[str, list[SlurmJob]] = defaultdict(list)
    for name, job in dumps.items():
        m = re.fullmatch(r"(.*step)_node\d+", name)
        if m:
            steps[m.group(1)].append(job)
    if not steps:
        pytest.skip("no *step_node<N>.env dumps")
    for kind, jobs in steps.items():
        assert sorted(j.node_rank for j in jobs) == list(range(jobs[0].num_nodes)), kind
        assert {j.master_addr for j in jobs} == {"node1"}, kind
        assert len({rdzv_port(j, PORTS) for j in jobs}) == 1, kind
        assert len({j.hosts for j in jobs}) == 1, kind
        assert len({j.job_key for j in jobs}) == 1, kind
        assert all(j.step_id is not None for j in jobs), kind


def test_batch_and_step_of_one_job_share_the_port(dumps: dict[str, SlurmJob]) -> None:
    if "batch_node1" not in dumps or "step_node1" not in dumps:
        pytest.skip("needs batch_node1.env and step_node1.env")
    assert dumps["batch_node1"].job_id == dumps["step_node1"].job_id
    assert rdzv_port(dumps["batch_node1"], PORTS) == rdzv_port(dumps["step_node1"], PORTS)


def test_substep_uses_the_step_not_the_job(dumps: dict[str, SlurmJob]) -> None:
    """A 2-node step inside a 3-node job: SLURM_NODELIST still names the job's 3 nodes there."""
    raw = env_dumps()
    names = [n for n in dumps if n.startswith("substep_")]
    if not names:
        pytest.skip("no substep_*.env dumps")
    for name in names:
        env, job = raw[name], dumps[name]
        assert job.hosts == tuple(expand(env["SLURM_STEP_NODELIST"])) != tuple(expand(env["SLURM_NODELIST"]))
        assert job.num_nodes == int(env["SLURM_STEP_NUM_NODES"]) < int(env["SLURM_JOB_NUM_NODES"])


def test_gpu_dumps_see_their_gpus(dumps: dict[str, SlurmJob]) -> None:
    raw = env_dumps()
    names = [n for n in dumps if n.startswith("gpu_")]
    if not names:
        pytest.skip("no gpu_*.env dumps")
    for name in names:
        assert dumps[name].gpus_on_node == int(raw[name]["SLURM_GPUS_ON_NODE"]) > 0


def test_array_dumps_key_on_the_array(dumps: dict[str, SlurmJob]) -> None:
    names = [n for n in dumps if n.startswith("array_")]
    if not names:
        pytest.skip("no array_*.env dumps")
    for name in names:
        job = dumps[name]
        m = re.search(r"task(\d+)", name)
        assert job.array_task_id is not None and job.array_job_id is not None
        if m:
            assert job.array_task_id == int(m.group(1))
        assert job.job_key == f"{job.array_job_id}_{job.array_task_id}"


def test_rdzv_ports_start_with_the_derived_port_and_stay_in_range() -> None:
    job = SlurmJob.from_env(batch_env())
    ports = rdzv_ports(job, PORTS)
    assert ports == (20041, 22541, 25041, 27541)
    assert rdzv_ports(job, PORTS, 29999) == (29999, 22499, 24999, 27499)
    assert rdzv_ports(job, (30000, 30001)) == (30001, 30000)


def test_rdzv_ports_of_clashing_jobs_agree_and_neighbours_never_share_a_port() -> None:
    def ports(job_id: int) -> tuple[int, ...]:
        return rdzv_ports(SlurmJob.from_env(batch_env(SLURM_JOB_ID=str(job_id))), PORTS)

    assert ports(41) == ports(10041)  # the same first port: the same sequence, found by verifying
    for neighbour in (40, 42, 43, 1041):
        assert not set(ports(41)) & set(ports(neighbour))


# --- where a launcher may start (issue 32, items 1 and 2) ---------------------------------


def one_task_step_env(node_rank: int = 0, **changes: str | None) -> dict[str, str]:
    """A task of ``srun --ntasks-per-node=1`` in the batch job of :func:`batch_env`."""
    env = step_env(
        node_rank,
        SLURM_STEP_NUM_TASKS="2",
        SLURM_STEP_TASKS_PER_NODE="1(x2)",
        SLURM_TASKS_PER_NODE="1(x2)",
        SLURM_NTASKS="2",
        SLURM_PROCID=str(node_rank),
        SLURM_LOCALID="0",
    )
    return _apply(env, changes)


def test_one_launcher_per_node_in_a_step_may_start() -> None:
    for node in (0, 1):
        job = SlurmJob.from_env(one_task_step_env(node))
        assert job.in_step
        assert launcher_placement_problem(job) is None
    assert launcher_placement_problem(SlurmJob.from_env({})) is None  # standalone


def test_two_launchers_on_one_node_are_refused_naming_the_count_and_the_fix() -> None:
    for node in (0, 1):
        problem = launcher_placement_problem(SlurmJob.from_env(step_env(node)))
        assert problem is not None
        assert f"this job step runs 2 tasks on node{node + 1} (4 tasks on 2 node(s))" in problem
        assert "srun --ntasks-per-node=1" in problem
    # The override for a launcher outside a step does not cover this.
    assert launcher_placement_problem(SlurmJob.from_env(step_env(0)), outside_step_allowed=True)
    # No tasks-per-node variable but a second local task: still found.
    env = one_task_step_env(0, SLURM_STEP_TASKS_PER_NODE=None, SLURM_TASKS_PER_NODE=None, SLURM_LOCALID="1")
    assert "2 tasks on node1" in (launcher_placement_problem(SlurmJob.from_env(env)) or "")


def test_outside_a_step_the_launcher_is_refused_unless_allowed() -> None:
    batch = SlurmJob.from_env(batch_env())
    assert not batch.in_step
    problem = launcher_placement_problem(batch)
    assert problem is not None
    assert problem.startswith(
        "not inside a job step on one of the job's nodes (only node1 of the job's 2 nodes"
    )
    assert "run it with srun --ntasks-per-node=1 slurm-ft-launch" in problem
    assert launcher_placement_problem(batch, outside_step_allowed=True) is None
    # An salloc shell on a login node: Slurm names no node, the host name is not in the list.
    shell = SlurmJob.from_env(batch_env(SLURM_NODEID=None, SLURMD_NODENAME=None), hostname="vm")
    assert "vm is not one of the job's nodes (node[1-2])" in (launcher_placement_problem(shell) or "")
    one_node = batch_env(SLURM_JOB_NODELIST="node1", SLURM_NODELIST="node1", SLURM_JOB_NUM_NODES="1")
    one_node.update(SLURM_NNODES="1", SLURM_TASKS_PER_NODE="1")
    assert launcher_placement_problem(SlurmJob.from_env(one_node)) is None  # its own node: fine
    assert launcher_placement_problem(SlurmJob.from_env(one_node, hostname="vm")) is None
    login_env = _apply(one_node, {"SLURM_NODEID": None, "SLURMD_NODENAME": None})
    login = SlurmJob.from_env(login_env, hostname="vm")
    assert launcher_placement_problem(login) is not None


def test_captured_step_dumps_may_start_and_batch_dumps_may_not(dumps: dict[str, SlurmJob]) -> None:
    for name, job in dumps.items():
        problem = launcher_placement_problem(job)
        if name.startswith("batch_") and job.num_nodes > 1:
            assert problem is not None and problem.startswith("not inside a job step"), name
        elif job.local_tasks == 1:
            assert problem is None, (name, problem)
