"""Front end of slurm-ft-snapshot: the launchers' persisted snapshots for other tools.

    slurm-ft-snapshot export FILE OUT   a persisted snapshot (``*.snap``) as one torch.save file

The launchers persist each snapshot as its own slot file, copied as bytes (no torch at the
breakpoint, :mod:`slurm_ft.snapshot.persisted`); ``restore_snapshot()`` reads that back, and
this command makes a ``torch.save`` file of it for whatever reads those. Exit codes: 0
written; 2 bad input, one line on stderr (usage, a file that is not a whole snapshot, an
output that cannot be written).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from slurm_ft.cli.usage import UsageError, UsageParser, run_command

PROG = "slurm-ft-snapshot"


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog=PROG, description="The launchers' persisted snapshots, for other tools.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    export = sub.add_parser("export", help="write a persisted snapshot (a .snap file) as one torch.save file")
    export.add_argument("file", metavar="FILE", help="a persisted snapshot (--snapshot-persist-dir)")
    export.add_argument("out", metavar="OUT", help="the torch.save file to write")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from slurm_ft.snapshot import persisted, reader

    source, out = Path(args.file), Path(args.out)
    try:
        step = persisted.export(source, out)
    except reader.Torn as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{exc.filename or out}: {exc.strerror or exc}") from None
    print(f"{PROG}: {source} (step {step}) -> {out}")
    return 0


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
