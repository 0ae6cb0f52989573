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
from sklearn.utils.validation import check_consistent_length, check_is_fitted

from .._label_sets import read_label_sets, write_label_sets
from .._labels import default_pad_label
from ..dag import Dag, UnrolledDag
from ..tree import Tree
from ._data import TreeDataset
from ._guards import suggest_terminal, warn_undecidable
from .classifier import LEVEL_CONTRAST, HierarchicalClassifier

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
        class; :meth:`predict_proba` gives each class's probability of lying on the sample's
        path, and :meth:`predict` keeps only the deepest classes at the threshold (none of
        whose children reaches it).
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

    _trains_from_datasets = False  # fit reads label sets from y; a torch Dataset yields one label per item

    _parameter_constraints: dict = {
        **HierarchicalClassifier._parameter_constraints,
        "tree": [Tree, Dag, UnrolledDag],
        "partition": [StrOptions({"auto", "sibling"})],
    }

    # ------------------------------------------------------------------ fitting
    def _resolve_tree(self, y: Any, classes: Any = None) -> tuple[Tree, Any]:
        hierarchy = self.tree
        if isinstance(hierarchy, UnrolledDag):
            self.unrolled_ = hierarchy
        else:
            dag = Dag.from_tree(hierarchy) if isinstance(hierarchy, Tree) else hierarchy
            self.unrolled_ = dag.unroll()
        self.hierarchy_ = self.unrolled_.dag
        self._source_hierarchy = hierarchy  # what `tree` was at fit, to tell a change when continuing
        tree = self.unrolled_.tree
        pad = default_pad_label(tree.labels) if self.pad_label is None else self.pad_label
        return tree, pad

    def _fitted_hierarchy(self) -> Any:
        return self._source_hierarchy

    def _encode_y(self, X: Any, y: Any) -> np.ndarray:
        """``(n_pairs, 2)`` int64: (row of X, DAG node id) for every label of every sample."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        dag = self.hierarchy_
        indicator, form = read_label_sets(y, dag.n_nodes, dag.to_ids)
        check_consistent_length(X, indicator)
        if indicator.nnz == 0:
            raise ValueError("y holds no label at all: every sample's label set is empty")
        if not hasattr(self, "net_"):  # a new fit; continuing keeps the first fit's form
            self.label_form_ = form
        coo = indicator.tocoo()  # the reader's CSR is canonical: pairs come sorted by row, then node
        pairs = np.stack([coo.row, coo.col], axis=1).astype(np.int64)
        self.n_pairs_ = int(pairs.shape[0])
        return pairs

    def _check_targets(self, ids: np.ndarray) -> None:
        # the first copy of each label stands for it: copies share depth and leafness
        suggest_terminal(self, self.unrolled_.copy_offsets[ids[:, 1]])

    def _dataset(self, X: Any, ids: np.ndarray | None = None) -> TreeDataset:
        sparse = getattr(self.module_class_, "accepts_sparse", False)
        if ids is None:
            return TreeDataset(X, None, sparse_batches=sparse)
        return TreeDataset(X, np.ascontiguousarray(ids[:, 1]), sparse_batches=sparse,
                           rows=np.ascontiguousarray(ids[:, 0]))

    def _resolve_partition(self, module: type[torch.nn.Module]) -> str:
        return "sibling"

    def _resolve_model(self, X: Any) -> int | None:
        seed = super()._resolve_model(X)
        self.classes_ = self.hierarchy_.labels
        return seed

    def _node_rows(self) -> np.ndarray:
        # every copy of a DAG class reads the class's row (of class_features, of classes_)
        return self.unrolled_.origin

    def _criterion_params(self) -> dict[str, Any]:
        from ..losses import DagCrossEntropy

        params = {"criterion": DagCrossEntropy, "criterion__unrolled": self.unrolled_,
                  "criterion__partition": "sibling"}
        if self.path_local_:  # the in-batch level term, with a label's copies as its positives
            params["criterion__level_contrast"] = LEVEL_CONTRAST
        return params

    # ------------------------------------------------------------------ prediction
    def _node_labels(self) -> np.ndarray:
        """Original labels of the unrolled tree's nodes: paths come back through the DAG."""
        return self.hierarchy_.labels[self.unrolled_.origin]

    def _node_proba(self, scores: torch.Tensor) -> torch.Tensor:
        """``(B, n_classes)`` probabilities of the hierarchy's classes from the unrolled scores:
        each copy's path probability (``node_log_probs``), summed over a class's copies."""
        from ..ops.groups import node_log_probs

        kwargs = self._decode_kwargs()
        proba = torch.exp(node_log_probs(scores, self.tree_, **kwargs))
        origin = torch.tensor(self.unrolled_.origin, device=scores.device)  # a copy: origin is read-only
        out = torch.zeros(scores.shape[0], self.hierarchy_.n_nodes, dtype=proba.dtype, device=proba.device)
        return out.index_add_(1, origin, proba)

    def _select(self, proba: torch.Tensor) -> torch.Tensor:
        """``(B, k)`` node ids of each row's predicted labels, best first, ``-1`` pads.

        The ``top_k`` most probable candidates at ``threshold`` and always the best one;
        under partial semantics the candidates are the classes at the threshold none of whose
        children is, so an ancestor of a predicted label is implied, not repeated."""
        k = min(int(self.top_k), proba.shape[1])
        candidate = proba
        if self.semantics == "partial":
            child, parent = self.hierarchy_.edges()
            child_t = torch.tensor(child, device=proba.device)  # copies: the DAG's arrays are read-only
            parent_t = torch.tensor(parent, device=proba.device)
            above = (proba >= self.threshold).to(proba.dtype)
            covered = torch.zeros_like(proba).index_add_(1, parent_t, above.index_select(1, child_t))
            candidate = torch.where(covered > 0, torch.full_like(proba, -1.0), proba)  # below any threshold
        value, node = torch.topk(torch.nan_to_num(candidate, nan=-1.0), k, dim=1)
        keep = value >= self.threshold
        best = torch.nan_to_num(proba, nan=-1.0).argmax(1)
        node[:, 0] = torch.where(keep[:, 0], node[:, 0], best)
        keep[:, 0] = True
        keep &= ~torch.isnan(proba).any(1, keepdim=True)  # NaN/+inf scores: no label
        return torch.where(keep, node, torch.full_like(node, -1))

    def _predict_indicator(self, X: Any) -> sp.csr_matrix:
        (chosen,) = self._per_batch(X, lambda s: self._select(self._node_proba(s)))
        n_bad = int((chosen[:, 0] < 0).sum())
        warn_undecidable(n_bad, chosen.shape[0])
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
        row sums to 1 over the classes). Under ``"partial"``: the probability that the
        sample's path passes through the class (an ancestor's is at least its descendants').
        A class of a DAG adds the probabilities of its copies (disjoint events).

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
        from ..metrics import hierarchical_f1_score_dag

        check_is_fitted(self)
        pred = self._predict_indicator(X)
        return float(hierarchical_f1_score_dag(y, pred, self.hierarchy_, sample_weight=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        tags.target_tags.multi_output = True
        return tags
