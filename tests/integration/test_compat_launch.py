"""slurm-ft-launch as a drop-in for torchrun command lines: real launcher processes.

The same command line with --standalone runs without Slurm; a contradicting --nnodes
under Slurm stops with exit 2 naming both values; torchrun's per-rank files
(--log-dir/--redirects/--tee) have torchrun's layout while the cycle log keeps every line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.output import streams
from slurm_ft.launch.output.applog import AppLog
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.workers import process as wk
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.settingsyntax import parse_std
from tests.integration.launch_cluster import ECHO, LAUNCH, clean_env, slurm_env
from tests.support import procs

TUTORIAL = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_id", "4711", "--rdzv_backend", "c10d"]


def launch(
    tmp_path: Path, args: list[str], env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    marker = procs.new_marker()
    env = clean_env()
    env.update(env_extra or {})
    env[procs.MARKER_VAR] = marker
    proc = subprocess.run([*LAUNCH, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert not procs.pids_with_marker(marker)
    return proc


@pytest.mark.timeout(60)
def test_standalone_line_runs_without_slurm(tmp_path: Path) -> None:
    """torchrun's single-node line, only the command name changed (torch-free worker)."""
    args = ["--standalone", "--nnodes", "1", "--nproc_per_node", "2", "--health-checks", "none"]
    p = launch(tmp_path, [*args, str(ECHO), "--out", str(tmp_path), "--steps", "1"])
    assert p.returncode == 0, p.stderr
    starts = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert sorted(s["rank"] for s in starts) == [0, 1]
    assert "rank 1: done" in p.stdout
    assert (tmp_path / ".slurm_ft" / "standalone").is_dir()


@pytest.mark.timeout(60)
def test_tutorial_line_with_standalone_runs_without_slurm(tmp_path: Path) -> None:
    """The tutorial's flags plus --standalone: torchrun ignores the rendezvous flags then,
    and so does slurm-ft (one note line); --nnodes 2 contradicts --standalone."""
    tail = ["--health-checks", "none", str(ECHO), "--out", str(tmp_path), "--steps", "1"]
    rdzv = ["--rdzv_endpoint", "somehost:29500"]
    p = launch(tmp_path, ["--standalone", *TUTORIAL[2:], *rdzv, *tail])
    assert p.returncode == 0, p.stderr
    assert (
        "slurm-ft-launch: note: --standalone: the rendezvous flags are not used (as in torchrun)" in p.stderr
    )
    p = launch(tmp_path, ["--standalone", *TUTORIAL, *rdzv, *tail])
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["slurm-ft-launch: error: --standalone means one node, but --nnodes is 2"]


@pytest.mark.timeout(60)
def test_contradicting_nnodes_exits_2_naming_both_values(tmp_path: Path) -> None:
    args = [
        "--nnodes",
        "3",
        *TUTORIAL[2:],
        "--rdzv_endpoint",
        "127.0.1.1:29500",
        "--state-dir",
        "s",
        str(ECHO),
    ]
    p = launch(tmp_path, args, slurm_env("99", 2, 0))
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "slurm-ft-launch: error: --nnodes 3 contradicts the job: "
        "Slurm gives this job step 2 nodes (127.0.1.[1-2])"
    ]
    assert p.stdout == "" and not (tmp_path / "s").exists()


@pytest.mark.timeout(60)
def test_consistent_tutorial_line_under_slurm_is_silent(tmp_path: Path) -> None:
    args = [*TUTORIAL, "--rdzv_endpoint", "127.0.1.1:29500", "--dry-run", str(ECHO)]
    p = launch(tmp_path, args, slurm_env("99", 2, 1))
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert "rendezvous: TCPStore on 127.0.1.1:29500, hosted by node 0; run id 99-a0" in p.stdout


@pytest.mark.timeout(60)
def test_ft_launcher_yaml_and_options_under_dry_run(tmp_path: Path) -> None:
    cfg = tmp_path / "ft.yaml"
    cfg.write_text("fault_tolerance:\n  checkpoint_iteration_file: /ck/it.txt\n  max_no_progress_cycles: 5\n")
    args = ["--ft-cfg-path", str(cfg), "--ft-per-cycle-applog-prefix", str(tmp_path / "job.log"), "--dry-run"]
    p = launch(tmp_path, [*args, "--ft-log-level", "DEBUG", str(ECHO)])
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "slurm-ft-launch: error: --ft-log-level: not supported by slurm-ft-launch "
        "(launcher events are always logged)"
    ]
    p = launch(tmp_path, [*args, str(ECHO)])
    assert p.returncode == 0, p.stderr


WORKER = r"""
import os, sys
rank = os.environ["RANK"]
for i in range(3):
    print(f"out {rank} {i}", flush=True)
    print(f"err {rank} {i}", file=sys.stderr, flush=True)
sys.stdout.write(f"tail {rank} without newline")
"""


@pytest.mark.timeout(60)
def test_per_rank_files_have_torchruns_layout_and_the_cycle_log_keeps_every_line(tmp_path: Path) -> None:
    """AppLog.attach_worker + spawn(error_fds=...) as the launcher loop calls them, with
    --redirects 0:1 --tee 1:3 and a cycle log: rank 0's stdout only in its file, rank 1
    both streams in files and on the console, everything in the cycle log."""
    (tmp_path / "w.py").write_text(WORKER)
    rules = streams.OutputRules(
        cycle_log=True,
        tee=False,
        tee_local_ranks=None,
        redirects=parse_std("0:1"),
        tee_streams=parse_std("1:3"),
    )
    console_out, console_err = tmp_path / "console.out", tmp_path / "console.err"
    out_fd = os.open(console_out, os.O_WRONLY | os.O_CREAT, 0o644)
    err_fd = os.open(console_err, os.O_WRONLY | os.O_CREAT, 0o644)
    events = EventLog(None, "node0", quiet=True)
    app = AppLog(
        tmp_path / "job_cycle4.log",
        rank_width=1,
        line_cap=1024,
        drain_timeout=5,
        tee=False,
        tee_local_ranks=None,
        events=events,
        tee_stream_fd=out_fd,
        tee_err_fd=err_fd,
    )
    topo = Topology(0, 1, 2, "127.0.0.1")
    specs, outs, errs = [], {}, {}
    for local in range(2):
        env = dict(os.environ, RANK=str(topo.global_rank(local)))
        specs.append(wk.WorkerSpec(local, topo.global_rank(local), (sys.executable, "w.py"), env))
        rank_dir = streams.rank_dir(tmp_path / "logs", "77-a0", 4, topo.global_rank(local))
        outs[local], errs[local] = app.attach_worker(local, local, streams.plan(rules, local), rank_dir)
    try:
        group = wk.spawn(specs, cwd=str(tmp_path), output_fds=outs, error_fds=errs)
    finally:
        for fd in {*outs.values(), *errs.values()} - {None}:
            os.close(fd)
    exits = []
    while group.running():
        exits += group.wait(5)
    assert sorted(e.exit_code for e in exits) == [0, 0] and group.all_succeeded()
    stats = app.close()
    os.close(out_fd)
    os.close(err_fd)
    events.close()

    base = tmp_path / "logs" / "77-a0" / "attempt_4"
    assert sorted(str(p.relative_to(base)) for p in base.rglob("*.log")) == [
        "0/stdout.log",
        "1/stderr.log",
        "1/stdout.log",
    ]
    assert (base / "0" / "stdout.log").read_text() == "out 0 0\nout 0 1\nout 0 2\ntail 0 without newline"
    assert (base / "1" / "stderr.log").read_text() == "err 1 0\nerr 1 1\nerr 1 2\n"
    cycle = (tmp_path / "job_cycle4.log").read_text().splitlines()
    for rank in (0, 1):
        mine = [line for line in cycle if line.startswith(f"{rank}: ")]
        assert [x for x in mine if x.startswith(f"{rank}: out")] == [
            f"{rank}: out {rank} {i}" for i in range(3)
        ]
        assert [x for x in mine if x.startswith(f"{rank}: err")] == [
            f"{rank}: err {rank} {i}" for i in range(3)
        ]
        assert f"{rank}: tail {rank} without newline" in mine
    assert stats.lost_lines == 0 and stats.rank_file_lost_bytes == 0
    # console: rank 1's streams (tee 1:3) on their own stream; rank 0 redirected/not teed
    assert console_out.read_text().splitlines() == [
        *(f"1: out 1 {i}" for i in range(3)),
        "1: tail 1 without newline",
    ]
    assert console_err.read_text().splitlines() == [f"1: err 1 {i}" for i in range(3)]


@pytest.mark.timeout(60)
def test_launcher_writes_per_rank_files_under_log_dir(tmp_path: Path) -> None:
    args = ["--standalone", "--nproc_per_node", "2", "--health-checks", "none", "--log-dir", "logs"]
    p = launch(tmp_path, [*args, "--redirects", "3", str(ECHO), "--out", str(tmp_path), "--steps", "1"])
    assert p.returncode == 0, p.stderr
    base = tmp_path / "logs" / "standalone-a0"
    attempt = next(base.glob("attempt_*"))
    for rank in (0, 1):
        assert f"rank {rank}: done" in (attempt / str(rank) / "stdout.log").read_text()
    assert "done" not in p.stdout


@pytest.mark.timeout(120)
def test_two_nodes_by_hand_without_slurm(tmp_path: Path) -> None:
    """torchrun's multi-node line typed on each machine: --nnodes 2 --node-rank K
    --master-addr H --master-port P (here both "machines" are this one)."""
    from tests.integration.launch_cluster import free_port

    port = str(free_port())
    marker = procs.new_marker()
    env = clean_env()
    env[procs.MARKER_VAR] = marker
    common = ["--nnodes", "2", "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", port]
    tail = ["--health-checks", "none", str(ECHO), "--out", str(tmp_path), "--steps", "1"]
    nodes = [
        subprocess.Popen(
            [*LAUNCH, *common, "--node_rank", str(k), "--local-addr", f"hand{k}", *tail],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (0, 1)
    ]
    results = [n.communicate(timeout=100) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], results
    starts = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert sorted(s["rank"] for s in starts) == [0, 1]
    outcome = json.loads((tmp_path / ".slurm_ft" / "standalone" / "outcome.json").read_text())
    assert outcome["nodes"] == ["hand0", "hand1"]
    assert not procs.pids_with_marker(marker)
