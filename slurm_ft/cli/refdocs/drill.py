"""slurm-ft-drill in the reference: its synopsis and exit codes, the settings its
options set and their fuller meanings."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-drill",
    "drill",
    "inject real faults into a running slurm-ft job and record them",
    (
        "JOBID|--state-dir DIR FAULT [--rank R | --node N] [--at T]",
        "JOBID|--state-dir DIR --schedule FILE",
        "JOBID|--state-dir DIR --every S [--mix M] --seed K [--duration D] [--plan]",
    ),
    (
        ("0", "every fault was sent (or skipped and recorded), or the job stopped running first"),
        (
            "2",
            "refused before anything is sent, one line on stderr: an unknown fault, a rank or "
            "node outside the job, a schedule or mix that does not parse, a job that is not "
            "running, not the caller's, or not a slurm-ft job, `preempt` without Slurm",
        ),
    ),
)

# The setting each option sets (a unit test checks these against the command's code).
SETTINGS: dict[str, str] = {}

# A fuller meaning than the one-line --help, where a reader needs it (markdown).
DETAILS: dict[str, str] = {
    "JOBID FAULT": (
        "the job (or `--state-dir`) and the fault: `crash`, `kill`, `hang`, `freeze-launcher`, "
        "`lose-node`, `kill-launcher` (the launcher alone, and with it its node's snapshots), "
        "`preempt`. The job's state dir is `.slurm_ft/JOBID` in its working "
        "directory, else where the job's pointer leads; options may come between the words"
    ),
    "--rank": "global rank to hit (crash, kill, hang; default: the last)",
    "--node": (
        "node rank among the training nodes or a node name (default: the last; node rank 0 "
        "hosts the job's store, so losing it ends the attempt)"
    ),
    "--schedule": (
        "faults from a file: one a line, `AT FAULT [rank=R | node=N]`, `AT` in seconds after the "
        "drill starts (`90`, `90s`, `1.5m`), `#` comments"
    ),
    "--every": (
        "seeded plan: gaps between faults drawn from an exponential distribution of mean S "
        "seconds (default 120)"
    ),
    "--mix": (
        "seeded plan: `fault=weight,...` (`kill=3,hang=1`) or `llama3` (the default: Llama 3 "
        "405B's interruptions mapped onto these faults)"
    ),
    "--plan": "print the seeded plan and exit without injecting",
}
