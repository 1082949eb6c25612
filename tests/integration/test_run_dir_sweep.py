"""The launcher's private run dirs in shared memory: claimed by their launcher, swept by the
next launcher of the user once that launcher is gone, never while it runs, never another
user's or anything not ours (slurm_ft.leftovers, slurm_ft.launch.workers.rundir)."""

from __future__ import annotations

import mmap
import os
import re
import subprocess
from pathlib import Path

import pytest

from slurm_ft import leftovers, privatefiles, procident
from slurm_ft.launch.workers import rundir
from tests.integration.launch_cluster import ECHO, SimJob
from tests.support.waiting import wait_until

SHM = Path("/dev/shm")
BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05"]
DAY = 24 * 3600


def run_dir_of(pid: int) -> Path | None:
    for entry in os.scandir(SHM):
        path = Path(entry.path)
        if re.fullmatch(r"slurm-ft-[0-9a-f]{12}", entry.name) and leftovers.recorded_pid(path) == pid:
            return path
    return None


def aged(path: Path, seconds: float) -> Path:
    then = path.stat().st_mtime - seconds
    for entry in [*path.iterdir(), path]:
        os.utime(entry, (then, then), follow_symlinks=False)
    return path


def unrecorded(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(mode=0o700)
    (path / "rank0.slot").write_bytes(b"x" * 64)
    return path


@pytest.mark.timeout(120)
def test_a_sigkilled_launchers_run_dir_is_swept_by_the_next_launcher_and_a_live_ones_is_not(tmp_path):
    forever = [str(ECHO), "--forever"]
    killed = SimJob(tmp_path / "killed", 1, BASE, forever).start()
    live = SimJob(tmp_path / "live", 1, BASE, forever).start()
    legacy_old = aged(unrecorded(SHM, f"slurm-ft-{os.urandom(6).hex()}"), 2 * DAY)
    legacy_young = unrecorded(SHM, f"slurm-ft-{os.urandom(6).hex()}")
    try:
        dirs = {
            name: wait_until(
                lambda job=job: run_dir_of(job.node(0).proc.pid),
                30,
                message=f"the {name} launcher's run dir\n" + job.dump(),
            )
            for name, job in (("killed", killed), ("live", live))
        }
        wait_until(lambda: (dirs["killed"] / "rank0.slot").exists(), 30, message="a worker's slot")
        killed.node(0).proc.kill()
        killed.node(0).proc.wait(10)
        assert dirs["killed"].is_dir()  # a SIGKILLed launcher cleans up nothing

        after = SimJob(tmp_path / "after", 1, BASE, [str(ECHO), "--steps", "2"]).start()
        assert after.wait(60) == [0], after.dump()
        assert not dirs["killed"].exists()
        assert dirs["live"].is_dir() and (dirs["live"] / "rank0.slot").exists()
        assert not legacy_old.exists() and legacy_young.is_dir()
        assert re.search(
            r"removed \d+ run dir\(s\) left by ended launchers in /dev/shm", after.node(0).err()
        ), after.dump()
        assert run_dir_of(after.node(0).proc.pid) is None  # its own went at its end
    finally:
        for job in (killed, live):
            job.kill()
        for path in (legacy_old, legacy_young):
            if path.exists():
                privatefiles.remove_tree(path)


def test_the_sweep_takes_only_this_users_private_run_dirs_of_ended_launchers(tmp_path):
    uid = os.getuid()
    me = os.getpid()
    gone = subprocess.Popen(["true"])
    gone.wait()

    def claimed(pid: int, ticks: int | None) -> Path:
        path = unrecorded(tmp_path, f"slurm-ft-{os.urandom(6).hex()}")
        leftovers.claim(path, pid, ticks)
        return path

    own = claimed(me, procident.start_ticks(me))
    live = claimed(me, procident.start_ticks(me))
    ended = claimed(gone.pid, 12345)
    reused_pid = claimed(me, 1)  # my pid, another start tick: ended
    torn = unrecorded(tmp_path, f"slurm-ft-{os.urandom(6).hex()}")
    (torn / leftovers.OWNER_FILE).write_text("nonsense\n")  # not proof of an end: stays
    open_to_others = claimed(gone.pid, 12345)
    open_to_others.chmod(0o755)
    not_a_name_of_ours = tmp_path / "slurm-ft-snapshot-extra"
    not_a_name_of_ours.mkdir(mode=0o700)
    leftovers.claim(not_a_name_of_ours, gone.pid, 12345)
    target = tmp_path / "target"  # an ended launcher's, behind a link of our name pattern
    target.mkdir(mode=0o700)
    leftovers.claim(target, gone.pid, 12345)
    link = tmp_path / f"slurm-ft-{os.urandom(6).hex()}"
    link.symlink_to(target)
    old = aged(unrecorded(tmp_path, f"slurm-ft-{os.urandom(6).hex()}"), 2 * DAY)
    old_but_mapped = aged(unrecorded(tmp_path, f"slurm-ft-{os.urandom(6).hex()}"), 2 * DAY)
    young = aged(unrecorded(tmp_path, f"slurm-ft-{os.urandom(6).hex()}"), DAY - 600)
    others = []
    if uid == 0:  # another user's run dir, with an ended launcher's record
        others.append(claimed(gone.pid, 12345))
        os.chown(others[0], 65534, 65534)

    with open(old_but_mapped / "rank0.slot", "r+b") as fh, mmap.mmap(fh.fileno(), 64):
        removed = rundir.sweep(tmp_path, uid, keep=own)
    assert sorted(removed) == sorted([ended, reused_pid, old])
    kept = [own, live, torn, open_to_others, not_a_name_of_ours, target, old_but_mapped, young, *others]
    assert all(path.is_dir() for path in kept)
    assert link.is_symlink()


def test_a_launchers_run_dir_names_it_from_the_start(tmp_path):
    made = rundir.create(tmp_path)
    assert re.fullmatch(r"slurm-ft-[0-9a-f]{12}", made.name)
    assert made.stat().st_mode & 0o777 == 0o700
    assert leftovers.owner(made) is leftovers.Owner.LIVE
    me = os.getpid()
    assert (made / leftovers.OWNER_FILE).read_text() == f"{me} {procident.start_ticks(me)}\n"
