"""Objects made for the process's life are kept out of the cyclic collector's way: made
with it paused, frozen after (issue 45: torch.distributed's import made 156,000 of them,
and every full pass of the launcher walked them again, 45 ms here)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from slurm_ft import lifelong


class Node:
    """A tracked object, as a module's classes and tables are."""


def test_what_is_made_for_life_is_frozen_and_the_collector_runs_on() -> None:
    assert gc.isenabled()
    try:
        with lifelong.made_for_life():
            assert not gc.isenabled()
            made = [Node() for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in made)  # a full pass walks none of them
    finally:
        gc.unfreeze()
        gc.enable()


def test_made_while_the_start_keeps_the_collector_paused_it_is_left_to_the_start() -> None:
    """A command's start pauses the collector until its modules are loaded (``cli.entry``);
    what is made meanwhile is frozen at the start's end, not halfway."""
    try:
        assert lifelong.pause()
        before = gc.get_freeze_count()
        with lifelong.made_for_life():
            made = [Node() for _ in range(100)]
        assert not gc.isenabled()
        assert gc.get_freeze_count() == before
        lifelong.resume()
        assert gc.isenabled() and gc.get_freeze_count() >= before + len(made)
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_launchers_torch_import_is_frozen_out_of_the_collectors_way() -> None:
    """In a fresh process, as a launcher's first connection imports torch.distributed."""
    probe = (
        "import gc, json\n"
        "from slurm_ft.launch.rendezvous import stores\n"
        "stores.load_torch()\n"
        "print(json.dumps({'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count(),"
        " 'walked': len(gc.get_objects())}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["enabled"]
    assert seen["frozen"] > 100_000  # torch's modules, classes and tables
    assert seen["walked"] < 5_000  # what a full pass still walks
