"""The launcher's cycle loop: health, join, decide, run, watch, stop; repeat or finish.

Every other concern has its own module: the decisions, as pure functions tested as data,
in ``policy``; the store protocol in ``rendezvous``; a peer's last resort against a frozen
node 0 in ``watchdog``; process handling in ``workers``; record formats in ``records`` and
where and when this launcher writes them in ``bookkeeping``; the job-wide cycle counter
in ``cyclecount``; facts about the host (a free port, the GPU count) in ``hostprobe``.
This module wires them together and owns the one rule that matters most on the way out:
whatever happens — success, failure, a signal, a bug in the launcher — no worker process
group survives :func:`run`.

Decisions and their exit codes (every launcher of the attempt ends with the same code,
except a launcher that received a terminating signal itself, which exits 128+N):

* all workers everywhere exited 0                      -> 0
* a worker failed and the restart budget is spent      -> 1
* a launcher was lost, left on a signal, or never joined -> 1 (a fixed-size job cannot
  continue without it, so there is no point in another cycle)
* a node failed its health check before a join         -> 94 on every node, the outcome
  record lists the node(s) in ``unhealthy_nodes``; the peers do not wait for the join
  timeout
* the no-progress guard said stop                      -> 93
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_ft import health
from slurm_ft.config import Settings
from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch import applog as applog_mod
from slurm_ft.launch import cyclecount, hostprobe, policy, records, watchdog
from slurm_ft.launch import rendezvous as rdzv
from slurm_ft.launch import workers as wk
from slurm_ft.launch.bookkeeping import Bookkeeper, RunState
from slurm_ft.launch.eventlog import EventLog
from slurm_ft.launch.records import Failure
from slurm_ft.launch.signals import SignalBox
from slurm_ft.progress import LedgerError, ProgressTracker
from slurm_ft.slurm import SlurmJob
from slurm_ft.statedir import StateDir

DECISION_GRACE_S = 30.0
SIGNAL_LINGER_S = 2.0


class BadInput(Exception):
    """Input found wrong only once the launcher started (port in use, corrupt ledger): exit 2."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class AgentConfig:
    job: SlurmJob
    settings: Settings
    entry: wk.Entry
    topo: wk.Topology
    state: StateDir
    rdzv_port: int  # unused (0) on a single node: the store is in process
    base_env: Mapping[str, str]
    python: str
    cwd: str
    health_checks: bool  # run the health checks before each join
    run_id: str
    signals: tuple[int, ...]
    spawn_helper: tuple[str, ...] = ()  # workers.pdeathsig_helper()


def run_id_for(job: SlurmJob) -> str:
    return f"{job.job_key}-a{job.attempt}"


# --------------------------------------------------------------------------- the loop


@dataclass
class WatchEnd:
    """How the watch phase of a cycle ended on this node."""

    kind: str  # "success" | "failure" | "signal" | "lost"
    failure: Failure | None = None
    signum: int | None = None
    detail: str = ""


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        events: EventLog,
        signals: SignalBox,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.ev = events
        self.sig = signals
        self.clock = clock
        self.launch = cfg.settings.launch
        self.is_node0 = cfg.job.node_rank == 0
        self.client: rdzv.Client | None = None
        self.heartbeat: rdzv.Heartbeat | None = None
        self.watchdog: watchdog.StoreWatchdog | None = None
        self.waiter: rdzv.HaltWaiter | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.monitor: rdzv.PeerMonitor | None = None
        self.group: wk.WorkerGroup | None = None
        self.tracker: ProgressTracker | None = None
        self.st = RunState()
        self.books = Bookkeeper(cfg.state, cfg.job, cfg.run_id, cfg.topo, self.st, clock)
        self.baseline: Any = None
        self.current: int | None = None  # index of the cycle being joined or run

    # ------------------------------------------------------------------ helpers

    def _abort(self) -> bool:
        return self.sig.received is not None

    def _name(self, node_rank: int) -> str:
        if node_rank < len(self.st.nodes):
            return self.st.nodes[node_rank]
        return f"node-rank-{node_rank}"

    def _start_threads(self) -> None:
        assert self.client is not None
        host = "127.0.0.1" if self.is_node0 else self.cfg.topo.master_addr
        op_timeout = self.launch.heartbeat_timeout
        if self.is_node0:
            if self.cfg.job.num_nodes > 1:
                self.monitor = rdzv.PeerMonitor(
                    self.client.clone(host, op_timeout),
                    self.cfg.job.num_nodes,
                    self.launch.heartbeat_interval,
                    self.launch.heartbeat_timeout,
                )
                self.monitor.start()
        else:
            self.heartbeat = rdzv.Heartbeat(
                self.client.clone(host, op_timeout),
                self.cfg.job.node_rank,
                self.launch.heartbeat_interval,
                self.launch.heartbeat_timeout,
            )
            self.heartbeat.start()
            self.watchdog = watchdog.StoreWatchdog(self.heartbeat, self._emergency_exit, watchdog.GRACE_S)
            self.watchdog.start()

        if self.cfg.job.num_nodes > 1:
            self.waiter = rdzv.HaltWaiter(self.client.clone(host, op_timeout), self._wake_w)
            self.waiter.start()

    def _emergency_exit(self, why: str) -> None:
        """Called on the watchdog thread: the main thread is stuck on a frozen store."""
        self.ev.event(f"rendezvous store unresponsive ({why}); killing workers and exiting 1")
        group = self.group
        if group is not None:
            group.signal_groups(signal.SIGKILL)
        wk.kill_orphans(os.getpid())
        os._exit(int(ExitCode.WORKERS_FAILED))

    def _stop_threads(self) -> None:
        for t in (self.watchdog, self.heartbeat, self.monitor, self.waiter):
            if t is not None:
                t.stop()

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Node 0: bind the store (port in use -> BadInput), publish the base. Peers: connect."""
        cfg = self.cfg
        keys = rdzv.Keys(cfg.run_id)
        op_timeout = self.launch.heartbeat_timeout
        if self.is_node0:
            try:
                if cfg.job.num_nodes == 1:
                    self.client = rdzv.Client.local(keys)
                else:
                    self.client = rdzv.Client.host(cfg.rdzv_port, keys, op_timeout)
            except rdzv.StoreBindError as exc:
                raise BadInput(
                    f"cannot listen on rendezvous port {cfg.rdzv_port} ({exc}); choose another with "
                    "--rdzv-port or SLURM_FT_LAUNCH_RDZV_PORT"
                ) from None
            try:
                self.tracker = ProgressTracker(
                    cfg.state, cfg.settings.progress, cfg.job.attempt, on_warning=self.ev.event
                )
            except LedgerError as exc:
                raise BadInput(str(exc)) from None
            self.st.first_cycle = cyclecount.read_next_cycle(cfg.state)
            self.st.run_uuid = uuid.uuid4().hex
            self.client.prepare(cfg.job.num_nodes, rdzv.Base(self.st.first_cycle, self.st.run_uuid))
            where = (
                f"listening on port {self.client.port}" if cfg.job.num_nodes > 1 else "in process (one node)"
            )
            self.ev.event(f"rendezvous store {where}; run {cfg.run_id}, first cycle {self.st.first_cycle}")
        else:
            deadline = time.monotonic() + self.launch.join_timeout
            self.client = rdzv.Client.connect(
                cfg.topo.master_addr,
                cfg.rdzv_port,
                keys,
                deadline=deadline,
                op_timeout=op_timeout,
                abort=self._abort,
                sleep=self.sig.sleep,
            )
            base = self.client.wait_base(deadline=deadline, abort=self._abort, sleep=self.sig.sleep)
            if base is None:
                raise rdzv.StoreLost("node 0 did not publish the run within the join timeout")
            self.st.first_cycle = base.first_cycle
            self.st.run_uuid = base.run_uuid
            self.client.beat(cfg.job.node_rank)
            self.ev.event(f"joined rendezvous store at {cfg.topo.master_addr}:{cfg.rdzv_port}")
        self._start_threads()
        if cfg.health_checks:
            self.baseline = health.take_baseline(cfg.settings.health)

    # ------------------------------------------------------------------ health

    def _health(self) -> str | None:
        """None when healthy (or checks are off), else '<check>: <detail>'."""
        if not self.cfg.health_checks:
            return None
        report = health.run_checks(
            self.cfg.settings.health,
            node_name=self.cfg.job.node_name,
            expected_gpus=self.cfg.settings.health.gpus or self.cfg.job.gpus_on_node,
            baseline=self.baseline,
            own_pids=[os.getpid()],
        )
        first = report.first_failure
        if report.healthy or first is None:
            return None
        detail = f"{first.name}: {first.detail}"
        self.books.own_unhealthy(detail, report.to_json())
        self.ev.event(f"node unhealthy: {detail}")
        return detail

    # ------------------------------------------------------------------ join + decide

    def _decide_node0(self, i: int, cycle: int) -> rdzv.Decision:
        assert self.client is not None
        n = self.cfg.job.num_nodes
        prev = self.st.last_failure
        deadline = time.monotonic() + self.launch.join_timeout
        fast_until = time.monotonic() + rdzv.FAST_POLL_PERIOD_S
        interval = rdzv.FAST_POLL_S
        missing: list[str] = []
        lost: list[str] = []
        while True:
            if prev is not None and not prev.retryable:
                break
            joined, unhealthy = self.client.join_counts(i)
            if joined >= n or unhealthy > 0:
                break
            if self.monitor is not None and self.monitor.lost():
                break
            if self._abort():
                raise rdzv.Interrupted()
            if time.monotonic() >= deadline:
                break
            self.sig.sleep(interval)
            if time.monotonic() > fast_until:
                interval = min(interval * 1.5, 0.25)
        infos = self.client.join_records(i, n)
        names = [info.node_name if info else f"node-rank-{k}" for k, info in enumerate(infos)]
        if all(info is not None for info in infos):
            self.st.nodes = names
        missing = [names[k] for k, info in enumerate(infos) if info is None]
        unhealthy_pairs = [(info.node_name, info.unhealthy) for info in infos if info and info.unhealthy]
        if self.monitor is not None:
            lost = [self._name(k) for k in sorted(self.monitor.lost())]
        verdict = policy.decide(
            restart=i,
            max_restarts=self.launch.max_restarts,
            previous_failure=prev,
            unhealthy=unhealthy_pairs,
            lost=lost,
            missing=missing,
        )
        now = self.clock()
        if verdict.run and self.tracker is not None:
            reason = self.tracker.before_cycle(cycle)
            if reason is not None:
                verdict = policy.no_progress(reason)
        if not verdict.run:
            self.st.unhealthy_nodes = [node for node, _ in unhealthy_pairs]
            self.books.peers_unhealthy(unhealthy_pairs, now)
            return rdzv.Decision(
                "stop",
                cycle,
                reason=verdict.reason,
                exit_code=verdict.exit_code,
                start_time=now,
                nodes=tuple(names),
                unhealthy_nodes=tuple(self.st.unhealthy_nodes),
                first_failure=prev.to_json() if prev else None,
            )
        return rdzv.Decision(
            "run",
            cycle,
            master_port=hostprobe.free_port(),
            start_time=now,
            nodes=tuple(names),
        )

    def _join_and_decide(self, i: int, cycle: int, unhealthy: str | None) -> rdzv.Decision:
        assert self.client is not None
        cfg = self.cfg
        self.client.join(
            i,
            rdzv.JoinInfo(cfg.job.node_rank, cfg.job.node_name, socket.gethostname(), os.getpid(), unhealthy),
        )
        if self.is_node0:
            decision = self._decide_node0(i, cycle)
            if decision.run:
                # The start record must exist before workers read SLURM_FT_CYCLE_INFO; the
                # counter can wait until they run (the records alone also give the number).
                self.books.open_cycle(i, cycle, decision)
                self.books.defer(lambda: cyclecount.write_next_cycle(cfg.state, cycle + 1))
            else:
                self.books.flush()
                self.books.write_outcome(decision.exit_code, decision.reason, decision)
            self.client.publish_decision(i, decision)
            return decision
        decision = self.client.wait_decision(
            i,
            deadline=time.monotonic() + self.launch.join_timeout + DECISION_GRACE_S,
            abort=self._abort,
            sleep=self.sig.sleep,
            max_interval=0.25,
        )
        if decision is None:
            raise rdzv.StoreLost("no decision from node 0 within the join timeout")
        self.st.nodes = list(decision.nodes)
        if i > 0:
            self.books.defer(lambda: self._peer_close_record(i - 1, cycle - 1))
            if not decision.run:
                self.books.flush()
        return decision

    # ------------------------------------------------------------------ records

    def _peer_close_record(self, i: int, cycle: int) -> None:
        client = self.client
        if client is not None:
            self.books.peer_close(cycle, lambda: client.result(i))

    # ------------------------------------------------------------------ run + watch

    def _spawn(self, i: int, cycle: int, d: rdzv.Decision) -> tuple[wk.WorkerGroup, Any]:
        cfg = self.cfg
        topo = cfg.topo
        cyc = wk.CycleEnv(
            master_port=d.master_port,
            restart_count=i,
            max_restarts=self.launch.max_restarts,
            run_id=cfg.run_id,
            cycle=cycle,
            cycle_info=str(cfg.state.cycle_record(cycle)),
        )
        argv = tuple(cfg.entry.argv(cfg.python))
        specs = []
        for local in range(topo.nproc_per_node):
            rank = topo.global_rank(local)
            err = cfg.state.error_file(cycle, rank)
            err.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                err.unlink()
            specs.append(
                wk.WorkerSpec(local, rank, argv, wk.worker_env(cfg.base_env, topo, local, cyc, str(err)))
            )
        app = self._open_applog(cycle)
        fds: dict[int, int] = {}
        if app is not None:
            for spec in specs:
                r, w = applog_mod.open_worker_pipe()
                fds[spec.local_rank] = w
                app.attach(spec.rank, spec.local_rank, r)
        try:
            group = wk.spawn(specs, cwd=cfg.cwd, output_fds=fds or None, helper=cfg.spawn_helper)
        finally:
            for w in fds.values():
                os.close(w)
        self.group = group
        return group, app

    def _open_applog(self, cycle: int) -> Any:
        s = self.cfg.settings.applog
        if not s.prefix and not s.tee:
            return None
        path = None
        if s.prefix:
            path = applog_mod.cycle_log_path(s.prefix, cycle, self.cfg.job.node_rank if s.per_node else None)
        return applog_mod.AppLog(
            path,
            rank_width=len(str(max(0, self.cfg.topo.world_size - 1))),
            line_cap=s.line_cap_bytes,
            drain_timeout=s.drain_timeout,
            tee=s.tee,
            tee_local_ranks=frozenset(s.local_ranks_filter) if s.local_ranks_filter is not None else None,
            events=self.ev,
        )

    def _worker_failure(self, cycle: int, e: wk.WorkerExit) -> Failure:
        message, tb = records.read_error_file(self.cfg.state.error_file(cycle, e.rank))
        return Failure(
            kind="worker",
            node=self.cfg.job.node_name,
            node_rank=self.cfg.job.node_rank,
            time=e.when,
            rank=e.rank,
            local_rank=e.local_rank,
            exit_code=e.exit_code,
            signal=e.signal,
            detail=e.describe(),
            message=message,
            traceback=tb,
        )

    def _watch(self, i: int, cycle: int, group: wk.WorkerGroup) -> WatchEnd:
        assert self.client is not None
        n = self.cfg.job.num_nodes
        done_marked = False
        tick = self.launch.monitor_interval
        if self.waiter is not None:
            self.waiter.watch(i)
        while True:
            exits = group.wait(tick, extra_fds=[self.sig.fd, self._wake_r])
            self.sig.drain()
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self._wake_r, 64)
            if self.sig.received is not None:
                return WatchEnd("signal", signum=int(self.sig.received))
            try:
                bad = [e for e in exits if not e.ok]
                if bad:
                    first = bad[0]
                    self.ev.event(f"worker rank {first.rank} (local {first.local_rank}) {first.describe()}")
                    won = self.client.publish_failure(i, self._worker_failure(cycle, first))
                    return WatchEnd("failure", failure=won)
                for e in exits:
                    self.ev.event(f"worker rank {e.rank} (local {e.local_rank}) finished")
                if not done_marked and group.all_succeeded():
                    self.client.mark_done(i)
                    done_marked = True
                poll = self.client.poll(i)
                if poll.failure is not None:
                    return WatchEnd("failure", failure=poll.failure)
                if poll.done >= n:
                    self.client.halt(i)  # wakes the others at once
                    return WatchEnd("success")
                if self.monitor is not None:
                    lost = self.monitor.lost()
                    if lost:
                        node = min(lost)
                        f = Failure(
                            kind="lost-node",
                            node=self._name(node),
                            node_rank=node,
                            time=self.clock(),
                            detail=f"launcher silent for {lost[node]:.1f}s (heartbeat lost)",
                        )
                        won = self.client.publish_failure(i, f)
                        return WatchEnd("failure", failure=won)
            except rdzv.StoreLost as exc:
                return WatchEnd("lost", detail=str(exc))
            if self.heartbeat is not None:
                why = self.heartbeat.lost()
                if why:
                    return WatchEnd("lost", detail=why)

    def _stop_workers(self, group: wk.WorkerGroup, signum: int, timeout: float) -> None:
        running = len(group.running())
        group.stop(signum, timeout)
        if running:
            self.ev.event(f"stopped {running} worker(s) with {_signame(signum)}")

    def _gpu_release(self, pids: list[int]) -> None:
        ok, detail = health.wait_for_release(
            pids, self.launch.gpu_release_timeout, self.launch.gpu_release_tolerance_mib
        )
        if not ok:
            self.ev.event(f"GPU memory not released: {detail}")

    # ------------------------------------------------------------------ main

    def loop(self) -> int:
        self.start()
        assert self.client is not None
        i = 0
        while True:
            cycle = self.st.first_cycle + i
            self.current = i
            unhealthy = self._health() if (self.launch.health_before_join or i == 0) else None
            try:
                decision = self._join_and_decide(i, cycle, unhealthy)
            except rdzv.StoreLost as exc:
                return self._lost_store(str(exc), ExitCode.UNHEALTHY if unhealthy else None)
            except rdzv.Interrupted:
                return self._signalled_between_cycles()
            if not decision.run:
                return self._finish(decision)
            if unhealthy:  # node 0 must have stopped; never start workers on a bad node
                return int(ExitCode.UNHEALTHY)
            end = self._run_cycle(i, cycle, decision)
            if end is not None:
                return end
            i += 1

    def _run_cycle(self, i: int, cycle: int, decision: rdzv.Decision) -> int | None:
        """Run one cycle; an exit code when the launcher must end, None for the next join."""
        assert self.client is not None
        cfg = self.cfg
        if not self.is_node0:
            self.books.peer_open(i, cycle, decision)
        self.st.cycles_run += 1
        self.st.last_cycle = cycle
        self.ev.event(
            f"cycle {cycle} (restart {i}/{self.launch.max_restarts}): starting {cfg.topo.nproc_per_node} "
            f"worker(s), ranks {cfg.topo.ranks.start}-{cfg.topo.ranks.stop - 1} of {cfg.topo.world_size}, "
            f"MASTER_PORT {decision.master_port}"
        )
        group, app = self._spawn(i, cycle, decision)
        try:
            self.books.flush()
            end = self._watch(i, cycle, group)
            if end.kind == "signal":
                assert end.signum is not None
                self.ev.event(f"received {_signame(end.signum)}: forwarding to workers")
                self._publish_quietly(
                    i,
                    Failure(
                        kind="signal",
                        node=cfg.job.node_name,
                        node_rank=cfg.job.node_rank,
                        time=self.clock(),
                        detail=f"launcher received {_signame(end.signum)}",
                    ),
                )
                self._stop_workers(group, end.signum, self.launch.term_timeout)
            else:
                if end.failure is not None:
                    self.ev.event(f"cycle {cycle} failed: {end.failure.describe()}")
                    if end.failure.traceback:
                        self.ev.event(f"traceback of rank {end.failure.rank}: {end.failure.traceback}")
                elif end.kind == "lost":
                    self.ev.event(f"lost the rendezvous store: {end.detail}")
                self._stop_workers(group, signal.SIGTERM, self.launch.workers_stop_timeout)
        finally:
            if app is not None:
                stats = app.close()
                if getattr(stats, "lost_lines", 0):
                    self.ev.event(f"application log lost {stats.lost_lines} line(s) in cycle {cycle}")
        self._gpu_release(group.pids)
        if end.failure is not None:
            self.st.last_failure = end.failure
        outcome = {
            "success": records.SUCCEEDED,
            "failure": records.FAILED,
            "signal": records.SIGNALLED,
            "lost": records.LOST,
        }[end.kind]
        result = rdzv.CycleResult(outcome, self.clock(), end.failure.to_json() if end.failure else None)
        if self.is_node0:
            self._close_cycle_node0(i, cycle, decision, result)
        if end.kind == "success":
            self.ev.event(f"cycle {cycle}: all workers on all nodes finished")
            return self._finish_success(i, cycle, decision)
        if end.kind == "signal":
            assert end.signum is not None
            return self._finish_signal(i, cycle, end.signum)
        if end.kind == "lost":
            return self._lost_store(end.detail, None)
        return None

    def _publish_quietly(self, i: int, failure: Failure) -> None:
        if self.client is None:
            return
        with contextlib.suppress(rdzv.StoreLost):
            self.client.publish_failure(i, failure)

    def _close_cycle_node0(self, i: int, cycle: int, d: rdzv.Decision, result: rdzv.CycleResult) -> None:
        """Record the cycle's end. After a failure, the record file is written once the next
        cycle's workers run: it is not on the restart's critical path. The ledger is, since
        the next decision reads it."""
        assert self.client is not None
        if result.outcome != records.SUCCEEDED:
            with contextlib.suppress(rdzv.StoreLost):
                self.client.publish_result(i, result)
            self.books.close_cycle(i, cycle, d, result, later=True)
            if self.tracker is not None:
                self.tracker.after_cycle(cycle, result.outcome)
            return
        self.books.close_cycle(i, cycle, d, result, later=False)
        if self.tracker is not None:
            self.tracker.after_cycle(cycle, result.outcome)
        self.st.last_failure = None
        self.books.write_outcome(0, "all workers finished", d)
        with contextlib.suppress(rdzv.StoreLost):
            self.client.publish_result(i, result)

    def _finish_success(self, i: int, cycle: int, d: rdzv.Decision) -> int:
        assert self.client is not None
        if self.is_node0:
            self._linger()
            return 0
        try:
            result = self.client.wait_result(
                i,
                deadline=time.monotonic() + self.launch.result_linger_timeout,
                abort=self._abort,
                sleep=self.sig.sleep,
            )
            self.client.ack()
        except (rdzv.StoreLost, rdzv.Interrupted):
            result = None
        self.st.last_failure = None
        self._peer_close_record(i, cycle)
        self.books.peer_outcome(0, "all workers finished", d)
        if result is None:
            self.ev.event("finished, but node 0 did not confirm the result")
        return 0

    def _linger(self, limit: float | None = None) -> None:
        """Node 0 keeps the store up until every live peer has read the final answer.

        Peers known to be gone (lost, or left on a signal) are not waited for."""
        assert self.client is not None
        n = self.cfg.job.num_nodes
        if n <= 1:
            return
        gone: set[int] = set()
        f = self.st.last_failure
        if f is not None and not f.retryable and f.node_rank != 0:
            gone.add(f.node_rank)
        timeout = self.launch.result_linger_timeout if limit is None else limit
        deadline = time.monotonic() + timeout
        interval = 0.005
        while True:
            lost = set(self.monitor.lost()) if self.monitor else set()
            expected = len(set(range(1, n)) - gone - lost)
            try:
                if self.client.acks() >= expected:
                    return
            except rdzv.StoreLost:
                return
            if time.monotonic() >= deadline:
                self.ev.event(f"not every peer confirmed the final answer within {timeout:.0f}s")
                return
            time.sleep(interval)
            interval = min(interval * 1.5, 0.1)

    def _finish(self, d: rdzv.Decision) -> int:
        """A stop decision: every launcher ends with its exit code."""
        self.ev.event(f"stopping: {d.reason} (exit {d.exit_code})")
        if self.is_node0:
            self._linger()
        else:
            with contextlib.suppress(rdzv.StoreLost):
                assert self.client is not None
                self.client.ack()
            self.st.unhealthy_nodes = list(d.unhealthy_nodes)
            self.books.peer_outcome(d.exit_code, d.reason, d)
        return d.exit_code

    def _finish_signal(self, i: int, cycle: int, signum: int) -> int:
        code = policy.exit_for_signal(signum)
        reason = f"{self.cfg.job.node_name} received {_signame(signum)}"
        if self.is_node0:
            self.books.write_outcome(code, reason)
            # Peers that did not get the signal learn it at their next join.
            assert self.client is not None
            with contextlib.suppress(rdzv.StoreLost):
                self.client.publish_decision(
                    i + 1,
                    rdzv.Decision(
                        "stop",
                        cycle + 1,
                        reason=reason,
                        exit_code=int(ExitCode.WORKERS_FAILED),
                        start_time=self.clock(),
                        nodes=tuple(self.st.nodes),
                    ),
                )
            self._linger(SIGNAL_LINGER_S)
        else:
            self.books.peer_outcome(code, reason, None)
        self.ev.event(f"exiting {code} after {_signame(signum)}")
        return code

    def _signalled_between_cycles(self) -> int:
        assert self.sig.received is not None
        signum = int(self.sig.received)
        code = policy.exit_for_signal(signum)
        self.ev.event(f"received {_signame(signum)} between cycles; exiting {code}")
        if self.is_node0:
            self.books.write_outcome(code, f"received {_signame(signum)}")
        return code

    def _lost_store(self, detail: str, code: ExitCode | None) -> int:
        if self.sig.received is not None:
            return self._signalled_between_cycles()
        exit_code = int(code if code is not None else ExitCode.WORKERS_FAILED)
        self.ev.event(f"lost the rendezvous store ({detail}); exiting {exit_code}")
        self.books.peer_outcome(exit_code, f"lost node 0: {detail}", None)
        return exit_code

    def report_own_failure(self, detail: str) -> None:
        """Best effort: publish this launcher's own failure as the cycle's failure."""
        if self.client is None or self.current is None:
            return
        with contextlib.suppress(Exception):
            self._publish_quietly(
                self.current,
                Failure(
                    kind="launcher",
                    node=self.cfg.job.node_name,
                    node_rank=self.cfg.job.node_rank,
                    time=self.clock(),
                    detail=detail,
                ),
            )

    # ------------------------------------------------------------------ cleanup

    def cleanup(self) -> None:
        """Runs on every way out: no worker group, no orphan, survives the launcher."""
        if self.group is not None:
            self.group.kill_now()
        wk.kill_orphans(os.getpid())
        self._stop_threads()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def run(cfg: AgentConfig, events: EventLog) -> int:
    """Run the launcher until its final exit code. Raises BadInput for exit-2 conditions
    found after start; any other exception is the launcher's own failure (exit 1), with the
    workers already stopped."""
    wk.become_subreaper()
    signals = SignalBox(cfg.signals)
    agent = Agent(cfg, events, signals)
    try:
        return agent.loop()
    except rdzv.Interrupted:
        return agent._signalled_between_cycles()
    except rdzv.StoreLost as exc:
        return agent._lost_store(str(exc), None)
    except BadInput:
        raise
    except Exception as exc:
        # Tell the other launchers at once instead of letting them wait for the heart-beat.
        agent.report_own_failure(f"launcher failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        agent.cleanup()
        signals.close()
        with contextlib.suppress(Exception):
            agent.books.flush()


__all__ = [
    "AgentConfig",
    "BadInput",
    "run",
    "run_id_for",
]
