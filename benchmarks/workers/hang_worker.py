"""Hang-detection worker: every rank writes a line, stamps the moment it goes silent, and
hangs; the stamp of SIGTERM's arrival marks it stopped. Later cycles exit at once."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps


def main() -> int:
    directory = os.environ["BENCH_STAMPS"]
    rank = int(os.environ["RANK"])
    if os.environ.get("SLURM_FT_CYCLE") != os.environ.get("BENCH_FIRST_CYCLE", "0"):
        return 0

    def stopped(signum: int, frame: object) -> None:
        stamps.write(directory, f"stopped-r{rank}", time.time())
        os._exit(0)

    signal.signal(signal.SIGTERM, stopped)
    print(f"rank {rank} about to hang", flush=True)
    stamps.write(directory, f"silent-r{rank}", time.time())
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
