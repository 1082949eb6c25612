"""slurm-ft: Slurm-native fault tolerance for PyTorch training."""

__version__ = "0.1.0"
