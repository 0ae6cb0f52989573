"""hiclass_parallel: hierarchical classification in parallel.

Layers, each using only those above it:

1. :mod:`~hiclass_parallel.tree` -- :class:`Tree`, the class tree encoded once as arrays;
2. :mod:`~hiclass_parallel.ops` -- tensor methods on NumPy, torch and CuPy arrays;
3. :mod:`~hiclass_parallel.losses` -- torch criteria;
4. :mod:`~hiclass_parallel.estimators` -- the path transformer and the classifier;
5. :mod:`~hiclass_parallel.metrics` -- hierarchical metrics and scorers;
6. :mod:`~hiclass_parallel.datasets` -- synthetic data and WordNet 3.0;
7. :mod:`~hiclass_parallel.cli` -- the ``hiclass-parallel`` command.
"""

from .exceptions import TreeError, UnknownLabelError
from .ops import flatten_for_training, labels_to_paths, partition_scores
from .ops import best_paths, group_log_softmax, n_outputs, node_log_probs, topk_paths
from .tree import PAD, PARTITIONS, Tree
from .estimators import PathEncoder

from . import metrics
from .metrics import (
    hierarchical_classification_report,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_precision_score,
    hierarchical_recall_score,
)

__version__ = "0.1.0"

__all__ = [
    "PAD",
    "PARTITIONS",
    "Tree",
    "TreeError",
    "UnknownLabelError",
    "partition_scores",
    "labels_to_paths",
    "flatten_for_training",
    "n_outputs",
    "group_log_softmax",
    "node_log_probs",
    "best_paths",
    "topk_paths",
    "HierarchicalCrossEntropy",
    "PathEncoder",
    "HierarchicalClassifier",
    "metrics",
    "hierarchical_precision_score",
    "hierarchical_recall_score",
    "hierarchical_f1_score",
    "hierarchical_fbeta_score",
    "hierarchical_classification_report",
]


def __getattr__(name: str):
    # torch and skorch load on first use of the classifier, not on `import hiclass_parallel`.
    if name == "HierarchicalClassifier":
        from .estimators.classifier import HierarchicalClassifier

        return HierarchicalClassifier
    if name == "HierarchicalCrossEntropy":
        from .losses import HierarchicalCrossEntropy

        return HierarchicalCrossEntropy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
