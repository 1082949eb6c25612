"""Torch-free worker programs for the application-log tests (run as a script).

The expected content of every mode is computed by the same functions the tests import, so
the tests compare the cycle file against exact bytes, not counts.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

UTF8_SAMPLES = ("é", "€", "😀", "ß", "中", "𝄞")


def numbered_line(rank: int, seq: int) -> bytes:
    """A line carrying its rank and sequence number, of varying length and UTF-8 content."""
    rng = random.Random(rank * 1_000_003 + seq)
    filler = "".join(
        rng.choice("abcxyz 0123456789" + "".join(UTF8_SAMPLES)) for _ in range(rng.randrange(60))
    )
    return f"rank={rank} seq={seq} {filler}".encode()


def utf8_text(n_chars: int) -> bytes:
    """Characters of 2, 3 and 4 bytes, so read boundaries fall inside characters."""
    return "".join(UTF8_SAMPLES[i % len(UTF8_SAMPLES)] for i in range(n_chars)).encode()


def long_line(size: int) -> bytes:
    unit = "0123456789abcdef€😀".encode()
    return (unit * (size // len(unit) + 1))[:size]


def varied_line(rank: int, seq: int) -> bytes:
    """Lines from a few bytes to 200 KB, so appends are large and tearing would show."""
    rng = random.Random(rank * 7_000_001 + seq)
    size = rng.choice((5, 80, 4000, 70_000, 200_000))
    head = f"rank={rank} seq={seq} ".encode()
    return head + bytes([0x61 + (seq + rank) % 26]) * size


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def mode_lines(rank: int, count: int) -> None:
    """``count`` numbered lines, in bursts of random size, alternating stdout and stderr."""
    rng = random.Random(rank)
    seq = 0
    while seq < count:
        burst = min(count - seq, rng.randrange(1, 40))
        data = b"".join(numbered_line(rank, s) + b"\n" for s in range(seq, seq + burst))
        write_all(1 if (seq // 7) % 2 == 0 else 2, data)
        seq += burst


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "lines":
        mode_lines(int(argv[1]), int(argv[2]))
    elif mode == "varied":
        rank, count = int(argv[1]), int(argv[2])
        for seq in range(count):
            write_all(1, varied_line(rank, seq) + b"\n")
    elif mode == "raw":
        # argv[1]: text with Python escapes, written in one write to stdout.
        write_all(1, argv[1].encode().decode("unicode_escape").encode("latin-1"))
    elif mode == "utf8":
        write_all(1, utf8_text(int(argv[1])))
    elif mode == "bigline":
        write_all(1, b"before\n" + long_line(int(argv[1])) + b"\nafter\n")
    elif mode == "endless":
        # One line that never ends (within this run): argv[1] bytes without a newline.
        block = b"x" * 65536
        left = int(argv[1])
        while left > 0:
            write_all(1, block[: min(left, len(block))])
            left -= len(block)
    elif mode == "killself":
        count = int(argv[1])
        write_all(1, b"".join(numbered_line(0, s) + b"\n" for s in range(count)))
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "crash":
        count = int(argv[1])
        sys.stdout.buffer.write(b"".join(numbered_line(0, s) + b"\n" for s in range(count)))
        sys.stdout.flush()
        raise RuntimeError("boom from the worker")
    elif mode == "grandchild":
        # The grandchild inherits stdout and keeps the pipe open after this worker exits.
        subprocess.Popen(
            [sys.executable, "-c", "import time; print('grandchild up', flush=True); time.sleep(120)"]
        )
        write_all(1, b"worker done\n")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
