"""Instructions a command's own process executes, counted by ``valgrind --tool=callgrind``.

A start-up figure in seconds moves with the machine: on the shared VM these figures were
measured on, the same launch took 0.10 s in one hour and 0.17 s in the next. The count of
instructions does not drift (a few tenths of a percent between runs), so it is what
shows whether a change to the start path helped, and by how much. Only the command's own
process is counted (children, e.g. the launcher's workers, run natively), beside
``python -c pass`` as the reference. Optional: without valgrind the row says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks import proc
from benchmarks.harness import PYTHON_PASS
from benchmarks.stats import Row, error_row, summarize

UNIT = "M instr"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def count(cmd: Sequence[str], env: Mapping[str, str], log: Path, *, timeout: float = 300) -> float:
    """Millions of instructions of ``cmd``'s process, which must exit 0; raises BenchError
    without valgrind, on another exit or without a count."""
    valgrind = shutil.which("valgrind", path=env.get("PATH"))
    if valgrind is None:
        raise proc.BenchError("valgrind is not installed (apt install valgrind)")
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", f"--log-file={log}", *cmd],
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise proc.BenchError(f"{Path(cmd[0]).name} exited {done.returncode} under callgrind (see {log})")
    found = _COLLECTED.search(log.read_text(errors="replace")) if log.exists() else None
    if found is None:
        raise proc.BenchError(f"callgrind reported no count (see {log})")
    return int(found.group(1)) / 1e6


def row(
    figure: int,
    metric: str,
    cmd: Sequence[str],
    reference_cmd: Sequence[str],
    env: Mapping[str, str],
    workdir: Path,
    note: str = "",
) -> Row:
    """One row: ``cmd``'s count beside ``python -c pass``'s (one run each: they repeat
    to within a fraction of a percent)."""
    try:
        ours = count(cmd, env, workdir / "ours.callgrind.log")
        reference = count(reference_cmd, env, workdir / "reference.callgrind.log")
    except (proc.BenchError, OSError, subprocess.SubprocessError) as exc:
        return error_row(figure, metric, str(exc))
    return Row(
        figure,
        metric,
        UNIT,
        summarize([ours]),
        None,
        note=note,
        reference=summarize([reference]),
        reference_label=PYTHON_PASS,
    )
