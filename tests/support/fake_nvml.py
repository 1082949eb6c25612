"""A fake of ``slurm_ft.health.gpu.NvmlAdapter``: same methods, state held in plain data.

This is the hardware boundary this machine lacks (no GPU, no driver). Each device is a
``FakeGpu``; a field set to ``NOT_SUPPORTED`` makes that query raise NvmlNotSupported,
an ``NvmlError`` instance makes it raise that error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_ft.health.gpu import MIB, NvmlError, NvmlNotSupported

NOT_SUPPORTED = object()


@dataclass
class FakeGpu:
    recovery_action: Any = 0
    remapped_rows: Any = (0, 0, 0, 0)
    volatile_uncorrected_ecc: Any = 0
    retired_pages_pending: Any = False
    processes: Any = field(default_factory=list)  # [(pid, bytes)]
    memory_used: Any = 400 * MIB
    pci_bus_id: Any = NOT_SUPPORTED  # "00000000:18:00.0"
    uuid: Any = NOT_SUPPORTED


def _answer(value: Any) -> Any:
    if value is NOT_SUPPORTED:
        raise NvmlNotSupported("not supported")
    if isinstance(value, NvmlError):
        raise value
    return value


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], *, on_poll: Callable[[FakeNvml], None] | None = None) -> None:
        self.gpus = gpus
        self.closed = False
        self.on_poll = on_poll
        self.polls = 0

    def close(self) -> None:
        self.closed = True

    def device_count(self) -> int:
        return len(self.gpus)

    def name(self, index: int) -> str:
        return "Fake GPU"

    def pci_bus_id(self, index: int) -> str:
        return _answer(self.gpus[index].pci_bus_id)

    def uuid(self, index: int) -> str:
        return _answer(self.gpus[index].uuid)

    def recovery_action(self, index: int) -> int:
        return _answer(self.gpus[index].recovery_action)

    def remapped_rows(self, index: int) -> tuple[int, int, int, int]:
        return _answer(self.gpus[index].remapped_rows)

    def volatile_uncorrected_ecc(self, index: int) -> int:
        return _answer(self.gpus[index].volatile_uncorrected_ecc)

    def retired_pages_pending(self, index: int) -> bool:
        return _answer(self.gpus[index].retired_pages_pending)

    def processes(self, index: int) -> list[tuple[int, int]]:
        if index == 0:
            self.polls += 1
            if self.on_poll is not None:
                self.on_poll(self)
        return list(_answer(self.gpus[index].processes))

    def memory_used(self, index: int) -> int:
        return _answer(self.gpus[index].memory_used)
