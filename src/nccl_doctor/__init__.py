"""nccl-doctor: finds out why a distributed PyTorch job's communication fails."""

__version__ = "0.1.0"
