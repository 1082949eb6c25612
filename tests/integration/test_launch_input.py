"""Bad input: one clear stderr line, exit 2, no process started, nothing half-written.
And --dry-run: the exact worker commands and environments, nothing started, no torch."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.integration.launch_cluster import ECHO, LAUNCH, clean_env, free_port, slurm_env
from tests.support import procs


def run_launcher(tmp_path, args, *, env_extra=None, node=0, nodes=2, timeout=60):
    marker = procs.new_marker()
    env = clean_env()
    env.update(slurm_env("99", nodes, node))
    env.update(env_extra or {})
    env[procs.MARKER_VAR] = marker
    proc = subprocess.run(
        [*LAUNCH, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )
    assert not procs.pids_with_marker(marker)
    return proc


def assert_bad_input(proc, expected_line: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [expected_line]
    assert proc.stdout == ""


@pytest.mark.timeout(60)
def test_missing_script(tmp_path):
    p = run_launcher(tmp_path, ["--state-dir", str(tmp_path / "s"), "nope.py"])
    assert_bad_input(p, "slurm-ft-launch: error: training script not found: nope.py")
    assert not (tmp_path / "s").exists()


@pytest.mark.timeout(60)
def test_nproc_zero(tmp_path):
    p = run_launcher(tmp_path, ["--state-dir", str(tmp_path / "s"), "--nproc-per-node", "0", str(ECHO)])
    assert_bad_input(p, "slurm-ft-launch: error: --nproc-per-node: must be >= 1, got 0")
    assert not (tmp_path / "s").exists()


@pytest.mark.timeout(60)
def test_invalid_topology(tmp_path):
    p = run_launcher(tmp_path, ["--state-dir", str(tmp_path / "s"), str(ECHO)], node=5, nodes=2)
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurm-ft-launch: error: ") and "SLURM_NODEID" in lines[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.timeout(60)
def test_unwritable_state_dir(tmp_path):
    (tmp_path / "file").write_text("x")
    p = run_launcher(tmp_path, ["--state-dir", str(tmp_path / "file" / "state"), str(ECHO)])
    assert_bad_input(
        p, f"slurm-ft-launch: error: state dir {tmp_path / 'file' / 'state'} is not writable: Not a directory"
    )


@pytest.mark.timeout(60)
def test_relative_applog_prefix(tmp_path):
    p = run_launcher(
        tmp_path, ["--state-dir", str(tmp_path / "s"), "--applog-prefix", "logs/job.log", str(ECHO)]
    )
    assert_bad_input(
        p, "slurm-ft-launch: error: --applog-prefix: must be an absolute path, got 'logs/job.log'"
    )


@pytest.mark.timeout(60)
def test_bad_setting_from_environment(tmp_path):
    p = run_launcher(tmp_path, [str(ECHO)], env_extra={"SLURM_FT_LAUNCH_MAX_RESTARTS": "many"})
    assert_bad_input(
        p,
        "slurm-ft-launch: error: environment variable SLURM_FT_LAUNCH_MAX_RESTARTS: expected int, got 'many'",
    )


@pytest.mark.timeout(60)
def test_unknown_option_and_no_script(tmp_path):
    p = run_launcher(tmp_path, ["--bogus", str(ECHO)])
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "--bogus" in p.stderr
    p = run_launcher(tmp_path, [])
    assert_bad_input(
        p, "slurm-ft-launch: error: no training script given; usage: slurm-ft-launch [options] SCRIPT [args]"
    )


@pytest.mark.timeout(60)
def test_dry_run_prints_commands_and_environment_without_torch_or_ports(tmp_path):
    port = free_port()
    with socket.socket() as held:  # a dry run must not try to bind it
        held.bind(("0.0.0.0", port))
        held.listen()
        code = (
            "import sys; from slurm_ft.cli.launch import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
        )
        env = clean_env()
        env.update(slurm_env("99", 2, 1))
        marker = procs.new_marker()
        env[procs.MARKER_VAR] = marker
        p = subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                "--dry-run",
                "--rdzv-port",
                str(port),
                "--nproc-per-node",
                "2",
                "--state-dir",
                str(tmp_path / "s"),
                str(ECHO),
                "--steps",
                "5",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    out = p.stdout
    assert "job: 99 attempt 0; node node1 is node 1 of 2 (127.0.1.1, 127.0.1.2)" in out
    assert f"rendezvous: TCPStore on 127.0.1.1:{port}" in out
    assert "workers: 2 per node, world size 4, ranks 2-3 on this node" in out
    assert f"  command: {sys.executable} -u {ECHO} --steps 5" in out
    for line in (
        "  RANK=2",
        "  RANK=3",
        "  LOCAL_RANK=1",
        "  WORLD_SIZE=4",
        "  GROUP_RANK=1",
        "  MASTER_ADDR=127.0.1.1",
        "  TORCHELASTIC_RESTART_COUNT=0",
        "  TORCHELASTIC_MAX_RESTARTS=3",
        "  TORCHELASTIC_RUN_ID=99-a0",
        f"  TORCHELASTIC_ERROR_FILE={tmp_path / 's' / 'nodes' / 'node1' / 'cycle0-rank3.error.json'}",
        "  OMP_NUM_THREADS=1",
    ):
        assert line in out.splitlines(), line
    assert not (tmp_path / "s").exists()
    assert not procs.pids_with_marker(marker)


@pytest.mark.timeout(60)
def test_dry_run_shows_the_state_dirs_next_cycle(tmp_path):
    """A requeued job's workers get the cycle the counter names, not 0: so must the dry run."""
    state = tmp_path / "s"
    state.mkdir()
    (state / "next_cycle").write_text("7\n")
    p = run_launcher(
        tmp_path,
        ["--dry-run", "--nproc-per-node", "1", "--state-dir", str(state), str(ECHO)],
        node=1,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "  SLURM_FT_CYCLE=7" in lines
    assert f"  SLURM_FT_CYCLE_INFO={state / 'cycles' / 'cycle7.json'}" in lines
    assert f"  TORCHELASTIC_ERROR_FILE={state / 'nodes' / 'node1' / 'cycle7-rank1.error.json'}" in lines
