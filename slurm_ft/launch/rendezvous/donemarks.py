"""Which launchers' words that their workers finished a cycle one connection has read.

A mark once read stays read: a launcher that finished does not unfinish. Asking for every
mark at one moment (one ``check`` naming all of them), an outsider deleting keys faster
than their writers set them again kept node 0 from ever seeing all of them at once, after
the peers had read them and left: the job's end hung. The last few marks are asked one by
one, each at its own moment; more are asked at once, so that a look costs node 0 one
request, not one per launcher (issue #45). This launcher's own mark needs no reading back.
"""

from __future__ import annotations

from collections.abc import Sequence

FEW_MARKS = 8  # unread marks asked for one by one


class DoneMarks:
    def __init__(self) -> None:
        self._cycle = -1
        self._read: set[int] = set()
        self.own_in = -1  # the last cycle this launcher's workers all finished in

    def _of(self, i: int) -> set[int]:
        if self._cycle != i:
            self._cycle, self._read = i, set()
        return self._read

    def own(self, i: int, node: int) -> None:
        self.own_in = i
        self._of(i).add(node)

    def to_ask(self, i: int, launchers: Sequence[int]) -> list[list[int]]:
        """The launchers whose marks to look at, in groups of one request each."""
        unread = [n for n in launchers if n not in self._of(i)]
        return [[n] for n in unread] if len(unread) <= FEW_MARKS else [unread] if unread else []

    def saw(self, i: int, launchers: Sequence[int], marks: Sequence[bool | None]) -> None:
        """What one look read: each launcher's sealed mark, or None (missing or forged)."""
        self._of(i).update(n for n, ok in zip(launchers, marks, strict=True) if ok)

    def all_read(self, i: int, launchers: Sequence[int]) -> bool:
        seen = self._of(i)
        return all(n in seen for n in launchers)
