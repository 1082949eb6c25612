"""slurm-ft-logs: read a job's cycle logs (select, collapse, follow, why a cycle failed).

Never imports ``slurm_ft.launch``: the line format comes from ``slurm_ft.logline``, the
file names from the cycle records (``slurm_ft.records``).
"""
