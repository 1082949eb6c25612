"""Child-process side of the storage probes: touch one path, print one line, exit.

Run as ``python -I -S probe.py OP PATH`` by ``storage.py``. It is a separate process
because a call into a dead network mount can sleep uninterruptibly: only a process that
the parent can abandon keeps the health check itself bounded in time. Standard library
only, no package imports, so it starts in a few milliseconds.

Output: ``OK <detail>`` or ``FAIL <detail>`` on stdout.
"""

from __future__ import annotations

import os
import stat
import sys

READ_BYTES = 4096


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def probe_read(path: str) -> tuple[bool, str]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False, "does not exist"
    except OSError as exc:
        return False, f"cannot stat: {_why(exc)}"
    if stat.S_ISDIR(st.st_mode):
        try:
            with os.scandir(path) as it:
                next(it, None)
        except OSError as exc:
            return False, f"cannot list directory: {_why(exc)}"
        return True, "directory listable"
    try:
        with open(path, "rb") as fh:
            data = fh.read(READ_BYTES)
    except OSError as exc:
        return False, f"cannot read: {_why(exc)}"
    return True, f"file readable ({len(data)} bytes read)"


def probe_write(path: str) -> tuple[bool, str]:
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    name = os.path.join(directory, f".slurm-ft-probe.{os.uname().nodename}.{os.getpid()}")
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return False, f"write probe: cannot create in {directory}: {_why(exc)}"
    try:
        os.write(fd, b"slurm-ft write probe\n")
        os.fsync(fd)
    except OSError as exc:
        return False, f"write probe: {_why(exc)}"
    finally:
        os.close(fd)
        try:
            os.unlink(name)
        except OSError:
            pass
    return True, "write probe ok"


def probe_mount(path: str) -> tuple[bool, str]:
    try:
        vfs = os.statvfs(path)
    except OSError as exc:
        return False, f"statfs failed: {_why(exc)}"
    if vfs.f_blocks:
        used = 100.0 * (vfs.f_blocks - vfs.f_bfree) / vfs.f_blocks
        return True, f"responding, {used:.0f}% used"
    return True, "responding"


def probe_near(path: str) -> tuple[bool, str]:
    """A directory the launcher will write into, which need not exist yet: its nearest
    existing ancestor must be listable (a dead mount on the way does not answer)."""
    here = path
    while True:
        try:
            os.stat(here)
            break
        except FileNotFoundError:
            parent = os.path.dirname(here)
            if parent == here:
                return False, "no part of it exists"
            here = parent
        except OSError as exc:
            return False, f"cannot stat {here}: {_why(exc)}"
    ok, detail = probe_read(here)
    return ok, detail if here == path else f"{detail} ({here}; the rest is made when written)"


def probe(op: str, path: str) -> tuple[bool, str]:
    """One probe, as the child runs it; ``storage`` also calls it in-process for paths on
    local file systems."""
    if op == "mount":
        ok, detail = probe_mount(path)
    elif op == "near":
        ok, detail = probe_near(path)
    else:
        ok, detail = probe_read(path)
        if ok and op == "read+write":
            ok, wdetail = probe_write(path)
            detail = f"{detail}; {wdetail}" if ok else wdetail
    return ok, detail.replace("\n", " ")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("read", "read+write", "mount", "near"):
        print("FAIL probe usage: probe.py read|read+write|mount|near PATH")
        return 2
    ok, detail = probe(argv[1], argv[2])
    print(("OK " if ok else "FAIL ") + detail, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
