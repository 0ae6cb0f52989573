"""Reading labels: every form of ``y`` the package accepts, turned into node ids in one place.

- ``_paths``: labels at any depth and label paths (padded or ragged), the pad rules and the
  "not a class of the tree" error, for the estimators and the metrics alike;
- ``_unknown``: labels holding classes the tree lacks, read for scoring as their paths say
  (node ids that go on past the tree);
- ``_pad``: ragged label paths right-padded into one array, for scikit-learn's model selection;
- ``_sets``: several labels per sample (label lists, label sets, indicator matrices), for the
  multi-label classifier and the DAG metrics.
"""
