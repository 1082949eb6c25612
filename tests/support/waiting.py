"""Wait on conditions with deadlines instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    *,
    interval: float = 0.02,
    message: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}")
        time.sleep(interval)
