"""Worker scripts the benchmarks start under each launcher (run as files, not imported)."""
