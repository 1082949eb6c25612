"""A job's state dir found from its job id alone, wherever the launchers put it.

``slurm-ft-report JOBID``, ``slurm-ft-logs JOBID`` and ``slurm-ft-drill JOBID`` look for
the state dir at its default place, ``<submit dir>/.slurm_ft/<job key>``; a job whose
launchers were given ``--state-dir`` (or ``$SLURM_FT_STATE_DIR``, or ``state_dir`` in the
settings) is not there. So node 0's launcher leaves a pointer in its owner's home, which
every command can find from the job id and which the owner's login node usually shares
with the compute nodes:

    ${XDG_STATE_HOME:-$HOME/.local/state}/slurm-ft/jobs/<job key>.json

holding ``{"job": KEY, "state_dir": ABSOLUTE PATH, "cluster": NAME}``. A command looks at
the default place first and follows the pointer only when nothing is there;
``--state-dir`` still overrides both.

The pointer is untrusted on read: a file that is not a regular file owned by the caller,
that others may write (or in a directory others may write), that is too big, or that does
not name the asked job and an absolute path is ignored, as if there were none (the drill
signals the pids a state dir records: nobody else may choose which). The launcher keeps
the newest :data:`KEEP` pointers (job ids grow with time) and removes the rest as it
writes its own, so the directory stays small without anyone's care.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KEEP = 1000
MAX_BYTES = 4096
_NAME = re.compile(r"([0-9]+)(?:_([0-9]+))?\.json")


@dataclass(frozen=True)
class Pointer:
    job_key: str
    state_dir: str
    cluster: str | None = None

    def encode(self) -> bytes:
        doc = {"job": self.job_key, "state_dir": self.state_dir, "cluster": self.cluster}
        return (json.dumps(doc, sort_keys=True) + "\n").encode()


def pointers_dir(env: Mapping[str, str]) -> Path | None:
    """Where the owner's pointers live (the XDG base-directory rule for state); None
    without a home to put them in."""
    xdg = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg, "slurm-ft", "jobs")
    home = env.get("HOME", "")
    return Path(home, ".local", "state", "slurm-ft", "jobs") if os.path.isabs(home) else None


def pointer_file(directory: Path, job_key: str) -> Path:
    return directory / f"{job_key}.json"


def parse(raw: bytes, job_key: str) -> Pointer | None:
    """The pointer in ``raw`` if it is one to ``job_key``'s state dir, else None."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("job") != job_key:
        return None
    path, cluster = doc.get("state_dir"), doc.get("cluster")
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        return None
    return Pointer(job_key, path, cluster if isinstance(cluster, str) else None)


def read(directory: Path, job_key: str, uid: int) -> Pointer | None:
    """The caller's pointer for ``job_key``, or None (missing, or not to be trusted)."""
    try:
        folder = os.stat(directory)
        fd = os.open(pointer_file(directory, job_key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        trusted = (
            stat.S_ISREG(info.st_mode)
            and info.st_uid == uid
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            and folder.st_uid == uid
            and not folder.st_mode & stat.S_IWOTH
            and info.st_size <= MAX_BYTES
        )
        raw = os.read(fd, MAX_BYTES + 1) if trusted else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse(raw, job_key) if raw else None


def stale(names: list[str], keep: int = KEEP) -> list[str]:
    """The pointer files to remove: all but the ``keep`` newest jobs' (by job id, then
    array task); names that are not pointers are left alone."""
    found = [(int(m.group(1)), int(m.group(2) or -1), name) for name in names if (m := _NAME.fullmatch(name))]
    found.sort()
    return [name for *_, name in found[: max(0, len(found) - keep)]]


def find(default: Path, job_key: str, directory: Path | None, uid: int) -> Path:
    """The state dir of ``job_key``: ``default`` when it exists, else where the job's
    pointer leads, else ``default`` (which the caller reports missing)."""
    try:
        if default.exists():
            return default
    except OSError:
        return default
    pointer = read(directory, job_key, uid) if directory is not None else None
    return Path(pointer.state_dir) if pointer is not None else default
