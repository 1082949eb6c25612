"""slurm-ft-snapshot in the reference: its synopsis and exit codes."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-snapshot",
    "snapshot",
    "the launchers' persisted snapshots for other tools",
    ("export FILE OUT",),
    (
        ("0", "written"),
        (
            "2",
            "bad input, one line on stderr: usage, a file that is not a whole snapshot, an "
            "output that cannot be written",
        ),
    ),
)
