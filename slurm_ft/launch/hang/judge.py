"""Node 0's verdicts on the job as a whole while a cycle runs: a lost launcher (the lowest
node rank first), a silent job, a stalled checkpoint iteration. The member asks at every
watch tick; the facts come from the background threads, the peers' silence reports and
this node's own workers."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from slurm_ft import progress, records
from slurm_ft.launch import hang, spares
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.hang import learn
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.progress import sources
from slurm_ft.records import Failure, FailureKind, node_name
from slurm_ft.settingsyntax import SourceSpec

# How often node 0 looks at the progress source for the report's timed readings (and the
# iteration timeout, when one is set, at least this often): the start-up and lost-work
# stretches of a cycle are known to about this much.
READINGS_PERIOD_S = 0.5
# A source off local disks is looked at by a bounded child (``progress.reading``): a thread
# of the launcher asleep in the kernel on a dead mount would keep the process from ending.
READINGS_PERIOD_REMOTE_S = 2.0
READINGS_LOOK_TIMEOUT_S = 5.0


class JobJudge:
    def __init__(
        self,
        cfg: AgentConfig,
        client: Client,
        threads: BackgroundSet,
        hangs: hang.NodeWatch,
        events: EventLog,
        book: spares.SpareBook | None,
        clock: Callable[[], float] = time.time,
        add_line: Callable[[Path, bytes], None] | None = None,
        history: tuple[float, float] = (0.0, 0.0),
        ticks: Callable[[], float] = time.monotonic,
        startup: float = 0.0,
    ) -> None:
        """``add_line``: how a line is appended to the state dir (the launcher's is bounded
        in time: a state dir on a dead mount must not keep a thread, and so the process).
        ``history``: the job's longest silence and iteration gaps so far (the ledger's),
        for the learned timeouts; ``ticks`` is their clock (the watch's). ``startup``: the
        job's known start-up (the ledger's; 0: unknown), which ends a cycle's warm-up."""
        self.cfg = cfg
        self.client = client
        self.threads = threads
        self.hangs = hangs
        self.ev = events
        self.book = book
        self.clock = clock
        self.lost_spares: set[int] = set()  # spares whose loss was already logged
        self.iterations: hang.IterationWatch | None = None
        spec = progress.configured_source(cfg.settings.progress)
        self.ticks = ticks
        self.learn_silence = hangs.limits.learn_silence
        self.learn_iteration = hang.Limits.from_settings(cfg.settings.hang, spec is not None).learn_iteration
        self.history = history
        self.silence_rhythm = learn.begin(ticks(), history[0], startup)
        self.said_warm = False  # the launcher log said that the known start-up ended the warm-up
        self.iteration_rhythm = learn.begin(ticks(), history[1])
        self.said: dict[str, float | None] = {"silence": None, "iteration": None}
        self.peers = PeerQuiet()
        self.fresh = True  # no look yet in this cycle
        # The peer monitor wakes every second anyway: it samples this node's workers while
        # the learning wants finer samples than the loop's fixed period (None: one node).
        self.sampler = threads.sample_with(hangs.sample)
        if spec is not None:  # for the iteration timeout, and for the report's timed readings
            self.iterations = _iteration_watch(spec, hangs.limits.period, cfg, clock, add_line)
            self.iterations.start()

    def new_cycle(self, startup: float = 0.0) -> None:
        """A cycle's workers start: its warm-up begins (until ``--hang-initial-timeout``, its
        first progress, or the end of the job's known ``startup``, the ledger's); the gaps
        learned so far are kept."""
        if self.iterations is not None:
            self.iterations.restart()
        now = self.ticks()
        self.silence_rhythm = learn.begin(now, self.silence_rhythm.longest, startup)
        self.said_warm = False
        self.iteration_rhythm = learn.begin(now, self.iteration_rhythm.longest)
        self.peers.forget()
        self.fresh = True

    def learned_startup(self) -> float | None:
        """This cycle's start-up as far as it is known (:func:`learn.startup_seen`), for
        the ledger at the cycle's end."""
        return learn.startup_seen(self.learn_silence, self.silence_rhythm, self.ticks())

    def learned_gaps(self) -> tuple[float | None, float | None]:
        """This cycle's longest silence and iteration gaps (None: none learned), for the ledger."""
        return (self.silence_rhythm.cycle_longest or None, self.iteration_rhythm.cycle_longest or None)

    def judge(self, i: int, names: tuple[str, ...]) -> Failure | None:
        """The cycle's failure, or None. A spare that stops is only recorded: the training
        does not depend on it."""
        found = self._hang(i)
        if found is not None:
            job = self.cfg.job
            return hang.failure_of(found, job.node_name, job.node_rank, self.clock())
        lost = self.threads.lost_peers()
        if self.book is not None:
            active = set(self.book.active)
            for k in sorted(set(lost) - active - self.lost_spares):
                self.lost_spares.add(k)
                self.ev.event(f"spare {node_name(names, k)} lost (silent for {lost[k]:.1f}s)")
            lost = {k: v for k, v in lost.items() if k in active}
        if not lost:
            return None
        node = min(lost)
        return Failure(
            kind=FailureKind.LOST_NODE,
            node=node_name(names, node),
            node_rank=node,
            time=self.clock(),
            detail=f"launcher silent for {lost[node]:.1f}s (heartbeat lost)",
        )

    def _hang(self, i: int) -> hang.Hang | None:
        limits = self.hangs.limits
        # With spares only the active launchers run workers; node 0 may be a spare itself.
        active = self.book.active if self.book is not None else range(self.cfg.num_nodes)
        host = self.cfg.store_host
        node0_runs = host in active
        now = self.ticks()
        own = self.hangs.quiet() if limits.silence and node0_runs else 0.0
        lives = self.hangs.lives() if limits.silence and node0_runs else []
        policy = self.learn_silence
        if self.fresh:  # the cycle's first look: its watch began ``own`` ago
            self.fresh = False
            known = self.silence_rhythm.known_startup
            self.silence_rhythm = learn.begin(now - own, self.silence_rhythm.longest, known)
        self._note_progress()
        self._note_warm(now)
        rhythm = self.silence_rhythm
        learning = policy.learning and now >= learn.warm_until(policy, rhythm)
        # The peers matter only once node 0's own workers were quiet long enough for a gap
        # to count, or for a held rank to matter (the job's gaps are those of all its nodes
        # together; while node 0's workers write, the job's quiet is at most theirs): one
        # store read a tick then.
        peers: list[int] = []
        reports: list[str] = []
        if limits.silence and (
            own >= limits.silence or not node0_runs or (policy.learning and own >= policy.report_after)
        ):
            peers = [k for k in active if k != host]
            reports = self.client.silences(peers) if peers else []
            mine = [own] if node0_runs else []
            floor = policy.report_after if policy.learning else 0.0
            theirs = [self.peers.quiet(k, r, i, now, floor) for k, r in zip(peers, reports, strict=True)]
            quiet = [*mine, *theirs]
        else:
            quiet = []
        if policy.learning and (quiet or node0_runs):
            for life, since in lives:  # this node's signs of life since the last look, in order
                rhythm = learn.observe(policy, rhythm, life, since)
            self.silence_rhythm = learn.observe(policy, rhythm, now - min(quiet or [own]))
            self._say("silence", policy, self.silence_rhythm, now, "hang.timeout")
            if node0_runs:
                self._pace(now, own, learning)
        if quiet:
            timeout = learn.limit(policy, self.silence_rhythm, now)
            basis = learn.basis(policy, self.silence_rhythm, now, "hang.timeout")
            silent = hang.judge_silence(quiet, timeout, basis)
            if silent is not None:
                self.silence_rhythm = learn.judged(policy, self.silence_rhythm, min(quiet))
                return silent
            own_held = self.hangs.stopped_ranks() if node0_runs else ()
            held = [*own_held, *(r for raw in reports for r in hang.reported_held(raw, i))]
            silent = self._held_hang(quiet, held, timeout)
            if silent is not None:
                return silent
        if self.iterations is None:
            return None
        ipolicy = self.learn_iteration
        if ipolicy.learning:
            self.iteration_rhythm = learn.observe(
                ipolicy, self.iteration_rhythm, now - self.iterations.still()
            )
            self._say("iteration", ipolicy, self.iteration_rhythm, now, "hang.iteration_timeout")
        timeout = learn.limit(ipolicy, self.iteration_rhythm, now)
        if timeout and timeout != math.inf:
            basis = learn.basis(ipolicy, self.iteration_rhythm, now, "hang.iteration_timeout")
            stalled = self.iterations.stalled(timeout, basis)
            if stalled is not None:
                still = self.iterations.still()
                self.iteration_rhythm = learn.judged(ipolicy, self.iteration_rhythm, still)
            return stalled
        return None

    def _held_hang(self, quiet: list[float], held: list[int], timeout: float) -> hang.Hang | None:
        """The stopped-rank rule: the job silent for :func:`learn.stopped_limit` while
        a rank sat stopped or in uninterruptible sleep at every look of it (no start-up
        looks like that), where that limit lies below the one in force (the warm-up's)."""
        if not held:
            return None
        policy = self.learn_silence
        limit = learn.stopped_limit(policy, self.silence_rhythm)
        if not limit or limit >= timeout:
            return None
        found = hang.judge_silence(quiet, limit, learn.stopped_basis(policy, self.silence_rhythm, held))
        if found is None:
            return None
        self.silence_rhythm = learn.judged_stopped(self.silence_rhythm)
        return dataclasses.replace(found, ranks=tuple(sorted(set(held))))

    def _note_progress(self) -> None:
        """The cycle's first progress ends its warm-up (:func:`learn.progressed`); the
        launcher log says when, since the learned limits apply from there."""
        first = self.iterations.progressed() if self.iterations is not None else None
        if first is None or first >= self.silence_rhythm.progressed:
            return
        before = learn.warm_until(self.learn_silence, self.silence_rhythm)
        moved = learn.progressed(self.silence_rhythm, first)
        if moved == self.silence_rhythm:  # before this cycle's watch began
            return
        self.silence_rhythm = moved
        self.iteration_rhythm = learn.progressed(self.iteration_rhythm, first)
        if first < before and (self.learn_silence.learning or self.learn_iteration.learning):
            took = first - self.silence_rhythm.started
            self.ev.event(f"warm-up over: the cycle's first progress came after {took:.1f}s")

    def _pace(self, now: float, own: float, learning: bool) -> None:
        """How often this node's workers are sampled and the loop wakes, while it learns
        (``learning``: past the warm-up)."""
        policy, base = self.learn_silence, self.hangs.limits.period
        every = learn.tick(policy, self.silence_rhythm, now, base)
        sampler = self.sampler
        if sampler is not None and self.hangs.sampler_age() > 2 * sampler:
            sampler = None  # its store call is blocked: the loop samples again
        due = _iteration_due(self.iterations, self.learn_iteration, self.iteration_rhythm, now)
        exact = learning and self.hangs.exact()
        until_limit = None
        if not exact and learn.coarse(policy, self.silence_rhythm, now, base):
            until_limit = learn.limit(policy, self.silence_rhythm, now) - own
        self.hangs.set_pace(learn.pace(policy, every, base, own, sampler, due, exact, until_limit))

    def _note_warm(self, now: float) -> None:
        """The launcher log says when the job's known start-up ended the warm-up (the
        learned limits apply from there)."""
        policy, rhythm = self.learn_silence, self.silence_rhythm
        if self.said_warm or not learn.ended_by_startup(policy, rhythm):
            return
        if now >= learn.warm_until(policy, rhythm):
            self.said_warm = True
            self.ev.event(f"warm-up over: {learn.startup_basis(policy, rhythm)}")

    def _say(self, what: str, policy: learn.Policy, rhythm: learn.Rhythm, now: float, name: str) -> None:
        """The launcher log says a learned limit when it is first learned and when it moves."""
        if rhythm.longest <= 0 or now < learn.warm_until(policy, rhythm):
            return
        value = learn.limit(policy, rhythm, now)
        if learn.worth_saying(self.said[what], value):
            self.said[what] = value
            self.ev.event(f"{what} hang timeout: {learn.basis(policy, rhythm, now, name)}")

    def stop(self) -> None:
        if self.iterations is not None:
            self.iterations.stop()


class PeerQuiet:
    """The peers' quiet as node 0 reads their reports: a report says only a transition
    (silent since, or speaking again), so each one is kept with when it was first read."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[str, float]] = {}  # a peer's report, when first read

    def forget(self) -> None:
        self._seen.clear()

    def quiet(self, k: int, raw: str, i: int, now: float, floor: float) -> float:
        """Peer ``k``'s quiet now: what it reported when it fell silent, plus the time since
        node 0 first read that report. ``floor``: the quiet of a peer not silent (the
        report threshold while learning: taking the earliest its last sign of life can be
        only lengthens gaps, a larger limit and never a false alarm)."""
        value = hang.parse_report(raw, i) or 0.0
        if not value:
            if self._seen.pop(k, None) is not None:
                return 0.0  # it spoke since the last look
            return floor
        seen = self._seen.get(k)
        if seen is None or seen[0] != raw:
            self._seen[k] = seen = (raw, now)
        return value + (now - seen[1])


def _iteration_watch(
    spec: SourceSpec,
    period: float,
    cfg: AgentConfig,
    clock: Callable[[], float],
    add_line: Callable[[Path, bytes], None] | None,
) -> hang.IterationWatch:
    """The progress source's watch: read directly on a local disk, by an abandonable child
    off it; every change is kept as a timed reading for the report."""
    from slurm_ft.health.storage import off_local_disk

    local = not off_local_disk(spec.path)
    period = min(period, READINGS_PERIOD_S if local else READINGS_PERIOD_REMOTE_S)
    read = partial(_progress_mark if local else _bounded_mark, spec)
    on_change = partial(_keep_reading, cfg.state.progress_readings, clock, add_line)
    return hang.IterationWatch(read, period, on_change=on_change)


def _iteration_due(
    watch: hang.IterationWatch | None, policy: learn.Policy, rhythm: learn.Rhythm, now: float
) -> float:
    """Seconds until the iteration detector's limit expires (infinite: none)."""
    if watch is None:
        return math.inf
    timeout = learn.limit(policy, rhythm, now)
    if not timeout:
        return math.inf
    return timeout - watch.still()


def _keep_reading(
    path: Path,
    clock: Callable[[], float],
    add_line: Callable[[Path, bytes], None] | None,
    step: int,
    mark: str | None,
) -> None:
    """Append one timed reading; a state dir that cannot take it costs the report its
    split of the cycles, never the job its watch."""
    with contextlib.suppress(OSError):
        records.append_reading(path, records.ProgressReading(clock(), step, mark), add_line)


def _bounded_mark(spec: SourceSpec) -> tuple[int, str | None] | None:
    """:func:`_progress_mark` made by a child that is abandoned at its deadline."""
    from slurm_ft.progress.reading import PendingReading

    got = PendingReading(spec, READINGS_LOOK_TIMEOUT_S).looks()
    if isinstance(got, str) or not got:
        return None
    look = got[0]
    return (look.step, look.mark) if look.present and look.problem is None else None


def _progress_mark(spec: SourceSpec) -> tuple[int, str | None] | None:
    """What the iteration watch compares: the source's step and identity (a ``file:``
    checkpoint replaced in place moves only its identity); None while it does not exist."""
    look = sources.look(spec)
    return (look.step, look.mark) if look.present and look.problem is None else None
