"""``MultiLabelHierarchicalClassifier``: several labels per sample, on trees and on DAGs.

One network over the whole hierarchy, as :class:`HierarchicalClassifier`, with two
generalisations:

- the hierarchy may be a :class:`~hiclass_parallel.dag.Dag` (classes with several parents): it
  is unrolled once into a tree of node copies (:meth:`Dag.unroll <hiclass_parallel.dag.Dag.unroll>`)
  and a label's probability is the sum over its copies' path probabilities
  (:class:`~hiclass_parallel.losses.DagCrossEntropy`);
- a sample may have several labels (at any depth): each labelled path is a training target,
  the sample's row is used once per label, and the loss is the mean over (sample, label)
  pairs of ``-log P(label)``. Under the sibling partition the answer probabilities form one
  distribution per sample, so a sample with two labels teaches the model to split its mass
  between them; :meth:`predict` reads label sets off these probabilities with ``threshold``
  and ``top_k``.

The only partition is ``"sibling"``: it makes the path probabilities of all nodes one proper
distribution (with stops) whose copies' probabilities add up, which the level partition does
not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..dag import Dag, UnrolledDag
from ..labels._sets import write_label_sets
from ..metrics import hierarchical_f1_score_dag
from ..ops.groups import node_log_probs
from ..tree import Tree
from ._checks import check_decidable
from .classifier import HierarchicalClassifier
from .fitting import LabelSetTargets

__all__ = ["MultiLabelHierarchicalClassifier"]


class MultiLabelHierarchicalClassifier(HierarchicalClassifier):
    """Hierarchical classification with several labels per sample, on a tree or a DAG.

    Takes the parameters of :class:`HierarchicalClassifier` (module, optimizer, epochs,
    early stopping, device, ``module__*``...), with these differences:

    Parameters
    ----------
    tree : Tree or Dag
        The hierarchy (required). A :class:`~hiclass_parallel.dag.Dag` is unrolled into a
        tree with one copy of a class per ancestral path (``unrolled_``); a label then counts
        as predicted whichever of its paths the model takes.
    partition : {"auto", "sibling"}, default="auto"
        Always the sibling partition (see the module notes); ``"level"`` is refused.
    threshold : float, default=0.5
        :meth:`predict` returns the labels whose probability (:meth:`predict_proba`) is at
        least ``threshold``, at most ``top_k`` of them, and always the most probable one.
        Lower it to predict more labels per sample.
    top_k : int, default=5
        The most labels :meth:`predict` returns for one sample.
    semantics : {"partial", "terminal"}, default="partial"
        ``"terminal"``: a label is an answer and :meth:`predict_proba` gives each class's
        probability of being one. ``"partial"``: a label says the sample lies under the
        class; :meth:`predict_proba` gives each class's probability that the sample lies
        under it (through any parent, so a parent's is at least its child's), and
        :meth:`predict` keeps only the deepest classes at the threshold (none of whose
        descendants reaches it), so no answer holds a label and one of its ancestors.
    calibration : {"auto"} or None, default="auto"
        Nothing is calibrated here (a set of labels has no one answer whose probability a
        map could correct): ``"auto"`` and ``None`` both train on every row, and
        ``calibration="beta"`` is refused. ``answer_.calibrator`` is ``None`` and there is no
        ``predict_confidence``.
    prototypes : "auto", float or None, default="auto"
        Not used here (class prototypes re-rank one answer per sample; a set of labels is
        thresholded instead): ``answer_`` holds no term.
    class_weight : dict, "balanced" or None, default=None
        As in :class:`HierarchicalClassifier`, over the (sample, label) training pairs: a
        pair's weight is its row's ``sample_weight`` times its label's class weight, and
        ``"balanced"`` counts the pairs of each label.
    **kwargs
        Every other parameter of :class:`HierarchicalClassifier`.

    Attributes
    ----------
    hierarchy_ : Dag
        The hierarchy as a DAG (a tree given as ``tree`` becomes a DAG with one parent each).
    unrolled_ : UnrolledDag
        The hierarchy unrolled into ``tree_`` (the tree the network scores).
    tree_ : Tree
        The unrolled tree; its node ids are the copies.
    classes_ : ndarray of shape (n_classes,)
        The hierarchy's labels: the columns of :meth:`predict_proba` and of indicator outputs.
    label_form_ : {"labels", "sets", "indicator", "sparse"}
        The form ``y`` had in :meth:`fit`, which :meth:`predict` answers in.
    n_pairs_ : int
        Number of (sample, label) training pairs in the last fit.
    net_ : skorch.NeuralNet
        The fitted net.

    See Also
    --------
    HierarchicalClassifier : one label per sample on a tree, predicted as an ancestral path.
    hiclass_parallel.metrics.hierarchical_f1_score_dag : hF1 for DAGs and label sets.

    Notes
    -----
    ``y`` may be a list of label lists (one list per sample, labels at any depth, empty lists
    allowed), a 1-D array of single labels, or a 0/1 indicator matrix (dense or scipy sparse;
    ``MultiLabelBinarizer(classes=clf.tree.labels)`` makes one) with one column per class of
    the hierarchy in node id order. :meth:`predict` returns the same form: an object array
    of label tuples for label lists and single labels, an indicator matrix of the same kind
    for indicator input.

    In model selection (``GridSearchCV``, ``cross_validate``) give ``y`` as an indicator
    matrix, or pass ``cv=KFold(...)``: scikit-learn's default splitter for classifiers reads
    ``y`` with ``type_of_target``, which refuses lists of label lists.

    The methods inherited from :class:`HierarchicalClassifier` that return paths
    (``predict_top_k``, ``predict_node``, ``decision_function``) work on the unrolled tree
    ``tree_``; label paths come back in the hierarchy's labels (one path through the DAG).

    Examples
    --------
    >>> import numpy as np
    >>> from hiclass_parallel.dag import Dag
    >>> from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier
    >>> dag = Dag.from_edges([("dog", "pet"), ("dog", "canine"), ("cat", "pet"), ("wolf", "canine")])
    >>> rng = np.random.default_rng(0)
    >>> X = np.repeat(np.eye(3), 40, axis=0) + 0.1 * rng.standard_normal((120, 3))
    >>> y = [["dog"]] * 40 + [["cat", "wolf"]] * 40 + [["pet"]] * 40
    >>> clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", threshold=0.3,
    ...                                        max_epochs=60, random_state=0).fit(X, y)
    >>> clf.predict(np.eye(3)).tolist()
    [('dog',), ('cat', 'wolf'), ('pet',)]
    >>> clf.predict_proba(np.eye(3)).shape  # dog, pet, canine, cat, wolf
    (3, 5)
    """

    _targets = LabelSetTargets  # label sets on a tree or a DAG, unrolled once

    _parameter_constraints: dict = {
        **HierarchicalClassifier._parameter_constraints,
        "tree": [Tree, Dag, UnrolledDag],
        "partition": [StrOptions({"auto", "sibling"})],
        "calibration": [StrOptions({"auto"}), None],
    }

    _calibrates = False  # label sets: no single answer's probability to calibrate
    _reranks = False  # label sets: no single answer for class prototypes to re-rank

    # ------------------------------------------------------------------ prediction
    def _node_labels(self) -> np.ndarray:
        """Original labels of the unrolled tree's nodes: paths come back through the DAG."""
        return self.hierarchy_.labels[self.unrolled_.origin]

    def _node_proba(self, scores: torch.Tensor) -> torch.Tensor:
        """``(B, n_classes)`` probabilities of the hierarchy's classes from the unrolled scores.

        Terminal: each copy's probability of being the answer (``node_log_probs``), summed
        over a class's copies. Partial: the probability that the path lies under the class,
        summed over the copies where a path enters it (:meth:`UnrolledDag.entries`): a copy
        of a descendant reached through another parent counts too, since a ``d`` that is a
        ``b`` and a ``c`` lies under both whichever path the model takes. Summing only the
        class's own copies would leave out those paths and break ``P(parent) >= P(child)``."""
        kwargs = self._decode_kwargs()
        proba = torch.exp(node_log_probs(scores, self.tree_, **kwargs))
        if self.semantics == "partial":
            copy, node = self.unrolled_.entries()
            # torch.tensor copies: the unrolled arrays are read-only, which torch.as_tensor warns of
            proba = proba.index_select(1, torch.tensor(copy, device=scores.device))
        else:
            node = self.unrolled_.origin
        node_t = torch.tensor(node, device=scores.device)  # a copy: the unrolled arrays are read-only
        out = torch.zeros(scores.shape[0], self.hierarchy_.n_nodes, dtype=proba.dtype, device=proba.device)
        return out.index_add_(1, node_t, proba)

    def _select(self, proba: torch.Tensor) -> torch.Tensor:
        """``(B, k)`` node ids of each row's predicted labels, best first, ``-1`` pads.

        The ``top_k`` most probable candidates at ``threshold`` and always the best one;
        under partial semantics the candidates are the classes at the threshold none of whose
        descendants (through any parent) is, so an ancestor of a predicted label is implied,
        not repeated: no answer holds a label and one of its ancestors."""
        k = min(int(self.top_k), proba.shape[1])
        candidate = proba
        if self.semantics == "partial":
            covered = self._has_descendant_at_threshold(proba)
            candidate = torch.where(covered, torch.full_like(proba, -1.0), proba)  # below any threshold
        value, node = torch.topk(torch.nan_to_num(candidate, nan=-1.0), k, dim=1)
        keep = value >= self.threshold
        best = torch.nan_to_num(proba, nan=-1.0).argmax(1)
        node[:, 0] = torch.where(keep[:, 0], node[:, 0], best)
        keep[:, 0] = True
        keep &= ~torch.isnan(proba).any(1, keepdim=True)  # NaN/+inf scores: no label
        return torch.where(keep, node, torch.full_like(node, -1))

    def _has_descendant_at_threshold(self, proba: torch.Tensor) -> torch.Tensor:
        """``(B, n_classes)`` bool: some strict descendant of the class reaches ``threshold``.

        Descendants, not children: probabilities that are not monotone (a model of one's own,
        rounding) must not let a class and its grandchild both be answers. One pass over the
        DAG's edges per level, as many as the longest path (no loop over samples or nodes)."""
        child, parent = self.hierarchy_.edges()
        if not child.size:
            return torch.zeros_like(proba, dtype=torch.bool)
        child_t = torch.tensor(child, device=proba.device)  # copies: the DAG's arrays are read-only
        parent_t = torch.tensor(parent, device=proba.device)
        above = proba >= self.threshold  # NaN is never at the threshold

        def any_child(flags: torch.Tensor) -> torch.Tensor:
            counts = torch.zeros(flags.shape, dtype=torch.int32, device=flags.device)
            return counts.index_add_(1, parent_t, flags.index_select(1, child_t).to(torch.int32)) > 0

        reach = above  # the class or a descendant within the levels walked so far
        for _ in range(int(self.hierarchy_.depth.max()) - 1):
            reach = above | any_child(reach)
        return any_child(reach)

    def _predict_indicator(self, X: Any) -> sp.csr_matrix:
        (chosen,) = self._per_batch(X, lambda s: self._select(self._node_proba(s)))
        n_bad = int((chosen[:, 0] < 0).sum())
        check_decidable(n_bad, chosen.shape[0], self.net_.lr)
        rows, slots = np.nonzero(chosen >= 0)
        indicator = sp.csr_matrix(
            (np.ones(rows.size, dtype=bool), (rows, chosen[rows, slots])),
            shape=(chosen.shape[0], self.hierarchy_.n_nodes),
        )
        indicator.sort_indices()
        return indicator

    def predict(self, X: Any) -> Any:
        """Predict a set of labels per sample, in the form ``y`` had in :meth:`fit`.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of tuples, ndarray of shape (n_samples, n_classes), or sparse matrix
            For label lists (or single labels) in ``fit``: an object array with one tuple of
            labels per sample (in ``classes_`` order); for an indicator matrix: an int64
            indicator of the same kind (dense or CSR) with columns in ``classes_`` order.
            A row with NaN or infinite scores gets no label (a warning says so).
        """
        check_is_fitted(self)
        return write_label_sets(self._predict_indicator(X), self.label_form_, self.classes_)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probability of each class of the hierarchy, summed over its paths.

        Under ``semantics="terminal"``: the probability that the class is an answer (each
        row sums to 1 over the classes); a class of a DAG adds the probabilities of its
        copies (disjoint events). Under ``"partial"``: the probability that the sample lies
        under the class, i.e. that its path in the unrolled tree passes through a copy of
        the class or of any of its descendants (:meth:`UnrolledDag.entries
        <hiclass_parallel.dag.UnrolledDag.entries>`): an ancestor's is at least its
        descendants' through every parent, and the top-level classes' sum to 1 when the
        hierarchy is a tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of float32 of shape (n_samples, n_classes)
            Columns follow ``classes_``. Dense: for very large hierarchies prefer
            :meth:`predict`, which keeps only the chosen labels per mini-batch.
        """
        check_is_fitted(self)
        return self._per_batch(X, self._node_proba)[0]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log of :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of float32 of shape (n_samples, n_classes)
        """
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Hierarchical F1 (micro) of :meth:`predict` against ``y``, ancestors through every parent.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : list of label lists, array-like of labels, or indicator matrix
            True labels, in any form :meth:`fit` takes.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
            :func:`~hiclass_parallel.metrics.hierarchical_f1_score_dag` of the label sets
            (each sample's node set is the union of its labels' ancestor sets).
        """
        check_is_fitted(self)
        pred = self._predict_indicator(X)
        return float(hierarchical_f1_score_dag(y, pred, self.hierarchy_, sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        tags.target_tags.multi_output = True
        return tags
