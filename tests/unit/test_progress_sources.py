"""One look at each kind of progress source, in-process: formats, completion, absence, garbage.

The checkpoint-dir conventions are read from fixtures laid out as each library lays out its
checkpoints (tests/data/progress_sources/README.md names the source of each format).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from slurm_ft.progress import looking
from slurm_ft.progress.looking import is_temporary, parse_iteration
from slurm_ft.progress.sources import Look, look
from slurm_ft.settingsyntax import (
    CHECKPOINT_DIR,
    FILE,
    ITERATION_FILE,
    PROGRESS_KINDS,
    SourceError,
    SourceSpec,
    parse_progress_source,
)

pytestmark = pytest.mark.timeout(30)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "progress_sources"


def it_file(path: Path) -> Look:
    return look(SourceSpec(ITERATION_FILE, str(path)))


# --------------------------------------------------------------------------- iteration file


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("1200", 1200),
        ("1200\n", 1200),
        ("  \t1200 \n\n", 1200),
        ("0", 0),
        ("000017", 17),
        ("release", 0),
        ("  release  ", 0),
        ("123456789012345", 123456789012345),
    ],
)
def test_iteration_file_valid_content(tmp_path: Path, content: str, expected: int) -> None:
    path = tmp_path / "latest_checkpointed_iteration.txt"
    path.write_text(content)
    got = it_file(path)
    assert (got.present, got.step, got.problem) == (True, expected, None)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "it is empty: content ''"),
        ("  \n", "it is empty: content '  \\n'"),
        ("abc", "it is not an integer or 'release': content 'abc'"),
        ("12abc", "it is not an integer or 'release': content '12abc'"),
        ("-5", "it is not an integer or 'release': content '-5'"),
        ("1.5", "it is not an integer or 'release': content '1.5'"),
        ("Release", "it is not an integer or 'release': content 'Release'"),
        ("x" * 100, "it is not an integer or 'release': content " + repr("x" * 60) + "..."),
        ("1" * 5000, "it is larger than 4096 bytes"),
    ],
)
def test_iteration_file_garbage_is_a_problem_quoting_the_content(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "it.txt"
    path.write_text(content)
    got = it_file(path)
    assert (got.present, got.step, got.problem) == (True, 0, problem)


def test_absent_sources_are_not_present(tmp_path: Path) -> None:
    for kind in (ITERATION_FILE, CHECKPOINT_DIR, FILE):
        assert look(SourceSpec(kind, str(tmp_path / "absent"))) == Look(False)


def test_a_directory_named_as_a_file_is_a_problem(tmp_path: Path) -> None:
    assert it_file(tmp_path).problem == "it cannot be read (not a regular file)"
    assert look(SourceSpec(FILE, str(tmp_path))).problem == "it cannot be read (not a regular file)"
    (tmp_path / "f").write_text("x")
    assert look(SourceSpec(CHECKPOINT_DIR, str(tmp_path / "f"))).problem == "it is not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of mode")
def test_an_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("5")
    path.chmod(0)
    assert it_file(path).problem == "it cannot be read (Permission denied)"


def test_looking_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "it.txt"
    path.write_text("42\n")
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    before = path.stat()
    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "deepspeed", ckpt)
    for _ in range(2):
        assert it_file(path).step == 42
        look(SourceSpec(FILE, str(path)))
        look(SourceSpec(CHECKPOINT_DIR, str(ckpt)))
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "it.txt"]
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(
        p.name for p in (FIXTURES / "deepspeed").iterdir()
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("7", 7), (" 7 ", 7), ("release", 0), ("", None), ("seven", None), ("+7", None), ("٣", None)],
)
def test_parse_iteration(text: str, expected: int | None) -> None:
    assert parse_iteration(text) == expected


# --------------------------------------------------------------------------- checkpoint dir


@pytest.mark.parametrize(
    ("fixture", "step", "entry", "pattern"),
    [
        ("megatron", 1200, "iter_0001200", None),
        ("huggingface", 1000, "checkpoint-1000", None),
        ("deepspeed", 1200, "global_step1200", None),
        ("lightning", 1200, "epoch=2-step=1200.ckpt", None),
        ("dcp", 100, "step-100", None),
        ("step_underscore", 450, "step_450", None),
        ("step_equals", 50, "step=50.pt", None),
        ("integers", 2000, "2000", None),
        ("pattern", 1200, "ckpt_e3_s1200.bin", r"ckpt_e\d+_s(\d+)\.bin"),
    ],
)
def test_checkpoint_dir_conventions(fixture: str, step: int, entry: str, pattern: str | None) -> None:
    got = look(parse_progress_source(f"checkpoint-dir:{FIXTURES / fixture}", pattern))
    assert (got.present, got.step, got.entry, got.problem) == (True, step, entry, None)


def test_a_pattern_replaces_the_built_in_conventions() -> None:
    got = look(parse_progress_source(f"checkpoint-dir:{FIXTURES / 'megatron'}", r"iter_(\d+)\.never"))
    assert (got.present, got.step, got.entry) == (True, 0, None)


def test_an_empty_or_stepless_dir_is_present_at_step_0(tmp_path: Path) -> None:
    spec = SourceSpec(CHECKPOINT_DIR, str(tmp_path))
    assert (look(spec).present, look(spec).step) == (True, 0)
    (tmp_path / "step_100").mkdir()  # created, nothing saved into it yet
    (tmp_path / "logs").mkdir()
    assert look(spec).step == 0
    (tmp_path / "step_100" / "model.pt").write_bytes(b"x")
    assert look(spec).step == 100


def test_the_highest_complete_entry_wins_and_its_mark_changes_with_it(tmp_path: Path) -> None:
    spec = SourceSpec(CHECKPOINT_DIR, str(tmp_path))
    for n in (5, 10):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text("{}")
    first = look(spec)
    (tmp_path / "checkpoint-15").mkdir()
    (tmp_path / "checkpoint-15" / "trainer_state.json").write_text("{}")
    second = look(spec)
    assert (first.step, second.step) == (10, 15)
    assert first.mark != second.mark


@pytest.mark.parametrize(
    ("name", "temporary"),
    [
        (".tmp_step_5", True),
        ("tmp-checkpoint-1500", True),
        ("tmp-checkpoint-pe8ry7n_", True),
        ("snapshot.pt.tmp.1234", True),
        ("step_600.tmp", True),
        ("ckpt_s5.bin.partial", True),
        ("global_step5-tmp", True),
        ("checkpoint-1500", False),
        ("iter_0000100", False),
        ("epoch=1-step=5.ckpt", False),
    ],
)
def test_temporary_names(name: str, temporary: bool) -> None:
    assert is_temporary(name) is temporary


# --------------------------------------------------------------------------- single file


def test_a_file_source_marks_every_replacement(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    spec = SourceSpec(FILE, str(path))
    path.write_bytes(b"a" * 100)
    first = look(spec)
    assert (first.present, first.problem) == (True, None)
    assert look(spec) == first, "an untouched file keeps its mark"
    stat = path.stat()
    path.write_bytes(b"b" * 100)  # same size; put the old mtime back: only the content differs
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert look(spec).mark != first.mark
    tmp = tmp_path / "snapshot.pt.tmp"
    tmp.write_bytes(b"b" * 100)
    os.replace(tmp, path)  # an atomic replace: new inode
    assert look(spec).mark not in (first.mark, None)


def test_a_large_file_is_digested_at_both_ends_only(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    spec = SourceSpec(FILE, str(path))
    data = bytearray(1024 * 1024)
    path.write_bytes(bytes(data))
    stat = path.stat()
    before = look(spec).mark
    data[-1] = 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert look(spec).mark != before, "a change in the last bytes must show"


# --------------------------------------------------------------------------- naming a source


@pytest.mark.parametrize(
    ("text", "pattern", "message"),
    [
        (
            "snapshot.pt",
            None,
            "expected KIND:PATH with KIND one of iteration-file, checkpoint-dir, file, got 'snapshot.pt'",
        ),
        (
            "dir:/x",
            None,
            "expected KIND:PATH with KIND one of iteration-file, checkpoint-dir, file, got 'dir:/x'",
        ),
        ("file:", None, "file: the path is empty"),
        ("file:/x", r"s(\d+)", "a progress pattern applies only to checkpoint-dir: sources, not file:"),
        ("checkpoint-dir:/x", r"s\d+", r"progress pattern 's\\d+' must have exactly one group (the step)"),
        ("checkpoint-dir:/x", r"s(\d+", "progress pattern 's(\\\\d+' is not a valid regular expression"),
    ],
)
def test_bad_sources_are_named(text: str, pattern: str | None, message: str) -> None:
    with pytest.raises(SourceError) as info:
        parse_progress_source(text, pattern)
    assert str(info.value).startswith(message)


def test_a_source_prints_as_it_is_written() -> None:
    assert str(parse_progress_source("checkpoint-dir:/ckpt/run 1")) == "checkpoint-dir:/ckpt/run 1"
    assert parse_progress_source("file:/a:b").path == "/a:b"


def test_the_bounded_child_spells_the_kinds_as_the_settings_do() -> None:
    """looking.py runs as ``python -I -S`` and cannot import settingsyntax: its own
    spelling of the kinds must stay the settings' spelling."""
    assert (looking.ITERATION_FILE, looking.CHECKPOINT_DIR, looking.FILE) == PROGRESS_KINDS
