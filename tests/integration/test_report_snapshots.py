"""The report of a real run with snapshots (#43): a torch trainer on two simulated nodes
snapshots every step, one rank is SIGKILLed, every rank resumes from memory. The report's
kept training must agree with the steps the trainer really kept, timed by the trainer's
own step log (when each cycle resumed, when it reached the step the next resumed from),
and its lost work is at most the step or two after the snapshot resumed from. Without
node 0's timed snapshot readings the report knew nothing of that work (no checkpoint was
made: every cycle's progress was unknown)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob, clean_env
from tests.integration.test_snapshots_launch import BASE, events, trainer, unique

pytestmark = pytest.mark.torch

# The ranks step together (``--lockstep``), as a collective holds real ranks within a step
# of each other: unsynchronised, a loaded machine let rank 1 trail rank 0 by two steps, past
# the two snapshots a node keeps, and the job rightly had no common step to resume from.
STEP_S = 0.25
STEPS = 40
FAULT_STEP = 16
# How closely the report's cuts match the trainer's log: node 0 looks every 0.5 s, and a
# start-up is back-dated from the first step it saw by a few steps at the job's mean pace
# (which a loaded machine stretches and shrinks).
CUT_S = 0.5 + 3 * STEP_S


def trained(tmp: Path, ranks: int) -> list[tuple[float, float, int]]:
    """Each cycle's training as the trainer logged it (rank 0's clock): when it resumed,
    when it reached the last step the job kept from the cycle (the lowest step a rank of
    the next cycle resumed from; the last cycle: its last step), and how many steps rank 0
    kept from it (up to the step it resumed from itself: with its own shard, a rank that
    went on a step after another was killed resumes from that step)."""
    logs = [events(tmp, r) for r in range(ranks)]
    cycles = sorted({e["cycle"] for e in logs[0]})

    def resumed(log: list[dict], cycle: int) -> int:
        return next(e["step"] for e in log if e["event"] == "resume" and e["cycle"] == cycle)

    out = []
    for c, nxt in zip(cycles, [*cycles[1:], None], strict=True):
        mine = [e for e in logs[0] if e["cycle"] == c]
        resume = next(e for e in mine if e["event"] == "resume")
        last = max(e["step"] for e in mine if e["event"] == "step")
        kept = last if nxt is None else min(resumed(log, nxt) for log in logs)
        own = last if nxt is None else resumed(logs[0], nxt)
        at = next(e["time"] for e in mine if e["event"] == "step" and e["step"] == kept)
        out.append((resume["time"], at, own - resume["step"]))
    return out


@pytest.mark.timeout(240)
def test_the_report_counts_work_resumed_from_snapshots_as_kept(tmp_path: Path) -> None:
    job = SimJob(
        tmp_path,
        2,
        [*BASE, "--max-restarts", "2"],
        trainer(
            tmp_path,
            *("--steps", str(STEPS), "--step-time", str(STEP_S), "--ckpt-every", "1000", "--lockstep"),
            *("--fault", "kill", "--fault-rank", "1", "--fault-step", str(FAULT_STEP)),
        ),
        job_id=unique("43047"),
    ).start()
    try:
        assert job.wait(200) == [0, 0], job.dump()
    finally:
        job.kill()
    truth = trained(tmp_path, 2)
    assert sum(steps for _, _, steps in truth) == STEPS  # every step of rank 0 kept once

    proc = subprocess.run(
        [sys.executable, "-m", "slurm_ft.cli.report", "--state-dir", str(job.state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    totals = doc["totals"]
    assert totals["split_cycles"] == 2, totals
    # each cycle's start-up end and kept end, to within CUT_S
    (resumed0, kept0, _), (resumed1, _, _) = truth
    first, second = (c["split"] for c in doc["cycles"])
    assert first["startup_end"] == pytest.approx(resumed0, abs=CUT_S), (first, truth)
    assert first["kept_end"] == pytest.approx(kept0, abs=CUT_S), (first, truth)
    assert second["startup_end"] == pytest.approx(resumed1, abs=CUT_S), (second, truth)
    # lost: from the step kept to the kill (rank 1 died right after its step FAULT_STEP)
    killed = next(e["time"] for e in events(tmp_path, 1) if e["event"] == "step" and e["step"] == FAULT_STEP)
    assert totals["lost_work_s"] <= killed - kept0 + CUT_S, (totals, truth)
    steps0 = {e["step"]: e["time"] for e in events(tmp_path, 0) if e["event"] == "step" and e["cycle"] == 1}
    pace = (max(steps0.values()) - min(steps0.values())) / (len(steps0) - 1)  # the trainer's own
    assert totals["seconds_per_step"] == pytest.approx(pace, rel=0.3), (totals, pace)
    # a cycle that succeeds keeps its training to its end (the workers' exit included)
    assert second["kept_end"] == doc["cycles"][1]["end"]
    assert totals["goodput_ratio"] == pytest.approx(totals["progress_s"] / totals["wall_clock_s"])
    assert any("timed by node 0's snapshot readings alone" in note for note in doc["notes"]), doc["notes"]
    [restore] = doc["snapshot_restores"]
    assert restore["cycle"] == 1
    # the step the report says the job resumed at is the one the trainer's ranks logged
    assert restore["step"] == min(
        e["step"] for r in range(2) for e in events(tmp_path, r) if e["event"] == "resume" and e["cycle"] == 1
    ), restore


@pytest.mark.timeout(240)
def test_the_report_times_the_snapshots_of_node_rank_0_when_node_0_stands_by(tmp_path: Path) -> None:
    """#44's lose-node runs: node 0 (the store's host) was retired as a suspect and stood
    by, and it alone read its own memory for the report, which then held no new snapshot:
    a cycle that trained and was kept read as start-up and no progress. Here rank 0 is
    killed on node 0, which is suspect at once (``--suspect-after 1``): the spare takes
    node rank 0 and its launcher reads the snapshots, so the report cuts the second cycle
    as the trainer logged it."""
    job = SimJob(
        tmp_path,
        3,
        [*BASE, "--max-restarts", "2", "--spare-nodes", "1", "--suspect-after", "1"],
        trainer(
            tmp_path,
            *("--steps", str(STEPS), "--step-time", str(STEP_S), "--ckpt-every", "1000", "--lockstep"),
            *("--fault", "kill", "--fault-rank", "0", "--fault-step", str(FAULT_STEP)),
        ),
        job_id=unique("44303"),
    ).start()
    try:
        assert job.wait(200) == [0, 0, 0], job.dump()
    finally:
        job.kill()
    replaced = json.loads((job.state / "cycles" / "cycle1.json").read_text())
    assert replaced["active_nodes"][0] != "node0", replaced  # node 0 stood by in cycle 1
    truth = trained(tmp_path, 2)
    proc = subprocess.run(
        [sys.executable, "-m", "slurm_ft.cli.report", "--state-dir", str(job.state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["totals"]["split_cycles"] == 2, doc["totals"]
    (_, kept0, _), (resumed1, _, _) = truth
    first, second = (c["split"] for c in doc["cycles"])
    assert first["kept_end"] == pytest.approx(kept0, abs=CUT_S), (first, truth)
    # without the readings of the spare on node rank 0: no sign of progress in this cycle
    assert second["startup_end"] == pytest.approx(resumed1, abs=CUT_S), (second, truth)
    assert second["kept_end"] == doc["cycles"][1]["end"]
