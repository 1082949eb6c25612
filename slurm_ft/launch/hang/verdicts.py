"""Hang verdicts: what counts as a hang, pure judgements over the readings (no I/O), and
the limits they judge against, read once from the settings."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from slurm_ft import worker
from slurm_ft.config import HangSettings
from slurm_ft.launch.hang import learn
from slurm_ft.records import Failure, FailureKind
from slurm_ft.settingsyntax import parse_section_timeouts


class Detector(str, Enum):
    SILENCE = "silence"
    ITERATION = "iteration"
    HEARTBEAT = "heartbeat"
    INITIAL_HEARTBEAT = "initial-heartbeat"
    SECTION = "section"
    OUT_OF_SECTION = "out-of-section"


@dataclass(frozen=True)
class Hang:
    """A detector's finding: which ranks (none for job-wide ones) were silent for how long."""

    detector: Detector
    ranks: tuple[int, ...]  # () for the job-wide detectors
    seconds: float  # since the last sign of life the detector knows of
    detail: str


def failure_of(hang: Hang, node: str, node_rank: int, when: float) -> Failure:
    """The cycle's failure record for a hang found by the launcher on ``node``."""
    return Failure(
        kind=FailureKind.HANG,
        node=node,
        node_rank=node_rank,
        time=when,
        rank=hang.ranks[0] if hang.ranks else None,
        detail=hang.detail,
        detector=hang.detector.value,
        hung_ranks=list(hang.ranks) if hang.ranks else None,
    )


@dataclass(frozen=True)
class Limits:
    """The hang settings in seconds, ``0`` for a detector that is off."""

    silence: float
    iteration: float
    heartbeat: float
    initial_heartbeat: float
    sections: Mapping[str, float]
    out_of_section: float
    learn_silence: learn.Policy = learn.OFF
    learn_iteration: learn.Policy = learn.OFF

    @classmethod
    def from_settings(cls, hang: HangSettings, progress_source: bool = False) -> Limits:
        """``progress_source``: the job has one, so the iteration detector learns too (capped
        by ``hang.iteration_timeout`` when one is given, else uncapped: a checkpoint every
        30 min must not meet a 30-min silence timeout)."""
        factor, floor, warmup = hang.safety_factor, hang.learned_floor, hang.initial_timeout
        iteration_cap = hang.iteration_timeout or (math.inf if progress_source and factor > 0 else 0.0)
        fixed = cls(
            silence=hang.timeout,
            iteration=hang.iteration_timeout,
            heartbeat=hang.rank_heartbeat_timeout,
            initial_heartbeat=hang.rank_initial_heartbeat_timeout,
            sections=parse_section_timeouts(hang.rank_section_timeouts),
            out_of_section=hang.rank_out_of_section_timeout,
        )
        return dataclasses.replace(
            fixed,
            learn_silence=learn.Policy(factor, floor, hang.timeout, warmup, fixed.period),
            learn_iteration=learn.Policy(factor, floor, iteration_cap, warmup),
        )

    @property
    def silence_report_after(self) -> float:
        """The quiet at which a peer tells node 0 (see :attr:`learn.Policy.report_after`)."""
        return self.learn_silence.report_after

    @property
    def per_rank(self) -> bool:
        return bool(self.heartbeat or self.initial_heartbeat or self.sections or self.out_of_section)

    @property
    def period(self) -> float:
        """How often the detectors need a look: a tenth of the shortest timeout, between
        0.1 s and 5 s (a 30-minute silence timeout costs one look every 5 s, a 2-second
        one finds its hang within a quarter of a second). Infinite when all are off."""
        rank = [self.heartbeat, self.initial_heartbeat, *self.sections.values(), self.out_of_section]
        timeouts = [t for t in (self.silence, self.iteration, *rank) if t > 0]
        if not timeouts:
            return float("inf")
        return min(5.0, max(0.1, min(timeouts) / 10))


# ----------------------------------------------------------------------- judgements


def judge_rank(
    slot: worker.Slot, now: float, started: float, limits: Limits
) -> tuple[Detector, float, str] | None:
    """One rank's verdict. Inside a section that has a timeout only that timeout counts
    (a long checkpoint in a ``checkpointing`` section is alive); elsewhere heart-beats do."""
    if slot.section is not None:
        limit = limits.sections.get(slot.section)
        if limit is not None:
            open_for = now - slot.section_start
            if open_for > limit:
                return (
                    Detector.SECTION,
                    open_for,
                    f"section {slot.section!r} open for {open_for:.1f}s (limit {limit:g}s)",
                )
            return None
    elif limits.out_of_section and slot.section_end:
        outside = now - slot.section_end
        if outside > limits.out_of_section:
            return (
                Detector.OUT_OF_SECTION,
                outside,
                f"outside every section for {outside:.1f}s (limit {limits.out_of_section:g}s)",
            )
    if slot.heartbeat:
        silent = now - slot.heartbeat
        if limits.heartbeat and silent > limits.heartbeat:
            return Detector.HEARTBEAT, silent, f"no heartbeat for {silent:.1f}s (limit {limits.heartbeat:g}s)"
    elif limits.initial_heartbeat and now - started > limits.initial_heartbeat:
        waited = now - started
        return (
            Detector.INITIAL_HEARTBEAT,
            waited,
            f"no first heartbeat {waited:.1f}s after start (limit {limits.initial_heartbeat:g}s)",
        )
    return None


def judge_silence(quiet: Iterable[float], timeout: float, basis: str | None = None) -> Hang | None:
    """The job is silent when every node's workers were quiet for ``timeout``; ``basis``
    says where the timeout comes from (default: the fixed ``hang.timeout``)."""
    values = list(quiet)
    if not timeout or not values:
        return None
    least = min(values)
    if least < timeout:
        return None
    why = basis or f"hang.timeout {timeout:g}s"
    detail = f"no worker of the job wrote anything for {least:.1f}s ({why})"
    return Hang(Detector.SILENCE, (), least, detail)


def rank_hang(verdicts: Mapping[int, tuple[Detector, float, str]]) -> Hang | None:
    """This node's hung ranks as one finding, named by the first rank's detector."""
    if not verdicts:
        return None
    ranks = tuple(sorted(verdicts))
    detector, seconds, what = verdicts[ranks[0]]
    more = f" (also rank(s) {', '.join(map(str, ranks[1:]))})" if len(ranks) > 1 else ""
    return Hang(detector, ranks, seconds, f"rank {ranks[0]}: {what}{more}")
