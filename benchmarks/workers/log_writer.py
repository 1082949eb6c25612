"""Log-throughput worker: write BENCH_BYTES bytes of BENCH_LINE-byte lines to stdout, fast.

The same workload as ``benchmarks/applog_throughput.py``'s in-process writers (pre-built
64 KiB blocks of whole lines, ``os.write``), but started by a launcher and taking its rank
from RANK; the first statement stamps the start time.
"""

import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402


def main() -> int:
    rank = int(os.environ["RANK"])
    line_len = int(os.environ["BENCH_LINE"])
    total = int(os.environ["BENCH_BYTES"])
    stamps.write(os.environ["BENCH_STAMPS"], f"start-r{rank}", STARTED)
    body = (f"rank {rank} " + "x" * line_len)[: line_len - 1] + "\n"
    block = (body * max(1, (64 * 1024) // line_len)).encode()
    left = total
    while left > 0:
        chunk = block if left >= len(block) else block[:left]
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view) :]
        left -= len(chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
