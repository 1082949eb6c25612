"""-f's reading of a growing file: whole lines only, a line still being written waits for
its newline, a big backlog comes in bounded pieces, and a complete file is read to its end."""

from __future__ import annotations

from slurm_ft.logs import follow


def drain(state: follow._FileState, final: bool) -> list[bytes]:
    out = []
    more = True
    while more:
        block, more = follow._read_new(state, final=final)
        if block is not None:
            out.append(block)
    return out


def test_lines_are_read_whole_and_a_backlog_in_bounded_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "READ_LIMIT", 64)
    path = tmp_path / "job_cycle0.log"
    lines = [f"{k % 4}: line number {k}\n".encode() for k in range(200)]
    path.write_bytes(b"".join(lines) + b"2: half a li")
    state = follow._FileState(path)
    blocks = drain(state, final=False)
    assert len(blocks) > 10 and all(b.startswith(b"\n") and b.endswith(b"\n") for b in blocks)
    assert max(len(b) for b in blocks) <= 64 + 40  # the limit plus one carried line
    assert b"".join(b[1:] for b in blocks) == b"".join(lines)
    with open(path, "ab") as fh:
        fh.write(b"ne\n3: last, never ended")
    assert b"".join(b[1:] for b in drain(state, final=False)) == b"2: half a line\n"
    assert b"".join(b[1:] for b in drain(state, final=True)) == b"3: last, never ended\n"
    assert drain(state, final=True) == []


def test_a_file_that_is_not_there_yet_gives_nothing(tmp_path):
    state = follow._FileState(tmp_path / "later.log")
    assert drain(state, final=False) == []
    (tmp_path / "later.log").write_bytes(b"0: now\n")
    assert drain(state, final=False) == [b"\n0: now\n"]
