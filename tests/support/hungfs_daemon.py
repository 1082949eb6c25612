"""A FUSE file system that stops answering, run as its own process by tests.support.hungfs.

``/ok`` answers; a lookup of ``/hang`` is never answered, the way a dead NFS or Lustre
mount behaves: the caller sleeps in the kernel (``request_wait_answer``), and once it has
taken SIGKILL it is in state D until the daemon dies.
"""

from __future__ import annotations

import errno
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


if __name__ == "__main__":
    FUSE(Hung(), sys.argv[1], foreground=True, allow_other=True)
