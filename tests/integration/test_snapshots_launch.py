"""Snapshots under the launcher, on real processes: a torch trainer on simulated nodes
resumes from the node's memory at the state it had at that step, across a SIGKILLed worker
and a hang; a SIGKILLed launcher's area is swept by the next launcher and its rank goes on
from the last checkpoint; the cap refuses a snapshot that does not fit and training goes on.

The trainer (``snapshot_trainer.py``) logs a hash of its parameters and Adam state after
every step and of what it restored: a resume is the truth only when the two hashes agree.
Every test fails without the launcher's part: with no area in the workers' environment a
restore gives nothing, and the trainer resumes from its checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.launch_cluster import ECHO, SimJob
from tests.support import nodefiles
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch

TRAINER = Path(__file__).with_name("snapshot_trainer.py")
SHM = Path("/dev/shm")
BASE = ["--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05", "--preload", "none"]


def unique(job: str) -> str:
    """A job id of this test run alone: the areas are named by job and node, and other
    runs of these tests may share the machine (and its /dev/shm)."""
    return f"{job}{os.getpid()}"


def trainer(tmp: Path, *extra: str) -> list[str]:
    (tmp / "out").mkdir(parents=True, exist_ok=True)
    return [str(TRAINER), "--out", str(tmp / "out"), *extra]


def events(tmp: Path, rank: int) -> list[dict]:
    path = tmp / "out" / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def areas(job: SimJob) -> list[Path]:
    """This job's snapshot areas in shared memory (one per simulated node)."""
    return sorted(SHM.glob(f"slurm-ft-snap.{os.getuid()}.*{job.job_id}.n*"))


def assert_resumed_truly(tmp: Path, rank: int, cycle: int, source: str = "memory") -> dict:
    """The rank's resume in ``cycle`` came from ``source``, at a step it logged in a cycle
    before, with that step's parameters and optimizer state, losing at most one step."""
    log = events(tmp, rank)
    resume = next(e for e in log if e["event"] == "resume" and e["cycle"] == cycle)
    before = {e["step"]: e["hash"] for e in log if e["event"] == "step" and e["cycle"] < cycle}
    assert resume["source"] == source, resume
    assert resume["step"] in before, (resume, sorted(before))
    assert resume["hash"] == before[resume["step"]], (resume, before[resume["step"]])
    assert max(before) - resume["step"] <= 1, (resume, max(before))
    return resume


def finished(tmp: Path, rank: int, steps: int) -> bool:
    return any(e["event"] == "done" and e["step"] == steps for e in events(tmp, rank))


@pytest.mark.timeout(180)
def test_worker_sigkill_resumes_every_rank_from_memory_at_that_steps_state(tmp_path):
    job = SimJob(
        tmp_path,
        2,
        [*BASE, "--max-restarts", "2"],
        trainer(
            tmp_path,
            "--steps",
            "14",
            "--fault",
            "kill",
            "--fault-rank",
            "1",
            "--fault-step",
            "6",
            "--lockstep",
        ),
        job_id=unique("43001"),
    ).start()
    try:
        assert job.wait(150) == [0, 0], job.dump()
        for rank in (0, 1):
            assert_resumed_truly(tmp_path, rank, 1)
            assert finished(tmp_path, rank, 14)
        killed = assert_resumed_truly(tmp_path, 1, 1)
        # the step it died after, or the one before when rank 0 was still in step 6 (the
        # ranks run in lockstep: one may be a step ahead); every rank at the same step
        assert killed["step"] in (5, 6) and assert_resumed_truly(tmp_path, 0, 1)["step"] == killed["step"]
        for k in (0, 1):
            rec = nodefiles.snapshots(job.state, f"node{k}", 1)
            resumed = assert_resumed_truly(tmp_path, k, 1)
            assert rec["resumed"] == [{"rank": k, "source": "memory", "step": resumed["step"]}]
            assert rec["newest_step"] == 14
        assert "cycle 0: resumed rank 0 from nothing" in job.node(0).err()
        assert f"cycle 1: resumed rank 1 from memory at step {killed['step']};" in job.node(1).err()
        assert not areas(job), "the job's areas are removed at its end"
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(180)
def test_hung_rank_resumes_from_memory_at_that_steps_state(tmp_path):
    job = SimJob(
        tmp_path,
        2,
        [*BASE, "--max-restarts", "2", "--rank-heartbeat-timeout", "3"],
        trainer(
            tmp_path,
            "--steps",
            "14",
            "--fault",
            "hang",
            "--fault-rank",
            "0",
            "--fault-step",
            "5",
            "--lockstep",
        ),
        job_id=unique("43002"),
    ).start()
    try:
        assert job.wait(150) == [0, 0], job.dump()
        hung = assert_resumed_truly(tmp_path, 0, 1)
        assert hung["step"] == 5
        assert_resumed_truly(tmp_path, 1, 1)
        assert job.cycle_record(0)["first_failure"]["kind"] == "hang"
        assert not areas(job)
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(240)
def test_sigkilled_launchers_area_is_swept_and_every_rank_goes_on_from_its_checkpoint(tmp_path):
    # A live launcher's area of another job: no sweep may touch it (its launcher is this test).
    live = SHM / f"slurm-ft-snap.{os.getuid()}.live-decoy-{os.getpid()}.n0"
    live.mkdir(mode=0o700)
    (live / "launcher").write_text(f"{os.getpid()} -1\n")
    persist = tmp_path / "persisted"
    args = [*BASE, "--max-restarts", "2", "--snapshot-persist-dir", str(persist)]
    work = trainer(tmp_path, "--steps", "30", "--ckpt-every", "4", "--step-time", "0.15")
    job = SimJob(tmp_path, 2, args, work, job_id=unique("43003")).start()
    try:
        wait_until(
            lambda: [e for e in events(tmp_path, 1) if e["event"] == "step" and e["step"] >= 6],
            90,
            message="rank 1 past step 6\n" + job.dump(),
        )
        left = areas(job)
        assert len(left) == 2
        os.kill(job.node(1).proc.pid, signal.SIGKILL)
        assert job.node(0).proc.wait(30) == 1
        job.node(1).proc.wait(5)
        # The SIGKILLed launcher's area stays until a launcher of this user starts on the
        # node (on this shared machine that may be anyone's, at any moment): not checked here.
        persisted = json.loads((job.state / "snapshots" / "persisted-attempt0-node0.json").read_text())
        assert persisted["persisted"] and persisted["persisted"][0].startswith("rank 0 step ")
        assert job.outcome()["snapshots_persisted"] == persisted["persisted"]

        # The requeued attempt: its launchers sweep the dead launcher's area, nothing else.
        again = SimJob(tmp_path, 2, args, work, job_id=unique("43003"), attempt=1, marker=job.marker).start()
        assert again.wait(150) == [0, 0], again.dump()
        assert live.exists()
        resumes = {r: [e for e in events(tmp_path, r) if e["event"] == "resume"][-1] for r in (0, 1)}
        # The new node-1 area has the dead one's name: had it not been swept (by these
        # launchers or any other of this user), it would have been adopted and rank 1
        # would have resumed from the dead launcher's memory.
        assert resumes[1]["source"] == "checkpoint" and resumes[1]["step"] % 4 == 0, resumes
        # Rank 1 has no persisted step, so no step is common to both ranks: rank 0 resumes
        # from its checkpoint too, never from its persisted step beside rank 1's checkpoint
        # (a mix of steps), and its worker says why once.
        assert resumes[0]["source"] == "checkpoint" and resumes[0]["step"] % 4 == 0, resumes
        said = again.node(0).err()
        assert "no step that all 2 ranks persisted" in said, again.dump()
        assert finished(tmp_path, 0, 30) and finished(tmp_path, 1, 30)
        assert not areas(job)
        # Node 1 (a peer) persisted at the end, though node 0 may have left meanwhile; node 0
        # resumed at the last step and took no snapshot: it had nothing to persist.
        doc = json.loads((job.state / "snapshots" / "persisted-attempt1-node1.json").read_text())
        assert doc["why"] == "training finished" and not doc["not_persisted"], doc
    finally:
        job.kill()
        from slurm_ft import privatefiles

        privatefiles.remove_tree(live)


@pytest.mark.timeout(180)
def test_memory_cap_refuses_the_snapshot_and_training_goes_on(tmp_path):
    job = SimJob(
        tmp_path,
        1,
        [*BASE, "--max-restarts", "1", "--snapshot-memory", "64K"],
        trainer(
            tmp_path,
            "--steps",
            "8",
            "--width",
            "128",
            "--fault",
            "kill",
            "--fault-rank",
            "0",
            "--fault-step",
            "3",
        ),
        job_id=unique("43004"),
    ).start()
    try:
        assert job.wait(120) == [0], job.dump()
        log = events(tmp_path, 0)
        assert [e["step"] for e in log if e["event"] == "refused" and e["cycle"] == 0] == [1, 2, 3]
        resume = next(e for e in log if e["event"] == "resume" and e["cycle"] == 1)
        assert resume["source"] == "none" and resume["step"] == 0
        assert finished(tmp_path, 0, 8)
        err = job.node(0).err()
        assert "snapshots: up to 64.0 KiB on this node in /dev/shm (--snapshot-memory)" in err
        assert err.count("slurm-ft snapshot: step 1 not kept") == 2  # once by each cycle's worker
        assert "cycle 0: no new snapshot kept on this node (newest: none)" in err
    finally:
        job.kill()


@pytest.mark.timeout(60)
def test_shared_memory_too_small_is_said_at_start_in_one_line(tmp_path):
    job = SimJob(
        tmp_path,
        1,
        [*BASE, "--max-restarts", "0", "--snapshot-memory", "100000G"],
        [str(ECHO), "--out", str(tmp_path / "out")],
        job_id=unique("43005"),
    ).start()
    try:
        assert job.wait(50) == [0], job.dump()
        lines = [line for line in job.node(0).err().splitlines() if "snapshot memory: /dev/shm has" in line]
        assert len(lines) == 1, job.dump()
        assert "less than the 100000.0 GiB snapshots may use on this node" in lines[0]
    finally:
        job.kill()


HOOK = """
import json, os, time

def save(rank, step, state, directory):
    with open(os.path.join(directory, f"hooked-{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "step": step, "keys": sorted(state)}, fh)

def stuck(rank, step, state, directory):
    time.sleep(3600)  # a dead mount: the launcher must not wait for it
"""


@pytest.mark.timeout(180)
def test_the_persist_hook_gets_each_snapshot_and_a_stuck_one_is_abandoned_and_said(tmp_path):
    (tmp_path / "persisthook.py").write_text(HOOK)
    out = tmp_path / "hooked"
    out.mkdir()
    work = trainer(tmp_path, "--steps", "3")
    args = [*BASE, "--max-restarts", "0", "--snapshot-persist-dir", str(out)]
    job = SimJob(
        tmp_path, 1, [*args, "--snapshot-persist-hook", "persisthook:save"], work, job_id=unique("43006")
    ).start()
    try:
        assert job.wait(90) == [0], job.dump()
        assert json.loads((out / "hooked-0.json").read_text()) == {
            "rank": 0,
            "step": 3,
            "keys": ["model", "opt"],
        }
        assert job.outcome()["snapshots_persisted"] == ["rank 0 step 3 -> persisthook:save"]
    finally:
        job.kill()

    stuck = SimJob(
        tmp_path / "stuck",
        1,
        [*args, "--snapshot-persist-hook", "persisthook:stuck", "--snapshot-persist-timeout", "4"],
        trainer(tmp_path / "stuck", "--steps", "3"),
        job_id=unique("43007"),
    )
    (tmp_path / "stuck").mkdir(exist_ok=True)
    (tmp_path / "stuck" / "persisthook.py").write_text(HOOK)
    stuck.start()
    try:
        assert stuck.wait(90) == [0], stuck.dump()
        said = stuck.outcome()["snapshots_not_persisted"]
        assert said == ["rank 0 step 3: persisting took longer than 4 s (stopped)"], said
        assert (
            "not persisted: rank 0 step 3: persisting took longer than 4 s (stopped)" in stuck.node(0).err()
        )
        stuck.assert_no_orphans()
    finally:
        stuck.kill()


def burn_cpu(count: int) -> list[subprocess.Popen[bytes]]:
    """Busy processes: the node's cores taken, as by workers that are still exiting."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


@pytest.mark.timeout(120)
def test_a_preemption_on_a_loaded_node_persists_the_newest_step_within_a_short_term_timeout(tmp_path):
    """The breakpoint at its hardest: SIGTERM with --term-timeout 3 (under a second left for the
    persist once the workers are stopped and the records' share is kept) while two CPU
    burners hold this 2-core machine. A persist that imports torch (1.5-3.5 s of CPU) does
    not finish there; the slot file copied as bytes does, and it is the newest step's state."""
    import torch

    from slurm_ft.snapshot import persisted
    from tests.integration.snapshot_trainer import state_hash

    out = tmp_path / "persisted"
    args = [*BASE, "--max-restarts", "0", "--term-timeout", "3", "--snapshot-persist-dir", str(out)]
    job = SimJob(tmp_path, 1, args, trainer(tmp_path, "--steps", "100000"), job_id=unique("43008")).start()
    burners: list[subprocess.Popen[bytes]] = []
    try:
        wait_until(
            lambda: any(e["event"] == "step" and e["step"] >= 5 for e in events(tmp_path, 0)),
            60,
            message="rank 0 past step 5\n" + job.dump(),
        )
        burners = burn_cpu(2)
        os.kill(job.node(0).proc.pid, signal.SIGTERM)
        assert job.wait(30) == [128 + signal.SIGTERM], job.dump()
        doc = json.loads((job.state / "snapshots" / "persisted-attempt0-node0.json").read_text())
        assert doc["why"] == "signal SIGTERM" and not doc["not_persisted"], doc
        newest = max(e["step"] for e in events(tmp_path, 0) if e["event"] == "step")
        step, state = persisted.load(out, 0, 1) or (-1, {})
        # the trainer logs a step before it hands it over: SIGTERM may fall between the two
        assert step in (newest, newest - 1), (step, newest)
        assert doc["persisted"] == [f"rank 0 step {step} -> {persisted.path_for(out, 0, False, step)}"]
        model = torch.nn.Linear(32, 32)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        model.load_state_dict(state["model"])  # type: ignore[arg-type]
        opt.load_state_dict(state["opt"])  # type: ignore[arg-type]
        logged = {e["step"]: e["hash"] for e in events(tmp_path, 0) if e["event"] == "step"}
        assert state_hash(model, opt) == logged[step]
        job.assert_no_orphans()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        job.kill()
