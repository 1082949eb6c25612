"""How a launcher leaves: an ending plus what it does on the way out.

Kept apart from ``policy`` (which decides the ending as data) because a way out also
carries an action: node 0's final message to the peers.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ft import boundedrun
from slurm_ft.exitcodes import signal_name
from slurm_ft.launch import policy
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous.protocol import Decision

# How long node 0 keeps the store up for peers to read why it leaves on its own.
DEPARTURE_LINGER_S = 2.0
STEP_KILL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Exit:
    """An ending plus what this launcher does on its way out: the event line, whether
    node 0 announces it to the peers (and how long it waits for them to read it), whether
    a peer confirms it read the final answer."""

    ending: Ending
    message: str | None = None
    announce: Callable[[], None] | None = None
    linger: float = 0.0
    departing: bool = False  # node 0 leaves on its own: tell peers to stop at their next join
    ack: bool = False  # a peer tells node 0 not to wait for it: it read the final answer, or needs none
    ends_step: bool = False  # a peer whose store host froze: srun would wait for it


Announce = Callable[[], None] | None


def finished(announce: Announce, linger: float) -> Exit:
    return Exit(policy.finished(), None, announce, linger)


def stopped(decision: Decision, announce: Announce, linger: float) -> Exit:
    """Node 0 decided to stop: it announces the decision; a peer confirms it read it."""
    message = f"stopping: {decision.reason} (exit {decision.exit_code})"
    return Exit(policy.stopped(decision), message, announce, linger, ack=announce is None)


def signalled(signum: int, node_name: str | None) -> Exit:
    """``node_name`` given: during a cycle (the workers got the signal too); else between cycles.
    A peer that leaves on its own signal needs no final answer from node 0, and confirms
    at once (``ack``): node 0 would otherwise keep the store up for it until its heart-beats
    were overdue (a preemption's USR1 reaches every launcher; 6 s of each requeue)."""
    ending = policy.signalled(signum, node_name)
    if node_name:
        message = f"exiting {ending.exit_code} after {signal_name(signum)}"
    else:
        message = f"received {signal_name(signum)} between cycles; exiting {ending.exit_code}"
    return Exit(ending, message, linger=DEPARTURE_LINGER_S if node_name else 0.0, departing=True, ack=True)


def store_lost(detail: str, *, unhealthy: bool, received: int | None = None) -> Exit:
    """A peer lost node 0's store; a signal that arrived meanwhile is the way out instead."""
    if received is not None:
        return signalled(int(received), None)
    ending = policy.store_lost(detail, unhealthy=unhealthy)
    return Exit(ending, f"lost the rendezvous store ({detail}); exiting {ending.exit_code}")


def store_host_silent(detail: str, node0: str, *, unhealthy: bool, received: int | None = None) -> Exit:
    """A peer's store host stopped answering and no successor takes over: node 0 writes
    nothing any more, so this peer's outcome names it lost, and the peer ends the job step
    (a frozen launcher holds it to the time limit)."""
    if received is not None:
        return signalled(int(received), None)
    ending = policy.node0_frozen(detail, node0, unhealthy=unhealthy)
    return Exit(ending, f"lost the rendezvous store ({detail}); exiting {ending.exit_code}", ends_step=True)


def ports_in_use(detail: str) -> Exit:
    ending = policy.ports_in_use(detail)
    return Exit(ending, f"{detail}; exiting {ending.exit_code}")


def blind(detail: str) -> Exit:
    ending = policy.background_failed(detail)
    return Exit(ending, f"{detail}; exiting {ending.exit_code}", linger=DEPARTURE_LINGER_S, departing=True)


def crashed(exc: Exception) -> Exit:
    """A bug or an unexpected condition in the launcher: its error and traceback."""
    import traceback  # only on this path: keeps every start short

    error = f"{type(exc).__name__}: {exc}"
    ending = policy.launcher_failed(error, "".join(traceback.format_exception(exc)))
    return Exit(ending, linger=DEPARTURE_LINGER_S, departing=True)


def kills_step(ending: Ending) -> bool:
    """Whether node 0 ends the job step with SIGKILL once its peers have read the final
    answer (:func:`end_step`): a peer that still has work on its way out (persisting its
    snapshots) must do it before it confirms, or the kill cuts it off."""
    return bool(ending.lost_nodes)


def end_step(step_killer: tuple[str, ...], event: Callable[[str], None], lost: tuple[str, ...]) -> None:
    """A lost launcher may be frozen, not dead: srun then waits for it (and its workers)
    until the time limit. Once the outcome is written and the live peers have read the
    answer, node 0 SIGKILLs the whole step (``step_killer``), this launcher included, so
    the batch script goes on to its decision. (A peer whose node 0 froze does the same on
    its way out.)"""
    if not step_killer:
        return
    event(f"ending the job step: lost launcher on {', '.join(lost)} ({shlex.join(step_killer)})")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        boundedrun.run(step_killer, STEP_KILL_TIMEOUT_S)
