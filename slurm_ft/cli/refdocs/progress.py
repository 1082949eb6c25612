"""slurm-ft-progress in the reference: its synopsis and exit codes, the settings its
options set and their fuller meanings."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-progress",
    "progress",
    "stop restart and requeue loops that make no progress",
    (
        "status [--json] [options]",
        "check [--json] [options]",
        "reset [--yes] [options]",
    ),
    (
        (
            "0",
            '`status`: shown (also "no history"). `check`: another attempt may run, '
            'including "no history" (the launcher never wrote a ledger, or the state dir '
            "does not exist yet) and tracking off (K <= 0, no source, or a source that has not "
            "existed at any cycle boundary). `reset`: done, or nothing to reset.",
        ),
        ("1", "`reset`: the operator answered no at the prompt; nothing changed."),
        (
            "2",
            "bad input, one line on stderr (`slurm-ft-progress: ...`): usage errors; invalid "
            "settings, config file or `SLURM_*` variables; a corrupt or unreadable ledger; a "
            "state dir that is not a readable directory; `status`/`reset` with a state dir "
            "that does not exist; outside a Slurm job without `--state-dir` when "
            "`./.slurm_ft/standalone` does not exist; `reset` without `--yes` when stdin is "
            "not a terminal.",
        ),
        ("93", "`check`: no progress in the last K cycles: do not requeue."),
    ),
)

# The setting each option sets (a unit test checks these against the command's code).
SETTINGS: dict[str, str] = {
    "--state-dir": "state_dir",
    "--max-no-progress-cycles": "progress.max_no_progress_cycles",
    "--min-progress-iterations": "progress.min_progress_iterations",
    "--checkpoint-iteration-file": "progress.checkpoint_iteration_file",
    "--progress-source": "progress.source",
    "--progress-pattern": "progress.pattern",
}

# A fuller meaning than the one-line --help, where a reader needs it (markdown).
DETAILS: dict[str, str] = {
    "--state-dir": (
        "the job's state dir; default: found the way the launcher finds it (`SLURM_FT_STATE_DIR` "
        "or `state_dir` in the config file, else `$SLURM_SUBMIT_DIR/.slurm_ft/<job id>` in a "
        "Slurm job, else `./.slurm_ft/standalone`)"
    ),
    "--max-no-progress-cycles": (
        "stop after K consecutive cycles without progress (0 or negative: off); default: "
        "what the launcher recorded in the ledger"
    ),
    "--min-progress-iterations": (
        "a cycle made progress if the step grew by at least M; default: what the launcher recorded"
    ),
    "--progress-source": (
        "`iteration-file:PATH`, `checkpoint-dir:DIR` or `file:PATH`; default: the source the "
        "launcher recorded"
    ),
}
