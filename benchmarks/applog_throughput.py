"""Per-node application-log throughput: workers print as fast as they can.

Figures per line size (100 B and 10 KB lines):
- ``applog``: workers -> pipes -> AppLog (one reader thread) -> one cycle file; MB/s of
  worker output per node and the launcher's CPU seconds per GB (this process's rusage,
  which holds only the reader/writer threads: the workers are child processes).
- ``direct``: the ceiling, the same workers writing straight into an ``O_APPEND`` file.
- ``bare_pipe``: workers -> pipes -> one thread reading and discarding (the cost of the
  pipe hop alone).
Workers are small Python processes writing pre-built blocks with ``os.write``, so they run
at close to C speed; the machine's cores are shared between workers and launcher.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_ft.launch.output.applog import AppLog, open_worker_pipe
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.logline import rank_width

WRITER = r"""
import os, sys
rank, line_len, total = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = (f"rank {rank} " + "x" * line_len)[: line_len - 1] + "\n"
lines_per_block = max(1, (64 * 1024) // line_len)
block = (body * lines_per_block).encode()
left = total
while left > 0:
    chunk = block if left >= len(block) else block[:left]
    view = memoryview(chunk)
    while view:
        view = view[os.write(1, view):]
    left -= len(chunk)
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _spawn(rank: int, line_len: int, per_worker: int, stdout: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(rank), str(line_len), str(per_worker)],
        stdout=stdout,
        stderr=stdout,
    )


def _figure(mode: str, line_len: int, workers: int, total: int, wall: float, cpu: float) -> dict:
    return {
        "name": f"applog_{mode}_{line_len}B",
        "mode": mode,
        "line_bytes": line_len,
        "workers": workers,
        "bytes": total,
        "wall_s": round(wall, 3),
        "mb_per_s": round(total / wall / 1e6, 1),
        "launcher_cpu_s_per_gb": round(cpu / (total / 1e9), 3),
    }


def run_applog(line_len: int, workers: int, per_worker: int, directory: Path) -> dict:
    path = directory / f"bench_{line_len}_cycle0.log"
    events = EventLog(None, "bench", quiet=True)
    cpu0, t0 = _cpu(), time.perf_counter()
    log = AppLog(
        path,
        rank_width=rank_width(workers),
        line_cap=1024 * 1024,
        drain_timeout=30.0,
        tee=False,
        tee_local_ranks=None,
        events=events,
    )
    procs = []
    for rank in range(workers):
        read_fd, write_fd = open_worker_pipe()
        procs.append(_spawn(rank, line_len, per_worker, write_fd))
        os.close(write_fd)
        log.attach(rank, rank, read_fd)
    for proc in procs:
        proc.wait()
    stats = log.close()
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    payload = workers * per_worker
    assert stats.lost_bytes == 0 and stats.lines == payload // line_len, stats
    path.unlink()
    return _figure("applog", line_len, workers, payload, wall, cpu)


def run_direct(line_len: int, workers: int, per_worker: int, directory: Path) -> dict:
    path = directory / f"bench_{line_len}_direct.log"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    cpu0, t0 = _cpu(), time.perf_counter()
    procs = [_spawn(rank, line_len, per_worker, fd) for rank in range(workers)]
    for proc in procs:
        proc.wait()
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    os.close(fd)
    assert path.stat().st_size == workers * per_worker
    path.unlink()
    return _figure("direct", line_len, workers, workers * per_worker, wall, cpu)


def run_bare_pipe(line_len: int, workers: int, per_worker: int) -> dict:
    cpu0, t0 = _cpu(), time.perf_counter()
    selector = selectors.DefaultSelector()
    procs = []
    for rank in range(workers):
        read_fd, write_fd = open_worker_pipe()
        procs.append(_spawn(rank, line_len, per_worker, write_fd))
        os.close(write_fd)
        selector.register(read_fd, selectors.EVENT_READ)
    total, open_fds = 0, workers
    while open_fds:
        for key, _ in selector.select():
            data = os.read(key.fd, 256 * 1024)
            if data:
                total += len(data)
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
                open_fds -= 1
    for proc in procs:
        proc.wait()
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    assert total == workers * per_worker
    return _figure("bare_pipe", line_len, workers, total, wall, cpu)


def _median_of(results: list[dict]) -> dict:
    """Median by throughput; the machine is shared, so one run can be far off."""
    ordered = sorted(results, key=lambda r: r["mb_per_s"])
    figure = dict(ordered[len(ordered) // 2])
    figure["runs"] = len(results)
    figure["mb_per_s_best"] = ordered[-1]["mb_per_s"]
    figure["launcher_cpu_s_per_gb_best"] = min(r["launcher_cpu_s_per_gb"] for r in results)
    return figure


def run(quick: bool) -> list[dict]:
    workers = 4
    per_worker = (50 if quick else 250) * 1000 * 1000 // workers
    repeats = 1 if quick else 3
    out: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="applog-bench-", dir=os.environ.get("APPLOG_BENCH_DIR")) as tmp:
        directory = Path(tmp)
        for line_len in (100, 10_000):
            size = per_worker - per_worker % line_len
            runs: dict[str, list[dict]] = {"applog": [], "direct": [], "bare_pipe": []}
            for _ in range(repeats):  # interleaved, so load changes hit every mode alike
                runs["applog"].append(run_applog(line_len, workers, size, directory))
                runs["direct"].append(run_direct(line_len, workers, size, directory))
                runs["bare_pipe"].append(run_bare_pipe(line_len, workers, size))
            out.extend(_median_of(results) for results in runs.values())
    return out


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    for figure in run(quick):
        print(json.dumps(figure))


if __name__ == "__main__":
    main()
