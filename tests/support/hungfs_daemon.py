"""A FUSE file system that stops answering, run as its own process by tests.support.hungfs.

``hungfs_daemon.py MOUNT``: ``/ok`` answers; a lookup of ``/hang`` is never answered, the
way a dead NFS or Lustre mount behaves: the caller sleeps in the kernel
(``request_wait_answer``), and once it has taken SIGKILL it is in state D until the daemon
dies.

``hungfs_daemon.py MOUNT --passthrough ROOT``: every path is ROOT's, until a line ``stop``
arrives on stdin; from then on no request is answered (callers sleep in the kernel as
above) until a line ``go`` arrives, which answers them all. What a server that dies and
comes back does to its clients.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading

from fuse import FUSE, FuseOSError, Operations


class Hung(Operations):
    def __init__(self) -> None:
        self.never = threading.Event()

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path == "/hang":
            self.never.wait()
        if path in ("/ok", "/hang"):
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": 0}
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", "ok", "hang"]


class Passthrough(Operations):
    """ROOT's files, behind a gate that ``stop`` closes and ``go`` opens (see module doc)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.answering = threading.Event()
        self.answering.set()

    def __call__(self, op: str, *args: object) -> object:
        self.answering.wait()
        return super().__call__(op, *args)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _os(self, fn, *args):  # type: ignore[no-untyped-def]
        try:
            return fn(*args)
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from None

    def access(self, path: str, mode: int) -> None:
        if not os.access(self._full(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, int]:
        st = self._os(os.lstat, self._full(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self._os(os.listdir, self._full(path))]

    def readlink(self, path: str) -> str:
        return self._os(os.readlink, self._full(path))

    def mkdir(self, path: str, mode: int) -> None:
        self._os(os.mkdir, self._full(path), mode)

    def rmdir(self, path: str) -> None:
        self._os(os.rmdir, self._full(path))

    def unlink(self, path: str) -> None:
        self._os(os.unlink, self._full(path))

    def rename(self, old: str, new: str) -> None:
        self._os(os.replace, self._full(old), self._full(new))

    def link(self, target: str, source: str) -> None:
        self._os(os.link, self._full(source), self._full(target))

    def chmod(self, path: str, mode: int) -> None:
        self._os(os.chmod, self._full(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        self._os(os.chown, self._full(path), uid, gid)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        self._os(os.utime, self._full(path), times)

    def statfs(self, path: str) -> dict[str, int]:
        st = self._os(os.statvfs, self._full(path))
        keys = (
            "f_bavail",
            "f_bfree",
            "f_blocks",
            "f_bsize",
            "f_favail",
            "f_ffree",
            "f_files",
            "f_flag",
            "f_frsize",
            "f_namemax",
        )
        return {k: getattr(st, k) for k in keys}

    def open(self, path: str, flags: int) -> int:
        return self._os(os.open, self._full(path), flags)

    def create(self, path: str, mode: int, fi: object = None) -> int:
        return self._os(os.open, self._full(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._os(os.pread, fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return self._os(os.pwrite, fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        self._os(os.truncate, self._full(path), length)

    def flush(self, path: str, fh: int) -> None:
        return None

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        self._os(os.fsync, fh)

    def release(self, path: str, fh: int) -> None:
        self._os(os.close, fh)


def _control(fs: Passthrough) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            fs.answering.clear()
        elif line.strip() == "go":
            fs.answering.set()
        print(line.strip(), flush=True)  # the test waits for the echo: the gate is set


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[2] == "--passthrough":
        gate = Passthrough(sys.argv[3])
        threading.Thread(target=_control, args=(gate,), daemon=True).start()
        FUSE(gate, sys.argv[1], foreground=True, allow_other=True, default_permissions=True)
    else:
        FUSE(Hung(), sys.argv[1], foreground=True, allow_other=True)
