"""Files of one JSON object a line, appended one whole line per write: node 0's timed
readings and each node's per-cycle records (``StateDir.node_dir``).

An append makes no directory entry, so a record per node and cycle costs the shared file
system no create in a directory that every node writes into (#45). A crash in the middle
of a write leaves a torn last line: readers skip it, never fail on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_ft import atomicfile

Doc = dict[str, Any]


def line(doc: Doc) -> bytes:
    """``doc`` as one line, ready to append in one write."""
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8")


def add(path: Path, doc: Doc) -> None:
    """``doc`` appended as one line (``atomicfile.append_line``; the launcher's own appends
    go through its bounded writer, ``launch.books.stateio``)."""
    atomicfile.append_line(path, line(doc))


def parse(raw: bytes) -> tuple[list[Doc], int]:
    """The objects of a JSON-lines file, and how many lines were not one."""
    docs: list[Doc] = []
    bad = 0
    for text in raw.splitlines():
        if not text.strip():
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            bad += 1
            continue
        if isinstance(doc, dict):
            docs.append(doc)
        else:
            bad += 1
    return docs, bad


def read(path: Path) -> list[Doc]:
    """:func:`parse` of a file; [] when it is missing or unreadable (a reader must never crash)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []
    return parse(raw)[0]
