"""A file system that stops answering under the logs or the state dir (issue 33).

Each test puts a launcher's cycle logs and/or state dir on a pass-through FUSE mount
(tests.support.hungfs.StoppableFs) and makes its server stop answering mid-run, the way a
dead NFS or Lustre server does: a write there sleeps in the kernel until the server comes
back. The launcher must end within a bound, with the documented exit code and message,
and leave nothing behind: the writer child it abandons ends once the mount is released
(the fixture releases and unmounts every mount at teardown, whatever happened).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.launch_cluster import LAUNCH, clean_env, free_port, slurm_env
from tests.support import procs
from tests.support.hungfs import StoppableFs
from tests.support.waiting import wait_until

WORKER = str(Path(__file__).with_name("deadmount_worker.py"))
WRITE_TIMEOUT = 2.0
HEALTH_DEADLINE = 3.0


@dataclass
class Launchers:
    """One launcher per simulated node, each with its own arguments."""

    tmp: Path
    num_nodes: int
    marker: str = field(default_factory=procs.new_marker)
    port: int = field(default_factory=free_port)
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def ctl(self) -> Path:
        return self.tmp / "ctl"

    def start(self, node: int, *args: str) -> subprocess.Popen[bytes]:
        self.ctl.mkdir(exist_ok=True)
        env = clean_env()
        env.update(slurm_env("3333", self.num_nodes, node))
        env[procs.MARKER_VAR] = self.marker
        env["DEADMOUNT_CTL"] = str(self.ctl)
        env["SLURM_FT_LAUNCH_WRITE_TIMEOUT"] = str(WRITE_TIMEOUT)
        env["SLURM_FT_HEALTH_DEADLINE"] = str(HEALTH_DEADLINE)
        env["SLURM_FT_JOB_SECRET"] = "dead-mount-test"  # the nodes' state dirs differ
        argv = [
            *LAUNCH,
            "--rdzv-port",
            str(self.port),
            "--nproc-per-node",
            "2",
            "--health-checks",
            "storage",
            "--monitor-interval",
            "0.05",
            *args,
            WORKER,
        ]
        with open(self.tmp / f"node{node}.err", "wb") as err:
            proc = subprocess.Popen(
                argv, env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=self.tmp, stdin=subprocess.DEVNULL
            )
        self.procs[node] = proc
        return proc

    def err(self, node: int) -> str:
        return (self.tmp / f"node{node}.err").read_text(errors="replace")

    def starts(self) -> list[dict[str, int]]:
        path = self.ctl / "starts.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def all_started(self, world: int) -> None:
        wait_until(lambda: len({s["rank"] for s in self.starts()}) == world, 60, message="workers started")

    def tell(self, what: str) -> None:
        (self.ctl / what).touch()

    def ends_within(self, node: int, seconds: float) -> int:
        try:
            return self.procs[node].wait(seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"node{node} launcher still running after {seconds} s\n{self.err(node)}"
            ) from None

    def assert_nothing_left(self, timeout: float = 10.0) -> None:
        wait_until(
            lambda: not procs.pids_with_marker(self.marker),
            timeout,
            message=f"no process left (found: {procs.describe(procs.pids_with_marker(self.marker))})",
        )

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in procs.pids_with_marker(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[Launchers]:
    made: list[Launchers] = []

    def make(num_nodes: int = 1) -> Launchers:
        made.append(Launchers(tmp_path, num_nodes))
        return made[-1]

    yield make  # type: ignore[misc]
    for group in made:
        group.kill()


def scribes_of(group: Launchers) -> list[int]:
    """The writer children of the group's launchers (python -I -S scribe_child.py)."""
    found = []
    for pid in procs.pids_with_marker(group.marker):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"scribe_child.py" in cmd:
            found.append(pid)
    return found


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.timeout(120)
def test_cycle_logs_on_a_dead_mount_lose_lines_not_the_launcher(tmp_path, launchers, stoppable_fs) -> None:
    fs: StoppableFs = stoppable_fs()
    group: Launchers = launchers()
    group.start(0, "--state-dir", str(tmp_path / "state"), "--applog-prefix", f"{fs.mount}/logs/job.log")
    group.all_started(2)
    log = fs.root / "logs" / "job_cycle0.log"
    wait_until(lambda: lines_in(log) >= 10, 30, message="lines through the mount")
    fs.stop()
    # the workers keep printing into the stalled log until the launcher says so
    wait_until(lambda: "its file system stopped answering" in group.err(0), 30, message="the stall said")
    group.tell("finish")
    t0 = time.monotonic()
    assert group.ends_within(0, 15 + WRITE_TIMEOUT) == 0
    took = time.monotonic() - t0
    err = group.err(0)
    assert f"application log {fs.mount}/logs/job_cycle0.log: its file system stopped answering" in err
    assert "lines are counted" in err and "could not be written this cycle" in err, err
    outcome = json.loads((tmp_path / "state" / "outcome.json").read_text())
    assert outcome["exit_code"] == 0
    assert took < 10 + WRITE_TIMEOUT, took
    left = scribes_of(group)
    assert left, "the stuck writer should still wait on the mount"
    fs.go()  # the server answers: the abandoned writer (SIGKILLed) ends
    group.assert_nothing_left()


def _state_dir_dies_then_a_rank_fails(tmp_path: Path, group: Launchers, fs: StoppableFs, *logs: str) -> str:
    state = fs.mount / "state"
    group.start(0, "--state-dir", str(state), *logs)
    group.all_started(2)
    fs.stop()
    group.tell("crash")
    t0 = time.monotonic()
    code = group.ends_within(0, 20 + 3 * WRITE_TIMEOUT + HEALTH_DEADLINE)
    took = time.monotonic() - t0
    err = group.err(0)
    assert code == 94, err
    assert took < 15 + 3 * WRITE_TIMEOUT + HEALTH_DEADLINE, took
    assert f"state dir {state} on node0 stopped answering" in err, err
    assert "node0" in err.splitlines()[-1] and str(state) in err.splitlines()[-1], err
    assert {s["restart"] for s in group.starts()} == {0}, "no workers on an unhealthy node"
    fs.go()
    group.assert_nothing_left()
    return err


@pytest.mark.timeout(120)
def test_state_dir_on_a_dead_mount_ends_94_naming_node_and_path(tmp_path, launchers, stoppable_fs) -> None:
    _state_dir_dies_then_a_rank_fails(tmp_path, launchers(), stoppable_fs())


@pytest.mark.timeout(120)
def test_logs_and_state_dir_on_a_dead_mount(tmp_path, launchers, stoppable_fs) -> None:
    fs = stoppable_fs()
    err = _state_dir_dies_then_a_rank_fails(
        tmp_path, launchers(), fs, "--applog-prefix", f"{fs.mount}/logs/job.log"
    )
    assert f"{fs.mount}/logs" in err


@pytest.mark.timeout(120)
def test_sigterm_during_the_stall_is_honoured_within_term_timeout(tmp_path, launchers, stoppable_fs) -> None:
    fs = stoppable_fs()
    group = launchers()
    term_timeout = 5.0
    group.start(
        0,
        "--state-dir",
        str(fs.mount / "state"),
        "--applog-prefix",
        f"{fs.mount}/logs/job.log",
        "--term-timeout",
        str(term_timeout),
    )
    group.all_started(2)
    fs.stop()
    t0 = time.monotonic()
    group.procs[0].send_signal(signal.SIGTERM)
    assert group.ends_within(0, term_timeout + 10) == 143, group.err(0)
    took = time.monotonic() - t0
    assert took <= term_timeout + 2.0, took
    err = group.err(0)
    assert "records not written" in err and str(fs.mount / "state") in err, err
    fs.go()
    group.assert_nothing_left()


@pytest.mark.timeout(150)
def test_only_node1s_mount_dies_the_job_ends_94_without_node1(tmp_path, launchers, stoppable_fs) -> None:
    fs = stoppable_fs()
    group = launchers(2)
    group.start(0, "--state-dir", str(tmp_path / "state0"))
    group.start(1, "--state-dir", str(fs.mount / "state1"))
    group.all_started(4)
    fs.stop()
    group.tell("crash")  # rank 0 (node 0) fails: the next cycle's health check finds node 1's mount dead
    bound = 20 + 3 * WRITE_TIMEOUT + HEALTH_DEADLINE
    assert group.ends_within(0, bound) == 94, group.err(0)
    assert group.ends_within(1, bound) == 94, group.err(1)
    outcome = json.loads((tmp_path / "state0" / "outcome.json").read_text())
    assert outcome["exit_code"] == 94 and outcome["unhealthy_nodes"] == ["node1"], outcome
    assert str(fs.mount / "state1") in outcome["reason"], outcome
    assert str(fs.mount / "state1") in group.err(1)
    fs.go()
    group.assert_nothing_left()


@pytest.mark.timeout(60)
def test_a_state_dir_already_dead_at_start_stops_the_node_with_94(tmp_path, launchers, stoppable_fs) -> None:
    fs = stoppable_fs()
    (fs.root / "state").mkdir()
    fs.stop()
    group = launchers()
    t0 = time.monotonic()
    group.start(0, "--state-dir", str(fs.mount / "state"))
    assert group.ends_within(0, 10 + WRITE_TIMEOUT) == 94, group.err(0)
    assert time.monotonic() - t0 < 8 + WRITE_TIMEOUT
    assert f"unhealthy: state dir {fs.mount / 'state'} on node0 does not answer" in group.err(0)
    assert group.starts() == []
    fs.go()
    group.assert_nothing_left()


@pytest.mark.timeout(90)
def test_a_launcher_log_on_a_dead_mount_ends_94_said_on_stderr(tmp_path, launchers, stoppable_fs) -> None:
    fs = stoppable_fs()
    group = launchers()
    group.start(
        0, "--state-dir", str(tmp_path / "state"), "--launcher-log", f"{fs.mount}/launcher.log", "--quiet"
    )
    group.all_started(2)
    wait_until(lambda: (fs.root / "launcher.log").exists(), 10, message="launcher log through the mount")
    fs.stop()
    group.tell("crash")  # the restart's health check probes the launcher log's directory
    assert group.ends_within(0, 15 + WRITE_TIMEOUT + HEALTH_DEADLINE) == 94, group.err(0)
    err = group.err(0)
    # --quiet, yet said on stderr: the launcher log cannot take it
    assert f"launcher log {fs.mount}/launcher.log: its file system stopped answering" in err, err
    assert "events go to stderr only" in err
    assert f"stopping: unhealthy: node0: storage:{fs.mount}: timed out" in err, err
    assert {s["restart"] for s in group.starts()} == {0}
    outcome = json.loads((tmp_path / "state" / "outcome.json").read_text())
    assert outcome["exit_code"] == 94 and outcome["unhealthy_nodes"] == ["node0"]
    fs.go()
    group.assert_nothing_left()
