"""The launcher's cycle loop and what it calls on the way: :mod:`agent` (the loop over the
phases, read top to bottom), :mod:`lifetime` (a launcher's start, its one way out and its
cleanup), :mod:`roles` (the steps that differ by role: node 0 opens the store, a peer
reaches it; how a last cycle ends) and :mod:`snapshotting` (the loop's steps for the
snapshots between nodes, imported only by a job that snapshots). The roles the loop
drives (``member``, ``coordinator``) and the loss of the store host stay beside this
package: they are the protocol, the loop only sequences them."""
