"""The launcher's cycle loop and what it calls on the way: :mod:`agent` (the loop, read top
to bottom), :mod:`lifetime` (a launcher's start, its one way out and its cleanup) and
:mod:`snapshotting` (the loop's steps for the snapshots between nodes)."""
