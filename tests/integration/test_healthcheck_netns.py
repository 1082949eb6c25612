"""The NIC check on a real kernel link: a veth pair inside a network namespace we create."""

from __future__ import annotations

import os

import pytest

from slurm_ft.exitcodes import ExitCode
from tests.support import healthcli
from tests.support.netns import IP, ip, operstate, veth_up
from tests.support.procs import new_marker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)


def test_veth_link_up_down_up(netns, tmp_path):
    a, b = "hc-a", "hc-b"
    veth_up(netns, a, b, "10.213.0")
    assert not os.path.exists(f"/sys/class/net/{a}"), "the veth must exist only inside the namespace"

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    env = healthcli.base_env(new_marker(), empty)
    args = ["--checks", "nic", "--nics", a]
    prefix = (IP, "netns", "exec", netns)

    def check() -> healthcli.Run:
        return healthcli.run(args, env, prefix=prefix)

    wait_until(lambda: operstate(netns, a) == "up", 10, message=f"{a} operstate up")
    up = check()
    assert (up.returncode, up.lines) == (
        ExitCode.SUCCESS,
        [f"PASS nic:{a}: up (operstate up, carrier 1)", "node testnode: healthy"],
    ), up.stderr

    assert ip("-n", netns, "link", "set", a, "down").returncode == 0
    wait_until(lambda: operstate(netns, a) == "down", 10, message=f"{a} operstate down")
    down = check()
    assert (down.returncode, down.lines) == (
        ExitCode.UNHEALTHY,
        [f"FAIL nic:{a}: down (operstate down, carrier -)", "node testnode: unhealthy, 1 failed"],
    ), down.stderr

    assert ip("-n", netns, "link", "set", a, "up").returncode == 0
    wait_until(lambda: operstate(netns, a) == "up", 10, message=f"{a} operstate up again")
    again = check()
    assert (again.returncode, again.lines[0]) == (
        ExitCode.SUCCESS,
        f"PASS nic:{a}: up (operstate up, carrier 1)",
    )
