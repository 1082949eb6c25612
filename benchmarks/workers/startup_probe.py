"""Interpreter start-up probe: the time from spawn to this script's first statement."""

import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402

stamps.write(os.environ["BENCH_STAMPS"], f"probe-{os.getpid()}", STARTED)
