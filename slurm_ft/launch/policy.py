"""The launcher's decisions as pure functions of what it knows, tested as data.

Three kinds of decision live here and nowhere else:

* before each cycle, node 0's one decision for every launcher: run, or stop with which
  exit code and why (:func:`decide`, :func:`no_progress`);
* with spare nodes, which launcher holds each node rank in the cycle (:func:`place`);
* during a cycle, how long the watch may sleep between its periodic duties
  (:func:`watch_sleep`);
* how this launcher's attempt ends: every way out — success, a stop decision, a
  forwarded signal, a lost store, a failed background thread, a launcher bug — is one
  :class:`Ending` made by one function below, so the exit code of each is chosen in
  exactly one place (codes: :mod:`slurm_ft.exitcodes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_ft import exitcodes
from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch.rendezvous.protocol import Action, Decision
from slurm_ft.records import Failure, FailureKind

# ----------------------------------------------------------------------- placement


@dataclass(frozen=True)
class Replacement:
    """Launcher ``new`` takes node rank ``slot`` from launcher ``old``, because ``why``."""

    slot: int
    old: int
    new: int
    why: str


@dataclass(frozen=True)
class Placement:
    """The launcher (hostlist index) that holds each node rank this cycle.

    ``unfilled`` are the node ranks whose launcher is bad and for which no healthy spare
    was left: the attempt cannot run the fixed world size.
    """

    active: tuple[int, ...]
    replacements: tuple[Replacement, ...] = ()
    unfilled: tuple[int, ...] = ()


def place(active: Sequence[int], launchers: int, bad: Mapping[int, str], segment: int = 1) -> Placement:
    """Keep every good active launcher on its node rank (its ranks keep their data shard
    and node-local cache); give each bad one's node rank to a healthy spare.

    Launchers are grouped in segments of ``segment`` consecutive hostlist entries (1: each
    node alone), and a segment is active or spare as a whole: when any launcher of an
    active segment is bad, the whole segment moves to the free segment with the lowest
    hostlist index whose launchers are all good, each node rank going to the launcher at
    the same offset. ``bad`` maps launcher index to why (lost, unhealthy, suspect...).
    """
    slots = list(active)
    used = {k // segment for k in active}
    free = [
        s
        for s in range(launchers // segment)
        if s not in used and not any(s * segment + j in bad for j in range(segment))
    ]
    moves: list[Replacement] = []
    unfilled: list[int] = []
    for seg in sorted({k // segment for k in active if k in bad}):
        members = [slot for slot, k in enumerate(active) if k // segment == seg]
        faults = [k for k in active if k // segment == seg and k in bad]
        if not free:
            unfilled.extend(slot for slot in members if active[slot] in bad)
            continue
        target = free.pop(0)
        for slot in members:
            old = active[slot]
            new = target * segment + old % segment
            why = bad.get(old) or f"in the segment of launcher {faults[0]} ({bad[faults[0]]})"
            slots[slot] = new
            moves.append(Replacement(slot, old, new, why))
    return Placement(tuple(slots), tuple(sorted(moves, key=lambda r: r.slot)), tuple(sorted(unfilled)))


def replaceable(failure: Failure | None) -> bool:
    """With a spare, a lost launcher is no reason to stop: its node rank moves."""
    return failure is None or failure.retryable or failure.kind is FailureKind.LOST_NODE


# ----------------------------------------------------------------------- before a cycle


@dataclass(frozen=True)
class Verdict:
    """Whether another cycle runs, and the exit code and reason when not."""

    run: bool
    exit_code: int = 0
    reason: str = ""


def decide(
    *,
    restart: int,
    max_restarts: int,
    previous_failure: Failure | None,
    unhealthy: Sequence[tuple[str, str]],
    lost: Sequence[str],
    missing: Sequence[str],
    suspect: Sequence[str] = (),
    placement: Placement | None = None,
) -> Verdict:
    """Node 0's decision before cycle ``restart`` (index within the attempt; with spares,
    each replacement beyond the cycle's own restart adds one).

    With spares (``placement`` given) bad nodes stop the attempt only when a node rank
    could not be filled; the nodes named are then every bad node, not only the unfilled.
    The progress guard is asked only when everything here says run, because asking it
    records the start of a cycle in the ledger.
    """
    short = ""
    replaced = placement is not None and not placement.unfilled
    if placement is not None and placement.unfilled:
        short = f"no healthy spare left for node rank(s) {', '.join(map(str, placement.unfilled))}; "
        if not (unhealthy or lost or missing):
            return Verdict(False, int(ExitCode.WORKERS_FAILED), f"{short}suspect: {', '.join(suspect)}")
    if replaced:
        unhealthy, lost, missing = (), (), ()
    if unhealthy:
        text = "; ".join(f"{node}: {detail}" for node, detail in unhealthy)
        return Verdict(False, int(ExitCode.UNHEALTHY), f"{short}unhealthy: {text}")
    if lost:
        return Verdict(False, int(ExitCode.WORKERS_FAILED), f"{short}lost launcher on {', '.join(lost)}")
    stuck = previous_failure is not None and not previous_failure.retryable
    if stuck and not (replaced and replaceable(previous_failure)):
        assert previous_failure is not None
        return Verdict(False, int(ExitCode.WORKERS_FAILED), f"cannot restart: {previous_failure.describe()}")
    if missing:
        return Verdict(
            False,
            int(ExitCode.WORKERS_FAILED),
            f"{short}join timeout: no launcher from node(s) {', '.join(missing)}",
        )
    if restart > max_restarts:
        last = f"; last failure: {previous_failure.describe()}" if previous_failure else ""
        return Verdict(
            False,
            int(ExitCode.WORKERS_FAILED),
            f"restart budget spent ({max_restarts} restart(s), {restart} cycle(s) failed){last}",
        )
    return Verdict(True)


def peer_signalled(previous_failure: Failure | None) -> Verdict | None:
    """A launcher that received a terminating signal (Slurm's warning before a preemption
    or the time limit, an scancel) ends the attempt for every node with that signal's
    code: the job is being stopped, not failing, so no node is lost or replaced and the
    template requeues the whole allocation. Node 0 may learn it from the peer before its
    own copy of the signal arrives; without this it took the signalled peer, gone by the
    next join, for a lost node (exit 1, the node excluded on requeue)."""
    if previous_failure is None or previous_failure.kind is not FailureKind.SIGNAL:
        return None
    signum = exitcodes.signal_by_name(previous_failure.signal)
    if signum is None:
        return None
    name = exitcodes.signal_name(signum)
    return Verdict(False, exitcodes.for_signal(signum), f"{previous_failure.node} received {name}")


def signalled_stop(
    previous_failure: Failure | None, cycle: int, now: float, nodes: tuple[str, ...]
) -> Decision | None:
    """Node 0's decision when :func:`peer_signalled` says stop: no node lost, unhealthy
    or replaced."""
    verdict = peer_signalled(previous_failure)
    if verdict is None or previous_failure is None:
        return None
    return stop_record(verdict, cycle, now, nodes, previous_failure)


def stop_record(
    verdict: Verdict, cycle: int, now: float, nodes: tuple[str, ...], previous_failure: Failure | None
) -> Decision:
    """What every stop says: the verdict's reason and exit code, the job's nodes and the
    first failure (the coordinator adds the nodes it judged bad)."""
    return Decision(
        Action.STOP,
        cycle,
        reason=verdict.reason,
        exit_code=verdict.exit_code,
        start_time=now,
        nodes=nodes,
        first_failure=previous_failure.to_json() if previous_failure else None,
    )


def no_progress(reason: str) -> Verdict:
    """The verdict when the progress guard vetoes a cycle that :func:`decide` allowed."""
    return Verdict(False, int(ExitCode.NO_PROGRESS), f"no progress: {reason}")


def departed(reason: str) -> Verdict:
    """What node 0 tells the peers when it leaves between cycles (a signal, a launcher
    failure): a fixed-size job cannot go on without it."""
    return Verdict(False, int(ExitCode.WORKERS_FAILED), reason)


# ----------------------------------------------------------------------- the watch


def watch_sleep(
    monitor_interval: float,
    hang_period: float,
    nic_interval: float | None,
    metrics: bool,
    check_interval: float | None = None,
) -> float:
    """How long the watch may sleep: until its next periodic duty (the store poll, the hang
    look, the NIC sample when NICs are monitored, the metrics file's 1 s tick, the start of
    the next health check while training; a failed one wakes it at once). Everything
    that ends a cycle wakes it at once instead: a worker's exit (pidfd), a signal, a halt
    anywhere (halt waiter), a lost peer (peer monitor), a dead background thread (wake
    pipe); the store is polled only every ``monitor_interval`` as a fallback."""
    duties = [monitor_interval, hang_period]
    if nic_interval is not None:
        duties.append(nic_interval)
    if check_interval is not None:
        duties.append(check_interval)
    if metrics:
        duties.append(1.0)
    return min(duties)


# ----------------------------------------------------------------------- the ending


@dataclass(frozen=True)
class Ending:
    """How this launcher's attempt ends: its exit code and what the outcome record says.

    ``nodes`` None means "the nodes this launcher knows of"; ``internal_error`` is set
    when the launcher itself failed, for the one line the front end prints. ``lost_nodes``
    went silent (what is left of them on their node must be ended with the job step);
    ``suspect_nodes`` hosted the first failure too many cycles in a row (spare nodes).
    """

    exit_code: int
    reason: str
    unhealthy_nodes: tuple[str, ...] = ()
    nodes: tuple[str, ...] | None = None
    lost_nodes: tuple[str, ...] = ()
    suspect_nodes: tuple[str, ...] = ()
    internal_error: str | None = None
    traceback: str | None = None

    @property
    def outcome(self) -> str:
        return exitcodes.describe(self.exit_code)


def finished() -> Ending:
    return Ending(0, "all workers finished")


def stopped(decision: Decision) -> Ending:
    """Node 0 decided to stop: every launcher ends with the decision's code."""
    return Ending(
        decision.exit_code,
        decision.reason,
        decision.unhealthy_nodes,
        decision.nodes,
        lost_nodes=decision.lost_nodes,
        suspect_nodes=decision.suspect_nodes,
    )


def signalled(signum: int, node_name: str | None) -> Ending:
    """This launcher received ``signum``: during a cycle (``node_name`` given, after the
    workers got it too) or between cycles."""
    who = f"{node_name} received" if node_name else "received"
    return Ending(exitcodes.for_signal(signum), f"{who} {exitcodes.signal_name(signum)}")


def store_lost(detail: str, *, unhealthy: bool) -> Ending:
    """A peer lost node 0. An unhealthy node keeps its 94 so the template excludes it."""
    code = ExitCode.UNHEALTHY if unhealthy else ExitCode.WORKERS_FAILED
    return Ending(int(code), f"lost node 0: {detail}")


def node0_frozen(detail: str, node0: str, *, unhealthy: bool = False) -> Ending:
    """A peer found node 0 frozen (no answer within the heart-beat timeout): the outcome
    names node 0 as lost, so the template resubmits without it. An unhealthy peer keeps
    its 94 (see :func:`store_lost`)."""
    code = ExitCode.UNHEALTHY if unhealthy else ExitCode.WORKERS_FAILED
    return Ending(int(code), f"lost node 0 ({node0}): {detail}", lost_nodes=(node0,))


def superseded(detail: str) -> Ending:
    """A store host lost to its peers (it froze) found, on waking, that a successor leads
    the job: it ends with 1 and writes nothing (the successor's records are the job's)."""
    return Ending(int(ExitCode.WORKERS_FAILED), f"superseded: {detail}")


def ports_in_use(detail: str) -> Ending:
    """Node 0 could not open its store: every port of the job's sequence is taken (other
    jobs' stores on this host). Transient, so the retryable 1, never bad input's 2."""
    return Ending(int(ExitCode.WORKERS_FAILED), f"no rendezvous port: {detail}")


def background_failed(detail: str) -> Ending:
    """A background thread (heart-beat, peer monitor, halt waiter) died: this launcher can
    no longer see the job, which is as bad as a lost store."""
    return Ending(int(ExitCode.WORKERS_FAILED), f"launcher blind: {detail}")


def unhealthy_self(detail: str) -> Ending:
    """This node is unhealthy and must not start workers, whatever it was told."""
    return Ending(int(ExitCode.UNHEALTHY), f"unhealthy: {detail}")


def launcher_failed(error: str, traceback: str) -> Ending:
    """A bug or an unexpected condition in the launcher itself (workers already stopped)."""
    return Ending(
        int(ExitCode.WORKERS_FAILED), f"launcher failed: {error}", internal_error=error, traceback=traceback
    )


def records_budget(write_timeout: float, term_timeout: float, signal_at: float | None, now: float) -> float:
    """How long the way out may wait for the state dir: the write timeout, and after a
    signal (arrived at monotonic ``signal_at``) no longer than what is left of
    ``--term-timeout`` since it arrived."""
    budget = write_timeout
    if signal_at is not None:
        budget = min(budget, signal_at + term_timeout - now)
    return max(0.0, budget)


def state_dir_stalled(ending: Ending, problem: str, node: str) -> Ending:
    """The records could not reach this node's state dir before the way out's deadline: its
    file system stopped answering. 94 naming the node and the path, so the template
    resubmits without it, unless training finished (0: nothing is left to run) or a
    signal ends the attempt (128+N: the requeue it asks for)."""
    if ending.exit_code == 0 or ending.exit_code >= 128:
        return dataclasses.replace(ending, reason=f"{ending.reason}; records not written: {problem}")
    unhealthy = tuple(dict.fromkeys((*ending.unhealthy_nodes, node)))
    return dataclasses.replace(
        ending, exit_code=int(ExitCode.UNHEALTHY), reason=f"unhealthy: {problem}", unhealthy_nodes=unhealthy
    )
