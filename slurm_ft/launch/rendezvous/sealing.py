"""Authentication of the store's values with the job secret (HMAC-SHA256).

Node 0's store listens on every interface without a password; anyone who can reach the
port could write a halt or a failure, or a decision. With a secret, every value that
decides the job's course is sealed: ``<tag><hmac of key and value>:<value>``; the key is
part of the MAC, so a sealed value cannot be replayed under another key. A value whose
seal does not verify is treated as absent and reported once per key. Key names also
carry a namespace derived from the secret, so an outsider cannot even find them.

The sealer is also where every other value that is not what the protocol says (garbage,
the wrong type, an impossible number: ``protocol.Malformed``) is reported, once per key
and counted (:meth:`Sealer.reject`, :meth:`Sealer.rejected`): the launcher log says it, and
the outcome record and the Prometheus file count it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

TAG = "sft1:"
_MAC_HEX = 64


def _hmac_sha256(key: bytes, message: bytes) -> str:
    """hashlib and hmac are imported on first use: only a job with a secret seals, and a
    single node's launcher should not pay for them at start-up."""
    import hashlib
    import hmac

    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _same(a: bytes, b: bytes) -> bool:
    import hmac

    return hmac.compare_digest(a, b)


class Sealer:
    def __init__(self, key: bytes | None, on_forged: Callable[[str], None] | None = None) -> None:
        self._key = key
        self._on_forged = on_forged or (lambda _message: None)
        self._reported: dict[str, None] = {}  # keys reported, in order
        self._lock = threading.Lock()

    @property
    def namespace(self) -> str:
        """A secret-derived key prefix ('' without a secret)."""
        if self._key is None:
            return ""
        return _hmac_sha256(self._key, b"slurm-ft key namespace")[:16]

    def _mac(self, key: str, value: bytes) -> str:
        assert self._key is not None
        return _hmac_sha256(self._key, key.encode() + b"\0" + value)

    def seal(self, key: str, value: str) -> str:
        if self._key is None:
            return value
        return f"{TAG}{self._mac(key, value.encode())}:{value}"

    def open(self, key: str, raw: bytes) -> bytes | None:
        """The value under a valid seal; None (reported once per key) when it has none."""
        if self._key is None:
            return raw
        head = len(TAG) + _MAC_HEX
        if raw[: len(TAG)] == TAG.encode() and raw[head : head + 1] == b":":
            value = raw[head + 1 :]
            if _same(raw[len(TAG) : head], self._mac(key, value).encode()):
                return value
        self._forged(key)
        return None

    def _forged(self, key: str) -> None:
        self._report(
            key,
            f"ignored a value of store key {key} that is not sealed with this job's secret "
            "(written by someone else)",
        )

    def reject(self, key: str, why: str) -> None:
        """A value under ``key`` that is not what the protocol says: ignored, reported once."""
        self._report(key, f"ignored a value of store key {key} that the protocol does not allow ({why})")

    def _report(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._reported:
                return
            self._reported[key] = None
        self._on_forged(message)

    def rejected(self) -> tuple[str, ...]:
        """The keys whose values were ignored so far (forged or malformed), first first."""
        with self._lock:
            return tuple(self._reported)
