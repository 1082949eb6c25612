"""How the launcher learns that a worker ended, with and without pidfds (a kernel before
Linux 5.3, or a seccomp filter, refuses ``pidfd_open``: refused here at that one call, with
real processes everywhere else)."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from slurm_ft.launch.workers import process as wk


def _refuse(code: int):
    def refused(pid: int) -> int:
        raise OSError(code, os.strerror(code))

    return refused


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM])
def test_a_kernel_or_filter_that_refuses_pidfds_gives_none(monkeypatch, code):
    monkeypatch.setattr(os, "pidfd_open", _refuse(code))
    assert wk.open_pidfd(os.getpid()) == -1


def test_other_errors_of_pidfd_open_are_not_hidden(monkeypatch):
    monkeypatch.setattr(os, "pidfd_open", _refuse(errno.EMFILE))
    with pytest.raises(OSError) as caught:
        wk.open_pidfd(os.getpid())
    assert caught.value.errno == errno.EMFILE


def test_a_python_without_pidfd_open_gives_none(monkeypatch):
    monkeypatch.delattr(os, "pidfd_open")
    assert wk.open_pidfd(os.getpid()) == -1


def _group(monkeypatch, scripts: list[str], *, pidfds: bool) -> wk.WorkerGroup:
    if not pidfds:
        monkeypatch.setattr(os, "pidfd_open", _refuse(errno.ENOSYS))
    specs = [
        wk.WorkerSpec(k, k, ("/bin/sh", "-c", script), {"PATH": os.environ["PATH"]})
        for k, script in enumerate(scripts)
    ]
    return wk.spawn(specs)


@pytest.mark.parametrize("pidfds", [True, False])
def test_wait_returns_each_exit_soon_after_it_happens(monkeypatch, pidfds):
    group = _group(monkeypatch, ["sleep 0.3; exit 3", "kill -SEGV $$"], pidfds=pidfds)
    try:
        assert all((w.pidfd >= 0) == pidfds for w in group.workers)
        seen: dict[int, wk.WorkerExit] = {}
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            for e in group.wait(5.0):
                seen[e.rank] = e
                # seen within a poll period of the exit (generous for a loaded 2-core machine)
                assert time.time() - e.when < 0.5
        assert (seen[0].exit_code, seen[0].signal) == (3, None)
        assert (seen[1].exit_code, seen[1].signal) == (None, "SIGSEGV")
        assert all(w.pidfd == -1 for w in group.workers)
    finally:
        group.kill_now()


def test_without_pidfds_a_quiet_wait_still_sleeps_its_whole_timeout(monkeypatch):
    """Looking for exits every EXIT_POLL_S must not cut the caller's sleep short: the watch
    does its periodic duties (store reads on node 0) once per sleep, not 20 times a second."""
    group = _group(monkeypatch, ["sleep 30"], pidfds=False)
    try:
        t0 = time.monotonic()
        assert group.wait(0.4) == []
        assert time.monotonic() - t0 >= 0.4 - 0.01
    finally:
        group.kill_now()


def test_without_pidfds_a_ready_extra_fd_still_ends_the_wait_at_once(monkeypatch):
    group = _group(monkeypatch, ["sleep 30"], pidfds=False)
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        t0 = time.monotonic()
        assert group.wait(10.0, extra_fds=[r]) == []
        assert time.monotonic() - t0 < 1.0
    finally:
        os.close(r)
        os.close(w)
        group.kill_now()
    assert not group.running()


def test_stop_without_pidfds_ends_every_worker(monkeypatch):
    group = _group(monkeypatch, ["trap '' TERM; sleep 30", "sleep 30"], pidfds=False)
    survivors = group.stop(signal.SIGTERM, timeout=0.3, kill_timeout=5)
    assert survivors == []
    assert not group.running()
