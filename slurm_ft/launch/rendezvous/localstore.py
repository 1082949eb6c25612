"""The store of a single-node run, in the launcher's own memory, with TCPStore's semantics
(see :class:`LocalStore`). Apart from ``stores`` because it is a whole store of its own, not
an adapter of torch's: the cycle's unit tests run several launchers on it in one process.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Sequence

from slurm_ft.launch.rendezvous.stores import WaitTimeout


class LocalStore:
    """The store of a single-node run, in the launcher's own memory.

    With one node there is no peer to reach the store, so opening a port and importing
    torch (seconds of start-up on every launch) would buy nothing. It keeps TCPStore's
    semantics (values are bytes, ``add`` creates a missing key, ``compare_set`` with
    ``expected=""`` sets a missing key, ``get`` of a missing key is an error, ``wait``
    blocks until keys appear) and its shape: the data lives here, and each user holds a
    :class:`LocalConnection`, which can be closed, as can the whole store (a lost host) —
    which is what lets the cycle's unit tests run several launchers in one process.
    """

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.changed = threading.Condition()
        self.down = False

    def connect(self) -> LocalConnection:
        return LocalConnection(self)

    def shutdown(self) -> None:
        """Every connection fails from now on, as when the store host dies."""
        with self.changed:
            self.down = True
            self.changed.notify_all()


class LocalConnection:
    """One user's connection to a :class:`LocalStore` (see :class:`Store`)."""

    port = 0

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.closed = False

    def reconnect(self) -> LocalConnection:
        return LocalConnection(self.store)

    def close(self) -> None:
        with self.store.changed:
            self.closed = True
            self.store.changed.notify_all()

    def _data(self) -> dict[str, bytes]:
        """Call with the store's lock held."""
        if self.closed or self.store.down:
            raise RuntimeError("connection to the in-memory store closed")
        return self.store.data

    @staticmethod
    def _b(value: str | bytes) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def set(self, key: str, value: str | bytes) -> None:
        with self.store.changed:
            self._data()[key] = self._b(value)
            self.store.changed.notify_all()

    def get(self, key: str) -> bytes:
        with self.store.changed:
            data = self._data()
            if key not in data:
                raise RuntimeError(f"key not found: {key}")
            return data[key]

    def check(self, keys: Sequence[str]) -> bool:
        with self.store.changed:
            data = self._data()
            return all(k in data for k in keys)

    def add(self, key: str, amount: int) -> int:
        with self.store.changed:
            data = self._data()
            value = int(data.get(key, b"0")) + amount
            data[key] = str(value).encode()
            self.store.changed.notify_all()
            return value

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        with self.store.changed:
            data = self._data()
            missing = [k for k in keys if k not in data]
            if missing:
                raise RuntimeError(f"key not found: {missing[0]}")
            return [data[k] for k in keys]

    def multi_set(self, keys: Sequence[str], values: Sequence[str | bytes]) -> None:
        with self.store.changed:
            data = self._data()
            for k, v in zip(keys, values, strict=True):
                data[k] = self._b(v)
            self.store.changed.notify_all()

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        exp, want = self._b(expected), self._b(desired)
        with self.store.changed:
            data = self._data()
            current = data.get(key)
            if (current is None and exp == b"") or current == exp:
                data[key] = want
                self.store.changed.notify_all()
                return want
            return current if current is not None else exp

    def delete_key(self, key: str) -> bool:
        with self.store.changed:
            return self._data().pop(key, None) is not None

    def wait(self, keys: Sequence[str], timeout: datetime.timedelta) -> None:
        """Block until every key is set; :class:`WaitTimeout` after ``timeout``."""
        deadline = time.monotonic() + timeout.total_seconds()
        with self.store.changed:
            while not all(k in self._data() for k in keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"wait timeout after {timeout.total_seconds():g}s, keys: {list(keys)}")
                self.store.changed.wait(left)

    def set_timeout(self, timeout: datetime.timedelta) -> None:
        """Operations of the in-memory store never block, except :meth:`wait`."""
