"""Workers are born with their planned CPUs and memory node: checked on real processes in /proc."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.workers import process as workers
from slurm_ft.topology.apply import mempolicy_problem
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

# The worker starts a second thread before it idles: both must carry the binding.
WORKER = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)"


def _status(pid: int, task: str) -> dict[str, str]:
    text = Path(f"/proc/{pid}/task/{task}/status").read_text()
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _tasks(pid: int) -> list[str]:
    try:
        return sorted(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


@pytest.fixture(params=["vfork+setpriv", "preexec"])
def helper(request):
    if request.param == "preexec":
        return ()
    found = workers.pdeathsig_helper(shutil.which("setpriv"))
    if not found:
        pytest.skip("setpriv --pdeathsig not available")
    return found


def test_each_worker_and_its_threads_start_on_their_cpus(helper):
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("needs two CPUs")
    first, second = sorted(mine)[:2]
    mem = 0 if mempolicy_problem(0) is None else None
    specs = [
        workers.WorkerSpec(
            0, 0, (sys.executable, "-c", WORKER), {"PATH": os.defpath}, frozenset({first}), mem
        ),
        workers.WorkerSpec(1, 1, (sys.executable, "-c", WORKER), {"PATH": os.defpath}, frozenset({second})),
        workers.WorkerSpec(2, 2, (sys.executable, "-c", WORKER), {"PATH": os.defpath}),
    ]
    group = workers.spawn(specs, helper=helper)
    try:
        assert os.sched_getaffinity(0) == mine, "the launcher's own CPUs are restored"
        for w in group.workers:
            wait_until(lambda w=w: len(_tasks(w.pid)) == 2, 20, message=f"worker {w.local_rank}'s thread")
        expected = [str(first), str(second), _status(os.getpid(), str(os.getpid()))["Cpus_allowed_list"]]
        for w, want in zip(group.workers, expected, strict=True):
            for task in _tasks(w.pid):
                assert _status(w.pid, task)["Cpus_allowed_list"] == want, (w.local_rank, task)
        if mem is not None:
            maps = [Path(f"/proc/{w.pid}/numa_maps").read_text() for w in group.workers]
            assert "prefer:0" in maps[0]
            assert "prefer:" not in maps[1] and "prefer:" not in maps[2]
    finally:
        group.stop(signal.SIGKILL, 5, 5)


def test_a_failed_spawn_leaves_the_launcher_on_its_own_cpus():
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("needs two CPUs")
    spec = workers.WorkerSpec(0, 0, ("/nonexistent/worker",), {}, frozenset({min(mine)}), 0)
    with pytest.raises(FileNotFoundError):
        workers.spawn([spec])
    assert os.sched_getaffinity(0) == mine
    assert "prefer:" not in Path("/proc/self/numa_maps").read_text().splitlines()[0]
