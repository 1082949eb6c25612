"""Where this cycle's log files are written from: on a local disk by the reader threads
themselves, off local disks through one scribe child (``scribed.py``), started with the
first such file, so a dead mount stalls the child and never a reader."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.launch.output.cyclefile import AppLogStats, CycleFile
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.rankstream import RankFile
from slurm_ft.launch.output.scribed import ScribedFile, on_child_event

if TYPE_CHECKING:
    from slurm_ft.scribe import Scribe

DEFAULT_STALL_AFTER = 10.0


class LogFiles:
    """Opens the cycle file and the per-rank files; ``scribe`` None: through the scribe
    for files off local disks (``slurm_ft.health.storage.off_local_disk``). ``stall_after``:
    a write of the child unfinished for this long means its mount stopped answering."""

    def __init__(self, events: EventLog, stats: AppLogStats, scribe: bool | None, stall_after: float) -> None:
        self.events = events
        self.stats = stats
        self.stall_after = stall_after
        self._use_scribe = scribe
        self._scribe: Scribe | None = None
        self._scribed: dict[int, ScribedFile] = {}

    def cycle_file(self, path: Path | None) -> CycleFile | ScribedFile:
        if path is not None and self._needs_scribe(path):
            return self._scribed_file(path, raw=False)
        return CycleFile(path, self.stats, self.events)

    def rank_file(self, path: Path) -> RankFile | ScribedFile:
        return (
            self._scribed_file(path, raw=True)
            if self._needs_scribe(path.parent)
            else RankFile(path, self.events)
        )

    def _needs_scribe(self, path: Path) -> bool:
        if self._use_scribe is not None:
            return self._use_scribe
        from slurm_ft.health.storage import off_local_disk

        return off_local_disk(path.parent)

    def _scribed_file(self, path: Path, *, raw: bool) -> ScribedFile:
        """A file written by this cycle's scribe child, started with the first such file."""
        if self._scribe is None:
            from slurm_ft.scribe import Scribe

            self._scribe = Scribe(
                "applog", stall_after=self.stall_after, on_event=on_child_event(self.events, self._scribed)
            )
        f = ScribedFile(self._scribe, len(self._scribed), path, self.events, raw=raw)
        self._scribed[f.slot] = f
        return f

    def settle(self, cycle_file: CycleFile | ScribedFile) -> None:
        """Let the scribe write what it holds (within ``stall_after``; at once when it has
        stopped answering), then count: what it never wrote is lost."""
        if self._scribe is None:
            return
        self._scribe.close(0.0 if self._scribe.stalled() else self.stall_after)
        if isinstance(cycle_file, ScribedFile):
            written_bytes, written_lines, lost_bytes, lost_lines = cycle_file.lost()
            self.stats.bytes += written_bytes
            self.stats.lines += written_lines
            self.stats.lost_bytes += lost_bytes
            self.stats.lost_lines += lost_lines
