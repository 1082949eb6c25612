"""slurm-ft-drill against a real launcher without Slurm: faults found from the launcher's
records, injected, recorded, detected, charged in the report; bad input refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_ft import records
from slurm_ft.drill import targets
from slurm_ft.statedir import StateDir
from tests.integration.launch_cluster import clean_env
from tests.support import procs
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "support" / "stepping_trainer.py"
DRILL = [sys.executable, "-m", "slurm_ft.cli.drill"]
REPORT = [sys.executable, "-m", "slurm_ft.cli.report"]
# Longer than what the report's start-up estimate can be off by: a cycle's first checkpoint
# is read up to 0.5 s late, and the step it back-dates from is the ledger's, which misses
# the checkpoint a stopped rank saves on its way out (three steps here). 0.3 s came out 0.0 s
# for all four cycles in CI, with the pace then also set by those late saves (fixed since).
STARTUP_S = 1.0


@dataclass
class Run:
    tmp: Path
    proc: subprocess.Popen[bytes]
    marker: str

    @property
    def state(self) -> StateDir:
        return StateDir(self.tmp / "state")

    def cycles(self) -> list[int]:
        return self.state.recorded_cycles()

    def processes_of(self, cycle: int) -> records.NodeProcesses | None:
        found = targets.recorded_processes(self.state, cycle)
        return next(iter(found.values()), None)

    def log(self) -> str:
        return (self.tmp / "launch.err").read_text(errors="replace")


def start(tmp: Path, *, total_steps: int = 10**6, max_restarts: int = 5) -> Run:
    env = clean_env()
    marker = procs.new_marker()
    env[procs.MARKER_VAR] = marker
    cmd = [
        sys.executable, "-m", "slurm_ft.cli.launch", "--nproc-per-node", "2",
        "--max-restarts", str(max_restarts), "--state-dir", str(tmp / "state"),
        "--progress-source", f"checkpoint-dir:{tmp / 'ckpt'}", "--rank-heartbeat-timeout", "2",
        str(TRAINER), "--ckpt-dir", str(tmp / "ckpt"), "--log", str(tmp / "steps.jsonl"),
        "--total-steps", str(total_steps), "--step-time", "0.1", "--ckpt-every", "5",
        "--startup", str(STARTUP_S),
    ]  # fmt: skip
    with open(tmp / "launch.out", "wb") as fo, open(tmp / "launch.err", "wb") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, cwd=tmp, stdin=subprocess.DEVNULL)
    return Run(tmp, proc, marker)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    r = start(tmp_path, total_steps=10**6)
    yield r
    if r.proc.poll() is None:
        r.proc.kill()
        r.proc.wait()
    for pid in procs.pids_with_marker(r.marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def drill(*args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    return subprocess.run([*DRILL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def training(r: Run, cycle: int) -> bool:
    """Cycle ``cycle``'s workers have stepped past a checkpoint (the trainer's step log)."""
    if r.proc.poll() is not None:
        raise AssertionError(f"the launcher ended ({r.proc.returncode}):\n{r.log()[-3000:]}")
    if r.processes_of(cycle) is None:
        return False
    try:
        lines = (r.tmp / "steps.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    steps = [json.loads(x) for x in lines if x.endswith("}")]
    return sum(1 for x in steps if x["cycle"] == cycle) >= 7  # a checkpoint every 5 steps


def test_kill_hang_and_crash_are_injected_detected_and_charged(run: Run) -> None:
    state = str(run.state.path)
    expected = [
        ("kill", "1", "killed by SIGKILL"),
        ("hang", "0", "hang"),
        ("crash", "1", "killed by SIGABRT"),
    ]
    for cycle, (fault, rank, _) in enumerate(expected):
        wait_until(lambda c=cycle: training(run, c), 30, message=f"cycle {cycle} training\n{run.log()}")
        done = drill("--state-dir", state, fault, "--rank", rank)
        assert done.returncode == 0, done.stderr
        assert f"{fault}: SIG" in done.stdout and f"rank {rank}" in done.stdout
    wait_until(lambda: training(run, 3), 30, message=f"cycle 3 training\n{run.log()}")
    run.proc.terminate()  # the job ends by a signal, as a time limit would end it
    run.proc.wait(timeout=60)
    wait_until(lambda: not procs.pids_with_marker(run.marker), 10, message="no process of the run left")

    drills = sorted(run.state.drills_dir.glob("*.json"))
    docs = [records.read_json(p) for p in drills]
    assert [(d["fault"], d["rank"], d["cycle"], d["injected"]) for d in docs if d] == [
        ("kill", 1, 0, True),
        ("hang", 0, 1, True),
        ("crash", 1, 2, True),
    ]
    for cycle, (_, _, how) in enumerate(expected):
        rec = records.read_json(run.state.cycle_record(cycle))
        assert rec is not None and rec["first_failure"] is not None
        described = json.dumps(rec["first_failure"])
        assert (how in described) or (how == "hang" and rec["first_failure"]["kind"] == "hang"), described

    out = subprocess.run(
        [*REPORT, "--state-dir", state, "--json"], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    faults = doc["faults"]
    assert [f["fault"] for f in faults] == ["kill", "hang", "crash"]
    for f in faults:
        assert f["cost_s"] is not None and f["cost_s"] > 0, f
        assert f["next_cycle"] == f["cycle"] + 1
    assert faults[1]["detection_s"] >= 1.5  # the heart-beat timeout is 2 s
    t = doc["totals"]
    assert t["split_cycles"] >= 3 and t["startup_s"] > 0 and t["lost_work_s"] > 0, out.stdout
    parts = ("progress_s", "no_progress_s", "unknown_progress_s", "restart_overhead_s", "between_attempts_s")
    total = sum(t[k] for k in (*parts, "startup_s", "lost_work_s", "stopping_s"))
    assert total == pytest.approx(t["wall_clock_s"], abs=0.01)


def test_lose_node_takes_the_launcher_and_its_workers_and_leaves_nothing(run: Run) -> None:
    wait_until(lambda: training(run, 0), 30, message=f"cycle 0 training\n{run.log()}")
    rec = run.processes_of(0)
    assert rec is not None
    done = drill("--state-dir", str(run.state.path), "lose-node")
    assert done.returncode == 0, done.stderr
    assert run.proc.wait(timeout=10) < 0  # the launcher got SIGKILL
    wait_until(
        lambda: not procs.pids_with_marker(run.marker), 10, message="the workers gone with the launcher"
    )
    [doc] = [records.read_json(p) for p in run.state.drills_dir.glob("*.json")]
    assert doc is not None and sorted(doc["pids"]) == sorted(
        [rec.launcher_pid, *(w.pid for w in rec.workers)]
    )


def test_bad_input_is_one_line_and_exit_2_and_nothing_is_injected(run: Run) -> None:
    wait_until(lambda: training(run, 0), 30, message=f"cycle 0 training\n{run.log()}")
    state = str(run.state.path)
    bad_schedule = run.tmp / "bad.schedule"
    bad_schedule.write_text("10 kill\n20 explode\n")
    empty = run.tmp / "empty"
    empty.mkdir()
    cases = [
        (["--state-dir", state, "explode"], "unknown fault 'explode'"),
        (["--state-dir", state, "kill", "--rank", "2"], "rank 2 is outside the job (ranks 0-1)"),
        (["--state-dir", state, "lose-node", "--node", "1"], "node 1 is outside the job"),
        (["--state-dir", state, "--schedule", str(bad_schedule)], "line 2: unknown fault 'explode'"),
        (["--state-dir", state, "nic-down"], "nic-down cannot be injected honestly here"),
        (["--state-dir", state, "preempt"], "preempt needs a Slurm job"),
        (["--state-dir", str(empty), "kill"], "not a slurm-ft job"),
        (["kill"], "give JOBID or --state-dir DIR"),
        (["--state-dir", state, "--every", "10", "--duration", "60"], "needs --seed"),
        (["--state-dir", state, "--every", "10", "--seed", "1"], "preempt needs a Slurm job"),
    ]
    for args, problem in cases:
        done = drill(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and problem in done.stderr, (args, done.stderr)
    assert not run.state.drills_dir.exists()
    assert run.proc.poll() is None and run.cycles() == [0]


def test_a_seeded_plan_is_the_same_for_the_same_seed(run: Run) -> None:
    wait_until(lambda: training(run, 0), 30, message=f"cycle 0 training\n{run.log()}")

    def plan(seed: str) -> subprocess.CompletedProcess[str]:
        mix = "kill=3,hang=1,crash=1"  # preempt (in the default mix) needs a Slurm job
        state = str(run.state.path)
        return drill(
            "--state-dir", state, "--every", "30", "--mix", mix, "--seed", seed, "--duration", "10m", "--plan"
        )

    one, two = plan("5"), plan("5")
    assert one.returncode == 0 and one.stdout == two.stdout and one.stdout.count("\n") > 5
    assert plan("6").stdout != one.stdout
    assert not run.state.drills_dir.exists()


def test_freeze_launcher_stops_the_launcher_and_leaves_its_workers_running(run: Run) -> None:
    wait_until(lambda: training(run, 0), 30, message="cycle 0 training")
    rec = run.processes_of(0)
    assert rec is not None
    done = drill("--state-dir", str(run.state.path), "freeze-launcher")
    assert done.returncode == 0, done.stderr
    wait_until(lambda: procs_state(rec.launcher_pid) == "T", 5, message="the launcher stopped")
    assert all(procs_state(w.pid) in ("R", "S") for w in rec.workers)
    [doc] = [records.read_json(p) for p in run.state.drills_dir.glob("*.json")]
    assert doc is not None and (doc["fault"], doc["signal"], doc["pids"]) == (
        "freeze-launcher",
        "SIGSTOP",
        [rec.launcher_pid],
    )


def procs_state(pid: int) -> str | None:
    from slurm_ft import procident

    found = procident.stat(pid)
    return found.state if found else None


def test_kill_launcher_takes_the_launcher_its_workers_follow_and_its_snapshot_area_stays_for_the_sweep(
    run: Run,
) -> None:
    wait_until(lambda: training(run, 0), 30, message="cycle 0 training")
    rec = run.processes_of(0)
    assert rec is not None
    mine = f"slurm-ft-snap.{os.getuid()}."
    area = next(
        p
        for p in Path("/dev/shm").glob(f"{mine}*")
        if (p / "launcher").read_text().split()[0] == str(rec.launcher_pid)
    )
    done = drill("--state-dir", str(run.state.path), "kill-launcher")
    assert done.returncode == 0, done.stderr
    assert run.proc.wait(timeout=10) == -signal.SIGKILL
    wait_until(
        lambda: not procs.pids_with_marker(run.marker), 10, message="the workers died with their launcher"
    )
    [doc] = [records.read_json(p) for p in run.state.drills_dir.glob("*.json")]
    assert doc is not None and (doc["fault"], doc["signal"], doc["pids"]) == (
        "kill-launcher",
        "SIGKILL",
        [rec.launcher_pid],
    )
    # Shared memory outlives the launcher: the next launcher's sweep removes it (on this
    # shared machine another launcher of this user may have swept it already).
    from slurm_ft.snapshot import area as areas

    areas.sweep(Path("/dev/shm"), os.getuid())
    assert not area.exists()
