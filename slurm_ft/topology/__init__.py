"""Where workers run: NUMA/CPU binding and GPU-to-NIC affinity from the node's sysfs.

``facts`` holds the plain data read from sysfs, ``sysfs`` reads it, ``plan`` decides
(pure), ``apply`` puts a decision into effect when a worker is spawned, ``build`` joins
them for the launcher.
"""
