"""Stopping this node's workers the way its watch of the cycle ended: a forwarded signal
with its long grace, a signal relayed from another launcher the same way, a failure with
the rank termination signal and a short grace (after keeping a hang's stacks).

Apart from the member because it is one decision of its own (which signal, which grace,
what the event log says) over the workers' stop, read in one place.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Protocol

from slurm_ft.exitcodes import signal_by_name, signal_name
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.applog import output_note
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.roles.watchend import WatchEnd, WatchEndKind
from slurm_ft.launch.signals import SignalBox, forwarding_note
from slurm_ft.launch.workers.group import CycleWorkers
from slurm_ft.launch.workers.survivors import Survivor
from slurm_ft.records import Failure, FailureKind
from slurm_ft.settingsyntax import parse_signals


class PublishQuietly(Protocol):
    """A failure of this launcher itself, told to the job best effort (``Member.publish_quietly``)."""

    def __call__(self, i: int, kind: FailureKind, detail: str, *, signame: str | None = None) -> None: ...


@dataclass
class WorkerStop:
    cfg: AgentConfig
    events: EventLog
    signals: SignalBox
    publish_quietly: PublishQuietly
    termination_signal: int = field(init=False)

    def __post_init__(self) -> None:
        self.termination_signal = int(parse_signals([self.cfg.settings.hang.rank_termination_signal])[0])

    def _interrupted_again(self) -> bool:
        self.signals.drain()
        return self.signals.repeated

    def stop(self, i: int, cycle: int, workers: CycleWorkers | None, end: WatchEnd) -> list[Survivor]:
        """Stop this node's workers the way the watch ended: a forwarded signal with its
        long grace (workers checkpoint then); a failure (after keeping the stacks of a
        hang) with the rank termination signal and a short grace. A spare has none.
        Returns the processes that outlived SIGKILL (normally none)."""
        launch = self.cfg.settings.launch
        if end.kind is WatchEndKind.SIGNAL:
            assert end.signum is not None
            name = signal_name(end.signum)
            self.events.event(
                forwarding_note(end.signum, launch.term_timeout if workers is not None else None)
            )
            self.publish_quietly(i, FailureKind.SIGNAL, f"launcher received {name}", signame=name)
            if workers is None:
                return []
            hurry = self._interrupted_again if end.signum == signal.SIGINT else None
            return workers.stop(end.signum, launch.term_timeout, hurry=hurry, wake_fds=(self.signals.fd,))
        relayed = self._relayed_signal(end.failure)
        if relayed is not None and workers is not None:
            # Another launcher received a signal forwarded to the whole job (preemption,
            # the time limit's warning, scancel --signal): this node's may be a moment
            # behind. Its workers get the same signal and the same long grace, never the
            # failure stop's TERM and 0.2 s: a checkpoint on that signal needs every rank
            # (issue 47: the README example's rank 0 was killed before it logged USR1).
            assert end.failure is not None
            self.events.event(
                f"cycle {cycle} stopped: {end.failure.describe()}; forwarding {signal_name(relayed)} "
                f"to workers; waiting up to {launch.term_timeout:g} s for them to exit"
            )
            return workers.stop(relayed, launch.term_timeout, wake_fds=(self.signals.fd,))
        if end.failure is not None:
            where = output_note(self.cfg.settings.applog, cycle, end.failure)
            self.events.event(f"cycle {cycle} failed: {end.failure.describe()}{where}")
            if end.failure.traceback:
                self.events.event(f"traceback of rank {end.failure.rank}: {end.failure.traceback}")
        elif end.kind is WatchEndKind.STORE_LOST:
            self.events.event(f"lost the rendezvous store: {end.detail}")  # no one to tell there
        elif end.kind is not WatchEndKind.SUCCESS:
            self.events.event(f"lost the rendezvous store: {end.detail}")
            # Node 0 blind: halt the others if they can hear.
            self.publish_quietly(i, FailureKind.LAUNCHER, f"launcher blind: {end.detail}")
        if workers is None:
            return []
        if end.failure is not None and end.failure.kind is FailureKind.HANG:
            workers.keep_stacks(f"hang, detector {end.failure.detector}")
        # The job's collective is broken: the other ranks can do no useful work, so they
        # get a short grace, unless inside a section (a checkpoint being written).
        return workers.stop(
            self.termination_signal, launch.workers_stop_timeout, short_grace=launch.failure_stop_grace
        )

    def _relayed_signal(self, failure: Failure | None) -> int | None:
        """The signal another launcher received and ended the cycle on, when it is one this
        launcher forwards too; None for any other ending."""
        if failure is None or failure.kind is not FailureKind.SIGNAL:
            return None
        signum = signal_by_name(failure.signal)
        return signum if signum in self.signals.signals else None
