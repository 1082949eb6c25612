"""The NIC check on a real kernel link: a veth pair inside a network namespace we create.

sysfs shows a namespace's interfaces only to processes inside it, and ``ip netns exec``
mounts a fresh sysfs for the namespace, so the command runs unchanged with the default
``/sys`` root. Addresses and links exist only inside the namespace; it is deleted after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from slurm_ft.exitcodes import ExitCode
from tests.support import healthcli
from tests.support.procs import new_marker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

IP = shutil.which("ip") or "/usr/sbin/ip"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"network namespace test cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=20, check=False)


@pytest.fixture
def netns():
    if not os.path.exists(IP):
        _skip_or_fail("iproute2 'ip' is not installed")
    name = f"sft-{uuid.uuid4().hex[:8]}"
    made = ip("netns", "add", name)
    if made.returncode != 0:
        _skip_or_fail(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        yield name
    finally:
        ip("netns", "del", name)


def test_veth_link_up_down_up(netns, tmp_path):
    a, b = "hc-a", "hc-b"
    for cmd in (
        ("-n", netns, "link", "add", a, "type", "veth", "peer", "name", b),
        ("-n", netns, "addr", "add", "10.213.0.1/30", "dev", a),
        ("-n", netns, "addr", "add", "10.213.0.2/30", "dev", b),
        ("-n", netns, "link", "set", a, "up"),
        ("-n", netns, "link", "set", b, "up"),
    ):
        done = ip(*cmd)
        assert done.returncode == 0, f"ip {' '.join(cmd)}: {done.stderr}"
    assert not os.path.exists(f"/sys/class/net/{a}"), "the veth must exist only inside the namespace"

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    env = healthcli.base_env(new_marker(), empty)
    args = ["--checks", "nic", "--nics", a]
    prefix = (IP, "netns", "exec", netns)

    def check() -> healthcli.Run:
        return healthcli.run(args, env, prefix=prefix)

    def operstate() -> str:
        out = subprocess.run(
            [*prefix, "cat", f"/sys/class/net/{a}/operstate"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        return out.stdout.strip()

    wait_until(lambda: operstate() == "up", 10, message=f"{a} operstate up")
    up = check()
    assert (up.returncode, up.lines) == (
        ExitCode.SUCCESS,
        [f"PASS nic:{a}: up (operstate up, carrier 1)", "node testnode: healthy"],
    ), up.stderr

    assert ip("-n", netns, "link", "set", a, "down").returncode == 0
    wait_until(lambda: operstate() == "down", 10, message=f"{a} operstate down")
    down = check()
    assert (down.returncode, down.lines) == (
        ExitCode.UNHEALTHY,
        [f"FAIL nic:{a}: down (operstate down, carrier -)", "node testnode: unhealthy, 1 failed"],
    ), down.stderr

    assert ip("-n", netns, "link", "set", a, "up").returncode == 0
    wait_until(lambda: operstate() == "up", 10, message=f"{a} operstate up again")
    again = check()
    assert (again.returncode, again.lines[0]) == (
        ExitCode.SUCCESS,
        f"PASS nic:{a}: up (operstate up, carrier 1)",
    )
