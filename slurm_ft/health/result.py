"""The one result shape every check family reports in.

The launcher, the command line, the JSON output, the Prometheus file and the drain reason
all read the same three types, so a new check needs no change anywhere else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Result:
    """One check's answer, the one shape every check family returns."""

    name: str
    status: Status
    detail: str
    duration_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """The check family ('nic', 'storage', 'gpu') a result belongs to."""
        return self.name.split(":", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "duration_s": round(self.duration_s, 6),
            "data": self.data,
        }


@dataclass(frozen=True)
class Report:
    """All results of one node's run, in the order the checks ran."""

    results: tuple[Result, ...]
    node_name: str
    duration_s: float = 0.0

    @property
    def healthy(self) -> bool:
        return all(r.status is not Status.FAIL for r in self.results)

    @property
    def checked(self) -> bool:
        """Whether any check ran: a node whose checks were all skipped is not known healthy."""
        return any(r.status is not Status.SKIP for r in self.results)

    @property
    def first_failure(self) -> Result | None:
        return next((r for r in self.results if r.status is Status.FAIL), None)

    @property
    def failures(self) -> tuple[Result, ...]:
        return tuple(r for r in self.results if r.status is Status.FAIL)

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status is status)

    def to_json(self) -> dict[str, Any]:
        first = self.first_failure
        return {
            "node": self.node_name,
            "healthy": self.healthy,
            "checked": self.checked,
            "duration_s": round(self.duration_s, 6),
            "first_failure": None if first is None else f"{first.name}: {first.detail}",
            "counts": {s.value: self.count(s) for s in Status},
            "results": [r.to_json() for r in self.results],
        }
