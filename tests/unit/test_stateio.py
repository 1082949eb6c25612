"""StateIO and the scribe without root: a FIFO stands in for a mount that stops answering.

Opening a FIFO for reading waits until a writer comes, so the scribe child's read of one
is a request that does not finish until the test opens the other end: the same state
for the launcher as a write to a dead NFS server (only the kernel's wait differs).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from slurm_ft.health.storage import off_local_disk
from slurm_ft.launch.books.stateio import DEFAULT_TIMEOUT, StateIO
from slurm_ft.scribe import leave_alone
from tests.support.waiting import wait_until

TIMEOUT = 0.5  # the stall tests': how long until a request counts as stalled
# Where the state dir answers: the launcher's own limit. The first request's limit also
# covers the start of the scribe child (a ``python -I -S``), which takes longer than the
# stall tests' 0.5 s on a starved host: the test then read a stall where there was none.
ANSWERS = DEFAULT_TIMEOUT


def release(fifo: Path) -> None:
    """Be the writer the stuck read waits for: it returns, and the child goes on."""
    fd = os.open(fifo, os.O_WRONLY)
    os.write(fd, b"x")
    os.close(fd)


@pytest.fixture
def io(tmp_path: Path):
    events: list[str] = []
    state = StateIO(tmp_path / "state", "nodeA", timeout=TIMEOUT, on_event=events.append, scribe=True)
    state.events = events  # type: ignore[attr-defined]
    yield state
    state.close(1.0)


def test_local_disks_need_no_scribe(tmp_path: Path) -> None:
    assert not off_local_disk(tmp_path / "not" / "yet")
    assert off_local_disk("/proc/self/fd")  # not a disk file system


def test_writes_and_reads_through_the_child(tmp_path: Path) -> None:
    io = StateIO(tmp_path / "state", "nodeA", timeout=ANSWERS, scribe=True)
    try:
        _writes_and_reads(io, tmp_path)
    finally:
        io.close(1.0)


def _writes_and_reads(io: StateIO, tmp_path: Path) -> None:
    path = tmp_path / "state" / "cycles" / "cycle0.json"
    io.write_json(path, {"cycle": 0})
    assert json.loads(path.read_text()) == {"cycle": 0}
    assert io.read_json(path) == {"cycle": 0}
    assert io.read_bytes(tmp_path / "state" / "missing") is None
    io.write_json(path, {"cycle": 1}, keep_backup=True)
    assert json.loads(path.with_name("cycle0.json.bak").read_text()) == {"cycle": 0}
    assert io.settle(1.0) and not io.stalled()


@pytest.mark.parametrize("scribe", [False, True], ids=["local", "through the scribe"])
def test_the_end_of_a_file_alone_is_read(tmp_path: Path, scribe: bool) -> None:
    state = StateIO(tmp_path, "nodeA", timeout=TIMEOUT, scribe=scribe)
    try:
        path = tmp_path / "lines"
        path.write_bytes(b"0123456789")
        assert state.read_bytes(path, tail=4) == b"6789"
        assert state.read_bytes(path, tail=40) == b"0123456789"
        assert state.read_bytes(path) == b"0123456789"
        assert state.read_bytes(tmp_path / "missing", tail=4) is None
    finally:
        state.close(1.0)


def test_a_stall_keeps_the_records_and_writes_them_when_it_answers(io: StateIO, tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    fifo = tmp_path / "state" / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert io.read_bytes(fifo) is None  # no answer within the timeout
    assert time.monotonic() - t0 < TIMEOUT + 0.5
    wait_until(io.stalled, 5, message="stalled")
    assert "stopped answering" in io.events[0] and "nodeA" in io.events[0]  # type: ignore[attr-defined]
    problem = io.problem()
    assert problem is not None and str(fifo) in problem and "nodeA" in problem
    t0 = time.monotonic()
    for k in range(3):
        io.write_json(tmp_path / "state" / "outcome.json", {"k": k})  # kept, at once
    io.write_bytes(tmp_path / "state" / "next_cycle", b"4\n")
    assert time.monotonic() - t0 < 0.2
    assert list(io.pending) == [tmp_path / "state" / "outcome.json", tmp_path / "state" / "next_cycle"]
    assert not io.settle(0.3)
    release(fifo)
    assert io.settle(5.0)
    assert json.loads((tmp_path / "state" / "outcome.json").read_text()) == {"k": 2}
    assert (tmp_path / "state" / "next_cycle").read_bytes() == b"4\n"
    assert "answers again" in io.events[-1]  # type: ignore[attr-defined]


def test_close_leaves_a_stuck_child_behind_killed(tmp_path: Path) -> None:
    before = leave_alone()
    state = StateIO(tmp_path, "nodeA", timeout=TIMEOUT, scribe=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert state.read_bytes(fifo) is None
    wait_until(state.stalled, 5, message="stalled")
    (pid,) = leave_alone() - before
    t0 = time.monotonic()
    state.close(5.0)
    assert time.monotonic() - t0 < 0.5  # stalled: not waited for
    # SIGKILL ends a child in an interruptible wait at once (one in state D: when it answers)
    wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 5, message="killed child reaped")


def test_a_signal_cuts_a_wait_short_but_not_the_way_outs_own(tmp_path: Path) -> None:
    events: list[str] = []
    state = StateIO(tmp_path, "nodeA", timeout=30.0, on_event=events.append, scribe=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    arrived: list[bool] = []
    state.interrupted = lambda: bool(arrived)
    timer = threading.Timer(0.3, lambda: arrived.append(True))
    timer.start()
    t0 = time.monotonic()
    try:
        assert state.read_bytes(fifo) is None  # cut short: the signal's bound comes first
        assert time.monotonic() - t0 < 2.0
        assert events == []  # a signal, not a mount that stopped answering
        release(fifo)
        # after the signal, the way out's own writes are waited for as usual
        state.write_json(tmp_path / "outcome.json", {"exit_code": 143})
        assert state.settle(5.0)
        assert json.loads((tmp_path / "outcome.json").read_text()) == {"exit_code": 143}
    finally:
        timer.cancel()
        state.close(1.0)


def test_the_ending_when_the_records_cannot_be_written() -> None:
    from slurm_ft.launch import policy

    problem = "state dir /nfs/s on n1 does not answer"
    failed = policy.state_dir_stalled(policy.Ending(1, "restarts spent"), problem, "n1")
    assert (failed.exit_code, failed.reason, failed.unhealthy_nodes) == (94, f"unhealthy: {problem}", ("n1",))
    done = policy.state_dir_stalled(policy.finished(), problem, "n1")
    assert done.exit_code == 0 and problem in done.reason and done.unhealthy_nodes == ()
    term = policy.state_dir_stalled(policy.Ending(143, "n1 received SIGTERM"), problem, "n1")
    assert term.exit_code == 143 and problem in term.reason
    again = policy.state_dir_stalled(policy.Ending(94, "unhealthy: x", ("n1",)), problem, "n1")
    assert again.unhealthy_nodes == ("n1",)


def test_the_first_cycle_number_through_the_scribe(tmp_path: Path) -> None:
    from slurm_ft.launch.books import cyclecount
    from slurm_ft.statedir import StateDir

    state = StateDir(tmp_path / "state")
    io = StateIO(state.path, "nodeA", timeout=ANSWERS, scribe=True)
    try:
        assert cyclecount.read_next_cycle(state, io) == 0  # nothing there yet
        (state.path / "cycles").mkdir(parents=True)
        (state.path / "cycles" / "cycle7.json").write_text("{}")
        state.cycle_counter.write_text("5\n")
        assert cyclecount.read_next_cycle(state, io) == 8  # never reuse a cycle's log
    finally:
        io.close(1.0)


def test_no_first_cycle_number_from_a_state_dir_that_does_not_answer(tmp_path: Path) -> None:
    from slurm_ft.launch.books import cyclecount
    from slurm_ft.launch.books.stateio import StateDirStalled
    from slurm_ft.statedir import StateDir

    state = StateDir(tmp_path / "state")
    state.path.mkdir()
    os.mkfifo(state.cycle_counter)  # a read of it waits, as one on a dead mount does
    io = StateIO(state.path, "nodeA", timeout=TIMEOUT, scribe=True)
    try:
        with pytest.raises(StateDirStalled, match=f"state dir {state.path} on nodeA does not answer"):
            cyclecount.read_next_cycle(state, io)
    finally:
        release(state.cycle_counter)
        io.close(1.0)
