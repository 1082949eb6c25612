"""Fixtures shared by every test directory."""

from tests.support.hungfs import hungfs, stoppable_fs  # noqa: F401  (fixtures: mounts that stop answering)
