"""The launcher's snapshot rules as data: the node's cap, the persist's account, the
launcher's line per cycle, and the no-progress guard's view of snapshots."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_ft.config import ProgressSettings
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.snapshots.budget import NodeMemory, plan
from slurm_ft.launch.snapshots.node import NodeSnapshots, breakpoint_of
from slurm_ft.launch.snapshots.persist import Held, outcome
from slurm_ft.progress import Ledger, Reading, close_cycle, open_cycle, stop_reason
from slurm_ft.records import NodeSnapshots as NodeSnapshotsRecord
from slurm_ft.settingsyntax import parse_persist_hook, parse_size, parse_snapshot_memory

pytestmark = pytest.mark.timeout(30)

GiB = 1 << 30


def test_the_default_cap_is_a_quarter_of_the_node_at_most_half_of_shm():
    assert plan(None, NodeMemory(64 * GiB, 32 * GiB), "/dev/shm").limit == 16 * GiB
    assert plan(None, NodeMemory(64 * GiB, 8 * GiB), "/dev/shm").limit == 4 * GiB
    line = plan(None, NodeMemory(64 * GiB, 32 * GiB), "/dev/shm").line
    assert (
        line == "snapshots: up to 16.0 GiB on this node in /dev/shm (auto: a quarter of the node's 64.0 GiB)"
    )


def test_zero_or_no_shared_memory_turns_snapshots_off():
    assert plan(0, NodeMemory(64 * GiB, 32 * GiB), "/dev/shm").limit == 0
    off = plan(None, NodeMemory(64 * GiB, None), "/dev/shm")
    assert off.limit == 0 and off.line == "snapshots: off: no shared memory at /dev/shm"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("auto", None),
        ("0", 0),
        ("4096", 4096),
        ("512M", 512 << 20),
        ("16G", 16 * GiB),
        ("1.5GiB", 3 * GiB // 2),
    ],
)
def test_snapshot_memory_syntax(text, value):
    assert parse_snapshot_memory(text) == value


@pytest.mark.parametrize("text", ["lots", "-1G", "16 X", ""])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(text)


def test_persist_hook_syntax():
    assert parse_persist_hook("mytrainer.ckpt:save") == ("mytrainer.ckpt", "save")
    with pytest.raises(ValueError, match="module:function"):
        parse_persist_hook("mytrainer.save")


def test_the_persists_account_names_every_snapshot_not_written():
    held = [Held(0, 40), Held(1, 40), Held(0, 40, replicated=True)]
    out = '{"rank": 0, "replicated": false, "step": 40, "ok": true, "where": "/ckpt/rank-00000.pt"}\n'
    out += '{"rank": 1, "replicated": false, "step": 40, "ok": false, "problem": "OSError: quota"}\n'
    done = outcome(held, out + "not json\n", "the persist failed: killed", 1.5)
    assert done.persisted == ("rank 0 step 40 -> /ckpt/rank-00000.pt",)
    assert done.not_persisted == (
        "rank 1 step 40: OSError: quota",
        "the node's replicated copy (rank 0) step 40: the persist failed: killed",
    )


def test_a_persist_past_its_deadline_says_so_for_each_snapshot():
    done = outcome([Held(3, 7)], "", "persisting took longer than 5 s (stopped)", 5.0)
    assert done.not_persisted == ("rank 3 step 7: persisting took longer than 5 s (stopped)",)


def test_the_breakpoint_is_named():
    assert breakpoint_of(Ending(143, "SIGTERM")) == "signal SIGTERM"
    assert breakpoint_of(Ending(0, "all workers finished")) == "training finished"
    spent = Ending(1, "restart budget spent")
    assert breakpoint_of(spent) == f"the attempt ends: {spent.outcome}"


def test_one_launcher_line_per_cycle_says_where_ranks_resumed():
    rec = NodeSnapshotsRecord(
        cycle=3,
        node="n1",
        node_rank=1,
        run_uuid="u",
        time=0.0,
        resumed=[
            {"rank": 4, "source": "memory", "step": 120},
            {"rank": 5, "source": "memory", "step": 120},
            {"rank": 6, "source": "none", "step": None},
        ],
        newest_step=131,
    )
    assert NodeSnapshots.resumed_line(rec) == (
        "cycle 3: resumed ranks 4,5 from memory at step 120; rank 6 from nothing; "
        "newest snapshot here at its end: step 131"
    )


# ------------------------------------------------------------------ the no-progress guard

GUARD = ProgressSettings(source="checkpoint-dir:/ckpt", max_no_progress_cycles=2, min_progress_iterations=1)


def run_cycles(snapshots: list[tuple[int | None, int | None]], checkpoint: int = 100) -> Ledger:
    """Cycles whose disk checkpoint never moves; (snapshot step at start, at end) each."""
    ledger = Ledger(seen_source="checkpoint-dir:/ckpt")
    for cycle, (start, end) in enumerate(snapshots):
        ledger = open_cycle(ledger, cycle, 0, Reading(checkpoint, snapshot=start), None, GUARD)
        ledger = close_cycle(ledger, Reading(checkpoint, snapshot=end), "failed", GUARD, None)
    return ledger


def test_a_snapshot_that_moved_on_is_progress_when_the_checkpoint_did_not():
    ledger = run_cycles([(None, 110), (110, 125), (125, 131)])
    assert [c.progressed for c in ledger.cycles] == [True, True, True]
    assert stop_reason(ledger, GUARD) is None


def test_a_job_that_only_ever_resumes_from_the_same_snapshot_is_stopped():
    ledger = run_cycles([(None, 110), (110, 110), (110, 110)])
    assert [c.progressed for c in ledger.cycles] == [True, False, False]
    assert stop_reason(ledger, GUARD) == "no progress in the last 2 cycles (iteration stuck at 100)"


def test_a_requeued_attempt_starting_with_empty_memory_counts_from_the_snapshot_it_had():
    # the requeue resumes from the persisted copy of step 110 and fails before the next snapshot
    ledger = run_cycles([(None, 110), (None, 110), (None, 110)])
    assert [c.progressed for c in ledger.cycles] == [True, False, False]
    assert stop_reason(ledger, GUARD) is not None


def test_without_snapshots_the_guard_judges_as_before():
    ledger = run_cycles([(None, None), (None, None)])
    assert [c.progressed for c in ledger.cycles] == [False, False]
    assert dataclasses.replace(ledger).streak == 2


# ------------------------------------------------------------------ the report


def test_lost_work_is_split_at_the_snapshot_the_job_resumed_from():
    from slurm_ft.report.snapshots import lost_since_snapshot

    # 30 s lost after the checkpoint of step 100 at 0.2 s/step; resumed from step 248:
    # 29.6 s were kept by the snapshot, 0.4 s (two steps) are really lost
    assert lost_since_snapshot(30.0, 100, 248, 0.2) == pytest.approx(0.4)
    assert lost_since_snapshot(30.0, 100, None, 0.2) == 30.0  # no snapshot: all of it
    assert lost_since_snapshot(30.0, 100, 90, 0.2) == 30.0  # an older snapshot helps nothing
    assert lost_since_snapshot(1.0, 100, 248, 0.2) == 0.0


def test_the_timeline_shows_the_cycles_that_resumed_from_snapshots():
    from slurm_ft.report.snapshots import snapshot_restores
    from slurm_ft.report.views import CycleView

    def cycle(n: int) -> CycleView:
        return CycleView(
            n, 0, n, 100.0 * n, 100.0 * n + 90, "failed", ("a", "b"), 4, None, None, None, None, "record"
        )

    def node(n: int, name: str, *resumed: tuple[int, str, int | None]) -> NodeSnapshotsRecord:
        docs = [{"rank": r, "source": s, "step": st} for r, s, st in resumed]
        return NodeSnapshotsRecord(cycle=n, node=name, node_rank=0, run_uuid="u", time=0.0, resumed=docs)

    snaps = [
        node(0, "a", (0, "none", None), (1, "none", None)),
        node(1, "a", (0, "memory", 40), (1, "memory", 40)),
        node(1, "b", (2, "memory", 41), (3, "none", None)),
    ]
    restores = snapshot_restores(snaps, [cycle(0), cycle(1)])
    assert [(r.cycle, r.time, r.step, r.sources) for r in restores] == [
        (1, 100.0, 40, ("memory x3", "none x1"))
    ]


def test_a_cycle_whose_workers_kept_no_new_snapshot_is_said():
    rec = NodeSnapshotsRecord(
        cycle=4, node="n", node_rank=0, run_uuid="u", time=0.0,
        resumed=[{"rank": 0, "source": "memory", "step": 50}], newest_step=50,
    )  # fmt: skip
    assert NodeSnapshots.stalled_line(rec, asked=True) == (
        "cycle 4: no new snapshot kept on this node (newest: step 50); "
        "a refusal, if any, is in the workers' stderr (slurm-ft snapshot: ...)"
    )
    assert NodeSnapshots.stalled_line(rec, asked=False) is None  # a trainer without snapshots
    moved = dataclasses.replace(rec, newest_step=61)
    assert NodeSnapshots.stalled_line(moved, asked=True) is None


@pytest.mark.torch
def test_the_newest_persisted_step_wins_whichever_node_writes_last(tmp_path):
    import os

    import torch

    from slurm_ft.snapshot import layout, persisted, reader, writer

    out = tmp_path / "persisted"

    def slot(node: int, step: int) -> reader.SnapshotInfo:
        """Node ``node``'s replicated copy of ``step`` (world size 3), in its own area."""
        where = tmp_path / f"node{node}"
        where.mkdir(exist_ok=True)
        me = writer.Identity(3, 0, node, 0, 1, 1, os.getpid(), None)
        kept = writer.SlotWriter(where, layout.REPLICATED, me, None).write(
            step, {"w": torch.full((2,), step * 1.0)}
        )
        assert kept.outcome is writer.Outcome.KEPT, kept
        found = reader.newest(where, layout.REPLICATED)
        assert found is not None and found.step == step
        return found

    persisted.save(out, slot(0, 4276))
    persisted.save(out, slot(2, 1718))  # a stale node, last
    step, state = persisted.load(out, 2, 3) or (None, {})
    assert step == 4276 and state["w"].tolist() == [4276.0, 4276.0]  # type: ignore[attr-defined]
    persisted.save(out, slot(1, 4300))
    assert sorted(p.name for p in out.glob("replicated.*")) == [  # the two newest steps are kept
        "replicated.step000000004276.snap",
        "replicated.step000000004300.snap",
    ]
    assert persisted.load(out, 0, 4) is None  # another world size
    assert persisted.export(out / "replicated.step000000004300.snap", tmp_path / "x.pt") == 4300
    doc = torch.load(tmp_path / "x.pt", weights_only=True)
    assert (doc["step"], doc["world_size"], doc["state"]["w"].tolist()) == (4300, 3, [4300.0, 4300.0])


def test_a_persisted_file_that_is_not_a_whole_snapshot_is_refused(tmp_path):
    """A torn or foreign file in the persist dir is reported (the worker says it once and
    starts without it), never loaded: its header's seal does not check."""
    from slurm_ft.snapshot import persisted, reader

    (tmp_path / "rank-00000.step000000000012.snap").write_bytes(b"not a snapshot" * 400)
    with pytest.raises(reader.Torn, match="not a complete snapshot"):
        persisted.load(tmp_path, 0, 1)
    with pytest.raises(persisted.NoCommonStep, match="no step that all 2 ranks persisted"):
        persisted.load(tmp_path, 1, 2)  # nothing of rank 1, no replicated copy


def test_the_resume_step_is_the_newest_step_every_rank_persisted_never_a_mix():
    """Ranks a step apart at the breakpoint: each rank's own newest would mix steps 30 and
    29 (the resubmitted job's ranks then trained from different states, and its DDP
    crashed); the newest step every rank has is 29. A replicated copy counts for every rank."""
    from slurm_ft.snapshot.persisted import resume_step

    assert resume_step({"rank-00000": {29, 30}, "rank-00001": {29, 30}, "rank-00002": {28, 29}}, 3) == 29
    assert resume_step({"rank-00000": {30}, "rank-00001": {30}, "rank-00002": {29}}, 3) is None
    assert resume_step({"rank-00000": {30}, "replicated": {29, 30}}, 3) == 30
    assert resume_step({"replicated": {7, 9}}, 4) == 9
    assert resume_step({"rank-00000": {5}}, 2) is None  # rank 1 has nothing
    assert resume_step({}, 1) is None


@pytest.mark.torch
def test_a_spare_forgets_its_snapshots_after_a_cycle_on_the_bench(tmp_path):
    """Its own ranks' slots and the ring replicas it kept are older than every active
    node's once it stood by for a cycle: a reprieved suspect that kept them restored its
    replica of rank 1 from 3,400 steps before while rank 0 resumed at the job's step."""
    import os

    import torch

    from slurm_ft.snapshot import layout, reader, writer

    area = tmp_path / "area"
    area.mkdir(mode=0o700)
    for rank in (0, 1):  # its own rank 0 and a replica of rank 1
        me = writer.Identity(2, rank, 0, 0, 1, 1, os.getpid(), None)
        for step in (809, 810):
            kept = writer.SlotWriter(area, layout.rank_key(rank), me, None).write(step, {"w": torch.zeros(2)})
            assert kept.outcome is writer.Outcome.KEPT, kept
    snapshots = NodeSnapshots(area, 1 << 30, event=lambda line: None)
    assert sorted(reader.held_steps(area)) == ["rank-00000", "rank-00001"]
    removed = snapshots.forget()
    assert sorted(removed) == sorted(f"rank-0000{r} step {s}" for r in (0, 1) for s in (809, 810))
    assert reader.held_steps(area) == {} and snapshots.newest_step() is None
    assert NodeSnapshots(None, 0).forget() == []  # snapshots off: nothing to do
