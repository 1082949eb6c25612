"""Side-by-side measurements of slurm-ft against torchrun (``python -m benchmarks``)."""
