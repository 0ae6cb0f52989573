"""Layer 4: tensor methods over arrays of any namespace (NumPy, torch, CuPy, array API)."""

from .decode import best_paths, expected_hf1_paths, topk_paths
from .groups import SEMANTICS, group_log_softmax, group_logsumexp, n_outputs, node_log_probs, stop_columns
from .dense import flatten_for_training, labels_to_paths, partition_scores

__all__ = ["partition_scores", "labels_to_paths", "flatten_for_training"]
__all__ += ["SEMANTICS", "n_outputs", "stop_columns", "group_logsumexp", "group_log_softmax", "node_log_probs"]
__all__ += ["best_paths", "topk_paths", "expected_hf1_paths"]
