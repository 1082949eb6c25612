"""Figure 9: slurm-ft-logs over one big cycle file, beside ``grep -F`` on the same file.

A 1,024-rank training log as the launcher writes it (1 GB; 128 MB with ``--quick``):
every rank prints the same warnings and a per-step line that is alike across ranks, rank
0 prints the loss, every rank now and then a line of its own; a rank's lines come in short
runs, as the launcher's reads give them (``--per-rank-numbers``: each rank's per-step line
carries its own step time, the hard case for ``--collapse``). Each command reads the whole
file, warm in the page cache, and writes its output to a file (not /dev/null: GNU grep
stops at the first match when its output is /dev/null); the figure is the file size over
the median wall time, the process's start included. ``grep -F`` on the same file is the
physical reference (what a plain C scan costs on this machine at that moment), and each
command's peak memory (max RSS) is reported, which must not grow with the file.

    python -m benchmarks.logs_throughput [--size-mb N] [--runs N] [--dir D] [--per-rank-numbers]
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import cmdline
from benchmarks.harness import Context
from benchmarks.stats import Row, Summary, Target, summarize

FIGURE = 9
WORLD = 1024
TARGET_MB_S = 300.0
WARNINGS = (
    b"/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py:83: UserWarning: "
    b"barrier(): using the device under current context",
    b"/usr/lib/python3/site-packages/torch/utils/data/dataloader.py:617: UserWarning: "
    b"This DataLoader will create 8 worker processes in total",
)
GREP_TEXT = "grad norm clipped"
RANKS = "0,17,100-131"
NOTES = [
    "Figure 9: the machine may be shared; the row's reference (grep -F on the same file, same run) "
    "says how fast a plain C scan was at that moment.",
]


def generate(path: Path, size: int, seed: int = 9, per_rank_numbers: bool = False) -> int:
    """Write a cycle file of about ``size`` bytes; returns the bytes written. With
    ``per_rank_numbers`` each rank's per-step line carries its own step time, so about half
    the lines are distinct (the hard case for ``--collapse``; ``=numbers`` folds them)."""
    rnd = random.Random(seed)
    width = len(str(WORLD - 1))
    prefixes = [f"{r:>{width}}: ".encode() for r in range(WORLD)]
    written = 0
    step = 0
    with open(path, "wb") as fh:
        while written < size:
            out: list[bytes] = []
            order = list(range(WORLD))
            rnd.shuffle(order)
            for r in order:
                p = prefixes[r]
                out.append(p + WARNINGS[step % 2] + b"\n")
                took = f" in {rnd.randrange(180, 420)} ms" if per_rank_numbers else ""
                out.append(p + f"iteration {step} done{took}".encode() + b"\n")
                if r == 0:
                    loss = 4.0 / (1 + step / 500) + rnd.random() * 0.01
                    out.append(p + f"step {step} loss {loss:.4f} lr 3.0e-04 tokens/s 181234".encode() + b"\n")
                if rnd.random() < 0.02:
                    out.append(
                        p + f"grad norm clipped at step {step}: {rnd.random() * 9:.3f}".encode() + b"\n"
                    )
                if step % 50 == 0:
                    out.append(p + f"memory allocated {rnd.randrange(60000, 80000)} MiB".encode() + b"\n")
            block = b"".join(out)
            fh.write(block)
            written += len(block)
            step += 1
    return written


def state_dir(root: Path, log: Path, world: int = WORLD) -> Path:
    """A state dir whose cycle 0 names ``log`` as its one file, as the launcher writes it."""
    from slurm_ft import atomicfile
    from slurm_ft.records import CycleOutcome, CycleRecord, LogFile
    from slurm_ft.statedir import StateDir

    state = StateDir(root / "state")
    rec = CycleRecord(
        cycle=0,
        attempt=0,
        restart=0,
        run_id="bench",
        run_uuid="0" * 32,
        start_time=time.time(),
        nodes=[f"node{k:03d}" for k in range(max(1, world // 8))],
        world_size=world,
        nproc_per_node=min(8, world),
        master_addr="node000",
        master_port=29500,
        outcome=CycleOutcome.SUCCEEDED,
        end_time=time.time(),
        log_files=[LogFile(str(log)).to_json()],
    )
    atomicfile.write_json(state.cycle_record(0), rec.to_json())
    return state.path


def _run_rss(cmd: list[str], env: dict[str, str] | None, out: Path) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system, its children's
    included: ``--collapse`` of a big file runs in two processes) of one run. Output goes
    to a file, not /dev/null: GNU grep stops at the first match when its output is /dev/null (even with -c).

    Only ``grep`` may exit 1 (no match); slurm-ft-logs must exit 0, say nothing on stderr
    and write something: one that could not even import ``slurm_ft`` exits 1 at once with
    a traceback, and timing that reported tens of GB/s."""
    t0 = time.perf_counter()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, env=env)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    check_run(cmd, proc.returncode, err, out.stat().st_size)
    return wall, int(usage.ru_maxrss), usage.ru_utime + usage.ru_stime


def check_run(cmd: list[str], returncode: int, err: bytes, out_size: int) -> None:
    """RuntimeError unless the run is one to time (see :func:`_run_rss`)."""
    is_grep = Path(cmd[0]).name == "grep"
    allowed = (0, 1) if is_grep else (0,)
    said = err.decode(errors="replace")[-500:]
    if returncode not in allowed:
        raise RuntimeError(f"{cmd[0]} failed ({returncode}): {said}")
    if not is_grep and err:
        raise RuntimeError(f"{cmd[0]} wrote to stderr: {said}")
    if not is_grep and out_size == 0:
        raise RuntimeError(f"{cmd[0]} {' '.join(cmd[1:])} wrote nothing")


def commands(tool: str, state: Path, log: Path) -> dict[str, list[str]]:
    base = [tool, "--state-dir", str(state)]
    return {
        "--rank " + RANKS: [*base, "--rank", RANKS],
        f"--grep '{GREP_TEXT}'": [*base, "--grep", GREP_TEXT],
        "--collapse": [*base, "--collapse"],
        "--collapse=numbers": [*base, "--collapse=numbers"],
        f"grep -F '{GREP_TEXT}'": ["grep", "-F", GREP_TEXT, str(log)],
    }


def measure(
    tool: str,
    work: Path,
    size: int,
    runs: int,
    env: dict[str, str] | None,
    per_rank_numbers: bool = False,
) -> tuple[int, dict[str, list[float]], dict[str, int], dict[str, list[float]]]:
    log, out = work / "job_cycle0.log", work / "out"
    written = generate(log, size, per_rank_numbers=per_rank_numbers)
    state = state_dir(work, log)
    cmds = commands(tool, state, log)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    rss: dict[str, int] = {name: 0 for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    try:
        _run_rss(next(iter(cmds.values())), env, out)  # warm the page cache and the bytecode
        for _ in range(runs):
            for name, cmd in cmds.items():  # interleaved: a load spike hits every contender
                wall, peak, used = _run_rss(cmd, env, out)
                walls[name].append(wall)
                rss[name] = max(rss[name], peak)
                cpu[name].append(used)
    finally:
        log.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
    return written, walls, rss, cpu


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def _mb_s(size: int, walls: list[float]) -> Summary:
    return summarize([size / w / 1e6 for w in walls])


def rows(
    size: int, walls: dict[str, list[float]], rss: dict[str, int], cpu: dict[str, list[float]]
) -> list[Row]:
    grep_name = f"grep -F '{GREP_TEXT}'"
    reference = _mb_s(size, walls[grep_name])
    out = []
    for name, samples in walls.items():
        if name == grep_name:
            continue
        targets = [Target("min", TARGET_MB_S)] if name != "--collapse=numbers" else []
        out.append(
            Row(
                FIGURE,
                f"slurm-ft-logs {name} over a {size / 1e9:.2f} GB cycle file",
                "MB/s",
                _mb_s(size, samples),
                targets=targets,
                note=(
                    f"peak RSS {rss[name] / 1024:.0f} MiB (grep -F: {rss[grep_name] / 1024:.0f} MiB); "
                    f"CPU {_median(cpu[name]):.2f} s (grep -F: {_median(cpu[grep_name]):.2f} s)"
                ),
                reference=reference,
                reference_label="grep -F on the same file",
            )
        )
    return out


def run(ctx: Context) -> Iterator[Row]:
    size = (128 if ctx.quick else 1024) * 1_000_000
    work = ctx.scratch("logs")
    written, walls, rss, cpu = measure(ctx.tool("slurm-ft-logs"), work, size, ctx.runs(5, 3), ctx.env())
    yield from rows(written, walls, rss, cpu)


def main() -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=cmdline.positive_int, default=1024)
    parser.add_argument("--runs", type=cmdline.positive_int, default=3)
    parser.add_argument("--dir", default=None, help="where the file is made (default: a temp dir in /tmp)")
    parser.add_argument("--per-rank-numbers", action="store_true", help="the hard case for --collapse")
    args = parser.parse_args()
    tool = str(Path(sys.executable).parent / "slurm-ft-logs")
    with tempfile.TemporaryDirectory(prefix="slurm-ft-bench-logs-", dir=args.dir) as tmp:
        t0 = time.monotonic()
        size = args.size_mb * 1_000_000
        written, walls, rss, cpu = measure(tool, Path(tmp), size, args.runs, None, args.per_rank_numbers)
        print(
            f"file: {written / 1e6:.0f} MB, {args.runs} runs each "
            f"(made and measured in {time.monotonic() - t0:.0f} s)"
        )
        for name, samples in walls.items():
            speeds = sorted(written / w / 1e6 for w in samples)
            median = speeds[len(speeds) // 2]
            print(
                f"{name:36s} median {median:7.0f} MB/s  (min {speeds[0]:.0f}, max {speeds[-1]:.0f})"
                f"  peak RSS {rss[name] / 1024:6.0f} MiB  CPU {_median(cpu[name]):5.2f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
