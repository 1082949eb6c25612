"""Progress sources: where the trainer's own checkpoints say how far it got.

Three kinds, named ``KIND:PATH`` (``--progress-source``, ``progress.source``):

``iteration-file:PATH``
    One integer (or Megatron's ``release``) in a small text file, Megatron's
    ``latest_checkpointed_iteration.txt``. Trainers rewrite it in place, so one look can
    see an empty file or a prefix of the new number; a torn value is always smaller than
    the one being written, which is why a reading that counts against the job is
    confirmed by several looks (see ``tracker``).

``checkpoint-dir:DIR``
    The highest step among the complete entries of DIR whose names carry one. Built-in
    name conventions (full-name matches; an optional file extension is allowed):
    ``iter_0001200`` (Megatron), ``checkpoint-1200`` (Hugging Face Trainer),
    ``global_step1200`` (DeepSpeed), ``step_1200`` / ``step=1200`` / ``step-1200`` /
    ``step1200``, ``epoch=3-step=1200.ckpt`` (Lightning, also ``-v1`` versions) and plain
    integers (``1200``). A pattern (``--progress-pattern``) with one group replaces them.
    How completion is told (an incomplete entry never counts):

    * temporary names never count: a leading ``.`` or ``tmp``, ``.tmp`` anywhere after the
      first character, or an ending ``.partial``, ``.part``, ``.incomplete``, ``-tmp``;
    * an empty directory or an empty file does not count;
    * a directory holding torch.distributed.checkpoint data files (``*.distcp``) counts
      only once its ``.metadata`` exists: the writer renames it into place after every
      rank has written its data;
    * when DIR holds DeepSpeed's ``latest`` (the tag of the last complete save, written
      after every rank saved), ``global_stepN`` counts only up to that tag;
    * when DIR holds Megatron's ``latest_checkpointed_iteration.txt`` (written after the
      save), ``iter_N`` counts only up to the iteration it names.

``file:PATH``
    A single checkpoint overwritten in place (``torch.save(snapshot, "snapshot.pt")``).
    Its identity is inode, size, nanosecond mtime and a CRC of its first and last 64 KiB;
    a new identity since the cycle started is progress, counted as one step.

The looking itself lives in :mod:`slurm_ft.progress.looking`, the script the launcher runs
as a bounded child; :func:`look` here is the same look in-process, without a bound, for
tests. Nothing here ever writes to a source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_ft.progress import looking
from slurm_ft.progress.looking import CHECKPOINT_DIR, FILE, ITERATION_FILE

KINDS = (ITERATION_FILE, CHECKPOINT_DIR, FILE)
__all__ = ["CHECKPOINT_DIR", "FILE", "ITERATION_FILE", "KINDS", "Look", "SourceError", "SourceSpec", "look"]


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


def parse_source(text: str, pattern: str | None = None) -> SourceSpec:
    """``KIND:PATH`` -> SourceSpec; SourceError for an unknown kind, an empty path, a bad pattern."""
    kind, sep, path = text.partition(":")
    if not sep or kind not in KINDS:
        raise SourceError(f"expected KIND:PATH with KIND one of {', '.join(KINDS)}, got {text!r}")
    if not path:
        raise SourceError(f"{kind}: the path is empty")
    if pattern is not None:
        if kind != CHECKPOINT_DIR:
            raise SourceError(f"a progress pattern applies only to {CHECKPOINT_DIR}: sources, not {kind}:")
        compile_pattern(pattern)
    return SourceSpec(kind, path, pattern)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SourceError(f"progress pattern {pattern!r} is not a valid regular expression ({exc})") from None
    if compiled.groups != 1:
        raise SourceError(f"progress pattern {pattern!r} must have exactly one group (the step)")
    return compiled


@dataclass(frozen=True)
class Look:
    """One look at a source.

    ``present``: the path exists. ``step``: the highest complete step (0 when absent or
    when ``problem`` is set). ``mark``: the identity of what was read, compared between
    looks (and, for ``file:``, the progress itself). ``entry``: the name that gave the
    step. ``problem``: why this look cannot be trusted (unparsable, unreadable, changing).
    """

    present: bool
    step: int = 0
    mark: str | None = None
    entry: str | None = None
    problem: str | None = None


def look(spec: SourceSpec) -> Look:
    """One look in this process, without a bound: for tests and tools, never the launcher."""
    return Look(*looking.look(spec.kind, spec.path, spec.pattern))
