"""Why a launcher's watch of a cycle ended, and the cycle's result that follows from it.

Apart from the member, which finds the ending, because the stop (``workerstop``), the
agent's loop and node 0's books all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from slurm_ft.launch.rendezvous.protocol import CycleResult
from slurm_ft.records import CycleOutcome, Failure


class WatchEndKind(Enum):
    SUCCESS = "success"  # every worker on every node exited 0
    FAILURE = "failure"  # the cycle's first failure, anywhere
    SIGNAL = "signal"  # this launcher received a terminating signal
    STORE_LOST = "store-lost"  # node 0's store went away or froze
    BLIND = "blind"  # a background thread died: the job can no longer be seen


@dataclass(frozen=True)
class WatchEnd:
    """Why this launcher's watch of a cycle ended, with the failure when there is one."""

    kind: WatchEndKind
    failure: Failure | None = None
    signum: int | None = None
    detail: str = ""

    def result(self, now: float) -> CycleResult:
        """The cycle's result as node 0 records and publishes it."""
        return CycleResult(CYCLE_OUTCOME[self.kind], now, self.failure.to_json() if self.failure else None)


CYCLE_OUTCOME = {
    WatchEndKind.SUCCESS: CycleOutcome.SUCCEEDED,
    WatchEndKind.FAILURE: CycleOutcome.FAILED,
    WatchEndKind.SIGNAL: CycleOutcome.SIGNALLED,
    WatchEndKind.STORE_LOST: CycleOutcome.LOST,
    WatchEndKind.BLIND: CycleOutcome.LOST,
}
