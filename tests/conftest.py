"""Fixtures and test scheduling shared by every test directory."""

import contextlib
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import machineshare
from tests.support.hungfs import hungfs, stoppable_fs  # noqa: F401  (fixtures: mounts that stop answering)

SLURM_TESTS = "tests/slurm/"
HEAVY = "heavy"
_RUN_LOCKS = pytest.StashKey[contextlib.ExitStack]()


def pytest_configure(config: pytest.Config) -> None:
    """The run's main process makes the locks by which its workers share the machine."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    stack = contextlib.ExitStack()
    stack.enter_context(machineshare.made_for_this_run())
    config.stash[_RUN_LOCKS] = stack


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_RUN_LOCKS, None)
    if stack is not None:
        stack.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """A ``heavy`` test runs with no other worker's test beside it, from its setup to its
    teardown (tests/support/machineshare.py). Outside pytest-timeout's own wrapper, so that
    a test's time limit does not count the wait for its turn."""
    share = machineshare.Share.WHOLE if item.get_closest_marker(HEAVY) else machineshare.Share.PART
    with machineshare.holding(share, machineshare.lock_dir()):
        return (yield)


@pytest.fixture(autouse=True, scope="session")
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Launchers started by the tests leave their job pointers (``slurm_ft.jobpointer``)
    in a directory of the test session's, never in the home of whoever runs the tests."""
    path = tmp_path_factory.mktemp("xdg-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(path))
        yield path


@pytest.fixture(autouse=True, scope="session")
def _no_terminal_size_from_xdist() -> Iterator[None]:
    """A pytest-xdist worker sets ``COLUMNS=80`` and ``LINES=24`` in its own environment,
    which every program a test starts inherits: the CLIs' tables then wrap at 80 columns
    as they never do with their output in a pipe (test_progress_cli's status table). The
    tests see the environment of a run in one process."""
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            patch.delenv("COLUMNS", raising=False)
            patch.delenv("LINES", raising=False)
        yield


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole (scripts/test runs 4): all the Slurm tests,
    one after another, because the local cluster is one per machine and each test assumes
    its nodes are its own (and the worker starts the cluster once); else a test's module,
    so a module-scoped fixture is built once and a module's tests never race each other."""
    return "slurm" if nodeid.startswith(SLURM_TESTS) else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's file-by-file scheduling with the Slurm tests as one unit (its own
    ``loadgroup`` marks do not group under pytest 9, which ignores the node ids it sets)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Slurm tests first: together they are the longest unit of the run, and
    pytest-xdist (``--no-loadscope-reorder``) hands the units out in this order, so the
    other workers share out everything else while they run."""
    items.sort(key=lambda item: work_unit(item.nodeid) != "slurm")
