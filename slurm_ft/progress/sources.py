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
tests. The syntax of a source (``KIND:PATH``, the pattern) is a setting's, checked when the
settings load: :func:`slurm_ft.settingsyntax.parse_progress_source`. Nothing here ever
writes to a source.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ft.progress import looking
from slurm_ft.settingsyntax import SourceSpec


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
