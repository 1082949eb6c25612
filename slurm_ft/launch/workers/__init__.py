"""The node's worker processes: spawning them (process groups, pidfds, parent-death signal),
their environment, one cycle's group of them, and the survivors of a stop."""
