"""Fixtures shared by integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.netns import netns  # noqa: F401  (a fixture: a throw-away network namespace)
from tests.support.snaptrainer import Trainer


@pytest.fixture
def snap_area(tmp_path: Path) -> Path:
    made = tmp_path / "area"
    made.mkdir(mode=0o700)
    return made


@pytest.fixture
def trainers() -> Iterator[list[Trainer]]:
    started: list[Trainer] = []
    yield started
    for t in started:
        t.kill()
