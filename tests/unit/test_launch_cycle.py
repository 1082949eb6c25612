"""The launcher's cycle as a state machine: coordinator and members of several nodes in
one process, over one in-memory store, with real worker processes (``/bin/sh``) and a
clock the test moves. Every way an attempt ends is driven here; each test takes well
under a few seconds."""

from __future__ import annotations

import gc
import json
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_ft import config
from slurm_ft.launch.context import AgentConfig, run_id_for
from slurm_ft.launch.cycle import lifetime
from slurm_ft.launch.cycle.agent import Agent, Phase, Seams
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.localstore import LocalStore
from slurm_ft.launch.rendezvous.protocol import Action, Base, Decision, Keys
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.workers.layout import Entry, Topology
from slurm_ft.slurm import SlurmJob
from slurm_ft.statedir import StateDir
from tests.support.hungfs import wchan
from tests.support.waiting import wait_until

SIGNALS = (int(signal.SIGTERM), int(signal.SIGINT))
RUN = [Phase.HEALTH, Phase.JOIN, Phase.DECIDE, Phase.RUN, Phase.WATCH, Phase.STOP]


class FakeClock:
    """Monotonic time that moves only when the test says so (plus a little real time, so
    waits that compute deadlines from it still end)."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds

    def __call__(self) -> float:
        import time

        with self._lock:
            return time.monotonic() + self._offset


def job_env(node: int, num_nodes: int) -> dict[str, str]:
    """One task of ``srun --ntasks-per-node=1`` (step variables, no step id)."""
    nodelist = f"127.0.1.[1-{num_nodes}]" if num_nodes > 1 else "127.0.1.1"
    return {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": str(num_nodes),
        "SLURM_NNODES": str(num_nodes),
        "SLURM_NODEID": str(node),
        "SLURMD_NODENAME": f"node{node}",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{num_nodes})" if num_nodes > 1 else "1",
    }


@dataclass
class Node:
    agent: Agent
    signals: SignalBox
    log: Path
    ending: Ending | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None
    frozen_store: list[str] = field(default_factory=list)

    def events(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


class Cycle:
    """N launchers of one job, each on its own thread, sharing one in-memory store."""

    def __init__(self, tmp: Path, num_nodes: int, script: str, **settings: object) -> None:
        self.tmp = tmp
        self.num_nodes = num_nodes
        self.store = LocalStore()
        self.state = StateDir(tmp / "state")
        self.clocks = [FakeClock() for _ in range(num_nodes)]
        self.script = script
        self.settings = {"launch.heartbeat_interval": 0.02, "launch.monitor_interval": 0.05, **settings}
        self.nodes: list[Node] = []
        self.step_killer: tuple[str, ...] = ()
        self.epochs: dict[int, LocalStore] = {0: self.store}  # a successor's store per epoch
        self._epochs_lock = threading.Lock()

    def epoch_store(self, keys: Keys, host: bool) -> Client:
        """The in-memory store of ``keys.epoch``: made by its host, waited for by the others."""
        if host:
            with self._epochs_lock:
                store = self.epochs.setdefault(keys.epoch, LocalStore())
            return Client(store.connect(), keys)
        found = wait_until(lambda: self.epochs.get(keys.epoch), 10, message=f"store of epoch {keys.epoch}")
        return Client(found.connect(), keys)

    def config(self, node: int) -> AgentConfig:
        env = job_env(node, self.num_nodes)
        job = SlurmJob.from_env(env)
        cli = {"health.checks": [], **self.settings}
        settings = config.load({}, None, cli)
        return AgentConfig(
            job=job,
            settings=settings,
            entry=Entry("command", "/bin/sh", ("-c", self.script)),
            topo=Topology(node, self.num_nodes - settings.launch.spare_nodes, 1, job.master_addr),
            state=self.state,
            rdzv_ports=(),
            base_env={"PATH": "/usr/bin:/bin", "MARK": str(self.tmp), "NODE": job.node_name},
            python="python3",
            cwd=str(self.tmp),
            health_checks="health.checks" in self.settings,
            run_id=run_id_for(job),
            signals=SIGNALS,
            step_killer=self.step_killer,
        )

    def start(self, only: list[int] | None = None) -> Cycle:
        for k in range(self.num_nodes):
            if only is not None and k not in only:
                continue
            cfg = self.config(k)
            box = SignalBox(cfg.signals, install=False)
            log = self.tmp / f"node{k}.log"
            node = Node(None, box, log)  # type: ignore[arg-type]
            seams = Seams(
                monotonic=self.clocks[k],
                client=Client(self.store.connect(), Keys(cfg.run_id)),
                on_frozen_store=node.frozen_store.append,
                reap_orphans=False,
                epoch_store=self.epoch_store,
            )
            node.agent = Agent(cfg, EventLog(log, cfg.job.node_name, quiet=True), box, seams)
            node.thread = threading.Thread(target=self._drive, args=(node,), daemon=True)
            self.nodes.append(node)
        for node in self.nodes:
            assert node.thread is not None
            node.thread.start()
        return self

    @staticmethod
    def _drive(node: Node) -> None:
        try:
            node.ending = lifetime.drive(node.agent)
        except BaseException as exc:
            node.error = exc

    def node(self, k: int) -> Node:
        return next(n for n in self.nodes if n.agent.cfg.job.node_rank == k)

    def finish(self, timeout: float = 20.0) -> list[int]:
        for node in self.nodes:
            assert node.thread is not None
            node.thread.join(timeout)
            assert not node.thread.is_alive(), (
                f"{node.agent.cfg.job.node_name} still running: {node.events()}"
            )
            assert node.error is None, node.error
            node.signals.close()
        return [n.ending.exit_code for n in self.nodes if n.ending is not None]

    def outcome(self) -> dict:
        return json.loads(self.state.outcome.read_text())

    def in_watch(self, k: int, cycle_index: int = 0) -> bool:
        agent = self.node(k).agent
        return agent.phase is Phase.WATCH and agent.index == cycle_index


EXIT0 = "exit 0"
SLEEP = "exec sleep 30"


def test_success_on_two_nodes(tmp_path):
    c = Cycle(tmp_path, 2, EXIT0).start()
    assert c.finish() == [0, 0]
    node0 = c.node(0).agent
    assert node0.phases == [Phase.START, *RUN, Phase.END]
    out = c.outcome()
    assert (out["exit_code"], out["outcome"], out["reason"]) == (0, "finished", "all workers finished")
    assert out["nodes"] == ["node0", "node1"] and out["cycles"] == 1
    assert "cycle 0: all workers on all nodes finished" in c.node(1).events()


def test_a_launcher_freezes_its_start_once_its_first_decision_is_held(tmp_path):
    """What it made to start (its connections and threads, the placement) is kept out of the
    collector's way (``lifelong.keep_what_exists``): its passes walked it again and again."""
    before = gc.get_freeze_count()
    c = Cycle(tmp_path, 2, EXIT0).start()
    assert c.finish() == [0, 0]
    assert gc.get_freeze_count() > before


def test_worker_failure_spends_the_budget_then_stops_everyone_with_1(tmp_path):
    c = Cycle(tmp_path, 2, '[ "$RANK" = 1 ] && exit 3; exec sleep 30', **{"launch.max_restarts": 1}).start()
    assert c.finish() == [1, 1]
    assert c.node(0).agent.phases == [
        Phase.START,
        *RUN,
        *RUN,
        Phase.HEALTH,
        Phase.JOIN,
        Phase.DECIDE,
        Phase.END,
    ]
    out = c.outcome()
    assert out["reason"] == (
        "restart budget spent (1 restart(s), 2 cycle(s) failed); "
        "last failure: rank 1 (local 0) on node1 (node 1): exit code 3"
    )
    assert out["first_failure"]["kind"] == "worker" and out["cycles"] == 2
    assert "stopping: restart budget spent" in c.node(1).events()


def test_signal_during_a_cycle_is_forwarded_and_ends_the_job(tmp_path):
    c = Cycle(tmp_path, 2, SLEEP).start()
    wait_until(lambda: c.in_watch(0) and c.in_watch(1), 10, message="both nodes watching")
    c.node(1).signals.deliver(signal.SIGTERM)
    # Node 0 learns it from node 1 before (here: without) its own copy of the signal: the
    # job is being stopped, so every node ends with 128+N and no node is named lost.
    assert c.finish() == [143, 143]
    assert "received SIGTERM: forwarding to workers" in c.node(1).events()
    assert "stopped 1 worker(s) with SIGTERM" in c.node(1).events()
    assert "stopping: node1 received SIGTERM (exit 143)" in c.node(0).events()
    # Node 0's workers are sent the same signal with the same grace (issue 47).
    assert (
        "cycle 0 stopped: node1 (node 1): launcher received SIGTERM; forwarding SIGTERM to workers"
        in c.node(0).events()
    )
    out = c.outcome()
    assert out["first_failure"]["kind"] == "signal" and out["first_failure"]["signal"] == "SIGTERM"
    assert (out["exit_code"], out["lost_nodes"]) == (143, [])


def test_a_peer_signalled_first_with_spares_names_no_lost_node(tmp_path):
    # What a preemption looked like on a job with a spare: the signalled peer was gone at
    # the next join, node 0 retired it as lost (exit 1) and the template excluded it.
    c = Cycle(tmp_path, 3, SLEEP, **{"launch.spare_nodes": 1}).start()
    wait_until(lambda: c.in_watch(0) and c.in_watch(1), 10, message="active nodes watching")
    c.node(1).signals.deliver(signal.SIGTERM)
    codes = c.finish()
    assert codes[:2] == [143, 143], codes
    out = c.outcome()
    assert (out["exit_code"], out["reason"]) == (143, "node1 received SIGTERM")
    assert out["lost_nodes"] == [] and out["unhealthy_nodes"] == []


def test_signal_between_cycles_ends_at_once(tmp_path):
    c = Cycle(tmp_path, 2, EXIT0).start(only=[0])  # node 1 never comes: node 0 waits to decide
    wait_until(lambda: c.node(0).agent.phase is Phase.DECIDE, 10, message="node 0 waiting for joins")
    c.node(0).signals.deliver(signal.SIGINT)
    assert c.finish() == [130]
    assert "received SIGINT between cycles; exiting 130" in c.node(0).events()
    assert (c.outcome()["exit_code"], c.outcome()["reason"]) == (130, "received SIGINT")


def test_lost_launcher_is_judged_on_node0s_clock_and_node0_ends_the_step(tmp_path):
    c = Cycle(tmp_path, 2, SLEEP, **{"launch.heartbeat_timeout": 30.0})
    killed = tmp_path / "step-killed"
    c.step_killer = ("/bin/sh", "-c", f"echo scancel >> {killed}")
    c.start()
    wait_until(lambda: c.in_watch(0) and c.in_watch(1), 10, message="both nodes watching")
    heartbeat = c.node(1).agent.threads.heartbeat
    assert heartbeat is not None
    heartbeat.stop()  # node 1 goes silent, as a frozen or dead node would

    def noticed() -> bool:
        c.clocks[0].advance(31.0)
        return bool(c.node(0).agent.threads.lost_peers())

    wait_until(noticed, 10, interval=0.05, message="node 0 noticing the silent peer")
    assert c.finish() == [1, 1]
    assert "cycle 0 failed: node1 (node 1): launcher silent for" in c.node(0).events()
    assert c.outcome()["reason"] == "lost launcher on node1"
    assert c.outcome()["lost_nodes"] == ["node1"]
    assert killed.read_text() == "scancel\n"  # once, by node 0, after the outcome was written
    assert "ending the job step: lost launcher on node1" in c.node(0).events()


def test_lost_store_ends_a_peer_with_1(tmp_path):
    c = Cycle(tmp_path, 2, SLEEP).start(only=[1])
    host = Client(c.store.connect(), Keys("77-a0"))  # the test plays node 0
    host.prepare(2, Base(0, "u"))
    wait_until(lambda: host.joined(0, [1]), 10, message="node 1 joined")
    host.publish_decision(0, Decision(Action.RUN, 0, master_port=1, nodes=("node0", "node1")))
    wait_until(lambda: c.in_watch(1), 10, message="node 1 watching")
    c.store.shutdown()
    assert c.finish() == [1]
    events = c.node(1).events()
    assert "lost the rendezvous store" in events and "stopped 1 worker(s) with SIGTERM" in events
    out = c.outcome()  # node 1's own state dir: it writes its view
    assert out["exit_code"] == 1 and out["reason"].startswith("lost node 0: ")


def test_failed_peer_monitor_is_never_silent(tmp_path):
    c = Cycle(tmp_path, 2, SLEEP).start()
    wait_until(lambda: c.in_watch(0) and c.in_watch(1), 10, message="both nodes watching")
    monitor = c.node(0).agent.threads.monitor
    assert monitor is not None
    monitor.client._store.close()  # its own connection breaks; the others still work
    assert c.finish() == [1, 1]
    events = c.node(0).events()
    assert "slurm-ft-peer-monitor stopped: rendezvous store unreachable" in events
    assert c.outcome()["reason"].startswith("launcher blind: slurm-ft-peer-monitor stopped")
    assert "stopping: launcher blind" in c.node(1).events()


def test_unhealthy_node_stops_everyone_with_94(tmp_path):
    (tmp_path / "ok-node0").mkdir()
    c = Cycle(tmp_path, 2, EXIT0, **{"health.checks": ["storage"], "health.paths": [f"{tmp_path}/ok-%n"]})
    c.start()
    assert c.finish() == [94, 94]
    out = c.outcome()
    assert out["unhealthy_nodes"] == ["node1"] and out["reason"].startswith("unhealthy: node1: storage")
    assert c.node(0).agent.phases == [Phase.START, Phase.HEALTH, Phase.JOIN, Phase.DECIDE, Phase.END]
    assert (tmp_path / "state" / "unhealthy" / "node1.json").exists()


def test_no_progress_stops_with_93(tmp_path):
    iteration = tmp_path / "latest_checkpointed_iteration.txt"
    iteration.write_text("7\n")
    c = Cycle(
        tmp_path,
        1,
        "exit 3",
        **{"launch.max_restarts": 9, "progress.checkpoint_iteration_file": str(iteration)},
    ).start()
    assert c.finish(30) == [93]
    out = c.outcome()
    assert out["exit_code"] == 93 and out["reason"].startswith("no progress: ")
    assert out["cycles"] == 2


def test_launcher_exception_is_one_ending_and_stops_the_peers(tmp_path):
    c = Cycle(tmp_path, 2, EXIT0)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "cycles").write_text("not a directory")  # node 0's record write fails
    c.start()
    assert c.finish() == [1, 1]
    ending = c.node(0).ending
    assert ending is not None and ending.internal_error is not None
    assert ending.traceback is not None and "Traceback" in ending.traceback
    assert c.outcome()["reason"].startswith("launcher failed: ")
    assert "stopping: launcher failed: " in c.node(1).events()


def test_a_nic_going_down_ends_the_cycle_and_the_next_health_check_excludes_the_node(tmp_path):
    from tests.support.fake_sysfs import ib_port

    sysfs = tmp_path / "sys"
    ib_port(sysfs, "mlx5_0", 1)
    nic = {
        "health.sysfs_root": str(sysfs),
        "health.nics": ["mlx5_0"],
        "health.nic_monitor": True,
        "health.nic_monitor_interval": 0.05,
        "health.nic_monitor_fatal": True,
        "health.checks": ["nic"],
    }
    c = Cycle(tmp_path, 1, SLEEP, **nic).start()
    wait_until(lambda: c.in_watch(0), 10, message="workers running")
    ib_port(sysfs, "mlx5_0", 1, state="DOWN", phys="Disabled", link_downed=1)
    assert c.finish() == [94]
    events = c.node(0).events()
    assert "NIC mlx5_0/1 went down" in events and "cycle 0 failed: node0 (node 0): NIC mlx5_0/1" in events
    out = c.outcome()
    assert out["first_failure"]["kind"] == "nic" and out["unhealthy_nodes"] == ["node0"]


def _second_port_down_from_the_start(tmp_path: Path) -> dict[str, object]:
    """An unused second IB port, down since boot: the launcher's snapshot sees it too."""
    from tests.support.fake_sysfs import ib_port

    sysfs = tmp_path / "sys"
    ib_port(sysfs, "mlx5_0", 1)
    ib_port(sysfs, "mlx5_0", 2, state="DOWN", phys="Polling")
    return {"health.sysfs_root": str(sysfs), "health.nics": ["mlx5_0"], "health.checks": ["nic"]}


def test_a_port_down_from_the_start_does_not_fail_the_node(tmp_path):
    c = Cycle(tmp_path, 2, EXIT0, **_second_port_down_from_the_start(tmp_path)).start()
    assert c.finish() == [0, 0], c.node(0).events()


def test_nic_mode_absolute_fails_a_port_down_from_the_start(tmp_path):
    nic = _second_port_down_from_the_start(tmp_path)
    c = Cycle(tmp_path, 1, EXIT0, **nic, **{"launch.nic_mode": "absolute"}).start()
    assert c.finish() == [94]
    assert c.outcome()["reason"].startswith("unhealthy: node0: nic:mlx5_0/2")


def test_a_worker_that_survives_sigkill_is_reported_and_its_node_excluded_with_94(tmp_path, hungfs):
    """Node 0's worker stat()s a file on a mount that stops answering (state D once
    killed); node 1's worker fails. The stop gives up after the kill timeout, names the
    survivor, and the next join stops the job with 94 listing node 0."""
    script = f'if [ "$GROUP_RANK" = 0 ]; then exec stat {hungfs}/hang; fi\n'
    script += 'while [ ! -e "$MARK/go" ]; do sleep 0.02; done; exit 5'
    stop = {"launch.workers_stop_timeout": 0.2, "launch.kill_timeout": 0.5}
    c = Cycle(tmp_path, 2, script, **stop).start()
    wait_until(lambda: c.in_watch(0) and c.in_watch(1), 10, message="workers running")
    (pid,) = c.node(0).agent.workers.pids
    wait_until(lambda: wchan(pid) == "request_wait_answer", 10, message="worker stuck on the mount")
    (tmp_path / "go").touch()
    assert c.finish() == [94, 94]
    out = c.outcome()
    assert out["unhealthy_nodes"] == ["node0"]
    assert out["reason"].startswith("unhealthy: node0: stuck: 1 worker process(es) survived SIGKILL: ")
    line = f"worker process survived SIGKILL for 0.5s: pid {pid} state D wchan request_wait_answer: stat "
    assert line in c.node(0).events()
    record = json.loads((tmp_path / "state" / "unhealthy" / "node0.json").read_text())
    (stuck,) = record["report"]["stuck"]
    assert (stuck["pid"], stuck["state"], stuck["command"]) == (pid, "D", f"stat {hungfs}/hang")


def test_prometheus_file_follows_the_cycle_and_outcomes_are_kept_per_attempt(tmp_path):
    prom = tmp_path / "metrics.prom"
    c = Cycle(tmp_path, 1, '[ "$SLURM_FT_CYCLE" = 0 ] && exit 3; exit 0')
    c.settings["launch.prom_file"] = str(prom)
    assert c.start().finish() == [0]
    lines = prom.read_text().splitlines()
    labels = '{job="77",node="node0"}'
    for line in (
        f"slurm_ft_launch_cycle{labels} 1",
        f"slurm_ft_launch_restarts_total{labels} 1",
        f"slurm_ft_launch_restart_budget{labels} 3",
        f"slurm_ft_launch_workers_running{labels} 0",
    ):
        assert line in lines, (line, lines)
    assert any(
        ln.startswith("slurm_ft_launch_last_failure_timestamp_seconds{") and 'kind="worker"' in ln
        for ln in lines
    )
    kept = list((tmp_path / "state" / "outcomes").glob("attempt0.*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["exit_code"] == 0


SLOW_TO_STOP = r"""
import os, signal, sys, time
from slurm_ft import worker
out, rank, cycle = sys.argv[1], os.environ["RANK"], os.environ["SLURM_FT_CYCLE"]
if cycle != "0":
    sys.exit(0)
if rank == "1":
    time.sleep(0.5)
    sys.exit(3)
signal.signal(signal.SIGTERM, lambda *a: open(f"{out}/term", "w").close())  # caught, as Lightning does
if sys.argv[2] == "writing":  # an unmodified trainer that saves a checkpoint on SIGTERM
    while not os.path.exists(f"{out}/term"):
        time.sleep(0.01)
    with open(f"{out}/ckpt.bin", "wb") as fh:
        for _ in range(50):
            fh.write(b"x" * 4096)
            fh.flush()
            time.sleep(0.02)
    open(f"{out}/checkpoint-done", "w").close()
    sys.exit(0)
if sys.argv[2] == "section":
    with worker.section("checkpointing"):
        while not os.path.exists(f"{out}/term"):
            time.sleep(0.01)
        time.sleep(1.0)  # the checkpoint takes a second after the stop signal
        open(f"{out}/checkpoint-done", "w").close()
    sys.exit(0)
while True:
    time.sleep(0.05)
    if os.path.exists(f"{out}/term"):
        time.sleep(3.0)
        open(f"{out}/left-on-its-own", "w").close()
        sys.exit(0)
"""


@pytest.mark.parametrize("mode", ["plain", "section", "writing"])
def test_after_a_failure_others_are_killed_quickly_unless_inside_a_section(tmp_path, mode):
    import sys

    c = Cycle(tmp_path, 2, "", **{"launch.max_restarts": 1, "launch.workers_stop_timeout": 10.0})
    original = c.config

    def config(node: int) -> AgentConfig:
        import dataclasses

        cfg = original(node)
        entry = Entry("command", sys.executable, ("-c", SLOW_TO_STOP, str(tmp_path), mode))
        env = {**cfg.base_env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        return dataclasses.replace(cfg, entry=entry, base_env=env)

    c.config = config  # type: ignore[method-assign]
    assert c.start().finish(30) == [0, 0]
    assert (tmp_path / "term").exists()
    if mode == "plain":
        assert not (tmp_path / "left-on-its-own").exists()  # SIGKILLed after the short grace
        assert "stopped 1 worker(s) with SIGKILL (still running 0.2 s after SIGTERM)" in c.node(0).events()
    else:  # never cut short while saving, whether it says so (a section) or not
        assert (tmp_path / "checkpoint-done").exists()
