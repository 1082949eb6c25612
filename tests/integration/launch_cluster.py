"""Simulated multi-node runs of slurm-ft-launch on this machine.

Each "node" is one launcher process with its own SLURM_* environment, as ``srun
--ntasks-per-node=1`` would give it; the hosts are real loopback addresses (127.0.1.K), so
node 0's store really is reached over TCP by the others. Every process tree is tagged with
a unique marker so tests can ask /proc whether anything survived.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import procs
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "scripts" / "examples"
ECHO = EXAMPLES / "echo_worker.py"
TRAIN = EXAMPLES / "train_ddp.py"
LAUNCH = [sys.executable, "-m", "slurm_ft.cli.launch"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def slurm_env(job_id: str, num_nodes: int, node: int, *, attempt: int = 0) -> dict[str, str]:
    """One task of ``srun --ntasks-per-node=1`` (no step id: a test's launcher that gives
    up on a frozen peer must never scancel a real job of the local cluster)."""
    nodelist = f"127.0.1.[1-{num_nodes}]" if num_nodes > 1 else "127.0.1.1"
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NUM_NODES": str(num_nodes),
        "SLURM_NNODES": str(num_nodes),
        "SLURM_NODEID": str(node),
        "SLURMD_NODENAME": f"node{node}",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": str(num_nodes),
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{num_nodes})" if num_nodes > 1 else "1",
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_RESTART_COUNT": str(attempt),
    }


def batch_env(job_id: str, num_nodes: int, *, attempt: int = 0) -> dict[str, str]:
    """The batch shell of that job (on its first node): no step variables."""
    env = slurm_env(job_id, num_nodes, 0, attempt=attempt)
    for name in ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE"):
        del env[name]
    return env


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TORCHELASTIC"))}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@dataclass
class Node:
    rank: int
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started: float

    def out(self) -> str:
        return self.stdout.read_text(errors="replace")

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")


@dataclass
class SimJob:
    tmp: Path
    num_nodes: int
    launcher_args: list[str]
    worker: list[str]
    job_id: str = "4242"
    attempt: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    marker: str = field(default_factory=procs.new_marker)
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)
    launch: list[str] = field(default_factory=lambda: list(LAUNCH))
    preexec_fn: Callable[[], None] | None = None  # run in each launcher before it starts

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def start(self, only: list[int] | None = None) -> SimJob:
        self.out.mkdir(parents=True, exist_ok=True)
        for k in only if only is not None else range(self.num_nodes):
            env = clean_env()
            env.update(slurm_env(self.job_id, self.num_nodes, k, attempt=self.attempt))
            env.update(self.extra_env)
            env[procs.MARKER_VAR] = self.marker
            args = [
                *self.launch,
                "--rdzv-port",
                str(self.port),
                "--state-dir",
                str(self.state),
                *self.launcher_args,
                *self.worker,
            ]
            so, se = self.tmp / f"node{k}.out", self.tmp / f"node{k}.err"
            with open(so, "wb") as fo, open(se, "wb") as fe:
                proc = subprocess.Popen(
                    args,
                    env=env,
                    stdout=fo,
                    stderr=fe,
                    cwd=self.tmp,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=self.preexec_fn,
                )
            self.nodes.append(Node(k, proc, so, se, time.monotonic()))
        return self

    def node(self, k: int) -> Node:
        return next(n for n in self.nodes if n.rank == k)

    def wait(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for n in self.nodes:
            try:
                codes.append(n.proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"launcher node{n.rank} still running after {timeout}s\n" + self.dump()
                ) from None
        return codes

    def kill(self) -> None:
        for n in self.nodes:
            if n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait()
        for pid in procs.pids_with_marker(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def dump(self) -> str:
        parts = []
        for n in self.nodes:
            parts.append(f"--- node{n.rank} rc={n.proc.poll()} stderr:\n{n.err()[-4000:]}")
            parts.append(f"--- node{n.rank} stdout:\n{n.out()[-2000:]}")
        return "\n".join(parts)

    def assert_no_orphans(self, timeout: float = 5.0) -> None:
        wait_until(
            lambda: not procs.pids_with_marker(self.marker),
            timeout,
            message=f"no processes left (found: {procs.describe(procs.pids_with_marker(self.marker))})",
        )

    def starts(self) -> list[dict]:
        path = self.out / "starts.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def outcome(self) -> dict:
        return json.loads((self.state / "outcome.json").read_text())

    def cycle_record(self, cycle: int) -> dict:
        return json.loads((self.state / "cycles" / f"cycle{cycle}.json").read_text())
