"""The launcher's decisions as pure functions of what it knows, so they can be tested as data.

Node 0 makes one decision for every launcher before each cycle; keeping it free of store
and file I/O means the rules (and their exit codes, see ``exitcodes``) can be read and
checked in one place, independently of how the facts were gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ft import exitcodes
from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch.records import Failure


@dataclass(frozen=True)
class Verdict:
    run: bool
    exit_code: int = 0
    reason: str = ""


def decide(
    *,
    restart: int,
    max_restarts: int,
    previous_failure: Failure | None,
    unhealthy: Sequence[tuple[str, str]],
    lost: Sequence[str],
    missing: Sequence[str],
) -> Verdict:
    """Node 0's decision before cycle ``restart`` (index within the attempt).

    The progress guard is asked only when everything here says run, because asking it
    records the start of a cycle in the ledger.
    """
    if unhealthy:
        text = "; ".join(f"{node}: {detail}" for node, detail in unhealthy)
        return Verdict(False, int(ExitCode.UNHEALTHY), f"unhealthy: {text}")
    if lost:
        return Verdict(False, int(ExitCode.WORKERS_FAILED), f"lost launcher on {', '.join(lost)}")
    if previous_failure is not None and not previous_failure.retryable:
        return Verdict(False, int(ExitCode.WORKERS_FAILED), f"cannot restart: {previous_failure.describe()}")
    if missing:
        return Verdict(
            False,
            int(ExitCode.WORKERS_FAILED),
            f"join timeout: no launcher from node(s) {', '.join(missing)}",
        )
    if restart > max_restarts:
        last = f"; last failure: {previous_failure.describe()}" if previous_failure else ""
        return Verdict(
            False,
            int(ExitCode.WORKERS_FAILED),
            f"restart budget spent ({max_restarts} restart(s), {restart} cycle(s) failed){last}",
        )
    return Verdict(True)


def no_progress(reason: str) -> Verdict:
    """The verdict when the progress guard vetoes a cycle that :func:`decide` allowed."""
    return Verdict(False, int(ExitCode.NO_PROGRESS), f"no progress: {reason}")


def exit_for_signal(signum: int) -> int:
    return exitcodes.for_signal(signum)
