"""Line framing: bytes in, whole prefixed lines out, byte-exact, bounded."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ft.launch.output.framing import LineFramer, utf8_cut
from slurm_ft.logline import rank_prefix, rank_width


def reference(stream: bytes, rank: int, width: int, cap: int) -> bytes:
    """The specification, one line at a time: what the cycle file must contain."""
    first, cont = rank_prefix(rank, width, b": "), rank_prefix(rank, width, b"+ ")
    lines = stream.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    out = []
    for line in lines:
        prefix = first
        while len(line) > cap:
            cut = utf8_cut(line, cap)
            out.append(prefix + line[:cut] + b"\n")
            prefix, line = cont, line[cut:]
        out.append(prefix + line + b"\n")
    return b"".join(out)


def frame(chunks: list[bytes], rank: int, width: int, cap: int) -> tuple[bytes, int, LineFramer]:
    framer = LineFramer(rank, width, cap)
    out, lines = [], 0
    for chunk in chunks:
        parts, n = framer.feed_parts(chunk)
        out.append(b"".join(parts))  # the pieces are only valid until the next call
        lines += n
        assert framer.pending_bytes <= cap
    data, n = framer.finish()
    out.append(data)
    return b"".join(out), lines + n, framer


def chunked(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


ALPHABET = [b"a", b"b", b"\n", b"\r", "é".encode(), "€".encode(), "😀".encode(), b"\xff", b" "]


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(ALPHABET), max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
    cap=st.integers(min_value=4, max_value=40),
    rank=st.integers(min_value=0, max_value=200),
)
def test_any_chunking_gives_the_reference_output(
    pieces: list[bytes], cuts: list[int], cap: int, rank: int
) -> None:
    stream = b"".join(pieces)
    out, lines, _ = frame(chunked(stream, cuts), rank, 3, cap)
    assert out == reference(stream, rank, 3, cap)
    assert lines == out.count(b"\n")


def test_every_split_point_of_utf8_text() -> None:
    stream = "a€😀é\nß中𝄞\n".encode() * 3 + "tail😀".encode()
    expected = reference(stream, 7, 2, 1 << 20)
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            out, _, _ = frame([stream[:i], stream[i:j], stream[j:]], 7, 2, 1 << 20)
            assert out == expected


def test_prefixes_are_right_aligned_like_srun_l() -> None:
    assert rank_width(1) == 1 and rank_width(10) == 1 and rank_width(11) == 2 and rank_width(1000) == 3
    out, _, _ = frame([b"x\n"], 3, rank_width(16), 64)
    assert out == b" 3: x\n"


def test_long_line_pieces_carry_the_continuation_mark_and_count_once() -> None:
    out, lines, framer = frame([b"0123456789" * 3 + b"\nok\n"], 0, 1, 12)
    assert out == b"0: 012345678901\n0+ 234567890123\n0+ 456789\n0: ok\n"
    assert (lines, framer.split_lines) == (4, 1)


def test_never_ending_line_is_emitted_in_pieces_as_it_arrives() -> None:
    framer = LineFramer(0, 1, 64)
    emitted = 0
    for _ in range(1000):
        data = b"".join(framer.feed_parts(b"y" * 50)[0])
        emitted += len(data)
        assert framer.pending_bytes <= 64
    assert emitted > 1000 * 50 - 64 - 1


def test_cut_does_not_split_a_utf8_character() -> None:
    text = "ab😀".encode()  # the emoji occupies bytes 2..5
    assert utf8_cut(text + b"z", 3) == 2
    assert utf8_cut(text + b"z", 4) == 2
    assert utf8_cut(text + b"z", 5) == 2
    assert utf8_cut(text + b"z", 6) == 6
    assert utf8_cut(b"\x80" * 10, 5) == 5  # not UTF-8: cut at the cap


def test_note_cannot_pass_for_output() -> None:
    assert LineFramer(4, 2, 64).note("pipe\nclosed") == b" 4! pipe closed\n"


def test_cap_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="line cap must be >= 4"):
        LineFramer(0, 1, 3)
