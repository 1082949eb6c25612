"""The newest complete snapshots of this node, written to durable storage on the way out.

At a breakpoint (a preemption or time-limit signal, an attempt that ends, the job's end)
the workers may already be gone; the snapshots are still in the node's memory, which the
launcher owns, so the launcher writes them itself: each slot file copied as bytes into
``--snapshot-persist-dir`` (:mod:`slurm_ft.snapshot.persisted`: no torch, so it fits a
signal's grace period on a loaded node), or through the trainer's own
``--snapshot-persist-hook`` (which imports torch to hand it the state). It does so in a
child (:mod:`persist_child`): a write to a dead mount sleeps in the kernel, where no
deadline reaches it, and the hook's torch is never the launcher's. At the deadline the child's
session is killed and abandoned (:mod:`slurm_ft.boundedrun`), and what it had not written
is said, rank by rank, in the outcome record.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import boundedrun

CHILD = "slurm_ft.launch.snapshots.persist_child"


@dataclass(frozen=True)
class Held:
    """One snapshot the node holds (from its header): a rank's, or the node's replicated copy."""

    rank: int
    step: int
    replicated: bool = False

    def name(self) -> str:
        who = f"the node's replicated copy (rank {self.rank})" if self.replicated else f"rank {self.rank}"
        return f"{who} step {self.step}"


@dataclass(frozen=True)
class Persisted:
    """What one persist did: one line per snapshot written, one per snapshot not written."""

    persisted: tuple[str, ...] = ()
    not_persisted: tuple[str, ...] = ()
    took: float = 0.0


def child_argv(python: str, area: Path, directory: str | None, hook: str | None, cwd: str) -> list[str]:
    argv = [python, "-m", CHILD, "--area", str(area), "--cwd", cwd]
    if directory:
        argv += ["--dir", directory]
    if hook:
        argv += ["--hook", hook]
    return argv


def outcome(held: Sequence[Held], stdout: str, problem: str | None, took: float) -> Persisted:
    """The child's lines against what the node held: a snapshot the child did not report
    written is not persisted, with the child's reason, else ``problem`` (its deadline, its
    crash). Pure."""
    done: dict[tuple[int, bool], str] = {}
    failed: dict[tuple[int, bool], str] = {}
    for line in stdout.splitlines():
        try:
            doc = json.loads(line)
            key = (int(doc["rank"]), bool(doc.get("replicated", False)))
        except (ValueError, KeyError, TypeError):
            continue
        if doc.get("ok") is True:
            done[key] = str(doc.get("where", ""))
        else:
            failed[key] = str(doc.get("problem") or "failed")
    ok, bad = [], []
    for h in held:
        key = (h.rank, h.replicated)
        if key in done:
            ok.append(f"{h.name()} -> {done[key]}")
        else:
            bad.append(f"{h.name()}: {failed.get(key) or problem or 'not written'}")
    return Persisted(tuple(ok), tuple(bad), took)


def persist(
    held: Sequence[Held],
    area: Path,
    directory: str | None,
    hook: str | None,
    timeout: float,
    *,
    python: str,
    cwd: str,
) -> Persisted:
    """Write ``held`` (this node's newest snapshots) within ``timeout`` seconds."""
    if not held:
        return Persisted()
    started = time.monotonic()
    if timeout <= 0:
        return outcome(held, "", "no time left to persist", 0.0)
    argv = child_argv(python, area, directory, hook, cwd)
    try:
        done = boundedrun.run(argv, timeout)
    except subprocess.TimeoutExpired:
        took = time.monotonic() - started
        return outcome(held, "", f"persisting took longer than {timeout:g} s (stopped)", took)
    except OSError as exc:
        return outcome(held, "", f"cannot start the persist: {exc.strerror or exc}", 0.0)
    problem = None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        problem = f"the persist failed: {last}"
    return outcome(held, done.stdout, problem, time.monotonic() - started)
