"""Node 0's store listens on an IPv4 socket of its own where its peers come over IPv4
(issue 45): torch's own dual-stack listener names every peer ``::ffff:a.b.c.d`` with a
reverse DNS query per accept, on its one loop thread."""

from __future__ import annotations

from pathlib import Path

from slurm_ft.launch.rendezvous import stores


def _listening_in(table: str, port: int) -> bool:
    for line in Path(table).read_text().splitlines()[1:]:
        cols = line.split()
        if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            return True
    return False


def test_an_ipv4_address_gets_an_ipv4_listener() -> None:
    store = stores.host(0, 5.0, "127.0.0.1")
    assert _listening_in("/proc/net/tcp", store.port)
    assert not _listening_in("/proc/net/tcp6", store.port)
    client = stores.reconnect("127.0.0.1", store.port, 5.0)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_without_an_address_torch_listens_itself() -> None:
    """Its dual-stack socket, as before (where the host has IPv6, as this one does)."""
    store = stores.host(0, 5.0)
    assert _listening_in("/proc/net/tcp6", store.port)


def test_a_port_in_use_is_a_bind_error() -> None:
    first = stores.host(0, 5.0, "127.0.0.1")
    try:
        stores.host(first.port, 5.0, "127.0.0.1")
    except stores.StoreBindError as exc:
        assert f"port {first.port} in use" in str(exc)
    else:
        raise AssertionError("a second store bound the same port")
