"""Rewrite the benchmark tables from a results JSON, never by hand: the whole table in
docs/benchmarks.md and the headline rows on the README's landing page."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.table import cells, markdown

START = "<!-- BENCHMARKS:START -->"
END = "<!-- BENCHMARKS:END -->"
HEADLINE_START = "<!-- BENCHMARKS-HEADLINE:START -->"
HEADLINE_END = "<!-- BENCHMARKS-HEADLINE:END -->"
# The rows the landing page shows, by the start of their metric (one row each).
HEADLINE = (
    "launch overhead: trivial script",
    "restart latency: worker death to last next-cycle worker started",
    "log throughput per node, 100 B lines",
    "health check, healthy node",
    "rendezvous join + decide, 256 simulated launchers, per cycle",
    "hang detection: job silent to workers stopped",
    "replacement latency:",
)


class RenderError(ValueError):
    """The README or the results file cannot be used; the message says which and why."""


def replace_block(
    text: str, block: str, where: str = "README.md", markers: tuple[str, str] = (START, END)
) -> str:
    start_marker, end_marker = markers
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < 0:
        missing = " and ".join(m for m, i in ((start_marker, start), (end_marker, end)) if i < 0)
        raise RenderError(f"{where}: marker {missing} not found; add both markers where the table goes")
    if end < start or text.count(start_marker) != 1 or text.count(end_marker) != 1:
        raise RenderError(f"{where}: need exactly one {start_marker} followed by one {end_marker}")
    return text[: start + len(start_marker)] + "\n" + block + text[end:]


def headline(doc: dict) -> str:
    """The landing page's few rows: slurm-ft beside torchrun where both were measured."""
    lines = [
        "| figure | slurm-ft | torchrun | target | result |",
        "|---|---|---|---|---|",
    ]
    for prefix in HEADLINE:
        row = next((r for r in doc["rows"] if r["metric"].startswith(prefix)), None)
        if row is None:
            continue
        c = [v.replace("|", "\\|") for v in cells(row)]
        result = f"**{c[7]}**" if c[7].startswith("MISS") else c[7]
        lines.append(f"| {row['metric']} | {c[2]} | {c[3]} | {c[6]} | {result} |")
    lines += [
        "",
        f"Measured {doc.get('date')}; every figure, the machine and how to reproduce them: "
        "[benchmarks](docs/benchmarks.md).",
    ]
    return "\n".join(lines) + "\n"


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


def render(results: Path, readme: Path, landing: Path | None = None) -> None:
    """The whole table into ``readme`` (docs/benchmarks.md); with ``landing`` (README.md)
    its headline rows there too."""
    doc = load_results(results)
    try:
        text = readme.read_text()
    except FileNotFoundError:
        raise RenderError(f"{readme}: not found; create it with the {START}/{END} markers") from None
    new = replace_block(text, markdown(doc), str(readme))
    if landing is not None:
        page = landing.read_text()
        landing.write_text(replace_block(page, headline(doc), str(landing), (HEADLINE_START, HEADLINE_END)))
    readme.write_text(new)
