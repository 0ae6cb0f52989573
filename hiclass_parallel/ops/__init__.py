"""Layer 2: tensor methods over arrays of any namespace (NumPy, torch, CuPy, array API)."""

from .paper import flatten_for_training, labels_to_paths, partition_scores

__all__ = ["partition_scores", "labels_to_paths", "flatten_for_training"]
