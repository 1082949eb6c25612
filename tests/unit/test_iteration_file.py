"""Reading the trainer's checkpoint-iteration file: formats, absence, garbage, never writing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurm_ft.progress import IterationReading, parse_iteration, read_iteration

pytestmark = pytest.mark.timeout(30)

FAST = {"attempts": 2, "retry_delay": 0.01, "settle": 0.01}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("1200", 1200),
        ("1200\n", 1200),
        ("  \t1200 \n\n", 1200),
        ("0", 0),
        ("000017", 17),
        ("release", 0),
        ("release\n", 0),
        ("  release  ", 0),
        ("123456789012345", 123456789012345),
    ],
)
def test_valid_content(tmp_path: Path, content: str, expected: int) -> None:
    path = tmp_path / "latest_checkpointed_iteration.txt"
    path.write_text(content)
    assert read_iteration(str(path), **FAST) == IterationReading(expected, None)


@pytest.mark.parametrize(
    ("content", "problem", "quoted"),
    [
        ("", "it is empty", "''"),
        ("  \n", "it is empty", "'  \\n'"),
        ("abc", "it is not an integer or 'release'", "'abc'"),
        ("12abc", "it is not an integer or 'release'", "'12abc'"),
        ("-5", "it is not an integer or 'release'", "'-5'"),
        ("1.5", "it is not an integer or 'release'", "'1.5'"),
        ("12 13", "it is not an integer or 'release'", "'12 13'"),
        ("Release", "it is not an integer or 'release'", "'Release'"),
        ("x" * 100, "it is not an integer or 'release'", repr("x" * 60) + "..."),
    ],
)
def test_garbage_warns_naming_the_file_and_quoting_the_content(
    tmp_path: Path, content: str, problem: str, quoted: str
) -> None:
    path = tmp_path / "it.txt"
    path.write_text(content)
    got = read_iteration(str(path), **FAST)
    assert got.warning == (
        f"checkpoint iteration file {path} did not parse after 2 reads ({problem}): "
        f"content {quoted}; counting as no progress"
    )
    assert got.iteration == 0 and not got.valid


def test_oversized_file_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("1" * 5000)
    got = read_iteration(str(path), **FAST)
    assert got.warning is not None and "(it is larger than 4096 bytes)" in got.warning


def test_missing_file_means_no_checkpoint_yet(tmp_path: Path) -> None:
    assert read_iteration(str(tmp_path / "absent.txt"), **FAST) == IterationReading(0, None)


def test_no_file_configured_reads_zero() -> None:
    assert read_iteration(None) == IterationReading(0, None)


def test_a_directory_is_flagged_not_raised(tmp_path: Path) -> None:
    got = read_iteration(str(tmp_path), **FAST)
    assert got.warning == (
        f"checkpoint iteration file {tmp_path} did not parse after 2 reads "
        "(it cannot be read (not a regular file)); counting as no progress"
    )


def test_a_fifo_is_flagged_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "it.fifo"
    os.mkfifo(fifo)
    got = read_iteration(str(fifo), **FAST)
    assert got.warning is not None and "(it cannot be read (not a regular file))" in got.warning


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of mode")
def test_an_unreadable_file_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("5")
    path.chmod(0)
    got = read_iteration(str(path), **FAST)
    assert got.warning is not None and "(it cannot be read (Permission denied))" in got.warning


def test_reading_never_writes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("42\n")
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    before = path.stat()
    for _ in range(3):
        assert read_iteration(str(path), **FAST).iteration == 42
    read_iteration(str(tmp_path / "absent.txt"), **FAST)
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert path.read_text() == "42\n"
    assert not (tmp_path / "absent.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it.txt"]


def test_unparsable_content_is_reread_for_about_a_second(tmp_path: Path) -> None:
    """The issue asks for re-reads over about a second before giving up (default timing)."""
    path = tmp_path / "it.txt"
    path.write_text("")
    started = time.monotonic()
    got = read_iteration(str(path))
    elapsed = time.monotonic() - started
    assert got.warning is not None and "after 5 reads" in got.warning
    assert 0.9 <= elapsed < 5.0, elapsed


def test_a_stable_valid_file_is_read_without_retries(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("9")
    started = time.monotonic()
    assert read_iteration(str(path)).iteration == 9
    assert time.monotonic() - started < 0.9, "a good file must not wait for the retry schedule"


def test_a_value_below_the_floor_must_hold_through_every_read(tmp_path: Path) -> None:
    """A real decrease (a restored older checkpoint) is believed once it held still throughout."""
    path = tmp_path / "it.txt"
    path.write_text("300")
    assert read_iteration(str(path), floor=100, **FAST) == IterationReading(300, None)
    assert read_iteration(str(path), floor=500, **FAST) == IterationReading(300, None)
    assert read_iteration(str(tmp_path / "absent"), floor=500, **FAST) == IterationReading(0, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("7", 7), (" 7 ", 7), ("release", 0), ("", None), ("seven", None), ("+7", None), ("٣", None)],
)
def test_parse_iteration(text: str, expected: int | None) -> None:
    assert parse_iteration(text) == expected
