"""``slurm-ft-drill``: inject real faults into a running slurm-ft job and record them.

faults (what each fault is and does), schedule (when: pure parsing and seeded plans),
targets (which processes, from the launchers' own records), send (the signalling, with the
identity checks), slurmjob (the job as Slurm describes it), run (one injection, recorded).
"""
