"""The benchmarks' command lines: bad input is one line on stderr and exit 2, as with
every slurm-ft command (DESIGN.md), never a traceback or a run that fails later."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse, but an error is ``<prog>: error: <what>`` alone, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def sizes(text: str) -> list[int]:
    """``256,1024`` -> [256, 1024]."""
    try:
        found = [int(word) for word in text.split(",") if word.strip()]
    except ValueError:
        found = []
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers above 0 separated by commas, got {text!r}")
    return found


def names(known: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma-separated choice among ``known``."""

    def parse(text: str) -> list[str]:
        found = [word.strip() for word in text.split(",") if word.strip()]
        unknown = [word for word in found if word not in known]
        if not found or unknown:
            what = f"unknown {unknown[0]!r}" if unknown else "nothing named"
            raise argparse.ArgumentTypeError(f"{what}; choose among {', '.join(known)}")
        return found

    return parse
