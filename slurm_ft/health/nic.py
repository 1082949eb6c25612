"""NIC link state from sysfs: InfiniBand/RoCE ports and named Ethernet interfaces.

Everything is read below a configurable sysfs root so tests can point at a fixture tree
while the production path stays byte-for-byte the same. sysfs attributes of network
devices are answered by the driver from memory, so reading them in-process cannot hang
the way a network file system can.

Two modes. *absolute*: a selected port that is not up fails. *transition*: compare with a
snapshot taken when the launcher started, so a port that was already down on a node the
job was given (a spare rail, an unused port) only warns, while a port that went down or
flapped (``link_downed`` / ``carrier_down_count`` grew) during the job fails.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from slurm_ft.health.result import Result, Status

PortKind = Literal["rdma", "eth"]

_PATTERN_RE = re.compile(r"^[A-Za-z0-9_.:@*?\[\]!-]+$")


class PatternError(ValueError):
    """A ``--nics`` entry that is not a usable name or glob."""


@dataclass(frozen=True)
class PortState:
    """One RDMA port or Ethernet interface as sysfs showed it at one read."""

    key: str
    kind: PortKind
    up: bool
    state: str
    phys_state: str
    down_count: int | None
    link_layer: str | None = None

    def describe(self) -> str:
        if self.kind == "rdma":
            text = f"state {self.state}, phys_state {self.phys_state}"
            if self.link_layer:
                text += f", {self.link_layer}"
        else:
            text = f"operstate {self.state}, carrier {self.phys_state}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "up": self.up,
            "state": self.state,
            "phys_state": self.phys_state,
            "down_count": self.down_count,
            "link_layer": self.link_layer,
        }


@dataclass(frozen=True)
class Baseline:
    """NIC snapshot the launcher takes at start, for transition mode."""

    ports: Mapping[str, PortState] = field(default_factory=dict)
    taken_at: float = 0.0


def validate_pattern(pattern: str) -> None:
    """Reject entries fnmatch would silently take literally (unbalanced brackets, spaces)."""
    if not pattern or not _PATTERN_RE.match(pattern):
        raise PatternError(f"bad NIC name or glob {pattern!r}")
    depth = 0
    for ch in pattern:
        if ch == "[":
            if depth:
                raise PatternError(f"bad NIC name or glob {pattern!r}: nested '['")
            depth = 1
        elif ch == "]" and depth:
            depth = 0
        elif ch == "]":
            raise PatternError(f"bad NIC name or glob {pattern!r}: ']' without '['")
    if depth:
        raise PatternError(f"bad NIC name or glob {pattern!r}: '[' without ']'")


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError:
        return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def rdma_devices(sysfs_root: str) -> list[str]:
    return _listdir(Path(sysfs_root) / "class" / "infiniband")


def net_interfaces(sysfs_root: str) -> list[str]:
    return _listdir(Path(sysfs_root) / "class" / "net")


@dataclass(frozen=True)
class Selection:
    """What the ``nics`` patterns chose, and the patterns that matched nothing (a typo must not pass
    silently)."""

    rdma: tuple[str, ...]
    eth: tuple[str, ...]
    unmatched: tuple[str, ...]


def select(patterns: Sequence[str], rdma: Sequence[str], net: Sequence[str]) -> Selection:
    """All RDMA devices when no patterns; otherwise every device/interface a pattern matches."""
    if not patterns:
        return Selection(tuple(rdma), (), ())
    chosen_rdma: list[str] = []
    chosen_eth: list[str] = []
    unmatched: list[str] = []
    for pattern in patterns:
        hit_rdma = [d for d in rdma if fnmatch.fnmatchcase(d, pattern)]
        hit_eth = [n for n in net if fnmatch.fnmatchcase(n, pattern)]
        if not hit_rdma and not hit_eth:
            unmatched.append(pattern)
        chosen_rdma += [d for d in hit_rdma if d not in chosen_rdma]
        chosen_eth += [n for n in hit_eth if n not in chosen_eth]
    return Selection(tuple(chosen_rdma), tuple(chosen_eth), tuple(unmatched))


def _split_state(text: str | None) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; keeps unknown formats readable."""
    if text is None:
        return "unreadable"
    _, sep, word = text.partition(":")
    return word.strip() if sep else text


def read_rdma_ports(sysfs_root: str, device: str) -> list[PortState]:
    ports_dir = Path(sysfs_root) / "class" / "infiniband" / device / "ports"
    out = []
    for port in sorted(_listdir(ports_dir), key=lambda p: (len(p), p)):
        pdir = ports_dir / port
        state = _split_state(_read(pdir / "state"))
        phys = _split_state(_read(pdir / "phys_state"))
        out.append(
            PortState(
                key=f"{device}/{port}",
                kind="rdma",
                up=state == "ACTIVE" and phys == "LinkUp",
                state=state,
                phys_state=phys,
                down_count=_read_int(pdir / "counters" / "link_downed"),
                link_layer=_read(pdir / "link_layer"),
            )
        )
    return out


def read_eth(sysfs_root: str, interface: str) -> PortState:
    idir = Path(sysfs_root) / "class" / "net" / interface
    operstate = _read(idir / "operstate") or "unreadable"
    # 'carrier' answers EINVAL while the interface is administratively down.
    carrier = _read_int(idir / "carrier")
    up = operstate == "up" or (operstate == "unknown" and carrier == 1)
    return PortState(
        key=interface,
        kind="eth",
        up=up,
        state=operstate,
        phys_state="-" if carrier is None else str(carrier),
        down_count=_read_int(idir / "carrier_down_count"),
    )


@dataclass(frozen=True)
class Snapshot:
    """Every selected port at one moment; the check and the monitor compare snapshots."""

    ports: tuple[PortState, ...]
    unmatched: tuple[str, ...]
    no_rdma: bool


def snapshot(sysfs_root: str, patterns: Sequence[str]) -> Snapshot:
    rdma = rdma_devices(sysfs_root)
    net = net_interfaces(sysfs_root) if patterns else []
    sel = select(patterns, rdma, net)
    ports: list[PortState] = []
    for dev in sel.rdma:
        ports += read_rdma_ports(sysfs_root, dev)
    ports += [read_eth(sysfs_root, name) for name in sel.eth]
    return Snapshot(tuple(ports), sel.unmatched, no_rdma=not rdma)


def take_baseline(sysfs_root: str, patterns: Sequence[str]) -> Baseline:
    snap = snapshot(sysfs_root, patterns)
    return Baseline({p.key: p for p in snap.ports}, taken_at=time.time())


def judge_absolute(port: PortState) -> tuple[Status, str]:
    if port.up:
        return Status.PASS, f"up ({port.describe()})"
    return Status.FAIL, f"down ({port.describe()})"


def judge_transition(port: PortState, before: PortState | None) -> tuple[Status, str]:
    if before is None:
        status, detail = judge_absolute(port)
        return status, f"{detail}; not in baseline"
    grew = (
        before.down_count is not None and port.down_count is not None and port.down_count > before.down_count
    )
    if before.up and not port.up:
        return Status.FAIL, f"went down since start ({port.describe()})"
    if grew:
        counter = "link_downed" if port.kind == "rdma" else "carrier_down_count"
        return Status.FAIL, f"flapped: {counter} {before.down_count} -> {port.down_count} since start"
    if not before.up and not port.up:
        return Status.WARN, f"down since start ({port.describe()})"
    return Status.PASS, f"up ({port.describe()})"


def evaluate(
    snap: Snapshot,
    mode: str,
    baseline: Baseline | None,
    patterns: Sequence[str],
) -> list[Result]:
    """Pure policy: sysfs snapshot (+ baseline) -> one result per port or unmatched pattern."""
    results: list[Result] = []
    transition = mode == "transition" and baseline is not None
    for port in snap.ports:
        if transition:
            assert baseline is not None
            status, detail = judge_transition(port, baseline.ports.get(port.key))
        else:
            status, detail = judge_absolute(port)
        results.append(Result(f"nic:{port.key}", status, detail, 0.0, port.to_json()))
    if transition:
        assert baseline is not None
        seen = {p.key for p in snap.ports}
        for key, before in baseline.ports.items():
            if key not in seen:
                results.append(
                    Result(f"nic:{key}", Status.FAIL, "disappeared since start", 0.0, before.to_json())
                )
    for pattern in snap.unmatched:
        results.append(
            Result(
                f"nic:{pattern}",
                Status.FAIL,
                f"no RDMA device or network interface matches {pattern!r}",
                0.0,
                {},
            )
        )
    if not results:
        why = "no RDMA devices under class/infiniband" if snap.no_rdma and not patterns else "no NICs"
        results.append(Result("nic", Status.SKIP, why, 0.0, {}))
    if mode == "transition" and baseline is None:
        results = [
            Result(r.name, r.status, f"{r.detail}; no baseline, judged absolute", r.duration_s, r.data)
            if r.status is not Status.SKIP
            else r
            for r in results
        ]
    return results


def check(sysfs_root: str, patterns: Sequence[str], mode: str, baseline: Baseline | None) -> list[Result]:
    start = time.monotonic()
    results = evaluate(snapshot(sysfs_root, patterns), mode, baseline, patterns)
    took = time.monotonic() - start
    return [Result(r.name, r.status, r.detail, took, r.data) for r in results]
