"""The installed torch's version, read from its distribution's metadata directory and
never by importing it: the launcher decides which flight-recorder variables the workers
get (:mod:`slurm_ft.launch.workers.env`) at a start that must not pay for torch's import.

The workers run the launcher's interpreter with the launcher's ``PYTHONPATH``, so the
torch this interpreter would import is theirs. The version is the wheel's: the metadata
directory beside the package is named ``torch-<version>.dist-info`` (an egg install:
``.egg-info``), the packaging standard's rule for installed distributions.
"""

from __future__ import annotations

import importlib.util
import os
import re

_DIST_DIR = re.compile(r"torch-(\d+)\.(\d+)[^-]*\.(?:dist|egg)-info")


def version_in(names: list[str]) -> tuple[int, int] | None:
    """(major, minor) from the names in the directory that holds the ``torch`` package."""
    found = [match for name in names if (match := _DIST_DIR.fullmatch(name))]
    if len(found) != 1:  # none, or two installs left side by side: which one imports is unknown
        return None
    return int(found[0].group(1)), int(found[0].group(2))


def installed_torch() -> tuple[int, int] | None:
    """(major, minor) of the torch this interpreter would import; None when there is none,
    or its metadata cannot be read."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = next(iter(spec.submodule_search_locations))
    try:
        return version_in(os.listdir(os.path.dirname(os.path.abspath(package_dir))))
    except OSError:
        return None
