"""The results table, from the JSON document only: rich for people, markdown for README."""

from __future__ import annotations

from typing import Any

from benchmarks.machine import one_line

COLUMNS = ("#", "figure", "slurm-ft", "torchrun", "ratio", "physical reference", "target", "result")
_DECIMALS = {"s": 3, "ms": 1, "MB/s": 0, "%": 2, "CPU-s/GB": 2, "s/cycle": 3, "x": 2}


def fmt_number(value: float, unit: str) -> str:
    decimals = _DECIMALS.get(unit, 3)
    return f"{value:.{decimals}f}"


def fmt_summary(summary: dict[str, Any] | None, unit: str) -> str:
    """'0.123 s (0.110-0.140, n=5)'; one run shows no range."""
    if not summary:
        return "—"
    text = f"{fmt_number(summary['median'], unit)} {unit}".rstrip()
    if summary.get("n", 1) > 1:
        text += f" ({fmt_number(summary['min'], unit)}–{fmt_number(summary['max'], unit)}, n={summary['n']})"
    return text


def fmt_result(row: dict[str, Any]) -> str:
    if row.get("error") and row.get("slurm_ft") is None:
        verdict = "MISS" if row.get("target") else "error"
        return f"{verdict} (not measured: {row['error']})"
    verdict = {True: "pass", False: "MISS", None: "—"}[row.get("pass")]
    if row.get("pass") is None and row.get("target"):
        verdict = "not judged"
    if row.get("error"):
        verdict += f" ({row['error']})"
    return verdict


def fmt_reference(row: dict[str, Any], unit: str) -> str:
    """'python -c pass: 0.021 s (...); ours 2.90x'; a label alone is a reference not
    measured (a physical zero)."""
    label, summary = row.get("reference_label") or "", row.get("reference")
    if not summary:
        return label or "—"
    text = f"{label}: {fmt_summary(summary, unit)}" if label else fmt_summary(summary, unit)
    if row.get("ref_ratio") is not None:
        text += f"; ours {row['ref_ratio']:.2f}x"
    return text


def cells(row: dict[str, Any]) -> list[str]:
    unit = row.get("unit", "")
    ratio = row.get("ratio")
    metric = row["metric"] + (f" [{row['note']}]" if row.get("note") else "")
    return [
        str(row["figure"]),
        metric,
        fmt_summary(row.get("slurm_ft"), unit),
        fmt_summary(row.get("torchrun"), unit),
        "—" if ratio is None else f"{ratio:.2f}x",
        fmt_reference(row, unit),
        row.get("target") or "—",
        fmt_result(row),
    ]


def print_rich(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"slurm-ft vs torchrun {'(quick) ' if doc.get('quick') else ''}— {doc.get('date')}"
    table = Table(title=title, caption=one_line(doc.get("machine", {})), show_lines=False)
    for name in COLUMNS:
        table.add_column(name, overflow="fold", justify="right" if name in ("ratio",) else "left")
    for row in doc["rows"]:
        values = cells(row)
        style = {True: "green", False: "bold red", None: ""}[row.get("pass")]
        if row.get("error") and row.get("slurm_ft") is None and row.get("target"):
            style = "bold red"
        values[-1] = f"[{style}]{values[-1]}[/]" if style else values[-1]
        table.add_row(*values)
    Console(width=200).print(table)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(doc: dict[str, Any]) -> str:
    """The docs' benchmark block: machine, date, how to reproduce, then the table."""
    machine = doc.get("machine", {})
    lines = [
        f"Measured {doc.get('date')} on {one_line(machine)}{' (quick subset)' if doc.get('quick') else ''}.",
        "",
        f"Reproduce: `{doc.get('command', 'python -m benchmarks')}` "
        "(writes `benchmarks/results/latest.json`), then `python -m benchmarks --readme`.",
        "Each figure is the median of several runs after a warm-up, with min–max and run count; "
        "ratio = slurm-ft / torchrun (medians), measured side by side in the same run; "
        "the physical reference (what the machine itself allows) is measured in the same run too, "
        "interleaved, and the target is the goal of issue 19 where it set one.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in doc["rows"]:
        values = [_md_escape(c) for c in cells(row)]
        if values[-1].startswith("MISS"):
            values[-1] = f"**{values[-1]}**"
        lines.append("| " + " | ".join(values) + " |")
    notes = doc.get("notes") or []
    if notes:
        lines.append("")
        lines.extend(f"- {_md_escape(n)}" for n in notes)
    return "\n".join(lines) + "\n"
