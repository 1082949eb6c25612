"""The node's own watchers that run beside its workers while they train: the NIC monitor
(``health.nicmonitor``) and the health check while training (``health.periodic``).

Kept out of the member, which only starts them with the launcher, rebases them at each
watch, asks them what they found and closes them: what each watches, how often, and the
check's inputs (the GPU count seen before the join, the directories the launcher writes)
are theirs. Turning a finding into this node's failure stays with the member, which
publishes it.
"""

from __future__ import annotations

import dataclasses
import os
import time

from slurm_ft import health
from slurm_ft.health import nicmonitor, periodic
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog


class Companions:
    """The NIC monitor and the check while training, each present only when asked for."""

    def __init__(self, cfg: AgentConfig, events: EventLog, *, wake_fd: int) -> None:
        self.cfg = cfg
        self.ev = events
        self.nics = nicmonitor.from_settings(cfg.settings.health, time.monotonic())
        self.gpus_seen: int | None = None  # by the last check before a join
        self.periodic = self._periodic_check(wake_fd)

    def _periodic_check(self, wake_fd: int) -> periodic.PeriodicCheck | None:
        """The GPU and storage checks while workers train, when asked for
        (``health.check_interval``) and selected; run in a thread, the same way as before
        a join (``nodehealth.node_checks``)."""
        cfg, hs = self.cfg, self.cfg.settings.health
        chosen = periodic.families(hs.checks)
        if not cfg.health_checks or hs.check_interval <= 0 or not chosen:
            return None
        self.ev.event(f"health checks while training: {', '.join(chosen)} every {hs.check_interval:g} s")
        return periodic.PeriodicCheck(
            lambda: training_checks(self.cfg, self.gpus_seen),
            hs.check_interval,
            node_name=cfg.job.node_name,
            now=time.monotonic(),
            wake_fd=wake_fd,
        )

    @property
    def nic_period(self) -> float | None:
        """How often the NIC monitor samples (None: no monitor), for the watch's sleep."""
        return self.cfg.settings.health.nic_monitor_interval if self.nics is not None else None

    @property
    def check_period(self) -> float | None:
        """How often the check while training runs (None: none), for the watch's sleep."""
        return self.periodic.interval if self.periodic is not None else None

    def saw_join_check(self, report: health.Report) -> None:
        """The check before a join: the GPU count it saw is the least the checks while
        training accept (a GPU that falls off the bus fails them even when Slurm names none)."""
        self.gpus_seen = periodic.gpus_seen(report) or self.gpus_seen

    def rebase(self) -> None:
        """At the start of each watch: the check before the join just ran and the links
        were just looked at, so both count from now."""
        if self.nics is not None:
            self.nics.rebase(time.monotonic())
        if self.periodic is not None:
            self.periodic.rebase(time.monotonic())

    def nic_fault(self) -> str | None:
        """One sample of the monitored NICs when due: every change is an event line; the
        message of the first fatal one, else None."""
        if self.nics is None:
            return None
        for event in self.nics.sample(time.monotonic()):
            self.ev.event(event.message())
            if event.fatal:
                return event.message()
        return None

    def failed_check(self) -> health.Report | None:
        """The report of a check while training that found the node unhealthy (once);
        starts the next run when one is due."""
        if self.periodic is None:
            return None
        return self.periodic.poll(time.monotonic())

    def late_failure(self) -> health.Report | None:
        """A check while training that failed only after its cycle ended (once)."""
        return self.periodic.take_failed() if self.periodic is not None else None

    def close(self) -> None:
        """Before the launcher closes its wake pipe (a check may still be running)."""
        if self.periodic is not None:
            self.periodic.close()


def training_checks(cfg: AgentConfig, gpus_seen: int | None) -> health.Report:
    """The same run as before a join while this node's workers train: only the GPU and
    storage families (the NIC monitor watches the links), GPU memory of other processes
    not judged (the job's own workers hold the GPUs now), and a GPU count below the one
    seen before the join a failure even when Slurm names none (a GPU that fell off the bus)."""
    hs = cfg.settings.health
    return health.run_checks(
        dataclasses.replace(hs, checks=periodic.families(hs.checks)),
        node_name=cfg.job.node_name,
        expected_gpus=periodic.expected_gpus(configured_gpus(cfg), gpus_seen),
        own_pids=[os.getpid()],
        near_paths=written_dirs(cfg),
        foreign_memory=False,
    )


def configured_gpus(cfg: AgentConfig) -> int | None:
    """The GPU count the node must show: ``health.gpus``, else Slurm's."""
    return cfg.settings.health.gpus or cfg.job.gpus_on_node


def written_dirs(cfg: AgentConfig) -> list[str]:
    """The directories this launcher writes into (state dir, cycle logs, per-rank files,
    launcher log): the health check probes them, bounded, so a mount that is already
    dead stops the node before its workers start (README: a file system that stops
    answering)."""
    applog = cfg.settings.applog
    dirs = [str(cfg.state.path)]
    for path in (applog.prefix, applog.launcher_log):
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)))
    if applog.log_dir:
        dirs.append(os.path.abspath(applog.log_dir))
    return list(dict.fromkeys(dirs))
