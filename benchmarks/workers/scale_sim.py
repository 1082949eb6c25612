"""Scale simulation (issue 45): N launchers hold the store connections real launchers hold.

Node 0 ("host") opens the store with ``stores.host`` (as node 0 does), publishes the run
with ``Client.prepare`` and runs the real ``BackgroundSet`` of node 0 (peer monitor and halt
waiter, each on its own connection). Every other launcher is a thread of a "peers" process:
it connects with ``Client.connect`` (the real connect, back-off included), reads the run
with ``wait_base`` and starts the real ``BackgroundSet`` of a peer (heart-beat, store
watchdog, halt waiter: three connections in all, as a launcher holds), then waits on its
wake pipe as the agent's main loop does.

Phases, all timed on ``time.monotonic()`` (one clock for every process here):
connect: every peer released at once; the host reports when the last one holds its three
connections. launch: every launcher joins cycle 0 and holds node 0's decision, as a job
starts (each reads the big job's placement here, once). steady: node 0's CPU (its
process: the store's loop thread, the peer monitor and the halt waiter) and RSS while
every peer heart-beats. halt: node 0 halts cycle 0
(``Client.halt``, what a failure anywhere does) and each peer notes when its halt waiter
woke it: the restart's first leg, failure to every launcher told.

restart: after the halt every peer joins cycle 1 (``Client.join``) and waits for node 0's
decision (``wait_decision``); node 0 gathers (``joined``, ``join_records``), asks the real
``policy.decide`` and publishes it: a failure anywhere to every launcher holding the next
decision, and its rendezvous (the last launcher joined to the last holding the decision).
Its placement is cycle 0's (the same nodes): what a restart without a replaced node reads.

succession (SUCC_PORT not 0): once every peer holds cycle 1's decision and watches its
halt, node 0 prints its figures and waits; the harness stops every peer process (SIGSTOP),
kills node 0 (its connections close, as when its launcher is killed) and resumes the peers
once node 0's exit is complete: on a cluster node 0's kernel closes its connections on a
node of its own, and here its exit would compete for two cores with the thousands of
launcher threads that notice it first (it took up to 90 s so). Each peer learns it from
its own threads (``BackgroundSet.store_lost``), stops them and runs the real succession
rule: the order of candidates, the claim in a state dir shared by all (``rule.settle``).
The winner (the lowest survivor) opens the next epoch's store (``stores.host`` on
SUCC_PORT, the next epoch's keys, the same run), notes its port (``rule.publish_port``),
gathers the joins with node 0's own gather (``joins.gather``) and publishes its first
decision; every follower waits for the note (``rule.await_port``), finds the store and the
run as a launcher does (``find_run``), beats, joins and waits for the decision
(``decisionwait.await_decision``). Each new connection takes the placement its launcher
held on the old one (``inherit_placements``, as ``storeloss`` does). Timed: the loss to
the successor's first decision, and to every launcher holding it. A launcher that holds it
goes on (its thread waits), and its process stays until every process's launchers hold it:
on a cluster each launcher's node goes on by itself, where here a thread's or a process's
end took the two cores from the launchers still to hold it.

Not simulated: workers (a real restart also stops them and starts new ones), health
checks, files; in a succession the coordinator's own take-over (its spares book and the
fence of the lost host: a decision placing the survivors is published instead) and the
followers' new heart-beat threads (one connection each to the successor, not three). A peer
process's threads keep its interpreter's lock until they block or 0.5 s passes (Python's own
5 ms woke hundreds of waiting threads 200 times a second each: the packing's cost, see
``scale.PEER_SWITCH_INTERVAL_S``), and on one core (``scale.peer_cores``: spread over two,
each hand-over of that lock woke a thread on the other core). Each launcher freezes its
heap once it holds its first decision, as the launcher's agent does
(``lifelong.keep_what_exists``). Each process prints one JSON line.

Usage: scale_sim.py host  N PORT STEADY_S
       scale_sim.py peers N PORT FIRST END GO_AT SUCC_PORT STATE_DIR
"""

from __future__ import annotations

import json
import os
import resource
import select
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

from slurm_ft import lifelong
from slurm_ft.launch.policy import decide
from slurm_ft.launch.rendezvous import beatperiod, resolver, stores
from slurm_ft.launch.rendezvous.background import BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client, find_run
from slurm_ft.launch.rendezvous.decisionwait import await_decision
from slurm_ft.launch.rendezvous.protocol import Action, Base, Decision, JoinInfo, Keys, next_epoch
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.roles.joins import JoinWait, gather
from slurm_ft.launch.succession import rule
from slurm_ft.launch.succession.storeloss import SUCCESSION_TURN_MIN_S
from slurm_ft.records import SuccessionClaim
from slurm_ft.statedir import StateDir

ADDRESS = "127.0.0.1"
INTERVAL_S = 1.0  # the heart-beat interval's default
TIMEOUT_S = 60.0  # generous: the machine is shared; a lost peer here is a harness failure
SEALER = Sealer(b"the scale harness's job secret!!")  # values sealed, as with the templates' secret
RUN_ID = "bench-scale"
RUN_UUID = "scale"
KEYS = Keys(RUN_ID, SEALER.namespace)
JOIN_TIMEOUT_S = 900.0
# BENCH_SCALE_BEATS_PER_S: node 0's beat budget for a comparison (a huge one: every peer
# beats each second, as before the stretch); unset, the launcher's own.
if os.environ.get("BENCH_SCALE_BEATS_PER_S"):
    beatperiod.NODE0_BEATS_PER_S = int(os.environ["BENCH_SCALE_BEATS_PER_S"])
READY = "bench-scale-sync/connected"
HELD = "bench-scale-sync/held"  # peers holding cycle 1's decision
# Files in the state dir: a peer process's once its launchers' succession is over; the
# harness's once every process's is (the launchers, and the successor's store, may end).
DONE = "done-{first}"
RELEASED = "released"
_SUCCESSOR_STORE: list[Client] = []
_NODE0_KEPT: list[object] = []  # node 0's store, threads and connections, until it is killed


def _rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def never() -> bool:
    return False


def _readable(fd: int, timeout: float) -> bool:
    """poll, not select: a peer process holds more than 1,024 descriptors (128 launchers'
    connections, and a successor's store)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def _how_lost(threads: BackgroundSet) -> str:
    """The thread that learned of the loss: a broken halt wait, a failed beat, or the
    heart-beat's silence (no beat answered within the timeout)."""
    if threads.waiter is not None and threads.waiter.lost_store:
        return "halt-waiter"
    return "silence" if threads.store_silent() else "heartbeat"


_STEP = threading.local()  # this launcher thread's last step and its CPU time then
STEP_CPU: Counter[str] = Counter()  # "a->b": the launchers' CPU from step a to b, summed
STEP_AT: dict[str, list[float]] = {}  # a succession step: when each launcher reached it
_STEP_LOCK = threading.Lock()


def _step(name: str) -> None:
    """Where a launcher's own thread spends its CPU in a restart or a succession: from its
    last step (none after "start") to this one, on ``time.thread_time`` (the other threads'
    share, the kept threads' and the successor's store, is what the process's CPU has
    beyond it)."""
    now = time.thread_time()
    last = getattr(_STEP, "last", None)
    if last is not None and name != "start":
        with _STEP_LOCK:
            STEP_CPU[f"{last[0]}->{name}"] += now - last[1]
            if getattr(_STEP, "succession", False):
                STEP_AT.setdefault(name, []).append(time.monotonic())
    _STEP.last = (name, now)


def _mark(name: str, at: float | None = None) -> None:
    """When the successor reached a step of its own (its CPU is its process's): now, or
    ``at``."""
    with _STEP_LOCK:
        STEP_AT.setdefault(name, []).append(time.monotonic() if at is None else at)


def host(n: int, port: int, steady_s: float) -> dict:
    # BENCH_SCALE_TORCH_LISTENER=1: torch listens itself, as before issue 45 (the comparison)
    own = os.environ.get("BENCH_SCALE_TORCH_LISTENER") != "1"
    client = Client.host(port, KEYS, TIMEOUT_S, SEALER, address=ADDRESS if own else None)
    client.prepare(n, Base(0, "scale"))
    wake = WakePipe()
    threads = BackgroundSet.start(
        client,
        node_rank=0,
        num_nodes=n,
        interval=INTERVAL_S,
        timeout=TIMEOUT_S,
        wake_fd=wake.write_fd,
        emergency=lambda why: None,
    )
    sync = stores.reconnect(ADDRESS, client.port, TIMEOUT_S)  # the harness's own keys, not counted
    print(json.dumps({"listening": True}), flush=True)
    client.join(0, JoinInfo(0, "node0", ADDRESS, os.getpid()))
    launch_decided_at = _decide(client, 0, n, frozenset())[1]  # the launch: every peer reads it first
    lifelong.keep_what_exists()  # as node 0's agent does once its first decision is made
    threads.watch_halt(0)
    stores.wait(sync, [f"{READY}/{n - 1}"], 900.0)
    connected_at = time.monotonic()
    cpu0, t0 = _cpu_s(), time.monotonic()
    time.sleep(steady_s)
    cpu = (_cpu_s() - cpu0) / (time.monotonic() - t0) * 100
    lost = len(threads.lost_peers())
    halted_at = time.monotonic()
    client.halt(0)
    client.join(1, JoinInfo(0, "node0", ADDRESS, os.getpid()))
    joined_at, decided_at = _decide(client, 1, n, frozenset())
    deadline = time.monotonic() + 900
    while int(sync.add(HELD, 0)) < n - 1 and time.monotonic() < deadline:  # outlive their reads
        time.sleep(0.01)
    # every peer now watches cycle 1's halt; the harness ends this process (a succession),
    # which holds node 0's connections until then
    _NODE0_KEPT.extend((client, threads, sync))
    return {
        "connected_at": connected_at,
        "launch_decided_at": launch_decided_at,
        "steady_cpu_pct": cpu,
        "rss_mib": _rss_mib(),
        "lost_peers": lost,
        "halted_at": halted_at,
        "joined_at": joined_at,
        "decided_at": decided_at,
    }


def _decide(client: Client, i: int, n: int, departed: frozenset[int]) -> tuple[float, float]:
    """Node 0's gather of cycle i (its own ``joins.gather``) and a decision by the real
    policy, published with the real client call. ``departed``: the launchers known gone (a
    successor's lost host), which the gather does not wait for."""
    wait = JoinWait(client, n, with_spares=bool(departed), departed=departed, lost_peers=dict)
    roster = gather(wait, i, None, (), JOIN_TIMEOUT_S, never, time.sleep)
    joined_at = time.monotonic()
    missing = [name for k, name in enumerate(roster.names) if roster.joins[k] is None and k not in departed]
    verdict = decide(restart=i, max_restarts=3, previous_failure=None, unhealthy=[], lost=[], missing=missing)
    if not verdict.run:
        raise RuntimeError(f"node {min(set(range(n)) - departed)} decided stop: {verdict.reason}")
    # a placement, as every decision of a job with spares has (and a succession needs one):
    # the hostlist, and the launcher of each node rank (here the lost host's rank is dropped,
    # where the coordinator would give it a spare)
    active = tuple(k for k in range(n) if k not in departed)
    decision = Decision(
        Action.RUN, i, master_port=29500, start_time=time.time(), nodes=roster.names, active=active
    )
    decided_at = time.monotonic()  # before the write: a waiter may hold it before the write returns
    client.publish_decision(i, decision)
    return joined_at, decided_at


def _lead(k: int, n: int, succ_port: int, state: StateDir, old: Client) -> float:
    """The successor: the next epoch's store on this host, the same run, then its port
    noted (``handover.lead``'s order: a note leads no follower to a store without the run);
    then node 0's gather and decision of the first cycle of the epoch. When it published."""
    keys = next_epoch(KEYS)
    client = Client.host(succ_port, keys, TIMEOUT_S, SEALER, address=ADDRESS)
    _mark("lead:store_open")
    client.prepare(n, Base(0, RUN_UUID, keys.epoch, k, 2))
    client.inherit_placements(old)  # as the launcher's succession does
    rule.publish_port(state.succession_port(RUN_ID, keys.epoch), client.port)
    _mark("lead:port_noted")
    client.join(2, JoinInfo(k, f"node{k}", ADDRESS, os.getpid()))
    decided_at = _decide(client, 2, n, frozenset({0}))[1]
    _mark("lead:decided", decided_at)  # before the write: a follower may hold it before it returns
    _SUCCESSOR_STORE.append(client)  # serves every follower until the process ends
    return decided_at


def _follow(
    k: int, n: int, leader: int, succ_port: int, state: StateDir, old: Client
) -> tuple[Decision | None, float]:
    """A follower: the successor's store as ``handover.follow`` finds it, then the join;
    the decision and when it was held."""
    keys = next_epoch(KEYS)
    ports = (succ_port,)
    _step("settled")
    noted = rule.await_port(
        state.succession_port(RUN_ID, keys.epoch),
        ports,
        until=time.monotonic() + rule.PORT_WAIT_S,
        abort=never,
        look=rule.look_period(n),
    )

    def ours(base: Base) -> bool:
        return base.run_uuid == RUN_UUID and base.epoch == keys.epoch and base.host == leader

    client, base = find_run(
        ADDRESS,
        rule.ports_to_try(ports, noted),
        keys,
        SEALER,
        deadline=time.monotonic() + JOIN_TIMEOUT_S,
        op_timeout=TIMEOUT_S,
        abort=never,
        sleep=time.sleep,
        accept=ours,
        noted=noted,
    )
    _step("found_run")
    client.beat(k)
    client.inherit_placements(old)
    client.join(base.index, JoinInfo(k, f"node{k}", ADDRESS, os.getpid()))
    _step("joined")
    decision = await_decision(client, base.index, n, deadline=time.monotonic() + JOIN_TIMEOUT_S, abort=never)
    _step("held")
    return decision, time.monotonic()


def _succeed(
    k: int, n: int, last: Decision, succ_port: int, state: StateDir, old: Client
) -> tuple[float | None, Decision | None, float]:
    """What ``StoreHostLoss._succeed`` does once the host is lost: the order, the turn, the
    claim; then lead or follow. (when it published the decision as the successor, else
    None; the decision held; when it was held)."""
    keys = next_epoch(KEYS)
    order = rule.candidates(last, n, 0)
    beats = beatperiod.beat_period(n, INTERVAL_S, TIMEOUT_S)
    turn = max(SUCCESSION_TURN_MIN_S, beats.timeout)
    wait = rule.Wait(order, turn, rule.give_up_after(order, turn, JOIN_TIMEOUT_S))
    mine = SuccessionClaim(keys.epoch, k, f"node{k}", RUN_UUID, "node0", os.getpid(), time.time())
    _step("ordered")
    found = rule.settle(state.succession_claim(RUN_ID, keys.epoch), mine, wait, never)
    if isinstance(found, str):
        raise RuntimeError(f"no successor: {found}")
    if found.launcher == k:
        _mark("lead:claimed")
        return _lead(k, n, succ_port, state, old), None, 0.0
    return None, *_follow(k, n, found.launcher, succ_port, state, old)


def _join_and_hold(client: Client, i: int, k: int, n: int) -> Decision:
    """Launcher k joins cycle i and holds node 0's decision, which names all n."""
    client.join(i, JoinInfo(k, f"node{k}", ADDRESS, os.getpid()))
    decision = await_decision(client, i, n, deadline=time.monotonic() + 900, abort=never)
    if decision is None or len(decision.nodes) != n:
        raise RuntimeError(f"no decision of cycle {i} for all {n}: {decision}")
    return decision


def peers(n: int, port: int, first: int, end: int, go_at: float, succ_port: int, state: StateDir) -> dict:
    woken: dict[int, float] = {}
    noticed: dict[int, float] = {}  # the store host's loss
    noticed_how: dict[str, int] = {}  # by which of its threads a launcher learned it
    succeeded: dict[int, float] = {}  # holding the successor's first decision
    led_at: list[float] = []
    connected: dict[int, float] = {}
    launched: dict[int, float] = {}  # holding cycle 0's decision
    held: dict[int, float] = {}
    cpu: dict[str, float] = {}  # the process's CPU time at its first launcher woken, its last holding
    succession_cpu: dict[str, float] = {}  # the same at its first noticing the loss, its last holding
    lock = threading.Lock()
    launchers = end - first
    over: list[int] = []  # launchers whose succession is over (held, led, or failed)
    all_over = threading.Event()
    released = threading.Event()  # the harness released every process: the launchers may end
    errors: list[str] = []
    sync = stores.reconnect(ADDRESS, port, TIMEOUT_S)  # the harness's own keys, one per process

    def launcher(k: int) -> None:
        try:
            client = Client.connect(
                ADDRESS,
                port,
                KEYS,
                deadline=time.monotonic() + 900,
                op_timeout=TIMEOUT_S,
                abort=never,
                sleep=time.sleep,
                sealer=SEALER,
            )
            base = client.wait_base(deadline=time.monotonic() + 900, abort=never)
            assert base is not None
            wake = WakePipe()
            threads = BackgroundSet.start(
                client,
                node_rank=k,
                num_nodes=n,
                interval=INTERVAL_S,
                timeout=TIMEOUT_S,
                wake_fd=wake.write_fd,
                emergency=lambda why: None,
            )
            with lock:
                connected[k] = time.monotonic()
            # the launch: cycle 0's join and decision, as every launcher starts (its placement
            # is read here; the restart's decision names the same one)
            _join_and_hold(client, 0, k, n)
            lifelong.keep_what_exists()  # as the launcher's agent does once its first decision is held
            with lock:
                launched[k] = time.monotonic()
            threads.watch_halt(0)
            count = sync.add(f"{READY}/count", 1)
            sync.set(f"{READY}/{count}", "1")
            if not _readable(wake.fd, 900):
                raise TimeoutError("no halt within 900 s")
            _step("start")
            with lock:
                woken[k] = time.monotonic()  # and into cycle 1's join
                if "woken" not in cpu:  # process_time walks every thread of the process: once
                    cpu["woken"] = time.process_time()
            # the restart: join the next cycle, hold node 0's decision (no workers to stop)
            decision = _join_and_hold(client, 1, k, n)
            _step("restart_held")
            with lock:
                held[k] = time.monotonic()
                if len(held) == launchers:  # the process's last
                    cpu["held"] = time.process_time()
            if succ_port:
                wake.drain()  # the halt's wake-up
                threads.watch_halt(1)  # as the next cycle's watch does: its loss wakes us
            sync.add(HELD, 1)
            if not succ_port:
                return
            while threads.store_lost() is None:
                if not _readable(wake.fd, 900):
                    raise TimeoutError("the store host was not lost within 900 s")
                wake.drain()
            _STEP.succession = True
            _step("start")
            with lock:
                noticed[k] = time.monotonic()
                if "noticed" not in succession_cpu:
                    succession_cpu["noticed"] = time.process_time()
                how = _how_lost(threads)
                noticed_how[how] = noticed_how.get(how, 0) + 1
            threads.stop()
            _step("stopped")
            led, second, held_at = _succeed(k, n, decision, succ_port, state, client)
            if led is not None:
                _mark("lead:noticed", noticed[k])
                with lock:
                    led_at.append(led)
            elif second is None or len(second.active) != n - 1:
                raise RuntimeError(f"no decision of the successor for all {n - 1}: {second}")
            else:
                with lock:
                    succeeded[k] = held_at
                    if len(succeeded) + len(led_at) == launchers:  # the process's last
                        succession_cpu["held"] = time.process_time()
        except Exception as exc:  # reported, not hidden
            with lock:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                errors.append(f"launcher {k}: {type(exc).__name__}: {exc} (at {where.name}:{where.lineno})")
        if succ_port:
            # a launcher whose succession is over goes on, as a real one would on its own node:
            # its thread (and its process) ending here would take the two cores' time from
            # the launchers still to hold the decision
            with lock:
                over.append(k)
                if len(over) == launchers:
                    all_over.set()
            released.wait()

    while time.time() < go_at:
        time.sleep(0.001)
    started = time.monotonic()
    workers = [threading.Thread(target=launcher, args=(k,), daemon=True) for k in range(first, end)]
    for t in workers:
        t.start()
    if succ_port:
        all_over.wait()
        (state.path / DONE.format(first=first)).touch()
        release, deadline = state.path / RELEASED, time.monotonic() + 900
        while not release.exists() and time.monotonic() < deadline:  # the other processes' too
            time.sleep(0.1)
        released.set()
    for t in workers:
        t.join()
    return {
        "started": started,
        "connected_last": max(connected.values(), default=started),
        "launched_last": max(launched.values(), default=0.0),
        "woken_last": max(woken.values(), default=0.0),
        "woken": len(woken),
        "held_last": max(held.values(), default=0.0),
        "held": len(held),
        "restart_cpu_s": cpu["held"] - cpu["woken"] if len(cpu) == 2 else None,
        "succession_cpu_s": (
            succession_cpu["held"] - succession_cpu["noticed"] if len(succession_cpu) == 2 else None
        ),
        "noticed_last": max(noticed.values(), default=0.0),
        "noticed": sorted(noticed.values()),
        "noticed_how": noticed_how,
        "succeeded_last": max(succeeded.values(), default=0.0),
        "succeeded_at": sorted(succeeded.values()),
        "succeeded": len(succeeded),
        "led_at": led_at[0] if led_at else None,
        "errors": errors[:5],
        "rss_mib": _rss_mib(),
        "cores": sorted(os.sched_getaffinity(0)),
        "step_cpu_s": dict(STEP_CPU),
        "step_at": STEP_AT,
    }


def _run_on(core: int) -> None:
    """Every thread of this process, and each it starts, on ``core`` alone (an affinity is
    a thread's, inherited by the threads it starts: torch's import may have started some)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


def main() -> None:
    resolver.bound_reverse_lookups(os.environ)  # as the launcher does, before any lookup
    role, n, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if role == "host":
        doc = host(n, port, float(sys.argv[4]))
    else:
        first, end, go_at, succ_port = (
            int(sys.argv[4]),
            int(sys.argv[5]),
            float(sys.argv[6]),
            int(sys.argv[7]),
        )
        # BENCH_SCALE_SWITCH_S: how long a peer process's thread may keep its interpreter's
        # lock (scale.py's PEER_SWITCH_INTERVAL_S); unset, Python's 5 ms
        if os.environ.get("BENCH_SCALE_SWITCH_S"):
            sys.setswitchinterval(float(os.environ["BENCH_SCALE_SWITCH_S"]))
        # BENCH_SCALE_CORE: the one core this process runs on (scale.py's peer_cores); unset
        # or empty, any
        if os.environ.get("BENCH_SCALE_CORE"):
            _run_on(int(os.environ["BENCH_SCALE_CORE"]))
        doc = peers(n, port, first, end, go_at, succ_port, StateDir(Path(sys.argv[8])))
    print(json.dumps(doc), flush=True)
    if role == "host":
        threading.Event().wait()  # the harness ends node 0 while the peers are stopped
    os._exit(0)  # the launchers' threads block in the store


if __name__ == "__main__":
    main()
