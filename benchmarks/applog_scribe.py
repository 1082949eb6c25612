"""By hand: the cycle log through a scribe child (a log off local disks) beside the
in-process writer (a log on a local disk) and workers writing the file directly, in the
same run, interleaved; medians and each one's ratio to direct writing.

``python -m benchmarks.applog_scribe [REPEATS]`` (default 5). The scribe is forced on a
local file, so the figure is the hand-over's own cost, not a network file system's.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import applog_throughput as bench
from slurm_ft.launch.output.applog import AppLog


def _scribed(line_len: int, workers: int, size: int, directory: Path) -> dict:
    plain = bench.AppLog
    bench.AppLog = functools.partial(AppLog, scribe=True)  # type: ignore[misc]
    try:
        return bench.run_applog(line_len, workers, size, directory)
    finally:
        bench.AppLog = plain  # type: ignore[misc]


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    workers = 4
    per_worker = 50 * 1000 * 1000 // workers
    with tempfile.TemporaryDirectory(prefix="applog-scribe-") as tmp:
        directory = Path(tmp)
        for line_len in (100, 10_000):
            size = per_worker - per_worker % line_len
            runs: dict[str, list[float]] = {"applog": [], "scribe": [], "direct": []}
            for _ in range(repeats):
                runs["applog"].append(bench.run_applog(line_len, workers, size, directory)["mb_per_s"])
                runs["scribe"].append(_scribed(line_len, workers, size, directory)["mb_per_s"])
                runs["direct"].append(bench.run_direct(line_len, workers, size, directory)["mb_per_s"])
            med = {k: statistics.median(v) for k, v in runs.items()}
            print(
                json.dumps(
                    {
                        "line_bytes": line_len,
                        "mb_per_s": runs,
                        "applog/direct": round(med["applog"] / med["direct"], 3),
                        "scribe/direct": round(med["scribe"] / med["direct"], 3),
                    }
                )
            )


if __name__ == "__main__":
    main()
