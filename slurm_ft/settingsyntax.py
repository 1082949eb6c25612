"""The syntax of setting strings: std specs, section timeouts, signal lists, the applog
prefix rule, port ranges, progress sources, preload lists (pure, stdlib only).

``config`` checks every setting when it loads and the launcher parses the same strings
when it runs; both read the rules here, so ``config`` never imports the launcher and the
two can never disagree. A leaf module: it imports nothing of slurm_ft and nothing heavier
than ``re``, since every command loads it at start-up through ``config``.

Each parser raises ``ValueError`` (or a subclass) naming the bad text; the caller adds
which setting or option it came from.
"""

from __future__ import annotations

import enum
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# ------------------------------------------------------------------ std specs (torchrun)


class Std(enum.IntFlag):
    """torchrun's stream selector: 0 none, 1 stdout, 2 stderr, 3 both."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3


_SPEC_RE = re.compile(r"[0-3]|[0-9]+:[0-3](,[0-9]+:[0-3])*")


class StdSpecError(ValueError):
    pass


@dataclass(frozen=True)
class StdSpec:
    """``3`` (every local rank) or ``0:1,1:2`` (per local rank, the rest none)."""

    default: Std = Std.NONE
    per_rank: Mapping[int, Std] | None = None

    def of(self, local_rank: int) -> Std:
        if self.per_rank is None:
            return self.default
        return self.per_rank.get(local_rank, Std.NONE)

    @property
    def any(self) -> bool:
        if self.per_rank is None:
            return self.default != Std.NONE
        return any(v != Std.NONE for v in self.per_rank.values())


def looks_like_spec(text: str) -> bool:
    """Whether ``text`` is a std spec: torchrun's ``--redirects 3 train.py`` tells the
    option's value from the script by it."""
    return _SPEC_RE.fullmatch(text) is not None


def parse_std(text: str, what: str = "--redirects") -> StdSpec:
    """``--redirects``/``--tee`` (``applog.redirects``/``applog.tee_streams``) values."""
    text = text.strip()
    if not looks_like_spec(text):
        raise StdSpecError(
            f"{what} {text!r}: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) "
            "or LOCAL_RANK:0-3 pairs such as 0:1,1:2"
        )
    if ":" not in text:
        return StdSpec(Std(int(text)))
    per_rank: dict[int, Std] = {}
    for item in text.split(","):
        rank_s, value = item.split(":")
        rank = int(rank_s)
        if rank in per_rank:
            raise StdSpecError(f"{what} {text!r}: local rank {rank} is given twice")
        per_rank[rank] = Std(int(value))
    return StdSpec(Std.NONE, per_rank)


# ------------------------------------------------------------------ hang settings


def parse_section_timeouts(entries: Iterable[str]) -> dict[str, float]:
    """``["checkpointing=600", "step=30"]`` -> {name: seconds}; ValueError names the entry."""
    out: dict[str, float] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        name = name.strip()
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not name or seconds <= 0:
            raise ValueError(f"expected name=SECONDS with SECONDS > 0, got {entry!r}")
        out[name] = seconds
    return out


def parse_signals(names: Iterable[str]) -> list[signal.Signals]:
    """``["SIGTERM", "usr1", "10"]`` -> signals; ValueError names the bad entry. Signals
    that cannot be caught or forwarded (KILL, STOP, CHLD) are refused."""
    out: list[signal.Signals] = []
    for raw in names:
        text = raw.strip().upper()
        if not text:
            continue
        try:
            sig = (
                signal.Signals(int(text))
                if text.isdigit()
                else signal.Signals[text if text.startswith("SIG") else "SIG" + text]
            )
        except (KeyError, ValueError):
            raise ValueError(f"unknown signal {raw!r}") from None
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            raise ValueError(f"signal {sig.name} cannot be forwarded")
        out.append(sig)
    return out


# ------------------------------------------------------------------ paths and ports


def check_applog_prefix(prefix: str) -> None:
    """The rule for a cycle-log prefix, checked with the settings: every node and every
    requeue must name the same file whatever its working directory."""
    if not prefix:
        raise ValueError("is empty; give an absolute path such as /scratch/logs/job.log")
    if not prefix.startswith("/"):
        raise ValueError(f"must be an absolute path, got {prefix!r}")
    if prefix.endswith("/"):
        raise ValueError(f"names a directory, add a file name: {prefix!r}")


def parse_port_range(text: str) -> tuple[int, int]:
    """``"20000-29999"`` -> (20000, 29999); unprivileged ports only, low <= high."""
    lo_s, sep, hi_s = text.partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise ValueError(f"expected LOW-HIGH, got {text!r}") from None
    if not sep or not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"expected LOW-HIGH within 1024-65535, got {text!r}")
    return lo, hi


# ------------------------------------------------------------------ progress sources

# The kinds of ``progress.source`` (what each means: slurm_ft.progress.sources). The bounded
# child that looks at a source, progress/looking.py, runs as ``python -I -S`` and imports
# nothing of slurm_ft, so it spells them again; a test keeps the two spellings equal.
ITERATION_FILE = "iteration-file"
CHECKPOINT_DIR = "checkpoint-dir"
FILE = "file"
PROGRESS_KINDS = (ITERATION_FILE, CHECKPOINT_DIR, FILE)


class SourceError(ValueError):
    """A source or pattern that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class SourceSpec:
    """A configured progress source, parsed: its kind, its path, the pattern of a ``log:`` source."""

    kind: str
    path: str
    pattern: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.path}"


def parse_progress_source(text: str, pattern: str | None = None) -> SourceSpec:
    """``KIND:PATH`` -> SourceSpec; SourceError for an unknown kind, an empty path, a bad pattern."""
    kind, sep, path = text.partition(":")
    if not sep or kind not in PROGRESS_KINDS:
        raise SourceError(f"expected KIND:PATH with KIND one of {', '.join(PROGRESS_KINDS)}, got {text!r}")
    if not path:
        raise SourceError(f"{kind}: the path is empty")
    if pattern is not None:
        if kind != CHECKPOINT_DIR:
            raise SourceError(f"a progress pattern applies only to {CHECKPOINT_DIR}: sources, not {kind}:")
        compile_progress_pattern(pattern)
    return SourceSpec(kind, path, pattern)


def compile_progress_pattern(pattern: str) -> re.Pattern[str]:
    """A ``progress.pattern``: a regular expression with exactly one group (the step)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SourceError(f"progress pattern {pattern!r} is not a valid regular expression ({exc})") from None
    if compiled.groups != 1:
        raise SourceError(f"progress pattern {pattern!r} must have exactly one group (the step)")
    return compiled


# ------------------------------------------------------------------ preload lists (standbys)

_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def parse_preload(text: str) -> str:
    """``auto``, ``none`` or a comma-separated list of module names, normalised (no spaces):
    what a standby worker imports before it is needed."""
    words = [w.strip() for w in text.split(",")]
    if len(words) == 1 and words[0].lower() in ("auto", "none"):
        return words[0].lower()
    bad = [w for w in words if not _MODULE_RE.fullmatch(w)]
    if bad or not words:
        raise ValueError(f"expected auto, none or module names separated by commas, got {text!r}")
    return ",".join(words)


# ------------------------------------------------------------------ snapshots

SNAPSHOT_MEMORY_AUTO = "auto"
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from ``512M``, ``16G``, ``1.5GiB``, ``4096`` (binary units, as ``/dev/shm`` is sized)."""
    match = _SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"expected a size such as 512M, 16G or 4096 (bytes), got {text!r}")
    unit = (match.group(2) or "").upper()[:1]
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_snapshot_memory(text: str) -> int | None:
    """``--snapshot-memory``: bytes per node, or None for ``auto`` (derived from the node's
    memory at start); 0 turns snapshots off."""
    if text.strip().lower() == SNAPSHOT_MEMORY_AUTO:
        return None
    return parse_size(text)


_HOOK_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*")


def parse_persist_hook(text: str) -> tuple[str, str]:
    """``--snapshot-persist-hook module:function`` as (module, function)."""
    if not _HOOK_RE.fullmatch(text.strip()):
        raise ValueError(f"expected module:function, got {text!r}")
    module, function = text.strip().split(":")
    return module, function
