"""When the drill injects what: schedule files and seeded plans, as pure functions.

A schedule file has one fault a line, ``AT FAULT [rank=R | node=N]``, ``AT`` in seconds
after the drill starts (``90``, ``1.5m``, ``90s``), ``#`` starting a comment::

    30   kill rank=1
    90   hang
    150  lose-node node=2

A seeded plan (``--every S --mix ... --seed K --duration D``) draws the gaps between
faults from an exponential distribution of mean S (faults arrive as a Poisson process,
as hardware failures do), the fault from the weighted mix and the rank or node uniformly.
It uses only ``random.Random.random``, whose sequence for a given seed does not change
between Python versions, so the same arguments give the same plan everywhere.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from slurm_ft.drill.faults import SPECS, Fault, FaultError, Target, parse

# Llama 3 405B's 419 unexpected interruptions (Dubey et al. 2024, table 5) mapped onto the
# faults the drill has: GPU faults of every kind (64 %) look to us like a rank that
# vanishes (kill); software bugs and dependencies (13 %) like a crash; network switches and
# cables plus NCCL watchdog timeouts (10 %) like a rank stuck in a collective (hang); host
# maintenance (8 %) like a preemption; host hardware (5 %) like a lost node.
LLAMA3_MIX: dict[Fault, float] = {
    Fault.KILL: 64.0,
    Fault.CRASH: 13.0,
    Fault.HANG: 10.0,
    Fault.PREEMPT: 8.0,
    Fault.LOSE_NODE: 5.0,
}


class ScheduleError(ValueError):
    """A schedule, mix or time that does not parse; the message names the place."""


@dataclass(frozen=True)
class Planned:
    """One fault of a plan: ``at`` seconds after the drill starts, aimed at a rank or node
    (None: the drill picks one, seeded, when it injects)."""

    at: float
    fault: Fault
    rank: int | None = None
    node: int | None = None

    def describe(self) -> str:
        where = f" rank={self.rank}" if self.rank is not None else ""
        where += f" node={self.node}" if self.node is not None else ""
        return f"{self.at:g} {self.fault.value}{where}"


def parse_seconds(text: str) -> float:
    """``90``, ``90s``, ``1.5m``, ``2h`` -> seconds (not negative, finite)."""
    raw = text.strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(raw[-1:])
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ScheduleError(f"not a time in seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ScheduleError(f"not a time in seconds: {text!r}")
    return value


def _target(fault: Fault, word: str) -> tuple[int | None, int | None]:
    key, sep, value = word.partition("=")
    if not sep or key not in ("rank", "node") or not value.isdigit():
        raise ScheduleError(f"expected rank=R or node=N, got {word!r}")
    wanted = SPECS[fault].target
    if (key == "rank" and wanted is not Target.RANK) or (key == "node" and wanted is Target.BATCH):
        raise ScheduleError(f"{fault.value} cannot be aimed with {key}=")
    return (int(value), None) if key == "rank" else (None, int(value))


def parse_schedule(text: str) -> list[Planned]:
    """The faults of a schedule file, in time order; ScheduleError names the bad line."""
    plan: list[Planned] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            if len(words) > 3:
                raise ScheduleError(f"too many words ({len(words)}; expected AT FAULT [rank=R|node=N])")
            if len(words) < 2:
                raise ScheduleError("expected AT FAULT [rank=R|node=N]")
            fault = parse(words[1])
            rank, node = _target(fault, words[2]) if len(words) == 3 else (None, None)
            plan.append(Planned(parse_seconds(words[0]), fault, rank, node))
        except (ScheduleError, FaultError) as exc:
            raise ScheduleError(f"line {number}: {exc}") from None
    if not plan:
        raise ScheduleError("no faults in the schedule")
    return sorted(plan, key=lambda p: p.at)


def parse_mix(text: str) -> dict[Fault, float]:
    """``kill=3,hang=1`` -> weights; ``llama3`` -> :data:`LLAMA3_MIX`."""
    if text.strip() == "llama3":
        return dict(LLAMA3_MIX)
    mix: dict[Fault, float] = {}
    for item in text.split(","):
        name, sep, weight = item.strip().partition("=")
        try:
            fault = parse(name.strip())
        except FaultError as exc:
            raise ScheduleError(f"mix: {exc}") from None
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ScheduleError(f"mix: weight of {name} is not a number: {weight!r}") from None
        if not math.isfinite(value) or value < 0:
            raise ScheduleError(f"mix: weight of {name} must be 0 or more, got {weight!r}")
        mix[fault] = mix.get(fault, 0.0) + value
    if sum(mix.values()) <= 0:
        raise ScheduleError("mix: no fault has a weight above 0")
    return mix


def _pick(weights: list[tuple[Fault, float]], u: float) -> Fault:
    total = sum(w for _, w in weights)
    edge = 0.0
    for fault, weight in weights:
        edge += weight / total
        if u < edge:
            return fault
    return next(f for f, w in reversed(weights) if w > 0)


def seeded(
    every: float, mix: dict[Fault, float], seed: int, duration: float, world_size: int, num_nodes: int
) -> list[Planned]:
    """The plan for ``seed``: faults at exponential gaps of mean ``every`` within
    ``duration`` seconds, each aimed at a uniformly drawn rank or node rank."""
    if every <= 0:
        raise ScheduleError("--every must be above 0 seconds")
    if world_size < 1 or num_nodes < 1:
        raise ScheduleError("the job has no ranks or nodes to aim at")
    rng = random.Random(seed)
    weights = sorted(mix.items(), key=lambda kv: kv[0].value)  # the order never depends on input order
    plan: list[Planned] = []
    at = 0.0
    while True:
        at += -math.log(1.0 - rng.random()) * every
        if at >= duration:
            return plan
        fault = _pick(weights, rng.random())
        u = rng.random()
        target = SPECS[fault].target
        rank = min(world_size - 1, int(u * world_size)) if target is Target.RANK else None
        node = min(num_nodes - 1, int(u * num_nodes)) if target is Target.NODE else None
        plan.append(Planned(round(at, 3), fault, rank, node))


def parse_at(text: str, now: float, today_midnight: float) -> float:
    """``--at``: seconds from now (``30``, ``+30``, ``2m``) or a clock time today
    (``HH:MM`` or ``HH:MM:SS``, local time) -> the wall-clock time to inject at."""
    raw = text.strip()
    if ":" in raw:
        parts = raw.split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
            raise ScheduleError(f"--at: not HH:MM[:SS]: {text!r}")
        h, m, s = (int(p) for p in (*parts, "0")[:3])
        if h > 23 or m > 59 or s > 59:
            raise ScheduleError(f"--at: not a time of day: {text!r}")
        when = today_midnight + h * 3600 + m * 60 + s
        if when < now - 1:
            raise ScheduleError(f"--at: {text} has passed")
        return max(when, now)
    return now + parse_seconds(raw.removeprefix("+"))
