"""The last Python traceback of a worker's stream, as the applog reader finds it (issue 32, item 3)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from slurm_ft.launch.output.tracebacks import (
    MAX_LINES,
    StreamTail,
    TracebackTail,
    exception_line,
    last_traceback,
)

pytestmark = pytest.mark.timeout(60)

CRASH = """
def inner(step):
    raise RuntimeError(f"injected crash at step {step}")

def outer():
    print("step 1", flush=True)
    inner(5)

outer()
"""


def real_traceback(code: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp, "train.py")
        script.write_text(code)
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, check=False)
    assert proc.returncode == 1
    return proc.stdout + proc.stderr


def fed(data: bytes, sizes: int | None = None) -> TracebackTail:
    tail = TracebackTail()
    if sizes is None:
        tail.feed(data)
    else:
        for i in range(0, len(data), sizes):
            tail.feed(data[i : i + sizes])
    tail.end()
    return tail


def test_a_real_crash_is_found_whatever_the_read_boundaries() -> None:
    data = b"some output\n" * 100 + real_traceback(CRASH) + b"after\n"
    whole = fed(data).last
    assert whole is not None
    assert whole.startswith("Traceback (most recent call last):\n")
    assert whole.endswith("RuntimeError: injected crash at step 5")
    assert 'in inner\n    raise RuntimeError(f"injected crash at step {step}")' in whole
    for size in (1, 7, 34, 35, 36, 1000):
        assert fed(data, size).last == whole, size
    assert exception_line(whole) == "RuntimeError: injected crash at step 5"


def test_the_last_one_wins_and_a_chain_ends_with_its_final_exception() -> None:
    chained = "try:\n    {}['k']\nexcept KeyError:\n    raise ValueError('second')\n"
    data = real_traceback(CRASH) + b"more output\n" + real_traceback(chained)
    for size in (None, 5, 64):
        last = fed(data, size).last
        assert last is not None and last.endswith("ValueError: second"), size
        assert "injected crash" not in last


def test_output_without_a_traceback_gives_none() -> None:
    assert fed(b"Traceback is a word\nloss 0.1\n" * 1000).last is None
    assert exception_line(None) is None


def test_deep_tracebacks_are_bounded_keeping_the_frames_near_the_error() -> None:
    # 100 distinct frames (Python itself shortens a recursion to a "repeated" line).
    deep = "".join(f"def f{k}():\n    f{k + 1}()\n" for k in range(100))
    deep += "def f100():\n    raise OSError('deep')\nf0()\n"
    last = fed(real_traceback(deep)).last
    assert last is not None
    lines = last.splitlines()
    assert len(lines) <= MAX_LINES + 1
    assert lines[0] == "Traceback (most recent call last):"
    assert "lines left out)" in lines[1]
    assert lines[-1] == "OSError: deep"


def test_a_traceback_cut_short_by_the_end_of_the_stream_still_counts() -> None:
    data = b'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    partial'
    tail = TracebackTail()
    tail.feed(data)
    assert tail.last is None
    tail.end()
    assert tail.last is not None and tail.last.endswith("    partial")


def test_many_tracebacks_in_one_chunk_cost_no_recursion() -> None:
    one = b'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: n\n'
    tail = fed(one * 20000 + b"x\n")
    assert tail.last is not None and tail.last.endswith("ValueError: n")


def test_the_stream_tail_keeps_the_end_whatever_the_chunk_sizes() -> None:
    crash = real_traceback(CRASH)
    for size in (1, 100, 4096, 200_000):
        tail = StreamTail(limit=64 * 1024)
        data = b"noise line\n" * 50_000 + crash
        for i in range(0, len(data), size):
            tail.feed(data[i : i + size])
        kept = tail.data()
        assert kept == data[-64 * 1024 :], size
        assert (last_traceback(kept) or "").endswith("RuntimeError: injected crash at step 5"), size
    assert last_traceback(b"no crash here\n") is None
