"""Where the job secret that authenticates the launchers' store comes from.

In order: ``SLURM_FT_JOB_SECRET`` (the templates make one per job and export it; srun
passes it to every task), else a ``0600`` file in the job's state dir, created by
whichever launcher comes first (a fully written temp file hard-linked into place: the
link either wins or finds the other's complete file), else none — and then every start
says, once, that the store is open to anyone who can reach it. The secret itself is
never printed: :class:`StoreAuth` shows only where it came from.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from slurm_ft import privatefiles
from slurm_ft.statedir import StateDir

SECRET_ENV = "SLURM_FT_JOB_SECRET"
SECRET_FILE = "job_secret"


@dataclass(frozen=True)
class StoreAuth:
    """The job secret (None: unauthenticated) and, for people, where it came from or why
    there is none."""

    key: bytes | None = field(default=None, repr=False)
    source: str = "not needed (single node)"

    def __repr__(self) -> str:
        return f"StoreAuth(source={self.source!r})"


def _read_own(path: str) -> bytes:
    """The secret file's content, if it is ours alone (owner, mode 0600)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise PermissionError(f"{path} must belong to this user with mode 0600")
        data = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(data) < 32:
        raise ValueError(f"{path} is empty or too short")
    return data


def from_state_dir(state: StateDir) -> bytes:
    """The state dir's secret, created now if no launcher made it yet (OSError, ValueError
    when it cannot be made or trusted)."""
    path = str(state.path / SECRET_FILE)
    with contextlib.suppress(FileNotFoundError):
        return _read_own(path)
    state.path.mkdir(parents=True, exist_ok=True)
    fd, tmp = privatefiles.create_file(state.path, f".{SECRET_FILE}.")  # mode 0600
    try:
        import secrets  # only node 0 of a multi-node job makes one: keeps other starts short

        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.fsync(fd)
        os.close(fd)
        with contextlib.suppress(FileExistsError):  # another launcher was first: use its
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return _read_own(path)


def resolve(env_value: str | None, state: StateDir) -> StoreAuth:
    if env_value:
        return StoreAuth(env_value.encode(), f"job secret from {SECRET_ENV}")
    try:
        key = from_state_dir(state)
    except (OSError, ValueError) as exc:
        return StoreAuth(None, f"no {SECRET_ENV} and no usable secret file in the state dir: {exc}")
    return StoreAuth(key, f"job secret from {state.path / SECRET_FILE}")


def without_secret(env: Mapping[str, str]) -> dict[str, str]:
    """The environment workers get: everything but the secret."""
    return {k: v for k, v in env.items() if k != SECRET_ENV}


def announce(auth: StoreAuth, launchers: int, event: Callable[[str], None]) -> None:
    """Once at every start of a multi-node launcher: whether the store is authenticated."""
    if launchers < 2:
        return
    if auth.key is not None:
        event(f"rendezvous store authenticated: {auth.source}")
    else:
        event(
            f"warning: the rendezvous store is NOT authenticated ({auth.source}): anyone who can "
            f"reach its port can stop or restart this job; set {SECRET_ENV} (docs: guides/security.md)"
        )
