"""A throw-away network namespace with a veth pair: real kernel links the tests may take down.

sysfs shows a namespace's interfaces only to processes inside it, and ``ip netns exec``
mounts a fresh sysfs for the namespace, so code under test runs there unchanged with the
default ``/sys`` root. Addresses and links exist only inside the namespace; it is deleted after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

IP = shutil.which("ip") or "/usr/sbin/ip"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"network namespace test cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=20, check=False)


@pytest.fixture
def netns() -> Iterator[str]:
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


def veth_up(ns: str, a: str, b: str, net: str) -> None:
    """``a``/``b`` a veth pair in ``ns`` with ``net``.1/.2 (a /30 prefix like 10.213.0), both up."""
    for cmd in (
        ("-n", ns, "link", "add", a, "type", "veth", "peer", "name", b),
        ("-n", ns, "addr", "add", f"{net}.1/30", "dev", a),
        ("-n", ns, "addr", "add", f"{net}.2/30", "dev", b),
        ("-n", ns, "link", "set", a, "up"),
        ("-n", ns, "link", "set", b, "up"),
    ):
        done = ip(*cmd)
        assert done.returncode == 0, f"ip {' '.join(cmd)}: {done.stderr}"


def operstate(ns: str, iface: str) -> str:
    out = subprocess.run(
        [IP, "netns", "exec", ns, "cat", f"/sys/class/net/{iface}/operstate"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return out.stdout.strip()
