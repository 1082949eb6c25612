"""Progress sources: where the trainer's own checkpoints say how far it got.

Three kinds, named ``KIND:PATH`` (``--progress-source``, ``progress.source``):

``iteration-file:PATH``
    One integer (or Megatron's ``release``) in a small text file, Megatron's
    ``latest_checkpointed_iteration.txt``. Trainers rewrite it in place, so one look can
    see an empty file or a prefix of the new number; a torn value is always smaller than
    the one being written, which is why a reading that counts against the job is
    confirmed by several looks (see ``tracker``).

``checkpoint-dir:DIR``
    The highest step among the complete entries of DIR whose names carry one. Built-in
    name conventions (full-name matches; an optional file extension is allowed):
    ``iter_0001200`` (Megatron), ``checkpoint-1200`` (Hugging Face Trainer),
    ``global_step1200`` (DeepSpeed), ``step_1200`` / ``step=1200`` / ``step-1200`` /
    ``step1200``, ``epoch=3-step=1200.ckpt`` (Lightning, also ``-v1`` versions) and plain
    integers (``1200``). A pattern (``--progress-pattern``) with one group replaces them.
    How completion is told (an incomplete entry never counts):

    * temporary names never count: a leading ``.`` or ``tmp``, ``.tmp`` anywhere after the
      first character, or an ending ``.partial``, ``.part``, ``.incomplete``, ``-tmp``;
    * an empty directory or an empty file does not count;
    * a directory holding torch.distributed.checkpoint data files (``*.distcp``) counts
      only once its ``.metadata`` exists: the writer renames it into place after every
      rank has written its data;
    * when DIR holds DeepSpeed's ``latest`` (the tag of the last complete save, written
      after every rank saved), ``global_stepN`` counts only up to that tag;
    * when DIR holds Megatron's ``latest_checkpointed_iteration.txt`` (written after the
      save), ``iter_N`` counts only up to the iteration it names.

``file:PATH``
    A single checkpoint overwritten in place (``torch.save(snapshot, "snapshot.pt")``).
    Its identity is inode, size, nanosecond mtime and a CRC of its first and last 64 KiB;
    a new identity since the cycle started is progress, counted as one step.

This module imports only the standard library and runs as a script, ``python -I -S
sources.py [--looks N --spacing S] [--pattern P] KIND:PATH``, which prints the looks as one
JSON line: the launcher reads sources only in such a child, so that a hung mount cannot
hang it (:mod:`slurm_ft.childprobe`). In-process, :func:`look` is the same reading without
a bound, for tests. Nothing here ever writes to a source.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import time
import zlib
from dataclasses import asdict, dataclass

ITERATION_FILE = "iteration-file"
CHECKPOINT_DIR = "checkpoint-dir"
FILE = "file"
KINDS = (ITERATION_FILE, CHECKPOINT_DIR, FILE)

RELEASE = "release"
MAX_ITERATION_FILE_BYTES = 4096
DIGEST_BYTES = 64 * 1024
DEEPSPEED_LATEST = "latest"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DCP_METADATA = ".metadata"
_QUOTE_LIMIT = 60
_INTEGER = re.compile(r"[0-9]+")
_EXT = r"(?:\.[A-Za-z0-9]+)?"
CONVENTIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("megatron", re.compile(rf"iter_([0-9]+){_EXT}")),
    ("huggingface", re.compile(rf"checkpoint-([0-9]+){_EXT}")),
    ("deepspeed", re.compile(rf"global_step([0-9]+){_EXT}")),
    ("step", re.compile(rf"step[_=-]?([0-9]+){_EXT}")),
    ("lightning", re.compile(r"epoch=[0-9]+-step=([0-9]+)(?:-v[0-9]+)?\.ckpt")),
    ("integer", re.compile(rf"([0-9]+){_EXT}")),
)
_TEMP_ENDINGS = (".partial", ".part", ".incomplete", "-tmp")


class SourceError(ValueError):
    """A source or pattern that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    path: str
    pattern: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.path}"


def parse_source(text: str, pattern: str | None = None) -> SourceSpec:
    """``KIND:PATH`` -> SourceSpec; SourceError for an unknown kind, an empty path, a bad pattern."""
    kind, sep, path = text.partition(":")
    if not sep or kind not in KINDS:
        raise SourceError(f"expected KIND:PATH with KIND one of {', '.join(KINDS)}, got {text!r}")
    if not path:
        raise SourceError(f"{kind}: the path is empty")
    if pattern is not None:
        if kind != CHECKPOINT_DIR:
            raise SourceError(f"a progress pattern applies only to {CHECKPOINT_DIR}: sources, not {kind}:")
        compile_pattern(pattern)
    return SourceSpec(kind, path, pattern)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SourceError(f"progress pattern {pattern!r} is not a valid regular expression ({exc})") from None
    if compiled.groups != 1:
        raise SourceError(f"progress pattern {pattern!r} must have exactly one group (the step)")
    return compiled


@dataclass(frozen=True)
class Look:
    """One look at a source.

    ``present``: the path exists. ``step``: the highest complete step (0 when absent or
    when ``problem`` is set). ``mark``: the identity of what was read, compared between
    looks (and, for ``file:``, the progress itself). ``entry``: the name that gave the
    step. ``problem``: why this look cannot be trusted (unparsable, unreadable, changing).
    """

    present: bool
    step: int = 0
    mark: str | None = None
    entry: str | None = None
    problem: str | None = None


def look(spec: SourceSpec) -> Look:
    try:
        if spec.kind == ITERATION_FILE:
            return _look_iteration_file(spec.path)
        if spec.kind == CHECKPOINT_DIR:
            return _look_dir(spec.path, spec.pattern)
        return _look_file(spec.path)
    except OSError as exc:
        return Look(True, problem=f"it cannot be read ({exc.strerror or exc})")


# --------------------------------------------------------------------------- iteration file


def parse_iteration(text: str) -> int | None:
    """An integer with optional surrounding whitespace, or ``release`` (iteration 0)."""
    stripped = text.strip()
    if stripped == RELEASE:
        return 0
    if _INTEGER.fullmatch(stripped):
        return int(stripped)
    return None


def _quote(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    if len(text) > _QUOTE_LIMIT:
        return repr(text[:_QUOTE_LIMIT]) + "..."
    return repr(text)


def _ident(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _read_regular(path: str, limit: int) -> tuple[os.stat_result, bytes] | None:
    """Stat, read up to ``limit`` bytes; None when absent. The open blocks as any reader's
    would (a FIFO with no writer blocks it like a dead mount): the bound is the child's deadline."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, limit)
    finally:
        os.close(fd)
    return st, data


def _look_iteration_file(path: str) -> Look:
    got = _read_regular(path, MAX_ITERATION_FILE_BYTES + 1)
    if got is None:
        return Look(False)
    before, data = got
    try:
        after = os.stat(path)
    except FileNotFoundError:
        return Look(False)
    mark = f"{_ident(after)}:{zlib.crc32(data)}"
    if _ident(before) != _ident(after):
        return Look(True, mark=mark, problem="it changed while being read")
    if len(data) > MAX_ITERATION_FILE_BYTES:
        return Look(True, mark=mark, problem=f"it is larger than {MAX_ITERATION_FILE_BYTES} bytes")
    value = parse_iteration(data.decode("utf-8", errors="replace"))
    if value is None:
        why = "it is empty" if not data.strip() else "it is not an integer or 'release'"
        return Look(True, mark=mark, problem=f"{why}: content {_quote(data)}")
    return Look(True, value, mark=mark)


# --------------------------------------------------------------------------- checkpoint dir


def is_temporary(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith((".", "tmp")) or ".tmp" in lowered[1:] or lowered.endswith(_TEMP_ENDINGS)


def step_of(name: str, pattern: re.Pattern[str] | None) -> tuple[str, int] | None:
    """(convention, step) for an entry name, or None when it carries no step."""
    if pattern is not None:
        m = pattern.fullmatch(name)
        return ("pattern", int(m.group(1))) if m and m.group(1) and m.group(1).isdigit() else None
    for convention, regex in CONVENTIONS:
        m = regex.fullmatch(name)
        if m:
            return convention, int(m.group(1))
    return None


def _small_text(path: str) -> str | None:
    got = _read_regular(path, MAX_ITERATION_FILE_BYTES)
    return None if got is None else got[1].decode("utf-8", errors="replace").strip()


def _ceilings(directory: str) -> dict[str, int]:
    """The last complete step that DeepSpeed's ``latest`` and Megatron's tracker file name."""
    out: dict[str, int] = {}
    tag = _small_text(os.path.join(directory, DEEPSPEED_LATEST))
    m = re.fullmatch(r"global_step([0-9]+)", tag or "")
    if m:
        out["deepspeed"] = int(m.group(1))
    text = _small_text(os.path.join(directory, MEGATRON_TRACKER))
    value = parse_iteration(text) if text is not None else None
    if value is not None:
        out["megatron"] = value
    return out


def entry_complete(path: str, is_dir: bool) -> bool:
    if not is_dir:
        return os.stat(path).st_size > 0
    with os.scandir(path) as it:
        names = [e.name for e in it]
    if not names:
        return False
    if any(n.endswith(".distcp") for n in names):
        return DCP_METADATA in names
    return True


def _look_dir(directory: str, pattern: str | None) -> Look:
    try:
        with os.scandir(directory) as it:
            entries = [(e.name, e.is_dir()) for e in it]
    except FileNotFoundError:
        return Look(False)
    except NotADirectoryError:
        return Look(True, problem="it is not a directory")
    compiled = compile_pattern(pattern) if pattern is not None else None
    ceilings = _ceilings(directory)
    candidates = []
    for name, is_dir in entries:
        if is_temporary(name):
            continue
        found = step_of(name, compiled)
        if found is None:
            continue
        convention, step = found
        if step > ceilings.get(convention, step):
            continue
        candidates.append((step, name, is_dir))
    for step, name, is_dir in sorted(candidates, reverse=True):
        try:
            complete = entry_complete(os.path.join(directory, name), is_dir)
        except FileNotFoundError:  # removed by the trainer's rotation while we looked
            continue
        if complete:
            return Look(True, step, mark=f"{step}:{name}", entry=name)
    return Look(True, 0, mark="0:")


# --------------------------------------------------------------------------- single file


def _look_file(path: str) -> Look:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Look(False)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        crc = zlib.crc32(os.pread(fd, DIGEST_BYTES, 0))
        if before.st_size > DIGEST_BYTES:
            tail_at = max(DIGEST_BYTES, before.st_size - DIGEST_BYTES)
            crc = zlib.crc32(os.pread(fd, DIGEST_BYTES, tail_at), crc)
    finally:
        os.close(fd)
    try:
        after = os.stat(path)
    except FileNotFoundError:
        return Look(False)
    mark = f"{after.st_ino}:{after.st_size}:{after.st_mtime_ns}:{crc:08x}"
    if _ident(before) != _ident(after):
        return Look(True, mark=mark, problem="it changed while being read")
    return Look(True, 0, mark=mark)


# --------------------------------------------------------------------------- child entry


def looks(spec: SourceSpec, count: int, spacing: float) -> list[Look]:
    out = []
    for k in range(max(1, count)):
        if k:
            time.sleep(spacing)
        out.append(look(spec))
    return out


def main(argv: list[str]) -> int:
    count, spacing, pattern = 1, 0.2, None
    args = argv[1:]
    try:
        while len(args) > 1:
            flag, value = args[0], args[1]
            if flag == "--looks":
                count = int(value)
            elif flag == "--spacing":
                spacing = float(value)
            elif flag == "--pattern":
                pattern = value
            else:
                break
            args = args[2:]
        if len(args) != 1:
            raise SourceError("usage: sources.py [--looks N] [--spacing S] [--pattern P] KIND:PATH")
        spec = parse_source(args[0], pattern)
    except (SourceError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    print(json.dumps({"looks": [asdict(x) for x in looks(spec, count, spacing)]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
