"""What this host offers right now, asked of the operating system and the driver.

These answers are facts of the moment (a port free now, the GPUs NVML sees now), so they
are kept apart from the policy that uses them and from the store protocol.
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
