"""Rewrite the benchmark block of README.md from a results JSON, never by hand."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.table import markdown

START = "<!-- BENCHMARKS:START -->"
END = "<!-- BENCHMARKS:END -->"


class RenderError(ValueError):
    """The README or the results file cannot be used; the message says which and why."""


def replace_block(text: str, block: str, where: str = "README.md") -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < 0:
        missing = " and ".join(m for m, i in ((START, start), (END, end)) if i < 0)
        raise RenderError(f"{where}: marker {missing} not found; add both markers where the table goes")
    if end < start or text.count(START) != 1 or text.count(END) != 1:
        raise RenderError(f"{where}: need exactly one {START} followed by one {END}")
    return text[: start + len(START)] + "\n" + block + text[end:]


def load_results(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise RenderError(f"{path}: no results yet; run `python -m benchmarks` first") from None
    except (OSError, ValueError) as exc:
        raise RenderError(f"{path}: cannot read results: {exc}") from None
    if not isinstance(doc, dict) or "rows" not in doc:
        raise RenderError(f"{path}: not a benchmarks results file")
    return doc


def render(results: Path, readme: Path) -> None:
    doc = load_results(results)
    try:
        text = readme.read_text()
    except FileNotFoundError:
        raise RenderError(f"{readme}: not found; create it with the {START}/{END} markers") from None
    readme.write_text(replace_block(text, markdown(doc), str(readme)))
