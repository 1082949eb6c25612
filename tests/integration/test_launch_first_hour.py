"""A new user's first hour (issue 32): the mistakes everyone makes are caught at once, and a
crash says what happened on the console. Real launcher processes, torch-free workers."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.launch_cluster import ECHO, LAUNCH, batch_env, clean_env, slurm_env
from tests.support import procs
from tests.support.waiting import wait_until

REPORT = [sys.executable, "-m", "slurm_ft.cli.report"]

CRASHER = """\
import os, sys

def load_batch(step):
    raise RuntimeError(f"injected crash at step {step}")

rank, restart = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"rank {rank}: start", flush=True)
if rank == 1 and restart == 0:
    load_batch(5)
print(f"rank {rank}: done", flush=True)
"""


def launch(tmp_path: Path, args: list[str], env_extra: dict[str, str], timeout: float = 60):
    marker = procs.new_marker()
    env = clean_env()
    env.update(env_extra)
    env[procs.MARKER_VAR] = marker
    started = time.monotonic()
    cmd = [*LAUNCH, *args]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert not procs.pids_with_marker(marker)
    return proc, time.monotonic() - started


# --- item 1: two launchers on one node ----------------------------------------------------


def two_tasks_per_node(node: int) -> dict[str, str]:
    """A task of ``srun --ntasks-per-node=2`` on 2 nodes (4 tasks): the launcher's mistake."""
    env = slurm_env("99", 2, node)
    env.update(
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_PROCID=str(2 * node + 1),
        SLURM_LOCALID="1",
    )
    return env


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dry_run", [False, True])
def test_two_launchers_on_one_node_are_refused_at_once(tmp_path, dry_run):
    args = ["--state-dir", str(tmp_path / "s"), *(["--dry-run"] if dry_run else []), str(ECHO)]
    proc, took = launch(tmp_path, args, two_tasks_per_node(1))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "slurm-ft-launch: error: this job step runs 2 tasks on node1 (4 tasks on 2 node(s)): every task "
        "would be a launcher running the whole job with the same ranks; start one launcher per node: "
        "srun --ntasks-per-node=1 slurm-ft-launch ..."
    ]
    assert proc.stdout == ""
    assert took < 10
    assert not (tmp_path / "s").exists()


# --- item 2: outside a job step -----------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dry_run", [False, True])
def test_outside_a_job_step_the_launcher_refuses_at_once(tmp_path, dry_run):
    args = ["--state-dir", str(tmp_path / "s"), "--join-timeout", "5", *(["--dry-run"] if dry_run else [])]
    # A batch script without srun, on the job's first node (Slurm names it, as in the list).
    batch = {**batch_env("99", 2), "SLURMD_NODENAME": "127.0.1.1"}
    proc, took = launch(tmp_path, [*args, str(ECHO)], batch)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "slurm-ft-launch: error: not inside a job step on one of the job's nodes (only 127.0.1.1 of the "
        "job's 2 nodes would start a launcher): run it with srun --ntasks-per-node=1 slurm-ft-launch ... "
        "(or, knowing better, --allow-outside-step)"
    ]
    assert took < 10
    assert not (tmp_path / "s").exists()
    # An salloc shell on a login node: Slurm names no node here, and this host is not in the list.
    shell = {k: v for k, v in batch.items() if k not in ("SLURM_NODEID", "SLURMD_NODENAME")}
    proc, took = launch(tmp_path, [*args, str(ECHO)], shell)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert re.fullmatch(
        r"slurm-ft-launch: error: not inside a job step on one of the job's nodes \(\S+ is not one of "
        r"the job's nodes \(127\.0\.1\.\[1-2\]\)\): run it with srun --ntasks-per-node=1 .*",
        line,
    ), line
    assert took < 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "how", [["--allow-outside-step"], ["SLURM_FT_LAUNCH_ALLOW_OUTSIDE_STEP=1"]], ids=["flag", "env"]
)
def test_a_user_who_knows_better_may_start_outside_a_step(tmp_path, how):
    env = batch_env("99", 2)
    flags = [h for h in how if h.startswith("--")]
    env.update(h.split("=", 1) for h in how if not h.startswith("--"))
    proc, _ = launch(tmp_path, ["--dry-run", *flags, "--state-dir", str(tmp_path / "s"), str(ECHO)], env)
    assert proc.returncode == 0, proc.stderr
    assert "node 0 of 2" in proc.stdout or "node_rank 0" in proc.stdout or "rank 0" in proc.stdout


# --- item 3: a crash says what happened ---------------------------------------------------


@pytest.mark.timeout(90)
def test_a_crash_names_its_exception_and_its_log_on_the_console_in_the_record_and_the_report(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CRASHER)
    logs, state = tmp_path / "logs", tmp_path / "state"
    args = [
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--health-checks",
        "none",
        "--monitor-interval",
        "0.05",
        "--applog-prefix",
        str(logs / "train.log"),
        "--state-dir",
        str(state),
        str(script),
    ]
    proc, _ = launch(tmp_path, args, {})
    assert proc.returncode == 0, proc.stderr
    cycle_log = logs / "train_cycle0.log"
    failed = [ln for ln in proc.stderr.splitlines() if "cycle 0 failed" in ln]
    assert len(failed) == 1, proc.stderr
    assert failed[0].endswith(
        f"cycle 0 failed: rank 1 (local 1) on {failed[0].split(' on ', 1)[1].split(' ', 1)[0]} (node 0): "
        f"exit code 1: RuntimeError: injected crash at step 5 (its output: {cycle_log})"
    ), failed[0]
    assert "RuntimeError: injected crash at step 5" in cycle_log.read_text()

    record = json.loads((state / "cycles" / "cycle0.json").read_text())
    first = record["first_failure"]
    assert first["message"] == "RuntimeError: injected crash at step 5"
    assert first["traceback"].startswith("Traceback (most recent call last):\n")
    assert 'in load_batch\n    raise RuntimeError(f"injected crash at step {step}")' in first["traceback"]
    assert first["traceback"].endswith("RuntimeError: injected crash at step 5")

    report = subprocess.run(
        [*REPORT, "--state-dir", str(state), "--json"], capture_output=True, text=True, env=clean_env()
    )
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    failures = [c["first_failure"] for c in doc["cycles"] if c.get("first_failure")]
    assert failures and failures[0]["exception"] == "RuntimeError: injected crash at step 5"

    # The short story the demo prints is an installed command's, in the README's shape.
    summary = subprocess.run(
        [*REPORT, "--summary", "--state-dir", str(state)], capture_output=True, text=True, env=clean_env()
    )
    assert summary.returncode == 0, summary.stderr
    lines = summary.stdout.splitlines()
    assert lines[0].startswith("== slurm-ft: standalone run: 1 node(s) (") and lines[0].endswith(
        " x 2 workers, world size 2"
    )
    assert lines[1].startswith("cycle 0: failed: rank 1 on ")
    assert lines[1].endswith(" failed (exit code 1); every worker on every node was stopped and restarted")
    assert lines[2:] == [
        "         exception: RuntimeError: injected crash at step 5",
        "cycle 1: succeeded: all 2 ranks exited 0",
        f"logs:    {cycle_log}",
        f"         {logs / 'train_cycle1.log'}",
        "outcome: finished (exit 0): all workers finished",
    ]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    demo = readme.split("as `slurm-ft-report --summary`", 1)[1].split("```\n", 2)[1]

    def label(line: str) -> str:
        """What a line is: its leading word up to a colon (paths alone are "path")."""
        m = re.match(r"\s*(==|[a-z]+(?: \d+)?:|/|training)", line)
        assert m, line
        return re.sub(r"\d+", "N", m.group(1)).replace("/", "path")

    # Every kind of line the README shows is printed (the run has no checkpoints to resume).
    shown = {label(line) for line in demo.splitlines()} - {"training"}
    assert shown == {label(line) for line in lines}, (shown, lines)


# --- item 5: Ctrl-C and --quiet -----------------------------------------------------------

STUBBORN = """\
import os, signal, sys, time
signal.signal(signal.SIGINT, lambda *_: print(f"rank {os.environ['RANK']}: not now", flush=True))
print(f"rank {os.environ['RANK']}: up", flush=True)
while True:
    time.sleep(0.05)
"""


def start_launcher(tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], Path, str]:
    marker = procs.new_marker()
    env = clean_env()
    env[procs.MARKER_VAR] = marker
    err = tmp_path / "stderr.txt"
    with err.open("wb") as fh:
        proc = subprocess.Popen([*LAUNCH, *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=fh)
    return proc, err, marker


@pytest.mark.timeout(90)
@pytest.mark.parametrize("second", [True, False], ids=["second-ctrl-c", "grace-ends"])
def test_ctrl_c_says_how_long_it_waits_a_second_one_kills_now_and_sigkill_is_reported(tmp_path, second):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    log = tmp_path / "logs" / "train.log"
    grace = "60" if second else "1"
    args = ["--nproc-per-node", "2", "--health-checks", "none", "--term-timeout", grace]
    args += ["--applog-prefix", str(log), "--state-dir", str(tmp_path / "state"), str(script)]
    proc, err, marker = start_launcher(tmp_path, args)
    try:
        cycle_log = tmp_path / "logs" / "train_cycle0.log"
        wait_until(
            lambda: cycle_log.exists() and cycle_log.read_text().count(": up") == 2, 30, message="workers up"
        )
        proc.send_signal(signal.SIGINT)
        waiting = f"received SIGINT: forwarding to workers; waiting up to {grace} s for them to exit; "
        waiting += "Ctrl-C again kills them now"
        wait_until(lambda: waiting in err.read_text(), 15, message="the waiting line\n" + err.read_text())
        started = time.monotonic()
        if second:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
        took = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    text = err.read_text()
    if second:
        assert took < 10, text
        assert "stopped 2 worker(s) with SIGKILL (on a second SIGINT)" in text, text
    else:
        assert "stopped 2 worker(s) with SIGKILL (still running 1 s after SIGINT)" in text, text
    assert "stopped 2 worker(s) with SIGINT" not in text
    wait_until(lambda: not procs.pids_with_marker(marker), 10, message="no worker left")


@pytest.mark.timeout(60)
def test_quiet_still_says_how_the_launch_ended(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CRASHER)
    launcher_log = tmp_path / "launcher.log"
    args = ["--nproc-per-node", "2", "--max-restarts", "0", "--health-checks", "none", "--quiet"]
    args += ["--launcher-log", str(launcher_log), "--applog-prefix", str(tmp_path / "logs" / "train.log")]
    args += ["--state-dir", str(tmp_path / "state"), str(script)]
    proc, _ = launch(tmp_path, args, {})
    assert proc.returncode == 1
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurm-ft-launch:")]
    assert line.startswith("slurm-ft-launch: restarts-exhausted (exit 1): "), line
    assert "RuntimeError: injected crash at step 5" in line, line


# --- item 10: a reused standalone state dir is said ---------------------------------------


@pytest.mark.timeout(60)
def test_a_second_standalone_run_in_the_same_state_dir_is_told_it_continues_the_history(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('fine')\n")
    args = ["--nproc-per-node", "1", "--health-checks", "none", str(script)]
    first, _ = launch(tmp_path, args, {})
    assert first.returncode == 0, first.stderr
    assert "note:" not in first.stderr
    second, _ = launch(tmp_path, args, {})
    assert second.returncode == 0, second.stderr
    state = tmp_path / ".slurm_ft" / "standalone"
    assert (
        f"slurm-ft-launch: note: state dir {state} holds 1 earlier standalone run(s) (1 cycle(s)): this run "
        "continues their history (cycle numbers, no-progress streak, the report's attempts); give "
        "--state-dir DIR to keep this run apart"
    ) in second.stderr.splitlines()
