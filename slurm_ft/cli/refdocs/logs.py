"""slurm-ft-logs in the reference: its synopsis and exit codes, the settings its
options set and their fuller meanings."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-logs",
    "logs",
    "read a job's cycle logs: select, merge, collapse and follow them; why a cycle failed",
    (
        "[JOBID | --state-dir DIR] [--cycle N] [--attempt A] [--rank LIST] [--node NAME|HOSTLIST]",
        "    [--grep REGEX] [--head N | --tail N] [--node-prefix] [--collapse[=numbers]]",
        "    [--failure] [-f] [--list] [--json] [--config FILE]",
    ),
    (
        ("0", "shown (also when nothing matched)"),
        (
            "2",
            "bad input, one line on stderr: usage, an unknown job, a cycle or attempt that does "
            "not exist, a directory that is not a state dir, a rank or node that was not in "
            "the cycle, a cycle that has no log file because the launcher ran without "
            "`--applog-prefix`",
        ),
        ("130", "interrupted (^C; also how `-f` is ended by hand)"),
    ),
)

# The setting each option sets (a unit test checks these against the command's code).
SETTINGS: dict[str, str] = {"--state-dir": "state_dir"}

# A fuller meaning than the one-line --help, where a reader needs it (markdown).
DETAILS: dict[str, str] = {
    "JOBID": (
        "which job, as for `slurm-ft-report`: `$SLURM_SUBMIT_DIR/.slurm_ft/JOBID`, else where "
        "the job's pointer leads"
    ),
    "--cycle": "the cycle to read (default: the last one)",
    "--attempt": (
        "the last cycle of attempt (requeue) `A`; with `--cycle`, check that the cycle belongs to it"
    ),
    "--rank": "only these global ranks: `0,17,100-131`",
    "--node": (
        "only the ranks that ran on these nodes in that cycle (`node[01-04]`); with per-node "
        "files only those files are read"
    ),
    "--grep": (
        "only lines whose text matches (a Python regular expression, searched; the rank prefix "
        "is not part of the text, so `--grep 17` does not pick rank 17's lines; `^` and `$` "
        "anchor at the text's start and end)"
    ),
    "--head": "the first `N` selected lines",
    "--tail": "the last `N` selected lines (with `-f`: those first, then follow)",
    "--node-prefix": "start every line with the name of the node its rank ran on",
    "--collapse": (
        "fold lines that ranks printed alike into one: `count ranks: text`, the ranks as ranges "
        "(`0-511,513-1023`), groups in the order of their first line; a line one rank printed "
        "is shown as written. `--collapse=numbers` also folds lines that differ only in "
        "numbers (loss values, step times), each number shown as its spread: `step "
        "[100..4000] loss [0.98..3.99]` (`--collapse` takes the next word as its mode, so put "
        "`JOBID` before it)"
    ),
    "--failure": (
        "why the cycle failed: the first failure from its record (rank, node, kind, exit code "
        "or signal, the hang's detector and ranks), the rank's last lines (20, or `--tail N`), "
        "its traceback (from the error file, else the last one the rank printed), for a hang "
        "the stacks the launcher kept (ranks with the same stack shown once, with their rank "
        "set), and where the full files are"
    ),
    "--follow": (
        "follow the cycle's files while the job runs (with `--tail N`: its last `N` lines "
        "first; a job without a cycle record yet: wait for its first one); at a restart move "
        "on to the next cycle; end when the launcher run writes its outcome"
    ),
    "--list": "the job's cycles: attempt, outcome, start, ranks, log files and their size, first failure",
    "--json": (
        "JSON lines for selected lines (`cycle rank node kind text`) and for `--collapse` groups "
        "(`ranks rank_count count kind text spread`); one JSON document for `--failure` and `--list`"
    ),
}
