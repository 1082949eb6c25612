"""Front end of slurm-ft-report: where a job's allocation went.

    slurm-ft-report [--state-dir DIR | JOBID] [--json | --summary] [--svg FILE] [--html FILE]
    slurm-ft-report [--state-dir DIR | JOBID] --processes [--json]

Without DIR or JOBID the state dir is found exactly as the launcher finds it (SLURM_*
variables, ``--config``/``$SLURM_FT_CONFIG``, ``$SLURM_FT_STATE_DIR``); JOBID means
``$SLURM_SUBMIT_DIR/.slurm_ft/JOBID`` (the current directory without SLURM_SUBMIT_DIR),
else where the job's launchers left a pointer to it (``slurm_ft.jobpointer``).

Exit codes: 0 the report was shown (also when some records could not be read: the report
names them); 2 bad input, one line on stderr (usage, a state dir that does not exist or
holds no slurm-ft records, an SVG/HTML file that cannot be written).

This is the only module of the command that reads os.environ. No torch is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurm_ft import config, jobpointer, statedir
from slurm_ft.cli.usage import UsageError, UsageParser, run_command, table_width
from slurm_ft.exitcodes import ExitCode

PROG = "slurm-ft-report"
_JOB_KEY = re.compile(r"[0-9]+(_[0-9]+)?|standalone")


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Where did the allocation go: attempts, cycles, failures, goodput.",
        allow_abbrev=False,
    )
    p.add_argument(
        "job",
        nargs="?",
        metavar="JOBID",
        help="job id (or <array id>_<task>): $SLURM_SUBMIT_DIR/.slurm_ft/JOBID, else the job's pointer",
    )
    p.add_argument("--state-dir", metavar="DIR", help="the job's state dir")
    p.add_argument("--config", metavar="FILE", help="YAML settings file (default $SLURM_FT_CONFIG)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (see report.schema.json)")
    p.add_argument(
        "--summary",
        action="store_true",
        help="print the run in a few lines: cycles, failures and their exceptions, logs, outcome",
    )
    p.add_argument(
        "--processes",
        action="store_true",
        help="each rank's worker pid and each node's launcher pid in the newest cycle (with --json: as JSON)",
    )
    p.add_argument("--svg", metavar="FILE", help="write the timeline picture as SVG")
    p.add_argument("--html", metavar="FILE", help="write an HTML page with the picture and the totals")
    return p


def find_state_dir(args: argparse.Namespace, env: Mapping[str, str], cwd: str) -> statedir.StateDir:
    if args.job is not None and args.state_dir is not None:
        raise UsageError("give either JOBID or --state-dir, not both")
    if args.state_dir is not None:
        return statedir.StateDir(Path(args.state_dir))
    if args.job is not None:
        if not _JOB_KEY.fullmatch(args.job):
            raise UsageError(f"not a job id: {args.job!r} (expected digits, or <array id>_<task>)")
        default = statedir.for_job_key(env.get("SLURM_SUBMIT_DIR") or cwd, args.job)
        found = jobpointer.find(default.path, args.job, jobpointer.pointers_dir(env), os.getuid())
        return statedir.StateDir(found)
    from slurm_ft.slurm import SlurmEnvError, SlurmJob

    settings = config.load(env, args.config or env.get(config.CONFIG_ENV) or None)
    try:
        job = SlurmJob.from_env(env)
    except SlurmEnvError as exc:
        raise UsageError(str(exc)) from None
    return statedir.resolve(job, settings.state_dir, cwd)


def _check_dir(path: Path) -> None:
    try:
        if not path.exists():
            raise UsageError(f"state dir {path} does not exist")
        if not path.is_dir():
            raise UsageError(f"state dir {path} is not a directory")
    except OSError as exc:
        raise UsageError(f"state dir {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"state dir {path} is not readable")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _processes(state: statedir.StateDir, *, as_json: bool) -> int:
    from slurm_ft.drill.targets import newest_shape
    from slurm_ft.report import processes

    shape = newest_shape(state)
    if shape is None:
        raise UsageError(f"state dir {state.path} holds no process records (no cycle has started workers)")
    if as_json:
        print(json.dumps(processes.to_json(shape), indent=2, sort_keys=True))
    else:
        print("\n".join(processes.lines(shape)))
    return int(ExitCode.SUCCESS)


def _main(argv: Sequence[str] | None, env: Mapping[str, str], cwd: str) -> int:
    from slurm_ft.report import analysis, jsonout, load

    args = build_parser().parse_args(argv)
    state = find_state_dir(args, env, cwd)
    _check_dir(state.path)
    if args.processes:
        if args.summary or args.svg or args.html:
            raise UsageError("--processes cannot be combined with --summary, --svg or --html")
        return _processes(state, as_json=args.json)
    files = load.load(state)
    if files.empty:
        raise UsageError(f"state dir {state.path} holds no slurm-ft records")
    report = analysis.analyse(files)
    if args.svg or args.html:
        from slurm_ft.report import svg

        picture = svg.render(report)
        if args.svg:
            _write(args.svg, picture)
        if args.html:
            _write(args.html, svg.html_page(report, picture))
    if args.summary:
        from slurm_ft.report import story

        print("\n".join(story.lines(files, report)))
    elif args.json:
        print(json.dumps(jsonout.published(report), indent=2, sort_keys=True))
    else:
        from slurm_ft.report import text

        text.render(report, sys.stdout, width=table_width(sys.stdout.isatty()))
    return int(ExitCode.SUCCESS)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, lambda: _main(argv, dict(os.environ), os.getcwd()))


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
