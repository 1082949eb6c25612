"""Aiming from the launchers' records, and the checks before a signal: real processes,
real /proc, a real state dir; no Slurm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_ft import jsonlines, procident, records
from slurm_ft.drill import send, targets
from slurm_ft.drill.faults import Fault
from slurm_ft.drill.targets import Shot, TargetError
from slurm_ft.records import CycleRecord, NodeProcesses, WorkerProcess
from slurm_ft.statedir import StateDir
from tests.support.waiting import wait_until


def write_job(state: StateDir, cycle: int, nodes: dict[str, list[int]], job_id: str | None = "77") -> None:
    """Cycle ``cycle`` of a job: node name -> worker pids (two ranks a node)."""
    names = list(nodes)
    rec = CycleRecord(
        cycle=cycle, attempt=0, restart=cycle, run_id="r", run_uuid="u" * 32, start_time=1.0, nodes=names,
        world_size=sum(len(p) for p in nodes.values()), nproc_per_node=2, master_addr=names[0], master_port=1,
    )  # fmt: skip
    records.write(state.cycle_record(cycle), rec)
    rank = 0
    for k, (name, pids) in enumerate(nodes.items()):
        workers = []
        for local, pid in enumerate(pids):
            workers.append(WorkerProcess(rank, local, pid, procident.start_ticks(pid)))
            rank += 1
        launcher = pids[0] if pids else os.getpid()
        jsonlines.add(
            state.node_processes(name),
            NodeProcesses(
                cycle, name, k, job_id, "u" * 32, launcher, procident.start_ticks(launcher), 2.0, workers
            ).to_json(),
        )


def test_the_newest_cycle_with_process_records_is_the_shape(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    write_job(state, 3, {"a": [11, 12], "b": [13, 14]})
    write_job(state, 4, {"a": [21, 22], "b": [23, 24], "c": [25, 26]})
    records.write(
        state.cycle_record(5),
        records.CycleRecord.from_json(records.read_json(state.cycle_record(4)) | {"cycle": 5}),
    )
    shape = targets.newest_shape(state)
    assert shape is not None
    assert (shape.cycle, shape.world_size, shape.active_nodes) == (4, 6, ("a", "b", "c"))


def test_aims_default_to_the_last_rank_and_the_last_node(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    write_job(state, 0, {"a": [11, 12], "b": [13, 14]})
    shape = targets.newest_shape(state)
    assert shape is not None
    kill = targets.aim(Fault.KILL, shape, None, None)
    assert (kill.node, kill.node_rank, kill.rank, [s.pid for s in kill.shots]) == ("b", 1, 3, [14])
    assert kill.shots[0].group
    lose = targets.aim(Fault.LOSE_NODE, shape, None, 0)
    assert (lose.node, [s.pid for s in lose.shots]) == ("a", [11, 11, 12])  # launcher, then its workers
    freeze = targets.aim(Fault.FREEZE_LAUNCHER, shape, None, "b")
    assert [s.pid for s in freeze.shots] == [13] and not freeze.shots[0].group
    assert targets.aim(Fault.PREEMPT, shape, None, None).shots == ()


@pytest.mark.parametrize(
    ("fault", "rank", "node", "problem"),
    [
        (Fault.KILL, 4, None, r"rank 4 is outside the job \(ranks 0-3\)"),
        (Fault.KILL, -1, None, "rank -1 is outside"),
        (Fault.LOSE_NODE, None, 2, r"node 2 is outside the job \(node ranks 0-1\)"),
        (Fault.LOSE_NODE, None, "z", "node z is not one of the job's nodes"),
        (Fault.LOSE_NODE, 1, None, "aimed at a node, not a rank"),
        (Fault.PREEMPT, None, 1, "takes no --node"),
    ],
)
def test_aims_outside_the_job_are_refused(tmp_path: Path, fault: Fault, rank, node, problem: str) -> None:
    state = StateDir(tmp_path)
    write_job(state, 0, {"a": [11, 12], "b": [13, 14]})
    shape = targets.newest_shape(state)
    assert shape is not None
    with pytest.raises(TargetError, match=problem):
        targets.aim(fault, shape, rank, node)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _state(pid: int) -> str | None:
    found = procident.stat(pid)
    return found.state if found else None


def test_a_recorded_process_gets_the_signal_a_reused_pid_does_not(child: subprocess.Popen[bytes]) -> None:
    ticks = procident.start_ticks(child.pid)
    assert ticks is not None
    stale = send.send_here([Shot(child.pid, ticks + 1, True)], signal.SIGKILL, None)
    assert not stale[0].ok and "not the recorded process" in (stale[0].problem or "")
    assert child.poll() is None
    [stopped] = send.send_here([Shot(child.pid, ticks, True)], signal.SIGSTOP, None)
    assert stopped.ok
    wait_until(lambda: _state(child.pid) == "T", 5, message="the child stopped")
    [killed] = send.send_here([Shot(child.pid, ticks, True)], signal.SIGKILL, None)
    assert killed.ok
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_a_process_of_another_job_is_left_alone(child: subprocess.Popen[bytes]) -> None:
    [sent] = send.send_here([Shot(child.pid, procident.start_ticks(child.pid))], signal.SIGKILL, "12345")
    assert not sent.ok and "does not belong to job 12345" in (sent.problem or "")
    assert child.poll() is None


def test_shots_travel_to_the_node_helper_and_back() -> None:
    shots = [Shot(5, 99, True), Shot(6, None)]
    assert [send.parse_shot(w) for w in send.shot_words(shots)] == shots
    for bad in ("x:1", "5", "5:1:h", "5:y"):
        with pytest.raises(ValueError):
            send.parse_shot(bad)


def test_procident_reads_this_process() -> None:
    me = procident.stat(os.getpid())
    assert me is not None and me.state in ("R", "S") and me.start_ticks > 0
    assert procident.is_same(os.getpid(), me.start_ticks)
    assert not procident.is_same(os.getpid(), me.start_ticks + 1)
    assert procident.stat(2**22 + 12345) is None
