"""The cycle log's line format: a right-aligned global rank, a mark, the text.

The launcher writes it (``launch/output/framing.py``) and ``slurm-ft-logs`` reads it, so the
rule lives below both. A line is ``f"{rank:>{width}}{mark}{text}\\n"`` where ``width`` is
that of the cycle's largest rank (``srun -l`` style, so every prefix of one cycle has the
same length) and the mark is one of:

``": "`` a line, or the first piece of a line longer than the cap;
``"+ "`` a continuation piece of the previous piece of the same rank;
``"! "`` a note from the launcher about this rank's stream, never worker output.
"""

from __future__ import annotations

LINE_MARK = b": "
CONTINUATION_MARK = b"+ "
NOTE_MARK = b"! "
MARKS = (LINE_MARK, CONTINUATION_MARK, NOTE_MARK)


def rank_width(world_size: int) -> int:
    """Width of the largest global rank, so prefixes line up like ``srun -l``."""
    return len(str(max(world_size - 1, 0)))


def rank_prefix(global_rank: int, width: int, mark: bytes = LINE_MARK) -> bytes:
    return f"{global_rank:>{width}}".encode() + mark


def prefix_length(world_size: int) -> int:
    """Bytes before the text of every line of a cycle with ``world_size`` ranks."""
    return rank_width(world_size) + len(LINE_MARK)


def split_line(line: bytes) -> tuple[int, bytes, bytes] | None:
    """``b" 17: hello"`` -> ``(17, b": ", b"hello")``; None for a line not in this format
    (a reader meets files cut by a full disk, or written by hand)."""
    colon = -1
    for mark in MARKS:
        at = line.find(mark)
        if at > 0 and (colon < 0 or at < colon):
            colon = at
    if colon < 0:
        return None
    digits = line[:colon].lstrip(b" ")
    if not digits.isdigit():
        return None
    return int(digits), line[colon : colon + 2], line[colon + 2 :]
