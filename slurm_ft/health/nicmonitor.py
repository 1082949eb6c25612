"""NIC links watched while workers train, so a port that goes down is named at once.

Before a join the health check asks "is every selected port up?". During a cycle the
question is "did anything change?": a port that was up and is not, a port whose
``link_downed`` / ``carrier_down_count`` grew between two samples (it flapped and came
back before we looked), a port that vanished (driver reset). Without this, a dead link
shows up minutes later as an NCCL timeout on every rank, naming nothing.

The launcher calls :meth:`NicMonitor.sample` from its watch loop as often as it likes;
the monitor reads sysfs only every ``interval`` seconds, with the same readers as the
health check (``health.nic``), so "up" means the same thing in both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from slurm_ft.config import HealthSettings
from slurm_ft.health import nic


class NicChange(str, Enum):
    DOWN = "down"  # was up, is not
    FLAPPED = "flapped"  # up at both samples, but its down counter grew in between
    GONE = "gone"  # no longer in sysfs
    UP = "up"  # was down, is up again


@dataclass(frozen=True)
class NicEvent:
    """A port that changed during a cycle, and whether that ends the cycle."""

    port: str  # "mlx5_0/1" or an interface name
    change: NicChange
    detail: str
    when: float  # the ``now`` of the sample that saw it
    fatal: bool  # ends the cycle as a failure of this node (setting)

    def message(self) -> str:
        verb = {
            NicChange.DOWN: "went down",
            NicChange.FLAPPED: "flapped",
            NicChange.GONE: "disappeared",
            NicChange.UP: "is up again",
        }[self.change]
        return f"NIC {self.port} {verb} ({self.detail})"


def _downs(before: nic.PortState, after: nic.PortState) -> int:
    if before.down_count is None or after.down_count is None:
        return 0
    return max(0, after.down_count - before.down_count)


def compare(
    before: Mapping[str, nic.PortState], after: Mapping[str, nic.PortState], now: float, fatal: bool
) -> list[NicEvent]:
    """Pure: what changed between two samples. A port down at both samples is no news."""
    events = []
    for key, old in before.items():
        new = after.get(key)
        if new is None:
            if old.up:
                events.append(NicEvent(key, NicChange.GONE, "no longer in sysfs", now, fatal))
            continue
        grew = _downs(old, new)
        counter = "link_downed" if new.kind == "rdma" else "carrier_down_count"
        if old.up and not new.up:
            events.append(NicEvent(key, NicChange.DOWN, new.describe(), now, fatal))
        elif not old.up and new.up:
            events.append(NicEvent(key, NicChange.UP, new.describe(), now, False))
        elif new.up and grew:
            detail = f"{counter} {old.down_count} -> {new.down_count}"
            events.append(NicEvent(key, NicChange.FLAPPED, detail, now, fatal))
    return events


class NicMonitor:
    """Samples the selected ports every ``interval`` s; counts each port's downs and flaps."""

    def __init__(
        self, sysfs_root: str, patterns: Sequence[str], *, interval: float, fatal: bool, now: float
    ) -> None:
        self._root = sysfs_root
        self._patterns = tuple(patterns)
        self._interval = interval
        self._fatal = fatal
        self._last = self._read()
        self._next = now + interval
        self.down_total: dict[str, int] = {key: 0 for key in self._last}

    def _read(self) -> dict[str, nic.PortState]:
        return {p.key: p for p in nic.snapshot(self._root, self._patterns).ports}

    @property
    def ports(self) -> tuple[str, ...]:
        return tuple(self._last)

    def up(self) -> dict[str, bool]:
        return {key: port.up for key, port in self._last.items()}

    def rebase(self, now: float) -> None:
        """Take the ports as they are now as the reference; counters stay. For the start of
        each watch phase: what happened while workers were stopped (a flap, a port that went
        down and came back) is the pre-join health check's business, not a failure of the
        new cycle. A port that was up at the last look and is down or gone now is the
        exception: it keeps its old reference, so the first sample reports it. It may have
        gone down after that check, during the join and the spawn (or with no check before
        this join at all), and the new cycle's workers would otherwise train over a dead
        link that the monitor had taken for normal.
        """
        current = self._read()
        lost = {
            key: old for key, old in self._last.items() if old.up and not (key in current and current[key].up)
        }
        self._last = {**current, **lost}
        for key in self._last:
            self.down_total.setdefault(key, 0)
        self._next = now + self._interval

    def sample(self, now: float) -> list[NicEvent]:
        """Events since the last sample; [] (and no sysfs read) before ``interval`` has passed."""
        if now < self._next:
            return []
        self._next = now + self._interval
        current = self._read()
        events = compare(self._last, current, now, self._fatal)
        for event in events:
            if event.change in (NicChange.DOWN, NicChange.FLAPPED, NicChange.GONE):
                self.down_total[event.port] = self.down_total.get(event.port, 0) + 1
        for key in current:
            self.down_total.setdefault(key, 0)
        self._last = current
        return events


def from_settings(health: HealthSettings, now: float) -> NicMonitor | None:
    """The monitor ``health.nic_monitor`` asks for, over the ports ``health.nics`` selects."""
    if not health.nic_monitor:
        return None
    return NicMonitor(
        health.sysfs_root,
        health.nics,
        interval=health.nic_monitor_interval,
        fatal=health.nic_monitor_fatal,
        now=now,
    )
