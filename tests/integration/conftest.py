"""Fixtures shared by integration tests."""

from tests.support.netns import netns  # noqa: F401  (a fixture: a throw-away network namespace)
