"""Fixtures and scheduling shared by every test directory."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hungfs import hungfs, stoppable_fs  # noqa: F401  (fixtures: mounts that stop answering)

SLURM_GROUP = "slurm"


@pytest.fixture(autouse=True, scope="session")
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Launchers started by the tests leave their job pointers (``slurm_ft.jobpointer``)
    in a directory of the test session's, never in the home of whoever runs the tests."""
    path = tmp_path_factory.mktemp("xdg-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(path))
        yield path


def xdist_group_of(item: pytest.Item) -> str | None:
    """The work unit a test must share with others under ``pytest -n N --dist loadgroup``
    (scripts/test): every Slurm test in one, because the local cluster is one per machine
    and its tests assume the nodes are theirs alone (so they run one after another, in one
    worker, which starts the cluster once); and the tests of a module with a module-scoped
    fixture in one per module, which builds that fixture once instead of once per worker
    (and again each time a worker comes back to the module). None: free to go anywhere."""
    if item.get_closest_marker("slurm") is not None or "slurm_cluster" in getattr(item, "fixturenames", ()):
        return SLURM_GROUP
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    if fixtureinfo is None:
        return None
    for defs in fixtureinfo.name2fixturedefs.values():
        if any(d.scope == "module" for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests before pytest-xdist reads the groups (it does so in the same hook),
    and put the Slurm tests first: one after another they are the longest work unit of
    the run, and pytest-xdist (``--no-loadscope-reorder``) hands out the units in this
    order, so the other workers share out everything else while they run."""
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: xdist_group_of(item) != SLURM_GROUP)
