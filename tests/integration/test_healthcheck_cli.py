"""slurm-ft-healthcheck as a process: exit codes, output lines, precedence, hangs, drain.

Every run has no PATH in its environment, as under Slurm's HealthCheckProgram.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurm_ft.exitcodes import ExitCode
from tests.support import healthcli
from tests.support.fake_sysfs import ib_port
from tests.support.procs import describe, new_marker, pids_with_marker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)
PROG = "slurm-ft-healthcheck"


@pytest.fixture
def marker():
    m = new_marker()
    yield m
    wait_until(
        lambda: not pids_with_marker(m), 10, message=f"no processes left: {describe(pids_with_marker(m))}"
    )


@pytest.fixture
def env(tmp_path, marker):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    return healthcli.base_env(marker, empty)


@pytest.fixture
def sysfs(tmp_path):
    root = tmp_path / "sys"
    ib_port(root, "mlx5_0", 1)
    ib_port(root, "mlx5_0", 2)
    return root


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "f.txt").write_text("hello")
    return d, d / "f.txt"


def common(sysfs: Path) -> list[str]:
    return ["--checks", "nic,storage", "--sysfs-root", str(sysfs), "--no-discover-mounts"]


def test_healthy_node_exits_0_with_one_line_per_check(env, sysfs, files):
    d, f = files
    r = healthcli.run([*common(sysfs), "--paths", f"{d},{f}"], env)
    assert (r.returncode, r.stderr) == (ExitCode.SUCCESS, "")
    assert r.lines == [
        "PASS nic:mlx5_0/1: up (state ACTIVE, phys_state LinkUp, InfiniBand)",
        "PASS nic:mlx5_0/2: up (state ACTIVE, phys_state LinkUp, InfiniBand)",
        f"PASS storage:{d}: directory listable",
        f"PASS storage:{f}: file readable (5 bytes read)",
        "node testnode: healthy",
    ]


def test_unhealthy_node_exits_94_and_quiet_prints_only_failures(env, sysfs, files, tmp_path):
    d, _ = files
    ib_port(sysfs, "mlx5_0", 2, state="DOWN", phys="Polling")
    missing = tmp_path / "gone"
    r = healthcli.run([*common(sysfs), "--paths", f"{d},{missing}"], env)
    assert r.returncode == ExitCode.UNHEALTHY
    assert r.lines == [
        "PASS nic:mlx5_0/1: up (state ACTIVE, phys_state LinkUp, InfiniBand)",
        "FAIL nic:mlx5_0/2: down (state DOWN, phys_state Polling, InfiniBand)",
        f"PASS storage:{d}: directory listable",
        f"FAIL storage:{missing}: does not exist",
        "node testnode: unhealthy, 2 failed",
    ]
    q = healthcli.run([*common(sysfs), "--paths", f"{d},{missing}", "--quiet"], env)
    assert q.returncode == ExitCode.UNHEALTHY
    assert q.lines == [
        "FAIL nic:mlx5_0/2: down (state DOWN, phys_state Polling, InfiniBand)",
        f"FAIL storage:{missing}: does not exist",
    ]


def test_json_has_every_result_and_prom_file_is_written(env, sysfs, files, tmp_path):
    d, _ = files
    prom = tmp_path / "metrics" / "slurm_ft_health.prom"
    prom.parent.mkdir()
    r = healthcli.run([*common(sysfs), "--paths", str(d), "--json", "--prom-file", str(prom)], env)
    assert r.returncode == ExitCode.SUCCESS
    doc = json.loads(r.stdout)
    assert doc["node"] == "testnode" and doc["healthy"] is True and doc["first_failure"] is None
    assert [x["name"] for x in doc["results"]] == ["nic:mlx5_0/1", "nic:mlx5_0/2", f"storage:{d}"]
    assert all(set(x) == {"name", "status", "detail", "duration_s", "data"} for x in doc["results"])
    text = prom.read_text()
    assert 'slurm_ft_health_healthy{node="testnode"} 1\n' in text
    assert f'slurm_ft_health_check_status{{node="testnode",check="storage:{d}",status="pass"}} 1\n' in text
    assert sorted(p.name for p in prom.parent.iterdir()) == ["slurm_ft_health.prom"]  # no temp files left


def test_write_probe_creates_and_removes_its_file(env, files):
    d, _ = files
    r = healthcli.run(
        ["--checks", "storage", "--no-discover-mounts", "--paths", str(d), "--write-probe"], env
    )
    assert r.returncode == ExitCode.SUCCESS, r.stdout
    assert r.lines[0] == f"PASS storage:{d}: directory listable; write probe ok"
    assert sorted(p.name for p in d.iterdir()) == ["f.txt"]


@pytest.mark.parametrize(
    ("args", "extra_env", "line"),
    [
        (
            ["--paths", "relative/dir"],
            {},
            f"{PROG}: slurm_ft.health.paths: 'relative/dir' is not an absolute path",
        ),
        (
            ["--checks", "nic,disk"],
            {},
            f"{PROG}: slurm_ft.health.checks: unknown check 'disk' (known: nic, storage, gpu)",
        ),
        (
            ["--nics", "mlx5_[0"],
            {},
            f"{PROG}: slurm_ft.health.nics: bad NIC name or glob 'mlx5_[0': '[' without ']'",
        ),
        (
            ["--config", "/nonexistent/hc.yaml"],
            {},
            f"{PROG}: cannot read config file /nonexistent/hc.yaml: No such file or directory",
        ),
        (["--config", "/"], {}, f"{PROG}: cannot read config file /: Is a directory"),
        (["--deadline", "soon"], {}, f"{PROG}: slurm_ft.health.deadline: expected number, got 'soon'"),
        (["--gpus", "two"], {}, f"{PROG}: slurm_ft.health.gpus: expected int, got 'two'"),
        (
            [],
            {"SLURM_FT_HEALTH_DEADLINE": "0"},
            f"{PROG}: environment variable SLURM_FT_HEALTH_DEADLINE: must be > 0, got 0.0",
        ),
        (
            [],
            {"SLURM_FT_HEALTH_COLOUR": "red"},
            f"{PROG}: environment variable SLURM_FT_HEALTH_COLOUR: unknown setting",
        ),
        (["--bogus"], {}, f"{PROG}: error: unrecognized arguments: --bogus"),
        (["--json", "--quiet"], {}, f"{PROG}: error: argument --quiet: not allowed with argument --json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(env, args, extra_env, line):
    r = healthcli.run(args, {**env, **extra_env})
    assert (r.returncode, r.stdout, r.err_lines) == (ExitCode.BAD_INPUT, "", [line])


def test_bad_slurm_environment_is_one_line_and_exit_2(env):
    bad = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "3"}
    r = healthcli.run(["--checks", "nic"], {**env, **bad})
    assert r.returncode == ExitCode.BAD_INPUT
    assert len(r.err_lines) == 1 and r.err_lines[0].startswith(f"{PROG}: SLURM_"), r.stderr
    assert "Traceback" not in r.stderr


def test_precedence_yaml_then_env_then_flags(env, files, tmp_path):
    d, _ = files
    missing = tmp_path / "missing"
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(
        f"slurm_ft:\n  health:\n    checks: [storage]\n    discover_mounts: false\n    paths: [{missing}]\n"
    )
    assert healthcli.run(["--config", str(cfg)], env).returncode == ExitCode.UNHEALTHY
    with_env = {**env, "SLURM_FT_HEALTH_PATHS": str(d)}
    assert healthcli.run(["--config", str(cfg)], with_env).returncode == ExitCode.SUCCESS
    r = healthcli.run(["--config", str(cfg), "--paths", str(missing)], with_env)
    assert (r.returncode, r.lines[0]) == (ExitCode.UNHEALTHY, f"FAIL storage:{missing}: does not exist")


def test_percent_n_in_a_path_is_the_slurm_node_name(env, tmp_path):
    (tmp_path / "testnode").mkdir()
    r = healthcli.run(["--checks", "storage", "--no-discover-mounts", "--paths", f"{tmp_path}/%n"], env)
    assert (r.returncode, r.lines[0]) == (
        ExitCode.SUCCESS,
        f"PASS storage:{tmp_path}/testnode: directory listable",
    )


def test_a_blocking_path_fails_at_the_deadline_and_the_command_returns_in_time(env, files, tmp_path):
    """A FIFO with no writer blocks open() like a dead mount blocks stat(): the probe hangs."""
    d, _ = files
    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    deadline = 2.0
    r = healthcli.run(
        [
            "--checks",
            "storage",
            "--no-discover-mounts",
            "--deadline",
            str(deadline),
            "--paths",
            f"{fifo},{d}",
        ],
        env,
    )
    assert r.wall_s <= deadline + 0.5, f"took {r.wall_s:.3f} s"
    assert r.returncode == ExitCode.UNHEALTHY
    assert r.lines == [
        f"FAIL storage:{fifo}: timed out after 2 s",
        f"PASS storage:{d}: directory listable",
        "node testnode: unhealthy, 1 failed",
    ]
    # The `marker` fixture then asserts the killed probe is gone (no orphan left running).


def test_a_mount_that_stops_answering_fails_at_the_deadline(env, files, hungfs):
    """A real dead mount (FUSE that never answers): the probe stuck in the kernel cannot
    even be killed, and the command still returns in time."""
    d, _ = files
    deadline = 2.0
    args = ["--checks", "storage", "--no-discover-mounts", "--deadline", str(deadline)]
    r = healthcli.run([*args, "--paths", f"{hungfs}/hang,{d}"], env)
    assert r.wall_s <= deadline + 0.5, f"took {r.wall_s:.3f} s"
    assert r.returncode == ExitCode.UNHEALTHY
    assert r.lines == [
        f"FAIL storage:{hungfs}/hang: timed out after 2 s",
        f"PASS storage:{d}: directory listable",
        "node testnode: unhealthy, 1 failed",
    ]
    # hungfs's teardown (first: it was set up last) releases the stuck probe, then the
    # `marker` fixture asserts nothing of the command is left.


def test_drain_and_resume_through_scontrol_without_path(env, tmp_path):
    """scontrol is the Slurm boundary here; the real cluster test is tests/slurm/."""
    log = tmp_path / "scontrol.log"
    state = tmp_path / "state"
    state.write_text("   State=IDLE ThreadsPerCore=1\n")
    fake = tmp_path / "scontrol"
    # Only shell builtins: there is no PATH to find anything else with.
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        'if [ "$1" = show ]; then\n'
        f"  while IFS= read -r line; do printf '%s\\n' \"$line\"; done < {state}\n"
        "fi\n"
    )
    fake.chmod(0o755)
    missing = tmp_path / "gone"
    args = ["--checks", "storage", "--no-discover-mounts", "--drain", "--scontrol", str(fake)]
    r = healthcli.run([*args, "--paths", str(missing)], env)
    assert r.returncode == ExitCode.UNHEALTHY
    assert r.err_lines == [f"{PROG}: draining testnode"]
    assert log.read_text().splitlines() == [
        "show node testnode",
        f"update NodeName=testnode State=DRAIN Reason=slurm-ft: storage:{missing}: does not exist",
    ]
    log.unlink()
    state.write_text(
        "   State=IDLE+DRAIN ThreadsPerCore=1\n"
        f"   Reason=slurm-ft: storage:{missing}: does not exist [root@2026-12-02T15:00:00]\n"
    )
    missing.mkdir()
    r = healthcli.run([*args, "--paths", str(missing)], env)
    assert r.returncode == ExitCode.SUCCESS
    assert log.read_text().splitlines() == ["show node testnode", "update NodeName=testnode State=RESUME"]
    log.unlink()
    state.write_text("   State=IDLE+DRAIN ThreadsPerCore=1\n   Reason=bad DIMM [admin@2026-12-02T15:00:00]\n")
    r = healthcli.run([*args, "--paths", str(missing)], env)
    assert r.returncode == ExitCode.SUCCESS
    assert log.read_text().splitlines() == ["show node testnode"]  # someone else's drain: untouched


def test_a_run_never_imports_torch_rich_or_pynvml(env, sysfs, files):
    """Start-up cost: the health path stays free of the slow imports (rich only for a TTY)."""
    import subprocess
    import sys

    d, _ = files
    code = (
        "import sys\n"
        "from slurm_ft.cli.healthcheck import main\n"
        f"rc = main(['--json', '--checks', 'nic,storage', '--sysfs-root', {str(sysfs)!r},"
        f" '--paths', {str(d)!r}])\n"
        "heavy = sorted(m for m in ('torch', 'rich', 'pynvml', 'numpy') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "HEAVY []"


def test_a_healthy_local_run_starts_no_child_and_loads_only_what_it_checks(env, sysfs, files):
    """Start-up cost: a local path is probed in-process (no interpreter started) and the
    GPU family, JSON and the hang parser are not imported when not used (YAML is: these
    runs name a config file)."""
    import subprocess
    import sys

    from slurm_ft.health import storage

    d, _ = files
    if storage.local_target(str(d), storage.read_mounts("/proc")) is None:
        pytest.skip(f"{d} is not on a file system known to be local here")
    code = (
        "import sys\n"
        "from slurm_ft.cli.healthcheck import main\n"
        f"rc = main(['--checks', 'nic,storage', '--sysfs-root', {str(sysfs)!r}, '--paths', {str(d)!r},"
        " '--no-discover-mounts'])\n"
        "loaded = ('subprocess', 'json', 'slurm_ft.health.gpu', 'slurm_ft.launch.hang')\n"
        "print('LOADED', sorted(m for m in loaded if m in sys.modules), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"PASS storage:{d}: directory listable" in done.stdout.splitlines()
    assert done.stderr.splitlines()[-1] == "LOADED []"
