"""slurm-ft-report in the reference: its synopsis and exit codes, the settings its
options set and their fuller meanings."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-report",
    "report",
    "where the allocation went: attempts, cycles, failures, goodput",
    (
        "[--state-dir DIR | JOBID] [--json | --summary] [--svg FILE] [--html FILE] [--config FILE]",
        "[--state-dir DIR | JOBID] --processes [--json]",
    ),
    (
        (
            "0",
            "shown, also when some records could not be read: the report names each such file "
            "and what is wrong with it, and uses the rest",
        ),
        (
            "2",
            "bad input, one line on stderr: usage, a state dir that does not exist or holds no "
            "records, an output file that cannot be written",
        ),
    ),
)

# The setting each option sets (a unit test checks these against the command's code).
SETTINGS: dict[str, str] = {"--state-dir": "state_dir"}

# A fuller meaning than the one-line --help, where a reader needs it (markdown).
DETAILS: dict[str, str] = {
    "JOBID": (
        "`$SLURM_SUBMIT_DIR/.slurm_ft/JOBID` (the current directory without `SLURM_SUBMIT_DIR`), "
        "else where the job's launchers left their pointer to it (a job run with its own "
        "`--state-dir`: [state dir](state-dir.md#finding-a-job-by-its-id)); "
        "array tasks `<array id>_<task>`. Without JOBID and `--state-dir`: the state dir the "
        "launcher would use (`$SLURM_FT_STATE_DIR`, `--config`/`$SLURM_FT_CONFIG`, else "
        "`$SLURM_SUBMIT_DIR/.slurm_ft/<job id>` from the `SLURM_*` variables; outside Slurm "
        "`./.slurm_ft/standalone`)"
    ),
    "--json": "the report as JSON instead of the terminal summary (see the report JSON schema)",
    "--summary": (
        "the run in a few lines instead: nodes and workers, each cycle's outcome with the "
        "failing rank and its exception, where training resumed, the cycle logs, the outcome "
        "(what `scripts/demo` prints)"
    ),
    "--processes": (
        "instead of the report: each rank's worker pid and node, and each node's launcher pid, "
        "in the newest cycle that started workers (from the launchers' process records; with "
        "`--json`: `cycle world_size nodes[node node_rank launcher_pid workers[rank local_rank pid "
        "start_ticks]]`). The one way to find every rank's process: a warm worker's "
        "`/proc/PID/environ` holds no `RANK` ([warm restarts](../guides/warm-restarts.md))"
    ),
    "--svg": "write the timeline picture (plain SVG, opens in any browser)",
    "--html": "write a page with the picture and the totals",
}
