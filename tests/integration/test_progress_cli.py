"""slurm-ft-progress as batch scripts and people run it: real subprocesses, exact lines and codes.

The "launcher" processes here are small Python programs that drive the real
ProgressTracker exactly as node 0 of slurm-ft-launch does (before_cycle / after_cycle), so
the ledger's continuation across Slurm attempts is exercised through the file system and
separate processes, the way requeued jobs see it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_ft.progress import load_ledger
from tests.support.procs import MARKER_VAR, describe, new_marker, pids_with_marker

pytestmark = pytest.mark.timeout(60)

CLI = str(Path(sys.executable).parent / "slurm-ft-progress")
PROG = "slurm-ft-progress"


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any Slurm or slurm-ft settings (tests may run in a job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SLURMD_"))}
    env.update(extra)
    return env


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


def one_error_line(proc: subprocess.CompletedProcess[str], line: str) -> None:
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr == f"{PROG}: {line}\n"


# A node-0 launcher for one Slurm attempt, reduced to what the tracker sees: it runs cycles
# until its in-job restart budget is spent or the tracker says stop; each cycle's "training"
# optionally checkpoints (adds to the iteration file) and then crashes. The iteration file
# exists from the start (a source that never existed leaves the guard off).
ATTEMPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from slurm_ft.config import ProgressSettings
    from slurm_ft.progress import ProgressTracker
    from slurm_ft.statedir import StateDir

    state, it_file, attempt, k, cycles, gain, next_cycle, mode = sys.argv[1:9]
    if not Path(it_file).exists():  # the trainer's first checkpoint, at iteration 0
        Path(it_file).write_text("0")
    settings = ProgressSettings(it_file, int(k), 1)
    tracker = ProgressTracker(StateDir(Path(state)), settings, int(attempt))
    counter = Path(next_cycle)
    for _ in range(int(cycles)):
        cycle = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(cycle + 1))
        reason = tracker.before_cycle(cycle)
        if reason:
            print("stop:", reason, flush=True)
            sys.exit(93)
        if int(gain):
            it = Path(it_file)
            now = int(it.read_text()) if it.exists() else 0
            it.write_text(str(now + int(gain)))
        if mode == "sigkill":  # node 0's launcher dies mid-cycle: nobody closes the cycle
            os.kill(os.getpid(), signal.SIGKILL)
        tracker.after_cycle(cycle, "worker-failed")
    sys.exit(1)
    """
)


def start_attempt(
    tmp_path: Path,
    state: Path,
    it_file: Path,
    n: int,
    *,
    k: int = 2,
    cycles: int = 1,
    gain: int = 0,
    mode: str = "crash",
) -> subprocess.CompletedProcess[str]:
    marker = new_marker()
    args = [
        str(state),
        str(it_file),
        str(n),
        str(k),
        str(cycles),
        str(gain),
        str(tmp_path / "next_cycle"),
        mode,
    ]
    proc = subprocess.run(
        [sys.executable, "-c", ATTEMPT, *args],
        env=clean_env(**{MARKER_VAR: marker}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert pids_with_marker(marker) == [], describe(pids_with_marker(marker))
    return proc


def attempt(
    tmp_path: Path, state: Path, it_file: Path, n: int, *, k: int = 2, cycles: int = 1, gain: int = 0
) -> subprocess.CompletedProcess[str]:
    proc = start_attempt(tmp_path, state, it_file, n, k=k, cycles=cycles, gain=gain)
    assert proc.stderr == "", proc.stderr
    return proc


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    state.mkdir()
    return state, tmp_path / "latest_checkpointed_iteration.txt"


# ------------------------------------------------------------------ no history, finding the dir


def test_check_without_history_allows_the_attempt(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, _ = job
    proc = run("check", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"no history in {state}: another attempt may run\n",
        "",
    )
    missing = tmp_path / "never-created"
    proc = run("check", "--state-dir", str(missing), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"no history in {missing}: another attempt may run\n")
    assert not missing.exists(), "check must not create anything"


def test_status_without_history(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, _ = job
    proc = run("status", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"no history in {state}: another attempt may run\n",
        "",
    )
    doc = json.loads(run("status", "--json", "--state-dir", str(state), cwd=tmp_path).stdout)
    assert (doc["history"], doc["cycles"], doc["verdict"], doc["streak"]) == (False, [], "allow", 0)


def test_standalone_without_a_state_dir_is_bad_input(tmp_path: Path) -> None:
    where = tmp_path / ".slurm_ft" / "standalone"
    for args in (["check"], ["check", "--json"], ["status"], ["reset", "--yes"]):
        one_error_line(
            run(*args, cwd=tmp_path),
            f"not inside a Slurm job and {where} does not exist; pass --state-dir DIR",
        )
    where.mkdir(parents=True)
    proc = run("check", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"no history in {where}: another attempt may run\n")


def test_state_dir_found_from_slurm_variables(tmp_path: Path) -> None:
    submit = tmp_path / "submit"
    env = clean_env(
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST="127.0.1.[1-2]",
        SLURM_JOB_NUM_NODES="2",
        SLURM_SUBMIT_DIR=str(submit),
        SLURM_RESTART_COUNT="1",
    )
    expected = submit / ".slurm_ft" / "4242"
    one_error_line(run("status", cwd=tmp_path, env=env), f"state dir {expected} does not exist")
    proc = run("check", cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (0, f"no history in {expected}: another attempt may run\n")
    it = tmp_path / "it.txt"
    for n in range(2):
        assert attempt(tmp_path, expected, it, n).returncode == 1
    proc = run("check", cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (
        93,
        "stop: no progress in the last 2 cycles (iteration stuck at 0); do not requeue\n",
    )
    env["SLURM_FT_STATE_DIR"] = str(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    assert run("check", cwd=tmp_path, env=env).returncode == 0


def test_invalid_slurm_variables_are_one_line(tmp_path: Path) -> None:
    env = clean_env(SLURM_JOB_ID="12x")
    one_error_line(run("check", cwd=tmp_path, env=env), "SLURM_JOB_ID='12x' is not a non-negative integer")


def test_bad_settings_are_one_line(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, _ = job
    one_error_line(
        run("check", "--state-dir", str(state), "--min-progress-iterations", "0", cwd=tmp_path),
        "slurm_ft.progress.min_progress_iterations: must be >= 1, got 0",
    )
    one_error_line(
        run("check", "--state-dir", str(state), cwd=tmp_path, env=clean_env(SLURM_FT_PROGRESS_TYPO="1")),
        "environment variable SLURM_FT_PROGRESS_TYPO: unknown setting",
    )
    one_error_line(
        run("check", "--max-no-progress-cycles", "two", cwd=tmp_path),
        "argument --max-no-progress-cycles: invalid int value: 'two'",
    )
    one_error_line(
        run("frobnicate", cwd=tmp_path),
        "argument command: invalid choice: 'frobnicate' (choose from 'status', 'check', 'reset')",
    )
    one_error_line(
        run("check", "--state-dir", str(state), "--config", str(tmp_path / "nope.yaml"), cwd=tmp_path),
        f"cannot read config file {tmp_path / 'nope.yaml'}: No such file or directory",
    )


def test_a_state_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("x")
    for command in ("check", "status"):
        one_error_line(
            run(command, "--state-dir", str(path), cwd=tmp_path), f"state dir {path} is not a directory"
        )


# ------------------------------------------------------------------ continuation across attempts


def test_crash_before_first_checkpoint_is_stopped_after_k_cycles_in_total(
    tmp_path: Path, job: tuple[Path, Path]
) -> None:
    """One cycle per attempt (no in-job restarts): the guard counts across requeues."""
    state, it = job
    verdicts = []
    for n in range(5):
        proc = attempt(tmp_path, state, it, n, k=3)
        if proc.returncode == 93:
            verdicts.append("launcher-93")
            break
        assert proc.returncode == 1
        check = run("check", "--state-dir", str(state), cwd=tmp_path)
        verdicts.append(check.returncode)
        if check.returncode == 93:
            assert (
                check.stdout
                == "stop: no progress in the last 3 cycles (iteration stuck at 0); do not requeue\n"
            )
            break
    assert verdicts == [0, 0, 93]
    ledger = load_ledger(state / "ledger.json")
    assert ledger is not None
    assert [
        (c.attempt, c.cycle, c.iteration_start, c.iteration_end, c.progressed) for c in ledger.cycles
    ] == [
        (0, 0, 0, 0, False),
        (1, 1, 0, 0, False),
        (2, 2, 0, 0, False),
    ]
    assert ledger.streak == 3
    # Had the template requeued anyway, the launcher itself refuses to start a cycle.
    proc = attempt(tmp_path, state, it, 3, k=3)
    assert (proc.returncode, proc.stdout) == (
        93,
        "stop: no progress in the last 3 cycles (iteration stuck at 0)\n",
    )
    ledger = load_ledger(state / "ledger.json")
    assert (
        ledger is not None
        and ledger.stopped is not None
        and (ledger.stopped.attempt, ledger.stopped.cycle) == (3, 3)
    )


def test_in_job_restarts_and_requeues_share_one_streak(tmp_path: Path, job: tuple[Path, Path]) -> None:
    """K=2: the first attempt spends one no-progress cycle... plus one more; the second is refused."""
    state, it = job
    proc = attempt(tmp_path, state, it, 0, k=2, cycles=3)
    assert (proc.returncode, proc.stdout) == (
        93,
        "stop: no progress in the last 2 cycles (iteration stuck at 0)\n",
    )
    assert run("check", "--state-dir", str(state), cwd=tmp_path).returncode == 93


def test_a_job_that_checkpoints_between_crashes_keeps_going(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, it = job
    for n in range(6):
        assert attempt(tmp_path, state, it, n, k=2, cycles=2, gain=10).returncode == 1
        check = run("check", "--state-dir", str(state), cwd=tmp_path)
        assert (check.returncode, check.stdout) == (
            0,
            f"another attempt may run: 0 of 2 no-progress cycles, iteration {20 * (n + 1)}\n",
        )
    ledger = load_ledger(state / "ledger.json")
    assert ledger is not None and len(ledger.cycles) == 12 and all(c.progressed for c in ledger.cycles)


def test_a_launcher_killed_mid_cycle_is_counted_as_interrupted(
    tmp_path: Path, job: tuple[Path, Path]
) -> None:
    state, it = job
    assert attempt(tmp_path, state, it, 0, k=2).returncode == 1
    killed = start_attempt(tmp_path, state, it, 1, k=2, mode="sigkill")
    assert killed.returncode == -signal.SIGKILL
    ledger = load_ledger(state / "ledger.json")
    assert ledger is not None and ledger.open_cycle is not None and ledger.streak == 1
    doc = json.loads(run("status", "--json", "--state-dir", str(state), cwd=tmp_path).stdout)
    assert (doc["cycles"][-1]["open"], doc["cycles"][-1]["outcome"]) == (True, None)
    assert doc["open_cycle"] == {"cycle": 1, "iteration_now": 0, "counts_as_progress": False}
    assert (doc["streak"], doc["verdict"]) == (2, "stop")
    table = run("status", "--state-dir", str(state), cwd=tmp_path).stdout.splitlines()
    assert (
        "cycle 1 is open (still running, or its launcher was lost): "
        "judged as interrupted with no progress (iteration now 0)"
    ) in table
    proc = run("check", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (
        93,
        "stop: no progress in the last 2 cycles (iteration stuck at 0); do not requeue\n",
    )
    after = load_ledger(state / "ledger.json")
    assert after == ledger, "check and status never write the ledger"


# ------------------------------------------------------------------ policy from the ledger vs options


def test_check_uses_the_launchers_policy_unless_told_otherwise(
    tmp_path: Path, job: tuple[Path, Path]
) -> None:
    state, it = job
    for n in range(2):
        assert attempt(tmp_path, state, it, n, k=2).returncode == 1
    assert run("check", "--state-dir", str(state), cwd=tmp_path).returncode == 93
    proc = run("check", "--state-dir", str(state), "--max-no-progress-cycles", "5", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (
        0,
        "another attempt may run: 2 of 5 no-progress cycles, iteration 0\n",
    )
    env = clean_env(SLURM_FT_PROGRESS_MAX_NO_PROGRESS_CYCLES="0")
    proc = run("check", "--state-dir", str(state), cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (
        0,
        "progress tracking off (max no-progress cycles <= 0): another attempt may run\n",
    )
    config = tmp_path / "ft.yaml"
    config.write_text("slurm_ft:\n  progress:\n    max_no_progress_cycles: 3\n")
    proc = run("check", "--state-dir", str(state), "--config", str(config), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (
        0,
        "another attempt may run: 2 of 3 no-progress cycles, iteration 0\n",
    )


# ------------------------------------------------------------------ status output


def test_status_json_schema(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, it = job
    assert attempt(tmp_path, state, it, 0, k=2, cycles=1, gain=5).returncode == 1
    assert attempt(tmp_path, state, it, 1, k=2, cycles=1).returncode == 1
    proc = run("status", "--json", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    doc = json.loads(proc.stdout)
    assert set(doc) == {
        "state_dir", "ledger", "history", "source_seen", "policy", "streak", "last_iteration", "verdict",
        "reason", "attempts", "cycles", "open_cycle", "resets", "stopped", "nodes",
    }  # fmt: skip
    assert doc["state_dir"] == str(state) and doc["ledger"] == str(state / "ledger.json")
    assert doc["policy"] == {
        "source": f"iteration-file:{it}",
        "pattern": None,
        "max_no_progress_cycles": 2,
        "min_progress_iterations": 1,
    }
    assert doc["source_seen"] is True
    assert (doc["history"], doc["streak"], doc["last_iteration"], doc["verdict"], doc["reason"]) == (
        True, 1, 5, "allow", None,
    )  # fmt: skip
    assert doc["attempts"] == [0, 1]
    common = {"outcome": "worker-failed", "open": False, "warnings": []}
    assert doc["cycles"] == [
        {**common, "cycle": 0, "attempt": 0, "iteration_start": 0, "iteration_end": 5, "progress": 5,
         "progressed": True},
        {**common, "cycle": 1, "attempt": 1, "iteration_start": 5, "iteration_end": 5, "progress": 0,
         "progressed": False},
    ]  # fmt: skip
    assert (doc["resets"], doc["stopped"], doc["open_cycle"], doc["nodes"]) == ([], None, None, None)
    check = json.loads(run("check", "--json", "--state-dir", str(state), cwd=tmp_path).stdout)
    assert check == doc


def test_status_table(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, it = job
    assert attempt(tmp_path, state, it, 0, k=2, cycles=1, gain=5).returncode == 1
    assert attempt(tmp_path, state, it, 1, k=2, cycles=1).returncode == 1
    proc = run("status", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    rows = [line.replace("│", " ").split() for line in proc.stdout.splitlines() if line.startswith("│")]
    assert rows == [
        ["0", "0", "0", "5", "5", "worker-failed", "progress"],
        ["1", "1", "5", "5", "0", "worker-failed", "no", "progress"],
    ]
    assert proc.stdout.splitlines()[-3:] == [
        f"source: iteration-file:{it}",
        "streak: 1 of 2 no-progress cycles (progress means >= 1 iterations)",
        "verdict: another attempt may run: 1 of 2 no-progress cycles, iteration 5",
    ]


def test_status_says_who_was_active_spare_and_replaced_with_spare_nodes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "cycles").mkdir(parents=True)
    common = {"world_size": 2, "run_uuid": "u"}
    for cycle, active, spare, moves in (
        (0, ["node1", "node2"], ["node3", "node4"], []),
        (1, ["node1", "node3"], ["node4"], ["node rank 1: node2 -> node3 (lost: launcher silent)"]),
    ):
        doc = {**common, "cycle": cycle, "active_nodes": active, "spare_nodes": spare, "replacements": moves}
        (state / "cycles" / f"cycle{cycle}.json").write_text(json.dumps(doc))
    (state / "outcome.json").write_text(json.dumps({"exit_code": 0, "lost_nodes": ["node2", "node4"]}))
    proc = run("status", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines()[-3:] == [
        "nodes in cycle 1: active node1, node3; spare node4",
        "replaced in cycle 1: node rank 1: node2 -> node3 (lost: launcher silent)",
        "last attempt: lost node2, node4",
    ]
    doc = json.loads(run("status", "--json", "--state-dir", str(state), cwd=tmp_path).stdout)
    assert doc["nodes"] == {
        "cycle": 1,
        "active": ["node1", "node3"],
        "spare": ["node4"],
        "replacements": ["cycle 1: node rank 1: node2 -> node3 (lost: launcher silent)"],
        "lost": ["node2", "node4"],
        "suspect": [],
        "unhealthy": [],
    }


# ------------------------------------------------------------------ reset


def test_reset_clears_the_streak_after_a_fix(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, it = job
    for n in range(2):
        assert attempt(tmp_path, state, it, n, k=2).returncode == 1
    before = (state / "ledger.json").read_bytes()
    one_error_line(
        run("reset", "--state-dir", str(state), cwd=tmp_path),
        "reset changes the ledger: pass --yes (stdin is not a terminal)",
    )
    assert (state / "ledger.json").read_bytes() == before
    proc = run("reset", "--yes", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"reset the no-progress streak in {state} (was 2; 2 cycles kept)\n",
        "",
    )
    assert (state / "ledger.json.bak").read_bytes() == before
    proc = run("check", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (
        0,
        "another attempt may run: 0 of 2 no-progress cycles, iteration 0\n",
    )
    doc = json.loads(run("status", "--json", "--state-dir", str(state), cwd=tmp_path).stdout)
    assert [(r["streak_before"], r["after_cycle"]) for r in doc["resets"]] == [(2, 1)]
    # The next attempt starts from zero: it gets K more cycles.
    assert attempt(tmp_path, state, it, 2, k=2).returncode == 1
    assert run("check", "--state-dir", str(state), cwd=tmp_path).returncode == 0


def test_reset_without_history_and_without_dir(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, _ = job
    proc = run("reset", "--yes", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"no history in {state}: nothing to reset\n")
    assert list(state.iterdir()) == []
    missing = tmp_path / "missing"
    one_error_line(
        run("reset", "--yes", "--state-dir", str(missing), cwd=tmp_path),
        f"state dir {missing} does not exist",
    )


# ------------------------------------------------------------------ corrupt ledger


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ("", "not valid JSON (Expecting value at line 1)"),
        ('{"version": 1, "cycles": [], "streak": "2"}', "ledger: 'streak' has the wrong type ('2')"),
        ('{"version": 7, "cycles": [], "streak": 0}', "unsupported ledger version 7 (this slurm-ft reads 1)"),
    ],
)
def test_a_corrupt_ledger_is_reported_never_replaced(
    tmp_path: Path, job: tuple[Path, Path], content: str, what: str
) -> None:
    state, it = job
    ledger = state / "ledger.json"
    ledger.write_text(content)
    line = (
        f"ledger {ledger} is corrupt: {what}; "
        f"run `slurm-ft-progress reset --yes --state-dir {state}` to start over"
    )
    for command in ("check", "status"):
        one_error_line(run(command, "--state-dir", str(state), cwd=tmp_path), line)
    assert ledger.read_text() == content
    # The launcher refuses it too, with the same message.
    launcher = start_attempt(tmp_path, state, it, 0)
    assert launcher.returncode == 1 and f"slurm_ft.progress.ledger.LedgerError: {line}" in launcher.stderr
    assert ledger.read_text() == content

    proc = run("reset", "--yes", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    aside = [p for p in state.iterdir() if p.name.startswith("ledger.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == content
    assert proc.stdout == f"set the corrupt ledger aside as {aside[0]} and started a new one in {state}\n"
    # A fresh ledger has no recorded policy until the launcher's next cycle.
    check = run("check", "--state-dir", str(state), "--checkpoint-iteration-file", str(it), cwd=tmp_path)
    assert (check.returncode, check.stdout) == (
        0,
        f"progress source iteration-file:{it} has not existed at any cycle boundary: the guard has judged "
        "nothing; another attempt may run\n",
    )
    assert start_attempt(tmp_path, state, it, 1).returncode == 1
    ledger_now = load_ledger(ledger)
    assert ledger_now is not None and len(ledger_now.cycles) == 1 and ledger_now.streak == 1


def test_a_corrupt_ledger_names_the_backup_when_there_is_one(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, it = job
    for n in range(2):
        assert attempt(tmp_path, state, it, n, k=5).returncode == 1
    ledger = state / "ledger.json"
    ledger.write_text("garbage")
    proc = run("check", "--state-dir", str(state), cwd=tmp_path)
    one_error_line(
        proc,
        f"ledger {ledger} is corrupt: not valid JSON (Expecting value at line 1) "
        f"(the previous version is kept in {ledger}.bak); "
        f"run `slurm-ft-progress reset --yes --state-dir {state}` to start over",
    )


def test_help_exits_zero(tmp_path: Path) -> None:
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "status" in proc.stdout and "check" in proc.stdout


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 1), ("", 1)])
def test_reset_on_a_terminal_asks(tmp_path: Path, job: tuple[Path, Path], answer: str, code: int) -> None:
    state, it = job
    for n in range(2):
        assert attempt(tmp_path, state, it, n, k=2).returncode == 1
    before = (state / "ledger.json").read_bytes()
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen(
            [CLI, "reset", "--state-dir", str(state)],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
            text=True,
        )
        os.write(controller, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(terminal)
        os.close(controller)
    question = f"Reset the no-progress streak in {state} (now 2)? [y/N] "
    if code == 0:
        assert (proc.returncode, out, err) == (
            0,
            question + f"reset the no-progress streak in {state} (was 2; 2 cycles kept)\n",
            "",
        )
        assert run("check", "--state-dir", str(state), cwd=tmp_path).returncode == 0
    else:
        assert (proc.returncode, out, err) == (1, question + "not reset; nothing changed\n", "")
        assert (state / "ledger.json").read_bytes() == before


def test_check_imports_neither_torch_nor_rich(tmp_path: Path, job: tuple[Path, Path]) -> None:
    """Start-up budget: the guard must not pay for torch, nor for rich when no table is drawn."""
    state, it = job
    assert attempt(tmp_path, state, it, 0).returncode == 1
    probe = textwrap.dedent(
        """
        import contextlib, io, sys
        from slurm_ft.cli.progress import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["check", "--state-dir", sys.argv[1]])
        heavy = sorted(m for m in ("torch", "rich", "numpy") if m in sys.modules)
        print(code, heavy)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(state)], env=clean_env(), capture_output=True, text=True, timeout=30
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "0 []\n", "")


# ------------------------------------------------------------------ sources


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--progress-source", "dir:/x"],
            "slurm_ft.progress.source: expected KIND:PATH with KIND one of iteration-file, checkpoint-dir, "
            "file, got 'dir:/x'",
        ),
        (
            ["--progress-source", "file:/x", "--progress-pattern", r"s(\d+)"],
            "slurm_ft.progress.source: a progress pattern applies only to checkpoint-dir: sources, not file:",
        ),
        (
            ["--progress-source", "checkpoint-dir:/x", "--progress-pattern", "s"],
            "slurm_ft.progress.source: progress pattern 's' must have exactly one group (the step)",
        ),
    ],
)
def test_a_bad_source_is_bad_input(
    tmp_path: Path, job: tuple[Path, Path], args: list[str], line: str
) -> None:
    state, _ = job
    one_error_line(run("check", "--state-dir", str(state), *args, cwd=tmp_path), line)


def test_without_a_source_the_guard_is_off_and_says_so(tmp_path: Path, job: tuple[Path, Path]) -> None:
    state, _ = job
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from slurm_ft.config import ProgressSettings
        from slurm_ft.progress import ProgressTracker
        from slurm_ft.statedir import StateDir

        tracker = ProgressTracker(StateDir(Path(sys.argv[1])), ProgressSettings(), 0)
        print(tracker.start_line())
        for cycle in range(3):
            assert tracker.before_cycle(cycle) is None
            tracker.after_cycle(cycle, "worker-failed")
        """
    )
    launcher = subprocess.run(
        [sys.executable, "-c", script, str(state)], capture_output=True, text=True, timeout=30, check=True
    )
    assert launcher.stdout == "no progress source: the no-progress guard is off\n"
    proc = run("check", "--state-dir", str(state), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (
        0,
        "no progress source: the no-progress guard is off: another attempt may run\n",
    )
    status = run("status", "--state-dir", str(state), cwd=tmp_path)
    assert "source: none (no progress source: the no-progress guard is off)" in status.stdout
    assert status.stdout.count("not judged") == 3
