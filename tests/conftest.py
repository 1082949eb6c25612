"""Fixtures shared by every test directory."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hungfs import hungfs, stoppable_fs  # noqa: F401  (fixtures: mounts that stop answering)


@pytest.fixture(autouse=True, scope="session")
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Launchers started by the tests leave their job pointers (``slurm_ft.jobpointer``)
    in a directory of the test session's, never in the home of whoever runs the tests."""
    path = tmp_path_factory.mktemp("xdg-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(path))
        yield path
