"""A launcher's watch over its own workers in a cycle: their signs of life, the quiet
stretch they reach, the ranks held through it, and the report the peers send node 0."""

from __future__ import annotations

import collections
import contextlib
import math
import mmap
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from slurm_ft import worker
from slurm_ft.launch.hang import learn, proc
from slurm_ft.launch.hang.arrivals import ArrivalClock
from slurm_ft.launch.hang.verdicts import Hang, Limits, judge_rank, rank_hang

# The signs of life kept for node 0's judge between two of its looks (a few at its pace;
# were more dropped, the oldest go first, which only lengthens a gap: a larger limit).
LIVES_KEPT = 32


# A sign of life: when it was seen, and when the gap that ended there began (None: at the
# sign before it; see :func:`learn.observe`).
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
        # finer sampling (:func:`learn.tick`), taken by the loop or by the peer
        # monitor's wakes (:meth:`sample`, :func:`learn.pace`).
        self.period = limits.period
        self._every = limits.period
        self._by_sampler = False
        self._bounds = False  # sampled gaps noted as their lower bounds (learn.coarse)
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
        self._held = HeldRanks()

    def begin(self, index: int, pids: Mapping[int, int], slot_paths: Mapping[int, str]) -> None:
        """Workers of cycle ``index`` started: ``pids`` and slot files by global rank."""
        now = self._clock()
        slots = _map_slots(slot_paths)
        with self._lock:
            self._index = index
            self._pids = dict(pids)
            self._slots = slots
            self._written = {rank: proc.bytes_written(pid) for rank, pid in pids.items()}
            self._last_write = self._started = self._noted = now
            self._still, self._write_since = -math.inf, None
            self._last_heard = -math.inf
            self._heard_since_sample = self._exact = False
            self.arrivals.restart()
            self._lives.clear()
            self._next_sample = now + self._every
            self._reported = (False, ())
            self._held.forget()

    def set_pace(self, pace: learn.Pace) -> None:
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
            self._held.forget()
        else:
            self._held.look(self._pids)

    def stopped_ranks(self) -> tuple[int, ...]:
        """The ranks held at every look since this node's workers fell quiet for the report
        threshold (stopped; or in uninterruptible sleep without a byte read since the look
        before: the first look cannot tell, the next ones do), as of the latest :meth:`quiet`."""
        with self._lock:
            return self._held.ranks()

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
                count = proc.bytes_written(pid)
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
        if sampled > self._noted + learn.SAME_LIFE_S:
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


class HeldRanks:
    """The ranks seen stopped or in uninterruptible sleep (HELD_STATES) at every look of
    the workers' current quiet stretch, from when it reached the peers' report threshold
    (None: not that quiet): read only then, one /proc read per rank a look. Its owner's
    lock guards it."""

    def __init__(self) -> None:
        self._held: set[int] | None = None
        self._read: dict[int, int | None] = {}  # a held rank's read bytes at the last look

    def forget(self) -> None:
        self._held, self._read = None, {}

    def look(self, pids: Mapping[int, int]) -> None:
        """One look: the first takes every rank stopped or in uninterruptible sleep, the
        next ones keep those still stopped, or still asleep without a byte read since."""
        held = set()
        candidates = pids.items() if self._held is None else ((r, pids[r]) for r in self._held)
        for rank, pid in candidates:
            state = proc.process_state(pid)
            if state in proc.STOPPED_STATES:
                held.add(rank)
            elif state == proc.UNINTERRUPTIBLE:
                read = proc.bytes_read(pid)
                if self._held is None or (read is not None and read == self._read.get(rank)):
                    held.add(rank)
                self._read[rank] = read
        self._held = held

    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self._held or ()))


def _map_slots(slot_paths: Mapping[int, str]) -> dict[int, mmap.mmap]:
    """The workers' shared-memory slots, by rank (one that cannot be mapped is left out)."""
    slots = {}
    for rank, path in slot_paths.items():
        try:
            with open(path, "r+b") as fh:
                slots[rank] = mmap.mmap(fh.fileno(), worker.SLOT_SIZE)
        except (OSError, ValueError):
            continue
    return slots


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
