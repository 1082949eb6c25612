"""Fixtures shared by every test directory."""

from tests.support.hungfs import hungfs  # noqa: F401  (a fixture: a mount that stops answering)
