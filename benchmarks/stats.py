"""Summaries of repeated measurements, and the ratios and targets the table is judged by.

Absolute times drift on shared machines, so each figure is a median over several runs
(after a warm-up the caller discards) with its spread, and comparisons are ratios of
medians measured in the same run: against torchrun, and against the physical reference
of the figure (what the machine itself allows: ``python -c pass`` for a start-up, workers
writing the file directly for a log), measured interleaved with it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Summary:
    median: float
    min: float
    max: float
    n: int
    samples: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["samples"] = [round(s, 6) for s in self.samples]
        for key in ("median", "min", "max"):
            out[key] = round(out[key], 6)
        return out


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        raise ValueError("no samples to summarize")
    values = tuple(float(s) for s in samples)
    return Summary(statistics.median(values), min(values), max(values), len(values), values)


def ratio(ours: Summary | None, theirs: Summary | None) -> float | None:
    """ours / theirs of the medians; None when either side is missing or theirs is zero."""
    if ours is None or theirs is None or theirs.median == 0:
        return None
    return ours.median / theirs.median


TargetKind = Literal["max", "min", "ratio_max", "ratio_min", "ref_ratio_max", "ref_ratio_min"]


@dataclass(frozen=True)
class Target:
    """One condition a row must meet: on our median (max/min), on the ratio to torchrun
    (ratio_*) or on the ratio to the row's physical reference (ref_ratio_*)."""

    kind: TargetKind
    value: float
    strict: bool = False

    def check(self, ours: Summary | None, rat: float | None, ref_rat: float | None = None) -> bool | None:
        subject = ours.median if self.kind in ("max", "min") and ours is not None else None
        if self.kind.startswith("ratio"):
            subject = rat
        if self.kind.startswith("ref_ratio"):
            subject = ref_rat
        if subject is None:
            return None
        if self.kind.endswith("max"):
            return subject < self.value if self.strict else subject <= self.value
        return subject > self.value if self.strict else subject >= self.value

    def text(self, unit: str) -> str:
        op = "<" if self.kind.endswith("max") else ">"
        op = op if self.strict else op + "="
        if self.kind.startswith("ratio"):
            return f"{op} {self.value:g}x"
        if self.kind.startswith("ref_ratio"):
            return f"{op} {self.value:g}x reference"
        return f"{op} {self.value:g} {unit}".rstrip()


@dataclass
class Row:
    """One line of the results table. ``reference``: the figure's physical reference
    (``reference_label`` says what it is), measured in the same run."""

    figure: int
    metric: str
    unit: str
    ours: Summary | None
    torchrun: Summary | None = None
    targets: list[Target] = field(default_factory=list)
    note: str = ""
    error: str | None = None
    reference: Summary | None = None
    reference_label: str = ""

    @property
    def ratio(self) -> float | None:
        return ratio(self.ours, self.torchrun)

    @property
    def ref_ratio(self) -> float | None:
        return ratio(self.ours, self.reference)

    @property
    def passed(self) -> bool | None:
        """True/False when every target could be judged; False as soon as one misses."""
        if self.error is not None and self.targets:
            return False
        verdicts = [t.check(self.ours, self.ratio, self.ref_ratio) for t in self.targets]
        if not verdicts:
            return None
        if any(v is False for v in verdicts):
            return False
        if any(v is None for v in verdicts):
            return None
        return True

    def to_json(self) -> dict[str, Any]:
        rat, ref_rat = self.ratio, self.ref_ratio
        return {
            "figure": self.figure,
            "metric": self.metric,
            "unit": self.unit,
            "slurm_ft": self.ours.to_json() if self.ours else None,
            "torchrun": self.torchrun.to_json() if self.torchrun else None,
            "ratio": None if rat is None else round(rat, 4),
            "reference": self.reference.to_json() if self.reference else None,
            "reference_label": self.reference_label,
            "ref_ratio": None if ref_rat is None else round(ref_rat, 4),
            "target": ", ".join(t.text(self.unit) for t in self.targets),
            "targets": [asdict(t) for t in self.targets],
            "pass": self.passed,
            "note": self.note,
            "error": self.error,
        }


def error_row(figure: int, metric: str, message: str, targets: list[Target] | None = None) -> Row:
    """A figure that could not be measured still gets a row, so a miss is never hidden."""
    return Row(figure, metric, "", None, None, targets or [], error=message)
