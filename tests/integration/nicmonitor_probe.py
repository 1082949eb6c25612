"""Run a NicMonitor on one interface and print its events as JSON lines (run under ``ip netns exec``).

Prints the monitored ports first; exits 3 on the first fatal event, as a launcher ends the
cycle on one.
"""

from __future__ import annotations

import json
import sys
import time

from slurm_ft.health.nicmonitor import NicMonitor


def main() -> int:
    monitor = NicMonitor("/sys", [sys.argv[1]], interval=0.05, fatal=True, now=time.monotonic())
    print(json.dumps({"up": monitor.up()}), flush=True)
    while True:
        for event in monitor.sample(time.monotonic()):
            print(
                json.dumps({"port": event.port, "change": event.change.value, "message": event.message()}),
                flush=True,
            )
            if event.fatal:
                return 3
        time.sleep(0.05)  # the launcher's watch loop paces its calls the same way


if __name__ == "__main__":
    sys.exit(main())
