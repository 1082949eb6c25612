"""Snapshots: a trainer's state kept in the node's shared memory, so it outlives the worker.

The mechanism only; the launcher decides when areas are made, swept and persisted, and
:mod:`slurm_ft.worker` is the trainer's door to it. One module per job:

* :mod:`~slurm_ft.snapshot.layout` the bytes of one slot file (header, seal) and the names
  of a rank's files in an area; standard library only;
* :mod:`~slurm_ft.snapshot.area` the per-job per-node directory under ``/dev/shm``: its
  name, creation (private to the user), the space check and the sweep of ended jobs' areas;
* :mod:`~slurm_ft.snapshot.claim` who may write a rank's slots (the newest cycle);
* :mod:`~slurm_ft.snapshot.writer` a state dict into a slot, tensors copied straight in;
* :mod:`~slurm_ft.snapshot.reader` the newest complete snapshot: described from its header
  alone, or loaded back into a state dict;
* :mod:`~slurm_ft.snapshot.choice` the step every rank resumes from (pure);
* :mod:`~slurm_ft.snapshot.ship` a complete snapshot as a byte stream, verified on arrival;
* :mod:`~slurm_ft.snapshot.session` the trainer side: the calls behind ``worker.snapshot``.

Importing this package imports nothing: torch is loaded only by the modules that handle
tensors (``writer``, the loading half of ``reader``, ``session``).
"""
