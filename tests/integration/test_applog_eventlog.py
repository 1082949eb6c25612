"""The launcher event log on real files and descriptors."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from slurm_ft.launch.output.eventlog import EventLog

LINE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (node\d) slurm-ft-launch: (.*)$")


def stderr_pipe() -> tuple[int, int]:
    return os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)


def drain(fd: int) -> bytes:
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except BlockingIOError:
        pass
    return out


@pytest.mark.timeout(30)
def test_events_go_to_file_and_stderr_unless_quiet(tmp_path: Path) -> None:
    r, w = stderr_pipe()
    loud = EventLog(tmp_path / "launcher.log", "node1", quiet=False, stderr_fd=w)
    quiet = EventLog(tmp_path / "launcher.log", "node2", quiet=True, stderr_fd=w)
    loud.event("cycle 0 started")
    quiet.event("cycle 0 started")
    loud.close()
    quiet.close()
    lines = (tmp_path / "launcher.log").read_bytes().splitlines()
    assert [LINE.match(line).groups() for line in lines] == [  # type: ignore[union-attr]
        (b"node1", b"cycle 0 started"),
        (b"node2", b"cycle 0 started"),
    ]
    echoed = drain(r).splitlines()
    assert len(echoed) == 1 and echoed[0] == lines[0]
    os.close(r)
    os.close(w)


@pytest.mark.timeout(60)
def test_concurrent_events_from_two_logs_and_threads_stay_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "launcher.log"
    logs = [EventLog(path, f"node{i}", quiet=True) for i in range(2)]
    filler = "x" * 3000

    def emit(log: EventLog, tag: int) -> None:
        for i in range(500):
            log.event(f"t{tag} {i} {filler}")

    threads = [threading.Thread(target=emit, args=(logs[t % 2], t)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2000
    seen: dict[bytes, list[int]] = {}
    for line in lines:
        match = LINE.match(line)
        assert match, line[:100]
        tag, seq, rest = match.group(2).split(b" ")
        assert rest == filler.encode()
        seen.setdefault(tag, []).append(int(seq))
    assert {tag: seqs for tag, seqs in seen.items()} == {f"t{t}".encode(): list(range(500)) for t in range(4)}


@pytest.mark.timeout(30)
def test_write_errors_are_reported_once_and_counted_never_raised(tmp_path: Path) -> None:
    r, w = stderr_pipe()
    log = EventLog(Path("/dev/full"), "node3", quiet=True, stderr_fd=w)
    for i in range(5):
        log.event(f"event {i}")
    assert log.failed_writes == 5
    report = drain(r).splitlines()
    assert len(report) == 1
    assert b"cannot write launcher log /dev/full: No space left on device" in report[0]
    os.close(r)
    os.close(w)


@pytest.mark.timeout(30)
def test_unopenable_launcher_log_falls_back_to_stderr(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    r, w = stderr_pipe()
    log = EventLog(tmp_path / "file" / "launcher.log", "node0", quiet=False, stderr_fd=w)
    log.event("still heard")
    lines = drain(r).splitlines()
    assert b"cannot open launcher log" in lines[0]
    assert lines[1].endswith(b"slurm-ft-launch: still heard")
    os.close(r)
    os.close(w)
