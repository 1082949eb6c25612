"""Pure decisions of the launcher: restart budget, stop reasons, nproc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch import policy
from slurm_ft.launch.books import cyclecount
from slurm_ft.launch.workers import process as workers
from slurm_ft.launch.workers.layout import Entry
from slurm_ft.records import Failure, FailureKind
from slurm_ft.statedir import StateDir


def worker_failure(**kw) -> Failure:
    base = dict(
        kind=FailureKind.WORKER, node="node1", node_rank=1, time=1.0, rank=3, local_rank=1, exit_code=7
    )
    base.update(kw)
    return Failure(**base)


def decide(**kw) -> policy.Verdict:
    args = dict(restart=0, max_restarts=3, previous_failure=None, unhealthy=[], lost=[], missing=[])
    args.update(kw)
    return policy.decide(**args)


def test_first_cycle_runs():
    assert decide() == policy.Verdict(True)


def test_budget_counts_restarts_job_wide():
    f = worker_failure()
    assert decide(restart=3, max_restarts=3, previous_failure=f).run
    v = decide(restart=4, max_restarts=3, previous_failure=f)
    assert (v.run, v.exit_code) == (False, 1)
    assert v.reason == (
        "restart budget spent (3 restart(s), 4 cycle(s) failed); "
        "last failure: rank 3 (local 1) on node1 (node 1): exit code 7"
    )
    assert decide(restart=1, max_restarts=0, previous_failure=f).exit_code == 1


def test_unhealthy_wins_over_everything_with_94():
    v = decide(unhealthy=[("node2", "storage: /lustre: timed out")], lost=["node1"], restart=9)
    assert (v.run, v.exit_code, v.reason) == (False, 94, "unhealthy: node2: storage: /lustre: timed out")


def test_lost_departed_or_missing_launchers_stop_with_1():
    assert decide(lost=["node1"]) == policy.Verdict(False, 1, "lost launcher on node1")
    gone = worker_failure(
        kind=FailureKind.SIGNAL,
        rank=None,
        local_rank=None,
        exit_code=None,
        detail="launcher received SIGTERM",
    )
    v = decide(restart=1, previous_failure=gone)
    assert (v.run, v.exit_code, v.reason) == (
        False,
        1,
        "cannot restart: node1 (node 1): launcher received SIGTERM",
    )
    v = decide(missing=["node-rank-2"])
    assert (v.run, v.exit_code, v.reason) == (False, 1, "join timeout: no launcher from node(s) node-rank-2")


def test_failure_descriptions():
    assert worker_failure(exit_code=None, signal="SIGSEGV").describe() == (
        "rank 3 (local 1) on node1 (node 1): killed by SIGSEGV"
    )
    assert worker_failure(message="boom").describe().endswith("exit code 7: boom")
    assert worker_failure().retryable
    assert not worker_failure(kind=FailureKind.LOST_NODE).retryable


def test_signal_endings():
    assert policy.signalled(signal.SIGTERM, "node1") == policy.Ending(143, "node1 received SIGTERM")
    assert policy.signalled(signal.SIGUSR1, None) == policy.Ending(138, "received SIGUSR1")
    assert policy.signalled(signal.SIGUSR1, None).outcome == "signal-SIGUSR1"


@pytest.mark.parametrize(
    ("value", "slurm", "nvml", "cpus", "expected"),
    [
        ("auto", 4, None, 8, 4),
        ("auto", None, 2, 8, 2),
        ("auto", None, None, 8, 1),
        ("gpu", None, 8, 8, 8),
        ("cpu", None, None, 6, 6),
        ("3", 8, 8, 8, 3),
    ],
)
def test_resolve_nproc(value, slurm, nvml, cpus, expected):
    assert workers.resolve_nproc(value, slurm_gpus=slurm, gpu_count=lambda: nvml, cpu_count=cpus) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--nproc-per-node: must be >= 1, got 0"),
        ("-2", "--nproc-per-node: must be >= 1, got -2"),
        ("many", "--nproc-per-node: expected a positive integer, 'auto', 'gpu' or 'cpu', got 'many'"),
        ("gpu", "--nproc-per-node gpu: no GPUs found on this node (Slurm or NVML)"),
    ],
)
def test_resolve_nproc_rejects(value, message):
    with pytest.raises(workers.NprocError) as info:
        workers.resolve_nproc(value, slurm_gpus=None, gpu_count=lambda: None, cpu_count=4)
    assert str(info.value) == message


def test_entry_argv_like_torchrun():
    assert Entry("script", "t.py", ("--x",)).argv("/py") == ["/py", "-u", "t.py", "--x"]
    assert Entry("module", "pkg.train", ()).argv("/py") == ["/py", "-u", "-m", "pkg.train"]
    assert Entry("command", "./run.sh", ("a",)).argv("/py") == ["./run.sh", "a"]


def test_exit_from_status_of_real_processes():
    p = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    _, status = os.waitpid(p.pid, 0)
    assert workers.exit_from_status(status) == (None, "SIGSEGV")
    p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"])
    _, status = os.waitpid(p.pid, 0)
    assert workers.exit_from_status(status) == (5, None)


def test_next_cycle_continues_from_counter_or_records(tmp_path):
    state = StateDir(tmp_path)
    assert cyclecount.read_next_cycle(state) == 0
    cyclecount.write_next_cycle(state, 4)
    assert cyclecount.read_next_cycle(state) == 4
    state.cycles_dir.mkdir()
    (state.cycles_dir / "cycle9.json").write_text("{}")
    assert cyclecount.read_next_cycle(state) == 10  # never reuse a cycle number
    state.cycle_counter.write_text("garbage")
    assert cyclecount.read_next_cycle(state) == 10


def test_exit_codes_are_the_contract():
    assert int(ExitCode.UNHEALTHY) == 94 and int(ExitCode.NO_PROGRESS) == 93


def _failure(kind: FailureKind, signal_name: str | None = None) -> Failure:
    return Failure(kind=kind, node="node1", node_rank=1, time=0.0, detail="d", signal=signal_name)


def test_a_peer_that_received_a_signal_stops_the_attempt_with_its_code():
    verdict = policy.peer_signalled(_failure(FailureKind.SIGNAL, "SIGUSR1"))
    assert verdict == policy.Verdict(False, 128 + int(signal.SIGUSR1), "node1 received SIGUSR1")


@pytest.mark.parametrize(
    "failure",
    [
        None,
        _failure(FailureKind.WORKER),
        _failure(FailureKind.SIGNAL, None),
        _failure(FailureKind.SIGNAL, "x"),
    ],
)
def test_only_a_signal_failure_that_names_its_signal_is_a_stop(failure):
    assert policy.peer_signalled(failure) is None
