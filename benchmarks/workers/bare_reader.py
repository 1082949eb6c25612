"""Figure 6's reference for printing workers: what reading every line costs on this machine.

Two writer children each print ``RATE/2`` lines a second into their own pipe; this
process reads each pipe in its own thread the least a reader can (wait in ``poll``, one
``read``, one ``writev`` of prefix and data to an appending file) and prints its own CPU
as percent of one core over ``SECONDS``. A launcher that reads every line as it comes
cannot cost less than this; what it costs above it is its own work per line.

usage: bare_reader.py RATE SECONDS OUTPUT_FILE
"""

from __future__ import annotations

import os
import resource
import select
import sys
import threading
import time

LINE = b"step 1200 loss 0.123456 lr 0.000300 tokens/s 123456.7 grad-norm 0.98\n"


def write_lines(fd: int, rate: float, seconds: float) -> None:
    period = 1.0 / rate
    next_at = time.monotonic()
    end = next_at + seconds
    while next_at < end:
        os.write(fd, LINE)
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))


def read_lines(fd: int, out: int, prefix: bytes) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            poller.poll()
            continue
        if not data:
            return
        os.writev(out, [prefix, data])


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    rate, seconds, output = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    out = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    readers, children = [], []
    for rank in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            write_lines(w, rate / 2, seconds)
            os._exit(0)
        os.close(w)
        os.set_blocking(r, False)
        children.append(pid)
        readers.append(threading.Thread(target=read_lines, args=(r, out, f"{rank}: ".encode())))
    start_cpu, start = cpu_s(), time.perf_counter()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    used, wall = cpu_s() - start_cpu, time.perf_counter() - start
    for pid in children:
        os.waitpid(pid, 0)
    print(f"{100.0 * used / wall:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
