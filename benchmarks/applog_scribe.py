"""By hand: the cycle log through a scribe child (a log off local disks) beside the
in-process writer (a log on a local disk) and workers writing the file directly, in the
same run, interleaved; medians of throughput and of CPU per GB, and each throughput's
ratio to direct writing.

``python -m benchmarks.applog_scribe [REPEATS]`` (default 5). The scribe is forced on a
local file, so the figure is the hand-over's own cost, not a network file system's. CPU
is this process's and all its children's (workers included, the same in every mode), so
the differences between modes are what each writer costs.
"""

from __future__ import annotations

import functools
import json
import resource
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks import applog_throughput as bench
from slurm_ft.launch.output.applog import AppLog


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _scribed(line_len: int, workers: int, size: int, directory: Path) -> dict:
    plain = bench.AppLog
    bench.AppLog = functools.partial(AppLog, scribe=True)  # type: ignore[misc]
    try:
        return bench.run_applog(line_len, workers, size, directory)
    finally:
        bench.AppLog = plain  # type: ignore[misc]


MODES: dict[str, Callable[[int, int, int, Path], dict]] = {
    "applog": bench.run_applog,
    "scribe": _scribed,
    "direct": bench.run_direct,
}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    workers = 4
    per_worker = 50 * 1000 * 1000 // workers
    with tempfile.TemporaryDirectory(prefix="applog-scribe-") as tmp:
        directory = Path(tmp)
        for line_len in (100, 10_000):
            size = per_worker - per_worker % line_len
            speed: dict[str, list[float]] = {m: [] for m in MODES}
            cpu: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(repeats):  # interleaved, so load changes hit every mode alike
                for mode, run in MODES.items():
                    before = _cpu()
                    speed[mode].append(run(line_len, workers, size, directory)["mb_per_s"])
                    cpu[mode].append((_cpu() - before) / (workers * size / 1e9))
            med = {m: statistics.median(v) for m, v in speed.items()}
            print(
                json.dumps(
                    {
                        "line_bytes": line_len,
                        "mb_per_s": {m: round(v, 1) for m, v in med.items()},
                        "cpu_s_per_gb": {m: round(statistics.median(v), 3) for m, v in cpu.items()},
                        "applog/direct": round(med["applog"] / med["direct"], 3),
                        "scribe/direct": round(med["scribe"] / med["direct"], 3),
                    }
                )
            )


if __name__ == "__main__":
    main()
