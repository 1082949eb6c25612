"""The timed readings files read back (``progress/readings.jsonl``,
``progress/snapshot-readings.jsonl``; written line by line by ``records.append_reading``).

Both the report (every line) and node 0's no-progress guard (the last line of node rank
0's snapshot readings) read them; a line comes from a shared file that another host
appends to, so nothing in it is trusted, and a torn last line (a writer killed mid-write)
is skipped, never an error.
"""

from __future__ import annotations

import json

from slurm_ft.records import ProgressReading


def reading_from_line(line: str) -> ProgressReading | None:
    """One line as a reading; None when it is not one."""
    try:
        doc = json.loads(line)
        when, step, mark = doc["time"], doc["step"], doc.get("mark")
    except (ValueError, TypeError, KeyError):
        return None
    timed = isinstance(when, (int, float)) and not isinstance(when, bool)
    counted = isinstance(step, int) and not isinstance(step, bool)
    if timed and counted and (mark is None or isinstance(mark, str)):
        return ProgressReading(float(when), step, mark)
    return None


def last_reading(tail: bytes) -> ProgressReading | None:
    """The last whole reading in the end of a readings file (its first line may be cut)."""
    lines = reversed(tail.decode("utf-8", errors="replace").splitlines())
    return next((r for r in map(reading_from_line, lines) if r is not None), None)
