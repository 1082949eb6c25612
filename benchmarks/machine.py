"""A description of the machine the figures were measured on, for the JSON and README."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import time
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


def speed_check_ms() -> float:
    """How fast this machine runs Python right now: the median of 5 timings of a fixed
    pure-Python loop. A shared VM's speed drifts by half from one hour to the next (its
    neighbours, not our code); two runs' figures compare only beside their speed checks."""

    def fixed_work() -> int:
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        return total

    samples = []
    for _ in range(5):
        start = time.perf_counter()
        fixed_work()
        samples.append(time.perf_counter() - start)
    return round(statistics.median(samples) * 1000, 1)


def one_line(machine: dict[str, Any]) -> str:
    text = (
        f"{machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB RAM, "
        f"{machine.get('os')}, Python {machine.get('python')}, torch {machine.get('torch')}"
    )
    speed = machine.get("speed_check_ms")
    if speed:
        text += (
            f"; speed check (a fixed Python loop, lower is faster): {speed[0]} ms at the start, "
            f"{speed[1]} ms at the end"
        )
    return text
