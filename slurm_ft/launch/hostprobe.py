"""What this host offers right now, asked of the operating system, the resolver and the driver.

These answers are facts of the moment (a port free now, the addresses a name has now, the
GPUs NVML sees now), so they are kept apart from the policy that uses them and from the
store protocol.
"""

from __future__ import annotations

import contextlib
import socket

from slurm_ft import health


def free_port() -> int:
    """A port that is free right now on this host, for the workers' MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def nvml_gpu_count() -> int | None:
    """GPUs NVML sees on this node, or None without NVML (no driver, no library)."""
    try:
        adapter = health.NvmlAdapter.open()
    except Exception:
        return None
    try:
        return int(adapter.device_count())
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            adapter.close()


def _addresses(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return set()


def same_host(a: str, b: str) -> bool:
    """Whether two names or addresses mean the same machine, as the resolver says now:
    equal, sharing an address, or both loopback (node 0 is this very machine, e.g. a test
    cluster on one host). torchrun's ``--master-addr`` is checked against Slurm's node 0
    with it (:func:`slurm_ft.compat.torchrun.check_slurm` takes it as an argument)."""
    import ipaddress

    if a == b:
        return True
    left, right = _addresses(a), _addresses(b)
    if left & right:
        return True
    both = left | right
    return bool(left) and bool(right) and all(ipaddress.ip_address(x.split("%")[0]).is_loopback for x in both)
