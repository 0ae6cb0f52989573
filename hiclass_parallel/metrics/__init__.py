"""Hierarchical metrics and scorers (layer 6).

Every metric takes ``y_true`` and ``y_pred`` as labels at any depth (with ``tree``), node
ids, or ancestral paths right-padded with a pad label, as NumPy, lists, torch or CuPy
arrays (moved to the host once). Node identity is the node, never its name. See
``docs/metrics.md``.

- :func:`hierarchical_precision_score`, :func:`hierarchical_recall_score`,
  :func:`hierarchical_f1_score`, :func:`hierarchical_fbeta_score` (Kiritchenko et al.);
- on hierarchies with several parents (:class:`~hiclass_parallel.dag.Dag`), ancestor sets
  through every parent: :func:`hierarchical_precision_score_dag`,
  :func:`hierarchical_recall_score_dag`, :func:`hierarchical_f1_score_dag`,
  :func:`hierarchical_fbeta_score_dag`;
- :func:`level_accuracy_score`, :func:`exact_path_accuracy_score`;
- :func:`tree_distance`, :func:`mean_tree_distance`, :func:`mistake_severity`
  (Bertinetto et al., 2020);
- :func:`hierarchical_classification_report`;
- answers at any depth with a guarantee (``docs/conformal.md``): :func:`coverage_score`,
  :func:`mean_answer_depth`, :func:`leaf_answer_rate`, :func:`label_depth_answer_rate`,
  :func:`conformal_risk` of :func:`miss_loss`, :func:`tree_distance_loss` or a
  :class:`ConformalLoss`, and :func:`conformal_scorers`;
- :func:`expected_calibration_error` of the answers' confidence (``predict_confidence``);
- scorer objects for ``scoring=``: :func:`get_scorer` (the package's scorer names, else
  scikit-learn's), :func:`get_scorers` (a dict of several), :func:`get_scorer_names`,
  :func:`make_hierarchical_scorer`;
- plots in :mod:`hiclass_parallel.metrics.plot` (needs matplotlib).
"""

from ._calibration import expected_calibration_error
from ._conformal import (
    ConformalLoss,
    conformal_risk,
    conformal_scorers,
    coverage_score,
    label_depth_answer_rate,
    leaf_answer_rate,
    mean_answer_depth,
    miss_loss,
    tree_distance_loss,
)
from ._dag import (
    dag_node_set_counts,
    hierarchical_f1_score_dag,
    hierarchical_fbeta_score_dag,
    hierarchical_precision_score_dag,
    hierarchical_recall_score_dag,
)
from ._hierarchical import (
    LevelAccuracy,
    exact_path_accuracy_score,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_precision_score,
    hierarchical_recall_score,
    level_accuracy_score,
    mean_tree_distance,
    mistake_severity,
    tree_distance,
)
from ._paths import check_paths
from ._report import hierarchical_classification_report
from ._scorers import (
    HierarchicalScorer,
    get_scorer,
    get_scorer_names,
    get_scorers,
    make_hierarchical_scorer,
)

__all__ = [
    "ConformalLoss",
    "HierarchicalScorer",
    "LevelAccuracy",
    "check_paths",
    "conformal_risk",
    "conformal_scorers",
    "coverage_score",
    "dag_node_set_counts",
    "exact_path_accuracy_score",
    "expected_calibration_error",
    "get_scorer",
    "get_scorer_names",
    "get_scorers",
    "hierarchical_classification_report",
    "hierarchical_f1_score",
    "hierarchical_f1_score_dag",
    "hierarchical_fbeta_score",
    "hierarchical_fbeta_score_dag",
    "hierarchical_precision_score",
    "hierarchical_precision_score_dag",
    "hierarchical_recall_score",
    "hierarchical_recall_score_dag",
    "label_depth_answer_rate",
    "leaf_answer_rate",
    "level_accuracy_score",
    "make_hierarchical_scorer",
    "mean_answer_depth",
    "mean_tree_distance",
    "miss_loss",
    "mistake_severity",
    "tree_distance",
    "tree_distance_loss",
]
