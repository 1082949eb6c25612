"""Where the documentation lives, for tests that check what it says: the README (the
landing page) and the pages of the docs site under docs/."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
REFERENCE = DOCS / "reference"


def page(name: str) -> str:
    """The Markdown source of a docs page, by its path under docs/ (``reference/compat.md``)."""
    return (DOCS / name).read_text()


def pages() -> dict[str, str]:
    """Every docs page, path under docs/ -> its text."""
    return {str(p.relative_to(DOCS)): p.read_text() for p in sorted(DOCS.rglob("*.md"))}


def all_text() -> str:
    """The README and every docs page, one after the other (for facts that may be on any)."""
    return "\n".join([README.read_text(), *pages().values()])


def section(text: str, heading: str) -> str:
    """The text under a heading line (``## Options``) up to the next heading of the same or a
    higher level."""
    level = heading.split(" ", 1)[0]
    body = text.split(f"\n{heading}\n", 1)[1]
    for depth in range(1, len(level) + 1):
        body = body.split("\n" + "#" * depth + " ", 1)[0]
    return body


def render_docs() -> ModuleType:
    """scripts/lib/render_docs.py, the one renderer of the generated blocks and man pages."""
    spec = importlib.util.spec_from_file_location("render_docs", REPO / "scripts/lib/render_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
