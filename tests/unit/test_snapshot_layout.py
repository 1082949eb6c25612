"""The slot header's seal, the claim rule and the area's names: pure parts of snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft.snapshot import area, claim, layout

HEADER = layout.Header(
    step=1234,
    world_size=8,
    rank=5,
    replicated=False,
    node_rank=2,
    local_rank=1,
    local_world_size=4,
    cycle=7,
    writer_pid=4321,
    origin=layout.Origin.WRITTEN,
    tensor_bytes=4096,
    skeleton_size=300,
)


def sealed_bytes(header: layout.Header = HEADER, generation: int = 9) -> bytearray:
    fields = layout.encode_fields(header)
    raw = bytearray(layout.HEADER_SIZE)
    raw[: len(fields)] = fields
    raw[layout.SEAL_OFFSET :] = layout.encode_seal(fields, generation)
    return raw


def test_a_sealed_header_reads_back_as_written() -> None:
    assert layout.decode(sealed_bytes()) == layout.Sealed(HEADER, 9)


def test_an_unsealed_header_is_not_a_snapshot() -> None:
    raw = sealed_bytes()
    raw[layout.SEAL_OFFSET :] = layout.ZERO_SEAL
    assert layout.decode(raw) is None


def test_any_changed_byte_of_the_fields_or_the_seal_breaks_the_seal() -> None:
    fields = len(layout.encode_fields(HEADER))
    seal = range(layout.SEAL_OFFSET, layout.SEAL_OFFSET + 12)  # generation and CRC (then padding)
    for offset in range(layout.HEADER_SIZE):
        raw = sealed_bytes()
        raw[offset] ^= 0x5A
        assert (layout.decode(raw) is None) == (offset < fields or offset in seal), offset


@pytest.mark.parametrize("written", range(1, 12))
def test_a_seal_torn_part_way_through_its_own_bytes_is_not_a_snapshot(written: int) -> None:
    # the slot was unsealed (zeroes), and the writer died after `written` bytes of the new seal
    raw = sealed_bytes()
    seal = bytes(raw[layout.SEAL_OFFSET :])
    raw[layout.SEAL_OFFSET :] = layout.ZERO_SEAL
    raw[layout.SEAL_OFFSET : layout.SEAL_OFFSET + written] = seal[:written]
    assert layout.decode(raw) is None


def test_a_header_that_says_nonsense_is_refused_even_when_sealed() -> None:
    assert layout.decode(sealed_bytes(layout.Header(**{**HEADER.__dict__, "rank": 8}))) is None
    assert layout.decode(sealed_bytes(layout.Header(**{**HEADER.__dict__, "tensor_bytes": 100}))) is None
    assert layout.decode(bytes(100)) is None


def test_the_names_of_a_rank_and_of_the_nodes_copy() -> None:
    here = Path("/a")
    assert layout.slot_paths(here, layout.rank_key(3)) == (
        Path("/a/rank-00003.0.snap"),
        Path("/a/rank-00003.1.snap"),
    )
    assert layout.key_of(Path("replicated.1.snap")) == "replicated"
    assert layout.key_of(Path("rank-00012.0.snap")) == "rank-00012"
    for other in ("rank-00012.2.snap", "rank-x.0.snap", "space.lock", "rank-00012.owner", "evil.0.snap"):
        assert layout.key_of(Path(other)) is None


ME = claim.Claimant(cycle=5, pid=100, start_ticks=7)


@pytest.mark.parametrize(
    ("owner", "alive", "verdict"),
    [
        (None, False, claim.Verdict.MINE),
        (ME, True, claim.Verdict.MINE),
        (claim.Claimant(4, 90, 1), True, claim.Verdict.MINE),  # the last cycle's worker, even alive
        (claim.Claimant(6, 90, 1), True, claim.Verdict.NEWER_CYCLE),  # I am the leftover
        (claim.Claimant(6, 90, 1), False, claim.Verdict.NEWER_CYCLE),
        (claim.Claimant(5, 90, 1), True, claim.Verdict.LIVE_TWIN),
        (claim.Claimant(5, 90, 1), False, claim.Verdict.MINE),  # a dead twin's claim is taken over
    ],
)
def test_the_claim_rule(owner: claim.Claimant | None, alive: bool, verdict: claim.Verdict) -> None:
    assert claim.decide(owner, ME, alive) is verdict


def test_a_claim_reads_back_and_garbage_is_no_claim() -> None:
    assert claim.Claimant.decode(ME.encode()) == ME
    assert claim.Claimant.decode(claim.Claimant(1, 2, None).encode()) == claim.Claimant(1, 2, None)
    assert claim.Claimant.decode(b"") is None
    assert claim.Claimant.decode(b"1 2") is None


def test_area_names_refuse_keys_that_could_escape_the_root() -> None:
    assert area.area_path(Path("/dev/shm"), 1000, "4242.0") == Path("/dev/shm/slurm-ft-snap.1000.4242.0")
    for bad in ("../x", "a/b", "", "x" * 101):
        with pytest.raises(area.AreaError):
            area.area_path(Path("/dev/shm"), 1000, bad)


def test_sizes_are_said_in_binary_units() -> None:
    assert [area.human(n) for n in (512, 1536, 3 << 20, 5 << 30)] == [
        "512 B",
        "1.5 KiB",
        "3.0 MiB",
        "5.0 GiB",
    ]


def test_the_resume_step_is_the_newest_every_required_holder_has() -> None:
    from slurm_ft.snapshot.choice import newest_common_step

    held = {0: [120, 119], 1: [119, 118], 2: [120, 119]}  # rank 1 was killed writing 120
    assert newest_common_step(held, [0, 1, 2]) == 119
    assert newest_common_step(held, [0, 2]) == 120
    assert newest_common_step(held, [0, 1, 2, 3]) is None  # rank 3's state is nowhere
    assert newest_common_step({0: [5], 1: [7]}, [0, 1]) is None
    assert newest_common_step({}, []) is None
