"""slurm-ft-launch on a kernel without ``pidfd_open`` (Linux before 5.3, e.g. RHEL/Rocky 8,
or a seccomp filter that refuses the call). This machine's kernel has it, so the one
syscall is refused here, at that boundary, as such a kernel refuses it; the rest is the
real launcher."""

import errno
import os
import sys


def _refused(pid: int) -> int:
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


os.pidfd_open = _refused

from slurm_ft.cli.launch import main  # noqa: E402 - after the refusal is in place

sys.exit(main())
