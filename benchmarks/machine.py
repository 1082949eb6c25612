"""A description of the machine the figures were measured on, for the JSON and README."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict[str, Any]:
    """Read without importing torch: the harness itself must stay light."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "slurm_ft": _version("slurm-ft"),
    }


def one_line(machine: dict[str, Any]) -> str:
    return (
        f"{machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB RAM, "
        f"{machine.get('os')}, Python {machine.get('python')}, torch {machine.get('torch')}"
    )
