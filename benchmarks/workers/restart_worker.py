"""Restart-latency worker: record start, one rank dies in the first cycle, the rest wait.

Deliberately torch-free and import-light: the figure is about the launchers, so the
worker's own start-up must be as small as Python allows. The first statement takes the
start time; the harness measures interpreter start-up separately.
"""

import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402


def main() -> int:
    directory = os.environ["BENCH_STAMPS"]
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    # Launchers number restarts differently (torchrun counts per agent, and an agent
    # restarted by a peer's failure does not count it), so the cycle is how many times
    # this rank has started before.
    cycle = sum(1 for n in os.listdir(directory) if n.startswith("start-") and n.endswith(f"-r{rank}"))
    victim = int(os.environ.get("BENCH_VICTIM_RANK", "3"))
    settle = float(os.environ.get("BENCH_SETTLE_S", "0.5"))
    stamps.write(directory, f"start-c{cycle}-r{rank}", STARTED)
    if cycle > 0:
        return 0
    delay = float(os.environ.get("BENCH_TERM_DELAY_S", "0"))
    if delay:  # like PyTorch Lightning: SIGTERM is caught and the exit takes a while
        import signal

        def slow_exit(signum: int, frame: object) -> None:
            time.sleep(delay)
            os._exit(143)

        signal.signal(signal.SIGTERM, slow_exit)
    if rank != victim:
        while True:  # stopped by the launcher
            time.sleep(3600)
    deadline = time.monotonic() + 120
    while stamps.count(directory, "start-c0-") < world:
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.01)
    # Let every launcher settle into its watch loop before the failure.
    time.sleep(settle)
    stamps.write(directory, f"death-c0-r{rank}", time.time())
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
