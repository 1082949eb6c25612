"""Where the workers' output goes: the per-cycle application log, line framing, stream
specs, and the launcher's own event log."""
