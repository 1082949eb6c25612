"""What every figure module gets: where things are, how many runs, one marker for cleanup."""

from __future__ import annotations

import compileall
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks import proc, stats

REPO = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"


@dataclass(frozen=True)
class Context:
    quick: bool
    workdir: Path
    marker: str
    bin_dir: Path

    @property
    def python(self) -> str:
        return sys.executable

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for everything a benchmark starts: ours, tagged, no Slurm job."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
        env.pop("MASTER_ADDR", None)
        env.pop("MASTER_PORT", None)
        env[proc.MARKER_ENV] = self.marker
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(REPO)
        env.update(extra)
        return env

    def runs(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def scratch(self, name: str) -> Path:
        """A fresh directory under the run's work dir."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
        return path


@contextmanager
def context(quick: bool) -> Iterator[Context]:
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="slurm-ft-bench-") as tmp:
        ctx = Context(quick, Path(tmp), uuid.uuid4().hex, Path(sys.executable).parent)
        try:
            yield ctx
        finally:
            proc.reap_marked(ctx.marker)


def compile_bytecode() -> None:
    """Write the .pyc files of what the figures start, as ``pip install`` does for an
    installed package. A source checkout under PYTHONDONTWRITEBYTECODE (set on many CI
    and sandbox machines) never caches them, so every launcher and health check would
    recompile some 40 modules (about 40 ms on this machine) and the figures would measure
    the compiler, not slurm-ft; warm-up runs cannot help there."""
    for directory in (REPO / "slurm_ft", WORKERS):
        compileall.compile_dir(directory, quiet=1)


PYTHON_PASS = "python -c pass"


def python_pass(ctx: Context) -> float:
    """Wall time of ``python -c pass`` (this interpreter, the benchmark environment): the
    physical reference of every start-up figure, since nothing written in Python can
    start faster."""
    finished = proc.run([ctx.python, "-c", "pass"], ctx.env(), timeout=30)
    if finished.returncode != 0:
        raise proc.BenchError(f"python -c pass exited {finished.returncode}")
    return finished.wall_s


def repeat(fn: Callable[[], float], runs: int, warmup: int = 1) -> list[float]:
    """Call ``fn`` ``warmup`` times (discarded: page cache), then ``runs`` times."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(runs)]


@dataclass
class Contest:
    """Samples per contender; a contender that failed keeps its error instead."""

    samples: dict[str, list[float]]
    errors: dict[str, str]

    def summary(self, name: str) -> stats.Summary | None:
        values = self.samples.get(name)
        return stats.summarize(values) if values else None

    def error(self, *names: str) -> str | None:
        found = [f"{n}: {self.errors[n]}" for n in names if n in self.errors]
        return "; ".join(found) or None


def interleave(fns: dict[str, Callable[[], float]], runs: int, warmup: int = 1) -> Contest:
    """Alternate the contenders run by run, so drift on a shared machine hits both alike.

    A contender that raises is dropped from later rounds and its error kept, so one broken
    side still leaves the other side's figure (and a visible miss) in the table.
    """
    contest = Contest({name: [] for name in fns}, {})
    for i in range(warmup + runs):
        for name, fn in fns.items():
            if name in contest.errors:
                continue
            try:
                value = fn()
            except Exception as exc:  # any failure of a contender is reported, not fatal
                contest.errors[name] = f"{type(exc).__name__}: {exc}"
                contest.samples[name] = []
                continue
            if i >= warmup:
                contest.samples[name].append(value)
    return contest
