"""Snapshots kept in shared memory, through real trainer processes (slurm_ft.worker with the
launcher's variables set by the test), real SIGKILLs and a real small tmpfs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_ft import procident
from slurm_ft.snapshot import area, layout, reader
from tests.support.snaptrainer import ROOT, Trainer, start

pytestmark = pytest.mark.torch


def _killer(*args: str) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.snapshot_killer", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert int(lines[0][0]) == len(lines) - 1
    return lines[1:]


def test_a_writer_killed_before_any_chunk_or_the_seal_leaves_the_previous_snapshot(snap_area: Path) -> None:
    # step 2k+1 written whole, then step 2k+2 killed before its chunk k (the last k: before the seal)
    found = _killer("points", str(snap_area))
    assert len(found) >= 10
    assert found == [[str(k), str(2 * k + 1), "True"] for k in range(len(found))]


def test_a_writer_killed_at_random_moments_leaves_a_whole_snapshot(snap_area: Path) -> None:
    found = _killer("random", str(snap_area), "25")
    steps = [int(step) for _, step, _ in found]
    # nothing at all only until the first snapshot was completed; then always a whole one
    assert all(whole == "True" for _, step, whole in found if step != "-1"), found
    assert steps == sorted(steps) and steps[-1] > 0, found  # never older than one seen before


def test_the_next_cycle_restores_the_newest_whole_snapshot(snap_area: Path, trainers: list[Trainer]) -> None:
    first = start(trainers, snap_area, cycle=1)
    assert first.ask("restore") == "restored None"
    assert first.ask("snap 1") == "snap 1 True"
    assert first.ask("snap 2") == "snap 2 True"
    first.kill()
    second = start(trainers, snap_area, cycle=2)
    assert second.ask("restore") == "restored 2 memory True"
    assert second.finish() == (0, [])


def test_the_step_the_launcher_chose_is_restored_from_either_slot(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    first = start(trainers, snap_area, cycle=1)
    assert [first.ask(f"snap {s}") for s in (1, 2)] == ["snap 1 True", "snap 2 True"]
    first.kill()
    older = start(trainers, snap_area, cycle=2, resume_step=1)
    assert older.ask("restore") == "restored 1 memory True"
    older.kill()
    missing = start(trainers, snap_area, cycle=3, resume_step=7)
    assert missing.ask("restore") == "restored None"
    assert missing.finish() == (0, ["slurm-ft snapshot: not restored: no snapshot of step 7 here"])
    elsewhere = start(trainers, snap_area, cycle=4, resume_step=-1)  # the cycle resumes from a checkpoint
    assert elsewhere.ask("restore") == "restored None"
    assert elsewhere.finish() == (0, [])


def test_a_cycle_that_started_over_is_restored_from_its_own_timeline(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    first = start(trainers, snap_area, cycle=1)
    assert [first.ask(f"snap {s}") for s in (450, 451)] == ["snap 450 True", "snap 451 True"]
    first.kill()
    second = start(trainers, snap_area, cycle=2)  # resumed from a checkpoint of step 399, not from memory
    assert second.ask("snap 400") == "snap 400 True"
    second.kill()
    third = start(trainers, snap_area, cycle=3)
    assert third.ask("restore") == "restored 400 memory True"  # not 451, still in the other slot


def test_a_mapped_restore_keeps_its_values_while_the_trainer_snapshots_on(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    first = start(trainers, snap_area, cycle=1)
    assert [first.ask(f"snap {s}") for s in (1, 2)] == ["snap 1 True", "snap 2 True"]
    first.kill()
    second = start(trainers, snap_area, cycle=2)
    assert second.ask("restore mapped") == "restored 2 memory True"
    assert [second.ask(f"snap {s}") for s in (3, 4, 5)] == ["snap 3 True", "snap 4 True", "snap 5 True"]
    assert second.ask("kept") == "kept 2 True"  # the slot it was mapped from was written twice since
    assert second.ask("restore") == "restored 5 memory True"


def test_a_leftover_worker_of_the_last_cycle_cannot_write_over_the_new_one(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    leftover = start(trainers, snap_area, cycle=1)
    assert leftover.ask("snap 1") == "snap 1 True"
    new = start(trainers, snap_area, cycle=2)
    assert new.ask("restore") == "restored 1 memory True"
    assert new.ask("snap 100") == "snap 100 True"
    assert leftover.ask("snap 2") == "snap 2 False"
    assert leftover.ask("snap 3") == "snap 3 False"
    info = reader.newest(snap_area, layout.rank_key(0))
    assert info is not None and (info.step, info.header.cycle) == (100, 2)
    code, err = leftover.finish()
    assert code == 0
    assert err == [
        f"slurm-ft snapshot: step 2 not kept: rank-00000 is written by pid {new.proc.pid} of cycle 2; "
        "this worker takes no more snapshots"
    ]


def test_a_second_live_worker_of_the_same_cycle_and_rank_is_refused(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    first = start(trainers, snap_area, cycle=3)
    assert first.ask("snap 1") == "snap 1 True"
    twin = start(trainers, snap_area, cycle=3)
    assert twin.ask("snap 9") == "snap 9 False"
    assert first.ask("snap 2") == "snap 2 True"
    info = reader.newest(snap_area, layout.rank_key(0))
    assert info is not None and info.step == 2
    assert twin.finish()[1] == [
        f"slurm-ft snapshot: step 9 not kept: rank-00000 is written by pid {first.proc.pid} of cycle 3; "
        "this worker takes no more snapshots"
    ]


def test_a_snapshot_of_another_world_size_is_refused_and_said_once(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    before = start(trainers, snap_area, rank=1, world=2, cycle=1)
    assert before.ask("snap 5") == "snap 5 True"
    before.kill()
    after = start(trainers, snap_area, rank=1, world=4, cycle=2)
    assert after.ask("restore") == "restored None"
    assert after.ask("restore") == "restored None"
    assert after.finish() == (
        0,
        [
            "slurm-ft snapshot: not restored: rank-00001 of step 5 was taken by rank 1 of 2, "
            "this worker is rank 1 of 4"
        ],
    )


def test_replicated_state_is_kept_once_per_node_and_every_local_rank_restores_it(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    ranks = [
        start(trainers, snap_area, rank=r, world=2, local_rank=r, local_world=2, cycle=1) for r in (0, 1)
    ]
    for step in (1, 2):
        assert [t.ask(f"snap {step} replicated") for t in ranks] == [f"snap {step} True"] * 2
    for t in ranks:
        t.kill()
    slot_files = sorted(p.name for p in snap_area.iterdir() if layout.key_of(p) is not None)
    assert slot_files == ["replicated.0.snap", "replicated.1.snap"]  # one copy (two slots), not one per rank
    described = reader.describe(snap_area)
    assert [(i.key, i.step, i.replicated, i.world_size) for i in described] == [("replicated", 2, True, 2)]
    second = start(trainers, snap_area, rank=1, world=2, local_rank=1, local_world=2, cycle=2)
    assert second.ask("restore") == "restored 2 memory True"


def test_a_snapshot_over_the_nodes_cap_is_refused_once_and_training_goes_on(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    one = start(trainers, snap_area, rank=0, world=2, cycle=1, limit=3 << 20, mib=1.0)
    other = start(trainers, snap_area, rank=1, world=2, cycle=1, limit=3 << 20, mib=1.0)
    assert one.ask("snap 1") == "snap 1 True"
    assert other.ask("snap 1") == "snap 1 True"
    assert other.ask("snap 2") == "snap 2 False"  # a third MiB-sized slot on the node: over 3 MiB
    assert other.ask("snap 3") == "snap 3 False"
    code, err = other.finish()
    assert code == 0 and len(err) == 1
    assert re.fullmatch(
        r"slurm-ft snapshot: step 2 not kept: 1\.0 MiB for rank-00001 with 2\.0 MiB held on the node "
        r"would exceed the node's snapshot memory of 3\.0 MiB; training goes on without it",
        err[0],
    ), err
    assert area.held(snap_area) < 3 << 20
    assert [(i.key, i.step) for i in reader.describe(snap_area)] == [("rank-00000", 1), ("rank-00001", 1)]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mounting a small tmpfs needs root", pytrace=False)
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "shm"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=1777", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_shared_memory_that_fills_up_is_a_clear_refusal_not_a_crash(
    small_tmpfs: Path, trainers: list[Trainer]
) -> None:
    made = area.create(small_tmpfs, os.getuid(), "4242.0", os.getpid(), procident.start_ticks(os.getpid()))
    assert area.space_problem(small_tmpfs, 64 << 20) == (
        f"snapshot memory: {small_tmpfs} has 3.0 MiB free of 3.0 MiB, "
        "less than the 64.0 MiB snapshots may use on this node"
    )
    t = start(trainers, made, mib=2.0)
    assert t.ask("snap 1") == "snap 1 True"
    assert t.ask("snap 2") == "snap 2 False"  # no room for the second slot
    assert t.ask("snap 3") == "snap 3 False"
    code, err = t.finish()
    assert code == 0
    assert err == [
        f"slurm-ft snapshot: step 2 not kept: {small_tmpfs} is full: no room for 2.0 MiB for rank-00000; "
        "training goes on without it"
    ]
    again = start(trainers, made, cycle=2, mib=2.0)
    assert again.ask("restore") == "restored 1 memory True"


def test_the_sweep_removes_only_this_users_areas_whose_launcher_is_gone(tmp_path: Path) -> None:
    uid = os.getuid()
    me = os.getpid()
    live = area.create(tmp_path, uid, "100.0", me, procident.start_ticks(me))
    gone = subprocess.Popen(["true"])
    gone.wait()
    ended = area.create(tmp_path, uid, "101.0", gone.pid, 12345)
    reused_pid = area.create(tmp_path, uid, "102.0", me, 1)  # my pid, another start tick: ended
    other_user = tmp_path / f"{area.PREFIX}.{uid + 1}.103.0"
    other_user.mkdir(mode=0o700)
    not_ours = tmp_path / "something-else"
    not_ours.mkdir()
    (ended / "rank-00000.0.snap").write_bytes(b"x" * 100)
    assert sorted(area.sweep(tmp_path, uid, keep=None)) == sorted([ended, reused_pid])
    assert live.is_dir() and other_user.is_dir() and not_ours.is_dir()
    assert not ended.exists() and not reused_pid.exists()


def test_a_second_live_launcher_of_the_same_key_gets_its_own_area(tmp_path: Path) -> None:
    """Two standalone jobs of one user (key ``standalone``) or two steps of one job on a
    host: a clean-clone run saw one launcher restore the other's snapshot and then fail
    when the other removed the shared area at its end."""
    uid = os.getuid()
    other = subprocess.Popen(["sleep", "60"])
    try:
        first = area.create(tmp_path, uid, "standalone.n0", other.pid, procident.start_ticks(other.pid))
        me = os.getpid()
        second = area.create(tmp_path, uid, "standalone.n0", me, procident.start_ticks(me))
        assert second != first and second.name == f"{area.PREFIX}.{uid}.standalone.n0.2"
        assert (first / area.OWNER_FILE).read_text().split()[0] == str(other.pid)
        assert area.create(tmp_path, uid, "standalone.n0", me, procident.start_ticks(me)) == first.parent / (
            f"{area.PREFIX}.{uid}.standalone.n0.2"
        )
    finally:
        other.kill()
        other.wait()
    # the first launcher gone: its area is adopted again (the next sweep would remove it)
    assert area.create(tmp_path, uid, "standalone.n0", me, procident.start_ticks(me)) == first


def test_the_launchers_side_reads_headers_without_torch(snap_area: Path, trainers: list[Trainer]) -> None:
    t = start(trainers, snap_area, rank=3, world=4, cycle=1)
    assert t.ask("snap 7") == "snap 7 True"
    code = (
        "import sys; from pathlib import Path; from slurm_ft.snapshot import reader, area; "
        f"found = reader.describe(Path({str(snap_area)!r})); "
        "print([(i.key, i.step, i.rank, i.world_size, i.replicated, i.size > 0) for i in found], "
        "'torch' in sys.modules, area.held(found[0].path.parent) > 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[('rank-00003', 7, 3, 4, False, True)] False True"


def test_without_the_launchers_area_the_calls_are_no_ops_and_torch_stays_unloaded() -> None:
    code = (
        "import sys; from slurm_ft import worker; "
        "print(worker.snapshot(1, {'a': 1}), worker.restore_snapshot(), 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_FT_SNAPSHOT")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False None False"


def test_state_a_snapshot_cannot_keep_is_refused_with_what_it_is(snap_area: Path) -> None:
    import torch

    from slurm_ft.snapshot import writer

    for state, said in (
        ({"w": torch.eye(3).to_sparse()}, "the state holds a torch.sparse_coo torch.float32 tensor on cpu"),
        (
            {"w": torch.empty(3, device="meta")},
            "the state holds a torch.strided torch.float32 tensor on meta",
        ),
        ({"f": lambda: 1}, "the state holds a value that cannot be pickled"),
    ):
        me = writer.Identity(1, 0, 0, 0, 1, 1, os.getpid(), None)
        result = writer.SlotWriter(snap_area, layout.rank_key(0), me, None).write(1, state)
        assert result.outcome is writer.Outcome.UNSUPPORTED and result.message.startswith(said), result
    assert reader.describe(snap_area) == []


def test_odd_tensors_come_back_as_they_went_in(snap_area: Path) -> None:
    import torch

    from slurm_ft.snapshot import writer

    shared = torch.arange(6, dtype=torch.float16).view(2, 3)
    state = {
        "a": shared,
        "b": [shared, {"c": shared.t()}],  # the same tensor again, and a strided view of it
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(7, dtype=torch.int64),
        "flags": torch.tensor([True, False]),
        "bf16": torch.ones(3, dtype=torch.bfloat16),
        "param": torch.nn.Parameter(torch.ones(2)),
    }
    me = writer.Identity(1, 0, 0, 0, 1, 1, os.getpid(), None)
    assert (
        writer.SlotWriter(snap_area, layout.rank_key(0), me, None).write(3, state).outcome
        is writer.Outcome.KEPT
    )
    info = reader.newest(snap_area, layout.rank_key(0))
    assert info is not None
    for copy in (True, False):
        back = reader.load(info, copy=copy)
        assert back["b"][0] is back["a"] and torch.equal(back["a"], shared)
        assert torch.equal(back["b"][1]["c"], shared.t())
        assert back["empty"].shape == (0, 4) and back["scalar"].item() == 7
        assert back["flags"].tolist() == [True, False] and back["bf16"].dtype == torch.bfloat16
        assert type(back["param"]) is torch.Tensor and back["param"].tolist() == [1.0, 1.0]


def test_a_snapshot_held_still_for_persisting_is_not_written_over(
    snap_area: Path, trainers: list[Trainer]
) -> None:
    t = start(trainers, snap_area, cycle=1)
    assert t.ask("snap 1") == "snap 1 True"
    with reader.held_still(snap_area, layout.rank_key(0), wait_s=5) as info:
        assert info is not None and info.step == 1
        assert [t.ask(f"snap {s}") for s in (2, 3)] == ["snap 2 False", "snap 3 False"]  # skipped, silently
        assert reader.newest(snap_area, layout.rank_key(0)) == info
    assert t.ask("snap 4") == "snap 4 True"
    assert t.finish() == (0, [])


def test_the_launcher_persists_a_mapped_snapshot_with_torch_save(
    snap_area: Path, tmp_path: Path, trainers: list[Trainer]
) -> None:
    import torch

    from tests.integration.snapshot_worker import whole

    t = start(trainers, snap_area, cycle=1, mib=2.0)
    assert t.ask("snap 12") == "snap 12 True"
    with reader.held_still(snap_area, layout.rank_key(0), wait_s=5) as info:
        assert info is not None
        torch.save(reader.load(info, copy=False), tmp_path / "persisted.pt")
    assert whole(12, torch.load(tmp_path / "persisted.pt", weights_only=True))
