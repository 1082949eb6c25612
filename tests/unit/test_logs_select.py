"""slurm-ft-logs' line selection (block-level, in C) against a plain per-line reading of
the same text; head, tail and the merge of per-node files."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft import logline
from slurm_ft.logs import select

WORLD = 130
WIDTH = logline.rank_width(WORLD)
TEXTS = [
    "UserWarning: same everywhere",
    "step 17 loss 2.5",
    "Traceback (most recent call last):",
    "  17 appears in the text",
    "error: disk full",
    "",
    "ünïcode ✓",
]


def make_lines(seed: int, n: int = 400) -> list[bytes]:
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        r = rnd.randrange(WORLD)
        mark = rnd.choice([logline.LINE_MARK] * 8 + [logline.CONTINUATION_MARK, logline.NOTE_MARK])
        for _ in range(rnd.randrange(1, 4)):  # a rank's lines come in runs
            out.append(logline.rank_prefix(r, WIDTH, mark) + rnd.choice(TEXTS).encode())
    return out


def reference(lines: list[bytes], sel: select.Selection) -> list[bytes]:
    out = []
    for line in lines:
        rank, _, text = logline.split_line(line)
        if sel.ranks is not None and rank not in sel.ranks:
            continue
        if sel.pattern is not None and re.search(sel.pattern.encode(), text) is None:
            continue
        out.append(line)
    return out


def run(lines: list[bytes], sel: select.Selection) -> list[bytes]:
    filt = select.LineFilter(sel, WORLD)
    block = b"\n" + b"".join(line + b"\n" for line in lines)
    return list(select.lines_of(filt.pieces(block)))


rank_sets = st.one_of(
    st.none(),
    st.sets(st.integers(0, WORLD - 1), max_size=10).map(frozenset),  # few: the lines are found
    st.sets(st.integers(0, WORLD - 1), min_size=100).map(frozenset),  # most: the rest is left out
)
patterns = st.sampled_from(
    [
        *(None, "17", "loss", "^Traceback", "full$", r"\d+\.\d", "[Ee]rror", "✓", "^$"),
        *("loss|disk|17", "same|ünï", "[Ee]rror: d", r"l[o]ss 1?7", r"\d+ appears"),
        *(r"\Astep", r"full\Z", r"(?<!: )step", r"\Bep"),
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10_000), rank_sets, patterns)
def test_selection_matches_a_line_by_line_reading(seed, ranks, pattern):
    lines = make_lines(seed)
    sel = select.Selection(ranks=ranks, pattern=pattern)
    assert run(lines, sel) == reference(lines, sel)


def test_a_pattern_is_searched_in_the_text_not_in_the_rank_prefix():
    lines = [logline.rank_prefix(17, WIDTH) + b"hello", logline.rank_prefix(3, WIDTH) + b"rank 17 says hi"]
    assert run(lines, select.Selection(pattern="17")) == [lines[1]]


def test_blocks_hold_whole_lines_whatever_the_block_size(tmp_path):
    lines = make_lines(1, 2000)
    path = tmp_path / "c.log"
    path.write_bytes(b"".join(x + b"\n" for x in lines) + b"  5: unterminated")
    for size in (7, 100, 4096, 1 << 20):
        blocks = list(select.read_blocks(path, size))
        assert all(b.startswith(b"\n") and b.endswith(b"\n") for b in blocks)
        assert b"".join(b[1:] for b in blocks) == path.read_bytes() + b"\n"


def test_head_and_tail_cut_at_line_boundaries():
    pieces = [[b"a\nb\n", b"c\n"], [b"d\ne\nf\n"]]
    assert b"".join(p for batch in select.head(pieces, 4) for p in batch) == b"a\nb\nc\nd\n"
    assert b"".join(p for batch in select.head(pieces, 0) for p in batch) == b""
    tail = select.Tail(4)
    for batch in pieces:
        tail.feed(batch)
    assert b"".join(tail.result()) == b"c\nd\ne\nf\n"
    tail = select.Tail(100)
    for batch in pieces:
        tail.feed(batch)
    assert b"".join(tail.result()) == b"a\nb\nc\nd\ne\nf\n"


@pytest.mark.parametrize("nfiles", [1, 2, 3])
def test_merging_per_node_files_keeps_every_line_and_each_ranks_order(tmp_path, nfiles, monkeypatch):
    monkeypatch.setattr(select, "MERGE_BLOCK_SIZE", 4096)  # files of many blocks
    per_file: list[list[bytes]] = [[] for _ in range(nfiles)]
    for i in range(30_000):
        rank = i % (4 * nfiles)
        per_file[rank // 4].append(logline.rank_prefix(rank, 2) + f"line {i} of rank {rank}".encode())
    paths = []
    for k, lines in enumerate(per_file):
        path = tmp_path / f"job_cycle0.node{k}.log"
        path.write_bytes(b"".join(x + b"\n" for x in lines))
        paths.append(path)
    sizes = [p.stat().st_size for p in paths]
    merged = [line for b in select.merged_blocks(paths, sizes) for line in b[1:].split(b"\n")[:-1]]
    assert sorted(merged) == sorted(x for lines in per_file for x in lines)
    for rank in range(4 * nfiles):
        mine = [x for x in merged if x.startswith(logline.rank_prefix(rank, 2))]
        assert mine == [x for x in per_file[rank // 4] if x.startswith(logline.rank_prefix(rank, 2))]
    if nfiles > 1:  # interleaved, not one file after the other
        first_half = merged[: len(merged) // 2]
        assert all(
            any(x.startswith(logline.rank_prefix(4 * k, 2)) for x in first_half) for k in range(nfiles)
        )


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("[Ee]rror", "rror"),
        ("loss [0-9]+", "loss "),
        (r"loss\.x", "loss.x"),
        ("ab?cdef", "cdef"),
        ("a.*bcd", "bcd"),
        (r"\d+ ms took", " ms took"),
        ("[]a]bcd", "bcd"),
        (r"[\]x]abc", "abc"),
        ("abc{2}d", "abc"),
        ("ab+cd", None),  # "abbcd": no run of three is certain
        ("abc*", None),
        ("(?i)error", None),
        ("a|bcdef", None),
    ],
)
def test_the_text_every_match_contains_is_found_or_none(pattern, literal):
    assert select.required_literal(pattern) == literal


def test_merging_thousands_of_node_files_holds_no_file_open_between_blocks(tmp_path):
    """A 4,096-node job's per-node files (#45): a merge that kept each file open until it
    was done held them all at once, 'Too many open files' under the common soft limit of
    1,024 (and a half-MiB buffer each: 2 GiB)."""
    paths = []
    for k in range(1500):
        path = tmp_path / f"job_cycle0.node{k}.log"
        ranks = (2 * k, 2 * k + 1)
        path.write_bytes(
            b"".join(logline.rank_prefix(r, 4) + b"step %d\n" % s for s in range(3) for r in ranks)
        )
        paths.append(path)
    paths[-1].write_bytes(paths[-1].read_bytes()[:-1])  # an unterminated last line
    sizes = [p.stat().st_size for p in paths]
    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir()))
    most, lines = 0, []
    for block in select.merged_blocks(paths, sizes):
        most = max(most, len(list(fds.iterdir())) - before)
        lines += block[1:].split(b"\n")[:-1]
    assert most <= 0
    assert len(lines) == 1500 * 6
    assert logline.rank_prefix(2999, 4) + b"step 2" in lines  # the unterminated one, whole


def test_rank_reads_only_the_files_of_the_nodes_that_held_it(tmp_path):
    """Over per-node files ``--rank`` opens the files of its ranks' nodes alone, as
    ``--node`` does (#45: at 4,096 nodes, reading every file for one rank took 3.5 s)."""
    import subprocess
    import sys

    from slurm_ft import records
    from slurm_ft.statedir import StateDir

    state = StateDir(tmp_path / "state")
    nodes = ["n0", "n1", "n2"]
    files = [
        records.LogFile(str(tmp_path / f"job_cycle0.node{k}.log"), name, k) for k, name in enumerate(nodes)
    ]
    for k, f in enumerate(files):
        Path(f.path).write_bytes(b"".join(logline.rank_prefix(4 * k + i, 2) + b"hello\n" for i in range(4)))
    rec = records.CycleRecord(
        cycle=0, attempt=0, restart=0, run_id="r", run_uuid="u" * 32, start_time=1.0, nodes=nodes,
        world_size=12, nproc_per_node=4, master_addr="n0", master_port=1,
        log_files=[f.to_json() for f in files],
    )  # fmt: skip
    records.write(state.cycle_record(0), rec)
    Path(files[0].path).unlink()  # node n0's file is gone: rank 5 ran on n1
    cmd = [sys.executable, "-m", "slurm_ft.cli.logs", "--state-dir", str(state.path), "--rank", "5"]
    got = subprocess.run(cmd, capture_output=True, timeout=60, check=True)
    assert got.stderr == b""
    assert got.stdout == logline.rank_prefix(5, 2) + b"hello\n"
