"""Hang detection: what counts as a hang (pure judgements) and the readings they judge.

Three families, each off when its timeout is 0 (settings ``hang.*``):

* **silence** — no worker of the whole job wrote anything for ``hang.timeout`` seconds.
  Each launcher measures its own workers (the output its log pipeline reads, timed as it
  arrives; the bytes they write, from ``/proc/<pid>/io``: output it does not capture and
  any file they write), peers report "quiet for S seconds" with their
  heart-beat, and the coordinator judges the job as a whole: one rank that never prints
  is not a hang while others do. A rank held in the kernel (stopped, uninterruptible)
  through the silence is no start-up: the warm-up does not apply (:data:`HELD_STATES`).
* **iteration** — the checkpoint iteration did not advance for ``hang.iteration_timeout``.
* **rank** (opt-in, :mod:`slurm_ft.worker`) — a rank's heart-beats or sections, judged
  by its own launcher from the worker's shared-memory slot, with ft_launcher's meaning.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from slurm_ft import worker
from slurm_ft.config import HangSettings
from slurm_ft.launch import hanglearn
from slurm_ft.launch.arrivals import ArrivalClock
from slurm_ft.launch.workers.env import STACK_SIGNAL
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
    learn_silence: hanglearn.Policy = hanglearn.OFF
    learn_iteration: hanglearn.Policy = hanglearn.OFF

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
            learn_silence=hanglearn.Policy(factor, floor, hang.timeout, warmup, fixed.period),
            learn_iteration=hanglearn.Policy(factor, floor, iteration_cap, warmup),
        )

    @property
    def silence_report_after(self) -> float:
        """The quiet at which a peer tells node 0 (see :attr:`hanglearn.Policy.report_after`)."""
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


# ----------------------------------------------------------------------- readings


def bytes_written(pid: int) -> int | None:
    """``wchar`` of /proc/<pid>/io: every byte the process passed to write(2), or None."""
    return _io_count(pid, b"wchar:")


def bytes_read(pid: int) -> int | None:
    """``rchar`` of /proc/<pid>/io: every byte read(2) returned to the process, or None."""
    return _io_count(pid, b"rchar:")


def _io_count(pid: int, field: bytes) -> int | None:
    try:
        with open(f"/proc/{pid}/io", "rb") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


STOPPED_STATES = ("T", "t")  # /proc/<pid>/stat: stopped by a signal, stopped by a tracer
# A rank in these states is not compiling, loading or evaluating: stopped, or asleep in the
# kernel where no signal reaches it (a dead mount, a wedged driver) and reading nothing: a
# checkpoint load from a slow file system sleeps in D too, but its read bytes move. Seen in
# one at every look of a silence, the warm-up does not apply (:func:`hanglearn.stopped_limit`).
# A rank in a collective spins (R) or sleeps interruptibly (S): never taken for held.
UNINTERRUPTIBLE = "D"
HELD_STATES = (*STOPPED_STATES, UNINTERRUPTIBLE)


def process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (after the command's closing parenthesis), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 1 :].split()
    return fields[0].decode(errors="replace") if fields else None


# The signs of life kept for node 0's judge between two of its looks (a few at its pace;
# were more dropped, the oldest go first, which only lengthens a gap: a larger limit).
LIVES_KEPT = 32


# A sign of life: when it was seen, and when the gap that ended there began (None: at the
# sign before it; see :func:`hanglearn.observe`).
Life = tuple[float, float | None]


class NodeWatch:
    """This launcher's view of its workers in the current cycle: when they last wrote,
    and what their slots say (read by the main loop and, on node 0, sampled by the peer
    monitor's thread: hence the lock). Output the log pipeline reads is timed exactly as
    it arrives (:attr:`arrivals`, fed by its reader threads); the workers' byte counts are
    sampled for the rest (output it does not capture, files they write)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        # How often the watch loop wakes (:attr:`period`) and how often the workers' bytes
        # are sampled: both the fixed timeouts' period; on node 0 while it learns a rhythm,
        # finer sampling (:func:`hanglearn.tick`), taken by the loop or by the peer
        # monitor's wakes (:meth:`sample`, :func:`hanglearn.pace`).
        self.period = limits.period
        self._every = limits.period
        self._by_sampler = False
        self._bounds = False  # sampled gaps noted as their lower bounds (hanglearn.coarse)
        self._sampled = -math.inf  # when the sampler last called
        self._lock = threading.Lock()
        self._index: int | None = None
        self._pids: dict[int, int] = {}
        self._slots: dict[int, mmap.mmap] = {}
        self._written: dict[int, int | None] = {}
        self._last_write = 0.0
        self._still = -math.inf  # the latest sample since _last_write that saw no byte move
        self._write_since: float | None = None  # the gap before _last_write began (bounds)
        self.arrivals = ArrivalClock(clock)
        self._last_heard = -math.inf
        self._heard_since_sample = False
        self._exact = False
        self._noted = 0.0
        self._lives: collections.deque[Life] = collections.deque(maxlen=LIVES_KEPT)
        self._next_sample = 0.0
        self._started = 0.0
        self._reported: tuple[bool, tuple[int, ...]] = (False, ())
        # The ranks seen stopped or in uninterruptible sleep (HELD_STATES) at every look of
        # the workers' current quiet stretch, from when it reached the peers' report
        # threshold (None: not that quiet): read only then, one /proc read per rank a look.
        self._held: set[int] | None = None
        self._read: dict[int, int | None] = {}  # a held rank's read bytes at the last look

    def begin(self, index: int, pids: Mapping[int, int], slot_paths: Mapping[int, str]) -> None:
        """Workers of cycle ``index`` started: ``pids`` and slot files by global rank."""
        now = self._clock()
        slots = {}
        for rank, path in slot_paths.items():
            try:
                with open(path, "r+b") as fh:
                    slots[rank] = mmap.mmap(fh.fileno(), worker.SLOT_SIZE)
            except (OSError, ValueError):
                continue
        with self._lock:
            self._index = index
            self._pids = dict(pids)
            self._slots = slots
            self._written = {rank: bytes_written(pid) for rank, pid in pids.items()}
            self._last_write = self._started = self._noted = now
            self._still, self._write_since = -math.inf, None
            self._last_heard = -math.inf
            self._heard_since_sample = self._exact = False
            self.arrivals.restart()
            self._lives.clear()
            self._next_sample = now + self._every
            self._reported = (False, ())
            self._held = None
            self._read = {}

    def set_pace(self, pace: hanglearn.Pace) -> None:
        """Node 0's judge, learning: how often the loop wakes and the workers are sampled,
        and by whom (:meth:`sample` when ``by_sampler``). A shorter sampling period starts
        now, not after the longer look that was due: its first sample is due a quarter
        period early, so that one of the peer monitor's calls (a second apart, never early)
        takes it within a quarter period of the new pace."""
        with self._lock:
            if pace.sample < self._every:
                due = self._clock() + pace.sample * 0.75
                self._next_sample = min(self._next_sample, due)
            self._every = pace.sample
            self._by_sampler = pace.by_sampler
            self._bounds = pace.bounds
            self.period = pace.look

    def sample(self) -> None:
        """The peer monitor's look (node 0, at each of its wakes): the workers are sampled
        here while the judge leaves it to this thread, so the loop need not wake for it."""
        now = self._clock()
        with self._lock:
            self._sampled = now
            if self._by_sampler and self._index is not None:
                self._look(now, 0.0)

    def sampler_age(self) -> float:
        """Seconds since :meth:`sample` was last called (infinite: never): a sampler that
        stopped calling (its store call blocked) is not relied on."""
        with self._lock:
            return self._clock() - self._sampled

    def lives(self) -> list[Life]:
        """The signs of life noted since the last call, oldest first: node 0's judge learns
        the gaps between them, not only the time since the latest."""
        with self._lock:
            noted = list(self._lives)
            self._lives.clear()
        return noted

    def exact(self) -> bool:
        """Whether the latest signs of life were timed as they arrived (the log pipeline
        read them): their gaps need no fine sampling."""
        with self._lock:
            return self._exact

    def end(self) -> None:
        with self._lock:
            self._index = None
            slots, self._slots = self._slots, {}
        for view in slots.values():
            view.close()

    @contextlib.contextmanager
    def watching(self, index: int, pids: Mapping[int, int], slot_paths: Mapping[int, str]) -> Iterator[None]:
        """:meth:`begin`, and :meth:`end` however the watch ends."""
        self.begin(index, pids, slot_paths)
        try:
            yield
        finally:
            self.end()

    def quiet(self) -> float:
        """Seconds since any worker of this node last showed life: wrote a byte (sampled
        every :attr:`Limits.period`, finer on node 0 while it learns), heart-beat, or
        entered or left a section."""
        now = self._clock()
        with self._lock:
            # While the peer monitor takes the samples the loop only reads them (see _look).
            early = -math.inf if self._by_sampler else self._every / 2
            quiet = max(0.0, now - self._look(now, early))
            self._hold(quiet)
            return quiet

    def _hold(self, quiet: float) -> None:
        """Note which ranks are held (stopped, uninterruptible) at this look of a quiet
        stretch long enough to matter. Under the lock."""
        if not self.limits.learn_silence.learning or quiet < self.limits.silence_report_after:
            self._held, self._read = None, {}
            return
        held = set()
        candidates = self._pids.items() if self._held is None else ((r, self._pids[r]) for r in self._held)
        for rank, pid in candidates:
            state = process_state(pid)
            if state in STOPPED_STATES:
                held.add(rank)
            elif state == UNINTERRUPTIBLE:
                read = bytes_read(pid)
                if self._held is None or (read is not None and read == self._read.get(rank)):
                    held.add(rank)
                self._read[rank] = read
        self._held = held

    def stopped_ranks(self) -> tuple[int, ...]:
        """The ranks held at every look since this node's workers fell quiet for the report
        threshold (stopped; or in uninterruptible sleep without a byte read since the look
        before: the first look cannot tell, the next ones do), as of the latest :meth:`quiet`."""
        with self._lock:
            return tuple(sorted(self._held or ()))

    def _look(self, now: float, early: float) -> float:
        """The latest sign of life, the workers' bytes sampled when due (or up to ``early``
        s before); new ones are noted for :meth:`lives`. Under the lock."""
        # The loop looks once a period, give or take a millisecond: with the next look due
        # a full period after this one, a look a hair early was skipped and the sample
        # lagged a whole period (hang latency 0.24 s or 0.43 s by chance); so the loop may
        # take a sample half a period early. The peer monitor, called at least a second
        # apart, takes it alone and never early: its samples keep a steady pace (every
        # second call), on which a 10 s trainer's gaps read 10.0 s. With samples of the
        # loop's in between (its wakes timed by the sign of life they wait for) a line
        # written a moment before such a wake was missed and the gap read 12 s.
        heard = self.arrivals.take()
        if heard is not None:
            self._heard_since_sample = True
            self._last_heard = heard.last
        if now >= self._next_sample - early:
            self._next_sample = now + self._every
            moved = False
            for rank, pid in self._pids.items():
                count = bytes_written(pid)
                if count is not None and count != self._written.get(rank):
                    self._written[rank] = count
                    moved = True
            # Bytes that moved while the pipes carried output are taken for that output
            # (timed exactly, not at this sample); a file written beside it goes unseen for
            # at most one sample period.
            if moved and not self._heard_since_sample:
                # Coarse samples prove only the time between the sample that saw the last
                # bytes and the last one that saw none since: the gap's least length.
                least = max(0.0, self._still - self._last_write)
                self._write_since = now - least if self._bounds else None
                self._last_write = now
                self._still = -math.inf
            elif not moved:
                self._still = now
            self._heard_since_sample = False
        sampled = self._last_write
        for view in self._slots.values():
            slot = worker.read_slot(view)
            if slot is not None:
                sampled = max(sampled, slot.heartbeat, slot.section_start, slot.section_end)
        if heard is not None:
            self._exact = True
            if heard.gap > 0:
                self._lives.append((heard.gap_began + heard.gap, heard.gap_began))
            if heard.last > self._noted:
                self._noted = heard.last
                self._lives.append((heard.last, heard.last))
        if sampled > self._noted + hanglearn.SAME_LIFE_S:
            self._noted = sampled
            self._lives.append((sampled, self._write_since if sampled == self._last_write else None))
            if heard is None:  # a sign the pipes did not carry: its gaps need sampling
                self._exact = False
        return max(sampled, self._last_heard)

    def silence_report(self) -> str | None:
        """A change worth telling node 0: "<cycle>:<quiet s>" when this node's workers just
        reached the silence timeout, with ":<rank>,..." when some of them are held
        (:meth:`stopped_ranks`), "<cycle>:0" when they spoke again; else None. Only
        transitions travel, so a busy job costs the store nothing."""
        if self._index is None or not self.limits.silence:
            return None
        quiet = self.quiet()
        silent = quiet >= self.limits.silence_report_after
        state = (silent, self.stopped_ranks() if silent else ())
        if state == self._reported:
            return None
        self._reported = state
        if not silent:
            return f"{self._index}:0"
        held = f":{','.join(map(str, state[1]))}" if state[1] else ""
        return f"{self._index}:{quiet:.3f}{held}"

    def rank_hang(self) -> Hang | None:
        if not self.limits.per_rank:
            return None
        now = self._clock()
        verdicts = {}
        with self._lock:
            for rank, view in self._slots.items():
                slot = worker.read_slot(view)
                if slot is None:
                    continue
                verdict = judge_rank(slot, now, self._started, self.limits)
                if verdict is not None:
                    verdicts[rank] = verdict
        return rank_hang(verdicts)


def parse_report(raw: str, index: int) -> float | None:
    """A peer's reported quiet seconds for cycle ``index`` (0: it spoke again); None for
    another cycle or no report yet."""
    cycle, sep, rest = raw.partition(":")
    if not sep or cycle != str(index):
        return None
    try:
        quiet = float(rest.partition(":")[0])
    except ValueError:
        return None
    return quiet if math.isfinite(quiet) and quiet >= 0 else None


def reported_held(raw: str, index: int) -> tuple[int, ...]:
    """The ranks a peer's report for cycle ``index`` says were held at every look of its
    silence (:meth:`NodeWatch.stopped_ranks`); () for none, or for anything malformed."""
    if parse_report(raw, index) is None:
        return ()
    ranks = raw.split(":", 2)[2:]
    if not ranks:
        return ()
    try:
        held = tuple(int(r) for r in ranks[0].split(","))
    except ValueError:
        return ()
    return held if all(r >= 0 for r in held) else ()


class IterationWatch(threading.Thread):
    """Node 0: looks at the progress source (``--progress-source`` or the iteration file)
    every few seconds on its own thread (a dead mount stalls this thread, never the
    launcher) and remembers when it last moved."""

    def __init__(
        self,
        read: Callable[[], tuple[int, str | None] | None],
        period: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[int, str | None], None] | None = None,
    ) -> None:
        super().__init__(name="slurm-ft-iteration-watch", daemon=True)
        self._read = read
        self._on_change = on_change  # the report's timed readings (``records.ProgressReading``)
        self._period = period
        self._clock = clock
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._value: tuple[int, str | None] | None = None
        self._changed = clock()
        # The cycle's first progress: a step past the first one read in the cycle (the step
        # it resumed from; a checkpoint the last cycle left just before its end may be read
        # only now, so the first reading sets the mark and never counts; nor does a source
        # that could not be read: a resumed step read after it is no progress).
        self._resumed_at: int | None = None
        self._progressed: float | None = None

    def restart(self) -> None:
        """A new cycle: the stall clock starts again, and its first progress is still to come."""
        with self._lock:
            self._changed = self._clock()
            self._resumed_at = None
            self._progressed = None

    def run(self) -> None:
        while not self._stop_event.is_set():
            value = self._read()
            moved = False
            with self._lock:
                if value is not None and value != self._value:
                    self._value = value
                    self._changed = self._clock()
                    moved = True
                if value is not None:  # None: not there yet, or unreadable: no mark to go past
                    if self._resumed_at is None:
                        self._resumed_at = value[0]
                    elif self._progressed is None and value[0] > self._resumed_at:
                        self._progressed = self._clock()
            if moved and value is not None and self._on_change is not None:
                self._on_change(*value)
            self._stop_event.wait(self._period)

    def progressed(self) -> float | None:
        """When the cycle first went past the step it resumed from (None: not yet)."""
        with self._lock:
            return self._progressed

    def still(self) -> float:
        """Seconds since the source last moved (or since the cycle began)."""
        with self._lock:
            return max(0.0, self._clock() - self._changed)

    def stalled(self, timeout: float, basis: str | None = None) -> Hang | None:
        with self._lock:
            still = self._clock() - self._changed
            value = self._value
        if still <= timeout:
            return None
        at = f"at {value[0]}" if value is not None else "never read"
        why = basis or f"hang.iteration_timeout {timeout:g}s"
        detail = f"checkpoint iteration {at} for {still:.1f}s ({why})"
        return Hang(Detector.ITERATION, (), still, detail)

    def stop(self) -> None:
        self._stop_event.set()


# ----------------------------------------------------------------------- evidence


def collect_stacks(
    files: Mapping[int, tuple[int, str]], timeout: float, clock: Callable[[], float] = time.monotonic
) -> dict[int, str]:
    """Ask each worker (rank -> (pid, stack file)) for its stacks and read what they wrote
    within ``timeout``; a worker that cannot answer (not Python, stuck in C with the
    GIL... faulthandler still answers then) is simply missing from the result. A worker
    that is stopped (state T: SIGSTOPped or traced) cannot answer at all: it is not asked
    and not waited for, and its entry says so instead of a stack."""
    stopped = {rank: pid for rank, (pid, _) in files.items() if process_state(pid) in STOPPED_STATES}
    asked = {rank: entry for rank, entry in files.items() if rank not in stopped}
    for pid, _ in asked.values():
        try:
            os.kill(pid, STACK_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = clock() + timeout
    sizes: dict[int, int] = {}
    stable: dict[int, int] = {}
    while asked:
        for rank, (_, path) in asked.items():
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            stable[rank] = stable.get(rank, 0) + 1 if size and size == sizes.get(rank) else 0
            sizes[rank] = size
        if all(stable.get(rank, 0) >= 2 for rank in asked) or clock() >= deadline:
            break
        time.sleep(0.02)
    out = {
        rank: f"pid {pid} is stopped (process state T: SIGSTOPped or traced); it cannot answer, no stacks\n"
        for rank, pid in stopped.items()
    }
    for rank, (_, path) in asked.items():
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if text:
            out[rank] = text
    return out
