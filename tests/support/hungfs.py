"""A mounted FUSE file system whose ``hang`` file never answers (see hungfs_daemon.py).

Real kernel behaviour, not a stand-in: a process that ``stat()``s ``<mount>/hang`` sleeps in
the kernel, and after SIGKILL sits in state D until the daemon is killed, exactly like a
process on a dead network mount. Teardown kills the daemon (which ends every such wait)
and unmounts. Needs root and /dev/fuse; elsewhere the test is skipped (failed under CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

DAEMON = Path(__file__).with_name("hungfs_daemon.py")


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"FUSE test cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


def wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def hungfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        _skip_or_fail("needs root and a usable /dev/fuse")
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:
        _skip_or_fail(f"fusepy/libfuse2 missing: {exc}")
    mnt = tmp_path_factory.mktemp("hungfs")
    os.chmod(mnt, 0o755)
    daemon = subprocess.Popen([sys.executable, str(DAEMON), str(mnt)], stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _mounted(mnt) or daemon.poll() is not None, 20, message="FUSE mount")
        if daemon.poll() is not None:
            _skip_or_fail(f"cannot mount FUSE: {daemon.stderr.read().decode() if daemon.stderr else ''}")
        yield mnt
    finally:
        daemon.send_signal(signal.SIGKILL)  # aborts the connection: every stuck caller returns
        daemon.wait()
        fusermount = shutil.which("fusermount") or "fusermount"
        subprocess.run([fusermount, "-u", "-z", str(mnt)], capture_output=True, check=False)


class StoppableFs:
    """A pass-through FUSE mount of ``root`` whose server stops answering on :meth:`stop`
    and answers everything held back on :meth:`go` (see hungfs_daemon.py)."""

    def __init__(self, mount: Path, root: Path) -> None:
        self.mount = mount
        self.root = root
        self.daemon = subprocess.Popen(
            [sys.executable, str(DAEMON), str(mount), "--passthrough", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _say(self, word: str) -> None:
        assert self.daemon.stdin is not None and self.daemon.stdout is not None
        self.daemon.stdin.write(word + "\n")
        self.daemon.stdin.flush()
        assert self.daemon.stdout.readline().strip() == word  # the gate is set

    def stop(self) -> None:
        """From now on no request is answered: callers sleep in the kernel."""
        self._say("stop")

    def go(self) -> None:
        """Answer everything held back, and everything from now on."""
        self._say("go")

    def close(self) -> None:
        """Answer what is held back, then end the server (which fails anything left) and unmount."""
        if self.daemon.poll() is None:
            try:
                self.go()
            except (OSError, AssertionError, ValueError):
                pass
            self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()
        fusermount = shutil.which("fusermount") or "fusermount"
        subprocess.run([fusermount, "-u", "-z", str(self.mount)], capture_output=True, check=False)


@pytest.fixture
def stoppable_fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], StoppableFs]]:
    """A factory of pass-through mounts that stop answering on demand; every mount made is
    released, its server killed and the mount removed at teardown, whatever the test did."""
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        _skip_or_fail("needs root and a usable /dev/fuse")
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:
        _skip_or_fail(f"fusepy/libfuse2 missing: {exc}")
    made: list[StoppableFs] = []

    def make() -> StoppableFs:
        mnt = tmp_path_factory.mktemp("stopfs")
        root = tmp_path_factory.mktemp("stopfs-root")
        os.chmod(mnt, 0o755)
        fs = StoppableFs(mnt, root)
        made.append(fs)
        wait_until(lambda: _mounted(mnt) or fs.daemon.poll() is not None, 20, message="FUSE mount")
        if fs.daemon.poll() is not None:
            _skip_or_fail(f"cannot mount FUSE: {fs.daemon.stderr.read() if fs.daemon.stderr else ''}")
        return fs

    try:
        yield make
    finally:
        for fs in made:
            fs.close()
