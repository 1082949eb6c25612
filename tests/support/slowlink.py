"""A slow network link between two launchers on this machine: a TCP relay that passes the
bytes towards the target at a set rate and the replies back at once (loopback is far
faster than the links between nodes a replica must cross while the trainer goes on)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from slurm_ft.launch.snapshots import peer

_PIECE = 64 << 10


class SlowLink:
    """Listens on 127.0.0.1; each connection is relayed to ``target``, ``bytes_per_s``
    towards it."""

    def __init__(self, target: peer.Address, bytes_per_s: float) -> None:
        self.target = target
        self.bytes_per_s = bytes_per_s
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = peer.Address("127.0.0.1", int(self._sock.getsockname()[1]))
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection((self.target.host, self.target.port))
            self._spawn(self._pump, conn, upstream, self.bytes_per_s)
            self._spawn(self._pump, upstream, conn, None)

    def _pump(self, src: socket.socket, dst: socket.socket, rate: float | None) -> None:
        try:
            while not self._closed.is_set() and (data := src.recv(_PIECE)):
                dst.sendall(data)
                if rate is not None:
                    time.sleep(len(data) / rate)  # pacing the link, not waiting for anything
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
