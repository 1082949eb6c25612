"""A follower of a store succession connects to the port its successor noted without probing
the port sequence first (issue 45): each probe is a connection of its own for the successor's
store to accept and close, 4,095 more at 4,096 nodes. Counted with a real store behind a
TCP relay that counts the connections it carries."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from slurm_ft.launch.rendezvous.client import Client, find_run
from slurm_ft.launch.rendezvous.protocol import Base, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer

SEALER = Sealer(b"n" * 32)
KEYS = Keys("noted-a0", SEALER.namespace)


class Relay:
    """Every connection to ``port`` is carried to the store's port, and counted."""

    def __init__(self, target: int) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            outbound = socket.create_connection(("127.0.0.1", self._target))
            for a, b in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._carry, args=(a, b), daemon=True).start()

    @staticmethod
    def _carry(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def relayed() -> Iterator[Relay]:
    host = Client.host(0, KEYS, 30.0, SEALER, address="127.0.0.1")
    host.prepare(2, Base(0, "noted"))
    relay = Relay(host.port)
    yield relay
    relay.close()


def _find(ports: list[int], noted: int | None) -> Base:
    _, base = find_run(
        "127.0.0.1",
        ports,
        KEYS,
        SEALER,
        deadline=time.monotonic() + 30,
        op_timeout=30.0,
        abort=lambda: False,
        sleep=time.sleep,
        noted=noted,
    )
    return base


def test_the_noted_port_is_connected_to_without_a_probe(relayed: Relay) -> None:
    assert _find([relayed.port], noted=relayed.port).run_uuid == "noted"
    assert relayed.accepted == 1  # the store connection alone


def test_without_a_note_each_port_is_probed_first(relayed: Relay) -> None:
    assert _find([relayed.port], noted=None).run_uuid == "noted"
    assert relayed.accepted == 2  # the probe, then the store connection


def test_a_noted_port_where_nothing_listens_falls_back_to_the_sequence(relayed: Relay) -> None:
    nothing = socket.socket()
    nothing.bind(("127.0.0.1", 0))
    dead = nothing.getsockname()[1]
    nothing.close()
    assert _find([dead, relayed.port], noted=dead).run_uuid == "noted"
