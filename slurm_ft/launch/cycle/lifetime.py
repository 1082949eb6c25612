"""A launcher's life around its cycle loop: :func:`run` starts it, :func:`drive` turns
whatever ends the loop into one :class:`~slurm_ft.launch.wayout.Exit`, :func:`finish` is
the one way out (the only place that writes the outcome record and picks the exit code)
and :func:`cleanup` runs on every way out, so no worker process group survives :func:`run`.

Kept apart from the loop (``agent``), which only says how a cycle ends; what leaving costs
(records within the signal's budget, snapshots persisted, node 0's announcement) is here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from slurm_ft import privatefiles
from slurm_ft.launch import policy, wayout
from slurm_ft.launch.books.stateio import StateDirStalled
from slurm_ft.launch.context import AgentConfig, BadInput
from slurm_ft.launch.cycle.agent import Agent, Phase
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous import openfiles
from slurm_ft.launch.rendezvous.background import STORE_CONNECTIONS, BackgroundDied
from slurm_ft.launch.rendezvous.stores import Interrupted, StoreLost
from slurm_ft.launch.roles.coordinator import PortsInUse
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.succession.storeloss import Superseded
from slurm_ft.launch.wayout import Exit
from slurm_ft.launch.workers import process as wk
from slurm_ft.records import FailureKind


def run(cfg: AgentConfig, events: EventLog) -> Ending:
    """Run the launcher of this process until its ending. Raises BadInput for exit-2
    conditions found after start; everything else, a launcher bug included, ends through
    :func:`finish`."""
    limits = openfiles.raise_soft_limit()
    if cfg.is_node0 and cfg.num_nodes > 1:
        problem = openfiles.shortfall(cfg.num_nodes, STORE_CONNECTIONS, limits)
        if problem is not None:
            raise BadInput(problem)
    if limits.raised:
        events.event(f"open-files limit raised from {limits.before} to {limits.soft}")
    wk.become_subreaper()
    signals = SignalBox(cfg.signals)
    try:
        return drive(Agent(cfg, events, signals))
    finally:
        signals.close()


def drive(agent: Agent) -> Ending:
    """The agent's run from start to ending, whatever happens on the way."""
    try:
        try:
            way_out = agent.invoke_run()
        except Interrupted:
            assert agent.sig.received is not None
            way_out = wayout.signalled(int(agent.sig.received), None)
        except StoreLost as exc:
            way_out = agent.store_loss.way_out(str(exc))
        except BackgroundDied as exc:
            way_out = wayout.blind(str(exc))
        except PortsInUse as exc:
            way_out = wayout.ports_in_use(str(exc))
        except StateDirStalled as exc:  # no first cycle number without it: the node is unhealthy
            ending = policy.unhealthy_self(str(exc))
            way_out = Exit(ending, f"{ending.reason}; exiting {ending.exit_code}")
        except Superseded as exc:
            way_out = Exit(policy.superseded(str(exc)))
        except BadInput:
            raise
        except Exception as exc:
            way_out = launcher_failed(agent, exc)
        return finish(agent, way_out)
    finally:
        cleanup(agent)


def launcher_failed(agent: Agent, exc: Exception) -> Exit:
    """Tell the other launchers at once instead of letting them wait for the heart-beat."""
    way_out = wayout.crashed(exc)
    if agent.member is not None and agent.index is not None:
        with contextlib.suppress(Exception):
            agent.member.publish_quietly(agent.index, FailureKind.LAUNCHER, way_out.ending.reason)
    return way_out


def finish(agent: Agent, way_out: Exit) -> Ending:
    """The one way out: event line, outcome record, node 0's announcement and linger, a
    peer's confirmation. A store host that a successor superseded writes nothing."""
    a = agent
    a.phases.append(Phase.END)
    a.store_loss.cancel_handover()
    if a.workers is not None:
        a.workers.kill_now()
    if way_out.message:
        a.ev.event(way_out.message)
    superseder = a.store_loss.superseded_by() if a.coordinator is not None else None
    if superseder is not None:
        ending = policy.superseded(superseder)
        a.ev.event(f"{ending.reason}: this launcher writes nothing more; exiting {ending.exit_code}")
        return ending
    budget = policy.records_budget(
        a.launch.write_timeout, a.launch.term_timeout, a.sig.received_at, time.monotonic()
    )
    a.books.io.timeout = min(a.books.io.timeout, max(0.1, budget))
    with contextlib.suppress(OSError):
        a.books.flush()
    # Node 0 (or a peer that writes the outcome itself) persists before the outcome
    # record, which says what could not be; the other peers after their last word with
    # node 0, which may leave meanwhile (see the end), unless node 0 then kills the job
    # step: such a peer persists before it confirms, while node 0 waits for it.
    persists_last = a.coordinator is None and not way_out.ends_step and not wayout.kills_step(way_out.ending)
    if not persists_last:
        _persist_snapshots(a, way_out.ending)
    if way_out.ends_step:  # node 0 writes nothing any more: this peer's view is the outcome
        a.books.node0_lost(a.run, way_out.ending, budget)
    if a.coordinator is not None:
        a.run = a.coordinator.retired(a.run)
    if a.client is not None:
        a.run = dataclasses.replace(a.run, store_values_ignored=a.client.sealer.rejected())
    ending, problem = a.books.settle(a.run, way_out.ending, budget)
    if problem is not None:
        a.ev.event(f"records not written: {problem}; exiting {ending.exit_code}")
        way_out = dataclasses.replace(way_out, ending=ending)
    if a.prom is not None:
        a.export_metrics()
        a.prom.flush()
    if a.coordinator is not None:
        if wayout.kills_step(way_out.ending) and a.snapshots.persists:  # the peers persist first
            way_out = dataclasses.replace(way_out, linger=way_out.linger + a.launch.snapshot_persist_timeout)
        a.coordinator.announce(way_out, a.run)
        if wayout.kills_step(way_out.ending):
            wayout.end_step(a.cfg.step_killer, a.ev.event, way_out.ending.lost_nodes)
    elif way_out.ends_step:
        wayout.end_step(a.cfg.step_killer, a.ev.event, way_out.ending.lost_nodes)
    elif way_out.ack and a.client is not None:
        with contextlib.suppress(StoreLost):
            a.client.ack(a.cfg.job.node_rank)
    if persists_last and a.snapshots.persists:
        a.threads.stop()  # node 0 leaving now is no store loss: nothing may kill the persist
        _persist_snapshots(a, way_out.ending)
        a.books.io.settle(budget)
    return way_out.ending


def _persist_snapshots(agent: Agent, ending: Ending) -> None:
    if not agent.snapshots.persists:
        return
    from slurm_ft.launch.cycle import snapshotting  # a job that snapshots alone imports it

    agent.run = snapshotting.persist(
        agent.snapshots, agent.books, agent.cfg, agent.run, ending, agent.sig.received_at, time.monotonic()
    )


def cleanup(agent: Agent) -> None:
    """Runs on every way out: no worker group, no orphan, survives the launcher."""
    a = agent
    if a.workers is not None:
        a.workers.kill_now()
    if a.standbys is not None:
        a.standbys.close()
    a.books.io.close(1.0)
    if a.seams.reap_orphans:
        wk.kill_orphans(os.getpid())
    a.threads.stop()
    if a.coordinator is not None:
        a.coordinator.close()
    privatefiles.remove_tree(a.run_dir)
    if a.lost_nodes is not None:
        a.lost_nodes.close()
    a.snapshots.close()
    if a.member is not None:
        a.member.close()
    a.wake.close()
