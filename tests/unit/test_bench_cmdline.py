"""A benchmark's bad command line is one line on stderr and exit 2, before any work starts
(a traceback, or a run that fails minutes later, was what these gave)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

KNOWN_FAULTS = "crash, kill, hang, freeze-launcher, lose-node, kill-launcher, preempt"


@pytest.mark.parametrize(
    ("module", "argv", "line"),
    [
        (
            "goodput",
            ["--mix", "nonsense"],
            f"python -m benchmarks.goodput: error: mix: unknown fault 'nonsense' (known: {KNOWN_FAULTS})",
        ),
        (
            "goodput",
            ["--faults", "/nonexistent/plan.txt"],
            "python -m benchmarks.goodput: error: --faults /nonexistent/plan.txt: No such file or directory",
        ),
        ("goodput", ["--every", "0"], "python -m benchmarks.goodput: error: --every must be above 0 seconds"),
        (
            "goodput",
            ["--step-time", "0"],
            "python -m benchmarks.goodput: error: argument --step-time: expected a number above 0, got '0'",
        ),
        (
            "scale",
            ["--sizes", "64,x"],
            "python -m benchmarks.scale: error: argument --sizes: "
            "expected whole numbers above 0 separated by commas, got '64,x'",
        ),
        (
            "scale",
            ["--processes", "0"],
            "python -m benchmarks.scale: error: argument --processes: "
            "expected a whole number above 0, got '0'",
        ),
        (
            "scale_files",
            ["--sizes", "0"],
            "python -m benchmarks.scale_files: error: argument --sizes: "
            "expected whole numbers above 0 separated by commas, got '0'",
        ),
        (
            "goodput_phases",
            ["/nonexistent"],
            "python -m benchmarks.goodput_phases: error: /nonexistent: no results.json here "
            "(give a goodput run's --out)",
        ),
        (
            "health_interval_cpu",
            ["--runs", "0"],
            "python -m benchmarks.health_interval_cpu: error: argument --runs: "
            "expected a whole number above 0, got '0'",
        ),
        ("__main__", ["--only", "nonsense"], None),  # its own line, checked below
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(
    module: str, argv: list[str], line: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    main = importlib.import_module(f"benchmarks.{module}").main
    with pytest.raises(SystemExit) as ended:
        code = main(argv)
        raise SystemExit(code)
    assert ended.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    if line is None:
        assert err.startswith("python -m benchmarks: error: unknown figure 'nonsense' (known: launch,")
        assert len(err.splitlines()) == 1
    else:
        assert err.splitlines() == [line]


@pytest.mark.parametrize(
    ("module", "argv", "tail"),
    [
        (
            "hang_false_alarms",
            ["--only", "ddp,nonsense"],
            "argument --only: unknown 'nonsense'; choose among ddp, snapshot,",
        ),
        ("progress_startup", ["--runs", "0"], "argument --runs: expected a whole number above 0, got '0'"),
        ("logs_report_scale", ["--nodes", "256,x"], "argument --nodes: expected whole numbers above 0"),
        ("snapshot_persist", ["--mib", "x"], "argument --mib: expected whole numbers above 0"),
        (
            "restart_cost",
            ["--launchers", "0"],
            "argument --launchers: expected a whole number above 0, got '0'",
        ),
        ("standby_share", ["--baseline", "/nonexistent"], "/nonexistent: no slurm_ft package here"),
        ("gather_cost", ["--looks", "0"], "argument --looks: expected a whole number above 0, got '0'"),
    ],
)
def test_the_other_entry_points_say_it_in_one_line_too(
    module: str,
    argv: list[str],
    tail: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", [str(Path(f"{module}.py")), *argv])
    main = importlib.import_module(f"benchmarks.{module}").main
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f": error: {tail}" in line
