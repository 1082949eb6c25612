"""The persist child: this node's newest complete snapshots to durable storage.

Run by :mod:`slurm_ft.launch.snapshots.persist` as ``python -m`` with a deadline; it prints
one JSON line per snapshot (written or not, and why) as it goes, so the launcher knows what
was persisted even if a later one fails. By default each key's slot files (the newest and
the one before it, see :mod:`slurm_ft.snapshot.persisted`) are copied as bytes
(:func:`slurm_ft.snapshot.persisted.save`): the child never imports torch. Only a
trainer's persist hook, which takes the state dict, loads the tensors (mapped from shared
memory, never copied first: the workers are gone, nothing rewrites the slot).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

HOLD_WAIT_S = 2.0  # a worker that outlived its stop may be mid-write: one write's time


def _hook(spec: str, cwd: str) -> Callable[[int, int, dict[str, object], str | None], object]:
    module, _, function = spec.partition(":")
    sys.path.insert(0, cwd)
    found: Callable[[int, int, dict[str, object], str | None], object] = getattr(
        importlib.import_module(module), function
    )
    return found


def _say(rank: int, replicated: bool, step: int, **what: object) -> None:
    print(json.dumps({"rank": rank, "replicated": replicated, "step": step, **what}), flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="slurm_ft.launch.snapshots.persist_child")
    ap.add_argument("--area", required=True)
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--dir")
    ap.add_argument("--hook")
    ns = ap.parse_args(argv)
    from slurm_ft.snapshot import persisted, reader

    hook = _hook(ns.hook, ns.cwd) if ns.hook else None
    area = Path(ns.area)
    for key in reader.keys(area):
        # held still while it is written: a worker still alive skips its snapshots meanwhile
        with reader.held_still(area, key, wait_s=HOLD_WAIT_S) as info:
            if info is None:
                held = reader.newest(area, key)
                if held is not None:
                    _say(held.rank, held.replicated, held.step, ok=False, problem="a writer holds it")
                continue
            try:
                if hook is not None:
                    hook(info.rank, info.step, reader.load(info, copy=False), ns.dir)
                    where = ns.hook
                else:
                    where = str(persisted.save(Path(ns.dir), info))
            except Exception as exc:  # one snapshot's failure is said, the others still written
                _say(info.rank, info.replicated, info.step, ok=False, problem=f"{type(exc).__name__}: {exc}")
                continue
            _say(info.rank, info.replicated, info.step, ok=True, where=where)
            if hook is None:
                _save_older(Path(ns.dir), area, key, info.step)
    return 0


def _save_older(directory: Path, area: Path, key: str, newest: int) -> None:
    """The key's other complete slot too: ranks a step apart at the breakpoint then still
    share a step (the next attempt resumes every rank from one). Best effort and never
    said: the slot is the one a leftover writer would rewrite next, and the copy's seal
    check drops it then."""
    from slurm_ft.snapshot import persisted, reader

    for older in reader.complete_slots(area, key):
        if older.step < newest:
            try:
                persisted.save(directory, older)
            except (reader.Torn, OSError):
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
