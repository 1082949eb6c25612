"""Warm restarts (issue 27): the next cycle's workers are standby interpreters started while
the last cycle trained, and a trainer cannot tell them from cold-started ones.

Real launcher processes on one node, torch-free workers (torch is not the point here; the
benchmark ``benchmarks/warm_restart.py`` measures a real gloo trainer). Each comparison runs
the same probe twice, once with ``--preload none`` (every worker cold) and once with
standbys, and compares what the cycle-1 workers saw.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.launch_cluster import LAUNCH, REPO, clean_env
from tests.support import procs
from tests.support.waiting import wait_until

PROBE = REPO / "tests" / "integration" / "standby_probe.py"
WARM_LINE = re.compile(r"cycle 1: (\d) of 2 worker\(s\) started warm")


def run_probe(
    tmp_path: Path,
    *,
    warm: bool,
    end: str = "ok",
    extra: list[str] | None = None,
    wait: str | None = "yes",
    wait_log: tuple[Path, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / ("warm" if warm else "cold")
    out.mkdir()
    marker = procs.new_marker()
    env = clean_env()
    env.update(
        SLURM_FT_LAUNCH_NPROC_PER_NODE="2",
        SLURM_FT_PROBE_DIR=str(out),
        SLURM_FT_PROBE_END=end,
        **{procs.MARKER_VAR: marker},
    )
    if wait and warm:
        env["SLURM_FT_PROBE_WAIT_STANDBYS"] = wait
    if wait_log is not None:
        env["SLURM_FT_PROBE_WAIT_LOG"] = f"{wait_log[0]}|{wait_log[1]}"
    args = [
        "--max-restarts",
        "1",
        "--state-dir",
        str(out / "state"),
        "--applog-prefix",
        str(out / "job.log"),
        *(["--preload", "none"] if not warm else []),
        *(extra or []),
        str(PROBE),
    ]
    proc = subprocess.run([*LAUNCH, *args], env=env, cwd=out, capture_output=True, text=True, timeout=90)
    assert not procs.pids_with_marker(marker), procs.describe(procs.pids_with_marker(marker))
    return proc, out


def seen(out: Path, rank: int) -> dict[str, object]:
    return json.loads((out / f"seen-rank{rank}.json").read_text())


def normalised(view: dict[str, object], out: Path) -> dict[str, object]:
    """What may differ between two runs in two directories: the directories, the private
    run dir (a random name), the store port and the cycle's port."""
    text = json.dumps(view, sort_keys=True).replace(str(out), "<OUT>")
    text = re.sub(r"slurm-ft-[A-Za-z0-9_]+", "slurm-ft-<RUN>", text)
    data = json.loads(text)
    env = data["env"]
    assert isinstance(env, dict)
    env.pop("MASTER_PORT")
    env.pop(procs.MARKER_VAR)
    env.pop("SLURM_FT_PROBE_WAIT_STANDBYS", None)
    env.pop("SLURM_FT_PROBE_WAIT_LOG", None)  # the test's own: the warm run waits for its standbys
    return data


@pytest.mark.timeout(240)
def test_a_warm_worker_sees_what_a_cold_one_sees(tmp_path):
    cold, cold_out = run_probe(tmp_path, warm=False)
    warm, warm_out = run_probe(tmp_path, warm=True)
    assert cold.returncode == 0 and warm.returncode == 0, (cold.stderr, warm.stderr)
    assert "started warm" not in cold.stderr
    assert "standby workers off: --preload none" in cold.stderr
    assert WARM_LINE.search(warm.stderr) and WARM_LINE.search(warm.stderr).group(1) == "2", warm.stderr
    for rank in (0, 1):
        a, b = normalised(seen(cold_out, rank), cold_out), normalised(seen(warm_out, rank), warm_out)
        for key in sorted(a.keys() | b.keys()):
            assert a.get(key) == b.get(key), (
                f"rank {rank}: {key} differs: cold {a.get(key)!r}, warm {b.get(key)!r}"
            )
        assert b["session_leader"] and b["group_leader"] and b["parent_is_launcher"]
        assert b["pdeathsig"] == signal.SIGKILL
        assert b["main_is_this"] and b["name"] == "__main__"


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("end", "said"),
    [
        ("exit3", "exit code 3"),
        ("raise", "exit code 1"),
        ("interrupt", "killed by SIGINT"),
        ("segv", "killed by SIGSEGV"),
    ],
)
def test_a_warm_worker_ends_as_a_cold_one_does(tmp_path, end, said):
    cold, cold_out = run_probe(tmp_path, warm=False, end=end)
    warm, warm_out = run_probe(tmp_path, warm=True, end=end)
    assert cold.returncode == warm.returncode == 1
    assert WARM_LINE.search(warm.stderr), warm.stderr
    for proc in (cold, warm):
        assert re.search(rf"cycle 1 failed: rank 0 \(local 0\) on \S+ \(node 0\): {said}", proc.stderr), (
            proc.stderr
        )

    def cycle1(out: Path) -> list[str]:
        text = (out / "job_cycle1.log").read_text().replace(str(out), "<OUT>")
        return [line for line in text.splitlines() if line.startswith("0: ")]

    assert cycle1(cold_out) == cycle1(warm_out)
    if end == "raise":  # the traceback starts at the script, as a cold one does
        assert cycle1(warm_out)[1:3] == [
            "0: Traceback (most recent call last):",
            f'0:   File "{PROBE}", line {_line_of("main()")}, in <module>',
        ]
        assert "standby_child" not in (warm_out / "job_cycle1.log").read_text()


def _line_of(text: str) -> int:
    lines = PROBE.read_text().splitlines()
    return max(n for n, line in enumerate(lines, 1) if line.strip() == text)


@pytest.mark.timeout(120)
def test_a_hung_warm_worker_gives_its_stacks(tmp_path):
    proc, _ = run_probe(
        tmp_path, warm=True, end="hang", extra=["--hang-timeout", "3", "--hang-safety-factor", "0"]
    )
    assert proc.returncode == 1, proc.stderr
    assert WARM_LINE.search(proc.stderr), proc.stderr
    assert "cycle 1 failed: hang" in proc.stderr, proc.stderr
    kept = re.search(r"stacks of rank 0 kept in (\S+)", proc.stderr)
    assert kept, proc.stderr
    stacks = Path(kept.group(1)).read_text()
    assert re.search(rf'File "{PROBE}", line \d+ in hang_here', stacks), stacks


@pytest.mark.timeout(120)
def test_a_standby_that_died_is_replaced_by_a_cold_start_said_once(tmp_path):
    proc, out = run_probe(tmp_path, warm=True, wait="kill")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "not used" in line]
    assert len(lines) == 2, proc.stderr
    for local, line in enumerate(lines):
        assert line.endswith(
            f"standby for local rank {local} not used: it had exited (signal 9); starting it cold"
        ), line
    assert "started warm" not in proc.stderr
    assert seen(out, 0)["env"]["RANK"] == "0"


@pytest.mark.timeout(120)
def test_a_preload_that_fails_turns_standbys_off_and_workers_start_cold(tmp_path):
    log = tmp_path / "warm" / "launcher.log"
    proc, _ = run_probe(
        tmp_path,
        warm=True,
        wait=None,
        extra=["--preload", "no_such_module_xyz", "--launcher-log", str(log)],
        wait_log=(log, "standby workers off"),
    )
    assert proc.returncode == 0, proc.stderr
    off = [line for line in proc.stderr.splitlines() if "standby workers off" in line]
    assert len(off) == 1, proc.stderr
    assert (
        off[0].endswith(
            "standby workers off: preloading no_such_module_xyz: ModuleNotFoundError: "
            "No module named 'no_such_module_xyz'; workers start cold"
        )
        or "not used: its preload failed" in proc.stderr
    ), proc.stderr
    assert "started warm" not in proc.stderr


AUTO_SCRIPT = """\
import os, sys, json
import probe_localdep
print(json.dumps({"at_start": sorted(m for m in ("yaml", "probe_localdep") if m in START)}), flush=True)
"""


@pytest.mark.timeout(120)
def test_auto_preloads_the_installed_packages_the_script_imports_never_its_own(tmp_path):
    # START: what is in sys.modules when the script's first line runs.
    script = tmp_path / "auto.py"
    script.write_text(
        "import sys\nSTART = set(sys.modules)\n"
        + AUTO_SCRIPT.replace("import os, sys, json\n", "import os, json\n")
        + "if os.environ['SLURM_FT_CYCLE'] == '0':\n"
        "    from tests.integration.standby_probe import wait_for_log\n"
        "    wait_for_log(os.environ['SLURM_FT_PROBE_WAIT_LOG'])\n"
        "    sys.exit(1)\n"
    )
    (tmp_path / "probe_localdep.py").write_text("import yaml\n")
    marker = procs.new_marker()
    env = clean_env()
    log = tmp_path / "launcher.log"
    env.update(
        SLURM_FT_LAUNCH_NPROC_PER_NODE="1",
        SLURM_FT_PROBE_WAIT_LOG=f"{log}|ready in",
        **{procs.MARKER_VAR: marker},
    )
    args = ["--max-restarts", "1", "--state-dir", str(tmp_path / "s"), "--launcher-log", str(log)]
    args += ["--applog-prefix", str(tmp_path / "job.log")]
    proc = subprocess.run(
        [*LAUNCH, *args, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"standby for local rank 0 ready in [\d.]+ s \(preloaded tests, yaml, RSS \d+ MiB\)", proc.stderr
    ), proc.stderr
    assert "cycle 1: 1 of 1 worker(s) started warm" in proc.stderr
    cold = json.loads((tmp_path / "job_cycle0.log").read_text().splitlines()[0].split(": ", 1)[1])
    warm = json.loads((tmp_path / "job_cycle1.log").read_text().splitlines()[0].split(": ", 1)[1])
    assert cold == {"at_start": []}
    assert warm == {"at_start": ["yaml"]}  # the local module is read for its imports, never imported
    assert not procs.pids_with_marker(marker)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["-m", "json.tool", "--help"], "the workers run a module (-m), which always starts cold"),
        (["--max-restarts", "0", "quick.py"], "no restarts (--max-restarts 0)"),
    ],
)
def test_standbys_off_is_said_once_with_the_reason(tmp_path, args, why):
    env = clean_env()
    env.update(SLURM_FT_LAUNCH_NPROC_PER_NODE="1")
    (tmp_path / "quick.py").write_text("print('done')\n")
    proc = subprocess.run(
        [*LAUNCH, "--state-dir", str(tmp_path / "s"), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert [line.split(": ", 1)[1] for line in proc.stderr.splitlines() if "standby workers off" in line] == [
        f"standby workers off: {why}"
    ], proc.stderr


@pytest.mark.timeout(90)
def test_a_launcher_killed_with_sigkill_takes_its_standbys_with_it(tmp_path):
    script = tmp_path / "long.py"
    script.write_text("import time\nprint('training', flush=True)\ntime.sleep(120)\n")
    marker = procs.new_marker()
    env = clean_env()
    env.update(SLURM_FT_LAUNCH_NPROC_PER_NODE="2", **{procs.MARKER_VAR: marker})
    log = tmp_path / "launcher.log"
    with open(log, "w") as err:
        launcher = subprocess.Popen(
            [*LAUNCH, "--state-dir", str(tmp_path / "s"), str(script)], env=env, cwd=tmp_path, stderr=err
        )
    try:
        wait_until(lambda: log.read_text().count("ready in") == 2, timeout=60, message="two standbys ready")
        standbys = [p for p in procs.pids_with_marker(marker) if b"standby_child.py" in _cmdline(p)]
        assert len(standbys) == 2
        launcher.kill()
        launcher.wait(timeout=10)
        wait_until(
            lambda: not procs.pids_with_marker(marker), timeout=15, message="workers and standbys gone"
        )
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in procs.pids_with_marker(marker):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.timeout(60)
def test_standbys_wait_without_using_the_cpu(tmp_path):
    script = tmp_path / "long.py"
    script.write_text("import time\nprint('training', flush=True)\ntime.sleep(120)\n")
    marker = procs.new_marker()
    env = clean_env()
    env.update(SLURM_FT_LAUNCH_NPROC_PER_NODE="1", **{procs.MARKER_VAR: marker})
    prom = tmp_path / "m.prom"
    log = tmp_path / "launcher.log"
    with open(log, "w") as err:
        launcher = subprocess.Popen(
            [*LAUNCH, "--state-dir", str(tmp_path / "s"), "--prom-file", str(prom), str(script)],
            env=env,
            cwd=tmp_path,
            stderr=err,
        )
    try:
        wait_until(lambda: "ready in" in log.read_text(), timeout=40, message="the standby ready")
        [standby] = [p for p in procs.pids_with_marker(marker) if b"standby_child.py" in _cmdline(p)]
        before = _cpu_ticks(standby)
        time.sleep(2.0)  # the measured interval itself, not a synchronisation
        assert _cpu_ticks(standby) == before
        wait_until(
            lambda: prom.exists() and "slurm_ft_launch_standby_workers" in prom.read_text(),
            timeout=20,
            message="the standby in the metrics file",
        )
        text = prom.read_text()
        assert re.search(r"slurm_ft_launch_standby_workers\{[^}]*\} 1\n", text), text
        assert re.search(r"slurm_ft_launch_standby_resident_bytes\{[^}]*\} [1-9]\d+\n", text), text
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=40)
    assert not procs.pids_with_marker(marker)


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


GLOO_PROBE = REPO / "tests" / "integration" / "standby_gloo_probe.py"


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_a_warm_ddp_worker_never_leaves_its_gloo_group_to_the_reducer(tmp_path):
    """torch's teardown race (pytorch#56297): a trainer that frees DDP after
    destroy_process_group() leaves the reducer to destroy the group, holding the GIL; the
    tutorial trainer hung at exit in most warm cycles. A warm worker keeps the groups the
    script destroyed until it has run, then releases them (and exits 0)."""
    marker = procs.new_marker()
    env = clean_env()
    log = tmp_path / "launcher.log"
    env.update(
        SLURM_FT_LAUNCH_NPROC_PER_NODE="2",
        SLURM_FT_PROBE_DIR=str(tmp_path),
        SLURM_FT_PROBE_LOG=str(log),
        GLOO_SOCKET_IFNAME="lo",
        **{procs.MARKER_VAR: marker},
    )
    args = ["--max-restarts", "1", "--state-dir", str(tmp_path / "state"), "--launcher-log", str(log)]
    proc = subprocess.run(
        [*LAUNCH, *args, str(GLOO_PROBE)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=150
    )
    assert not procs.pids_with_marker(marker), procs.describe(procs.pids_with_marker(marker))
    said = log.read_text()
    assert proc.returncode == 0, said + proc.stderr
    assert "cycle 1: 2 of 2 worker(s) started warm" in said, said
    for rank in (0, 1):
        assert json.loads((tmp_path / f"group-rank{rank}.json").read_text()) == {"kept": True}


NICE_SCRIPT = """\
import os, sys
print("nice", open("/proc/self/autogroup").read().rsplit("nice", 1)[1].strip(), flush=True)
if os.environ["SLURM_FT_CYCLE"] == "0":
    from tests.integration.standby_probe import wait_for_log
    wait_for_log(os.environ["SLURM_FT_PROBE_WAIT_LOG"])
    sys.exit(1)
"""


@pytest.mark.skipif(
    Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1",
    reason="the kernel does not share the CPU out by autogroup here",
)
@pytest.mark.timeout(120)
def test_a_standby_imports_at_a_low_cpu_share_and_works_at_a_cold_workers(tmp_path):
    """While it preloads a standby's session weighs as nice 19 against the workers'; the
    worker it becomes weighs as a cold one does."""
    script = tmp_path / "nice.py"
    script.write_text(NICE_SCRIPT)
    (tmp_path / "probe_nice.py").write_text(
        "import os\n"
        "with open(os.path.join(os.path.dirname(__file__), f'preload-{os.getpid()}'), 'w') as fh:\n"
        "    fh.write(open('/proc/self/autogroup').read())\n"
    )
    marker = procs.new_marker()
    env = clean_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    log = tmp_path / "launcher.log"
    env.update(
        SLURM_FT_LAUNCH_NPROC_PER_NODE="1",
        SLURM_FT_PROBE_WAIT_LOG=f"{log}|ready in",
        **{procs.MARKER_VAR: marker},
    )
    args = ["--max-restarts", "1", "--state-dir", str(tmp_path / "s"), "--launcher-log", str(log)]
    args += ["--applog-prefix", str(tmp_path / "job.log"), "--preload", "probe_nice"]
    proc = subprocess.run(
        [*LAUNCH, *args, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert "cycle 1: 1 of 1 worker(s) started warm" in proc.stderr
    during = [p.read_text() for p in tmp_path.glob("preload-*")]
    assert during and all(text.rstrip().endswith("nice 19") for text in during), during
    for cycle in (0, 1):  # a session's new autogroup starts at nice 0
        assert (tmp_path / f"job_cycle{cycle}.log").read_text() == "0: nice 0\n"
    assert not procs.pids_with_marker(marker)


LOW_SHARE_PROBE = """\
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("standby_child", sys.argv[1])
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
child.LOW_SHARE_MAX_S = 0.3
share = lambda: open("/proc/self/autogroup").read().split()[-1]
low = child._LowShare.begin()
print(share(), flush=True)
deadline = time.monotonic() + 10
while share() != "0" and time.monotonic() < deadline:
    time.sleep(0.05)
print(share(), low.end(), len(__import__("threading").enumerate()))
"""


@pytest.mark.skipif(
    Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1",
    reason="the kernel does not share the CPU out by autogroup here",
)
@pytest.mark.timeout(60)
def test_a_standby_that_imports_for_long_gets_its_share_back_after_a_while():
    """Where the workers keep every core busy a standby at nice 19 would never be ready:
    its share comes back after LOW_SHARE_MAX_S (shortened here), before the imports end."""
    child = REPO / "slurm_ft" / "launch" / "workers" / "standby_child.py"
    done = subprocess.run(
        [sys.executable, "-c", LOW_SHARE_PROBE, str(child)],
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,  # an autogroup of its own, not the test's
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["19", "0", "True", "1"]


SLOW_PRELOAD = """\
import os, time
from tests.integration.standby_probe import wait_for_log
here = os.path.dirname(__file__)
def share():
    return open("/proc/self/autogroup").read().rsplit("nice", 1)[1].strip()
open(os.path.join(here, f"preload-started-{os.getpid()}"), "w").write(share())
wait_for_log(os.environ["SLURM_FT_PROBE_WAIT_LOG"])  # until the next cycle has taken it
deadline = time.monotonic() + 3
while share() != "0" and time.monotonic() < deadline:
    time.sleep(0.05)
open(os.path.join(here, f"preload-taken-{os.getpid()}"), "w").write(share())
"""

TAKEN_EARLY_SCRIPT = """\
import os, sys, time
print("up", flush=True)  # the launcher starts the standbys once every worker wrote something
if os.environ["SLURM_FT_CYCLE"] == "0":
    here = os.path.dirname(os.path.abspath(__file__))
    deadline = time.monotonic() + 60
    while not any(n.startswith("preload-started-") for n in os.listdir(here)):
        if time.monotonic() > deadline:
            sys.exit(3)
        time.sleep(0.05)
    sys.exit(1)  # the next cycle takes the standby while it still imports
"""


@pytest.mark.skipif(
    Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1",
    reason="the kernel does not share the CPU out by autogroup here",
)
@pytest.mark.timeout(120)
def test_a_standby_taken_before_its_imports_are_done_gets_a_cold_workers_share_at_once(tmp_path):
    """A restart right after another takes a standby that is still importing at nice 19:
    the worker it has become must not finish those imports at 1.5 % of a core (17-55 s to
    the first step in the goodput runs); its share is set back when it is taken, not when
    its imports end or its 10 s timer fires."""
    script = tmp_path / "taken_early.py"
    script.write_text(TAKEN_EARLY_SCRIPT)
    (tmp_path / "probe_slow.py").write_text(SLOW_PRELOAD)
    marker = procs.new_marker()
    env = clean_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    log = tmp_path / "launcher.log"
    env.update(
        SLURM_FT_LAUNCH_NPROC_PER_NODE="1",
        SLURM_FT_PROBE_WAIT_LOG=f"{log}|cycle 1: 1 of 1 worker(s) started warm",
        **{procs.MARKER_VAR: marker},
    )
    args = ["--max-restarts", "1", "--state-dir", str(tmp_path / "s"), "--launcher-log", str(log)]
    args += ["--applog-prefix", str(tmp_path / "job.log"), "--preload", "probe_slow"]
    proc = subprocess.run(
        [*LAUNCH, *args, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert "cycle 1: 1 of 1 worker(s) started warm" in proc.stderr
    assert [p.read_text() for p in tmp_path.glob("preload-started-*")] == ["19"]
    assert [p.read_text() for p in tmp_path.glob("preload-taken-*")] == ["0"]
    assert not procs.pids_with_marker(marker)
