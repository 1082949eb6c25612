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


def test_asking_whether_a_cycle_was_halted_wakes_no_halt_waiter() -> None:
    """torch's libuv store wakes a key's waiters at any compare_set of it, even one that
    changes nothing: a peer asking whether the cycle was halted must not wake node 0's halt
    waiter (it would then sleep through the real halt: restarts went from 0.06 to 0.46 s)."""
    import threading

    from slurm_ft.launch.rendezvous.client import Client
    from slurm_ft.launch.rendezvous.protocol import Keys

    store = stores.host(0, 5.0, "127.0.0.1")
    keys = Keys("halt-probe")
    asker = Client(stores.reconnect("127.0.0.1", store.port, 5.0), keys)
    waiter = Client(stores.reconnect("127.0.0.1", store.port, 5.0), keys)
    woken: list[bool] = []
    thread = threading.Thread(target=lambda: woken.append(waiter.wait_halt(0, 1.0)))
    thread.start()
    import time

    until = time.monotonic() + 0.8  # asked over and over while the waiter waits (1 s)
    while time.monotonic() < until:
        assert not asker.halted(0)
    thread.join(10)
    assert woken == [False]
    asker.halt(0)
    assert asker.halted(0)
