"""Snapshots for trainers built on a framework, through its public callback API.

* :mod:`~slurm_ft.integrations.lightning` a Lightning ``Callback``;
* :mod:`~slurm_ft.integrations.huggingface` a transformers ``TrainerCallback``;
* :mod:`~slurm_ft.integrations.steps` what both share: which steps are snapshot.

Each framework is imported only by its own module: importing this package imports none.
"""
