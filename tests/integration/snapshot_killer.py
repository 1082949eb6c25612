"""Kill a real snapshot writer at every point of its copy, and at random moments.

``points AREA``: for each chunk k of a snapshot (and just before the seal), a forked
writer completes step 2k+1, a second forked writer starts step 2k+2 and SIGKILLs itself
before chunk k; then this process reads the area. ``random AREA N``: N times, a forked
writer snapshots steps without end and is SIGKILLed after a random delay. One line per
kill: ``k STEP_FOUND WHOLE`` (the newest complete snapshot's step and whether every
tensor and value in it says that step), and the number of kill points first.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import torch

from slurm_ft.snapshot import layout, reader, writer
from tests.integration.snapshot_worker import state_of, whole

KEY = layout.rank_key(0)


def identity(cycle: int) -> writer.Identity:
    return writer.Identity(
        world_size=1, rank=0, node_rank=0, local_rank=0, local_world_size=1, cycle=cycle, pid=os.getpid(),
        start_ticks=None,
    )  # fmt: skip


def in_child(body: object) -> int:
    """Run ``body()`` in a forked child; its wait status."""
    pid = os.fork()
    if pid == 0:
        try:
            assert callable(body)
            body()
        finally:
            os._exit(0)
    return os.waitpid(pid, 0)[1]


def write(area: Path, step: int, mib: float, kill_at: int | None = None, cycle: int | None = None) -> None:
    def hook(k: int) -> None:
        if k == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    slots = writer.SlotWriter(area, KEY, identity(step if cycle is None else cycle), None)
    result = slots.write(step, state_of(step, mib), on_chunk=hook)
    assert result.outcome is writer.Outcome.KEPT, result


def newest(area: Path) -> tuple[int, bool]:
    info = reader.newest(area, KEY)
    if info is None:
        return -1, False
    return info.step, whole(info.step, reader.load(info, copy=True))


def points(area: Path) -> None:
    mib = 0.1
    writer.CHUNK_BYTES = 8192
    count = 0

    def counting(k: int) -> None:
        nonlocal count
        count = max(count, k)

    writer.plan(state_of(0, mib))
    probe = writer.SlotWriter(area, "rank-99999", identity(0), None)
    probe.write(0, state_of(0, mib), on_chunk=counting)
    print(count + 1, flush=True)
    for k in range(count + 1):
        done = in_child(lambda k=k: write(area, 2 * k + 1, mib))
        assert os.waitstatus_to_exitcode(done) == 0
        killed = in_child(lambda k=k: write(area, 2 * k + 2, mib, kill_at=k))
        assert os.WIFSIGNALED(killed) and os.WTERMSIG(killed) == signal.SIGKILL, killed
        print(k, *newest(area), flush=True)


def forever(area: Path, mib: float, cycle: int) -> None:
    step = cycle * 1000
    while True:
        write(area, step, mib, cycle=cycle)
        step += 1


def at_random(area: Path, times: int) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    print(times, flush=True)
    for k in range(times):
        pid = os.fork()
        if pid == 0:
            try:
                forever(area, 4.0, cycle=k + 1)
            finally:
                os._exit(1)
        time.sleep(rng.uniform(0.001, 0.08))  # the kill's moment, at random: not a synchronisation
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(k, *newest(area), flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    where = Path(sys.argv[2])
    if sys.argv[1] == "points":
        points(where)
    else:
        at_random(where, int(sys.argv[3]))
