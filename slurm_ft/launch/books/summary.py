"""What a launcher knows of the run at one moment, as one immutable value: the loop and
the roles replace it as the run goes on, and the records report the value they are given."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from slurm_ft.records import Failure


@dataclass(frozen=True)
class RunSummary:
    """What this launcher knows of the run at one moment; the records report it."""

    first_cycle: int = 0
    run_uuid: str = ""
    cycles_run: int = 0
    last_cycle: int | None = None
    last_failure: Failure | None = None
    nodes: tuple[str, ...] = ()
    lost_nodes: tuple[str, ...] = ()  # with spares: lost launchers, spares included
    suspect_nodes: tuple[str, ...] = ()
    failure_seen: Failure | None = None  # the last failure, kept after a success (metrics)
    log_lost: tuple[int, int] = (0, 0)  # lines, bytes the cycle logs could not take
    store_values_ignored: tuple[str, ...] = ()  # the store keys whose values were ignored (sealer)
    successions: tuple[str, ...] = ()  # the store moved: one line each (launch.succession)
    unfenced: tuple[str, ...] = ()  # processes of a lost store host that could not be killed
    snapshots_persisted: tuple[str, ...] = ()  # this node's persist on the way out: one line per rank
    snapshots_not_persisted: tuple[str, ...] = ()  # ... and what it could not persist

    def started(self, cycle: int) -> RunSummary:
        return dataclasses.replace(self, cycles_run=self.cycles_run + 1, last_cycle=cycle)

    def closed(
        self, failure: Failure | None, *, succeeded: bool, log_lost: tuple[int, int] = (0, 0)
    ) -> RunSummary:
        """After a cycle: its failure is the last one (a success clears the last one), and
        what its cycle log could not take is counted."""
        last = failure if failure is not None else None if succeeded else self.last_failure
        return dataclasses.replace(
            self,
            last_failure=last,
            failure_seen=failure or self.failure_seen,
            log_lost=(self.log_lost[0] + log_lost[0], self.log_lost[1] + log_lost[1]),
        )
