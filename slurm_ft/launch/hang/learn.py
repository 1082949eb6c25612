"""Learned hang timeouts: the pure policy (README "Hangs", learned timeouts).

A job shows its own rhythm: the gaps between its signs of life (bytes written, heart-beats,
sections; for the iteration detector, the progress source moving). A hang is judged at
``factor x the longest gap seen``, never below ``floor`` and never above the fixed
``ceiling`` (``--hang-timeout``). The longest gap is kept per cycle and carried across
cycles and requeues in the ledger, so a slow step seen once protects every later cycle.

A cycle's warm-up (start-up, checkpoint load, compilation) is judged by the ceiling only
and teaches nothing: a gap that began in it is not learned. It lasts ``warmup`` seconds
(``--hang-initial-timeout``) or, with a progress source, until the cycle's first progress
(:func:`progressed`: a checkpoint of a step past the one the cycle began at), whichever
comes first: a job that restarts every few minutes would otherwise spend every cycle in
its warm-up and never meet its learned limits. Until a gap is known (the first cycle,
before its second sign of life after the warm-up) the ceiling applies too.

A job also shows how it starts (:func:`startup_seen`): the end of the last silence longer
than ``floor`` that began in a cycle's warm-up (or its first sign of life), once a steady
stretch after it (no gap above ``floor``) lasted ``max(floor, factor x`` that start-up``)``.
The ledger keeps it, and from then on a cycle's warm-up ends ``max(floor, factor x`` the
known start-up``)`` after its start (:func:`warm_until`): the start-up is judged as one gap
more, from the cycle's start. A start-up that is still silent at the end of a cycle
(compiling when another rank failed) counts as lasting to that end.

Every function here is O(1): the launcher calls :func:`observe` once per sign of life its
samples found and :func:`limit` once per watch tick.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

# Why 7 and 20 s (docs/guides/hangs.md, "Why 7 and 20 s"). Detection: a hang is to be found
# within max(30 s, 10 x the trainer's interval g) for g = 1 s, 10 s, 60 s. Lines the log
# pipeline reads are timed exactly (``arrivals``): a gap g reads g, and once node 0's own
# workers are quiet node 0 looks every 2 s (:func:`pace`), so the verdict comes up to 2 s
# late, plus up to 2 s more when a peer wrote last (its report is timed from node 0's read):
# max(20, 7 x 1) + 4 = 24 <= 30, 7 x 10 + 4 = 74 <= 100, 7 x 60 + 4 = 424 <= 600. Signs it can
# only sample (output it does not capture, files) are read at node 0's tick (:func:`tick`: 2
# s, 2 s, 5 s for those), so a gap g reads as at most g + tick, and the verdict comes up to
# one tick late, plus up to a peer's sampling period (5 s) when a peer wrote last: max(20, 7 x
# 3) + 2 + 5 = 28 <= 30, 7 x 12 + 2 + 5 = 91 <= 100, 7 x 65 + 5 + 5 = 465 <= 600 (one node past
# its fine phase, :func:`coarse`: the limit learned finely, the verdict up to 5.5 s late: 26.5
# and 89.5). 8 misses two
# of those (8 x 3 + 7 = 31, 8 x 12 + 7 = 103): 7 is the largest whole factor that meets all of
# them, and the largest factor leaves the most room for a job's own slowness. The floor: at
# most 30 - 7 = 23 s (the 1 s goal); 20 s leaves 2 s for a loaded machine and covers, from its
# first time after the warm-up, a step 10x slower than usual for any trainer with steps below
# 2 s (a 10x step of a trainer with 3 s steps or more is 30 s or more of silence: at or past
# the detection goal itself, no setting meets both), a garbage-collection pause, a data-loader
# refill, a silent validation pass or checkpoint save under 20 s. Measured:
# benchmarks.hang_learned, benchmarks.hang_false_alarms.
DEFAULT_FACTOR = 7.0
DEFAULT_FLOOR_S = 20.0
DEFAULT_WARMUP_S = 600.0
# The finest sampling of node 0's workers while it learns from signs it can only sample
# (see :func:`tick`): gaps read to 2 s. A tick of the watch loop is a look at the store and
# the workers (about 0.45 ms of CPU on a loaded 2-core machine, most of it the wake itself:
# caches refilled after the sleep): 1 s cost an active job's launcher four times its CPU;
# 2 s still meets the goal (7 x 2 < 20, 20 + 2 + 5 < 30). Where another thread wakes that
# often anyway (node 0's peer monitor), the samples are taken there and the loop keeps its
# fixed period (see :func:`pace`); lines the log pipeline reads need no sampling at all.
LEARN_PERIOD_S = 2.0
# How long node 0 samples that finely: the first 5 minutes after a cycle's warm-up, and 5
# minutes after the longest gap rose by more than that grain (the rhythm changed: an
# evaluation pass, slower steps). 5 minutes hold 30 gaps of a 10 s trainer (any trainer
# the fine grain matters for has gaps under 36 s: above, its fiftieth of the limit is the
# fixed period anyway, see :func:`tick`). Past them the job's rhythm is known, and a
# sampled gap is read at the fixed period as what it proves, its lower bound
# (:func:`coarse`): a wake every 2 s was, for a one-node launcher whose workers' output
# it does not read, more than half its CPU.
FINE_S = 300.0
# In the coarse phase the loop also wakes when the silence limit would expire (so the
# verdict is not a period late), but not sooner than this after its last wake.
COARSE_LEAST_LOOK_S = 0.5
# A sign of life read again through another clock reading moves by microseconds: the
# same sign, not a gap.
SAME_LIFE_S = 0.01
# A learned limit is said in the launcher log when it first exists and when it moves by
# more than this fraction (gaps that grow by a few milliseconds say nothing new).
SAY_CHANGE = 0.1


@dataclass(frozen=True)
class Policy:
    """One detector's learning settings; ``factor`` 0 is a fixed timeout (the ceiling).

    ``ceiling`` 0 turns the detector off; ``math.inf`` means no cap (the iteration detector
    learned from a progress source when no ``--hang-iteration-timeout`` is given)."""

    factor: float
    floor: float
    ceiling: float
    warmup: float
    peer_period: float = 0.0  # how often a peer samples its workers (the report's grain)

    @property
    def learning(self) -> bool:
        return self.factor > 0 and self.ceiling > 0

    @property
    def on(self) -> bool:
        return self.ceiling > 0

    @property
    def report_after(self) -> float:
        """The quiet after which a peer tells node 0: below ``floor / factor`` a gap never
        moves the limit, so shorter silences need not travel, and a peer that samples its
        workers every ``peer_period`` reads up to that much quiet while they write (twice
        that keeps a busy peer from reporting). The ceiling when fixed."""
        if not self.learning:
            return self.ceiling
        return min(self.ceiling, max(self.floor / self.factor, 2 * self.peer_period))


OFF = Policy(0.0, 0.0, 0.0, 0.0)  # a detector that is off


@dataclass(frozen=True)
class Rhythm:
    """What a cycle knows: its start, its latest sign of life, the longest gap learned
    (carried in: the history; 0 for none) and the longest of this cycle alone."""

    started: float
    last_life: float
    longest: float = 0.0
    cycle_longest: float = 0.0
    progressed: float = math.inf  # the cycle's first progress (:func:`progressed`)
    rose: float = -math.inf  # when the longest gap last rose by more than the fine grain
    known_startup: float = 0.0  # the job's start-up from earlier cycles (s; 0: unknown)
    # This cycle's start-up (:func:`startup_seen`): ``mark`` ends it if the stretch after it
    # stays steady (``steady``: its longest gap, none above the floor) for long enough;
    # ``long``: a silence above the floor ended there; ``startup``: the confirmed one (s).
    mark: float = -math.inf
    long: bool = False
    steady: float = 0.0
    startup: float = 0.0
    hung: bool = False  # a verdict ended the cycle: its last silence was no start-up


def warm_until(policy: Policy, rhythm: Rhythm) -> float:
    """When the cycle's warm-up ends: ``warmup`` after its start, at its first progress, or
    where the job's known start-up ends (:func:`young_warmup`), whichever comes first."""
    return min(
        rhythm.started + policy.warmup, rhythm.progressed, rhythm.started + young_warmup(policy, rhythm)
    )


def young_warmup(policy: Policy, rhythm: Rhythm) -> float:
    """The warm-up the job's known start-up gives a cycle: ``max(floor, factor x`` it``)``,
    the limit of a gap that long (infinite: no start-up known, or learning off)."""
    if not policy.learning or rhythm.known_startup <= 0:
        return math.inf
    return max(policy.floor, policy.factor * rhythm.known_startup)


def ended_by_startup(policy: Policy, rhythm: Rhythm) -> bool:
    """Whether the known start-up, not ``warmup`` or the first progress, ends the warm-up."""
    young = rhythm.started + young_warmup(policy, rhythm)
    return young < min(rhythm.started + policy.warmup, rhythm.progressed)


def progressed(rhythm: Rhythm, at: float) -> Rhythm:
    """The rhythm once the progress source showed the cycle's first progress at ``at``:
    training went past the step it resumed from, so start-up, checkpoint load and the first
    compilation are behind it and its warm-up ends there."""
    if at >= rhythm.progressed or at < rhythm.started:
        return rhythm
    return replace(rhythm, progressed=at)


def begin(started: float, history: float, startup: float = 0.0) -> Rhythm:
    """A cycle's rhythm at its start, knowing the job's longest gap and start-up so far."""
    return Rhythm(started, started, max(0.0, history), 0.0, known_startup=max(0.0, startup))


def _starting(policy: Policy, rhythm: Rhythm, life: float, began: float, gap: float) -> Rhythm:
    """This cycle's start-up after a sign of life at ``life`` ended a gap of ``gap`` s: the
    first sign, and every silence above the floor that began in the warm-up, may end it
    (the mark moves there); it is confirmed once the steady stretch after the mark lasted
    ``max(floor, factor x`` the start-up``)``. Confirming folds that stretch's gaps into the
    learned ones: they began before the warm-up's end, but after the start-up."""
    if rhythm.mark == -math.inf:  # the first sign: the silence before it is the cycle's start
        return replace(rhythm, mark=life, long=life - rhythm.started > policy.floor, steady=0.0)
    if gap > policy.floor and began < warm_until(policy, rhythm):
        return replace(rhythm, mark=life, long=True, steady=0.0)
    startup = rhythm.mark - rhythm.started
    if startup <= rhythm.startup:  # confirmed: nothing to note until the mark moves
        return rhythm
    if gap > rhythm.steady:
        rhythm = replace(rhythm, steady=gap)
    if life - rhythm.mark < max(policy.floor, policy.factor * startup):
        return rhythm
    return replace(
        rhythm,
        startup=startup,
        longest=max(rhythm.longest, rhythm.steady),
        cycle_longest=max(rhythm.cycle_longest, rhythm.steady),
    )


def startup_seen(policy: Policy, rhythm: Rhythm, now: float) -> float | None:
    """This cycle's start-up for the ledger (s from its start; None: not known): the
    confirmed one, or later where a silence above the floor ended after it; and where the
    cycle ends in a silence above the floor that began in its warm-up and no verdict
    judged it (a start-up cut short: compiling while another rank failed), its whole
    length: a shorter one would end the next cycle's warm-up inside that silence."""
    if not policy.learning:
        return None
    seen = rhythm.startup
    if rhythm.long and rhythm.mark - rhythm.started > seen:
        seen = rhythm.mark - rhythm.started
    open_gap = now - rhythm.last_life
    if not rhythm.hung and open_gap > policy.floor and rhythm.last_life < warm_until(policy, rhythm):
        seen = max(seen, now - rhythm.started)
    return seen or None


def observe(policy: Policy, rhythm: Rhythm, life: float, since: float | None = None) -> Rhythm:
    """The rhythm after a look that found a sign of life at ``life`` (a time on the same
    clock as ``started``), the gap before it having begun at ``since``: by default the
    latest sign known (sampled signs), later where signs came in between, none of them
    further apart (the log pipeline's exact arrivals: the longest gap of a look's
    window). A gap counts once it ended, and only when it began after the warm-up (after
    a sign of life, not at the start)."""
    if life <= rhythm.last_life + SAME_LIFE_S:
        return rhythm
    # A sampled sign inside an exact gap is timed late (at the sample): the whole gap counts.
    began = rhythm.last_life if since is None else since
    gap = life - began
    if policy.learning:
        rhythm = _starting(policy, rhythm, life, began, gap)
    learnable = began > rhythm.started and began >= warm_until(policy, rhythm)
    if not learnable:
        return replace(rhythm, last_life=life)
    first = rhythm.longest <= 0 < gap
    rose = life if first or gap > rhythm.longest + LEARN_PERIOD_S else rhythm.rose
    return replace(
        rhythm,
        last_life=life,
        longest=max(rhythm.longest, gap),
        cycle_longest=max(rhythm.cycle_longest, gap),
        rose=rose,
    )


def judged(policy: Policy, rhythm: Rhythm, silence: float) -> Rhythm:
    """The rhythm after a hang was judged at ``silence``: the open gap counts as seen, so
    the ledger carries it and the next cycle's limit is ``factor x silence``. A gap that
    never ended would otherwise teach nothing, and a silent pass longer than the learned
    limit (an evaluation without output) would be judged a hang in every cycle until the
    restart budget is spent. The price: a real hang found at a learned limit makes the
    next cycle wait longer for the next one (never beyond the ceiling)."""
    if not policy.learning or silence <= 0:
        return rhythm
    return replace(
        rhythm,
        longest=max(rhythm.longest, silence),
        cycle_longest=max(rhythm.cycle_longest, silence),
        hung=True,
    )


def judged_stopped(rhythm: Rhythm) -> Rhythm:
    """The rhythm after the stopped-rank rule judged a hang: its silence was no start-up
    (:func:`startup_seen`) and, being no silent pass of the job's, is not learned."""
    return replace(rhythm, hung=True)


def stopped_limit(policy: Policy, rhythm: Rhythm) -> float:
    """The silence that is a hang when a rank sat stopped (``T``) or in uninterruptible
    sleep (``D``) at every look of it: such a rank is not compiling or loading, so the
    warm-up does not apply: the learned limit, the floor while no gap is known (0: off)."""
    if not policy.learning:
        return 0.0
    return learned(policy, rhythm.longest)


def learned(policy: Policy, longest: float) -> float:
    """The limit for a longest gap: factor x gap within [floor, ceiling] (and never at or
    below the report threshold: a busy peer's unreported quiet must not look silent)."""
    least = max(policy.floor, 1.5 * policy.report_after if policy.peer_period else 0.0)
    return min(policy.ceiling, max(least, policy.factor * longest))


def tick(policy: Policy, rhythm: Rhythm, now: float, base: float) -> float:
    """How often node 0 samples its own workers' signs it can only sample (output it does
    not capture, files, heart-beats; lines the log pipeline times need none, see
    :func:`pace`): ``base`` (the fixed timeouts' period) in the warm-up, with learning off,
    and while nothing is pending; 2 s from the first sign of life after the warm-up until a
    gap is known (the first gaps set the limit); then, for :data:`FINE_S` (the fine
    phase), a fiftieth of the limit within [2 s, base] (a 10 s trainer: 2 s, so a gap reads
    at most 2 s long and the verdict comes at most 2 s late: 7 x 12 + 2 + 5 < 100); then
    ``base`` again (:func:`coarse`). A silent or idle job keeps ``base``: learning costs it
    nothing."""
    warm_end = warm_until(policy, rhythm)
    if not policy.learning or now < warm_end:
        return base
    if rhythm.longest <= 0:
        fresh = rhythm.last_life > rhythm.started and rhythm.last_life >= warm_end
        return min(base, LEARN_PERIOD_S) if fresh else base
    if coarse(policy, rhythm, now, base):
        return base
    return _fine_tick(policy, rhythm, now, base)


def _fine_tick(policy: Policy, rhythm: Rhythm, now: float, base: float) -> float:
    return min(base, max(LEARN_PERIOD_S, limit(policy, rhythm, now) / 50))


def coarse(policy: Policy, rhythm: Rhythm, now: float, base: float) -> bool:
    """Whether node 0 is past the fine phase: a gap is known, :data:`FINE_S` passed since
    the warm-up ended and since the longest gap last rose, and the fine tick would be finer
    than ``base``. Then its workers' signs it can only sample are sampled every ``base``
    s, and a gap between two samples that saw life, with still samples between them, is
    learned as the time from the first to the last still one (:func:`pace`'s ``bounds``):
    the least it can have been. A trainer writing every second is sampled busy at every
    look and teaches nothing (its limit, learned finely, stays), and a gap that proves the
    rhythm changed raises the longest gap and starts a fine phase again. Verdicts keep
    their lateness: the silence is timed from the last sample that saw life (at most
    ``base`` after the last write) and the loop wakes when the limit would expire:
    max(20, 7 x 3) + 5 + 0.5 <= 30 for a 1 s trainer, 7 x 12 + 5.5 <= 100 for 10 s."""
    if not policy.learning or rhythm.longest <= 0:
        return False
    fine_until = max(warm_until(policy, rhythm), rhythm.rose) + FINE_S
    return now >= fine_until and _fine_tick(policy, rhythm, now, base) < base


@dataclass(frozen=True)
class Pace:
    """Node 0's watch while it learns: its loop wakes every ``look`` s; its workers are
    sampled every ``sample`` s, by the sampler and not by the loop when ``by_sampler``."""

    look: float
    sample: float
    by_sampler: bool
    bounds: bool = False  # a sampled gap is learned as its lower bound (:func:`coarse`)


def pace(
    policy: Policy,
    sample_every: float,
    base: float,
    own_quiet: float,
    sampler: float | None,
    due: float,
    exact: bool = False,
    until_limit: float | None = None,
) -> Pace:
    """Node 0's pace for workers sampled every ``sample_every`` s (:func:`tick`). Without a
    ``sampler`` (a thread that wakes every ``sampler`` s anyway: node 0's peer monitor)
    the loop samples, every ``sample_every``, and so it does when that is its fixed
    period anyway. Else the sampler takes every sample, at its own steady pace (the loop's
    samples, off it, missed lines the pace would have seen), the gaps are read as finely,
    and no verdict can come while node 0's own workers were quiet for less than
    ``report_after`` (every limit lies above it, :func:`learned`): the loop keeps ``base``
    until that quiet is reached, then wakes every ``sample_every`` to read the peers'
    reports and time the verdict as without a sampler. ``exact`` (past the warm-up, the
    signs of life timed by the log pipeline): nothing to sample, the loop keeps ``base``
    and wakes every 2 s once that quiet is reached, so the verdict comes at most 2 s
    late. ``due``: seconds until another limit (the iteration detector's) expires; the
    loop wakes by then too. ``until_limit`` (node 0 in the coarse phase, :func:`coarse`:
    seconds until its own quiet reaches the silence limit): the loop samples at every look,
    every ``base`` s and when that limit would expire, and learns lower bounds."""
    if exact:
        return Pace(_look_every(policy, min(base, LEARN_PERIOD_S), base, own_quiet, due), base, False)
    if until_limit is not None and sampler is None:
        look = min(base, max(COARSE_LEAST_LOOK_S, min(until_limit, due)))
        return Pace(look, look, False, bounds=True)
    if sampler is None or sampler > sample_every or sample_every >= base:
        return Pace(sample_every, sample_every, False)
    return Pace(_look_every(policy, sample_every, base, own_quiet, due), sample_every, True)


def _look_every(policy: Policy, fine: float, base: float, own_quiet: float, due: float) -> float:
    """``base`` while node 0's own workers were quiet for less than ``report_after`` (no
    verdict can come; ``due`` s at most), ``fine`` from then on."""
    until_reports = policy.report_after - own_quiet
    if until_reports <= 0:
        return fine
    return min(base, max(fine, min(until_reports, due)))


def limit(policy: Policy, rhythm: Rhythm, now: float) -> float:
    """The silence (in s) that is a hang at ``now``: the ceiling while learning is off, in
    the warm-up, or while no gap is known; else the learned limit. 0: detector off."""
    if not policy.learning or rhythm.longest <= 0 or now < warm_until(policy, rhythm):
        return policy.ceiling
    return learned(policy, rhythm.longest)


def basis(policy: Policy, rhythm: Rhythm, now: float, fixed_name: str) -> str:
    """Why the limit is what it is, for the hang's detail and the launcher log: which rule
    judged (the fixed timeout, or the learned one, past a warm-up that the job's known
    start-up ended)."""
    value = limit(policy, rhythm, now)
    if value == policy.ceiling or not policy.learning:
        return f"{fixed_name} {value:g}s"
    return _learned_basis(policy, rhythm, value) + _young(policy, rhythm, now)


def _learned_basis(policy: Policy, rhythm: Rhythm, value: float) -> str:
    gap = rhythm.longest
    return f"learned {value:.1f}s = max({policy.floor:g}s, {policy.factor:g} x longest gap {gap:.1f}s)"


def _young(policy: Policy, rhythm: Rhythm, now: float) -> str:
    """The warm-up rule, while the cycle is young enough for it to matter."""
    if not ended_by_startup(policy, rhythm) or now - rhythm.started >= policy.warmup:
        return ""
    return f"; warm-up {startup_basis(policy, rhythm)}"


def startup_basis(policy: Policy, rhythm: Rhythm) -> str:
    """How the known start-up ended the warm-up, for the launcher log."""
    known = rhythm.known_startup
    young = young_warmup(policy, rhythm)
    return (
        f"ended at {young:.1f}s = max({policy.floor:g}s, {policy.factor:g} x the job's start-up {known:.1f}s)"
    )


def stopped_basis(policy: Policy, rhythm: Rhythm, ranks: Iterable[int]) -> str:
    """The stopped-rank rule's reason, for the hang's detail."""
    value = stopped_limit(policy, rhythm)
    which = ", ".join(map(str, sorted(set(ranks))))
    why = (
        _learned_basis(policy, rhythm, value) if rhythm.longest > 0 else f"the floor {value:g}s, no gap known"
    )
    held = f"rank(s) {which} stopped or in uninterruptible sleep at every look"
    return f"stopped-rank rule: {held}, so no start-up: {why}"


def worth_saying(said: float | None, now_limit: float) -> bool:
    """Whether the launcher log should say the limit now (first learned, or moved > 10 %)."""
    if said is None:
        return True
    if math.isinf(said) or math.isinf(now_limit):
        return said != now_limit
    return abs(now_limit - said) > SAY_CHANGE * said


def simulate(
    policy: Policy,
    intervals: Iterable[float],
    *,
    start_gap: float = 0.0,
    history_gap: float = 0.0,
    progress_at: float | None = None,
    startup: float = 0.0,
) -> float | None:
    """A trainer that shows life after ``start_gap`` and then after each of ``intervals``
    seconds (its first progress at ``progress_at``, if any; the job's known ``startup``),
    judged through :func:`observe` and :func:`limit` exactly as the watch judges it: the
    first interval (from its start, in seconds) that would have been called a hang, or
    None. For the tests and the README's claims; the gap is judged while open."""
    rhythm = begin(0.0, history_gap, startup)
    if progress_at is not None:
        rhythm = progressed(rhythm, progress_at)
    now = start_gap
    rhythm = observe(policy, rhythm, now)
    elapsed = now
    for gap in intervals:
        # The gap is open from ``now``: it is a hang if the limit (as it stands while the
        # gap is open) is reached before the next sign of life comes.
        due = limit(policy, rhythm, now + gap)
        if policy.on and gap >= due:
            judged_from = warm_until(policy, rhythm) if due != policy.ceiling else 0.0
            return max(elapsed + due, judged_from)
        now += gap
        elapsed = now
        rhythm = observe(policy, rhythm, now)
    return None
