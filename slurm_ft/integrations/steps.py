"""Which steps a callback snapshots: every N-th optimizer step, each step once.

A framework may call its step-end hook more than once for one optimizer step (gradient
accumulation calls it per micro-batch in some of them); the step counter is what
decides, so a step is snapshot once and only after its optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Every:
    n: int
    _last: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"snapshot every {self.n} steps: give a positive number of steps")

    def due(self, step: int) -> bool:
        """True once for each step that is a multiple of ``n``."""
        if step <= self._last or step % self.n:
            return False
        self._last = step
        return True

    def resumed(self, step: int) -> None:
        """The trainer resumed after ``step``: that step is not snapshot again."""
        self._last = step
