"""One look at a progress source, as the bounded child takes it: ``python -I -S looking.py``.

The launcher never touches a source in-process (a dead mount would hang it): it runs this
file as a child through :mod:`slurm_ft.childprobe` and abandons it at the deadline. So this
module imports only the light part of the standard library at start-up — no dataclasses,
json or re (``re`` only once a ``checkpoint-dir:`` needs it) — because every import here is
paid on the restart path. A look is a plain tuple ``(present, step, mark, entry, problem)``
(see :class:`slurm_ft.progress.sources.Look`); the child prints its looks as one Python
literal line. What each kind of source means, and how completion is told, is documented in
:mod:`slurm_ft.progress.sources`. Nothing here ever writes to a source.

    python -I -S looking.py KIND PATH LOOKS SPACING [PATTERN]
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
import zlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: it costs the child ~10 ms
if TYPE_CHECKING:
    import re

ITERATION_FILE = "iteration-file"
CHECKPOINT_DIR = "checkpoint-dir"
FILE = "file"

RELEASE = "release"
MAX_ITERATION_FILE_BYTES = 4096
DIGEST_BYTES = 64 * 1024
DEEPSPEED_LATEST = "latest"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DCP_METADATA = ".metadata"
_QUOTE_LIMIT = 60
_EXT = r"(?:\.[A-Za-z0-9]+)?"
CONVENTIONS: tuple[tuple[str, str], ...] = (
    ("megatron", rf"iter_([0-9]+){_EXT}"),
    ("huggingface", rf"checkpoint-([0-9]+){_EXT}"),
    ("deepspeed", rf"global_step([0-9]+){_EXT}"),
    ("step", rf"step[_=-]?([0-9]+){_EXT}"),
    ("lightning", r"epoch=[0-9]+-step=([0-9]+)(?:-v[0-9]+)?\.ckpt"),
    ("integer", rf"([0-9]+){_EXT}"),
)
_COMPILED: list[tuple[str, re.Pattern[str]]] = []
_TEMP_ENDINGS = (".partial", ".part", ".incomplete", "-tmp")

Found = tuple[bool, int, "str | None", "str | None", "str | None"]


def found(
    present: bool,
    step: int = 0,
    *,
    mark: str | None = None,
    entry: str | None = None,
    problem: str | None = None,
) -> Found:
    return (present, step, mark, entry, problem)


def look(kind: str, path: str, pattern: str | None = None) -> Found:
    try:
        if kind == ITERATION_FILE:
            return _look_iteration_file(path)
        if kind == CHECKPOINT_DIR:
            return _look_dir(path, pattern)
        return _look_file(path)
    except OSError as exc:
        return found(True, problem=f"it cannot be read ({exc.strerror or exc})")


# --------------------------------------------------------------------------- iteration file


def parse_iteration(text: str) -> int | None:
    """An integer with optional surrounding whitespace, or ``release`` (iteration 0)."""
    stripped = text.strip()
    if stripped == RELEASE:
        return 0
    if stripped.isascii() and stripped.isdigit():
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


def _look_iteration_file(path: str) -> Found:
    got = _read_regular(path, MAX_ITERATION_FILE_BYTES + 1)
    if got is None:
        return found(False)
    before, data = got
    try:
        after = os.stat(path)
    except FileNotFoundError:
        return found(False)
    mark = f"{_ident(after)}:{zlib.crc32(data)}"
    if _ident(before) != _ident(after):
        return found(True, mark=mark, problem="it changed while being read")
    if len(data) > MAX_ITERATION_FILE_BYTES:
        return found(True, mark=mark, problem=f"it is larger than {MAX_ITERATION_FILE_BYTES} bytes")
    value = parse_iteration(data.decode("utf-8", errors="replace"))
    if value is None:
        why = "it is empty" if not data.strip() else "it is not an integer or 'release'"
        return found(True, mark=mark, problem=f"{why}: content {_quote(data)}")
    return found(True, value, mark=mark)


# --------------------------------------------------------------------------- checkpoint dir


def is_temporary(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith((".", "tmp")) or ".tmp" in lowered[1:] or lowered.endswith(_TEMP_ENDINGS)


def conventions() -> list[tuple[str, re.Pattern[str]]]:
    """The built-in name conventions, compiled on first use (``re`` costs the child start-up
    time that only ``checkpoint-dir:`` sources need)."""
    if not _COMPILED:
        import re

        _COMPILED.extend((name, re.compile(text)) for name, text in CONVENTIONS)
    return _COMPILED


def step_of(name: str, pattern: re.Pattern[str] | None) -> tuple[str, int] | None:
    """(convention, step) for an entry name, or None when it carries no step."""
    if pattern is not None:
        m = pattern.fullmatch(name)
        return ("pattern", int(m.group(1))) if m and m.group(1) and m.group(1).isdigit() else None
    for convention, regex in conventions():
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
    prefix = "global_step"
    if (
        tag is not None
        and tag.startswith(prefix)
        and tag[len(prefix) :].isascii()
        and tag[len(prefix) :].isdigit()
    ):
        out["deepspeed"] = int(tag[len(prefix) :])
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


def _look_dir(directory: str, pattern: str | None) -> Found:
    try:
        with os.scandir(directory) as it:
            entries = [(e.name, e.is_dir()) for e in it]
    except FileNotFoundError:
        return found(False)
    except NotADirectoryError:
        return found(True, problem="it is not a directory")
    compiled = None
    if pattern is not None:
        import re

        compiled = re.compile(pattern)
    ceilings = _ceilings(directory)
    candidates = []
    for name, is_dir in entries:
        if is_temporary(name):
            continue
        named = step_of(name, compiled)
        if named is None:
            continue
        convention, step = named
        if step > ceilings.get(convention, step):
            continue
        candidates.append((step, name, is_dir))
    for step, name, is_dir in sorted(candidates, reverse=True):
        try:
            complete = entry_complete(os.path.join(directory, name), is_dir)
        except FileNotFoundError:  # removed by the trainer's rotation while we looked
            continue
        if complete:
            return found(True, step, mark=f"{step}:{name}", entry=name)
    return found(True, 0, mark="0:")


# --------------------------------------------------------------------------- single file


def _look_file(path: str) -> Found:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return found(False)
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
        return found(False)
    mark = f"{after.st_ino}:{after.st_size}:{after.st_mtime_ns}:{crc:08x}"
    if _ident(before) != _ident(after):
        return found(True, mark=mark, problem="it changed while being read")
    return found(True, 0, mark=mark)


# --------------------------------------------------------------------------- child entry


def looks(kind: str, path: str, pattern: str | None, count: int, spacing: float) -> list[Found]:
    out = []
    for k in range(max(1, count)):
        if k:
            time.sleep(spacing)
        out.append(look(kind, path, pattern))
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (5, 6):
        print("usage: looking.py KIND PATH LOOKS SPACING [PATTERN]", file=sys.stderr)
        return 2
    kind, path, count, spacing = argv[1], argv[2], int(argv[3]), float(argv[4])
    pattern = argv[5] if len(argv) == 6 else None
    print(repr(looks(kind, path, pattern, count, spacing)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
