"""The console scripts' processes: how every command starts and ends.

Start-up makes modules, classes, settings and tables that live as long as the process;
the collector's passes over them while they are made (some 40 in a launch, about 5 ms)
find nothing, so it is paused until the command's modules are loaded, then the objects
are frozen out of its way (``lifelong``). The end is ``os._exit`` once everything is
written and the standard streams are flushed: the interpreter's teardown (every module,
the store's threads, torch's when loaded: a second or more) only delays the batch
script, and even without torch it is a tenth of a trivial launch. ``python -m slurm_ft.cli.<command>``
ends the same way; in-process calls of ``main`` (tests) keep the ordinary interpreter life.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from slurm_ft import lifelong


def launch() -> NoReturn:
    # The launcher's heavy modules load inside main; it resumes the collector itself,
    # before its first cycle.
    _run("slurm_ft.cli.launch", resume_after_import=False)


def healthcheck() -> NoReturn:
    _run("slurm_ft.cli.healthcheck")


def progress() -> NoReturn:
    _run("slurm_ft.cli.progress")


def report() -> NoReturn:
    _run("slurm_ft.cli.report")


def drill() -> NoReturn:
    _run("slurm_ft.cli.drill")


def logs() -> NoReturn:
    _run("slurm_ft.cli.logs")


def snapshot() -> NoReturn:
    _run("slurm_ft.cli.snapshot")


def finish(main: Callable[[], int]) -> NoReturn:
    """Run a command's ``main`` as this process's whole life and end it without the
    teardown (``python -m slurm_ft.cli.<command>`` comes here too)."""
    try:
        code = main()
    except SystemExit as stop:  # argparse's --help and its own exits
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    _flush_standard_streams()
    os._exit(code)


def _run(module_name: str, *, resume_after_import: bool = True) -> NoReturn:
    lifelong.pause()
    command = importlib.import_module(module_name)
    if resume_after_import:
        lifelong.resume()
    finish(command.main)


def _flush_standard_streams() -> None:
    """A closed reader (``| head``) must not turn a finished run into a failure."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
