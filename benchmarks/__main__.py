"""python -m benchmarks: run every figure, print one table, write the JSON.

Figures run one after another (never concurrently: two cores), each figure's
contenders interleaved run by run. A figure that crashes becomes an error row, so a
broken piece is visible in the table instead of hiding the rest.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import cmdline, harness, machine, table
from benchmarks.render_readme import RenderError, render
from benchmarks.stats import Row, error_row

# name -> (figure number, module)
FIGURES: dict[str, tuple[int, str]] = {
    "launch": (1, "benchmarks.launch_overhead"),
    "restart": (2, "benchmarks.restart_latency"),
    "applog": (3, "benchmarks.applog_vs_torchrun"),
    "health": (4, "benchmarks.healthcheck_time"),
    "rendezvous": (5, "benchmarks.rendezvous_scale"),
    "cpu": (6, "benchmarks.launcher_cpu"),
    "hang": (7, "benchmarks.hang_detection"),
    "spares": (8, "benchmarks.replacement_latency"),
    "logs": (9, "benchmarks.logs_throughput"),
    "warm": (10, "benchmarks.warm_restart"),
}
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = cmdline.Parser(
        prog="python -m benchmarks",
        description="Measure slurm-ft beside torchrun (from the installed torch) and print one table.",
    )
    p.add_argument("--quick", action="store_true", help="about a minute: fewer runs, smaller sizes")
    p.add_argument("--json", action="store_true", help="print the results JSON instead of the table")
    p.add_argument(
        "--only",
        metavar="FIGURE",
        help="comma-separated figures by name or number: "
        + ", ".join(f"{n}={k}" for k, (n, _) in FIGURES.items()),
    )
    p.add_argument(
        "--out",
        metavar="PATH",
        type=Path,
        help="results JSON (default results/latest.json; quick.json for --quick, partial.json for --only)",
    )
    p.add_argument(
        "--readme",
        action="store_true",
        help="measure nothing: rewrite the benchmark table of docs/benchmarks.md and the "
        "README's headline rows from the results JSON",
    )
    p.add_argument(
        "--readme-path", type=Path, default=harness.REPO / "docs" / "benchmarks.md", help=argparse.SUPPRESS
    )
    p.add_argument("--landing-path", type=Path, default=harness.REPO / "README.md", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def select(only: str | None) -> list[str]:
    if not only:
        return list(FIGURES)
    chosen = []
    by_number = {str(n): name for name, (n, _) in FIGURES.items()}
    for item in (part.strip() for part in only.split(",") if part.strip()):
        name = by_number.get(item, item)
        if name not in FIGURES:
            known = ", ".join(FIGURES)
            print(f"python -m benchmarks: error: unknown figure {item!r} (known: {known})", file=sys.stderr)
            raise SystemExit(2)
        if name not in chosen:
            chosen.append(name)
    return chosen


def default_out(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    if args.only:
        return RESULTS / "partial.json"
    return RESULTS / ("quick.json" if args.quick else "latest.json")


def run_figure(name: str, ctx: harness.Context) -> list[Row]:
    number, module_name = FIGURES[name]
    try:
        module = importlib.import_module(module_name)
        return list(module.run(ctx))
    except Exception as exc:  # a broken figure is a row, not the end of the run
        traceback.print_exc(file=sys.stderr)
        return [error_row(number, name, f"{type(exc).__name__}: {exc}")]


def measure(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    speed_at_start = machine.speed_check_ms()
    rows: list[Row] = []
    with harness.context(args.quick) as ctx:
        for i, name in enumerate(names, 1):
            t0 = time.monotonic()
            print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
            rows.extend(run_figure(name, ctx))
            print(
                f"[{i}/{len(names)}] {name} done in {time.monotonic() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    notes: list[str] = []
    for name in names:
        module = sys.modules.get(FIGURES[name][1])
        notes.extend(getattr(module, "NOTES", ()))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "figures": names,
        "command": "python -m benchmarks"
        + (" --quick" if args.quick else "")
        + (f" --only {args.only}" if args.only else ""),
        "machine": {**machine.describe(), "speed_check_ms": [speed_at_start, machine.speed_check_ms()]},
        "duration_s": round(time.monotonic() - started, 1),
        "rows": [r.to_json() for r in sorted(rows, key=lambda r: r.figure)],
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = default_out(args)
    if args.readme:
        try:
            render(out, args.readme_path, args.landing_path)
        except RenderError as exc:
            print(f"python -m benchmarks: {exc}", file=sys.stderr)
            return 2
        print(
            f"rewrote the benchmark tables of {args.readme_path} and {args.landing_path} from {out}",
            file=sys.stderr,
        )
        return 0
    doc = measure(args, select(args.only))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        table.print_rich(doc)
        command = shlex.join(["python", "-m", "benchmarks", *(argv or sys.argv[1:])])
        print(f"results: {out} ({doc['duration_s']} s); command: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
