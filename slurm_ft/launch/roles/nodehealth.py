"""This node's health as its launcher knows it: the checks before a join, and the memory of
a check that failed while training (the node stays unhealthy for the rest of the attempt).

Apart from the member because it is a state of its own (the baseline, the failure found)
that both the join and the watch read.
"""

from __future__ import annotations

import dataclasses
import os

from slurm_ft import health
from slurm_ft.health import periodic
from slurm_ft.launch.books.bookkeeper import Bookkeeper
from slurm_ft.launch.companions import Companions, configured_gpus, written_dirs
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog


class NodeHealth:
    def __init__(self, cfg: AgentConfig, books: Bookkeeper, events: EventLog, companions: Companions) -> None:
        self.cfg = cfg
        self.books = books
        self.ev = events
        self.companions = companions
        self._baseline = health.take_baseline(cfg.settings.health) if cfg.health_checks else None
        # Set once a check while training failed: this node joins every later cycle of the
        # attempt unhealthy (it failed a check seconds ago; no second look decides again).
        self.found_unhealthy: str | None = None

    def check(self, i: int) -> str | None:
        """None when healthy (or checks are off this cycle), else '<check>: <detail>'. A
        node whose check failed while training stays unhealthy (also when that run ended
        only after its cycle did)."""
        if self.found_unhealthy is None:
            late = self.companions.late_failure()
            if late is not None:
                self.found_unhealthy = self.record(late, "while training")
        if self.found_unhealthy is not None:
            return self.found_unhealthy
        report = node_checks(self.cfg, i, self._baseline)
        if report is None:
            return None
        self.companions.saw_join_check(report)
        return None if report.healthy else self.record(report, "")

    def failed_while_training(self, report: health.Report) -> str:
        """A check while training failed: this node is unhealthy from now on; its detail."""
        self.found_unhealthy = self.record(report, "while training")
        return self.found_unhealthy

    def record(self, report: health.Report, when: str) -> str:
        """Record this node unhealthy (its record in the state dir, best effort: the file
        system that failed the check may hold it; an event line); returns '<check>:
        <detail>', what its join and its failure say."""
        detail = periodic.unhealthy_detail(report) or "unhealthy"
        doc = report.to_json()
        if when:
            doc["when"] = when
        self.ev.event(f"node unhealthy{' ' + when if when else ''}: {detail}")
        try:
            self.books.own_unhealthy(detail, doc)
        except OSError as exc:
            self.ev.event(f"unhealthy record not written: {exc.strerror or exc}")
        return detail


def node_checks(cfg: AgentConfig, i: int, baseline: health.Baseline | None) -> health.Report | None:
    """This node's health checks before the join of cycle ``i``, with the launcher's
    settings; None when they are off for that cycle."""
    launch = cfg.settings.launch
    if not cfg.health_checks or not (launch.health_before_join or i == 0):
        return None
    return health.run_checks(
        dataclasses.replace(cfg.settings.health, nic_mode=launch.nic_mode),
        node_name=cfg.job.node_name,
        expected_gpus=configured_gpus(cfg),
        baseline=baseline,
        own_pids=[os.getpid()],
        near_paths=written_dirs(cfg),
    )
