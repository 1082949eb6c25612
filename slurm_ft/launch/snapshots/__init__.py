"""The launcher's part of snapshots: it owns the node's memory and persists it on the way out.

The mechanism (slot files, writer, reader) is :mod:`slurm_ft.snapshot`; here is what a
launcher does with it:

* :mod:`budget` how much shared memory the node's workers may fill (pure);
* :mod:`node` the node's area through the job: swept and made at start, named in every
  worker's environment, kept across cycles, read after each cycle for the records, removed
  at the end;
* :mod:`persist` the newest complete snapshots written to durable storage on the way out of
  an attempt, by a child the launcher abandons at a deadline (``persist_child``);
* :mod:`readings` node 0's timed readings of its newest snapshot step, for the report.
"""
