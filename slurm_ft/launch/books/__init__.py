"""The launcher's books: what it writes in the state dir, when, and how a write that meets
a dead mount is kept from stopping it. :mod:`bookkeeper` (the run's summary, what each
record says and when it is written), :mod:`stateio` (every state-dir file operation,
bounded in time) and :mod:`cyclecount` (the job-wide cycle counter). The formats are
``slurm_ft.records``'s."""
