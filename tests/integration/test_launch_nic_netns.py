"""The launcher's NIC judgement on a real kernel link: an interface down from the start."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.launch_cluster import ECHO, LAUNCH, clean_env, slurm_env
from tests.support.netns import IP, ip, operstate

pytestmark = pytest.mark.timeout(90)


def _launch(netns: str, tmp_path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    env.update(slurm_env("61", 1, 0))
    args = ["--health-checks", "nic", "--nics", "idle-a", "--nproc-per-node", "1", *extra]
    return subprocess.run(
        [IP, "netns", "exec", netns, *LAUNCH, *args, "--state-dir", str(tmp_path / "s"), str(ECHO)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_interface_down_from_the_start_only_fails_in_absolute_mode(netns, tmp_path):
    made = ip("-n", netns, "link", "add", "idle-a", "type", "veth", "peer", "name", "idle-b")
    assert made.returncode == 0, made.stderr
    assert operstate(netns, "idle-a") == "down"  # never set up, as an unused second port
    default = _launch(netns, tmp_path)
    assert default.returncode == 0, default.stderr
    absolute = _launch(netns, tmp_path, "--nic-mode", "absolute")
    assert absolute.returncode == 94, absolute.stderr
    assert "node unhealthy: nic:idle-a: down" in absolute.stderr
