"""--collapse in two processes (a forked child takes the second half): the same groups as
one process, one window where one process makes one, the child's failure never seen in the
output, and no child left behind, even when the parent is killed."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.logs_throughput import state_dir
from slurm_ft import logline
from slurm_ft.logs import collapse, halves, select

WORLD = 64
WIDTH = logline.rank_width(WORLD)


def write_log(path: Path, seed: int, steps: int, unique: bool = False) -> list[bytes]:
    """A cycle log: warnings every rank prints, per-step lines; ``unique``: a line of its
    own per rank and step (many distinct lines)."""
    rnd = random.Random(seed)
    lines = []
    for step in range(steps):
        order = list(range(WORLD))
        rnd.shuffle(order)
        for r in order:
            p = logline.rank_prefix(r, WIDTH)
            lines.append(p + b"UserWarning: barrier() on the current device")
            lines.append(p + f"iteration {step % 7} done".encode())
            if unique:
                lines.append(p + f"rank {r} step {step} loss {rnd.random():.4f}".encode())
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    return lines


def folder_of(mode: collapse.Mode = collapse.Mode.EXACT, max_distinct: int = collapse.MAX_DISTINCT):
    def folder(hold_first: bool) -> collapse.Collapser:
        return collapse.Collapser(WORLD, mode, max_distinct=max_distinct, hold_first=hold_first)

    return folder


def rendered(windows: list[collapse.Window], sink) -> None:
    for w in windows:
        sink.writelines(collapse.render(w))


def as_json(windows: list[collapse.Window], sink) -> None:
    for w in windows:
        for g in w.groups():
            sink.write((json.dumps(g.to_json()) + "\n").encode())


def everything(block: bytes) -> list[bytes]:
    return [block[1:]]


def one_process(paths, folder, show, pieces=everything) -> bytes:
    out = io.BytesIO()
    c = folder(False)
    for block in select.merged_blocks(paths, [p.stat().st_size for p in paths]):
        c.feed(pieces(block))
        show(c.take(), out)
    show(c.finish(), out)
    return out.getvalue()


def two_processes(paths, folder, show, pieces=everything) -> bytes:
    out = io.BytesIO()
    halves.collapse(paths, [p.stat().st_size for p in paths], pieces, folder, show, out)
    return out.getvalue()


def children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                found.add(int(entry.name))
    return found


@pytest.mark.parametrize("mode", list(collapse.Mode))
def test_a_log_of_few_distinct_lines_collapses_exactly_as_in_one_process(tmp_path, mode):
    log = tmp_path / "job_cycle0.log"
    write_log(log, 1, 300)
    before = children()
    expected = one_process([log], folder_of(mode), rendered)
    assert two_processes([log], folder_of(mode), rendered) == expected
    assert b"more than" not in expected and expected.count(b"\n") == (8 if mode is collapse.Mode.EXACT else 2)
    assert children() == before


def test_per_node_files_and_a_rank_selection_collapse_as_in_one_process(tmp_path):
    logs = [tmp_path / "job_cycle0_node0.log", tmp_path / "job_cycle0_node1.log"]
    write_log(logs[0], 2, 200)
    write_log(logs[1], 3, 120)
    filt = select.LineFilter(select.Selection(ranks=frozenset(range(0, WORLD, 3)), pattern=None), WORLD)
    expected = one_process(logs, folder_of(), as_json, filt.pieces)
    assert two_processes(logs, folder_of(), as_json, filt.pieces) == expected
    assert json.loads(expected.splitlines()[0])["count"] == 320 * len(range(0, WORLD, 3))


def test_a_log_of_many_windows_keeps_every_count_and_rank(tmp_path):
    log = tmp_path / "job_cycle0.log"
    lines = write_log(log, 4, 80, unique=True)
    out = two_processes([log], folder_of(max_distinct=500), as_json)
    totals: Counter[str] = Counter()
    ranks: dict[str, set[str]] = {}
    for doc in map(json.loads, out.splitlines()):
        totals[doc["text"]] += doc["count"]
        ranks.setdefault(doc["text"], set()).add(doc["ranks"])
    expected = Counter(logline.split_line(x)[2].decode() for x in lines)
    assert totals == expected
    assert ranks["UserWarning: barrier() on the current device"] == {f"0-{WORLD - 1}"}


def test_the_seam_joins_two_windows_only_when_they_fit_one_table():
    c = collapse.Collapser(WORLD, max_distinct=3)
    first = Counter({b" 1: a": 2, b" 2: a": 1})
    fits = c.joined(first, Counter({b" 1: a": 1}), more=False)
    assert [(g.count, g.ranks) for w in fits for g in w.groups()] == [(4, {1, 2})]
    assert len(fits) == 1 and not fits[0].more
    split = c.joined(first, Counter({b" 3: a": 1, b" 4: b": 1}), more=True)
    assert [w.more for w in split] == [True, True]
    assert [[g.count for g in w.groups()] for w in split] == [[3], [1, 1]]


def test_a_child_that_fails_changes_nothing_in_the_output(tmp_path):
    log = tmp_path / "job_cycle0.log"
    write_log(log, 5, 300)
    parent = os.getpid()

    def pieces(block: bytes) -> list[bytes]:
        if os.getpid() != parent:
            raise RuntimeError("the child breaks")
        return [block[1:]]

    assert two_processes([log], folder_of(), rendered, pieces) == one_process([log], folder_of(), rendered)


def test_no_room_for_the_childs_output_means_one_process(tmp_path, monkeypatch):
    log = tmp_path / "job_cycle0.log"
    write_log(log, 6, 100)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    assert two_processes([log], folder_of(), rendered) == one_process([log], folder_of(), rendered)


def test_the_child_dies_with_its_parent(tmp_path):
    """The parent killed with SIGKILL cannot clean up: the kernel ends the child."""
    log = tmp_path / "job_cycle0.log"
    write_log(log, 7, 50)
    ready = tmp_path / "child.pid"
    script = f"""
import os, sys, time
from pathlib import Path
from slurm_ft.logs import collapse, halves
parent = os.getpid()
def pieces(block):
    if os.getpid() != parent:
        Path({str(ready)!r}).write_text(str(os.getpid()))
        time.sleep(60)
    return [block[1:]]
halves.collapse([Path({str(log)!r})], [{log.stat().st_size}], pieces,
    lambda hold: collapse.Collapser({WORLD}, hold_first=hold), lambda w, s: None, sys.stdout.buffer)
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        child = int(ready.read_text())
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and "Z" not in _state(child):
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.02)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_the_split_cuts_at_line_starts(tmp_path):
    log = tmp_path / "f.log"
    log.write_bytes(b"a" * 12 + b"\n" + b"b" * 3 + b"\n")
    first, second = halves.split([log], [17])
    assert (first[0].end, second[0].start) == (13, 13)
    log.write_bytes(b"aa\n" + b"b" * 20)  # the middle falls in an unfinished last line
    first, second = halves.split([log], [23])
    assert (first[0].end, second[0].start) == (23, 23)
    got = b"".join(b[1:] for s in (first, second) for b in select.merged_spans(s))
    assert got == b"aa\n" + b"b" * 20 + b"\n"  # given its newline, as in one process
    log.write_bytes(b"aa\nbb\ncc\ndd\n")
    first, second = halves.split([log], [12])
    assert (first[0].end, second[0].start) == (6, 6)
    got = b"".join(b[1:] for s in (first, second) for b in select.merged_spans(s))
    assert got == log.read_bytes()


def test_small_logs_and_single_cores_stay_in_one_process():
    assert not halves.worth_it(halves.MIN_BYTES - 1, 8)
    assert not halves.worth_it(10 * halves.MIN_BYTES, 1)
    assert halves.worth_it(halves.MIN_BYTES, 2)


def test_the_command_collapses_a_big_cycle_in_two_processes_as_in_one(tmp_path):
    log = tmp_path / "job_cycle0.log"
    write_log(log, 8, 40, unique=True)
    with open(log, "ab") as fh:  # past the size where a second process pays
        rest = log.read_bytes()
        for _ in range(halves.MIN_BYTES // len(rest) + 1):
            fh.write(rest)
    state = state_dir(tmp_path, log, WORLD)
    cmd = [sys.executable, "-m", "slurm_ft.cli.logs", "--state-dir", str(state), "--collapse"]
    got = subprocess.run(cmd, capture_output=True, timeout=120, check=True)
    assert got.stderr == b""
    assert got.stdout == one_process([log], folder_of(), rendered)
