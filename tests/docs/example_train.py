"""The training of job 4242, the job the docs' examples read: two ranks print a few steps;
rank 1 crashes in cycles 0 to 2, and cycle 3 finishes. Torch-free, a second's work."""

import os

rank = int(os.environ["RANK"])
cycle = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
for step in range(3):
    print(f"rank {rank}: cycle {cycle} step {step} loss {2.5 - 0.1 * step - 0.01 * rank:.3f}", flush=True)
if rank == 1 and cycle < 3:
    raise RuntimeError(f"injected crash in cycle {cycle}")
print(f"rank {rank}: finished", flush=True)
