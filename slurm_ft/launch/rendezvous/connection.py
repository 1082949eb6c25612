"""The raw side of one store connection: the store, the keys it speaks with and the seals.

Every sealed write and every read of :class:`~slurm_ft.launch.rendezvous.client.Client`
goes through here, so the protocol's verbs (``client``) never touch a seal, a ``reads``
helper or a store error themselves; and what this connection published last of each kind
is remembered here, for :meth:`Connection.reassert`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from slurm_ft.launch.rendezvous import reads, stores
from slurm_ft.launch.rendezvous.localstore import LocalConnection
from slurm_ft.launch.rendezvous.longwaits import LongWaits
from slurm_ft.launch.rendezvous.protocol import Keys, family
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.sever import sever
from slurm_ft.launch.rendezvous.stores import Store

T = TypeVar("T")
Abort = Callable[[], bool]


class Connection:
    def __init__(
        self, store: Store, keys: Keys, address: str = "127.0.0.1", sealer: Sealer | None = None
    ) -> None:
        self._store = store
        self.keys = keys
        self._address = address
        self.sealer = sealer or Sealer(None)
        self._kept: dict[str, tuple[str, str]] = {}  # key family -> (key, value): see reassert
        self._waits = LongWaits(store)

    @property
    def port(self) -> int:
        return int(getattr(self._store, "port", 0))

    def sever(self) -> int:
        """Break every connection of this process to this client's store (the calls blocked
        in them raise): see :func:`~slurm_ft.launch.rendezvous.sever.sever`."""
        if isinstance(self._store, LocalConnection):
            self._store.close()
            return 1
        return sever(self._address, self.port)

    def _op(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RuntimeError as exc:
            raise stores.lost(exc) from None

    def _get_sealed_when_set(
        self, key: str, parse: Callable[[bytes], T], *, deadline: float, abort: Abort, pace: reads.Pace
    ) -> T | None:
        """See :func:`reads.sealed_when_set`."""
        return self._op(
            lambda: reads.sealed_when_set(
                self._store,
                self.sealer,
                key,
                parse,
                deadline=deadline,
                abort=abort,
                slice_s=pace.slice_s,
                signal_fd=pace.signal_fd,
                waits=self._waits,
                read_first=pace.read_first,
            )
        )

    def _present(self, keys: Sequence[str]) -> bool:
        return self._op(lambda: self._store.check(list(keys)))

    def _read(self, keys: Sequence[str], parse: Callable[[bytes], T]) -> list[T | None]:
        """Each key's parsed, sealed value; None where missing, forged or malformed."""
        raws = self._op(lambda: reads.read(self._store, keys))
        return [reads.opened(self.sealer, k, raw, parse) for k, raw in zip(keys, raws, strict=True)]

    def _keep(self, key: str, value: str) -> None:
        """Write a sealed value that others still need to read, and remember it (the
        latest of its key family) for :meth:`reassert`."""
        self._set_sealed(key, value)
        self._kept[family(self.keys, key) or key] = (key, value)

    def reassert(self) -> None:
        """Write again what this launcher published last of each kind (the run's base, a
        decision, its join record, its done mark, a result) where someone overwrote or
        deleted it: one answered round trip per value, at the loops' slow ticks."""
        for key, value in list(self._kept.values()):
            self._op(partial(reads.ensure, self._store, key, self.sealer.seal(key, value)))

    def _set_sealed(self, key: str, value: str) -> None:
        sealed = self.sealer.seal(key, value)
        self._op(lambda: self._store.set(key, sealed))
