"""The local multi-node Slurm cluster as a session fixture.

Tests submit jobs as a plain user (`slurmft`), as real users do: root-only behaviour must
never be what makes a test pass. The cluster is brought up once per session by
``scripts/slurm-local-up`` and torn down by ``scripts/slurm-local-down`` when this session
started it. Without root or Slurm the tests skip, except under CI (``CI=true``), where a
skipped Slurm test would hide a broken product and so fails instead.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.procs import all_pids, is_alive
from tests.support.waiting import WaitTimeout, wait_until

REPO = Path(__file__).resolve().parents[2]
PLAIN_USER = "slurmft"
LOCAL_DIR = Path(os.environ.get("SLURM_FT_LOCAL_DIR", "/var/tmp/slurm-ft-local"))
CONF_DIR = Path("/etc/slurm")
EXTRA_CONF = CONF_DIR / "slurm-extra.conf"
NODES = tuple(f"node{k}" for k in range(1, 5))
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def describe_processes(pids: list[int]) -> str:
    """One line per process (pid, parent, state, command line): what a failing test names."""
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rfind(")") + 2 :].split()
            lines.append(f"  pid {pid} ppid {fields[1]} state {fields[0]}: {cmd.strip()[:300]}")
        except (OSError, IndexError):
            lines.append(f"  pid {pid}: gone")
    return "\n".join(lines)


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"Slurm tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]


@dataclass
class Job:
    job_id: str
    workdir: Path

    def output(self, name: str = "slurm.out") -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class LocalCluster:
    """What a test needs to drive the cluster; every call goes through real Slurm commands."""

    nodes: tuple[str, ...] = NODES
    user: str = PLAIN_USER
    venv_bin: Path = field(default_factory=lambda: Path(sys.executable).parent)
    _tmp_root: Path = field(default_factory=lambda: _shared_tmp_root())

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid

    def job_env(self, **extra: str) -> dict[str, str]:
        """Environment for sbatch: the plain user's, with our venv first on PATH."""
        env = {
            "PATH": f"{self.venv_bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": pwd.getpwnam(self.user).pw_dir,
            "USER": self.user,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if os.environ.get("PYTHONPATH"):  # a worktree under test, not the venv's editable install
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(extra)
        return env

    def workdir(self, name: str) -> Path:
        """A fresh directory owned by the plain user (its jobs write their files here)."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self._tmp_root))
        os.chown(path, self.uid, -1)
        path.chmod(0o755)
        return path

    def write(self, path: Path, text: str, mode: int = 0o644) -> Path:
        path.write_text(text)
        path.chmod(mode)
        os.chown(path, self.uid, -1)
        return path

    def sbatch(self, script: Path, *args: str, env: dict[str, str] | None = None) -> Job:
        """Submit as the plain user from the script's directory; returns the job."""
        cmd = ["/usr/sbin/runuser", "-u", self.user, "--", "sbatch", "--parsable", *args, str(script)]
        result = _run(cmd, cwd=script.parent, env=env or self.job_env())
        if result.returncode != 0:
            raise AssertionError(f"sbatch failed ({result.returncode}): {result.stderr.strip()}")
        return Job(job_id=result.stdout.strip().split(";")[0], workdir=script.parent)

    def job_fields(self, job_id: str) -> dict[str, str]:
        result = _run(["scontrol", "show", "job", "-o", job_id])
        if result.returncode != 0:
            return {}
        fields: dict[str, str] = {}
        for m in re.finditer(r"(\w+)=(\S*)", result.stdout):
            fields.setdefault(m.group(1), m.group(2))
        return fields

    def job_state(self, job_id: str) -> str:
        return self.job_fields(job_id).get("JobState", "UNKNOWN")

    def wait_final(self, job: Job, timeout: float) -> dict[str, str]:
        """Wait until the job reached a final state (requeues included); return its fields."""

        def final() -> dict[str, str] | None:
            fields = self.job_fields(job.job_id)
            return fields if fields.get("JobState") in FINAL_STATES else None

        return wait_until(final, timeout, interval=0.3, message=f"job {job.job_id} to finish")

    def user_processes(self) -> list[int]:
        """Live processes of the plain user: after a job ends there must be none."""
        out = []
        for pid in all_pids():
            try:
                if os.stat(f"/proc/{pid}").st_uid == self.uid and is_alive(pid):
                    out.append(pid)
            except OSError:
                continue
        return out

    def assert_no_user_processes(self, timeout: float = 15.0) -> None:
        try:
            wait_until(lambda: not self.user_processes(), timeout, message="no processes of the plain user")
        except WaitTimeout as exc:
            raise AssertionError(f"{exc}; left:\n{describe_processes(self.user_processes())}") from None

    def set_extra_conf(self, lines: list[str]) -> None:
        """Replace the test-owned slurm.conf lines and make every daemon re-read them."""
        EXTRA_CONF.write_text("# slurm-ft tests add lines here\n" + "".join(f"{ln}\n" for ln in lines))
        EXTRA_CONF.chmod(0o644)
        self.reconfigure()

    def reconfigure(self) -> None:
        result = _run(["scontrol", "reconfigure"])
        if result.returncode != 0:
            raise AssertionError(f"scontrol reconfigure failed: {result.stderr.strip()}")

    def node_fields(self, node: str) -> dict[str, str]:
        result = _run(["scontrol", "show", "node", "-o", node])
        fields: dict[str, str] = {}
        # Reason may contain spaces: take it whole, it comes last before other Key= fields.
        reason = re.search(r"Reason=(.*?)(?: \w+=|$)", result.stdout)
        for m in re.finditer(r"(\w+)=(\S*)", result.stdout):
            fields.setdefault(m.group(1), m.group(2))
        if reason:
            fields["Reason"] = reason.group(1)
        return fields

    def resume_all(self) -> None:
        _run(["scontrol", "update", f"NodeName={','.join(self.nodes)}", "State=RESUME"])

    def wait_nodes_idle(self, timeout: float = 30.0) -> None:
        def idle() -> bool:
            out = _run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split("\n")
            states = [ln.split()[1] for ln in out if ln.strip()]
            return len(states) >= len(self.nodes) and all(s == "idle" for s in states)

        wait_until(idle, timeout, interval=0.2, message="all nodes idle")

    def end_leftovers(self) -> str:
        """After each test: no job of the plain user and none of its processes outlive it,
        so one failed test does not fail the next ones with its leftovers. Requeue is turned
        off first (the templates answer scancel's SIGTERM with a requeue). What had to be
        ended, for the failing test's report ("" when nothing)."""
        jobs = _run(["squeue", "-h", "-u", self.user, "-o", "%i"]).stdout.split()
        for job_id in jobs:
            _run(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
            _run(["scancel", job_id])
        if jobs:
            try:
                wait_until(
                    lambda: not _run(["squeue", "-h", "-u", self.user]).stdout.strip(),
                    60,
                    interval=0.3,
                    message="the cancelled jobs to leave the queue",
                )
            except WaitTimeout:
                _run(["scancel", "--signal=KILL", "--full", "-u", self.user])
        left = self.user_processes()
        described = describe_processes(left)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: not self.user_processes(), 15, message="the plain user's processes gone")
        parts = [f"jobs cancelled: {' '.join(jobs)}"] if jobs else []
        return "\n".join([*parts, *([f"processes killed:\n{described}"] if left else [])])

    def cleanup(self) -> None:
        if os.environ.get("SLURM_FT_KEEP_JOBS") == "1":  # a debugging session reads them
            return
        shutil.rmtree(self._tmp_root, ignore_errors=True)


def _shared_tmp_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="slurm-ft-jobs-"))
    root.chmod(0o755)  # the plain user's jobs must reach their directories inside
    return root


def _ensure_plain_user() -> None:
    try:
        pwd.getpwnam(PLAIN_USER)
    except KeyError:
        result = _run(["useradd", "--create-home", "--shell", "/bin/bash", PLAIN_USER])
        if result.returncode != 0:
            _skip_or_fail(f"cannot create the plain user {PLAIN_USER}: {result.stderr.strip()}")


def _package_readable_by_plain_user() -> bool:
    """Jobs run as the plain user and import slurm_ft from our venv: it must be readable."""
    probe = _run(
        [
            "/usr/sbin/runuser",
            "-u",
            PLAIN_USER,
            "--",
            sys.executable,
            "-c",
            "import slurm_ft, rich, yaml",
        ],
        cwd="/",
    )
    return probe.returncode == 0


def _slurmctld_running() -> bool:
    """A cluster someone else brought up (and will take down): its slurmctld is alive. A
    pid file left by a killed session is not one; this session then takes its cluster
    down again."""
    try:
        pid = int((LOCAL_DIR / "slurmctld.pid").read_text().strip())
        return Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld"
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        _skip_or_fail("the local Slurm cluster needs root")
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        _skip_or_fail("neither Slurm nor apt-get is available")
    already_up = _slurmctld_running()
    up = _run([str(REPO / "scripts" / "slurm-local-up")])
    if up.returncode != 0:
        _skip_or_fail(f"scripts/slurm-local-up failed: {up.stderr.strip()[-500:]}")
    _ensure_plain_user()
    if not _package_readable_by_plain_user():
        _skip_or_fail(
            f"the plain user {PLAIN_USER} cannot import slurm_ft from {sys.executable}; "
            "install the package into a venv every user can read (scripts/test does)"
        )
    cluster = LocalCluster()
    cluster.set_extra_conf([])
    cluster.resume_all()
    cluster.wait_nodes_idle()
    try:
        yield cluster
    finally:
        cluster.set_extra_conf([])
        cluster.cleanup()
        if not already_up and os.environ.get("SLURM_FT_KEEP_CLUSTER") != "1":
            _run([str(REPO / "scripts" / "slurm-local-down")])


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that failed with its job still running must not hold the nodes (or leave
    processes) for the tests after it: the leftovers are ended and written to stderr."""
    yield
    if "slurm_cluster" not in request.fixturenames:
        return
    cluster: LocalCluster = request.getfixturevalue("slurm_cluster")
    ended = cluster.end_leftovers()
    if ended:
        sys.stderr.write(f"\n{request.node.nodeid} left behind (now ended):\n{ended}\n")
