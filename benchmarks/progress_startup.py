"""Start-up of `slurm-ft-progress check`, the guard a template runs before every requeue.

The target is under 150 ms from exec to exit on a ledger with history. The interpreter's
own start-up is measured in the same run and printed beside it, because on a shared
machine absolute times drift; the difference is what the command itself costs.

    python -m benchmarks.progress_startup [--runs N]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import cmdline
from benchmarks.stats import summarize

TARGET_S = 0.150


def _env() -> dict[str, str]:
    """No Slurm job, and bytecode caching on: an installed package has its .pyc files, while
    PYTHONDONTWRITEBYTECODE (set in this project's shells) would recompile our modules on
    every start and measure the compiler instead; the warm-up runs write the caches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time(cmd: list[str], cwd: Path, expect: int) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run; CPU time drifts less under load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != expect:
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}, expected {expect}: {proc.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def _make_history(state: Path, it_file: Path) -> None:
    from slurm_ft.config import ProgressSettings
    from slurm_ft.progress import ProgressTracker
    from slurm_ft.statedir import StateDir

    settings = ProgressSettings(str(it_file), max_no_progress_cycles=3, min_progress_iterations=1)
    tracker = ProgressTracker(StateDir(state), settings, attempt=0)
    for cycle in range(4):
        assert tracker.before_cycle(cycle) is None
        it_file.write_text(str(100 * cycle))
        tracker.after_cycle(cycle, "worker-failed")


def main() -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=cmdline.positive_int, default=20)
    args = parser.parse_args()
    cli = str(Path(sys.executable).parent / "slurm-ft-progress")
    with tempfile.TemporaryDirectory(prefix="slurm-ft-bench-progress-") as tmp:
        work = Path(tmp)
        state = work / "state"
        _make_history(state, work / "it.txt")
        check = [cli, "check", "--state-dir", str(state)]
        baseline = [sys.executable, "-c", "pass"]
        for _ in range(2):  # warm-up: page cache, .pyc files
            _time(check, work, 0)
            _time(baseline, work, 0)
        ours, python = [], []
        for _ in range(args.runs):
            ours.append(_time(check, work, 0))
            python.append(_time(baseline, work, 0))
    o, p = summarize([w for w, _ in ours]), summarize([w for w, _ in python])
    oc, pc = summarize([c for _, c in ours]), summarize([c for _, c in python])
    verdict = "meets" if o.median < TARGET_S else "MISSES"

    def ms(x: float) -> str:
        return f"{x * 1e3:.0f} ms"

    print(f"slurm-ft-progress check: median {ms(o.median)} (min {ms(o.min)}, max {ms(o.max)})")
    print(f"python -c pass:          median {ms(p.median)} (min {ms(p.min)}, max {ms(p.max)})")
    print(f"command's own cost:      {ms(max(0.0, o.median - p.median))}; ratio {o.median / p.median:.2f}")
    print(f"CPU time (user+sys):     check median {ms(oc.median)}, python -c pass median {ms(pc.median)}")
    print(f"target < {ms(TARGET_S)} wall: {verdict}")
    return 0 if o.median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
