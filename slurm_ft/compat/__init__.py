"""Other launchers' command lines -> slurm-ft settings and topology (pure functions).

``torchrun.py`` reads torchrun's rendezvous and topology flags, ``ftlauncher.py`` NVIDIA
ft_launcher's ``--ft-*`` options and YAML (its table ``fttable.py``, what each option
applies ``ftvalues.py``), ``argv.py`` takes both out of a command line
before argparse sees it, ``table.py`` is the compatibility table the docs show
(docs/reference/compat.md). Every flag ends in one of three ways: a setting, a check
against the topology, or one clear error line; none is ignored without saying so.
"""
