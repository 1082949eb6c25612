"""The launch-overhead worker: say it ran and exit, so only the launcher is timed."""

import os

directory = os.environ.get("BENCH_STAMPS")
if directory:
    open(os.path.join(directory, f"ran-r{os.environ['RANK']}"), "w").close()
print(f"rank {os.environ.get('RANK', '?')} ok", flush=True)
