"""torchrun's topology flags: checked against Slurm, or defining the job without it."""

from __future__ import annotations

import pytest

from slurm_ft.compat import torchrun as tr
from slurm_ft.compat.errors import CompatError
from slurm_ft.slurm import SlurmEnvError, SlurmJob

SLURM = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "node2",
}
JOB = SlurmJob.from_env(SLURM)


def same(a: str, b: str) -> bool:
    return a == b or {a, b} == {"node1", "10.0.0.1"}


def check(**flags: object) -> None:
    tr.check_slurm(tr.parse(tr.TorchrunFlags(**flags)), JOB, same)  # type: ignore[arg-type]


def test_tutorial_line_is_consistent_with_the_job() -> None:
    check(nnodes="2", rdzv_id="4711", rdzv_backend="c10d", rdzv_endpoint="10.0.0.1:29500")
    req = tr.parse(tr.TorchrunFlags(nnodes="2", rdzv_endpoint="10.0.0.1:29500"))
    assert (req.host, req.port, tr.store_port(req, JOB)) == ("10.0.0.1", 29500, 29500)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"nnodes": "3"}, "--nnodes 3 contradicts the job: Slurm gives this job step 2 nodes (node[1-2])"),
        (
            {"nnodes": "3:4"},
            "--nnodes 3:4 contradicts the job: Slurm gives this job step 2 nodes (node[1-2])",
        ),
        (
            {"node_rank": "0"},
            "--node-rank 0 contradicts the job: node2 is node 1 of the Slurm job (SLURM_NODEID=1)",
        ),
        (
            {"master_addr": "node9"},
            "--master-addr host node9 contradicts the job: node 0 of the Slurm job is node1",
        ),
        (
            {"standalone": True},
            "--standalone means one node, but Slurm gives this job step 2 nodes (node[1-2])",
        ),
        ({"local_addr": "node1"}, "--local-addr node1 contradicts the job: this is node2"),
        ({"rdzv_conf": "is_host=true"}, "--rdzv-conf is_host=true contradicts the job"),
    ],
)
def test_contradictions_name_both_values(flags: dict[str, object], message: str) -> None:
    with pytest.raises(CompatError) as err:
        check(**flags)
    assert str(err.value).startswith(message)


def test_a_range_around_the_node_count_runs_on_every_node_with_a_note() -> None:
    req = tr.parse(tr.TorchrunFlags(nnodes="1:4"))
    tr.check_slurm(req, JOB, same)
    assert req.notes == ("--nnodes 1:4: every cycle runs on all nodes of the job (no shrink, no spares)",)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"rdzv_backend": "etcd"}, "--rdzv-backend etcd: not supported"),
        ({"nnodes": "4:2"}, "--nnodes '4:2': MIN is larger than MAX"),
        ({"nnodes": "two"}, "--nnodes 'two': expected an integer >= 1"),
        ({"master_addr": "a", "rdzv_endpoint": "b:1"}, "--master-addr a contradicts --rdzv-endpoint b:1"),
        ({"master_port": "1", "rdzv_endpoint": "b:2"}, "--master-port 1 contradicts --rdzv-endpoint b:2"),
        ({"rdzv_conf": "bogus=1"}, "--rdzv-conf bogus: not a rendezvous option"),
        ({"rdzv_conf": "rank=1", "node_rank": "0"}, "--rdzv-conf rank=1 contradicts --node-rank 0"),
        ({"standalone": True, "nnodes": "2"}, "--standalone means one node, but --nnodes is 2"),
    ],
)
def test_flags_that_cannot_be_honoured(flags: dict[str, object], message: str) -> None:
    with pytest.raises(CompatError) as err:
        tr.parse(tr.TorchrunFlags(**flags))  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("h:1", "h", 1),
        ("h", "h", tr.DEFAULT_C10D_PORT),
        ("[::1]:5", "::1", 5),
        ("[fe80::1]", "fe80::1", 29400),
    ],
)
def test_endpoint_forms(text: str, host: str, port: int) -> None:
    assert tr.parse_endpoint(text, tr.DEFAULT_C10D_PORT) == (host, port)


def test_standalone_overrides_the_rendezvous_flags_like_torchrun() -> None:
    req = tr.parse(tr.TorchrunFlags(standalone=True, rdzv_endpoint="x:1", rdzv_id="9"))
    assert (req.host, req.port, req.max_nodes) == (None, None, 1)
    job = tr.job_without_slurm(req, hostname="laptop")
    assert (job.standalone, job.num_nodes, job.node_rank, job.master_addr) == (True, 1, 0, "127.0.0.1")
    assert tr.store_port(req, job) is None


def test_without_slurm_the_flags_define_the_job() -> None:
    req = tr.parse(tr.TorchrunFlags(nnodes="2", node_rank="1", master_addr="10.1.1.1"))
    job = tr.job_without_slurm(req, hostname="n2")
    assert (job.standalone, job.num_nodes, job.node_rank, job.master_addr, job.node_name) == (
        True,
        2,
        1,
        "10.1.1.1",
        "n2",
    )
    assert tr.store_port(req, job) == tr.DEFAULT_MASTER_PORT
    local = tr.job_without_slurm(tr.parse(tr.TorchrunFlags(nnodes="2", node_rank="0", local_addr="me")))
    assert (local.node_name, local.master_addr) == ("me", "127.0.0.1")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"nnodes": "2"}, "--nnodes 2 without Slurm needs --node-rank"),
        ({"nnodes": "1:2", "node_rank": "0"}, "--nnodes 1:2: without Slurm the node count must be fixed"),
        ({"nnodes": "2", "node_rank": "2"}, "--node-rank 2 is outside [0, 2) (--nnodes 2)"),
        ({"nnodes": "2", "node_rank": "1", "rdzv_conf": "is_host=1"}, "--rdzv-conf is_host=true contradicts"),
    ],
)
def test_without_slurm_bad_topologies(flags: dict[str, object], message: str) -> None:
    with pytest.raises(CompatError) as err:
        tr.job_without_slurm(tr.parse(tr.TorchrunFlags(**flags)))  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


def test_by_hand_job_is_validated() -> None:
    with pytest.raises(SlurmEnvError, match="--nnodes 0: must be at least 1"):
        SlurmJob.by_hand(num_nodes=0, node_rank=0, master_addr="h")
    with pytest.raises(SlurmEnvError, match="--master-addr 'a b'"):
        SlurmJob.by_hand(num_nodes=2, node_rank=0, master_addr="a b")
    one = SlurmJob.by_hand(num_nodes=1, node_rank=0, master_addr="127.0.0.1", hostname="x")
    assert one == SlurmJob.from_env({}, hostname="x")


def test_rdzv_conf_options_with_no_effect_are_noted_and_join_timeout_is_kept() -> None:
    req = tr.parse(tr.TorchrunFlags(rdzv_conf="join_timeout=60, read_timeout=5,use_libuv=1"))
    assert req.overrides == {"launch.join_timeout": "60"}
    assert [n.split(":")[0] for n in req.notes] == ["--rdzv-conf read_timeout", "--rdzv-conf use_libuv"]
