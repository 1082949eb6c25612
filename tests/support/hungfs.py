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
from collections.abc import Iterator
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
