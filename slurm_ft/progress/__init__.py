"""The no-progress guard: progress sources, the persistent ledger, the policy, the tracker.

A job that crashes at the same spot every time would otherwise burn its whole allocation,
restart after restart and requeue after requeue. The only trustworthy sign of progress is
what the trainer's own checkpoints say, read from a configured source (``sources``): a
cycle that did not move it forward counts against the job, and ``max_no_progress_cycles``
such cycles in a row stop it for good (exit 93). One job per module:

* ``sources``  — what a source is (kinds, conventions, completion); its syntax is a
  setting's (``slurm_ft.settingsyntax``);
* ``looking``  — one look at a source (light standard library only: it is the bounded child);
* ``reading``  — looks taken in a child with a deadline, and how looks become a reading;
* ``ledger``   — the history in the state dir, as data and as a file;
* ``policy``   — pure functions over ledgers and readings: what counts, when to stop;
* ``tracker``  — what node 0 of the launcher calls around every cycle.

Nothing here ever writes the trainer's files. No torch and no rich at import time:
``slurm-ft-progress check`` must start quickly.
"""

from slurm_ft.progress.ledger import (
    INTERRUPTED,
    CycleEntry,
    Ledger,
    LedgerError,
    ledger_from_json,
    ledger_to_json,
    load_ledger,
    save_ledger,
)
from slurm_ft.progress.looking import parse_iteration
from slurm_ft.progress.policy import (
    GUARD_OFF,
    close_cycle,
    configured_source,
    effective_policy,
    judges,
    last_iteration,
    mark_stopped,
    open_cycle,
    policy_enabled,
    provisional_view,
    reset_streak,
    revise_last,
    stop_reason,
    would_stop,
)
from slurm_ft.progress.reading import Reading
from slurm_ft.progress.tracker import ProgressTracker, read_for_verdict

__all__ = [
    "GUARD_OFF",
    "INTERRUPTED",
    "CycleEntry",
    "Ledger",
    "LedgerError",
    "ProgressTracker",
    "Reading",
    "close_cycle",
    "configured_source",
    "effective_policy",
    "judges",
    "last_iteration",
    "ledger_from_json",
    "ledger_to_json",
    "load_ledger",
    "mark_stopped",
    "open_cycle",
    "parse_iteration",
    "policy_enabled",
    "provisional_view",
    "read_for_verdict",
    "reset_streak",
    "revise_last",
    "save_ledger",
    "stop_reason",
    "would_stop",
]
